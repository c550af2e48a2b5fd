"""A fast loop of a small state: each yield refills the snapshot whose save still waits
(``Uploader.replace_waiting``) instead of handing in a new one. Every checkpoint written
must still be one yield's state with that yield's RNG state, never a mix of two."""

from __future__ import annotations

import os
import random
import uuid
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from resumable import checkpointed
from resumable._run import Run
from resumable._uploader import Uploader
from resumable.stores import open_store

GENERATIONS = 3000


def _trace(*, state: dict[str, Any] | None = None) -> Any:
    if state is None:
        state = {"generation": 0, "draw": 0.0, "np": 0.0}
    while state["generation"] < GENERATIONS:
        state = {"generation": state["generation"] + 1, "draw": random.random(),
                 "np": float(np.random.random())}
        yield state
    return state["generation"]


def _reference() -> list[dict[str, Any]]:
    random.seed(7)
    np.random.seed(7)
    return [dict(s) for s in _trace()]


@pytest.mark.parametrize("where", ["memory", "folder"])
def test_every_checkpoint_of_a_fast_small_loop_is_one_yields_state_and_rng(
        where: str, tmp_path: Path) -> None:
    reference = _reference()
    url = f"memory://refill-{uuid.uuid4().hex[:8]}" if where == "memory" else str(tmp_path)
    refills = []
    original = Uploader.replace_waiting

    def counting(self: Uploader, *args: Any) -> bool:
        done = original(self, *args)
        refills.append(done)
        return done

    random.seed(7)
    np.random.seed(7)
    f = checkpointed(store=url, run_id="fast", keep=None)(_trace)
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(Uploader, "replace_waiting", counting)
        assert f() == GENERATIONS
    assert any(refills), "no yield refilled a waiting save: the test tests nothing"

    run = Run(open_store(url), "fast")
    names = run.checkpoint_names()
    assert len(names) >= 2
    for name in names:
        ckpt = run._try_load(name, [], True, [])
        assert ckpt is not None, name
        assert ckpt.state == reference[ckpt.step - 1], name
        # The RNG saved with it is the one at that yield: the next draws follow it.
        if ckpt.step < GENERATIONS:
            from resumable import _rng
            _rng.restore(ckpt.rng)
            assert random.random() == reference[ckpt.step]["draw"], name
            assert float(np.random.random()) == reference[ckpt.step]["np"], name


@pytest.mark.parametrize("fork", ["0", "1"], ids=["in-process", "forked-snapshots"])
@pytest.mark.parametrize("size", [0, 1 << 20])
def test_a_finished_call_lets_go_of_its_snapshots_without_the_cycle_collector(
        size: int, fork: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """65e9e35 kept the last save's job on the execution, and the job refers to the
    execution: a cycle, so after the call returned its last snapshot (a copy of the state)
    stayed in memory until the cycle collector ran (review 39: 64 MiB more per call of a
    sweep). Without the collector, nothing of the call may be left once it returns. With
    $RESUMABLE_SNAPSHOT_FORK=1 a forked snapshot's size callback made the same cycle
    (review 40, older than 65e9e35)."""
    if fork == "1" and not hasattr(os, "fork"):
        pytest.skip("needs os.fork")
    monkeypatch.setenv("RESUMABLE_SNAPSHOT_FORK", fork)
    import gc
    import weakref

    from resumable import _decorator

    executions: list[weakref.ref[Any]] = []
    original = _decorator._Execution.__init__

    def recording(self: Any, *args: Any, **kwargs: Any) -> None:
        original(self, *args, **kwargs)
        executions.append(weakref.ref(self))

    def body(*, state: Any = None) -> Any:
        state = state or {"g": 0, "x": np.zeros(size, dtype=np.uint8)}
        while state["g"] < 50:
            state["g"] += 1
            yield state
        return state["g"]

    f = checkpointed(store=f"memory://refill-{uuid.uuid4().hex[:8]}", run_id="r")(body)
    gc.collect()
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(_decorator._Execution, "__init__", recording)
        gc.disable()
        try:
            assert f() == 50
            assert len(executions) == 1
            assert executions[0]() is None, "the call's execution outlived it"
        finally:
            gc.enable()
