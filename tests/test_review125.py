"""Review 125 (of 45d96dd's chaining rule): once no run is active, the program's own
SIGTERM handling is as without the library: a returning handler installed before it is
reached through a framework that chained to ours during a run, and a second SIGTERM while
the program's handler still runs reaches that handler again (45d96dd ended both programs
with the default action)."""

from __future__ import annotations

import signal
from pathlib import Path

from .signal_children import RUN_THEN_POLL, finish, spawn, started, wait_for

_FRAMEWORK = """
import os, signal, sys, time
stop = False

def H(signum, frame):  # the program's own: stop when it is convenient
    global stop
    stop = True
    print("H called", flush=True)

signal.signal(signal.SIGTERM, H)
from resumable import checkpointed

STORE, READY = sys.argv[1], sys.argv[2]
old = None

def framework(signum, frame):  # set up by the body, chaining to what it found: ours
    print("framework handler", flush=True)
    if callable(old):
        old(signum, frame)

@checkpointed(store=STORE)
def count(n, *, state=None):
    global old
    s = state or 0
    while s < n:
        s += 1
        if old is None:
            old = signal.getsignal(signal.SIGTERM)
            signal.signal(signal.SIGTERM, framework)
        yield s
    return s

print("RESULT", count(3), flush=True)
open(READY, "w").close()
while not stop:
    time.sleep(0.01)
print("clean shutdown", flush=True)
"""


def test_a_framework_set_up_during_a_run_reaches_the_programs_handler(tmp_path: Path) -> None:
    ready = tmp_path / "ready"
    proc = spawn(tmp_path, _FRAMEWORK, str(tmp_path / "s"), str(ready))
    wait_for(ready, proc)
    proc.send_signal(signal.SIGTERM)
    out, err = finish(proc)
    assert proc.returncode == 0, (out, err[-3000:])
    assert out.count("framework handler") == 1 and out.count("H called") == 1, out
    assert "clean shutdown" in out


_SECOND = """
import signal, sys, time
calls = 0

def H(signum, frame):
    global calls
    calls += 1
    n = calls
    print("H called", n, flush=True)
    if n == 1:
        ready("busy")
        while calls < 2:  # the cleanup goes on until the second SIGTERM reaches H
            time.sleep(0.005)
        print("H 1 cleanup done", flush=True)
        sys.exit(0)

signal.signal(signal.SIGTERM, H)
"""


def test_a_second_sigterm_while_the_programs_handler_runs_reaches_it(tmp_path: Path) -> None:
    proc, ready = started(tmp_path, RUN_THEN_POLL, before=_SECOND)
    proc.send_signal(signal.SIGTERM)
    wait_for(Path(f"{ready}.busy"), proc)
    proc.send_signal(signal.SIGTERM)
    out, err = finish(proc)
    assert proc.returncode == 0, (out, err[-3000:])
    assert "H called 2" in out and "H 1 cleanup done" in out, out
