"""How tests/data/v1-store was made, with format version 1 (commit 4e2f920, before v2).

    python tests/data/make_v1_store.py tests/data/v1-store

Re-running it after the format changed writes version-2 objects; it is kept as a record.
"""

from __future__ import annotations

import contextlib
import shutil
import sys
from pathlib import Path
from typing import Any

import numpy as np

from resumable import checkpointed


class Stop(Exception):
    pass


def main(out: Path) -> None:
    shutil.rmtree(out, ignore_errors=True)

    @checkpointed(store=str(out), run_id="v1-run", keep=None, capture_rng=False)
    def grow(*, state: Any = None) -> Any:
        if state is None:
            state = {"generation": 0, "x": np.zeros(1001),
                     "f": np.asfortranarray(np.ones((7, 5), dtype=np.int32))}
        while True:
            state["generation"] += 1
            state["x"] = state["x"] + np.arange(1001) * 0.25
            state["f"] *= 2
            if state["generation"] == 3:
                raise Stop
            yield state

    with contextlib.suppress(Stop):
        grow()
    print(sorted(p.name for p in (out / "v1-run").iterdir()))


if __name__ == "__main__":
    main(Path(sys.argv[1]))
