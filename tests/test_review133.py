"""Review 133 (of 4b9924e, the program's handler run as the installed one): each program
runs without and with the library and must end the same.

- A SIGTERM while ours called the program's handler for a chain (the program calling
  the installed handler itself, "as on SIGTERM") was taken for that handler killing
  again: the default action, where without the library the handler runs nested.
- A checkpointed call inside the handler running in front, with no install: ours was
  put back after the run had taken it out, and later SIGTERMs went astray.
- A fork inside the handler: the child raised IndexError out of it, and had ours put
  back, so its SIGTERM killed it instead of running its handler.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from .signal_children import as_without


@pytest.mark.parametrize("install_before", [True, False])
def test_a_sigterm_while_the_program_calls_the_installed_handler(tmp_path: Path,
                                                                 install_before: bool) -> None:
    source = f"BEFORE = {install_before}\n" + """
if BEFORE:
    install()
done = Flag()  # (a pipe: set() in the handler takes no lock the wait may hold)
calls = 0

def h0(signum, frame):
    global calls
    calls += 1
    print("h0", calls, flush=True)
    if calls == 1:
        ready()  # a SIGTERM now, into this wait
        done.wait()
        print("h0 done", flush=True)
    else:
        done.set()

signal.signal(signal.SIGTERM, h0)
install()
print("RESULT", count(3), flush=True)
signal.getsignal(signal.SIGTERM)(signal.SIGTERM, None)  # shut down as on SIGTERM
print("exit 0", flush=True)
"""
    as_without(tmp_path, source, (0, ["h0 1", "h0 2", "h0 done", "exit 0"]))


def test_a_run_inside_the_handler_running_in_front(tmp_path: Path) -> None:
    source = """
done = Flag()  # (a pipe: set() in the handler takes no lock the wait may hold)
r, w = os.pipe()
calls = 0

def h(signum, frame):
    global calls
    calls += 1
    print("h", calls, flush=True)
    if calls == 1:
        print("h: last call", count(3), flush=True)  # a run inside the handler
        os.write(w, b"x")
        return
    if calls == 2:
        ready(2)  # the third SIGTERM, into this wait
        done.wait()
        print("h 2 done", flush=True)
        sys.exit(0)
    done.set()

signal.signal(signal.SIGTERM, h)
if LIBRARY:  # (no install: ours stays in front, as a run that ended in another thread left it)
    it = count.iter(3)
    next(it)
    t = threading.Thread(target=lambda: list(it))
    t.start()
    t.join()
ready()
os.read(r, 1)
print("RESULT", count(4), flush=True)
print("after a run:", signal.getsignal(signal.SIGTERM).__name__, flush=True)
ready(1)
forever()
"""
    as_without(tmp_path, source, (0, ["h 1", "h: last call 3", "RESULT 4", "after a run: h",
                                      "h 2", "h 3", "h 2 done"]), signals=3)


def test_a_fork_inside_the_handler(tmp_path: Path) -> None:
    source = """
child = False
r, w = os.pipe()

def h(signum, frame):
    global child
    if child:
        print("child handler", flush=True)
        os._exit(7)
    pid = os.fork()
    if pid == 0:  # the successor goes on from the handler
        child = True
        os.write(w, b"x")
        return
    _, status = os.waitpid(pid, 0)
    print("child status", os.waitstatus_to_exitcode(status), flush=True)
    os._exit(0)

signal.signal(signal.SIGTERM, h)
install()
print("RESULT", count(3), flush=True)
ready()
os.read(r, 1)  # (the child)
print("child's handler:", signal.getsignal(signal.SIGTERM).__name__, flush=True)
with open(READY + ".tmp", "w") as f:
    f.write(str(os.getpid()))  # the test signals the child
os.rename(READY + ".tmp", READY + ".1")
forever()
"""
    as_without(tmp_path, source, (0, ["child's handler: h", "child handler",
                                      "child status 7"]), signals=2)
