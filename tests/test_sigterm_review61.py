"""What review 61 (of 58ecb14) found and the session after fixed: a SIGTERM as the exit
hook begins to close an iterator the script left open in the main thread.

Real SIGTERMs to real child processes; the child chooses its moment with a profile hook.
"""

from __future__ import annotations

from pathlib import Path

from resumable._errors import EXIT_SIGTERM
from tests.test_sigterm_review59 import _run

_OPEN_AT_EXIT = """\
import os, signal, sys
from resumable import checkpointed
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
it = a.iter(10)
next(it); next(it); next(it)   # the consumer holds 3; every=1000: nothing saved yet

def hook(frame, event, arg):  # the SIGTERM as the exit hook begins to close the iterator
    if event == "call" and frame.f_code is _Execution.close_at_exit.__code__:
        sys.setprofile(None)
        os.kill(os.getpid(), signal.SIGTERM)
sys.setprofile(hook)
print("script over", flush=True)
"""


def test_a_sigterm_as_the_exit_hook_closes_an_open_iterator_saves_its_state(
    tmp_path: Path
) -> None:
    """The handler raised Terminated into the exit hook, which took it for a failed save:
    the state the iterator held (3) was lost, and the exit waited twice the timeout for a
    run that had nothing left to do (its watchdog interrupted the main thread)."""
    proc = _run(tmp_path, _OPEN_AT_EXIT, "run")
    assert proc.returncode == EXIT_SIGTERM, (proc.returncode, proc.stderr[-3000:])
    assert "script over" in proc.stdout
    assert "saving a run at exit failed" not in proc.stderr, proc.stderr[-3000:]
    assert "interrupting it" not in proc.stderr, proc.stderr[-3000:]
    resumed = _run(tmp_path, _OPEN_AT_EXIT, "resume")
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert "body starts from 3" in resumed.stdout, (resumed.stdout, proc.stderr[-3000:])
