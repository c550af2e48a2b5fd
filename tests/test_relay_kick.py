"""The relay thread's kick (a SIGTERM it sends the main thread, for one the kernel handed
to another thread) can land just before the main thread's wait in C begins: Python's C
handler records it, the wait is not interrupted, and ours never runs. A group SIGTERM
during ``pool.map`` hung about 1 run in 75 under load that way, with empty stderr (no
handler, so no watchdog). The relay kicks again until ours has run."""

from __future__ import annotations

from pathlib import Path

from resumable._errors import EXIT_SIGTERM
from resumable._run import Run
from resumable.stores import open_store

from .signal_children import finish, spawn

# The first kick is lost as in that race: only the byte its C handler would write comes
# back (the relay counts it as its echo), and the main thread's wait goes on. The SIGTERM
# itself goes to another thread, once the main thread waits in C.
_LOST_KICK = """
import os, signal, sys, threading, time
os.environ["RESUMABLE_TERM_TIMEOUT"] = "1"  # (the body's wait ends only by the watchdog)
from resumable import _signals, checkpointed

real, lost = signal.pthread_kill, []

def lossy(tid, sig):
    if sig == signal.SIGTERM and not lost:
        lost.append(1)
        os.write(_signals._relay_fds[1], bytes([sig]))  # what the C handler writes
        return
    real(tid, sig)

signal.pthread_kill = lossy
main = threading.main_thread()

def main_blocked():  # in the wait below, asleep in the kernel
    with open(f"/proc/self/task/{main.native_id}/stat") as f:
        state = f.read().rsplit(")", 1)[1].split()[0]
    return state == "S" and WAITING

def to_this_thread():
    while not main_blocked():
        time.sleep(0.001)
    real(threading.get_ident(), signal.SIGTERM)

WAITING = False

@checkpointed(store=sys.argv[1], run_id="r")
def f(*, state=None):
    global WAITING
    s = state or 0
    while True:
        s += 1
        yield s
        if s == 2:
            threading.Thread(target=to_this_thread, daemon=True).start()
            WAITING = True
            threading.Event().wait()  # only a signal interrupts it

f()
"""


def test_a_lost_kick_is_sent_again(tmp_path: Path) -> None:
    proc = spawn(tmp_path, _LOST_KICK, str(tmp_path / "s"))
    _, err = finish(proc)
    assert proc.returncode == EXIT_SIGTERM, err[-3000:]
    latest = Run(open_store(str(tmp_path / "s")), "r").load_latest()
    assert latest is not None and latest.step == 2
