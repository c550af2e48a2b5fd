"""Review 60 of b59b654: what a SIGTERM sent again after a closed iterator must not do
(replace a kept error, call the application's handler twice, vanish in an interactive
session), and a SIGTERM during the exit-time save.

Real SIGTERMs to real child processes; each child (review 60's reproducers) chooses its
moment with events or a profile hook.
"""

from __future__ import annotations

from pathlib import Path

from resumable._errors import EXIT_SERIALIZATION, EXIT_SIGTERM
from tests.test_sigterm_review59 import _run

_ERROR_KEPT = """\
import os, signal, sys, threading
from resumable import checkpointed, install_signal_handlers
install_signal_handlers()
store = sys.argv[1]
sent, w_at_2 = threading.Event(), threading.Event()

@checkpointed(store=store, run_id="w")
def w(n, *, state=None):
    s = state or 0
    while s < n:
        s += 1
        yield s

def consume():
    for s in w.iter(10):
        if s == 2:
            w_at_2.set()
            sent.wait(30)
            break   # closed after the SIGTERM

t = threading.Thread(target=consume)
t.start()

@checkpointed(store=store, run_id="m", every=1000)
def m(n, *, state=None):
    s = state or {"i": 0}
    while s["i"] < n:
        s["i"] += 1
        if s["i"] == 3:
            s["f"] = lambda: 0          # not picklable: the SIGTERM's save fails
            assert w_at_2.wait(30)
            os.kill(os.getpid(), signal.SIGTERM)
            sent.set()
            t.join(30)
        yield s
    return s

m(10)
"""

_AT_EXIT = """\
import os, signal, sys, threading
from resumable import checkpointed, install_signal_handlers
from resumable._decorator import _Execution
install_signal_handlers()
store = sys.argv[1]

@checkpointed(store=store, run_id="a")
def a(n, *, state=None):
    s = state or 0
    while s < n:
        s += 1
        yield s

in_body = threading.Event()

@checkpointed(store=store, run_id="b", every=1000)
def b(n, *, state=None):
    s = state or 0
    while s < n:
        s += 1
        in_body.set()
        threading.Event().wait(0.05)
        yield s
    return s

worker = threading.Thread(target=lambda: print("b returned", b(200), flush=True))
worker.start()
assert in_body.wait(60)
it = a.iter(10)
next(it); next(it)

def hook(frame, event, arg):  # the SIGTERM as the exit-time close saves
    if event == "call" and frame.f_code is _Execution._flush_last.__code__:
        sys.setprofile(None)
        os.kill(os.getpid(), signal.SIGTERM)
threading.setprofile(None)
sys.setprofile(hook)
print("script over", flush=True)
"""

_INTERACTIVE_CLOSE = """\
import os, signal, sys
from resumable import checkpointed
from resumable._decorator import _Execution
calls = []
if sys.argv[2] == "app":
    def on_term(s, f):
        calls.append(s)
        print("app handler called", flush=True)
    signal.signal(signal.SIGTERM, on_term)

@checkpointed(store=sys.argv[1], run_id="a")
def a(n, *, state=None):
    s = state or 0
    while s < n:
        s += 1
        yield s

def hook(frame, event, arg):  # the SIGTERM as the closed iterator saves
    if event == "call" and frame.f_code is _Execution._flush_last.__code__:
        sys.setprofile(None)
        os.kill(os.getpid(), signal.SIGTERM)

for s in a.iter(10):
    if s == 2:
        sys.setprofile(hook)
        break
print("after the break; app handler calls:", len(calls), flush=True)
"""

_INTERACTIVE_TWICE = """\
import os, signal, sys, threading
from resumable import checkpointed, install_signal_handlers
from resumable._uploader import Uploader
store = sys.argv[1]
calls = []
def app(s, f):
    calls.append(s)
    print("app handler called (%d)" % len(calls), flush=True)
signal.signal(signal.SIGTERM, app)
install_signal_handlers()
sent, w_at_2 = threading.Event(), threading.Event()

@checkpointed(store=store, run_id="w")
def w(n, *, state=None):
    s = state or 0
    while s < n:
        s += 1
        yield s

def consume():
    for s in w.iter(10):
        if s == 2:
            w_at_2.set()
            sent.wait(30)
            break
t = threading.Thread(target=consume)
t.start()
assert w_at_2.wait(30)

@checkpointed(store=store, run_id="f")
def f(n, *, state=None):
    s = state or 0
    while s < n:
        s += 1
        yield s
    return s

def hook(frame, event, arg):
    if event == "call" and frame.f_code is Uploader.close.__code__:
        sys.setprofile(None)
        os.kill(os.getpid(), signal.SIGTERM)
        sent.set()
        t.join(30)
sys.setprofile(hook)
try:
    print("f returned", f(3), flush=True)
except BaseException as e:
    print("f raised", type(e).__name__, flush=True)
print("app handler calls:", len(calls), flush=True)
"""


def test_a_kept_error_is_not_replaced_by_the_closed_iterators_sigterm(tmp_path: Path) -> None:
    """A main-thread call whose SIGTERM save fails (SerializationError) beside a worker's
    iterator closed after the same SIGTERM: the closed iterator's SIGTERM, sent again as
    the last run left, met the error unwinding and the default action ended the process
    (-15), the error never printed."""
    proc = _run(tmp_path, _ERROR_KEPT)
    assert proc.returncode == EXIT_SERIALIZATION, (proc.returncode, proc.stderr[-3000:])
    assert "SerializationError" in proc.stderr


def test_a_sigterm_during_the_exit_time_save_exits_143(tmp_path: Path) -> None:
    """The script is over; the exit hook saves an open iterator in the main thread while a
    worker thread's call runs, and the SIGTERM comes then: both saved, and the process
    exited 0 (a Kubernetes Job counted it as succeeded, the worker's run unfinished)."""
    proc = _run(tmp_path, _AT_EXIT)
    assert proc.returncode == EXIT_SIGTERM, (proc.returncode, proc.stderr[-3000:])
    assert "b returned" not in proc.stdout


def test_an_interactive_session_gets_the_signal_of_an_iterator_closed_as_it_came(
    tmp_path: Path
) -> None:
    """`python -i`: the iterator's run saved, then the signal vanished (the session went
    on, the application's handler never called). As without the library now: the
    default action ends the session, or the application's handler is called once."""
    dfl = _run(tmp_path, _INTERACTIVE_CLOSE, "dfl", interactive=True)
    assert dfl.returncode == -15, (dfl.returncode, dfl.stdout, dfl.stderr[-3000:])
    (tmp_path / "app").mkdir()
    app = _run(tmp_path / "app", _INTERACTIVE_CLOSE, "app", interactive=True)
    assert "after the break; app handler calls: 1" in app.stdout, (app.stdout, app.stderr)


def test_one_sigterm_calls_the_applications_handler_once_in_a_session(
    tmp_path: Path
) -> None:
    """One SIGTERM, in `python -i`: a finished main-thread call meets it in its cleanup
    and a worker's iterator closes after it. The closed iterator's leave() sent it again
    to the application's handler before the call called that handler itself: twice
    (review 61; the first version of this test replaced the library's handler with the
    application's, so the library never saw the signal)."""
    proc = _run(tmp_path, _INTERACTIVE_TWICE, interactive=True)
    assert "f raised TerminatedInteractive" in proc.stdout, (proc.stdout, proc.stderr[-3000:])
    assert "app handler calls: 1" in proc.stdout, (proc.stdout, proc.stderr[-3000:])


# -- review 61 ------------------------------------------------------------------------------

_SAVE_FAILS_AT_CLOSE = """\
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

def hook(frame, event, arg):
    if event == "call" and frame.f_code is _Execution._checkpoint.__code__:
        sys.setprofile(None)
        os.kill(os.getpid(), signal.SIGTERM)

it = a.iter(10)
for s in it:
    if s["i"] == 2:
        break
if sys.argv[2] == "sigterm":
    sys.setprofile(hook)
it.close()
print("went on after close()", flush=True)
"""


def test_a_save_that_fails_as_a_closed_iterator_saves_keeps_its_error(tmp_path: Path) -> None:
    """The save at close() failed (SerializationError) as a SIGTERM came: the run was
    taken for one closed as it came, the signal sent again, and the default action ended
    the process (-15) with no message."""
    proc = _run(tmp_path, _SAVE_FAILS_AT_CLOSE, "sigterm")
    assert proc.returncode == EXIT_SERIALIZATION, (proc.returncode, proc.stderr[-3000:])
    assert "SerializationError" in proc.stderr


_AT_EXIT_INTERACTIVE = """\
import os, signal, sys
from resumable import checkpointed
from resumable._decorator import _Execution
calls = []
if sys.argv[2] == "app":
    def on_term(s, f):
        calls.append(s)
        print("app handler called", len(calls), flush=True)
    signal.signal(signal.SIGTERM, on_term)

@checkpointed(store=sys.argv[1], run_id="a")
def a(n, *, state=None):
    s = state or 0
    while s < n:
        s += 1
        yield s

it = a.iter(10)
next(it); next(it)

def hook(frame, event, arg):
    if event == "call" and frame.f_code is _Execution._flush_last.__code__:
        sys.setprofile(None)
        os.kill(os.getpid(), signal.SIGTERM)
sys.setprofile(hook)
print("script over", flush=True)
"""


def test_a_sigterm_during_the_exit_time_save_calls_the_handler_once_in_a_session(
    tmp_path: Path
) -> None:
    """`python -i`, the session over: the exit hook's save of an open iterator met the
    SIGTERM; the signal sent again reached the application's handler, and the exit
    called it a second time."""
    proc = _run(tmp_path, _AT_EXIT_INTERACTIVE, "app", interactive=True)
    assert proc.stdout.count("app handler called") == 1, (proc.stdout, proc.stderr[-3000:])
