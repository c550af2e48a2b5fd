"""A forked snapshot's child that is killed (the out-of-memory killer's SIGKILL), and a
collect interrupted while its child still pickles.

Every case runs in a child Python process of its own (the fork then happens there, not in
pytest's process with its servers and threads), as in test_forked.py, and waits on what
happens there, never on time.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.scripts import run_script

pytestmark = pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")

# Generation 3's state kills the process that pickles it when that is not the loop's
# process: a forked child killed as the out-of-memory killer kills one (SIGKILL, no word).
_KILLED_CHILD = """
import logging, os, signal, sys, threading
from resumable import checkpointed

MAIN = os.getpid()
told = threading.Event()  # the loss was logged: generation 3's save was collected

class Told(logging.Handler):
    def emit(self, record):
        sys.stderr.write(self.format(record) + "\\n")
        if "killed by SIGKILL" in record.getMessage():
            told.set()

logging.getLogger("resumable").addHandler(Told())

class DiesInAChild:
    def __reduce__(self):
        if os.getpid() != MAIN:
            os.kill(os.getpid(), signal.SIGKILL)
        return (DiesInAChild, ())

@checkpointed(store={store!r}, run_id="r", every="generation", capture_rng=False,
              restarts={restarts}, restart_on=ValueError)
def body(*, state=None):
    state = state or {{"gen": 0}}
    while state["gen"] < 6:
        state["gen"] += 1
        state["bomb"] = DiesInAChild() if state["gen"] == 3 else None
        yield state
        if not {fail_at} and state["gen"] == 3:  # (else step 4's yield may cancel it)
            assert told.wait(30), "generation 3's save never came to an end"
        if {fail_at} and state["gen"] == {fail_at} and not os.environ.get("FAILED"):
            os.environ["FAILED"] = "1"
            raise ValueError("generation fails once")
    return state["gen"]

try:
    print("result", body(), flush=True)
except BaseException as err:
    print("ended with", type(err).__name__, err, flush=True)
print("newest", body.latest().step, flush=True)
"""


def test_a_forked_child_killed_by_sigkill_loses_one_save_not_the_call(
        tmp_path: Path) -> None:
    """Before: the child's SIGKILL became a SerializationError that ended the call (and a
    pod's podFailurePolicy took it for a bug in the state), though the state pickles."""
    store = tmp_path / "s"
    proc = run_script(tmp_path, _KILLED_CHILD.format(store=str(store), restarts=0,
                                                     fail_at=0),
                      RESUMABLE_SNAPSHOT_FORK="1")
    assert "result 6" in proc.stdout, (proc.stdout, proc.stderr[-3000:])
    assert "newest 6" in proc.stdout, proc.stdout
    assert "killed by SIGKILL" in proc.stderr, proc.stderr[-3000:]
    assert "on the loop's thread" in proc.stderr, proc.stderr[-3000:]
    names = sorted(p.name for p in (store / "r").glob("ckpt-*"))
    assert names and all(not n.endswith("-000000000003") for n in names), names


def test_a_restart_after_a_killed_child_begins_from_the_store(tmp_path: Path) -> None:
    """The killed child's snapshot was the newest when generation 3 failed: the restart
    begins from the store's newest checkpoint (step 2), as after a stuck child."""
    proc = run_script(tmp_path, _KILLED_CHILD.format(store=str(tmp_path / "s"), restarts=1,
                                                     fail_at=3),
                      RESUMABLE_SNAPSHOT_FORK="1")
    assert "result 6" in proc.stdout, (proc.stdout, proc.stderr[-3000:])
    assert "restart 1 of 1" in proc.stderr, proc.stderr[-3000:]
    assert "was lost" in proc.stderr, proc.stderr[-3000:]


# collect() waits for a child that never finishes pickling (it waits on a pipe no one
# writes). Once collect waits for it, a thread sends this process SIGINT: the
# KeyboardInterrupt must leave collect at once, the child ended and reaped.
_INTERRUPTED = """
import os, signal, sys, threading
from resumable import _forked

started_r, started_w = os.pipe()
never_r, never_w = os.pipe()

def serialize():
    os.write(started_w, b"x")
    os.read(never_r, 1)  # for ever: no one writes
    return [b""]

child = _forked.Forked(serialize, "step 1")
pid = child.pid

main = threading.get_native_id()

def interrupt():
    os.read(started_r, 1)
    # until this process's main thread waits in a system call on the child's pipe (in
    # collect: a SIGINT before it would be caught here, outside collect)
    while True:
        with open(f"/proc/self/task/{main}/syscall") as f:
            fields = f.read().split()
        if len(fields) > 1 and fields[1] == hex(child.fd):
            break
        threading.Event().wait(0.01)
    os.kill(os.getpid(), signal.SIGINT)

threading.Thread(target=interrupt, daemon=True).start()
try:
    child.collect(None, None)
except KeyboardInterrupt:
    print("interrupted", flush=True)
try:
    os.kill(pid, 0)
except ProcessLookupError:
    print("child gone", flush=True)
else:
    print("child still there", flush=True)
"""


def test_an_interrupted_collect_ends_its_child_instead_of_waiting_for_it(
        tmp_path: Path) -> None:
    """Before: collect's cleanup reaped the child with a blocking waitpid and no kill, so
    a Ctrl-C while a stuck child pickled hung the process (here: the run's timeout)."""
    proc = run_script(tmp_path, _INTERRUPTED, timeout=60)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "interrupted" in proc.stdout, proc.stdout
    assert "child gone" in proc.stdout, proc.stdout
