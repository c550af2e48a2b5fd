"""Review 127 (of the rule that, once no run is active, SIGTERMs go as without the
library): each program here runs without and with the library, and must end the same.

- A run put ours back in front of the program's handler (installed after
  ``install_signal_handlers()``) and left it there, chaining to that handler: the common
  "clean up, restore the old handler, kill again" looped and the process lived on; a
  handler restored by a context manager was still called.
- A handler passing its own frame to ours was taken for a delivery: the default action.
- In a forked child, a chaining handler's call of ours was taken for a delivery.
- Two handlers of one code (two instances' bound methods) were taken for each other, and
  the older one was never called; a ``functools.partial`` or callable object handler was
  not seen on the way, and was called twice.
- A handler running when the SIGTERM came (nested, or called by the program itself) was
  taken for this SIGTERM's: the SIGTERM was dropped.
"""

from __future__ import annotations

import signal
from pathlib import Path

import pytest

from .signal_children import as_without as _as_without

_RESTORE_AND_KILL = """
install()
def cleanup_then_kill(signum, frame):  # clean up, put back the old handler, die by it
    print("cleanup", flush=True)
    signal.signal(signum, old)
    os.kill(os.getpid(), signum)

old = signal.signal(signal.SIGTERM, cleanup_then_kill)
print("RESULT", count(3), flush=True)
ready()
forever()
"""


def test_restore_and_kill_again_after_a_run(tmp_path: Path) -> None:
    _as_without(tmp_path, _RESTORE_AND_KILL, (-signal.SIGTERM, ["cleanup"]))


_RESTORED_BY_A_CONTEXT = """
install()
with deferred("the context's handler, after the context"):
    print("RESULT", count(3), flush=True)
ready()
forever()
"""


def test_a_handler_restored_by_a_context_is_not_called_after_it(tmp_path: Path) -> None:
    _as_without(tmp_path, _RESTORED_BY_A_CONTEXT, (-signal.SIGTERM, []))


_OWN_FRAME = """
install()
old = signal.getsignal(signal.SIGTERM)
stopped = Flag()

def app(signum, frame):
    stopped.set()
    if callable(old):
        old(signum, inspect.currentframe())  # its own frame, not the one it got

signal.signal(signal.SIGTERM, app)
ready()
stopped.wait()
print("clean shutdown", flush=True)
sys.exit(4)
"""


def test_a_handler_passing_its_own_frame_to_ours(tmp_path: Path) -> None:
    _as_without(tmp_path, _OWN_FRAME, (4, ["clean shutdown"]))


_FORKED_CHILD = """
install()
old = signal.getsignal(signal.SIGTERM)
stopped = Flag()

def app(signum, frame):
    stopped.set()
    if callable(old):
        old(signum, frame)

signal.signal(signal.SIGTERM, app)
pid = os.fork()
if pid == 0:
    with open(READY + ".tmp", "w") as f:
        f.write(str(os.getpid()))  # the test signals the child
    os.rename(READY + ".tmp", READY)
    stopped.wait()
    print("child: clean shutdown", flush=True)
    os._exit(3)
_, status = os.waitpid(pid, 0)
print("child status", os.waitstatus_to_exitcode(status), flush=True)
"""


def test_a_chaining_handler_in_a_forked_child(tmp_path: Path) -> None:
    _as_without(tmp_path, _FORKED_CHILD, (0, ["child: clean shutdown", "child status 3"]))


_SAME_CODE = """
class GracefulStop:  # two instances: two handlers of one code
    def __init__(self, name):
        self.name = name
        self.old = signal.signal(signal.SIGTERM, self.handle)

    def handle(self, signum, frame):
        print(self.name, "stopping", flush=True)
        if self.name == "db":
            sys.exit(0)
        if callable(self.old):
            self.old(signum, frame)

db = GracefulStop("db")  # (before the library's handler)
install()
print("RESULT", count(3), flush=True)
web = GracefulStop("web")
ready()
forever()
"""


def test_two_handlers_of_one_code(tmp_path: Path) -> None:
    _as_without(tmp_path, _SAME_CODE, (0, ["web stopping", "db stopping"]))


_WRAPPED = """
install()
calls = 0
stopped = Flag()

def on_term(tag, signum, frame):  # a second SIGTERM forces the exit
    global calls
    calls += 1
    print(tag, "call", calls, flush=True)
    if calls == 2:
        os._exit(9)
    stopped.set()
    if callable(old):
        old(signum, frame)

class Handler:
    def __call__(self, signum, frame):
        on_term("object", signum, frame)

handler = functools.partial(on_term, "partial") if KIND == "partial" else Handler()
old = signal.signal(signal.SIGTERM, handler)
print("RESULT", count(3), flush=True)
signal.signal(signal.SIGTERM, handler)  # the program's in front again after the run
ready()
stopped.wait()
print("graceful stop", flush=True)
"""


@pytest.mark.parametrize("kind", ["partial", "object"])
def test_a_partial_or_callable_object_handler_is_called_once(tmp_path: Path,
                                                             kind: str) -> None:
    source = f"KIND = {kind!r}\n" + _WRAPPED
    _as_without(tmp_path, source, (0, [f"{kind} call 1", "graceful stop"]))


_NESTED = """
calls = 0

def H1(signum, frame):  # set before the library's; a second SIGTERM forces the exit
    global calls
    calls += 1
    print("H1 call", calls, flush=True)
    if calls == 2:
        os._exit(7)
    ready(calls)
    forever()  # its graceful work

signal.signal(signal.SIGTERM, H1)
install()
old = signal.getsignal(signal.SIGTERM)

def framework(signum, frame):  # set up later, chains to what it found
    print("framework", flush=True)
    if callable(old):
        old(signum, frame)

signal.signal(signal.SIGTERM, framework)
ready()
forever()
"""


def test_a_sigterm_while_the_handler_still_runs_reaches_it(tmp_path: Path) -> None:
    _as_without(tmp_path, _NESTED, (7, ["framework", "H1 call 1", "framework", "H1 call 2"]),
                signals=2)


_CALLED_BY_THE_PROGRAM = """
def shutdown(signum=None, frame=None):  # its handler, also called at the end
    if signum is not None:
        print("forced", flush=True)
        os._exit(5)
    print("draining", flush=True)
    ready()
    forever()

signal.signal(signal.SIGTERM, shutdown)
install()
old = signal.getsignal(signal.SIGTERM)

def framework(signum, frame):
    print("framework", flush=True)
    if callable(old):
        old(signum, frame)

signal.signal(signal.SIGTERM, framework)
shutdown()
"""


def test_a_sigterm_while_the_program_calls_its_handler(tmp_path: Path) -> None:
    _as_without(tmp_path, _CALLED_BY_THE_PROGRAM, (5, ["draining", "framework", "forced"]))
