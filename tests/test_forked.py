"""$RESUMABLE_SNAPSHOT_FORK=1: due yields fork a child that pickles the state.

Every test runs the loop in a child Python process of its own (the fork then happens
there, not in pytest's process with its servers and threads) and waits on what that
process prints, never on time.
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from resumable._run import Run
from resumable.stores import open_store
from tests.scripts import run_script

pytestmark = pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")

ROOT = Path(__file__).resolve().parents[1]

# A GA-like loop over a population of Python objects (lists of floats with a fitness
# attribute), mutated in place after each yield: what copy-on-write must protect.
_LOOP = """
import os, random, sys
from resumable import checkpointed

class Individual(list):
    def __init__(self, genes):
        super().__init__(genes)
        self.fitness = sum(x * x for x in genes)

@checkpointed(store={store!r}, run_id="ga", every={every})
def evolve(n, *, state=None):
    print("resumed at", state["gen"] if state else 0, flush=True)
    if state is None:
        rnd = random.Random(1)
        state = {{"gen": 0, "pop": [Individual([rnd.random() for _ in range(20)])
                                  for _ in range(200)]}}
    while state["gen"] < n:
        for ind in state["pop"]:  # in place: the child must see the yield's values
            i = random.randrange(len(ind))
            ind[i] += random.gauss(0.0, 0.1)
            ind.fitness = sum(x * x for x in ind)
        state["gen"] += 1
        if os.environ.get("WAIT_SAVES") and state["gen"] > 1:
            # the population has changed since the last yield; its save (by the child
            # forked there) is waited for before the next yield, so none is replaced
            import glob, time
            deadline = time.monotonic() + 60
            want = os.path.join({store!r}, "ga", f"ckpt-*-{{state['gen'] - 1:012d}}")
            while not glob.glob(want):
                assert time.monotonic() < deadline, "the save never came"
                time.sleep(0.01)
        if state["gen"] == int(os.environ.get("DIE_AT", "0")):
            # once the last due state is saved (a forked snapshot; with every yield due, the
            # one of generation 6 may have been replaced by 7's): an event, not a time
            import glob, time
            due = int(os.environ["DIE_AFTER_SAVE"])
            deadline = time.monotonic() + 60
            while not any(int(p.rsplit("-", 1)[1]) >= due for p in
                          glob.glob(os.path.join({store!r}, "ga", "ckpt-*"))):
                assert time.monotonic() < deadline, "the save never came"
                time.sleep(0.01)
            print("dying", flush=True)
            os._exit(3)
        yield state
    return [round(sum(ind), 12) for ind in state["pop"]]

random.seed(7)
result = evolve({n})
try:
    os.waitpid(-1, os.WNOHANG)
    print("children left", flush=True)
except ChildProcessError:
    print("no children left", flush=True)
print("result", sum(result), flush=True)
if os.environ.get("VERIFY"):  # every checkpoint holds the state of its own yield
    from resumable._run import Run
    from resumable.stores import open_store
    run = Run(open_store({store!r}), "ga", keep=None)
    names = run.checkpoint_names()
    for name in names:
        ckpt = run._try_load(name, [], True, [])
        assert ckpt.state["gen"] == ckpt.step, (name, ckpt.state["gen"])
    print("verified", len(names), flush=True)
"""


run = run_script


def loop(tmp_path: Path, name: str, every: str = '"generation"', n: int = 12) -> str:
    return _LOOP.format(store=str(tmp_path / name), every=every, n=n)


def result_line(proc: subprocess.CompletedProcess[str]) -> str:
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "no children left" in proc.stdout, proc.stdout
    return next(line for line in proc.stdout.splitlines() if line.startswith("result"))


@pytest.mark.parametrize("every", ['"generation"', "3"])
def test_forked_snapshots_resume_to_the_same_result(tmp_path: Path, every: str) -> None:
    """Killed at generation 8 and run again: the result of a run never killed, whether
    the snapshots were forked or not; every child is reaped."""
    plain = result_line(run(tmp_path, loop(tmp_path, "plain", every)))
    died = run(tmp_path, loop(tmp_path, "forked", every), RESUMABLE_SNAPSHOT_FORK="1",
               DIE_AT="8", DIE_AFTER_SAVE="6")
    assert died.returncode == 3 and "dying" in died.stdout, died.stderr[-3000:]
    ckpts = [k for k in open_store(str(tmp_path / "forked")).list("ga/")
             if "/ckpt-" in k]
    assert ckpts, "no checkpoint was saved before the death"
    resumed = run(tmp_path, loop(tmp_path, "forked", every), RESUMABLE_SNAPSHOT_FORK="1")
    assert result_line(resumed) == plain
    at = int(next(x for x in resumed.stdout.splitlines() if x.startswith("resumed at"))
             .split()[-1])
    assert 6 <= at < 8


def test_forked_checkpoints_hold_the_state_of_their_yield(tmp_path: Path) -> None:
    """Each checkpoint a child wrote is the state at its own yield, not a later one,
    although the loop changed the population in place right after the fork."""
    source = loop(tmp_path, "s", n=8).replace('run_id="ga"', 'run_id="ga", keep=None')
    proc = run(tmp_path, source, RESUMABLE_SNAPSHOT_FORK="1", VERIFY="1", WAIT_SAVES="1")
    result_line(proc)
    verified = [line for line in proc.stdout.splitlines() if line.startswith("verified")]
    assert verified == ["verified 8"], proc.stdout


_UNPICKLABLE_LATER = """
from resumable import checkpointed

@checkpointed(store={store!r}, run_id="u", every=1)
def f(*, state=None):
    state = state or {{"i": 0}}
    while state["i"] < 6:
        state["i"] += 1
        if state["i"] == 4:
            state["f"] = lambda: 1  # plain pickle cannot save a lambda
        yield state

try:
    f()
except Exception as err:
    print("raised", type(err).__name__, flush=True)
    print(str(err), flush=True)
"""


def test_a_state_that_stops_pickling_fails_the_run_with_the_pickling_error(
        tmp_path: Path) -> None:
    """The child's SerializationError reaches the caller, naming the step and the part."""
    store = tmp_path / "s"
    proc = run(tmp_path, _UNPICKLABLE_LATER.format(store=str(store)),
               RESUMABLE_SNAPSHOT_FORK="1")
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "raised SerializationError" in proc.stdout, proc.stdout + proc.stderr[-2000:]
    # the first state that failed to pickle (4, or a later one if 4 was replaced by a
    # newer snapshot before its save began)
    assert re.search(r"yielded at step [456] ", proc.stdout) and "lambda" in proc.stdout
    # What the store holds is a state that pickled (with forked snapshots, the newest
    # one uploaded; a fast loop may have replaced them all before any upload began).
    latest = Run(open_store(str(store)), "u").load_latest()
    assert latest is None or (latest.step <= 3 and "f" not in latest.state)


_BLOCKED_CHILD = """
import os, sys
from resumable import checkpointed

class Blocker:
    # Pickled only in the forked child (the first snapshot, taken inline, has none).
    def __reduce__(self):
        if os.getpid() != PARENT:
            # its own file: a line on the shared stdout could interleave with the parent's
            with open(PIDFILE + ".tmp", "w") as fh:
                fh.write(str(os.getpid()))
            os.rename(PIDFILE + ".tmp", PIDFILE)
            os.read(BLOCK_FD, 1)  # never written: the child waits here
        return (Blocker, ())

PARENT = os.getpid()
PIDFILE = {pidfile!r}
BLOCK_FD, _keep = os.pipe()

@checkpointed(store={store!r}, run_id="b", every=1)
def f(*, state=None):
    state = state or {{"i": 0}}
    while True:
        state["i"] += 1
        if state["i"] == 2:
            state["b"] = Blocker()
        yield state
        if state["i"] >= 2:
            print("loop at", state["i"], flush=True)
            os.read(BLOCK_FD, 1)  # the parent waits too: killed or terminated here

f()
"""


def _wait_gone(pid: int, deadline: float) -> bool:
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return True
        try:  # a zombie of ours would still answer kill(0); it is not ours here
            with open(f"/proc/{pid}/stat") as fh:
                if fh.read().split(") ")[-1].startswith("Z"):
                    return True
        except OSError:
            return True
        time.sleep(0.05)
    return False


def _group_gone(pgid: int, deadline: float) -> bool:
    while time.monotonic() < deadline:
        try:
            os.killpg(pgid, 0)
        except ProcessLookupError:
            return True
        time.sleep(0.05)
    return False


def test_a_serializing_child_dies_with_its_parent(tmp_path: Path) -> None:
    """The parent SIGKILLed while a child pickles (stuck): the child goes with it."""
    script = tmp_path / "script.py"
    pidfile = tmp_path / "child.pid"
    script.write_text(textwrap.dedent(_BLOCKED_CHILD.format(store=str(tmp_path / "s"),
                                                            pidfile=str(pidfile))))
    proc = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, cwd=ROOT,
                            env=dict(os.environ, PYTHONPATH=str(ROOT),
                                     RESUMABLE_SNAPSHOT_FORK="1"),
                            start_new_session=True)
    try:
        assert proc.stdout is not None
        while True:  # the parent is past the yield whose child is pickling
            line = proc.stdout.readline()
            assert line, "the script ended early: " + proc.stderr.read()[-3000:]
            if line.startswith("loop at"):
                break
        deadline = time.monotonic() + 60
        while not pidfile.exists():  # the child is in the state's __reduce__
            assert time.monotonic() < deadline, "the forked child never pickled the state"
            time.sleep(0.01)
        child = int(pidfile.read_text())
        proc.kill()
        proc.wait(timeout=60)
        assert _group_gone(proc.pid, time.monotonic() + 30), f"child {child} outlived its parent"
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)


_TERMINATED = """
import os, sys
from resumable import checkpointed

@checkpointed(store={store!r}, run_id="t", every="generation")
def f(*, state=None):
    state = state or {{"i": 0, "pop": [[float(j)] * 50 for j in range(2000)]}}
    while True:
        state["i"] += 1
        for ind in state["pop"]:
            ind[0] += 1.0
        print("gen", state["i"], flush=True)
        if state["i"] >= 4:
            os.read(int(sys.argv[1]), 1)  # waits here for the group's SIGTERM
        yield state

f()
"""


def test_a_group_sigterm_saves_the_next_yield_and_leaves_no_process(tmp_path: Path) -> None:
    """SIGTERM to the whole process group (children included) while the body works:
    the parent exits 143 with the generation it was in saved, and no child is left."""
    script = tmp_path / "script.py"
    store = tmp_path / "s"
    script.write_text(textwrap.dedent(_TERMINATED.format(store=str(store))))
    r, w = os.pipe()
    proc = subprocess.Popen([sys.executable, str(script), str(r)], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, cwd=ROOT, pass_fds=(r,),
                            env=dict(os.environ, PYTHONPATH=str(ROOT),
                                     RESUMABLE_SNAPSHOT_FORK="1"),
                            start_new_session=True)
    os.close(r)
    try:
        assert proc.stdout is not None
        while True:
            line = proc.stdout.readline()
            assert line, "the script ended early: " + proc.stderr.read()[-3000:]
            if line.strip() == "gen 4":
                break
        os.killpg(proc.pid, signal.SIGTERM)
        os.write(w, b"x")  # the body goes on to its yield
        _, err = proc.communicate(timeout=60)
        assert proc.returncode == 143, err[-3000:]
        assert _group_gone(proc.pid, time.monotonic() + 30), "a child outlived the run"
        latest = Run(open_store(str(store)), "t").load_latest()
        assert latest is not None and latest.step == 4 and latest.state["i"] == 4
        assert latest.state["pop"][5][0] == 5.0 + 4
    finally:
        os.close(w)
        if proc.poll() is None:
            proc.kill()
            proc.wait()



_NO_FDS_LEFT = """
import glob, os, time
from resumable import checkpointed

held = []

@checkpointed(store={store!r}, run_id="n", every=1)
def f(*, state=None):
    state = state or {{"i": 0, "pop": [[0.0] * 10 for _ in range(100)]}}
    while state["i"] < 5:
        state["i"] += 1
        state["pop"][0][0] = float(state["i"])
        if state["i"] == 2:
            # the first snapshot (in process) is saved; then every descriptor but one is
            # taken, so the fork's pipe (two) cannot be made: a real EMFILE
            deadline = time.monotonic() + 60
            while not glob.glob(os.path.join({store!r}, "n", "ckpt-*-000000000001")):
                assert time.monotonic() < deadline, "the first save never came"
                time.sleep(0.01)
            try:
                while True:
                    held.append(os.open(os.devnull, os.O_RDONLY))
            except OSError:
                os.close(held.pop())
        yield state
        while held:
            os.close(held.pop())
    return state["pop"][0][0]

print("result", f(), flush=True)
"""


def test_a_fork_that_fails_falls_back_to_the_loops_thread(tmp_path: Path) -> None:
    """No descriptors left for the child's pipe: the run goes on with snapshots taken
    in process, says so once, and ends with every state saved."""
    store = tmp_path / "s"
    script = tmp_path / "script.py"
    script.write_text(textwrap.dedent(_NO_FDS_LEFT.format(store=str(store))))
    proc = subprocess.run(["bash", "-c", f"ulimit -n 64 && exec {sys.executable} {script}"],
                          capture_output=True, text=True, timeout=120, cwd=ROOT,
                          env=dict(os.environ, PYTHONPATH=str(ROOT),
                                   RESUMABLE_SNAPSHOT_FORK="1"))
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "result 5.0" in proc.stdout
    assert proc.stderr.count("could not fork a child to snapshot step 2") == 1, proc.stderr
    latest = Run(open_store(str(store)), "n").load_latest()
    assert latest is not None and latest.step == 5 and latest.state["pop"][0][0] == 5.0


_GROUP_SIGNAL = """
import os, signal, sys, time
from resumable import checkpointed

PARENT = os.getpid()
LOG, STARTED = sys.argv[1], sys.argv[2]
release_r, release_w = os.pipe()

def on_usr1(signum, frame):  # the application's own handler (a preemption notice)
    with open(LOG, "a") as fh:
        fh.write("parent\\n" if os.getpid() == PARENT else "child\\n")

signal.signal(signal.SIGUSR1, on_usr1)

class Held:
    # The first forked child waits here, in its pickling, until the signal was sent.
    def __reduce__(self):
        if os.getpid() != PARENT and not os.path.exists(STARTED):
            open(STARTED, "w").close()
            os.read(release_r, 1)
        return (Held, ())

@checkpointed(store={store!r}, run_id="g", every=1)
def f(*, state=None):
    state = state or {{"i": 0}}
    while state["i"] < 4:
        state["i"] += 1
        if state["i"] == 2:
            state["held"] = Held()
        yield state
        if state["i"] == 2:
            deadline = time.monotonic() + 60
            while not os.path.exists(STARTED):
                assert time.monotonic() < deadline, "the forked child never pickled"
                time.sleep(0.01)
            os.killpg(0, signal.SIGUSR1)  # pending in the child before it is released
            os.write(release_w, b"x")
    return state["i"]

print("result", f(), flush=True)
"""


def test_a_signal_to_the_group_runs_no_handler_of_the_parent_in_the_child(
        tmp_path: Path) -> None:
    """A SIGUSR1 sent to the process group while a child pickles runs the application's
    handler in the parent only (before: also in the child, in the middle of pickling)."""
    script = tmp_path / "script.py"
    script.write_text(textwrap.dedent(_GROUP_SIGNAL.format(store=str(tmp_path / "s"))))
    log = tmp_path / "handler.log"
    proc = subprocess.run([sys.executable, str(script), str(log), str(tmp_path / "started")],
                          capture_output=True, text=True, timeout=120, cwd=ROOT,
                          start_new_session=True,
                          env=dict(os.environ, PYTHONPATH=str(ROOT),
                                   RESUMABLE_SNAPSHOT_FORK="1"))
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "result 4" in proc.stdout, proc.stdout
    assert log.read_text().splitlines() == ["parent"]



_SHARED_STATE = """
import glob, os, sys, time
import numpy as np
from multiprocessing import shared_memory
from resumable import checkpointed

STORE = {store!r}
N = 4 << 20  # 32 MiB of float64: the loop overwrites it while a child would stream it
shm = shared_memory.SharedMemory(create=True, size=N * 8)
forks = []
os.register_at_fork(before=lambda: forks.append(1))


class Pop:
    # holds an array on shared memory (shared with fitness workers, say)
    def __init__(self, gen):
        self.gen = gen
        self.a = np.ndarray((N,), dtype=np.float64, buffer=shm.buf)

    def __reduce__(self):
        return (_rebuild, (self.gen, self.a))


def _rebuild(gen, a):
    p = Pop.__new__(Pop)
    p.gen, p.a = gen, a
    return p


@checkpointed(store=STORE, run_id="shm", every=1, keep=None)
def f(*, state=None):
    state = state or Pop(0)
    while state.gen < 6:
        state.gen += 1
        state.a[:] = state.gen  # the whole population, in place, right after the yield
        if state.gen > 2:  # the previous yield's save first, so that none is replaced
            deadline = time.monotonic() + 60
            want = os.path.join(STORE, "shm", f"ckpt-*-{{state.gen - 1:012d}}")
            while not glob.glob(want):
                assert time.monotonic() < deadline, "the save never came"
                time.sleep(0.005)
        yield state
    return state.gen


f()
from resumable._run import Run
from resumable.stores import open_store
run = Run(open_store(STORE), "shm", keep=None)
for name in run.checkpoint_names():
    ck = run._try_load(name, [], True, [])
    values = np.unique(ck.state.a).tolist()
    print(name.rsplit("/", 1)[-1], ck.state.gen, values, flush=True)
    assert ck.state.gen == ck.step and values == [float(ck.step)], "another yield's state"
    del ck
print("forks", len(forks), flush=True)
shm.close()
shm.unlink()
"""


def test_state_on_shared_memory_is_never_snapshotted_by_a_child(tmp_path: Path) -> None:
    """Copy-on-write does not cover shared mappings: with one in the process, snapshots
    stay on the loop's thread, every checkpoint holds its own yield's state (before:
    the child streamed what the loop wrote after the yield), and a warning says why."""
    proc = run(tmp_path, _SHARED_STATE.format(store=str(tmp_path / "s")),
               RESUMABLE_SNAPSHOT_FORK="1")
    assert proc.returncode == 0, proc.stdout + proc.stderr[-3000:]
    assert "forks 0" in proc.stdout, proc.stdout
    assert proc.stderr.count("maps shared memory writable") == 1, proc.stderr
    assert "/dev/shm/psm_" in proc.stderr


_ABOVE_LIMIT = """
import os
import numpy as np
from resumable import checkpointed

forks = []
os.register_at_fork(before=lambda: forks.append(1))

@checkpointed(store={store!r}, run_id="big", every=1)
def f(*, state=None):
    state = state or {{"i": 0, "a": np.zeros(1 << 19)}}  # 4 MiB: above the limit below
    while state["i"] < 5:
        state["i"] += 1
        state["a"] += 1.0
        yield state
    return float(state["a"][0])

print("result", f(), "forks", len(forks), flush=True)
"""


def test_a_state_above_the_snapshot_limit_is_saved_in_place_not_forked(
        tmp_path: Path) -> None:
    """$RESUMABLE_SNAPSHOT_LIMIT caps memory: such a state is saved in place, without a
    copy, where a child would add one (before: forked, 1.5x the memory)."""
    proc = run(tmp_path, _ABOVE_LIMIT.format(store=str(tmp_path / "s")),
               RESUMABLE_SNAPSHOT_FORK="1", RESUMABLE_SNAPSHOT_LIMIT="1MiB")
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "result 5.0 forks 0" in proc.stdout, proc.stdout
    latest = Run(open_store(str(tmp_path / "s")), "big").load_latest()
    assert latest is not None and latest.step == 5 and latest.state["a"][0] == 5.0


_LOCK_HELD_AT_FORK = """
import threading
from resumable import checkpointed

class Buffer:
    # pickling takes its lock: in a child forked while another thread held it, nobody
    # ever releases it
    def __init__(self):
        self.lock = threading.Lock()
        self.items = [1, 2, 3]

    def __getstate__(self):
        with self.lock:
            return {{"items": list(self.items)}}

    def __setstate__(self, d):
        self.lock = threading.Lock()
        self.items = d["items"]

buf = Buffer()
take, taken, give = threading.Event(), threading.Event(), threading.Event()

def holder():  # another thread of the application, holding the lock for a while
    take.wait()
    with buf.lock:
        taken.set()
        give.wait()

threading.Thread(target=holder, daemon=True).start()

@checkpointed(store={store!r}, run_id="l", every=1)
def f(*, state=None):
    state = state or {{"i": 0, "buf": buf}}
    while state["i"] < 5:
        state["i"] += 1
        if state["i"] == 5:  # the fork at the last yield happens while the lock is held
            take.set()
            taken.wait()
        yield state
        if state["i"] == 5:
            give.set()
    return state["i"]

print("result", f(), flush=True)
print("again", f(), flush=True)  # the run is complete: its result, not a rerun
"""


def test_a_child_stuck_on_a_lock_is_ended_and_the_run_goes_on(tmp_path: Path) -> None:
    """A child forked while another thread held a lock its pickling takes never finishes:
    after $RESUMABLE_FORK_TIMEOUT it is ended with an error that says why, and the call
    returns, its result saved (before: the run hung for good, waiting for the child)."""
    store = tmp_path / "s"
    proc = run(tmp_path, _LOCK_HELD_AT_FORK.format(store=str(store)), timeout=120,
               RESUMABLE_SNAPSHOT_FORK="1", RESUMABLE_FORK_TIMEOUT="1")
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "result 5\nagain 5" in proc.stdout
    assert proc.stderr.count("sent nothing in") == 1, proc.stderr
    assert "take a lock that another thread holds" in proc.stderr
    # The stuck child's state was not saved. (Nor, under load, any earlier one: each of
    # steps 1-4 may be replaced while it waits by the next, as a newer snapshot replaces
    # a waiting one; the call's result is saved either way, as "again 5" shows.)
    latest = Run(open_store(str(store)), "l").load_latest(with_state=False)
    assert latest is None or latest.step < 5
