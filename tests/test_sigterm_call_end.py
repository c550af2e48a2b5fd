"""A SIGTERM handled as a finished call leaves, after its last look at the flag.

The handler flags the run and the run never looks again: the program went on as if
no SIGTERM had come (a pod kept running until Kubernetes killed it after the grace
period). The signal is delivered from a profile hook at the first instruction of each
piece of the call's cleanup, so each point is hit every time, not by timing.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from resumable._errors import EXIT_SIGTERM

ROOT = Path(__file__).resolve().parents[1]

_CHILD = """
import os, signal, sys
from resumable import checkpointed, _signals
from resumable._progress import Progress
from resumable._uploader import Uploader

@checkpointed(store={store!r}, run_id="r")
def f(n, *, state=None):
    state = state or 0
    while state < n:
        state += 1
        yield state
    return state

target = {target}.__code__

def hook(frame, event, arg):
    if event == "call" and frame.f_code is target:
        sys.setprofile(None)
        os.kill(os.getpid(), signal.SIGTERM)

if sys.argv[1] == "hook":
    sys.setprofile(hook)
if {iterate} and sys.argv[1] == "hook":
    for s in f.iter(3):
        pass
    print("iterated", s, flush=True)
else:  # (the second process asks a completed run: its result, no states to iterate)
    print("result", f(3), flush=True)
print("went on after the SIGTERM", flush=True)
"""

_POINTS = ["_signals.leave", "Uploader.close", "Progress.close"]


@pytest.mark.parametrize("iterate", [False, True], ids=["call", "iter"])
@pytest.mark.parametrize("target", _POINTS)
def test_a_sigterm_as_a_finished_call_leaves_still_ends_the_program(
    tmp_path: Path, target: str, iterate: bool
) -> None:
    script = tmp_path / "child.py"
    store = str(tmp_path / "store")
    script.write_text(textwrap.dedent(_CHILD.format(store=store, target=target,
                                                    iterate=iterate)))
    env = dict(os.environ, PYTHONPATH=str(ROOT))

    def run(mode: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, str(script), mode], capture_output=True,
                              text=True, timeout=60, cwd=ROOT, env=env)

    proc = run("hook")
    assert proc.returncode == EXIT_SIGTERM, (proc.returncode, proc.stdout, proc.stderr)
    assert "went on" not in proc.stdout, proc.stdout
    again = run("plain")  # the run was complete: the next process gets its result
    assert again.returncode == 0, again.stderr
    assert "result 3" in again.stdout, again.stdout


# -- review 58 ------------------------------------------------------------------------------

_ERROR_AFTER = """
import os, signal, sys
from resumable import checkpointed
from resumable._uploader import Uploader

@checkpointed(store={store!r}, run_id="r")
def f(*, state=None):
    s = state or 0
    s += 1
    yield s
    if {mode!r} == "unpicklable":
        os.kill(os.getpid(), signal.SIGTERM)  # the pod is being stopped
        yield (lambda: 0)  # and the next state cannot be pickled: SerializationError
    raise ValueError("the body's own error")

def hook(frame, event, arg):  # a SIGTERM during the failed call's cleanup
    if event == "call" and frame.f_code is Uploader.close.__code__:
        sys.setprofile(None)
        os.kill(os.getpid(), signal.SIGTERM)

if {mode!r} == "error":
    sys.setprofile(hook)
f()
"""


@pytest.mark.parametrize(("mode", "code", "error"), [
    ("unpicklable", 70, "SerializationError"), ("error", 1, "ValueError: the body's own")])
def test_an_error_that_ends_the_call_after_a_sigterm_is_kept(
    tmp_path: Path, mode: str, code: int, error: str
) -> None:
    """d08eb95 raised Terminated (exit 143, no traceback) over any error the call ended
    with after a SIGTERM: a SerializationError (fatal, 70) read as a plain SIGTERM."""
    script = tmp_path / "child.py"
    script.write_text(textwrap.dedent(_ERROR_AFTER.format(store=str(tmp_path / "s"),
                                                          mode=mode)))
    proc = subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                          timeout=60, cwd=ROOT, env=dict(os.environ, PYTHONPATH=str(ROOT)))
    assert proc.returncode == code, (proc.returncode, proc.stderr[-3000:])
    assert error in proc.stderr, proc.stderr[-3000:]


_CLOSED = """
import os, signal, sys, time
from resumable import checkpointed
from resumable._uploader import Uploader

@checkpointed(store={store!r}, run_id="r")
def f(n, *, state=None):
    s = state or 0
    while s < n:
        s += 1
        yield s
    return s

def hook(frame, event, arg):  # a SIGTERM as the closed iterator cleans up
    if event == "call" and frame.f_code is Uploader.close.__code__:
        sys.setprofile(None)
        os.kill(os.getpid(), signal.SIGTERM)

for s in f.iter(10):
    if s == 2:
        sys.setprofile(hook)
        break  # (the iterator is dropped and closed, as by close())
print("went on after the break", flush=True)
os.kill(os.getpid(), signal.SIGTERM)  # and a second one: ignored for good before
print("went on after a second SIGTERM", flush=True)
"""


def test_a_sigterm_as_a_closed_iterator_cleans_up_still_ends_the_program(
    tmp_path: Path
) -> None:
    """The run was told to stop as it was closed, and nothing could raise from there:
    the program went on, and every later SIGTERM was ignored (a pod that runs until its
    grace period ends). The signal now goes on once the run has saved, as without us."""
    script = tmp_path / "child.py"
    store = str(tmp_path / "store")
    script.write_text(textwrap.dedent(_CLOSED.format(store=store)))
    proc = subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                          timeout=60, cwd=ROOT, env=dict(os.environ, PYTHONPATH=str(ROOT)))
    assert proc.returncode in (-15, EXIT_SIGTERM), (proc.returncode, proc.stderr[-3000:])
    assert "went on" not in proc.stdout, proc.stdout
    from resumable._run import Run
    from resumable.stores import open_store
    latest = Run(open_store(store), "r").load_latest()
    assert latest is not None and latest.state == 2  # what the consumer held


_INTERACTIVE = """
import os, signal, sys
from resumable import checkpointed
from resumable._uploader import Uploader
signal.signal(signal.SIGTERM, lambda s, f: print("app handler called", flush=True))

@checkpointed(store={store!r}, run_id="r")
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
sys.setprofile(hook)
try:
    print("result", f(3), flush=True)
except KeyboardInterrupt as err:
    print("stopped by", type(err).__name__, flush=True)
"""


def test_an_interactive_session_calls_the_applications_handler_as_a_call_ends(
    tmp_path: Path
) -> None:
    """In `python -i` the session lives on; the call that met the SIGTERM as it ended
    stops, and the application's own handler is called, as during a run."""
    script = tmp_path / "child.py"
    script.write_text(textwrap.dedent(_INTERACTIVE.format(store=str(tmp_path / "s"))))
    proc = subprocess.run([sys.executable, "-i", str(script)], capture_output=True,
                          text=True, timeout=60, cwd=ROOT, stdin=subprocess.DEVNULL,
                          env=dict(os.environ, PYTHONPATH=str(ROOT)))
    assert "stopped by TerminatedInteractive" in proc.stdout, (proc.stdout, proc.stderr)
    assert proc.stdout.count("app handler called") == 1, (proc.stdout, proc.stderr)
