"""Review 132 (of review 131's fixes): each program runs without and with the library.

- "Restore the old handler and kill again" in a helper function, or under a decorator,
  with ``install_signal_handlers()`` called again after it: b9722ec's guard missed the
  loop, which recursed to RecursionError (exit 1, not death by SIGTERM); 71b5e06's ran
  the handler 20 times. The program's handler now runs as the installed one.
- A handler of one class's instance, the only one known with that code, was taken for
  another instance's on the way: its SIGTERM was dropped, and the process hung.
- A handler waiting to be put back, called through a scope's chain, was then lost when
  the scope ended: the next SIGTERM took the default action.
- A process a store started from the upload thread inherited SIGTERM and SIGINT blocked,
  and ignored ``terminate()`` for good.
"""

from __future__ import annotations

import signal
from pathlib import Path

import pytest

from .signal_children import as_without


@pytest.mark.parametrize("where", ["helper", "decorator"])
def test_restore_and_kill_again_in_a_helper_or_a_decorator(tmp_path: Path,
                                                            where: str) -> None:
    source = f"WHERE = {where!r}\n" + """
install()

def reraise(signum, previous):
    signal.signal(signum, previous)
    os.kill(os.getpid(), signum)

def logged(fn):
    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        return fn(*args, **kwargs)
    return wrapper

def cleanup_then_kill(signum, frame):
    print("cleanup", flush=True)
    if WHERE == "helper":
        reraise(signum, old)
    else:
        signal.signal(signum, old)
        os.kill(os.getpid(), signum)

handler = cleanup_then_kill if WHERE == "helper" else logged(cleanup_then_kill)
old = signal.signal(signal.SIGTERM, handler)
install()  # (as the library's warning says, after installing one's own)
print("RESULT", count(3), flush=True)
ready()
forever()
"""
    as_without(tmp_path, source, (-signal.SIGTERM, ["cleanup"]))


def test_another_instance_of_the_same_class_on_the_way(tmp_path: Path) -> None:
    source = """
class Component:
    def __init__(self, name):
        self.name = name
        self.old = signal.signal(signal.SIGTERM, self.on_term)

    def on_term(self, signum, frame):
        print(self.name, "stopping", flush=True)
        if self.name == "db":
            os._exit(0)
        if callable(self.old):
            self.old(signum, frame)

db = Component("db")
install()
print("RESULT", count(3), flush=True)
web = Component("web")

def top(signum, frame):
    print("top", flush=True)
    if callable(top_old):
        top_old(signum, frame)

top_old = signal.signal(signal.SIGTERM, top)
ready()
forever()
"""
    as_without(tmp_path, source, (0, ["top", "web stopping", "db stopping"]))


def test_a_handler_waiting_to_be_put_back_outlives_a_scope(tmp_path: Path) -> None:
    source = """
install()
n = 0
done = Flag()  # (a pipe: set() in the handler takes no lock the wait may hold)

def graceful(signum, frame):  # a second SIGTERM ends it
    global n
    n += 1
    print("graceful", n, flush=True)
    if n == 2:
        os._exit(0)
    done.set()

signal.signal(signal.SIGTERM, graceful)
it = count.iter(3) if LIBRARY else iter([1, 2, 3])
next(it)
t = threading.Thread(target=lambda: list(it))  # (the run ends in another thread)
t.start()
t.join()

@contextlib.contextmanager
def chaining_scope():  # a library's scope: its handler, chaining to the one it found
    def framework(signum, frame):
        print("framework", flush=True)
        if callable(old):
            old(signum, frame)
    old = signal.signal(signal.SIGTERM, framework)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, old)

with chaining_scope():
    ready()
    done.wait()  # the first SIGTERM
ready(1)
forever()  # the second
"""
    as_without(tmp_path, source, (0, ["framework", "graceful 1", "graceful 2"]), signals=2)


def test_a_process_a_store_starts_keeps_the_programs_signal_mask(tmp_path: Path) -> None:
    source = """
import subprocess
from resumable.stores._local import LocalStore

def blocked(pid):
    for line in open(f"/proc/{pid}/status"):
        if line.startswith("SigBlk"):
            mask = int(line.split()[1], 16)
            return [s.name for s in (signal.SIGINT, signal.SIGTERM) if mask >> (s - 1) & 1]

class AgentStore(LocalStore):  # starts a helper process with its first checkpoint
    agent = None

    def put(self, key, data):
        if AgentStore.agent is None and "ckpt-" in key:
            AgentStore.agent = subprocess.Popen(["sleep", "1000"])
        return super().put(key, data)

store = AgentStore(STORE)
if LIBRARY:
    @checkpointed(store=store)
    def job(*, state=None):
        yield 1
        return 1

    job()
else:
    store.put("x/ckpt-1", [b"data"])
agent = AgentStore.agent
print("agent blocks", blocked(agent.pid), flush=True)
agent.terminate()
print("agent ended", agent.wait(), flush=True)
"""
    as_without(tmp_path, source, (0, ["agent blocks []", "agent ended -15"]), signals=0)
