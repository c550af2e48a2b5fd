"""Child processes for the signal tests: start one from a script's source, wait for a
file it makes (an event, not a sleep), and collect it without leaving it behind."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import threading
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[1]
ENV = dict(os.environ, PYTHONPATH=str(ROOT), RESUMABLE_TERM_TIMEOUT="20")


def spawn(tmp_path: Path, source: str, *args: str, **popen: Any) -> subprocess.Popen[str]:
    script = tmp_path / "child.py"
    script.write_text(textwrap.dedent(source))
    return subprocess.Popen([sys.executable, str(script), *args], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=ENV, **popen)


def wait_for(path: Path, proc: subprocess.Popen[str], inside: bool = False) -> None:
    """Until ``path`` exists (``inside``: until a file is in that folder), which the child
    makes, or the child ends (a failure, with its stderr)."""
    done = threading.Event()
    threading.Thread(target=lambda: (proc.wait(), done.set()), daemon=True).start()
    while not (any(path.iterdir()) if inside else path.exists()):
        if done.wait(0.01):
            _, err = proc.communicate()
            pytest.fail(f"the child ended first: {err[-3000:]}")


def finish(proc: subprocess.Popen[str], group: bool = False) -> tuple[str, str]:
    """Its output once it ends; killed (its process group too) if it has not in 120 s."""
    try:
        return proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            if group:
                os.killpg(proc.pid, 9)
            else:
                proc.kill()
            proc.communicate()


PRELUDE = """
import contextlib, functools, inspect, os, signal, sys, threading
READY, LIBRARY, STORE = sys.argv[1], sys.argv[2] == "1", sys.argv[3]

def ready(k=0):  # the test sends the next SIGTERM once this file is there
    open(READY + (f".{k}" if k else ""), "w").close()

def forever():  # a wait in C that a SIGTERM interrupts (no sleep)
    threading.Event().wait()

@contextlib.contextmanager
def deferred(message):  # a handler of the program's for a while, then the one it found
    def later(signum, frame):
        print(message, flush=True)
    saved = signal.signal(signal.SIGTERM, later)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, saved)

class Flag:  # set by a signal handler, waited for by the main thread, with no lock: an
    # Event's, held by the main thread's wait as the signal came, deadlocked set()
    def __init__(self):
        self.r, self.w = os.pipe()

    def set(self):
        os.write(self.w, b"x")

    def wait(self):
        os.read(self.r, 1)

def install():  # with the library: its handler, for good
    if LIBRARY:
        resumable.install_signal_handlers()

if LIBRARY:
    import resumable
    from resumable import checkpointed

    @checkpointed(store=STORE)
    def count(n, *, state=None):
        s = state or 0
        while s < n:
            s += 1
            yield s
        return s
else:
    def count(n):
        return n
"""


# A child program run without and with the library (its second argument): the same
# program, where each test says what it must do. PRELUDE gives it ready(k) (the test sends
# the next SIGTERM once that file is there; the file may hold the pid to signal),
# forever() (a wait a SIGTERM interrupts), deferred(message) (a handler for a while),
# install() and count(n) (a checkpointed run, or a plain function without the library).
def ends(tmp_path: Path, source: str, library: bool, signals: int = 1,
         before: str = "") -> tuple[Any, ...]:
    where = tmp_path / ("with" if library else "without")
    where.mkdir()
    ready = where / "ready"
    proc = spawn(where, before + PRELUDE + source, str(ready), str(int(library)),
                 str(where / "s"))
    for k in range(signals):
        mark = ready.with_name(f"ready.{k}") if k else ready
        wait_for(mark, proc)
        text = mark.read_text().strip()
        os.kill(int(text) if text else proc.pid, signal.SIGTERM)
    out, err = finish(proc)
    assert "Traceback" not in err, err[-3000:]
    return proc.returncode, [line for line in out.splitlines() if line != "RESULT 3"]


def as_without(tmp_path: Path, source: str, expected: tuple[Any, ...],
               signals: int = 1, before: str = "") -> None:
    """``before``: the program's own set-up, run before the library is imported."""
    assert ends(tmp_path, source, False, signals, before) == expected  # the program, as it is
    assert ends(tmp_path, source, True, signals, before) == expected


# The program's own handler for the tests of a second SIGTERM during its cleanup: the
# first waits (the test sends the second once ready.1 is there), the second forces exit 3
GRACEFUL_THEN_FORCED = """
calls = 0

def graceful_then_force(signum, frame):
    global calls
    calls += 1
    print("A call", calls, flush=True)
    if calls > 1:
        os._exit(3)
    ready(1)  # the second SIGTERM, during its cleanup
    forever()

signal.signal(signal.SIGTERM, graceful_then_force)
"""


def started(tmp_path: Path, source: str, before: str = "") -> tuple[subprocess.Popen[str], Path]:
    """A child program run with the library, once it has called ready(): the process and
    that file (which may hold the pid to signal). ``before`` + PRELUDE + ``source``, where
    ``before`` is the program's own set-up that runs before the library is imported (it
    may use PRELUDE's names only in functions called later)."""
    ready = tmp_path / "ready"
    proc = spawn(tmp_path, before + PRELUDE + source, str(ready), "1", str(tmp_path / "s"))
    wait_for(ready, proc)
    return proc, ready


# After PRELUDE, for a program whose own SIGTERM handler was set before the library was
# imported: a run with ours installed for good, then it idles in Python code (polling:
# each SIGTERM finds a Python frame) until its handler ends it
RUN_THEN_POLL = """
import time
install()
print("RESULT", count(3), flush=True)
ready()
while True:
    time.sleep(0.01)
"""


# After a program's set-up: a SIGTERM the kernel hands to a thread other than the main
# one (pthread_kill to itself), once the main thread waits in C with no timeout (seen in
# /proc: asleep, at the wait's line)
SIGTERM_TO_A_THREAD = """
import time
main = threading.main_thread()

def main_blocked():  # in the wait below, asleep in the kernel (an event, not a sleep)
    with open(f"/proc/self/task/{main.native_id}/stat") as f:
        state = f.read().rsplit(")", 1)[1].split()[0]
    frame = sys._current_frames().get(main.ident)
    while frame is not None and frame.f_back is not None:
        frame = frame.f_back
    return state == "S" and frame is not None and frame.f_lineno == WAIT_LINE

def worker():
    while not main_blocked():
        time.sleep(0.001)
    signal.pthread_kill(threading.get_ident(), signal.SIGTERM)  # to this thread only
    forever()

WAIT_LINE = sys._getframe().f_lineno + 2
threading.Thread(target=worker, daemon=True).start()
forever()  # the main thread, in C with no timeout
"""
