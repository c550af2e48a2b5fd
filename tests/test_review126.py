"""Review 126 (of 17f2e05's delivered-or-called rule): a SIGTERM Python delivers with no
frame (no Python code ran: an atexit C callback, a REPL's prompt) was taken for a call, and
the default action skipped (the process lived on until SIGKILL); a third SIGTERM while the
program's own handler still ran was dropped."""

from __future__ import annotations

import signal
from pathlib import Path

from .signal_children import finish, spawn, wait_for

_ATEXIT_C = """
import atexit, sys, time
import resumable
from resumable import checkpointed

STORE, READY = sys.argv[1], sys.argv[2]
resumable.install_signal_handlers()  # (ours stays installed once the run is over)

@checkpointed(store=STORE)
def count(n, *, state=None):
    s = state or 0
    while s < n:
        s += 1
        yield s
    return s

print("RESULT", count(3), flush=True)
atexit.register(time.sleep, 120)  # a C callback: no Python frame while it sleeps
atexit.register(lambda: open(READY, "w").close())  # (runs first: atexit is last in, first out)
"""


def test_a_sigterm_with_no_python_frame_still_ends_the_process(tmp_path: Path) -> None:
    ready = tmp_path / "ready"
    proc = spawn(tmp_path, _ATEXIT_C, str(tmp_path / "s"), str(ready))
    wait_for(ready, proc)
    proc.send_signal(signal.SIGTERM)
    out, err = finish(proc)
    assert proc.returncode == -signal.SIGTERM, (out, err[-3000:])


_THIRD = """
import os, signal, sys, time
calls = 0
STORE, READY = sys.argv[1], sys.argv[2]

def H(signum, frame):  # the program's own: a third SIGTERM forces the exit
    global calls
    calls += 1
    open(f"{READY}.{calls}", "w").close()
    if calls == 3:
        os._exit(7)
    time.sleep(120)  # (its work, in the handler)

signal.signal(signal.SIGTERM, H)
import resumable
from resumable import checkpointed

resumable.install_signal_handlers()

@checkpointed(store=STORE)
def count(n, *, state=None):
    s = state or 0
    while s < n:
        s += 1
        yield s
    return s

print("RESULT", count(3), flush=True)
open(READY, "w").close()
while True:
    time.sleep(0.01)
"""


def test_a_third_sigterm_while_the_programs_handler_runs_reaches_it(tmp_path: Path) -> None:
    ready = tmp_path / "ready"
    proc = spawn(tmp_path, _THIRD, str(tmp_path / "s"), str(ready))
    wait_for(ready, proc)
    for n in (1, 2):
        proc.send_signal(signal.SIGTERM)
        wait_for(Path(f"{ready}.{n}"), proc)
    proc.send_signal(signal.SIGTERM)
    out, err = finish(proc)
    assert proc.returncode == 7, (out, err[-3000:])
