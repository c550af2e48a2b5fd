"""Review 131 (of review 130's fixes): each program runs without and with the library and
must end the same.

- The library's threads (the relay, started by any install) took SIGTERMs a program had
  blocked in its threads to wait for them with ``signal.sigwait``: hung, or killed.
- Past 20 nested SIGTERMs (a supervisor sending one every 50 ms while the handler joins
  a thread), 71b5e06 took the default action.
- Handlers made in a loop (``lambda s, f, name=name: ...``) were taken for each other;
  a ``__call__`` that is a staticmethod or classmethod, or a partial whose argument the
  body reassigns or pops, was not seen on the way (called twice, or a SIGTERM dropped).
- A handler waiting to be put back, called through a framework's chain, restored ours,
  killed again, and was called a second time.
"""

from __future__ import annotations

import signal
from pathlib import Path

import pytest

from .signal_children import GRACEFUL_THEN_FORCED, as_without

_SIGWAIT = """
signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM})
stop = threading.Event()

def waiter():
    print("got", signal.sigwait({signal.SIGTERM}), flush=True)
    stop.set()

threading.Thread(target=waiter).start()
ready()
stop.wait()
print("clean shutdown", flush=True)
"""


@pytest.mark.parametrize("before", ["install()", "count(3)"])
def test_a_sigterm_the_program_waits_for_with_sigwait(tmp_path: Path, before: str) -> None:
    as_without(tmp_path, before + "\n" + _SIGWAIT, (0, ["got 15", "clean shutdown"]))


def test_many_nested_sigterms_while_the_handler_joins(tmp_path: Path) -> None:
    source = """
count(3)
stop = threading.Event()
calls = 0

def work():
    stop.wait()
    while calls < 25:  # until the 25th SIGTERM reached the handler
        threading.Event().wait(0.01)

# The worker starts with SIGTERM blocked (a thread inherits the mask it starts with), so
# the kernel hands every SIGTERM to the main thread: one handed to the worker left the
# main thread waiting in join for ever, without the library too (4 of 10 under load)
signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM})
worker = threading.Thread(target=work)
worker.start()
signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGTERM})

def shutdown(signum, frame):
    global calls
    calls += 1
    n = calls
    stop.set()  # (before the next SIGTERM: one nested in set() deadlocked on its lock)
    ready(n)  # the next SIGTERM, while this call joins the worker
    while worker.is_alive():  # (in steps: a SIGTERM landing just before an untimed join
        worker.join(0.05)  # blocks is only recorded, and the join waits for ever)
    print("shutdown done, calls:", n, flush=True)
    sys.exit(0)

signal.signal(signal.SIGTERM, shutdown)
install()
ready()
forever()
"""
    as_without(tmp_path, source, (0, ["shutdown done, calls: 25"]), signals=25)


def test_handlers_made_in_a_loop(tmp_path: Path) -> None:
    source = """
def stop(name, previous, signum, frame):
    print(name, "stopping", flush=True)
    if name == "db":
        sys.exit(0)
    if callable(previous):
        previous(signum, frame)

handlers = [lambda signum, frame, name=name: stop(name, prev[name], signum, frame)
            for name in ("db", "web")]
prev = {"db": signal.signal(signal.SIGTERM, handlers[0])}
install()
print("RESULT", count(3), flush=True)
prev["web"] = signal.signal(signal.SIGTERM, handlers[1])
ready()
forever()
"""
    as_without(tmp_path, source, (0, ["web stopping", "db stopping"]))


_KINDS = """
olds = {}
done = Flag()  # (a pipe: set() in the handler takes no lock the wait may hold)

def chain_body(name, signum, frame):
    print("A called", name, flush=True)
    done.set()
    old = olds["A"]
    if callable(old):
        old(signum, frame)

def reassigned(tag, signum, frame):
    tag = "[" + tag + "]"  # the bound argument reassigned in the body
    chain_body(tag, signum, frame)

class Static:
    __call__ = staticmethod(lambda signum, frame: chain_body("static", signum, frame))

class ClassCall:
    @classmethod
    def __call__(cls, signum, frame):
        chain_body("classmethod", signum, frame)

class KW:
    def handle(self, signum, frame, **kw):
        chain_body("kw " + kw.pop("opt"), signum, frame)  # a keyword partial's, popped

def setup():  # in the first call's body: a later call puts ours in front and back
    if "A" not in olds:
        olds["A"] = signal.signal(signal.SIGTERM, {
            "reassigned": functools.partial(reassigned, "tag"),
            "static": Static(),
            "classmethod": ClassCall(),
            "kwpop": functools.partial(KW().handle, opt="x"),
        }[KIND])

if LIBRARY:
    @checkpointed(store=STORE)
    def job(n, *, state=None):
        setup()
        yield 1
        return 1
else:
    def job(n):
        setup()
        return 1

job(1)
job(2)
ready()
done.wait()
print("alive", flush=True)
"""


@pytest.mark.parametrize(("kind", "called"), [("reassigned", "[tag]"), ("static", "static"),
                                              ("classmethod", "classmethod"),
                                              ("kwpop", "kw x")])
def test_handler_kinds_are_called_once(tmp_path: Path, kind: str, called: str) -> None:
    as_without(tmp_path, f"KIND = {kind!r}\n" + _KINDS, (0, [f"A called {called}", "alive"]))


@pytest.mark.parametrize("kind", ["reassigned", "static"])
def test_a_second_sigterm_when_the_frame_passed_is_none(tmp_path: Path, kind: str) -> None:
    source = f"KIND = {kind!r}\n" + GRACEFUL_THEN_FORCED + """
install()

def component(name, signum, frame):
    name = name.upper()
    print("X", name, flush=True)
    if callable(old):
        old(signum, None)

class Static:
    __call__ = staticmethod(lambda signum, frame: component("static", signum, frame))

X = functools.partial(component, "comp") if KIND == "reassigned" else Static()
old = signal.signal(signal.SIGTERM, X)
ready()
forever()
"""
    x = "X COMP" if kind == "reassigned" else "X STATIC"
    as_without(tmp_path, source, (3, [x, "A call 1", x, "A call 2"]), signals=2)


def test_a_handler_waiting_to_be_put_back_is_called_once(tmp_path: Path) -> None:
    source = """
install()

def cleanup_then_kill(signum, frame):
    print("cleanup", flush=True)
    signal.signal(signum, old)
    os.kill(os.getpid(), signum)

old = signal.signal(signal.SIGTERM, cleanup_then_kill)
it = count.iter(3) if LIBRARY else iter([1, 2, 3])
next(it)
t = threading.Thread(target=lambda: list(it))  # (the run ends in another thread)
t.start()
t.join()

def framework(signum, frame):
    print("framework", flush=True)
    if callable(fw_old):
        fw_old(signum, frame)

fw_old = signal.signal(signal.SIGTERM, framework)
ready()
forever()
"""
    as_without(tmp_path, source, (-signal.SIGTERM, ["framework", "cleanup"]))
