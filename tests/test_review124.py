"""Reviews 124 and 125 (of c75ca06's chaining): an application handler that chains to
ours (``old = getsignal(); ... if callable(old): old()``), found in front of ours after a
run (not pinned) or in a forked child, is called once, and the program goes on as it
would without the library, where ``old`` would be SIG_DFL and not called (it was called
twice; review 125: then the default action ended programs that shut down cleanly)."""

from __future__ import annotations

import signal
from pathlib import Path

from .signal_children import finish, spawn, started, wait_for

_UNPINNED = """
import os, signal, sys, time
from resumable import checkpointed

STORE, READY = sys.argv[1], sys.argv[2]
calls, old, stop = 0, None, False

def app_handler(signum, frame):
    global calls, stop
    calls += 1
    stop = True
    print("app handler", calls, flush=True)
    if callable(old):
        old(signum, frame)

@checkpointed(store=STORE)
def count(n, *, state=None):
    global old
    s = state or 0
    while s < n:
        s += 1
        if n == 3 and s == 1 and old is None:  # a framework the body sets up: it chains
            old = signal.getsignal(signal.SIGTERM)
            signal.signal(signal.SIGTERM, app_handler)
        yield s
    return s

print("RESULT", count(3), flush=True)
print("RESULT", count(4), flush=True)  # ours in front again for this run, then not
open(READY, "w").close()
while not stop:
    time.sleep(0.01)
print("clean shutdown", flush=True)
"""


def test_a_chaining_handler_in_front_of_ours_after_the_runs_is_called_once(
        tmp_path: Path) -> None:
    ready = tmp_path / "ready"
    proc = spawn(tmp_path, _UNPINNED, str(tmp_path / "s"), str(ready))
    wait_for(ready, proc)
    proc.send_signal(signal.SIGTERM)
    out, err = finish(proc)
    assert proc.returncode == 0, err[-3000:]
    assert out.count("app handler") == 1 and "clean shutdown" in out, out


_FORKED = """
import time
resumable.install_signal_handlers()
old = signal.getsignal(signal.SIGTERM)
calls, stop = 0, False

def app_handler(signum, frame):
    global calls, stop
    calls += 1
    stop = True
    print(os.getpid(), "app handler", calls, flush=True)
    if callable(old):
        old(signum, frame)

signal.signal(signal.SIGTERM, app_handler)
pid = os.fork()
if pid == 0:
    print("child RESULT", count(3), flush=True)
    with open(READY + ".tmp", "w") as f:
        f.write(str(os.getpid()))
    os.rename(READY + ".tmp", READY)
    while not stop:
        time.sleep(0.01)
    os._exit(3)  # (stopped as its handler chose)
_, status = os.waitpid(pid, 0)
print("child status", os.waitstatus_to_exitcode(status), flush=True)
"""


def test_a_forked_child_with_a_chaining_handler_goes_on_as_its_handler_chose(
        tmp_path: Path) -> None:
    import os

    proc, ready = started(tmp_path, _FORKED)
    os.kill(int(ready.read_text()), signal.SIGTERM)
    out, err = finish(proc)
    assert proc.returncode == 0, err[-3000:]
    assert "child status 3" in out, (out, err[-3000:])
    assert out.count("app handler") == 1, out
