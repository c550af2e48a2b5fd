"""Review of the spill files (review13): what a spill leaves behind when it is cut short
(a real SIGINT), a relative $RESUMABLE_SPILL_DIR and a body that changes folder, and
fork-pool workers created during the call."""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from resumable import checkpointed
from resumable.stores import open_store
from tests.test_spill import SIZE, HeldFirstSave, _checkpoints, _open_files_in, _state

ROOT = Path(__file__).resolve().parents[1]

# Holds the first checkpoint's put until the body has yielded `until` more states (each
# spilled: the upload is busy); counts this process's (or another's) files in a folder.
_PRELUDE = textwrap.dedent("""
    import signal as _s; _s.signal(_s.SIGINT, _s.default_int_handler)  # (not SIG_IGN)
    import json, os, signal, sys, threading
    import numpy as np
    from resumable import checkpointed
    from resumable.stores import open_store
    from tests.wrappers import DelegatingStore

    def open_in(folder, pid="self"):
        n = 0
        for fd in os.listdir(f"/proc/{pid}/fd"):
            try:
                target = os.readlink(f"/proc/{pid}/fd/{fd}")
            except OSError:
                continue
            n += target.startswith(folder + "/")
        return n

    yielded, moved, first = [-1], threading.Condition(), []
    began = threading.Event()  # the first checkpoint's put has begun (and is held)

    class Held(DelegatingStore):
        def put(self, key, data):
            if "/ckpt-" in key and not first:
                first.append(int(key[-12:]))
                began.set()
                with moved:
                    moved.wait_for(lambda: yielded[-1] >= first[0] + UNTIL, 60)
            super().put(key, data)

    def note(i):
        with moved:
            yielded.append(i)
            moved.notify_all()
""")


def _run(script: str, spill_dir: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "RESUMABLE_SPILL_DIR": str(spill_dir),
           "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    return subprocess.run([sys.executable, "-c", _PRELUDE + textwrap.dedent(script)],
                          capture_output=True, text=True, env=env, timeout=120, cwd=ROOT)


def test_a_sigint_during_the_spill_write_leaves_no_file_open(tmp_path: Path) -> None:
    """Ctrl-C (a real SIGINT, sent as the loop starts writing a state to the spill file)
    ends the call with KeyboardInterrupt; the file being written must be closed with the
    call, not held open (with its blocks on disk) for the rest of the process's life
    (a notebook kernel lives on)."""
    spill_dir = tmp_path / "spill"
    spill_dir.mkdir()
    proc = _run(f"""
        import faulthandler
        import resumable._spill as sp
        faulthandler.dump_traceback_later(90, exit=True)  # a hang shows where, in stderr
        UNTIL = 1

        def profile(frame, event, arg):
            if event == "call" and frame.f_code is sp._pwrite_all.__code__:
                sys.setprofile(None)
                note(2)  # the held save may go on (it runs on after the SIGINT)
                os.kill(os.getpid(), signal.SIGINT)  # during this state's spill

        store = Held(open_store("memory://sigint-spill"))

        @checkpointed(store=store, run_id="r", every="generation", keep=None)
        def body(*, state=None):
            i = 0
            while i < 100:  # the SIGINT comes at i == 2; past that, say what happened
                i += 1
                yield {{"i": i, "a": np.full({SIZE // 8}, float(i))}}
                if i == 1:
                    began.wait(60)  # the first save is held: the next yield spills
                    sys.setprofile(profile)
            return i

        try:
            body()
            print(json.dumps({{"interrupted": False, "yielded": yielded}}))
        except KeyboardInterrupt:
            print(json.dumps({{"interrupted": True, "open": open_in({str(spill_dir)!r})}}))
    """, spill_dir)
    assert proc.returncode == 0, proc.stderr[-5000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert out == {"interrupted": True, "open": 0}, (out, proc.stderr[-5000:])


def test_a_relative_spill_folder_is_the_one_checked_when_the_call_began(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """RESUMABLE_SPILL_DIR=spill, relative to the folder the call starts in; the body
    works in a folder of its own (os.chdir). The states still wait in the folder that
    was checked (not in a `spill` under wherever the body went, which may not exist, or
    be on tmpfs), and nothing falls back to memory."""
    (tmp_path / "work" / "spill").mkdir(parents=True)
    (tmp_path / "elsewhere").mkdir()
    monkeypatch.chdir(tmp_path / "work")
    monkeypatch.setenv("RESUMABLE_SPILL_DIR", "spill")
    spill_dir = tmp_path / "work" / "spill"
    yielded = [-1]
    store = HeldFirstSave(open_store(tmp_path / "store"), spill_dir, yielded, until=2)

    @checkpointed(store=store, run_id="relative", every="generation", keep=None)
    def body(*, state: Any = None) -> Any:
        os.chdir(tmp_path / "elsewhere")
        state = state if state is not None else _state(0)
        while state["i"] < 5:
            state = _state(state["i"] + 1)
            yield state
            store.note(state["i"])
        return state["i"]

    with caplog.at_level(logging.WARNING, logger="resumable"):
        assert body() == 5
    assert "could not write the state" not in caplog.text, caplog.text
    assert store.open_while_held == 1, "the newer states did not wait in the spill folder"
    assert _open_files_in(spill_dir) == 0
    for step, state in _checkpoints(tmp_path / "store", "relative").items():
        assert state["i"] == step and np.array_equal(state["array"],
                                                     np.full(SIZE // 8, float(step)))


def test_fork_pool_workers_do_not_keep_the_spill_files_after_the_call(tmp_path: Path) -> None:
    """A GA's evaluation pool (multiprocessing, fork), created inside the body while
    states wait in the spill files and kept for later calls: once the call has ended,
    its files are gone (README: 'gone when the call ends'), not held open by the
    workers with their blocks on disk for as long as the pool lives."""
    spill_dir = tmp_path / "spill"
    spill_dir.mkdir()
    proc = _run(f"""
        import multiprocessing
        UNTIL = 3
        pool = []
        store = Held(open_store("memory://fork-pool-spill"))

        @checkpointed(store=store, run_id="r", every="generation", keep=None)
        def body(*, state=None):
            i = 0
            while i < 6:
                i += 1
                yield {{"i": i, "a": np.full({SIZE // 8}, float(i))}}
                note(i)
                began.wait(60)  # the first save is held: the next yields are spilled
                if i == first[0] + 2 and not pool:  # states wait in the files
                    assert open_in({str(spill_dir)!r}) >= 1
                    pool.append(multiprocessing.get_context("fork").Pool(2))
            return i

        assert body() == 6
        workers = [p.pid for p in pool[0]._pool]
        print(json.dumps({{"parent": open_in({str(spill_dir)!r}),
                          "workers": [open_in({str(spill_dir)!r}, pid) for pid in workers]}}))
        pool[0].terminate()
    """, spill_dir)
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert out == {"parent": 0, "workers": [0, 0]}, out


_LAST_GOOD = """
import resumable._spill as sp, resumable._uploader as up
from resumable._run import Run, Snapshot
os.environ["RESUMABLE_UPLOAD_DUTY"] = "1"
gate, began, reading, go_on, dropped, either = (threading.Event() for _ in range(6))
class Held(DelegatingStore):
    def put(self, key, data):
        if "/ckpt-" in key and not began.is_set():
            began.set(); gate.wait(60)
        super().put(key, data)
def prof(frame, event, arg):
    if threading.current_thread() is threading.main_thread():
        return
    if event == "call" and frame.f_code is sp._pread_all.__code__ and not reading.is_set():
        reading.set(); go_on.wait(60)   # the upload is reading state 2 back
    if event == "return" and frame.f_code is up.Uploader.drop_waiting.__code__ and arg:
        dropped.set()
        either.set()
    if event == "return" and frame.f_code is Snapshot.materialize.__code__ and reading.is_set():
        either.set()            # state 2 is read back (its buffers taken): no drop came
threading.setprofile(prof)
class Unpicklable:
    def __reduce__(self):
        if not go_on.is_set():  # (the first pickling; the error's search pickles again)
            go_on.set()         # the read-back goes on while this state serializes
            either.wait(60)     # until it has taken its buffers: a drop, or none
        raise TypeError("cannot pickle this")
store = Held(open_store(STORE))
@checkpointed(store=store, run_id="r", every="generation", keep=None)
def body(*, state=None):
    i = 0
    while True:
        i += 1
        s = {"i": i, "a": np.full(524288, float(i)), "b": np.full(524288, float(i))}
        if i == 4:
            s["bad"] = Unpicklable()
        yield s
        if i == 1:
            began.wait(60)      # save 1 is held: state 2 is spilled
        if i == 2:
            gate.set()          # save 1 ends; save 2 starts reading its file back
            reading.wait(60)    # ... and is in the middle of it: state 3 waits for it
try:
    body()
except Exception as err:
    print(type(err).__name__, err)
run = Run(open_store(STORE), "r")
steps = [int(n[-12:]) for n in run.checkpoint_names()]
print(json.dumps({"checkpoints": steps, "dropped_there": dropped.is_set()}))
"""


def test_a_state_that_cannot_be_pickled_after_a_spilled_one_leaves_the_last_good_state_saved(
    tmp_path: Path
) -> None:
    """every="generation": state 2 waits in a file while save 1 runs; save 2 reads it
    back (held in the middle of that read) while state 3 is yielded and waits; state 4
    cannot be pickled. The last good state (3) must be saved. The read-back takes its
    buffers from the pool, whose take ran the loop's make_room on the upload thread while
    state 4 was still serializing: save 3 was dropped, and the newest checkpoint was 2."""
    spill_dir = tmp_path / "spill"
    spill_dir.mkdir()
    store = tmp_path / "store"
    proc = _run("UNTIL = 0\nSTORE = " + repr(str(store)) + "\n" + _LAST_GOOD, spill_dir)
    assert proc.returncode == 0, proc.stderr
    assert "SerializationError" in proc.stdout, proc.stdout
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert out["checkpoints"][-1] == 3, out
