"""Review 63 (of cf78c09 and 6027589): a closed iterator's failed save and the exit
status, memory a kept error held, and what counts as the application's handler at exit.

Real SIGTERMs to real child processes; each child chooses its moment with a profile hook
on a function's code.
"""

from __future__ import annotations

import signal
from pathlib import Path

import pytest

from resumable._errors import EXIT_SERIALIZATION
from tests.test_sigterm_review59 import _run

_UNPICKLABLE = """\
import gc, os, signal, sys, threading, weakref
from resumable import checkpointed
from resumable._decorator import _Execution
from resumable._errors import SerializationError

@checkpointed(store=sys.argv[1], run_id="a", every=1000)
def a(n, *, state=None):
    s = state or {"i": 0}
    try:
        while s["i"] < n:
            s["i"] += 1
            if s["i"] == 2:
                s["f"] = lambda: 0      # not picklable
            yield s
    finally:
        if sys.argv[2] == "cleanup-raises":
            raise RuntimeError("the body's cleanup failed too")

def sigterm_at(code):  # a SIGTERM as the function of that code is called
    def hook(frame, event, arg):
        if event == "call" and frame.f_code is code:
            sys.setprofile(None)
            os.kill(os.getpid(), signal.SIGTERM)
    sys.setprofile(hook)
"""

_BREAK = _UNPICKLABLE + """
for s in a.iter(10):
    if s["i"] == 2:
        sigterm_at(_Execution._checkpoint.__code__)
        break   # the finalizer closes the iterator; its save fails, then the cleanup
print("went on after the break", flush=True)
"""


def test_a_break_whose_save_and_cleanup_fail_does_not_lose_the_sigterm(tmp_path: Path) -> None:
    """cf78c09 sent the SIGTERM on once Python dropped the save's error; with the body's
    cleanup failing too, Python dropped another error, and the program went on (exit 0)."""
    proc = _run(tmp_path, _BREAK, "cleanup-raises")
    assert "went on after the break" not in proc.stdout, (proc.returncode, proc.stderr[-3000:])
    assert proc.returncode == -signal.SIGTERM, (proc.returncode, proc.stderr[-3000:])


_DURING_SCRIPT = _UNPICKLABLE + """
it = a.iter(10)   # a module global: the exit hook closes it, not the unwinding
next(it); next(it)
os.kill(os.getpid(), signal.SIGTERM)   # the consumer works on state 2
threading.Event().wait(60)
print("consumer not stopped", flush=True)
"""


@pytest.mark.parametrize("codes", ["1", "0"])
def test_an_exit_time_save_that_fails_after_a_sigterm_in_the_script_says_so(
    tmp_path: Path, codes: str
) -> None:
    """The SIGTERM stopped the consumer during the script; the exit hook's save of the
    iterator then failed: exit 143 ("saved, retry"), not 70 (or Python's plain 1 with
    $RESUMABLE_EXIT_CODES=0, as a call's error gives)."""
    proc = _run(tmp_path, _DURING_SCRIPT, "plain", env={"RESUMABLE_EXIT_CODES": codes})
    assert "saving a run at exit failed" in proc.stderr, proc.stderr[-3000:]
    assert proc.returncode == (EXIT_SERIALIZATION if codes == "1" else 1), (
        proc.returncode, proc.stderr[-3000:])


_CAUGHT = _UNPICKLABLE + """
class Big:
    pass

it = a.iter(10)
next(it)
held = next(it)
held["big"] = Big()
ref = weakref.ref(held["big"])
del held
sigterm_at(_Execution._checkpoint.__code__)
try:
    it.close()
except SerializationError:
    print("the close's error caught", flush=True)
del it
gc.collect()
print("state freed:", ref() is None, flush=True)
"""


@pytest.mark.parametrize("interactive", [False, True], ids=["script", "session"])
def test_a_caught_close_error_does_not_keep_the_state_alive(
    tmp_path: Path, interactive: bool
) -> None:
    """The run kept what it ended with (its error, whose traceback holds the body's frames
    and so the state) for as long as it stayed in the SIGTERM's books: in a script until
    the next SIGTERM (older); in a session for good (cf78c09)."""
    proc = _run(tmp_path, _CAUGHT, "plain", interactive=interactive)
    assert "the close's error caught" in proc.stdout, proc.stderr[-3000:]
    assert "state freed: True" in proc.stdout, (proc.stdout, proc.stderr[-3000:])


_BODY_EXITS_AT_CLOSE = """\
import atexit, sys
atexit.register(lambda: print("the program's atexit function ran", flush=True))
from resumable import checkpointed

@checkpointed(store=sys.argv[1], run_id="a", every=1000)
def a(n, *, state=None):
    s = state or 0
    try:
        while s < n:
            s += 1
            yield s
    finally:
        sys.exit(3)   # the body's own teardown, as the exit hook closes it

it = a.iter(10)
next(it); next(it)
print("script over", flush=True)
"""


def test_a_body_that_exits_as_the_exit_hook_closes_it_leaves_the_status_alone(
    tmp_path: Path
) -> None:
    """No SIGTERM at all: 6027589 took any SystemExit out of an exit-time close for the
    application's SIGTERM handler's, exited 3 at once and skipped the program's own atexit
    function."""
    proc = _run(tmp_path, _BODY_EXITS_AT_CLOSE)
    assert proc.returncode == 0, (proc.returncode, proc.stderr[-3000:])
    assert "the program's atexit function ran" in proc.stdout, proc.stdout


_KEYBOARD_INTERRUPT = """\
import os, signal, sys
signal.signal(signal.SIGTERM, signal.default_int_handler)   # SIGTERM -> KeyboardInterrupt
from resumable import checkpointed
from resumable._decorator import _Execution

@checkpointed(store=sys.argv[1], run_id="a", every=1000)
def a(n, *, state=None):
    s = state or 0
    while s < n:
        s += 1
        yield s

it = a.iter(10)
next(it); next(it)
def hook(frame, event, arg):  # the SIGTERM as the exit hook closes the iterator
    if event == "call" and frame.f_code is _Execution.close_at_exit.__code__:
        sys.setprofile(None)
        os.kill(os.getpid(), signal.SIGTERM)
sys.setprofile(hook)
print("script over", flush=True)
"""


def test_an_application_handler_raising_keyboardinterrupt_at_exit_exits_130(
    tmp_path: Path
) -> None:
    """6027589 gave any non-SystemExit exception of the application's handler at exit
    Python's status for an error, 1; a KeyboardInterrupt ends a script as SIGINT does."""
    proc = _run(tmp_path, _KEYBOARD_INTERRUPT)
    assert proc.returncode == 128 + signal.SIGINT, (proc.returncode, proc.stderr[-3000:])


_BEHIND_ANOTHER_EXIT_HOOK = """\
import os, signal, sys, threading, time
from resumable import checkpointed, _signals
os.environ["RESUMABLE_TERM_TIMEOUT"] = "1"

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
it = a.iter(10)
next(it); next(it); next(it)   # the consumer holds 3; every=1000: nothing saved yet

def other_exit_hook():  # another library's (a process pool's join): registered after
    os.kill(os.getpid(), signal.SIGTERM)  # ours, it runs first, and outlasts the timeout
    give_up = time.monotonic() + 60
    while _signals._runs and time.monotonic() < give_up:
        threading.Event().wait(0.05)
    print("the other exit hook is done", flush=True)
threading._register_atexit(other_exit_hook)
print("script over", flush=True)
"""


def test_an_iterator_left_open_behind_a_slow_exit_hook_is_saved(tmp_path: Path) -> None:
    """The SIGTERM came as another library's exit hook began, and that hook outlasted
    $RESUMABLE_TERM_TIMEOUT: the watchdog interrupted the main thread, the hook under way
    took the Terminated, ours never ran, and the state the iterator held was lost."""
    proc = _run(tmp_path, _BEHIND_ANOTHER_EXIT_HOOK, "run")
    assert proc.returncode == 143, (proc.returncode, proc.stderr[-3000:])
    assert "the other exit hook is done" in proc.stdout, proc.stderr[-3000:]
    assert "reached no yield" not in proc.stderr, proc.stderr[-3000:]
    resumed = _run(tmp_path, _BEHIND_ANOTHER_EXIT_HOOK, "resume")
    assert "body starts from 3" in resumed.stdout, (resumed.stdout, proc.stderr[-3000:])


_TWO_OPEN = """\
import os, signal, sys, threading, time
from resumable import checkpointed, _signals
from resumable._decorator import _Execution
os.environ["RESUMABLE_TERM_TIMEOUT"] = "2"

class State:  # argv[3] "slow": pickled until the watchdog's first deadline has passed by 1 s
    def __init__(self, i):
        self.i = i
    def __reduce__(self):
        if sys.argv[3] == "slow" and _signals._term_at is not None:
            until = _signals._term_at + _signals.term_timeout() + 1.0
            while time.monotonic() < until:
                threading.Event().wait(until - time.monotonic())
        return (State, (self.i,))

@checkpointed(store=sys.argv[1], run_id="a", every=1000)
def a(n, *, state=None):
    print("a starts from", state and state.i, flush=True)
    s = state or State(0)
    while s.i < n:
        s = State(s.i + 1)
        yield s

@checkpointed(store=sys.argv[1], run_id="b", every=1000)
def b(n, *, state=None):
    print("b starts from", state, flush=True)
    s = state or 0
    while s < n:
        s += 1
        yield s

if sys.argv[2] == "resume":
    for f in (a, b):
        it = f.iter(10)
        next(it)
        it.close()
    sys.exit(0)
if sys.argv[4] == "closed-first":
    closed = a.iter(10)
    next(closed); next(closed); next(closed)
    other = b.iter(10)
    next(other)
else:
    other = b.iter(10)
    next(other)
    closed = a.iter(10)
    next(closed); next(closed); next(closed)
def hook(frame, event, arg):  # the SIGTERM as the close's save begins
    if event == "call" and frame.f_code is _Execution._checkpoint.__code__:
        sys.setprofile(None)
        os.kill(os.getpid(), signal.SIGTERM)
sys.setprofile(hook)
closed.close()
print("went on after close()", flush=True)
threading.Event().wait(30)   # the consumer of b works on 1
print("the consumer of b was not stopped", flush=True)
"""


@pytest.mark.parametrize("save", ["fast", "slow"])
@pytest.mark.parametrize("order", ["closed-first", "closed-last"])
def test_an_iterator_closed_beside_another_open_one_saves_both(
    tmp_path: Path, save: str, order: str
) -> None:
    """Two iterators open in the main thread, one closed as the SIGTERM comes. Opened
    first, the closing one was taken for a body that had called the other, which was not
    told: its consumer went on, exit 0. Opened last, its slow save was interrupted by the
    watchdog, which meant to stop the other's consumer: its state was lost."""
    proc = _run(tmp_path, _TWO_OPEN, "run", save, order)
    assert proc.returncode == 143, (proc.returncode, proc.stderr[-3000:])
    assert "went on after close()" not in proc.stdout, proc.stderr[-3000:]
    assert "reached no yield" not in proc.stderr, proc.stderr[-3000:]
    resumed = _run(tmp_path, _TWO_OPEN, "resume", save, order)
    assert "a starts from 3" in resumed.stdout, (resumed.stdout, proc.stderr[-3000:])
    assert "b starts from 1" in resumed.stdout, (resumed.stdout, proc.stderr[-3000:])
