"""Review 122 (of c607163, the process-tree fixes): an application handler that chains to
ours after install_signal_handlers(), a SIGTERM while a completed run's result or a
checkpoint is read, and a body that kills its own child process (not a group SIGTERM)."""

from __future__ import annotations

import signal
from pathlib import Path

from resumable._errors import EXIT_SIGTERM

from .signal_children import finish, spawn, started, wait_for
from .test_review120 import SLOW_READ

_CHAINING_APP = """
import time
resumable.install_signal_handlers()
old = signal.getsignal(signal.SIGTERM)
calls, stop = 0, False

def app_handler(signum, frame):  # stop the service, then what was there before (ours)
    global calls, stop
    calls += 1
    stop = True
    print("app handler", calls, flush=True)
    if callable(old):
        old(signum, frame)

signal.signal(signal.SIGTERM, app_handler)
print("RESULT", count(3), flush=True)
ready()  # the run is over; the service idles until told to stop
while not stop:
    time.sleep(0.01)
print("clean shutdown", flush=True)
"""


def test_an_application_handler_chaining_to_ours_ends_as_without_us(tmp_path: Path) -> None:
    """c607163 put ours in front of such a handler again: ours called it, it called ours,
    until RecursionError (exit 1) (review 122); c75ca06 then ended the process with the
    default action (review 125). As without the library, where ``old`` is SIG_DFL and not
    called: the handler runs once and the service shuts down as it chose to."""
    proc, _ = started(tmp_path, _CHAINING_APP)
    proc.send_signal(signal.SIGTERM)
    out, err = finish(proc)
    assert proc.returncode == 0, err[-3000:]
    assert "RESULT 3" in out and out.count("app handler") == 1, out
    assert "clean shutdown" in out and "RecursionError" not in err, (out, err[-3000:])


def test_a_sigterm_while_a_completed_runs_result_is_read_exits_143(tmp_path: Path) -> None:
    """The result was read before the run was registered: a SIGTERM then found no run and
    the default action killed the process (status -15) (review 122)."""
    store, mark, go = str(tmp_path / "s"), tmp_path / "mark", tmp_path / "go"
    proc = spawn(tmp_path, SLOW_READ, store, "-", "-", "result")
    out, err = finish(proc)
    assert proc.returncode == 0 and "RESULT <" in out, err[-3000:]
    proc = spawn(tmp_path, SLOW_READ, store, str(mark), str(go), "result")
    wait_for(mark, proc)
    proc.send_signal(signal.SIGTERM)
    go.touch()
    out, err = finish(proc)
    assert proc.returncode == EXIT_SIGTERM, err[-3000:]
    assert "stopped before its body started" in err and "body ran" not in out, err[-3000:]


_HANGING_LOAD = """
import os, sys, threading
from resumable import checkpointed

STORE, MARK = sys.argv[1], sys.argv[2]

class Hangs:
    def __init__(self):
        self.loaded = False

    def __setstate__(self, state):
        self.__dict__.update(state)
        if MARK != "-":
            open(MARK, "w").close()
            threading.Event().wait()  # a load that never ends (a store that hangs)

@checkpointed(store=STORE, run_id="r")
def f(n, *, state=None):
    state = state or {"s": 0, "h": Hangs()}
    while state["s"] < n:
        state["s"] += 1
        yield state
    return state["s"]

if MARK == "-":
    it = f.iter(5)
    next(it), next(it)
    it.close()  # (step 2 saved)
else:
    print("RESULT", f(5), flush=True)
"""


def test_a_sigterm_while_a_checkpoint_is_read_stops_the_read_at_once(tmp_path: Path) -> None:
    """The read went on to $RESUMABLE_TERM_TIMEOUT, then the run said it was 'saved at
    step 0' (review 122): there is nothing to save before the body starts, so a SIGTERM
    stops the read in the main thread at once, and the checkpoints stand."""
    store, mark = str(tmp_path / "s"), tmp_path / "mark"
    proc = spawn(tmp_path, _HANGING_LOAD, store, "-")
    _, err = finish(proc)
    assert proc.returncode == 0, err[-3000:]
    proc = spawn(tmp_path, _HANGING_LOAD, store, str(mark))  # (timeout 20 s: not waited)
    wait_for(mark, proc)
    proc.send_signal(signal.SIGTERM)
    _, err = finish(proc)
    assert proc.returncode == EXIT_SIGTERM, err[-3000:]
    assert "stopped before its body started; its checkpoints stand" in err, err[-3000:]
    assert "reached no yield" not in err and "saved at step 0" not in err, err[-3000:]


_RUNAWAY = """
import multiprocessing as mp, os, sys, time
from resumable import checkpointed

STORE, MARK, GO = sys.argv[1], sys.argv[2], sys.argv[3]

def program(x, q):
    if x == 3:
        while True:  # a runaway candidate program
            pass
    q.put(x * x)

def evaluate(x, g):
    q = mp.Queue()
    p = mp.Process(target=program, args=(x, q))
    p.start()
    if g == 3 and x == 3 and MARK != "-":
        open(MARK, "w").close()
        while not os.path.exists(GO):  # (the test sends the SIGTERM, then makes GO)
            time.sleep(0.005)
    p.join(0.5)
    if p.is_alive():
        p.kill()  # over its time limit: killed, and a penalty (an uninterrupted run too)
        p.join()
        return 10**6
    return q.get()

@checkpointed(store=STORE, run_id="r")
def evolve(n, *, state=None):
    state = state or {"gen": 0, "fit": []}
    while state["gen"] < n:
        g = state["gen"] + 1
        state["fit"].append(sum(evaluate(x, g) for x in range(5)))
        state["gen"] = g
        yield state
    return state["fit"]

if __name__ == "__main__":
    print("RESULT", evolve(5), flush=True)
"""


def test_a_child_the_body_kills_itself_does_not_hold_up_the_sigterm_save(
        tmp_path: Path) -> None:
    """c607163 counted any child ended by a signal during the SIGTERM's generation: a
    runaway evaluation the body killed (SIGKILL) cost the finished generation (review
    122). Only SIGTERM deaths count: the group's signal."""
    from resumable._run import Run
    from resumable.stores import open_store

    store, mark, go = str(tmp_path / "s"), tmp_path / "mark", tmp_path / "go"
    proc = spawn(tmp_path, _RUNAWAY, store, str(mark), str(go))
    wait_for(mark, proc)
    proc.send_signal(signal.SIGTERM)  # the parent only
    go.touch()
    _, err = finish(proc)
    assert proc.returncode == EXIT_SIGTERM, err[-3000:]
    latest = Run(open_store(store), "r").load_latest()
    assert latest is not None and latest.step == 3, err[-3000:]
