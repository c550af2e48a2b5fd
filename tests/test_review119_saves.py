"""Review 119's D7: with every=n, a last yield that was due but skipped (the previous save
of a large state still uploaded) is not saved at the return, and the log said it was
"not due"."""

from __future__ import annotations

import logging
import threading
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from resumable import checkpointed
from resumable.stores._local import LocalStore


class Gated(LocalStore):
    """Checkpoint writes wait for ``gate``: the first save stays under way."""

    def __init__(self, root: str, gate: threading.Event) -> None:
        super().__init__(root)
        self.gate = gate

    def put(self, key: str, data: Any) -> None:
        if "/ckpt-" in key:
            assert self.gate.wait(60)
        super().put(key, data)


def test_a_due_last_yield_skipped_while_a_save_uploads_is_named_so(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    gate = threading.Event()

    @checkpointed(store=Gated(str(tmp_path), gate), every=2, run_id="r")
    def f(gens: int, *, state: Any = None) -> Any:
        state = state or {"g": 0, "a": np.zeros(1 << 18)}  # 2 MiB: not copied twice
        while state["g"] < gens:
            state["g"] += 1
            state["a"] += 1
            yield state
        gate.set()  # (the save of step 2 ends once the body is done)
        return state["g"]

    with caplog.at_level(logging.INFO, logger="resumable"):
        assert f(4) == 4
    lines = [r.getMessage() for r in caplog.records if "its last" in r.getMessage()]
    assert len(lines) == 1, lines
    assert "step 4, its last, was due, but not snapshotted while the previous save" in lines[0]
    assert "saved as a final checkpoint" in lines[0]
    assert "the newest checkpoint a resume starts from is of step 2" in lines[0]
    latest = f.latest(4)  # the final state, saved at the return as the body left it
    assert latest is not None and latest.step == 4 and latest.final
