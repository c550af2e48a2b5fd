"""Review 136 (of 2700278):

- A handler that raised inside the library's fork hooks (a Ctrl-C as the process
  forked) left SIGTERM blocked for good: in the parent, or in the child and the programs
  it execs.
- In an interactive session, the relay's kick to a main thread that blocked SIGTERM
  stayed pending, and came after the run had stopped: the default action ended the
  session.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from .signal_children import ENV, finish, spawn

# A SIGINT made pending (no check point of its own) at the n-th profile event inside the
# library's fork hooks on one side, for every n; after each fork, is SIGTERM blocked in
# the main thread (parent), or in the child?
_SCAN = """
import _thread, collections, functools, os, signal, sys
import resumable
SIDE = sys.argv[1]
HOOKS = {"_block_for_fork", "_unblock_after_fork", "_after_fork_in_child"}
resumable.install_signal_handlers()

def blocked():
    return signal.SIGTERM in signal.pthread_sigmask(signal.SIG_BLOCK, [])

n, points, left = 0, 0, []
while True:
    trip = collections.defaultdict(functools.partial(_thread.interrupt_main, signal.SIGINT))
    seen, depth, where, me = [0], [0], [None], os.getpid()

    def hook(frame, event, arg):
        if (os.getpid() == me) != (SIDE == "parent") or trip:
            return
        if not (depth[0] > 0 or (event == "call" and frame.f_code.co_name in HOOKS)):
            return
        depth[0] += (event == "call") - (event == "return")
        if seen[0] == n:
            where[0] = (event, frame.f_code.co_name, frame.f_lineno)
            trip[0]
        seen[0] += 1

    sys.setprofile(hook)
    try:
        pid = os.fork()
    except KeyboardInterrupt:
        pid = 0 if os.getpid() != me else -1
    if os.getpid() != me:
        os._exit(3 if blocked() else (0 if where[0] is not None else 4))
    sys.setprofile(None)
    if pid > 0:
        _, status = os.waitpid(pid, 0)
        code = os.waitstatus_to_exitcode(status)
    else:  # (the fork raised in the parent: the child is reaped below)
        os.wait()
        code = 0
    if SIDE == "parent":
        if where[0] is None:
            break
        if blocked():
            left.append(where[0])
            signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGTERM})
    else:
        if code == 4:
            break
        if code == 3:
            left.append(n)
    points += 1
    n += 1
print("points", points, flush=True)
print("left blocked", left, flush=True)
"""


@pytest.mark.parametrize("side", ["parent", "child"])
def test_a_handler_raising_in_the_fork_hooks(tmp_path: Path, side: str) -> None:
    proc = spawn(tmp_path, _SCAN, side)
    out, err = finish(proc)
    assert proc.returncode == 0, err[-3000:]
    lines = out.splitlines()
    assert int(lines[0].split()[1]) >= 5, out  # (the hook saw the fork hooks)
    assert lines[1:] == ["left blocked []"], out


# python -i: a run's body blocks SIGTERM in the main thread around a wait in C, and the
# SIGTERM reaches another thread meanwhile. Ours runs as the wait ends; the run saves and
# stops with KeyboardInterrupt, and the session goes on (README).
_INTERACTIVE = """
import os, signal, sys, threading, time
from resumable import checkpointed

def pending():
    with open(f"/proc/self/task/{threading.main_thread().native_id}/status") as f:
        for line in f:
            if line.startswith("SigPnd:"):
                return bool(int(line.split()[1], 16) >> (signal.SIGTERM - 1) & 1)

def section():
    go = threading.Event()

    def other():
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGTERM})  # (inherited)
        signal.pthread_kill(threading.get_ident(), signal.SIGTERM)  # to this thread
        deadline = time.monotonic() + 2  # (a kick, if one is sent, is pending long before)
        while not pending() and time.monotonic() < deadline:
            time.sleep(0.001)
        print("kick pending for the main thread:", pending(), flush=True)
        go.set()

    saved = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM})
    try:
        threading.Thread(target=other).start()
        go.wait()  # in C
    finally:
        sections.append(saved)

sections = []

@checkpointed(store=sys.argv[1], run_id="r")
def job(*, state=None):
    s = state or 0
    while True:
        s += 1
        yield s
        if s == 2:
            section()

try:
    job()
except KeyboardInterrupt:
    print("run stopped, session goes on", flush=True)
signal.pthread_sigmask(signal.SIG_SETMASK, sections[0])  # the section's mask undone
print("session alive", flush=True)
"""


def test_a_kick_to_a_main_thread_blocking_sigterm_is_not_left_pending(tmp_path: Path) -> None:
    script = tmp_path / "child.py"
    script.write_text(_INTERACTIVE)
    proc = subprocess.Popen([sys.executable, "-i", str(script), str(tmp_path / "s")],
                            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=ENV)
    out, err = finish(proc)
    assert (proc.returncode, out.splitlines()) == (0, [
        "kick pending for the main thread: False", "run stopped, session goes on",
        "session alive"]), err[-3000:]
