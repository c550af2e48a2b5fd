"""numpy, if this process uses it: never imported here, and never half imported."""

from __future__ import annotations

import sys
import types


def loaded() -> types.ModuleType | None:
    """numpy once this process has imported it, else None (resumable does not import it).

    Not ``sys.modules.get("numpy")`` alone: while another thread imports numpy for the
    first time (~0.2 s), that is a module without most of its names yet. The import
    statement waits for that import to finish. Something else than a module there (a
    mock, None to block it) is not numpy.
    """
    if sys.modules.get("numpy") is None:
        return None
    try:
        import numpy
    except Exception:  # a broken numpy: the callers do without it
        return None
    return numpy if isinstance(numpy, types.ModuleType) else None
