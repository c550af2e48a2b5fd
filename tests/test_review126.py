"""Review 126 (of 17f2e05's delivered-or-called rule): a SIGTERM Python delivers with no
frame (no Python code ran: an atexit C callback, a REPL's prompt) was taken for a call, and
the default action skipped (the process lived on until SIGKILL); a third SIGTERM while the
program's own handler still ran was dropped."""

from __future__ import annotations

import signal
from pathlib import Path

from .signal_children import RUN_THEN_POLL, finish, started, wait_for

_ATEXIT_C = """
import atexit, time
resumable.install_signal_handlers()  # (ours stays installed once the run is over)
print("RESULT", count(3), flush=True)
atexit.register(time.sleep, 120)  # a C callback: no Python frame while it sleeps
atexit.register(ready)  # (runs first: atexit is last in, first out)
"""


def test_a_sigterm_with_no_python_frame_still_ends_the_process(tmp_path: Path) -> None:
    proc, _ = started(tmp_path, _ATEXIT_C)
    proc.send_signal(signal.SIGTERM)
    out, err = finish(proc)
    assert proc.returncode == -signal.SIGTERM, (out, err[-3000:])


_THIRD = """
import os, signal, time
calls = 0

def H(signum, frame):  # the program's own: a third SIGTERM forces the exit
    global calls
    calls += 1
    ready(calls)
    if calls == 3:
        os._exit(7)
    for _ in range(2400):  # (its work, in the handler: 120 s in steps, or a SIGTERM
        time.sleep(0.05)  # landing just before the sleep waits for all of it)

signal.signal(signal.SIGTERM, H)
"""


def test_a_third_sigterm_while_the_programs_handler_runs_reaches_it(tmp_path: Path) -> None:
    proc, ready = started(tmp_path, RUN_THEN_POLL, before=_THIRD)
    for n in (1, 2):
        proc.send_signal(signal.SIGTERM)
        wait_for(Path(f"{ready}.{n}"), proc)
    proc.send_signal(signal.SIGTERM)
    out, err = finish(proc)
    assert proc.returncode == 7, (out, err[-3000:])
