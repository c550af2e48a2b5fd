"""Review 64 (of f242f47, 473a980 and 5668bdb): the exit when another exit hook never
ends, a close whose save hangs beside another open iterator, and the main thread's
consumer stopped once per SIGTERM (a program's finally, an interactive session, a break).

Real SIGTERMs to real child processes; each child chooses its moment with a profile hook
on a function's code or sends the signal itself.
"""

from __future__ import annotations

from pathlib import Path

from resumable._errors import EXIT_SIGTERM
from tests.test_sigterm_review59 import _run

_HEAD = """\
import os, signal, sys, threading
from resumable import checkpointed
from resumable._decorator import _Execution

def counter(name):
    @checkpointed(store=sys.argv[1], run_id=name, every=1000)
    def f(n, *, state=None):
        print(name, "starts from", state, flush=True)
        s = state or 0
        while s < n:
            s += 1
            yield s
    return f

a, b = counter("a"), counter("b")
if sys.argv[2] == "resume":
    for f in (a, b):
        it = f.iter(10)
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


def _resumed(tmp_path: Path, code: str) -> str:
    proc = _run(tmp_path, code, "resume")
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc.stdout


_EXIT_HOOK_HANGS = _HEAD + """
os.environ["RESUMABLE_TERM_TIMEOUT"] = "1"
it = a.iter(10)
next(it); next(it); next(it)   # the consumer holds 3
def other_library_exit_hook():  # registered after ours, it runs first; it never ends
    os.kill(os.getpid(), signal.SIGTERM)
    threading.Event().wait()
threading._register_atexit(other_library_exit_hook)
print("script over", flush=True)
"""


def test_the_process_leaves_when_another_exit_hook_never_ends(tmp_path: Path) -> None:
    """473a980 had the timeout thread save the open iterator behind that hook, and then
    nothing ended the process: our exit hook, which sees to it, never ran (a hang until
    SIGKILL). It leaves with 143 once exit handlers have had their timeout."""
    proc = _run(tmp_path, _EXIT_HOOK_HANGS, "run")  # (_run gives up after 90 s)
    assert proc.returncode == EXIT_SIGTERM, (proc.returncode, proc.stderr[-3000:])
    assert "a starts from 3" in _resumed(tmp_path, _EXIT_HOOK_HANGS)


_CLOSE_SAVE_HANGS = _HEAD + """
os.environ["RESUMABLE_TERM_TIMEOUT"] = "1"

class Hangs:
    armed = False
    def __reduce__(self):
        if Hangs.armed:
            threading.Event().wait()   # this save never ends
        return (Hangs, ())

@checkpointed(store=sys.argv[1], run_id="x", every=1000)
def x(n, *, state=None):
    s = state or {"i": 0, "h": Hangs()}
    while s["i"] < n:
        s["i"] += 1
        yield s

other = b.iter(10)
next(other); next(other)   # its consumer holds 2
closed = x.iter(10)
next(closed); next(closed)
Hangs.armed = True
sigterm_at(_Execution._checkpoint.__code__)
closed.close()
print("went on after the close", flush=True)
"""


def test_a_close_whose_save_hangs_does_not_keep_the_other_iterator_unsaved(
    tmp_path: Path
) -> None:
    """5668bdb kept the timeout from interrupting the main thread while a run there saved:
    with that save hanging for ever, the other iterator's consumer was never stopped, and
    its state (2) was not saved when the process left."""
    proc = _run(tmp_path, _CLOSE_SAVE_HANGS, "run")
    assert proc.returncode == EXIT_SIGTERM, (proc.returncode, proc.stderr[-3000:])
    assert "went on after the close" not in proc.stdout
    assert "b starts from 2" in _resumed(tmp_path, _CLOSE_SAVE_HANGS)


_FINALLY = _HEAD + """
other = b.iter(10)
next(other); next(other)
closed = a.iter(10)
next(closed); next(closed)
try:
    os.kill(os.getpid(), signal.SIGTERM)   # stops the consumer (Terminated)
    threading.Event().wait(60)
finally:
    closed.close()
    print("the program's cleanup after the first close ran", flush=True)
    other.close()
    print("the program's cleanup after the second close ran", flush=True)
"""


def test_a_programs_finally_is_not_cut_by_a_second_terminated(tmp_path: Path) -> None:
    """The SIGTERM stopped the consumer; its finally closed one iterator, and 5668bdb's
    close raised Terminated again (another iterator still open): the rest of the finally
    never ran."""
    proc = _run(tmp_path, _FINALLY, "run")
    assert proc.returncode == EXIT_SIGTERM, (proc.returncode, proc.stderr[-3000:])
    assert "after the first close ran" in proc.stdout, proc.stderr[-3000:]
    assert "after the second close ran" in proc.stdout, proc.stderr[-3000:]
    resumed = _resumed(tmp_path, _FINALLY)
    assert "a starts from 2" in resumed and "b starts from 2" in resumed, resumed


_SESSION = _HEAD + """
other = b.iter(10)
next(other); next(other)
closed = a.iter(10)
next(closed); next(closed)
try:
    os.kill(os.getpid(), signal.SIGTERM)
    threading.Event().wait(60)
except KeyboardInterrupt as err:
    print("stopped by the SIGTERM:", type(err).__name__, flush=True)
for it in (closed, other):  # later, at the prompt
    try:
        it.close()
        print("closed quietly", flush=True)
    except BaseException as err:
        print("close() raised", type(err).__name__, flush=True)
print("the session goes on", flush=True)
"""


def test_a_session_closes_its_iterators_after_the_sigterm_stopped_it(tmp_path: Path) -> None:
    """`python -i`: the SIGTERM stopped the user's code (TerminatedInteractive); closing an
    iterator at the prompt later raised it again (5668bdb), and closing the last one sent
    the signal on, and the default action killed the session (older)."""
    proc = _run(tmp_path, _SESSION, "run", interactive=True)
    assert "stopped by the SIGTERM: TerminatedInteractive" in proc.stdout, proc.stderr[-3000:]
    assert proc.stdout.count("closed quietly") == 2, (proc.stdout, proc.stderr[-3000:])
    assert "the session goes on" in proc.stdout
    assert proc.returncode == 0, (proc.returncode, proc.stderr[-3000:])


_BREAK = _HEAD + """
os.environ["RESUMABLE_TERM_TIMEOUT"] = "1"
other = b.iter(10)
next(other); next(other)
for s in a.iter(10):
    if s == 2:
        sigterm_at(_Execution._checkpoint.__code__)
        break   # the finalizer closes it
threading.Event().wait(60)   # the consumer's own work (the timeout stops it)
print("the consumer was not stopped", flush=True)
"""


def test_a_break_beside_another_open_iterator_raises_nothing_into_the_finalizer(
    tmp_path: Path
) -> None:
    """5668bdb raised Terminated from the finalizer's close to stop the other iterator's
    consumer: Python printed and dropped it ("Exception ignored"), and the consumer went
    on to the timeout anyway."""
    proc = _run(tmp_path, _BREAK, "run")
    assert proc.returncode == EXIT_SIGTERM, (proc.returncode, proc.stderr[-3000:])
    assert "Exception ignored" not in proc.stderr, proc.stderr[-3000:]
    resumed = _resumed(tmp_path, _BREAK)
    assert "a starts from 2" in resumed and "b starts from 2" in resumed, resumed
