"""Review 66 (of 22c0e66): a second SIGTERM after the script's end no longer overrides the
status the program exits with, and the watchdog looks again before it interrupts the
main thread a second time.

Real SIGTERMs to real child processes (review 66's reproducers); each child chooses its
moment with a profile hook on a function's code, or waits for the watchdog's deadlines.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from resumable._errors import EXIT_SIGTERM
from tests.test_sigterm_review59 import _run

_HANDLER_EXITS_0 = """\
# An application SIGTERM handler (set before the first run) that deliberately exits 0.
# The first SIGTERM comes as a call's body works; the handler runs after the save and
# exits 0. A second SIGTERM comes as the library's exit hook begins (profile hook on
# _signals._at_exit's code): the status should stay 0 (the handler's).
import os, signal, sys
from resumable import checkpointed, _signals
os.environ["RESUMABLE_TERM_TIMEOUT"] = "5"
def on_term(signum, frame):
    print("app handler: exiting 0", flush=True)
    sys.exit(0)
signal.signal(signal.SIGTERM, on_term)

@checkpointed(store=sys.argv[1], run_id="a", every=1000)
def f(n, *, state=None):
    s = state or 0
    while s < n:
        s += 1
        if s == 3:
            os.kill(os.getpid(), signal.SIGTERM)   # the first SIGTERM, as the body works
        yield s

def hook(frame, event, arg, code=_signals._at_exit.__code__, os=os, sys=sys, sig=signal.SIGTERM):
    if event == "call" and frame.f_code is code:
        sys.setprofile(None)
        print("second SIGTERM as the exit hook begins", flush=True)
        os.kill(os.getpid(), sig)     # a second SIGTERM as the exit hook begins
try:
    f(10)
finally:
    sys.setprofile(hook)
"""

_CAUGHT_EXITS_3 = """\
# An application handler that returns (it only records the request), set before the
# first run. The first SIGTERM stops a call (saved); the program catches the Terminated
# and exits 3 itself. A second SIGTERM as the library's exit hook begins: the handler
# (which ignores it) should decide, and the status stay 3.
import os, signal, sys
from resumable import checkpointed, _signals
os.environ["RESUMABLE_TERM_TIMEOUT"] = "5"
requests = []
def on_term(signum, frame):
    requests.append(signum)
    print("app handler: noted, returning", flush=True)
signal.signal(signal.SIGTERM, on_term)

@checkpointed(store=sys.argv[1], run_id="a", every=1000)
def f(n, *, state=None):
    s = state or 0
    while s < n:
        s += 1
        if s == 3:
            os.kill(os.getpid(), signal.SIGTERM)
        yield s

def hook(frame, event, arg, code=_signals._at_exit.__code__, os=os, sys=sys, sig=signal.SIGTERM):
    if event == "call" and frame.f_code is code:
        sys.setprofile(None)
        print("second SIGTERM as the exit hook begins", flush=True)
        os.kill(os.getpid(), sig)
try:
    f(10)
except SystemExit as e:
    print("caught", type(e).__name__, "- exiting 3", flush=True)
    sys.setprofile(hook)
    sys.exit(3)
"""


def test_a_second_sigterm_at_exit_leaves_the_handlers_status(tmp_path: Path) -> None:
    """The application's handler exited 0 after the first SIGTERM's save; a second SIGTERM
    as the exit hook began made it 143 (22c0e66)."""
    proc = _run(tmp_path, _HANDLER_EXITS_0, "run")
    assert "app handler: exiting 0" in proc.stdout, proc.stderr[-3000:]
    assert proc.returncode == 0, (proc.returncode, proc.stderr[-3000:])


def test_a_second_sigterm_at_exit_leaves_the_programs_own_status(tmp_path: Path) -> None:
    """The program caught the Terminated and exited 3 itself; a second SIGTERM as the exit
    hook began made it 143 (22c0e66)."""
    proc = _run(tmp_path, _CAUGHT_EXITS_3, "run")
    assert "exiting 3" in proc.stdout, proc.stderr[-3000:]
    assert proc.returncode == 3, (proc.returncode, proc.stderr[-3000:])


_STALE = """\
# Two iterators open in the main thread; `a` is closed explicitly as the SIGTERM comes
# (profile hook on _Execution._checkpoint: the SIGTERM as the close's save begins); a's
# pickle lasts 1.5 timeouts (TERM_TIMEOUT=1): still saving at the watchdog's first
# deadline, done before its second. The close then stops the main thread's consumer
# (Terminated out of a.close()); the program's finally does its own cleanup (1 timeout
# of waiting on an Event, e.g. a pool's join), then closes b. README (review 64): the
# main thread is stopped once per SIGTERM, a program's finally runs to its end.
import os, signal, sys, threading, time
from resumable import checkpointed, _signals
from resumable._decorator import _Execution
os.environ["RESUMABLE_TERM_TIMEOUT"] = "1"
class Slow:
    armed = False
    def __reduce__(self):
        if Slow.armed and _signals._term_at is not None:
            until = _signals._term_at + 1.5 * _signals.term_timeout()
            while time.monotonic() < until:
                threading.Event().wait(until - time.monotonic())
            print("a's slow pickle done", flush=True)
        return (Slow, ())
def counter(name):
    @checkpointed(store=sys.argv[1], run_id=name, every=1000)
    def f(n, *, state=None):
        print(name, "starts from", state and state["i"], flush=True)
        s = state or {"i": 0, "h": Slow() if name == "a" else None}
        while s["i"] < n:
            s["i"] += 1
            yield s
    return f
a, b = counter("a"), counter("b")
if sys.argv[2] == "resume":
    for f in (a, b):
        it = f.iter(10); next(it); it.close()
    sys.exit(0)
def hook(frame, event, arg):
    if event == "call" and frame.f_code is _Execution._checkpoint.__code__:
        sys.setprofile(None)
        os.kill(os.getpid(), signal.SIGTERM)
other = b.iter(10)
next(other); next(other)
ai = a.iter(10)
next(ai); next(ai)
try:
    Slow.armed = True
    sys.setprofile(hook)
    ai.close()
    print("close returned", flush=True)
finally:
    print("finally: cleanup begins", flush=True)
    until = _signals._term_at + 2.5 * _signals.term_timeout()
    while time.monotonic() < until:          # the program's own cleanup (a join, say)
        threading.Event().wait(until - time.monotonic())
    print("finally: cleanup done, closing b", flush=True)
    other.close()
    print("finally: b closed", flush=True)
"""


def test_the_programs_finally_after_a_slow_close_is_not_interrupted(tmp_path: Path) -> None:
    """A close saved for 1.5 timeouts beside another open iterator, then stopped the
    consumer; the watchdog, deciding at its first deadline, interrupted the program's
    finally at its second (c7742a9): the cleanup never finished."""
    proc = _run(tmp_path, _STALE, "run")
    assert proc.returncode == EXIT_SIGTERM, (proc.returncode, proc.stderr[-3000:])
    assert "finally: b closed" in proc.stdout, (proc.stdout, proc.stderr[-3000:])
    assert "reached no yield" not in proc.stderr, proc.stderr[-3000:]
    resumed = _run(tmp_path, _STALE, "resume")
    assert "a starts from 2" in resumed.stdout and "b starts from 2" in resumed.stdout, (
        resumed.stdout)


# Review 67 (of 551adfc): that second look must still interrupt when the consumer was
# never stopped (a break's close), or when the close's save still runs.

_BREAK_SLOW = """\
# Two iterators open in the main thread; `a` is left by a `break` (its finalizer closes it)
# as the SIGTERM comes (profile hook on _Execution._checkpoint: the SIGTERM as the
# close's save begins). a's pickle lasts 1.5 timeouts (TERM_TIMEOUT=1): still saving at
# the watchdog's first deadline, done before its second. A break stops no consumer
# (README: "a break (a finalizer) leaves the other consumer to the timeout"). The
# consumer then works on b's state 2 for a long while (an Event wait of 30 s).
# Expected: the timeout stops the consumer, b's state 2 is saved, exit 143.
import os, signal, sys, threading, time
from resumable import checkpointed, _signals
from resumable._decorator import _Execution
os.environ["RESUMABLE_TERM_TIMEOUT"] = "1"
class Slow:
    armed = False
    def __reduce__(self):
        if Slow.armed and _signals._term_at is not None:
            until = _signals._term_at + 1.5 * _signals.term_timeout()
            while time.monotonic() < until:
                threading.Event().wait(until - time.monotonic())
            print("a's slow pickle done", flush=True)
        return (Slow, ())
def counter(name):
    @checkpointed(store=sys.argv[1], run_id=name, every=1000)
    def f(n, *, state=None):
        print(name, "starts from", state and state["i"], flush=True)
        s = state or {"i": 0, "h": Slow() if name == "a" else None}
        while s["i"] < n:
            s["i"] += 1
            yield s
    return f
a, b = counter("a"), counter("b")
if sys.argv[2] == "resume":
    for f in (a, b):
        it = f.iter(10); next(it); it.close()
    sys.exit(0)
def hook(frame, event, arg):
    if event == "call" and frame.f_code is _Execution._checkpoint.__code__:
        sys.setprofile(None)
        os.kill(os.getpid(), signal.SIGTERM)
other = b.iter(10)
next(other); next(other)          # the consumer holds b's 2
for s in a.iter(10):
    if s["i"] == 2:
        Slow.armed = True
        sys.setprofile(hook)
        break                     # the finalizer closes a as the SIGTERM comes
print("after the break: the consumer works on b's 2", flush=True)
threading.Event().wait(30)        # the consumer's work on b's state
print("consumer's work done (not stopped)", flush=True)
"""

_FINALLY_CLOSE_HANGS = """\
# Two iterators open in the main thread (b holds 2, x holds 2). A SIGTERM while the
# consumer works stops it (Terminated); the program's finally closes x first, and x's
# save hangs for ever (a pickle that never ends), then would close b.
# README (review 64): "A close whose save hangs beside another open iterator kept the
# timeout off the main thread for good, and the other state was lost: the exemption
# lapses after a second timeout." Expected: b's state 2 saved, exit 143.
import os, signal, sys, threading
from resumable import checkpointed
os.environ["RESUMABLE_TERM_TIMEOUT"] = "1"
class Hangs:
    armed = False
    def __reduce__(self):
        if Hangs.armed:
            print("x's save hangs", flush=True)
            threading.Event().wait()   # this save never ends
        return (Hangs, ())
def counter(name):
    @checkpointed(store=sys.argv[1], run_id=name, every=1000)
    def f(n, *, state=None):
        print(name, "starts from", state and state["i"], flush=True)
        s = state or {"i": 0, "h": Hangs() if name == "x" else None}
        while s["i"] < n:
            s["i"] += 1
            yield s
    return f
x, b = counter("x"), counter("b")
if sys.argv[2] == "resume":
    for f in (x, b):
        it = f.iter(10); next(it); it.close()
    sys.exit(0)
other = b.iter(10)
next(other); next(other)       # its consumer holds 2
closed = x.iter(10)
next(closed); next(closed)
try:
    os.kill(os.getpid(), signal.SIGTERM)   # stops the consumer (Terminated)
    threading.Event().wait(60)
finally:
    print("finally: closing x", flush=True)
    Hangs.armed = True
    closed.close()
    print("finally: closing b", flush=True)
    other.close()
"""


def test_the_consumer_beside_a_slow_break_is_stopped_and_saved(tmp_path: Path) -> None:
    """A break's slow save beside another open iterator: no one stopped the consumer, and
    551adfc's second look skipped the interrupt once the save had ended; the process left
    by the last timeout with the other state (2) unsaved."""
    proc = _run(tmp_path, _BREAK_SLOW, "run")
    assert proc.returncode == EXIT_SIGTERM, (proc.returncode, proc.stderr[-3000:])
    assert "not stopped" not in proc.stdout
    resumed = _run(tmp_path, _BREAK_SLOW, "resume")
    assert "a starts from 2" in resumed.stdout and "b starts from 2" in resumed.stdout, (
        resumed.stdout, proc.stderr[-3000:])


def test_a_hanging_close_in_a_finally_does_not_keep_the_other_state_unsaved(
    tmp_path: Path
) -> None:
    """The consumer was stopped; the program's finally then closed an iterator whose save
    hangs for ever: 551adfc took the stopped consumer for a reason not to interrupt, and
    the other iterator (2) was never closed and saved."""
    proc = _run(tmp_path, _FINALLY_CLOSE_HANGS, "run")
    assert proc.returncode == EXIT_SIGTERM, (proc.returncode, proc.stderr[-3000:])
    resumed = _run(tmp_path, _FINALLY_CLOSE_HANGS, "resume")
    assert "b starts from 2" in resumed.stdout, (resumed.stdout, proc.stderr[-3000:])


# Review 68 (of 3d953e6): the watchdog's second interrupt must not cut the exit hook's
# save at the script's end, nor a later close's save or a body's cleanup in the program's
# finally after the save it waited for had ended.

_EXIT_CLOSE_SLOW = """\
# Two f.iter iterators left open at the script's end (x holds 2, y holds 2). Our exit hook
# closes x first; the SIGTERM comes as x's save begins (profile hook on _checkpoint, armed
# at the exit hook's start). x's pickle lasts until term_at + 2.5 timeouts (T=1): within the
# 3 timeouts, and there is no consumer left to stop (the script is over; our exit hook
# closes y next). Expected: x and y both saved, exit 143.
import os, signal, sys, threading, time
from resumable import checkpointed, _signals
from resumable._decorator import _Execution
os.environ["RESUMABLE_TERM_TIMEOUT"] = "1"
class Slow:
    armed = False
    def __reduce__(self):
        if Slow.armed and _signals._term_at is not None:
            until = _signals._term_at + 2.5 * _signals.term_timeout()
            while time.monotonic() < until:
                threading.Event().wait(until - time.monotonic())
            print("x's slow pickle done", flush=True)
        return (Slow, ())
def counter(name):
    @checkpointed(store=sys.argv[1], run_id=name, every=1000)
    def f(n, *, state=None):
        print(name, "starts from", state and state["i"], flush=True)
        s = state or {"i": 0, "h": Slow() if name == "x" else None}
        while s["i"] < n:
            s["i"] += 1
            yield s
    return f
x, y = counter("x"), counter("y")
if sys.argv[2] == "resume":
    for f in (x, y):
        it = f.iter(10); next(it); it.close()
    sys.exit(0)
xi = x.iter(10); next(xi); next(xi)
yi = y.iter(10); next(yi); next(yi)
def hook(frame, event, arg):
    if event == "call" and frame.f_code is _signals._at_exit.__code__:
        Slow.armed = True
    elif Slow.armed and event == "call" and frame.f_code is _Execution._checkpoint.__code__:
        sys.setprofile(None)
        print("SIGTERM as the exit hook's save of x begins", flush=True)
        os.kill(os.getpid(), signal.SIGTERM)
sys.setprofile(hook)
print("script over", flush=True)
"""

_FINALLY_CLOSES_MORE = """\
# Three f.iter iterators open in the main thread (a, c, b each hold 2). `a` is closed
# explicitly as the SIGTERM comes (profile hook on _Execution._checkpoint); a's pickle
# lasts 1.5 timeouts (T=1), so the watchdog waits at its first deadline. a's close then
# stops the consumer (Terminated). The program's finally closes c -- c's save is quick,
# but c's body has its own cleanup (a `finally` that joins a worker, until 2.5 T) -- and
# then b. MODE=save: instead, c's own pickle runs until 2.5 T (within the 3 T).
# README: the main thread is stopped once per SIGTERM, a program's finally that closes
# its iterators after the Terminated runs to its end (review 66's case, with c's close).
import os, signal, sys, threading, time
from resumable import checkpointed, _signals
from resumable._decorator import _Execution
os.environ["RESUMABLE_TERM_TIMEOUT"] = "1"
MODE = os.environ.get("MODE", "cleanup")
def until(k):
    end = _signals._term_at + k * _signals.term_timeout()
    while time.monotonic() < end:
        threading.Event().wait(end - time.monotonic())
class Slow:
    armed = None
    def __init__(self, name): self.name = name
    def __reduce__(self):
        if Slow.armed == self.name and _signals._term_at is not None:
            until(1.5 if self.name == "a" else 2.5)
            print(self.name + "'s slow pickle done", flush=True)
        return (Slow, (self.name,))
def counter(name):
    @checkpointed(store=sys.argv[1], run_id=name, every=1000)
    def f(n, *, state=None):
        print(name, "starts from", state and state["i"], flush=True)
        s = state or {"i": 0, "h": Slow(name)}
        try:
            while s["i"] < n:
                s["i"] += 1
                yield s
        finally:
            if name == "c" and MODE == "cleanup" and _signals._term_at is not None:
                until(2.5)
                print("c's body cleanup done", flush=True)
    return f
a, c, b = counter("a"), counter("c"), counter("b")
if sys.argv[2] == "resume":
    for f in (a, c, b):
        it = f.iter(10); next(it); it.close()
    sys.exit(0)
def hook(frame, event, arg):
    if event == "call" and frame.f_code is _Execution._checkpoint.__code__:
        sys.setprofile(None)
        os.kill(os.getpid(), signal.SIGTERM)
bi = b.iter(10); next(bi); next(bi)
ci = c.iter(10); next(ci); next(ci)
ai = a.iter(10); next(ai); next(ai)
try:
    Slow.armed = "a"
    sys.setprofile(hook)
    ai.close()
    print("close returned", flush=True)
finally:
    print("finally: closing c", flush=True)
    if MODE == "save":
        Slow.armed = "c"
    ci.close()
    print("finally: c closed, closing b", flush=True)
    bi.close()
    print("finally: b closed", flush=True)
"""


def test_the_exit_hooks_slow_save_beside_another_open_iterator_is_not_cut(
    tmp_path: Path
) -> None:
    """Two iterators left open at the script's end; the exit hook's save of the first
    outlasts two timeouts: the watchdog's second interrupt, meant to stop a consumer,
    landed in that save (there is no consumer after the script's end), and it was lost."""
    proc = _run(tmp_path, _EXIT_CLOSE_SLOW, "run")
    assert proc.returncode == EXIT_SIGTERM, (proc.returncode, proc.stderr[-3000:])
    assert "reached no yield" not in proc.stderr, proc.stderr[-3000:]
    resumed = _run(tmp_path, _EXIT_CLOSE_SLOW, "resume")
    assert "x starts from 2" in resumed.stdout and "y starts from 2" in resumed.stdout, (
        resumed.stdout, proc.stderr[-3000:])


@pytest.mark.parametrize("mode", ["cleanup", "save"])
def test_the_programs_finally_is_not_cut_after_the_save_waited_for(
    tmp_path: Path, mode: str
) -> None:
    """The watchdog waited for one close's save, which ended and stopped the consumer; the
    program's finally then closed another iterator, whose save (or whose body's cleanup)
    ran at the second deadline: 3d953e6 took it for the save it had waited for, and cut
    it (that state lost, or the finally cut short)."""
    proc = _run(tmp_path, _FINALLY_CLOSES_MORE, "run", env={"MODE": mode})
    assert proc.returncode == EXIT_SIGTERM, (proc.returncode, proc.stderr[-3000:])
    assert "finally: b closed" in proc.stdout, (proc.stdout, proc.stderr[-3000:])
    resumed = _run(tmp_path, _FINALLY_CLOSES_MORE, "resume")
    for name in "acb":
        assert f"{name} starts from 2" in resumed.stdout, (resumed.stdout, proc.stderr[-3000:])


# Review 69 (of af96048): the second interrupt is still owed while a close it waited for
# runs its body's cleanup, and to a consumer in an atexit function after our exit hook.

_BREAK_SLOW_CLEANUP = """\
# Two iterators open in the main thread; `a` is left by a `break` (its finalizer closes
# it) as the SIGTERM comes (profile hook on _Execution._checkpoint: the SIGTERM as the
# close's save begins). a's save is quick; a's *body* has a finally (its own cleanup, e.g.
# joining a worker) that lasts until term_at + 1.5 timeouts (T=1): under way at the
# watchdog's first deadline, over before its second. A break stops no consumer (README:
# "a break (a finalizer) leaves the other consumer to the timeout"). The consumer then
# works on b's state 2 for 30 s. Expected: the timeout stops the consumer, b's 2 saved,
# exit 143.
import os, signal, sys, threading, time
from resumable import checkpointed, _signals
from resumable._decorator import _Execution
os.environ["RESUMABLE_TERM_TIMEOUT"] = "1"
K = float(os.environ.get("K", "1.5"))
def until(k):
    end = _signals._term_at + k * _signals.term_timeout()
    while time.monotonic() < end:
        threading.Event().wait(end - time.monotonic())
def counter(name):
    @checkpointed(store=sys.argv[1], run_id=name, every=1000)
    def f(n, *, state=None):
        print(name, "starts from", state and state["i"], flush=True)
        s = state or {"i": 0}
        try:
            while s["i"] < n:
                s["i"] += 1
                yield s
        finally:
            if name == "a" and _signals._term_at is not None:
                until(K)
                print("a's body cleanup done", flush=True)
    return f
a, b = counter("a"), counter("b")
if sys.argv[2] == "resume":
    for f in (a, b):
        it = f.iter(10); next(it); it.close()
    sys.exit(0)
def hook(frame, event, arg):
    if event == "call" and frame.f_code is _Execution._checkpoint.__code__:
        sys.setprofile(None)
        os.kill(os.getpid(), signal.SIGTERM)
other = b.iter(10)
next(other); next(other)          # the consumer holds b's 2
for s in a.iter(10):
    if s["i"] == 2:
        sys.setprofile(hook)
        break                     # the finalizer closes a as the SIGTERM comes
print("after the break: the consumer works on b's 2", flush=True)
threading.Event().wait(30)
print("consumer's work done (not stopped)", flush=True)
"""

_CLOSE_CLEANUP_HANGS = """\
# Two iterators open in the main thread (b holds 2, a holds 2). `a` is closed explicitly
# as the SIGTERM comes (profile hook on _Execution._checkpoint: the SIGTERM as a's save
# begins). a's save is quick; a's body's own finally (a join on a worker that died, say)
# lasts until term_at + K timeouts (K=30: in effect it hangs). The program's finally would
# then close b. README: a body that does not reach its yield within the timeout is
# interrupted; "A close whose save hangs beside another open iterator ... the exemption
# lapses after a second timeout" (review 64). Expected: b's 2 saved, exit 143.
import os, signal, sys, threading, time
from resumable import checkpointed, _signals
from resumable._decorator import _Execution
os.environ["RESUMABLE_TERM_TIMEOUT"] = "1"
K = float(os.environ.get("K", "30"))
def until(k):
    end = _signals._term_at + k * _signals.term_timeout()
    while time.monotonic() < end:
        threading.Event().wait(end - time.monotonic())
def counter(name):
    @checkpointed(store=sys.argv[1], run_id=name, every=1000)
    def f(n, *, state=None):
        print(name, "starts from", state and state["i"], flush=True)
        s = state or {"i": 0}
        try:
            while s["i"] < n:
                s["i"] += 1
                yield s
        finally:
            if name == "a" and _signals._term_at is not None:
                print("a's body cleanup begins", flush=True)
                until(K)
                print("a's body cleanup done", flush=True)
    return f
a, b = counter("a"), counter("b")
if sys.argv[2] == "resume":
    for f in (a, b):
        it = f.iter(10); next(it); it.close()
    sys.exit(0)
def hook(frame, event, arg):
    if event == "call" and frame.f_code is _Execution._checkpoint.__code__:
        sys.setprofile(None)
        os.kill(os.getpid(), signal.SIGTERM)
bi = b.iter(10); next(bi); next(bi)
ai = a.iter(10); next(ai); next(ai)
try:
    sys.setprofile(hook)
    ai.close()
    print("close returned", flush=True)
finally:
    print("finally: closing b", flush=True)
    bi.close()
    print("finally: b closed", flush=True)
"""

_ATEXIT_BREAK = """\
# A consumer in the program's own atexit function (registered after the first run; README:
# "A consumer in the program's own atexit function is stopped at once, as during the
# script"). It opens b (holds 2) and a; leaves a by a `break` as the SIGTERM comes
# (profile hook on _Execution._checkpoint); a's pickle lasts until term_at + 1.5 T (T=1).
# A break stops no consumer; the timeout is to. The consumer then works on b's 2 for 30 s.
# Expected: the consumer stopped, b's 2 saved, exit 143.
import atexit, os, signal, sys, threading, time
from resumable import checkpointed, _signals
from resumable._decorator import _Execution
os.environ["RESUMABLE_TERM_TIMEOUT"] = "1"
class Slow:
    armed = False
    def __reduce__(self):
        if Slow.armed and _signals._term_at is not None:
            end = _signals._term_at + 1.5 * _signals.term_timeout()
            while time.monotonic() < end:
                threading.Event().wait(end - time.monotonic())
            print("a's slow pickle done", flush=True)
        return (Slow, ())
def counter(name):
    @checkpointed(store=sys.argv[1], run_id=name, every=1000)
    def f(n, *, state=None):
        print(name, "starts from", state and state["i"], flush=True)
        s = state or {"i": 0, "h": Slow() if name == "a" else None}
        while s["i"] < n:
            s["i"] += 1
            yield s
    return f
a, b, w = counter("a"), counter("b"), counter("w")
if sys.argv[2] == "resume":
    for f in (a, b):
        it = f.iter(10); next(it); it.close()
    sys.exit(0)
for _ in w.iter(2):   # a first run (the library's hooks are registered), finished
    pass
def hook(frame, event, arg):
    if event == "call" and frame.f_code is _Execution._checkpoint.__code__:
        sys.setprofile(None)
        os.kill(os.getpid(), signal.SIGTERM)
def late():
    bi = b.iter(10); next(bi); next(bi)
    for s in a.iter(10):
        if s["i"] == 2:
            Slow.armed = True
            sys.setprofile(hook)
            break
    print("atexit: after the break, works on b's 2", flush=True)
    threading.Event().wait(30)
    print("atexit: work done (not stopped)", flush=True)
atexit.register(late)
print("script over", flush=True)
"""


@pytest.mark.parametrize("code", [_BREAK_SLOW_CLEANUP, _CLOSE_CLEANUP_HANGS, _ATEXIT_BREAK],
                         ids=["break-slow-cleanup", "close-cleanup-hangs", "atexit-break"])
def test_the_other_iterator_is_saved_when_a_close_runs_long(tmp_path: Path, code: str) -> None:
    """af96048 counted a close as waited for only while its save ran, not through its
    body's cleanup, and made no second interrupt after the script's end: with a break's
    slow cleanup, a close's hanging cleanup, or a consumer in an atexit function, the other
    iterator's consumer was never stopped, and its state (2) was lost at the hard exit."""
    proc = _run(tmp_path, code, "run")
    assert proc.returncode == EXIT_SIGTERM, (proc.returncode, proc.stderr[-3000:])
    resumed = _run(tmp_path, code, "resume")
    assert "b starts from 2" in resumed.stdout, (resumed.stdout, proc.stderr[-3000:])
