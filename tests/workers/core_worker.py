"""A checkpointed GA-shaped worker for process-death tests.

usage: core_worker.py STORE GENERATIONS SLEEP_SECONDS EVERY
Prints "done N" after each yield and "RESULT <float.hex()>" at the end.
"""

from __future__ import annotations

import logging
import random
import sys
import time
from typing import Any

import numpy as np

from resumable import checkpointed

logging.basicConfig(level=logging.INFO, stream=sys.stderr)  # resume logs, for the tests
store, generations, pause, every = sys.argv[1], int(sys.argv[2]), float(sys.argv[3]), sys.argv[4]
# Every process seeds alike, as a program's main would: a resumed process would then
# replay the first generations' random numbers unless the library restores the RNGs.
random.seed(42)
np.random.seed(42)


@checkpointed(store=store, every=int(every) if every.isdigit() else every, run_id="worker")
def evolve(generations: int, *, state: Any = None) -> Any:
    if state is None:
        state = {"generation": 0, "population": np.zeros(64), "trace": []}
    while state["generation"] < generations:
        state["population"] += np.random.normal(size=64)
        time.sleep(pause)
        state["trace"].append(float(state["population"].sum()) + random.random())
        state["generation"] += 1
        yield state
        print("done", state["generation"], flush=True)
    return sum(state["trace"])


if __name__ == "__main__":
    print("RESULT", float(evolve(generations)).hex(), flush=True)
