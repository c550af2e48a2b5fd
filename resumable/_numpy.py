"""numpy, if this process uses it: never imported here, and never half imported."""

from __future__ import annotations

import sys
import types

_ready: types.ModuleType | None = None  # the module last found fully loaded


def loaded() -> types.ModuleType | None:
    """numpy once this process has imported it, else None (resumable does not import it).

    Not ``sys.modules.get("numpy")`` alone: while a thread imports numpy for the first
    time (~0.2 s), that is a module without most of its names yet. Nor is that import
    waited for: in a process forked meanwhile (multiprocessing's default start on
    Linux), the importing thread is gone and the import never finishes. Until it has,
    numpy is not loaded: no numpy generator can exist yet to be captured, and copies are
    made without it. Something else than numpy there (None to block it, a mock or a
    module of mocks, as documentation builds install) is not numpy either.
    """
    global _ready
    numpy = sys.modules.get("numpy")
    if numpy is _ready and numpy is not None:
        return numpy  # (checked once: a module whose import ended stays imported)
    if not isinstance(numpy, types.ModuleType):
        return None
    if getattr(getattr(numpy, "__spec__", None), "_initializing", False):
        return None  # set by importlib for the time the module's code runs
    if not isinstance(getattr(numpy, "ndarray", None), type):
        return None
    _ready = numpy
    return numpy
