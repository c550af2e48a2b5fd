"""The cyclic garbage collector is paused while a state is unpickled (resumable._gc), and
left as it was: after a resume, after a load that fails, with two threads loading at once,
in a child forked while another thread loads, and in a program that runs with it off."""

from __future__ import annotations

import gc
import os
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from resumable import checkpointed
from resumable._gc import paused
from resumable.serializers import get_serializer, loads_frames

SEEN: list[bool] = []  # gc.isenabled() as each Probe was unpickled
HOLD: dict[str, threading.Event] = {}  # Probe(name) waits on HOLD[name] while loaded


class Probe:
    """Records whether the collector runs while it is unpickled; may wait, or fail."""

    def __init__(self, name: str = "", fail: bool = False) -> None:
        self.name, self.fail = name, fail

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        SEEN.append(gc.isenabled())
        if self.name in HOLD:
            HOLD[f"{self.name}-in"].set()
            assert HOLD[self.name].wait(60)
        if self.fail:
            raise ValueError("this probe does not load")


@pytest.fixture(autouse=True)
def _collector_enabled() -> Iterator[None]:
    SEEN.clear()
    HOLD.clear()
    gc.enable()
    yield
    gc.enable()


def frames_of(obj: Any) -> list[memoryview]:
    return [memoryview(f) for f in get_serializer("pickle").dumps_frames(obj)]


def body(steps: int, *, state: Any = None) -> Iterator[Any]:
    state = state or {"step": 0, "probe": Probe()}
    while state["step"] < steps:
        state["step"] += 1
        yield state
    return state["step"]


def test_a_resume_loads_with_the_collector_paused_and_enables_it_again(tmp_path: Path) -> None:
    run = checkpointed(store=str(tmp_path))(body)
    it = run.iter(5)
    next(it), next(it)
    it.close()  # (stopped at step 2, as a killed process would be)
    SEEN.clear()
    assert run(5) == 5
    assert SEEN == [False]  # the resume unpickled the state once, the collector paused
    assert gc.isenabled()


def test_a_program_that_runs_with_the_collector_off_keeps_it_off() -> None:
    gc.disable()
    loads_frames(get_serializer("pickle"), frames_of({"p": Probe()}))
    assert SEEN == [False]
    assert not gc.isenabled()


def test_a_load_that_fails_enables_the_collector_again() -> None:
    with pytest.raises(ValueError, match="does not load"):
        loads_frames(get_serializer("cloudpickle"), frames_of(Probe(fail=True)))
    assert SEEN == [False]
    assert gc.isenabled()


def test_two_threads_loading_at_once_keep_it_paused_until_both_are_done() -> None:
    for name in ("a", "b"):
        HOLD[name], HOLD[f"{name}-in"] = threading.Event(), threading.Event()
    threads = [threading.Thread(target=loads_frames,
                                args=(get_serializer("pickle"), frames_of(Probe(name))))
               for name in ("a", "b")]
    for t in threads:
        t.start()
    try:
        assert HOLD["a-in"].wait(60) and HOLD["b-in"].wait(60)
        HOLD["a"].set()
        threads[0].join(60)
        assert not gc.isenabled()  # b still loads
    finally:
        HOLD["a"].set()
        HOLD["b"].set()
        for t in threads:
            t.join(60)
    assert SEEN == [False, False]
    assert gc.isenabled()


@pytest.mark.skipif(not hasattr(os, "fork"), reason="fork")
def test_a_child_forked_while_another_thread_loads_has_the_collector_on() -> None:
    HOLD["a"], HOLD["a-in"] = threading.Event(), threading.Event()
    loading = threading.Thread(target=loads_frames,
                               args=(get_serializer("pickle"), frames_of(Probe("a"))))
    loading.start()
    try:
        assert HOLD["a-in"].wait(60)
        assert not gc.isenabled()
        pid = os.fork()
        if pid == 0:  # pragma: no cover - the child
            ok = gc.isenabled()
            with paused():  # (and the pause still works in it)
                ok = ok and not gc.isenabled()
            os._exit(0 if ok and gc.isenabled() else 1)
        _, status = os.waitpid(pid, 0)
        assert os.waitstatus_to_exitcode(status) == 0
    finally:
        HOLD["a"].set()
        loading.join(60)
    assert gc.isenabled()


@pytest.mark.skipif(not hasattr(os, "fork"), reason="fork")
def test_a_child_forked_inside_a_load_ends_it_with_the_collector_on() -> None:
    with paused():
        pid = os.fork()
        if pid == 0:  # pragma: no cover - the child, inside the pause its parent began
            with paused():
                pass
            ok = not gc.isenabled()  # (the outer pause goes on)
    if pid == 0:  # pragma: no cover
        os._exit(0 if ok and gc.isenabled() else 1)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    assert gc.isenabled()
