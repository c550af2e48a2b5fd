"""Capture and restore the global RNGs (``random`` and numpy's legacy global RandomState)."""

from __future__ import annotations

import random
import sys
from typing import Any

RngState = dict[str, Any]


def capture() -> RngState:
    state: RngState = {"random": random.getstate()}
    np = sys.modules.get("numpy")
    if np is not None:
        state["numpy"] = np.random.get_state()
    return state


def restore(state: RngState) -> None:
    if "random" in state:
        random.setstate(state["random"])
    if "numpy" in state:
        import numpy as np

        np.random.set_state(state["numpy"])
