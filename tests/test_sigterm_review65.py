"""Review 65 (of c7742a9): a call's slow save beside an open iterator, and a break beside
another open iterator in a script that ends before the timeout.

Real SIGTERMs to real child processes; each child chooses its moment with a profile hook
on a function's code or sends the signal from the body, and a slow save waits for the
watchdog's own deadlines.
"""

from __future__ import annotations

from pathlib import Path

from resumable._errors import EXIT_SIGTERM
from tests.test_sigterm_review59 import _run

_HEAD = """\
import os, signal, sys, threading, time
from resumable import checkpointed, _signals
from resumable._decorator import _Execution
os.environ["RESUMABLE_TERM_TIMEOUT"] = "1"

class Slow:  # armed: pickled until the watchdog's second deadline has passed by half a timeout
    armed = False
    def __reduce__(self):
        if Slow.armed and _signals._term_at is not None:
            until = _signals._term_at + 2.5 * _signals.term_timeout()
            while time.monotonic() < until:
                threading.Event().wait(until - time.monotonic())
        return (Slow, ())

STOP_AT = {}
def counter(name):
    @checkpointed(store=sys.argv[1], run_id=name, every=1000)
    def f(n, *, state=None):
        print(name, "starts from", state and state["i"], flush=True)
        s = state or {"i": 0, "h": Slow()}
        while s["i"] < n:
            s["i"] += 1
            if s["i"] == STOP_AT.get(name):
                os.kill(os.getpid(), signal.SIGTERM)   # the SIGTERM as this body works
            yield s
    return f

a, b, c = counter("a"), counter("b"), counter("c")
if sys.argv[2] == "resume":
    for f in (a, b, c):
        it = f.iter(10)
        next(it)
        it.close()
    sys.exit(0)
"""


def _resumed(tmp_path: Path, code: str) -> str:
    proc = _run(tmp_path, code, "resume")
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc.stdout


_CALL_BESIDE_ITERATOR = _HEAD + """
it = b.iter(10)
next(it); next(it)          # the consumer holds 2
STOP_AT["c"] = 3
Slow.armed = True           # c's save at the SIGTERM outlasts twice the timeout
c(10)                       # a call in the consumer's work
print("went on after the call", flush=True)
"""


def test_a_calls_slow_save_beside_an_open_iterator_is_not_cut(tmp_path: Path) -> None:
    """c7742a9 let the timeout interrupt the main thread after a second timeout while a
    run there saved, to stop the open iterator's consumer: the Terminated landed in the
    call's save, and the call's state was lost."""
    proc = _run(tmp_path, _CALL_BESIDE_ITERATOR, "run")
    assert proc.returncode == EXIT_SIGTERM, (proc.returncode, proc.stderr[-3000:])
    assert "went on after the call" not in proc.stdout
    assert "reached no yield" not in proc.stderr, proc.stderr[-3000:]
    resumed = _resumed(tmp_path, _CALL_BESIDE_ITERATOR)
    assert "c starts from 3" in resumed and "b starts from 2" in resumed, resumed


_BREAK_THEN_END = _HEAD + """
other = b.iter(10)
next(other); next(other)        # the consumer holds 2
def hook(frame, event, arg):  # the SIGTERM as the break's close saves
    if event == "call" and frame.f_code is _Execution._checkpoint.__code__:
        sys.setprofile(None)
        os.kill(os.getpid(), signal.SIGTERM)
for s in a.iter(10):
    if s["i"] == 2:
        sys.setprofile(hook)
        break                   # the finalizer closes it as the SIGTERM comes
print("the script ends", flush=True)
"""


def test_a_break_beside_an_open_iterator_then_the_scripts_end_exits_143(
    tmp_path: Path
) -> None:
    """Both states were saved (the exit hook closed the other iterator), but the signal
    the last close sent on was absorbed during the shutdown, and the exit was 0."""
    proc = _run(tmp_path, _BREAK_THEN_END, "run")
    assert proc.returncode == EXIT_SIGTERM, (proc.returncode, proc.stderr[-3000:])
    resumed = _resumed(tmp_path, _BREAK_THEN_END)
    assert "a starts from 2" in resumed and "b starts from 2" in resumed, resumed
