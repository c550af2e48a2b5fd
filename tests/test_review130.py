"""Review 130 (of review 127's fixes): each program runs without and with the library and
must end the same.

- The program's handler that a run had put ours in front of was not put back when the
  run ended in another thread, when a SIGTERM was sent on as an iterator closed, or when
  the handler was set otherwise meanwhile: "clean up, restore the old handler, kill
  again" looped 20 times and the process lived on.
- A handler whose ``__eq__`` assumes its own kind ended the relay thread (``!=`` against
  SIG_DFL) and stopped a run in a worker thread from starting (``in (SIG_IGN, None)``).
- Two partials of one function were taken for each other; a handler from an undone
  put-back was called after the program had removed it; a decorated method (a ``*args``
  wrapper) was called twice; a handler passing None as the frame made a SIGTERM during
  the program's own handler be dropped.
"""

from __future__ import annotations

import signal
from pathlib import Path

from .signal_children import GRACEFUL_THEN_FORCED, as_without

_RESTORE_AND_KILL = """
install()

def cleanup_then_kill(signum, frame):
    print("cleanup", flush=True)
    signal.signal(signum, old)
    os.kill(os.getpid(), signum)

old = signal.signal(signal.SIGTERM, cleanup_then_kill)
"""


def test_a_run_that_ends_in_another_thread(tmp_path: Path) -> None:
    source = _RESTORE_AND_KILL + """
it = count.iter(3) if LIBRARY else iter([1, 2, 3])  # begun in the main thread
next(it)
t = threading.Thread(target=lambda: list(it))  # ... ended in another
t.start()
t.join()
ready()
forever()
"""
    as_without(tmp_path, source, (-signal.SIGTERM, ["cleanup"]))


def test_a_handler_set_otherwise_as_the_run_ended(tmp_path: Path) -> None:
    source = _RESTORE_AND_KILL + """
it = count.iter(3) if LIBRARY else iter([1, 2, 3])
next(it)
with deferred("deferred"):
    list(it)
ready()
forever()
"""
    as_without(tmp_path, source, (-signal.SIGTERM, ["cleanup"]))


def test_a_sigterm_sent_on_as_an_iterator_closed(tmp_path: Path) -> None:
    source = _RESTORE_AND_KILL + """
class Slow:  # its save at close is where the SIGTERM lands
    def __init__(self, n):
        self.n = n

    def __getstate__(self):
        if self.n == 2 and LIBRARY:
            from resumable import _signals
            ready()
            while not _signals.terminating():  # (until the SIGTERM is taken)
                threading.Event().wait(0.01)
        return {"n": self.n}

if LIBRARY:
    @checkpointed(store=STORE, every=100)
    def gen(*, state=None):
        n = state.n if state else 0
        while True:
            n += 1
            yield Slow(n)

    it = gen.iter()
    next(it)
    next(it)
    it.close()  # saves the state it holds; the SIGTERM is sent on once no run is left
else:
    ready()
forever()
"""
    as_without(tmp_path, source, (-signal.SIGTERM, ["cleanup"]))


def test_a_handler_whose_eq_assumes_its_own_kind(tmp_path: Path) -> None:
    source = """
class Stopper:
    def __init__(self, key):
        self.key = key
        self.stopped = Flag()

    def __eq__(self, other):
        return self.key == other.key

    __hash__ = object.__hash__

    def __call__(self, signum, frame):
        print("stopping", flush=True)
        self.stopped.set()

stopper = Stopper("app")
signal.signal(signal.SIGTERM, stopper)
worker = threading.Thread(target=lambda: print("RESULT", count(3), flush=True))
worker.start()  # (a run in a worker thread, before any install)
worker.join()
install()
print("RESULT", count(3), flush=True)
ready()
stopper.stopped.wait()
if LIBRARY:
    relay = [t for t in threading.enumerate() if t.name == "resumable-sigterm-relay"]
    assert relay and relay[0].is_alive()
print("clean shutdown", flush=True)
"""
    as_without(tmp_path, source, (0, ["stopping", "clean shutdown"]))


def test_two_partials_of_one_function(tmp_path: Path) -> None:
    source = """
def stop(name, previous, signum, frame):
    print(name, "stopping", flush=True)
    if name == "db":
        sys.exit(0)
    if callable(previous):
        previous(signum, frame)

signal.signal(signal.SIGTERM, functools.partial(stop, "db", signal.getsignal(signal.SIGTERM)))
install()
print("RESULT", count(3), flush=True)
signal.signal(signal.SIGTERM, functools.partial(stop, "web", signal.getsignal(signal.SIGTERM)))
ready()
forever()
"""
    as_without(tmp_path, source, (0, ["web stopping", "db stopping"]))


def test_a_handler_put_back_and_removed_is_not_called(tmp_path: Path) -> None:
    source = """
install()
with deferred("the context's handler, after the context"):
    print("RESULT", count(3), flush=True)
stopped = Flag()

def app(signum, frame):
    print("app", flush=True)
    stopped.set()
    if callable(old):
        old(signum, frame)

old = signal.signal(signal.SIGTERM, app)
ready()
stopped.wait()
print("clean shutdown", flush=True)
"""
    as_without(tmp_path, source, (0, ["app", "clean shutdown"]))


def test_a_decorated_method_is_called_once(tmp_path: Path) -> None:
    source = """
install()

def logged(fn):
    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        return fn(*args, **kwargs)
    return wrapper

class Service:
    def __init__(self):
        self.stopped = Flag()
        self.old = signal.signal(signal.SIGTERM, self.on_term)

    @logged
    def on_term(self, signum, frame):
        print("on_term", flush=True)
        self.stopped.set()
        if callable(self.old):
            self.old(signum, frame)

service = Service()
print("RESULT", count(3), flush=True)
ready()
service.stopped.wait()
print("clean shutdown", flush=True)
"""
    as_without(tmp_path, source, (0, ["on_term", "clean shutdown"]))


def test_a_sigterm_during_the_handler_when_the_frame_passed_is_none(tmp_path: Path) -> None:
    source = GRACEFUL_THEN_FORCED + """
install()

def component(signum, frame):  # as an event loop's callback: no frame
    print("X", flush=True)
    if callable(old):
        old(signum, None)

old = signal.signal(signal.SIGTERM, component)
ready()
forever()
"""
    as_without(tmp_path, source, (3, ["X", "A call 1", "X", "A call 2"]), signals=2)
