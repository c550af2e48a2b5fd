"""Review 62 (of 7451167 and febd14d): a SIGTERM at the end of the script (Python's
shutdown before our exit hook, a consumer in an atexit function, an application handler
that calls sys.exit), a slow save as an iterator closes, and a closed iterator's failed
save that a ``break`` drops.

Real SIGTERMs to real child processes; each child chooses its moment with a profile
hook on a function's code, or waits for the watchdog's own deadline.
"""

from __future__ import annotations

import signal
from pathlib import Path

import pytest

from resumable._errors import EXIT_SERIALIZATION, EXIT_SIGTERM
from tests.test_sigterm_review59 import _run

_HEAD = """\
import atexit, os, signal, sys, threading, time
from resumable import checkpointed, _signals
from resumable._decorator import _Execution

@checkpointed(store=sys.argv[1], run_id="a", every=1000)
def a(n, *, state=None):
    print("body starts from", state, flush=True)
    s = state or 0
    while s < n:
        s += 1
        yield s

if sys.argv[2] == "resume":
    it = a.iter(10)
    next(it)
    it.close()
    sys.exit(0)

def sigterm_at(code):  # a SIGTERM as the function of that code is called
    def hook(frame, event, arg):
        if event == "call" and frame.f_code is code:
            sys.setprofile(None)
            os.kill(os.getpid(), signal.SIGTERM)
    sys.setprofile(hook)
"""


def _resumed_from(tmp_path: Path, code: str) -> str:
    proc = _run(tmp_path, code, "resume")
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc.stdout


_SHUTDOWN_BEGINS = _HEAD + """
it = a.iter(10)
next(it); next(it); next(it)   # the consumer holds 3; every=1000: nothing saved yet
sigterm_at(threading._shutdown.__code__)
print("script over", flush=True)
"""


def test_a_sigterm_as_pythons_shutdown_begins_saves_the_open_iterator(tmp_path: Path) -> None:
    """Before our exit hook had said the script was over (another exit hook first, say a
    process pool's join), the handler raised Terminated into threading's shutdown: Python
    dropped it, skipped our hook, the state was lost and the exit was 0."""
    proc = _run(tmp_path, _SHUTDOWN_BEGINS, "run")
    assert proc.returncode == EXIT_SIGTERM, (proc.returncode, proc.stderr[-3000:])
    assert "body starts from 3" in _resumed_from(tmp_path, _SHUTDOWN_BEGINS)


_ATEXIT_CONSUMER = _HEAD + """
def final_phase():  # the program's own atexit function consumes an iterator
    for s in a.iter(10):
        if s == 2:
            os.kill(os.getpid(), signal.SIGTERM)
            threading.Event().wait(60)  # working on 2
            print("consumer not stopped", flush=True)

_signals._hook_exit()  # (as a run earlier in the script would have)
atexit.register(final_phase)
print("script over", flush=True)
"""


def test_a_consumer_in_an_atexit_function_is_stopped_at_once(tmp_path: Path) -> None:
    """febd14d let a SIGTERM during the whole shutdown only flag the runs, so a consumer
    working on a state in an atexit function ran on until the watchdog interrupted it
    ($RESUMABLE_TERM_TIMEOUT later, with "reached no yield")."""
    proc = _run(tmp_path, _ATEXIT_CONSUMER, "run")
    assert proc.returncode == EXIT_SIGTERM, (proc.returncode, proc.stderr[-3000:])
    assert "consumer not stopped" not in proc.stdout
    assert "reached no yield" not in proc.stderr, proc.stderr[-3000:]
    assert "body starts from 2" in _resumed_from(tmp_path, _ATEXIT_CONSUMER)


_APP_EXITS = """\
import os, signal, sys
def on_term(s, f):
    print("app handler called", flush=True)
    sys.exit(7)
signal.signal(signal.SIGTERM, on_term)
""" + _HEAD + """
it = a.iter(10)
next(it); next(it); next(it)
sigterm_at(_Execution.close_at_exit.__code__)
print("script over", flush=True)
"""


@pytest.mark.parametrize("interactive", [False, True], ids=["script", "session"])
def test_an_application_handler_that_exits_at_exit_sets_the_status(
    tmp_path: Path, interactive: bool
) -> None:
    """A SIGTERM as the exit hook closes an open iterator; the application's handler calls
    sys.exit(7) after the save: Python dropped its SystemExit raised out of the exit hook,
    and the exit was 143 (in a session, where the signal sent on as the iterator closed
    reached it, the exit hook logged "saving a run at exit failed: 7")."""
    proc = _run(tmp_path, _APP_EXITS, "run", interactive=interactive)
    assert proc.returncode == 7, (proc.returncode, proc.stderr[-3000:])
    assert proc.stdout.count("app handler called") == 1, proc.stdout
    assert "saving a run at exit failed" not in proc.stderr, proc.stderr[-3000:]
    # (the close's log line said "exiting with 143" in a session too)
    assert ("saved at step 3; stopping" if interactive else "saved at step 3; exiting with 143"
            ) in proc.stderr, proc.stderr[-3000:]
    assert "body starts from 3" in _resumed_from(tmp_path, _APP_EXITS)


_SLOW_SAVE = """\
import os, signal, sys, threading, time
from resumable import checkpointed, _signals
from resumable._decorator import _Execution
os.environ["RESUMABLE_TERM_TIMEOUT"] = "2"

class Slow:  # pickled until the watchdog's first deadline has passed by a second
    def __init__(self, i):
        self.i = i
    def __reduce__(self):
        if _signals._term_at is not None:
            until = _signals._term_at + _signals.term_timeout() + 1.0
            while time.monotonic() < until:
                threading.Event().wait(until - time.monotonic())
        return (Slow, (self.i,))

@checkpointed(store=sys.argv[1], run_id="a", every=1000)
def a(n, *, state=None):
    print("body starts from", state and state.i, flush=True)
    s = state or Slow(0)
    while s.i < n:
        s = Slow(s.i + 1)
        yield s

if sys.argv[2] == "resume":
    it = a.iter(10)
    next(it)
    it.close()
    sys.exit(0)
it = a.iter(10)
next(it); next(it); next(it)
def hook(frame, event, arg):  # the SIGTERM as the close's save begins
    if event == "call" and frame.f_code is _Execution._checkpoint.__code__:
        sys.setprofile(None)
        os.kill(os.getpid(), signal.SIGTERM)
sys.setprofile(hook)
if sys.argv[2] == "close":
    it.close()
    print("went on after close()", flush=True)
print("script over", flush=True)
"""


@pytest.mark.parametrize("how", ["close", "exit"])
def test_a_save_at_close_that_outlasts_the_timeout_is_not_cut(tmp_path: Path, how: str) -> None:
    """A closed iterator's save (close(), or the exit hook's) that took longer than
    $RESUMABLE_TERM_TIMEOUT: the watchdog took the run for a body that reached no yield
    and interrupted it in the middle of pickling; the state was lost."""
    proc = _run(tmp_path, _SLOW_SAVE, how)
    assert "reached no yield" not in proc.stderr, proc.stderr[-3000:]
    assert proc.returncode in (EXIT_SIGTERM, -signal.SIGTERM), proc.stderr[-3000:]
    assert "body starts from 3" in _resumed_from(tmp_path, _SLOW_SAVE)


_BREAK_SAVE_FAILS = """\
import os, signal, sys
from resumable import checkpointed
from resumable._decorator import _Execution

@checkpointed(store=sys.argv[1], run_id="a", every=1000)
def a(n, *, state=None):
    s = state or {"i": 0}
    while s["i"] < n:
        s["i"] += 1
        if s["i"] == 2:
            s["f"] = lambda: 0      # not picklable
        yield s

def hook(frame, event, arg):  # the SIGTERM as the close's save begins
    if event == "call" and frame.f_code is _Execution._checkpoint.__code__:
        sys.setprofile(None)
        os.kill(os.getpid(), signal.SIGTERM)

for s in a.iter(10):
    if s["i"] == 2:
        sys.setprofile(hook)
        break   # the finalizer closes the iterator; its save fails
print("went on after the break", flush=True)
"""


@pytest.mark.parametrize("interactive", [False, True], ids=["script", "session"])
def test_a_break_whose_save_fails_does_not_lose_the_sigterm(
    tmp_path: Path, interactive: bool
) -> None:
    """7451167 kept the save's error instead of sending the signal on; but a `break`'s
    finalizer drops the error (Python prints it), so nothing ended the program: it went
    on, exit 0, the SIGTERM lost."""
    proc = _run(tmp_path, _BREAK_SAVE_FAILS, interactive=interactive)
    assert "SerializationError" in proc.stderr, proc.stderr[-3000:]
    assert "went on after the break" not in proc.stdout, (proc.returncode, proc.stderr[-3000:])
    assert proc.returncode == -signal.SIGTERM, (proc.returncode, proc.stderr[-3000:])


_EXIT_SAVE_FAILS = """\
import os, signal, sys
from resumable import checkpointed
from resumable._decorator import _Execution

@checkpointed(store=sys.argv[1], run_id="a", every=1000)
def a(n, *, state=None):
    s = state or {"i": 0}
    while s["i"] < n:
        s["i"] += 1
        if s["i"] == 2:
            s["f"] = lambda: 0      # not picklable
        yield s

it = a.iter(10)
next(it); next(it)
def hook(frame, event, arg):  # the SIGTERM as the exit hook begins to close the iterator
    if event == "call" and frame.f_code is _Execution.close_at_exit.__code__:
        sys.setprofile(None)
        os.kill(os.getpid(), signal.SIGTERM)
if sys.argv[2] == "sigterm":
    sys.setprofile(hook)
print("script over", flush=True)
"""


@pytest.mark.parametrize("signal_sent", [True, False], ids=["sigterm", "none"])
def test_a_sigterm_whose_exit_time_save_fails_exits_with_the_errors_code(
    tmp_path: Path, signal_sent: bool
) -> None:
    """The exit hook's save of an open iterator fails (SerializationError) after a SIGTERM:
    the exit was 143, which a pod failure policy takes for "saved, retry"; a call in the
    same case exits 70. Without a SIGTERM the script's own status stands (0)."""
    proc = _run(tmp_path, _EXIT_SAVE_FAILS, "sigterm" if signal_sent else "none")
    assert "saving a run at exit failed" in proc.stderr, proc.stderr[-3000:]
    assert proc.returncode == (EXIT_SERIALIZATION if signal_sent else 0), (
        proc.returncode, proc.stderr[-3000:])
