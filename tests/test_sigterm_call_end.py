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
