"""A newer large state waits for the upload in a file ($RESUMABLE_SPILL_DIR), not as a
second copy in memory: what it costs in correctness (nothing: each checkpoint, the state
an exception leaves, a restart) and how it fails (a full disk, a bad folder, tmpfs).

The memory itself is checked in test_in_place (tracemalloc's peak with and without).
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import subprocess
import sys
import textwrap
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from resumable import ConfigurationError, StoreError, checkpointed
from resumable._run import Run
from resumable._spill import SpillFile, _fs_type
from resumable.stores import open_store
from tests.procfiles import open_fds_in
from tests.wrappers import DelegatingStore

SIZE = 4 * 2**20  # over the 1 MiB below which states are copied in memory anyway


def _open_files_in(folder: Path) -> int:
    """How many files this process has open in ``folder``."""
    return len(open_fds_in(folder))


class HeldFirstSave(DelegatingStore):
    """The first checkpoint's put waits until the body has yielded ``until`` more states
    (each spilled, as the upload is busy); how many files were open in the spill folder
    meanwhile is recorded."""

    def __init__(self, inner: Any, spill_dir: Path, yielded: list[int], until: int) -> None:
        super().__init__(inner)
        self.spill_dir = spill_dir
        self.yielded = yielded
        self.until = until
        self.moved = threading.Condition()
        self.started = threading.Event()  # the first checkpoint's put has begun
        self.first: int | None = None
        self.open_while_held = 0

    def put(self, key: str, data: Any) -> None:
        if "/ckpt-" in key and self.first is None:
            self.first = int(key[-12:])
            self.started.set()
            with self.moved:
                self.moved.wait_for(lambda: self.yielded[-1] >= self.first + self.until)
            self.open_while_held = _open_files_in(self.spill_dir)
        super().put(key, data)

    def note(self, step: int) -> None:
        """Called by the body after each yield; after the first it waits for the first
        checkpoint's put to begin (so that the body cannot run past where it looks)."""
        with self.moved:
            self.yielded.append(step)
            self.moved.notify_all()
        self.started.wait()


def _held_store(monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
                until: int) -> tuple[HeldFirstSave, Path]:
    """A local store whose first checkpoint is held (HeldFirstSave), and the spill folder
    set in $RESUMABLE_SPILL_DIR."""
    spill_dir = tmp_path / "spill"
    spill_dir.mkdir()
    monkeypatch.setenv("RESUMABLE_SPILL_DIR", str(spill_dir))
    return HeldFirstSave(open_store(tmp_path / "store"), spill_dir, [-1], until), spill_dir


def _state(i: int) -> dict[str, Any]:
    return {"i": i, "array": np.full(SIZE // 8, float(i))}


def _checkpoints(store_dir: Path, run_id: str) -> dict[int, dict[str, Any]]:
    run = Run(open_store(store_dir), run_id)
    out = {}
    for name in run.checkpoint_names():
        state = run._to_checkpoint(name, run._decode(name, run.store.get(run.key(name)), "ckpt"),
                                   True).state
        out[int(name[-12:])] = state
    return out


def test_the_state_an_exception_leaves_is_saved_from_the_file(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """The first save is held while the body yields three more states, each of which
    waits in the spill file; then the body raises. The state of its last yield is saved
    (read back from the file), bit for bit, and the file is gone when the call ends."""
    store, spill_dir = _held_store(monkeypatch, tmp_path, until=3)

    raised_at: list[int] = []

    @checkpointed(store=store, run_id="raises", every="generation", keep=None)
    def body(*, state: Any = None) -> Any:
        state = state if state is not None else _state(0)
        while True:
            state = _state(state["i"] + 1)
            yield state
            store.note(state["i"])
            if store.first is not None and state["i"] >= store.first + 3:
                raised_at.append(state["i"])
                raise RuntimeError("generation failed")

    with pytest.raises(RuntimeError, match="generation failed"):
        body()
    assert store.open_while_held == 1, "the newer states did not wait in the spill file"
    assert _open_files_in(spill_dir) == 0
    assert list(spill_dir.iterdir()) == []
    saved = _checkpoints(tmp_path / "store", "raises")
    assert max(saved) == raised_at[0], (sorted(saved), raised_at)
    for step, state in saved.items():
        assert state["i"] == step
        assert np.array_equal(state["array"], np.full(SIZE // 8, float(step)))


def test_a_restart_in_process_resumes_from_the_spilled_state(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """restarts=1: the generation after three spilled yields fails once; the restart
    resumes from the last yielded state (in the file, then read back), and the result is
    the uninterrupted one."""
    store, _ = _held_store(monkeypatch, tmp_path, until=3)
    failed: list[int] = []
    resumed_from: list[int] = []

    @checkpointed(store=store, run_id="restarts", every="generation", keep=None, restarts=1)
    def body(*, state: Any = None) -> Any:
        if state is not None:
            resumed_from.append(state["i"])
        state = state if state is not None else _state(0)
        while state["i"] < 40:
            if store.first is not None and state["i"] >= store.first + 3 and not failed:
                failed.append(state["i"])
                raise RuntimeError("generation failed once")
            state = _state(state["i"] + 1)
            state["array"][::7] += state["array"][1::7]  # something to get wrong
            yield state
            store.note(state["i"])
        return float(state["array"].sum())

    result = body()
    expected = _state(40)
    expected["array"][::7] += expected["array"][1::7]
    assert result == float(expected["array"].sum())
    assert store.open_while_held == 1
    assert failed == resumed_from and failed[0] >= store.first + 3


def test_a_spill_that_fails_falls_back_to_a_copy_in_memory(tmp_path: Path) -> None:
    """A real write failure: the process may not write files over 1 MiB (RLIMIT_FSIZE,
    EFBIG), so the spill of a 4 MiB state fails. The run warns once, names the folder
    and what to do, keeps the newer state in memory, and saves every state right."""
    spill_dir = tmp_path / "spill"
    spill_dir.mkdir()
    script = textwrap.dedent(f"""
        import json, resource, signal, threading
        import numpy as np
        from resumable import checkpointed
        from tests.wrappers import DelegatingStore
        from resumable.stores import open_store

        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # EFBIG, not a killed process
        resource.setrlimit(resource.RLIMIT_FSIZE, (2**20, 2**20))
        yielded, moved, first = [-1], threading.Condition(), []

        class Held(DelegatingStore):
            def put(self, key, data):
                if "/ckpt-" in key and not first:
                    first.append(int(key[-12:]))
                    with moved:
                        moved.wait_for(lambda: yielded[-1] >= first[0] + 2)
                super().put(key, data)

        store = Held(open_store("memory://spill-fails"))

        @checkpointed(store=store, run_id="r", every="generation", keep=None)
        def body(*, state=None):
            state = state if state is not None else {{"i": 0}}
            while state["i"] < 6:
                state = {{"i": state["i"] + 1, "a": np.full({SIZE // 8}, float(state["i"] + 1))}}
                yield state
                with moved:
                    yielded.append(state["i"])
                    moved.notify_all()
            return state["i"]

        assert body() == 6
        from resumable._run import Run
        run = Run(store, "r")
        steps = []
        for name in run.checkpoint_names():
            st = run._to_checkpoint(name, run._decode(name, run.store.get(run.key(name)),
                                                      "ckpt"), True).state
            assert st["i"] == int(name[-12:]) and float(st["a"][-1]) == st["i"]
            steps.append(st["i"])
        print(json.dumps(steps))
    """)
    env = {**os.environ, "RESUMABLE_SPILL_DIR": str(spill_dir),
           "PYTHONPATH": os.pathsep.join([str(Path(__file__).resolve().parents[1]),
                                          os.environ.get("PYTHONPATH", "")])}
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          env=env, timeout=120)
    assert proc.returncode == 0, proc.stderr
    steps = json.loads(proc.stdout.strip().splitlines()[-1])
    assert steps and steps[-1] == 6, steps
    warnings = [line for line in proc.stderr.splitlines() if "could not write the state" in line]
    assert len(warnings) == 1, proc.stderr
    assert str(spill_dir) in warnings[0] and "RESUMABLE_SPILL_DIR" in warnings[0]
    assert "File too large" in warnings[0]
    assert list(spill_dir.iterdir()) == []


@pytest.mark.parametrize("value, why", [("missing", "no such folder"),
                                        ("a-file", "not a folder")])
def test_a_bad_spill_folder_is_a_configuration_error_naming_the_variable(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, value: str, why: str
) -> None:
    (tmp_path / "a-file").write_text("x")
    monkeypatch.setenv("RESUMABLE_SPILL_DIR", str(tmp_path / value))

    @checkpointed(store=str(tmp_path / "store"), run_id="bad-spill")
    def body(*, state: Any = None) -> Any:
        yield 1
        return 1

    with pytest.raises(ConfigurationError) as info:
        body()
    text = str(info.value)
    assert "$RESUMABLE_SPILL_DIR=" in text and str(tmp_path / value) in text
    assert why in text and "or off" in text
    assert not (tmp_path / "store").exists() or not any((tmp_path / "store").rglob("ckpt-*"))


@pytest.mark.skipif(_fs_type("/dev/shm") != "tmpfs", reason="needs /dev/shm on tmpfs")
def test_a_spill_folder_in_memory_is_not_used(caplog: pytest.LogCaptureFixture) -> None:
    """On tmpfs a spilled state is memory all the same (and cannot be written out)."""
    with caplog.at_level(logging.INFO, logger="resumable"):
        spill = SpillFile("/dev/shm", "memory://x r")
        assert not spill.usable  # looked at when first asked (the first spill)
    assert "is in memory (tmpfs)" in caplog.text


def test_a_spill_file_that_cannot_be_read_back_is_a_store_error_naming_it(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """The waiting state's file is cut short while the save before it is held (as a
    failing disk would lose it): its upload fails with a StoreError (exit 74: a new pod
    resumes) that names the step, the folder and what to do; the checkpoint already
    stored is untouched."""
    spill_dir = tmp_path / "spill"
    spill_dir.mkdir()
    monkeypatch.setenv("RESUMABLE_SPILL_DIR", str(spill_dir))
    yielded = [-1]

    class CutsTheFile(HeldFirstSave):
        def put(self, key: str, data: Any) -> None:
            if "/ckpt-" in key and self.first is None:
                self.first = int(key[-12:])
                self.started.set()
                with self.moved:
                    self.moved.wait_for(lambda: self.yielded[-1] >= self.first + 3)
                for fd in os.listdir("/proc/self/fd"):
                    with contextlib.suppress(OSError):
                        if os.readlink(f"/proc/self/fd/{fd}").startswith(str(spill_dir)):
                            os.truncate(f"/proc/self/fd/{fd}", 0)
            super().put(key, data)

    store = CutsTheFile(open_store(tmp_path / "store"), spill_dir, yielded, until=3)

    @checkpointed(store=store, run_id="cut", every="generation", keep=None)
    def body(*, state: Any = None) -> Any:
        state = state if state is not None else _state(0)
        while store.first is None or state["i"] < store.first + 3:
            state = _state(state["i"] + 1)
            yield state
            store.note(state["i"])
        return state["i"]

    with pytest.raises(StoreError) as info:
        body()
    text = str(info.value)
    assert f"could not read the state of step {store.first + 3} back" in text, text
    assert str(spill_dir) in text and "RESUMABLE_SPILL_DIR" in text
    saved = _checkpoints(tmp_path / "store", "cut")
    assert store.first in saved and store.first + 3 not in saved, sorted(saved)
    for step, state in saved.items():
        assert np.array_equal(state["array"], np.full(SIZE // 8, float(step)))


def test_a_snapshot_whose_read_back_failed_leaves_the_pool_its_buffers(tmp_path: Path) -> None:
    """The pool keeps the buffers of the last copy for the next one; a spilled snapshot
    whose file could not be read back gives nothing back, and must not make the pool
    drop what it keeps (the next copy would be fresh memory)."""
    from resumable._run import BufferPool, Snapshot

    pool = BufferPool()
    kept = pool.take(SIZE)
    pool.give_back([b"", b"stream", kept])
    spill = SpillFile(str(tmp_path), "test")
    frames = [b"stream", memoryview(np.ones(SIZE // 8)).cast("B")]
    spilled = spill.spill(1, frames, SIZE)
    assert spilled is not None
    snap = Snapshot(step=1, frames=[b""], created=0.0, pool=pool, forked=spilled, size=SIZE)
    os.truncate(f"/proc/self/fd/{spilled.slot.fd}", 0)
    # its buffer comes from the pool, so give the pool a second one to lend
    pool.give_back([b"", b"stream", bytearray(SIZE), kept])
    with pytest.raises(StoreError):
        snap.materialize()
    snap.release()
    assert len(pool._free.get(SIZE, [])) == 1, pool._free  # the one not lent is kept
    spill.close()


def test_a_yield_while_the_upload_rests_replaces_the_waiting_save_in_memory(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """After a save the upload thread rests ($RESUMABLE_UPLOAD_DUTY), with the newest
    state waiting. A newer yield then goes into the waiting save's buffers (which it
    replaces): no spill file is opened, which costs the loop a write into the page cache
    (twice a memory copy) and the upload a read back. The state an exception leaves is
    still the last yielded one, and it is saved."""
    from resumable import _uploader

    spill_dir = tmp_path / "spill"
    spill_dir.mkdir()
    monkeypatch.setenv("RESUMABLE_SPILL_DIR", str(spill_dir))
    monkeypatch.setenv("RESUMABLE_UPLOAD_DUTY", "0.000001")  # rests 10^6 times a save
    uploaders: list[_uploader.Uploader] = []
    made = _uploader.Uploader.__init__

    def recorded(self: _uploader.Uploader, *args: Any, **kwargs: Any) -> None:
        made(self, *args, **kwargs)
        uploaders.append(self)

    monkeypatch.setattr(_uploader.Uploader, "__init__", recorded)
    open_while_resting: list[int] = []

    @checkpointed(store=str(tmp_path / "store"), run_id="rests", every="generation",
                  keep=None)
    def body(*, state: Any = None) -> Any:
        for i in range(1, 6):
            state = _state(i)
            yield state
            if i == 1:  # wait for the first save to end: the thread rests from then on
                up = uploaders[-1]
                with up._cond:
                    assert up._cond.wait_for(
                        lambda up=up: not up._busy and up._waiting is None, timeout=120)
            elif i >= 3:  # a save (the one before) waits while the thread rests
                open_while_resting.append(_open_files_in(spill_dir))
        raise RuntimeError("generation failed")

    with pytest.raises(RuntimeError, match="generation failed"):
        body()
    assert open_while_resting == [0, 0, 0], "states waited in the spill file"
    saved = _checkpoints(tmp_path / "store", "rests")
    assert sorted(saved) == [1, 5], sorted(saved)  # the first, and the exception's
    for step, state in saved.items():
        assert state["i"] == step
        assert np.array_equal(state["array"], np.full(SIZE // 8, float(step)))


def test_a_held_save_waits_for_its_release_but_not_a_flush() -> None:
    """Uploader.hold_resting: only a save that waits while none runs is held; one held
    is dropped by the loop or runs once released, and a flush (wait_idle) runs it
    anyway, so an exit cannot hang on a hold."""
    from resumable._uploader import Uploader

    up = Uploader("held", duty=0.000001)
    ran: list[str] = []
    gate = threading.Event()
    try:
        assert not up.hold_resting(), "nothing waits"
        started = threading.Event()
        up.submit(lambda: (started.set(), gate.wait(60), ran.append("first")))
        assert started.wait(60)
        up.submit(lambda: ran.append("second"))  # waits behind the running one
        assert not up.hold_resting(), "a save runs: nothing to hold it against"
        gate.set()
        up.wait_idle()
        assert ran == ["first", "second"]
        up.submit(lambda: ran.append("third"),  # waits: the thread rests after a save
                  on_drop=lambda: ran.append("third dropped"))
        assert up.hold_resting()
        assert up.drop_waiting(), "a held save is the loop's to take back"
        up.release_hold()
        up.submit(lambda: ran.append("fourth"))
        assert up.hold_resting()
        flushed = threading.Thread(target=up.wait_idle)
        flushed.start()
        flushed.join(60)
        assert not flushed.is_alive(), "wait_idle hung on a held save"
        assert ran == ["first", "second", "third dropped", "fourth"]
        up.release_hold()
    finally:
        gate.set()
        up.close()


@contextlib.contextmanager
def _a_save_waits_after_the_rest(name: str) -> Iterator[tuple[Any, threading.Event]]:
    """An uploader whose thread has ended a save and rested (held meanwhile, so that it
    cannot start the next), with a second save waiting; and that save's event, set when
    it runs."""
    import time

    from resumable._uploader import Uploader

    up = Uploader(name, duty=0.5)  # rests as long as the save took
    gate = threading.Event()
    second = threading.Event()
    try:
        started = threading.Event()
        up.submit(lambda: (started.set(), gate.wait(60)))
        assert started.wait(60)
        up.submit(second.set)  # waits behind the running one
        gate.set()
        up.wait_not_busy()  # the first has ended: the thread rests, or has started again
        if up.hold_resting():  # still resting: held until that rest is over
            rest_over = threading.Event()
            while time.monotonic() <= up._not_before:
                rest_over.wait(up._not_before - time.monotonic())
            up.release_hold()
        yield up, second
    finally:
        gate.set()
        up.release_hold()
        up.close()


def test_a_save_whose_rest_is_over_is_not_held() -> None:
    """Once the thread's rest is over it is free to start the save that waits, and a
    hold would keep it from that: a loop that yields faster than the upload thread gets
    the GIL back held every save it would have started, and none started at all."""
    with _a_save_waits_after_the_rest("rest over") as (up, second):
        assert not up.hold_resting(), "a save the thread is free to start was held"
        assert second.wait(60), "the waiting save never started"


def test_a_save_waiting_is_taken_back_after_the_newer_state_is_in_its_file(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """The loop spills a newer state while a save waits: with no save running, that
    save is taken back (make_room) only once the newer state is written, so an upload
    thread free to start it can while the write lets go of the GIL (taken back first, a
    fast loop of a large state left the thread nothing to start, and no save started
    while the loop ran). With a save running it is taken back first (its file is then
    free: one file, not two), and so it is when both files are taken."""
    from resumable import _spill
    from resumable._decorator import _RoomMakingPool

    events: list[str] = []
    write = _spill._write_frames

    def writing(fd: int, frames: Any) -> tuple[list[int], list[tuple[int, int, int]]]:
        events.append("write")
        return write(fd, frames)

    monkeypatch.setattr(_spill, "_write_frames", writing)
    run = Run(open_store(tmp_path / "store"), "order")
    spill = SpillFile(str(tmp_path), "test")
    pool = _RoomMakingPool()
    snaps = []

    def snapshot(i: int, room_first: bool, make_room: Any = None) -> list[str]:
        events.clear()
        pool.make_room = make_room or (lambda: events.append("room") or True)
        pool.loop = threading.get_ident()
        snaps.append(run.snapshot(_state(i), i, None, pool, spill=spill,
                                  room_first=room_first))
        assert snaps[-1].forked is not None, "not spilled"
        return events[:]

    try:
        assert snapshot(1, room_first=False) == ["write", "room"]
        assert snapshot(2, room_first=True) == ["room", "write"]
        # both files held (1 and 2): the waiting one (2) is let go of first, for its file
        assert snapshot(3, room_first=False, make_room=lambda: (
            events.append("room"), snaps[1].forked.cancel())) == ["room", "write"]
        assert snaps[2].forked.slot is snaps[1].forked.slot
        read = snaps[2].forked.collect(None)  # [pickle stream, the array's buffer]
        assert np.array_equal(np.frombuffer(read[1], "<f8"), np.full(SIZE // 8, 3.0))
    finally:
        spill.close()


def test_a_loop_lets_a_free_upload_thread_start_the_waiting_save_first() -> None:
    """Uploader.let_start: with the thread free to start the save that waits (none runs,
    the rest is over), the loop waits until it has, letting go of the GIL, before it
    takes that save back for a newer state. A loop that held the GIL from one yield to
    the next took every save back before the thread could start it (with the spill file
    off, on tmpfs, or with one copy allowed: 1 save in 1,500 yields of a 32 MiB state)."""
    with _a_save_waits_after_the_rest("let start") as (up, second):
        up.let_start(timeout=60)
        assert not up.drop_waiting(), "the waiting save was still there to take back"
        assert second.wait(60)


def test_a_snapshot_copy_lets_go_of_the_gil() -> None:
    """A large frame is copied without the GIL (numpy's copy, not a memoryview's): the
    upload thread, which needs the GIL back after each write, gets it while the loop
    copies. With the switch interval set very long, another thread can run only where
    this one lets go of the GIL: here, only inside copy_frames."""
    from resumable.serializers import copy_frames

    raw = memoryview(np.ones(SIZE // 8)).cast("B")
    dst = bytearray(SIZE)
    go = threading.Event()
    ran: list[bool] = []

    def other() -> None:
        go.wait()
        ran.append(True)

    helper = threading.Thread(target=other)
    helper.start()
    interval = sys.getswitchinterval()
    sys.setswitchinterval(1000.0)
    try:
        go.set()  # the helper needs the GIL to return from its wait
        for _ in range(2000):  # each copy is a window without the GIL; one is enough
            copy_frames([b"", raw], lambda n: dst)
            if ran:
                break
        saw = bool(ran)
    finally:
        sys.setswitchinterval(interval)
        helper.join(60)
    assert saw, "no other thread ran during 2,000 copies of 4 MiB"
    assert bytes(dst) == bytes(raw)
