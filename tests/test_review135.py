"""Review 135 (of 8dd03f5): each program runs without and with the library and must end
the same.

- A SIGTERM that reached a child just forked, before the library's at-fork hook had
  run, found the parent's wakeup fd (the relay's pipe): the parent's relay took it for
  the parent's and killed it (no run active), or stopped its run. Also, with no run
  active, the child took the default action where the program's handler would run.
- install_signal_handlers() inside an asyncio loop tried the wakeup fd: a SIGTERM coming
  meanwhile was lost to the loop (its callback never ran).
- A second SIGTERM while ours decided what to do with a first one, a put-back pending:
  the default action, or an AssertionError, where the program's handler runs twice.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from .signal_children import as_without

# The program's own at-fork hook, registered before the library is imported, SIGTERMs
# each child as it starts (an outside kill of a worker just forked, a pool's terminate(),
# is the same race)
_KILL_CHILDREN = """
import os, signal
os.register_at_fork(after_in_child=lambda: os.kill(os.getpid(), signal.SIGTERM))
"""


def test_a_sigterm_to_a_child_just_forked_is_the_childs(tmp_path: Path) -> None:
    source = """
import array, fcntl, termios
install()
print("RESULT", count(3), flush=True)
pid = os.fork()
if pid == 0:
    os._exit(0)
_, status = os.waitpid(pid, 0)
print("child status", os.waitstatus_to_exitcode(status), flush=True)
if LIBRARY:  # until the relay thread has read its pipe and waits again
    from resumable import _signals
    relay = next(t for t in threading.enumerate() if t.name == "resumable-sigterm-relay")

    def pending():
        buf = array.array("i", [0])
        fcntl.ioctl(_signals._relay_fds[0], termios.FIONREAD, buf)
        return buf[0]

    def state():
        with open(f"/proc/self/task/{relay.native_id}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0]

    while pending() or state() != "S":
        pass
    for _ in range(1000):
        pass  # (check points: a SIGTERM relayed to this thread is handled here)
print("parent goes on", flush=True)
"""
    as_without(tmp_path, source, (0, ["child status -15", "parent goes on"]), signals=0,
               before=_KILL_CHILDREN)


def test_a_child_signalled_as_it_starts_runs_the_program_handler(tmp_path: Path) -> None:
    source = """
parent = os.getpid()

def h(signum, frame):
    print("handler in", "child" if os.getpid() != parent else "parent", flush=True)
    os._exit(3)

signal.signal(signal.SIGTERM, h)
install()
print("RESULT", count(3), flush=True)
pid = os.fork()
if pid == 0:
    print("child goes on", flush=True)
    os._exit(0)
_, status = os.waitpid(pid, 0)
print("child status", os.waitstatus_to_exitcode(status), flush=True)
"""
    as_without(tmp_path, source, (0, ["handler in child", "child status 3"]), signals=0,
               before=_KILL_CHILDREN)


def test_install_inside_an_asyncio_loop_loses_no_signal_of_the_loop(tmp_path: Path) -> None:
    # A SIGTERM as soon as ours sets the wakeup fd, if it does (a profile hook sends it,
    # and Python runs it at once); else right after the install
    source = """
import asyncio, _signal
sent = []

def hook(frame, event, arg):
    if event == "c_return" and arg is _signal.set_wakeup_fd and not sent:
        sent.append(1)
        os.kill(os.getpid(), signal.SIGTERM)

async def main():
    loop = asyncio.get_running_loop()
    got = []
    done = asyncio.Event()
    loop.add_signal_handler(signal.SIGTERM, lambda: got.append("TERM"))
    loop.add_signal_handler(signal.SIGUSR1, done.set)  # a marker after it
    sys.setprofile(hook)
    install()
    sys.setprofile(None)
    if not sent:
        os.kill(os.getpid(), signal.SIGTERM)
    os.kill(os.getpid(), signal.SIGUSR1)
    await done.wait()
    print("callbacks", got, flush=True)

asyncio.run(main())
"""
    as_without(tmp_path, source, (0, ["callbacks ['TERM']"]), signals=0)


@pytest.mark.parametrize("point", ["getsignal", "take"])
def test_a_second_sigterm_while_ours_takes_a_put_back(tmp_path: Path, point: str) -> None:
    # install_signal_handlers(), then the program's handler, then a run begun in the main
    # thread and ended in another (a put-back pending); two SIGTERMs, the second sent by a
    # profile hook where ours reads the handler installed, or takes the put-back (Python
    # runs it at once); without the library, right after the first
    source = f"POINT = {point!r}\n" + """
import _signal
install()
calls = 0

def h(signum, frame):
    global calls
    calls += 1
    print("h", calls, flush=True)

signal.signal(signal.SIGTERM, h)
it = count.iter(3) if LIBRARY else iter([1, 2, 3])
next(it)
t = threading.Thread(target=lambda: list(it))
t.start()
t.join()
sent = []

def hook(frame, event, arg):
    if sent:
        return
    if POINT == "getsignal":
        hit = (event == "c_return" and arg is _signal.getsignal and frame.f_back is not None
               and frame.f_back.f_code.co_name == "_handler")
    else:
        hit = event == "call" and frame.f_code.co_name == "_take_put_back"
    if hit:
        sent.append(1)
        os.kill(os.getpid(), signal.SIGTERM)

sys.setprofile(hook)
try:
    os.kill(os.getpid(), signal.SIGTERM)
finally:
    sys.setprofile(None)
if not sent:
    os.kill(os.getpid(), signal.SIGTERM)
print("alive", flush=True)
"""
    as_without(tmp_path, source, (0, ["h 1", "h 2", "alive"]), signals=0)
