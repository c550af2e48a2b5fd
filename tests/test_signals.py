"""SIGTERM at awkward moments still ends in a saved state and exit status 143."""

from __future__ import annotations

import contextlib
import os
import select
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from resumable._errors import EXIT_SIGTERM
from resumable._run import Run
from resumable.stores import open_store

ROOT = Path(__file__).resolve().parents[1]

_DURING_FINAL_SAVE = """
import os, signal, time
from resumable import checkpointed
from resumable.stores._local import LocalStore

class SignallingStore(LocalStore):
    def put(self, key, data):
        if key.endswith("-000000000003"):
            os.kill(os.getpid(), signal.SIGTERM)  # arrives while the last state is saved
            time.sleep(0.2)
        super().put(key, data)

@checkpointed(store=SignallingStore({store!r}), run_id="r", every=1)
def f(n, *, state=None):
    state = state or 0
    while state < n:
        state += 1
        yield state
    return state

print("result", f(3), flush=True)
time.sleep(0.5)
print("still running after SIGTERM", flush=True)
"""

_DURING_CONSUMER = """
import os, signal, time
from resumable import checkpointed

@checkpointed(store={store!r}, run_id="r", every=1000)
def f(n, *, state=None):
    state = state or 0
    while state < n:
        state += 1
        yield state

for s in f.iter(100):
    if s == 3:
        os.kill(os.getpid(), signal.SIGTERM)  # the consumer is working on state 3
        time.sleep(0.5)
        break
print("still running after SIGTERM", flush=True)
"""


def run_script(tmp_path: Path, source: str, args: list[str] | None = None,
               **env: str) -> subprocess.CompletedProcess[str]:
    script = tmp_path / "script.py"
    script.write_text(textwrap.dedent(source.format(store=str(tmp_path / "store"))))
    return subprocess.run([sys.executable, str(script), *(args or [])], capture_output=True,
                          text=True, timeout=60, cwd=ROOT,
                          env=dict(os.environ, PYTHONPATH=str(ROOT), **env))


def test_sigterm_during_the_final_save_still_exits_143(tmp_path: Path) -> None:
    """A SIGTERM that lands while the last state is being saved is not swallowed."""
    proc = run_script(tmp_path, _DURING_FINAL_SAVE)
    assert proc.returncode == EXIT_SIGTERM, proc.stderr
    assert "still running" not in proc.stdout
    run = Run(open_store(str(tmp_path / "store")), "r")
    assert run.load_result() == (True, 3)


def test_sigterm_while_an_iter_consumer_works_saves_and_exits(tmp_path: Path) -> None:
    """With f.iter, SIGTERM during the consumer's work saves the state it holds and exits."""
    proc = run_script(tmp_path, _DURING_CONSUMER)
    assert proc.returncode == EXIT_SIGTERM, proc.stderr
    assert "still running" not in proc.stdout
    latest = Run(open_store(str(tmp_path / "store")), "r").load_latest()
    assert latest is not None and latest.step == 3 and latest.state == 3


_WHILE_HOLDING_A_LOG_LOCK = """
import logging, os, signal, sys, time
from resumable import checkpointed
from resumable.stores._local import LocalStore

logging.basicConfig(level=logging.INFO, stream=sys.stderr)
handler = logging.getLogger().handlers[0]

class LoggingStore(LocalStore):
    def put(self, key, data):
        if "/ckpt-" in key:  # the upload thread logs, as retries do
            logging.getLogger("resumable").warning("put %s", key)
        super().put(key, data)

@checkpointed(store=LoggingStore({store!r}), run_id="r")
def f(n, *, state=None):
    s = state or 0
    while s < n:
        s += 1
        yield s

for s in f.iter(100):
    if s == 3:
        with handler.lock:  # the consumer is inside a log call when SIGTERM comes
            os.kill(os.getpid(), signal.SIGTERM)
            for _ in range(10):
                pass
print("still running after SIGTERM", flush=True)
"""

_CLEANUP_RAISES = """
import os, signal, time
from resumable import checkpointed

@checkpointed(store={store!r}, run_id="r")
def f(n, *, state=None):
    s = state or 0
    try:
        while s < n:
            s += 1
            yield s
    finally:
        raise ValueError("cleanup failed")

try:
    for s in f.iter(10):
        if s == 2:
            break
except ValueError:
    pass
os.kill(os.getpid(), signal.SIGTERM)  # no run is active: the default action applies
time.sleep(2)
print("still running after SIGTERM", flush=True)
"""


def test_sigterm_while_the_consumer_holds_a_lock_does_not_hang(tmp_path: Path) -> None:
    """The handler does no blocking work, so a lock the consumer holds cannot deadlock it."""
    proc = run_script(tmp_path, _WHILE_HOLDING_A_LOG_LOCK)
    assert proc.returncode == EXIT_SIGTERM, proc.stderr[-2000:]
    latest = Run(open_store(str(tmp_path / "store")), "r").load_latest()
    assert latest is not None and latest.step == 3


def test_handler_is_restored_even_when_the_body_cleanup_raises(tmp_path: Path) -> None:
    """A body whose finally raises still leaves the process's SIGTERM handling as it was."""
    proc = run_script(tmp_path, _CLEANUP_RAISES)
    assert proc.returncode == -15, (proc.returncode, proc.stderr[-2000:])
    assert "still running" not in proc.stdout


# -- the body is not interrupted: it runs to its next yield, which is saved ----------------

_CATCHES_EVERYTHING = """
import os, signal, sys, time
from resumable import checkpointed

def fitness(gen):
    if gen == 3:
        os.kill(os.getpid(), signal.SIGTERM)  # arrives in the middle of the evaluation
    total = 0
    for i in range(200):
        total += i
        time.sleep(0.001)
    return total

@checkpointed(store={store!r}, run_id="r", every={every})
def f(n, *, state=None):
    state = state or {{"gen": 0, "pen": 0, "fit": 0}}
    while state["gen"] < n:
        g = state["gen"] + 1
        try:
            state["fit"] += fitness(g)
        except BaseException:  # a body that swallows everything, as real ones do
            state["pen"] += 1
        state["gen"] = g
        print("done", g, flush=True)
        yield state

f(20)
print("still running after SIGTERM", flush=True)
"""


@pytest.mark.parametrize("every", ["'generation'", "5"])
def test_sigterm_lets_the_generation_finish_and_saves_it(tmp_path: Path, every: str) -> None:
    """SIGTERM mid-generation: the body is not interrupted (a body catching BaseException
    yields no damaged state), the generation it was in is saved (due or not), exit 143."""
    proc = run_script(tmp_path, _CATCHES_EVERYTHING.replace("{every}", every))
    assert proc.returncode == EXIT_SIGTERM, proc.stderr[-2000:]
    assert "still running" not in proc.stdout
    latest = Run(open_store(str(tmp_path / "store")), "r").load_latest()
    assert latest is not None and latest.step == 3  # no generation lost
    assert latest.state == {"gen": 3, "pen": 0, "fit": 3 * sum(range(200))}
    assert "saved at step 3; exiting with 143" in proc.stderr


_NEVER_YIELDS = """
import os, signal, threading
from resumable import checkpointed

@checkpointed(store={store!r}, run_id="r")
def f(n, *, state=None):
    s = state or 0
    while s < n:
        s += 1
        if s == 3:
            os.kill(os.getpid(), signal.SIGTERM)
            threading.Event().wait()  # stuck: no next yield ever comes
        yield s

f(10)
"""


def test_a_body_that_never_yields_is_interrupted_after_the_timeout(tmp_path: Path) -> None:
    """No yield within $RESUMABLE_TERM_TIMEOUT: the body is interrupted, the last saved
    state stands and the process exits 143."""
    proc = run_script(tmp_path, _NEVER_YIELDS, RESUMABLE_TERM_TIMEOUT="0.5")
    assert proc.returncode == EXIT_SIGTERM, proc.stderr[-2000:]
    assert "reached no yield within $RESUMABLE_TERM_TIMEOUT=0.5s" in proc.stderr
    latest = Run(open_store(str(tmp_path / "store")), "r").load_latest()
    assert latest is not None and latest.step == 2


# -- process pools and a SIGTERM to the whole process group -------------------------------

_POOL = """
import faulthandler, multiprocessing as mp, os, signal, sys, time
faulthandler.register(signal.SIGUSR2, all_threads=True)  # (the test's dump of a hang)
from concurrent.futures import ProcessPoolExecutor
from resumable import checkpointed

def square(x):
    time.sleep(0.01)
    return x * x

@checkpointed(store={store!r}, run_id="r")
def f(n, kind, *, state=None):
    s = state or 0
    if kind == "pool":
        pool = mp.get_context("fork").Pool(2)
        run = lambda: pool.map(square, range(8))
    else:
        pool = ProcessPoolExecutor(2, mp_context=mp.get_context(kind))
        run = lambda: list(pool.map(square, range(8)))
    while s < n:  # the pool is never closed, as in many scripts
        run()
        s += 1
        yield s
        print("done", s, flush=True)

if __name__ == "__main__":
    f(10**6, sys.argv[1])
"""


def _group_alive(pgid: int) -> bool:
    """Some process of the group is alive (zombies, reaped by init later, do not count)."""
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[2]) == pgid and fields[0] != "Z":
            return True
    return False


@pytest.mark.parametrize("kind", ["pool", "fork", "spawn"])
def test_sigterm_to_the_process_group_with_a_process_pool(tmp_path: Path, kind: str) -> None:
    """kill -TERM -PGID with pool workers in the body: the workers die as without us, the
    parent saves and exits 143 (it used to hang in multiprocessing's exit)."""
    script = tmp_path / "script.py"
    script.write_text(textwrap.dedent(_POOL.format(store=str(tmp_path / "store"))))
    proc = subprocess.Popen(
        [sys.executable, str(script), kind], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        text=True, cwd=ROOT, start_new_session=True,
        env=dict(os.environ, PYTHONPATH=str(ROOT), RESUMABLE_TERM_TIMEOUT="3"))
    assert proc.stdout is not None
    for line in proc.stdout:
        if int(line.split()[1]) >= 3:
            seen = int(line.split()[1])
            break
    os.killpg(proc.pid, signal.SIGTERM)
    try:  # the parent's exit, not the pipes' end: a leftover worker would hold those
        proc.wait(timeout=60)
    except subprocess.TimeoutExpired:
        os.kill(proc.pid, signal.SIGUSR2)  # its threads' stacks, on stderr
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.communicate(timeout=10)
        os.killpg(proc.pid, signal.SIGKILL)
        _, err = proc.communicate()
        pytest.fail(f"the parent hung after SIGTERM to its process group: {err[-6000:]}")
    # No pool worker outlives the parent (a pool replaces the workers the SIGTERM killed).
    deadline = time.monotonic() + 30
    while _group_alive(proc.pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    leftover = _group_alive(proc.pid)
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)
    _, err = proc.communicate()
    assert not leftover, f"processes of the group outlived the parent: {err[-3000:]}"
    assert proc.returncode == EXIT_SIGTERM, err[-3000:]
    latest = Run(open_store(str(tmp_path / "store")), "r").load_latest()
    assert latest is not None and latest.step >= seen


_CLEANUP_HANGS = """
import sys, threading, time
from resumable import checkpointed

@checkpointed(store={store!r}, run_id="r")
def count(*, state=None):
    s = state or 0
    while True:
        s += 1
        yield s
        print("GEN", s, flush=True)
        time.sleep(0.01)  # a generation's work

try:
    count()
finally:  # as pool.terminate() on a pool whose worker died holding its queue's lock
    print("CLEANUP", flush=True)
    threading.Event().wait()
"""


def test_a_program_whose_cleanup_hangs_after_sigterm_still_exits_143(tmp_path: Path) -> None:
    """The run saves and raises; the application's own `finally` then hangs for ever (as
    pool.terminate() does on a pool whose worker the group's SIGTERM killed while it held
    the queue's lock). Without us the SIGTERM would have ended the process; with us it
    must end too: exit 143 once $RESUMABLE_TERM_TIMEOUT has passed (before: it hung)."""
    with _child(tmp_path, _CLEANUP_HANGS, RESUMABLE_TERM_TIMEOUT="2") as child:
        child.wait_for_line("GEN 2")
        child.proc.send_signal(signal.SIGTERM)
        child.wait_for_line("CLEANUP")
        status, _, err = child.finish()
    assert status == EXIT_SIGTERM, err[-3000:]
    assert "the program did not exit after its runs stopped" in err, err[-3000:]
    latest = Run(open_store(str(tmp_path / "store")), "r").load_latest()
    assert latest is not None and latest.step >= 2


_SLOW_SAVE_AFTER_SIGTERM = """
import os, signal, time
from resumable import checkpointed
from resumable.stores._local import LocalStore

class SlowUplink(LocalStore):
    def put(self, key, data):
        if key.endswith("-000000000003"):
            print("SAVING", flush=True)
            time.sleep(2.5)  # one upload of a large state: 10 x $RESUMABLE_TERM_TIMEOUT
        super().put(key, data)

@checkpointed(store=SlowUplink({store!r}), run_id="r", every=1000)
def count(*, state=None):
    s = state or 0
    while True:
        s += 1
        if s == 3:
            os.kill(os.getpid(), signal.SIGTERM)  # the body reaches its yield: state 3
        yield s

count()
"""


def test_a_slow_save_after_sigterm_is_not_cut_by_the_exit_guard(tmp_path: Path) -> None:
    """The timeout bounds the body's way to its yield, not the save after it (the README:
    the grace period covers the timeout plus one upload). The exit guard started when the
    main thread's run raised Terminated must wait for that save, however long. Before: it
    gave the runs 3 x $RESUMABLE_TERM_TIMEOUT, then left with 143 in the middle of the
    upload ("its saves are done"), and state 3 was lost."""
    with _child(tmp_path, _SLOW_SAVE_AFTER_SIGTERM, RESUMABLE_TERM_TIMEOUT="0.25") as child:
        child.wait_for_line("SAVING")
        status, _, err = child.finish()
    assert status == EXIT_SIGTERM, err[-3000:]
    assert "did not exit after its runs stopped" not in err, err[-3000:]
    latest = Run(open_store(str(tmp_path / "store")), "r").load_latest()
    assert latest is not None and latest.step == 3, err[-3000:]


_SLOW_SAVE_IN_A_THREAD = """
import os, signal, threading, time
import resumable
from resumable import checkpointed
from resumable.stores._local import LocalStore

sent = threading.Event()

class SlowUplink(LocalStore):
    def put(self, key, data):
        if sent.is_set() and "/ckpt-" in key:
            print("SAVING", key, flush=True)
            time.sleep(2.5)  # one upload of a large state: 10 x $RESUMABLE_TERM_TIMEOUT
        super().put(key, data)

@checkpointed(store=SlowUplink({store!r}), run_id="r", every=10**9)  # SIGTERM saves only
def count(*, state=None):
    s = state or 0
    while True:
        s += 1
        if s == 3:
            sent.set()
            os.kill(os.getpid(), signal.SIGTERM)
        yield s

resumable.install_signal_handlers()
worker = threading.Thread(target=count)
worker.start()
worker.join()
"""


def test_a_slow_save_in_a_worker_thread_after_sigterm_is_waited_for(tmp_path: Path) -> None:
    """The same for a run in a worker thread: the main thread ends with Terminated and
    the exit hook waits for the run's save, however long, before the exit handlers get
    their timeout. Before: it waited 2 x $RESUMABLE_TERM_TIMEOUT, then the exit guard
    left with 143 in the middle of the upload ("the exit handlers did not finish")."""
    with _child(tmp_path, _SLOW_SAVE_IN_A_THREAD, RESUMABLE_TERM_TIMEOUT="0.25") as child:
        saving = child.wait_for_line("SAVING").split()[1]
        status, _, err = child.finish()
    assert status == EXIT_SIGTERM, err[-3000:]
    assert "did not finish" not in err and "did not exit" not in err, err[-3000:]
    latest = Run(open_store(str(tmp_path / "store")), "r").load_latest()
    assert latest is not None and latest.key == saving, err[-3000:]


def test_the_watchdog_waiting_for_saves_leaves_their_failure_to_the_run(
    memory_url: str,
) -> None:
    """After a SIGTERM the watchdog waits for a flagged run's saves (wait_for_saves) while
    the run flushes them itself. A save that failed must still reach the run, which then
    ends with that error (74, or 73 for a deleted run) rather than 143 "saved at step".
    Before: the watchdog's flush took the failure (and only logged it), and whichever of
    the two woke first decided the exit status: 143 in about half the runs of
    /tmp/r12/watchdog_eats_error.py (review12)."""
    from resumable import checkpointed
    from resumable._errors import StoreError

    @checkpointed(store=memory_url, run_id="r")
    def f(*, state=None):  # type: ignore[no-untyped-def]
        yield 1

    execution = f._execution((), {})

    def fails() -> None:
        raise StoreError("put failed for good")

    execution.uploader.submit(fails)
    try:
        execution.wait_for_saves()  # the watchdog's wait
        with pytest.raises(StoreError, match="for good"):
            execution.uploader.flush()  # the run's own
    finally:
        execution.uploader.close()


_TAKEN_BY_ANOTHER_THREAD = """
import ctypes, os, signal, threading, time
from resumable import checkpointed

never = threading.Event()

def take_the_signal():
    # The kernel may hand a process-directed SIGTERM to any thread: after a group SIGTERM
    # it was multiprocessing's worker-handling thread. tgkill aims one at this thread
    # (signal.pthread_kill would also check for signals itself, which hides the hang).
    ctypes.CDLL(None).tgkill(os.getpid(), threading.get_native_id(), signal.SIGTERM)
    time.sleep(3600)

@checkpointed(store={store!r}, run_id="r")
def f(*, state=None):
    s = state or 0
    while True:
        s += 1
        if s == 3:
            threading.Thread(target=take_the_signal, daemon=True).start()
            never.wait()  # a lock wait without a timeout: only a signal to this thread wakes it
        yield s

f()
"""


def test_sigterm_taken_by_another_thread_while_the_main_thread_waits_on_a_lock(
        tmp_path: Path) -> None:
    """Python runs handlers in the main thread only; a SIGTERM taken by another thread
    left a main thread blocked in Event.wait() asleep for ever (the group-SIGTERM pool
    hang). The relay wakes it: the handler runs, the body reaches no yield in
    $RESUMABLE_TERM_TIMEOUT, it is interrupted and the last saved state (step 2) stands."""
    proc = run_script(tmp_path, _TAKEN_BY_ANOTHER_THREAD, RESUMABLE_TERM_TIMEOUT="1")
    assert proc.returncode == EXIT_SIGTERM, proc.stderr[-3000:]
    assert "reached no yield" in proc.stderr, proc.stderr[-3000:]
    latest = Run(open_store(str(tmp_path / "store")), "r").load_latest()
    assert latest is not None and latest.step == 2 and latest.state == 2


# -- threads ------------------------------------------------------------------------------

_THREADS = """
import os, signal, sys, threading, time
import resumable
from resumable import checkpointed

if sys.argv[1] == "install":
    resumable.install_signal_handlers()
reached = {{"worker": 0, "main": 0}}
worker_going = threading.Event()

def make(name):
    @checkpointed(store={store!r}, run_id=name)
    def f(n, *, state=None):
        s = state or 0
        while s < n:
            s += 1
            time.sleep(0.005)
            if name == "worker" and s == 3:
                worker_going.set()
            if name == "main" and s == 5:
                print("worker-at", reached["worker"], flush=True)
                os.kill(os.getpid(), signal.SIGTERM)
            reached[name] = s
            yield s
    return f

t = threading.Thread(target=make("worker"), args=(10**6,))
t.start()
worker_going.wait()
if sys.argv[2] == "both":
    make("main")(10**6)
else:
    os.kill(os.getpid(), signal.SIGTERM)
    t.join()
print("still running after SIGTERM", flush=True)
"""


@pytest.mark.parametrize("main_run", ["both", "worker-only"])
def test_sigterm_saves_runs_in_every_thread_and_exits(tmp_path: Path, main_run: str) -> None:
    """With the handler installed from the main thread, a SIGTERM makes the runs in the
    main thread and in a worker thread each save their next yield; the process exits 143."""
    proc = run_script(tmp_path, _THREADS, args=["install", main_run])
    assert proc.returncode == EXIT_SIGTERM, proc.stderr[-3000:]
    assert "still running" not in proc.stdout
    assert "Exception in thread" not in proc.stderr, proc.stderr[-3000:]  # a designed stop
    store = open_store(str(tmp_path / "store"))
    worker = Run(store, "worker").load_latest(with_state=False)
    assert worker is not None and worker.step >= 3
    if main_run == "both":
        at = int(proc.stdout.split("worker-at")[1].split()[0])
        assert worker.step >= at  # the worker finished the generation it was in
        main = Run(store, "main").load_latest(with_state=False)
        assert main is not None and main.step == 5


_LATE_START = """
import atexit, sys, threading
from resumable import checkpointed

@checkpointed(store={store!r}, run_id="late")
def f(*, state=None):
    yield 1
    return "ran"

def worker():
    threading.main_thread().join()  # the script body is over: shutdown has begun
    print("thread run:", f(), flush=True)

if sys.argv[1] == "thread":
    threading.Thread(target=worker).start()
else:
    atexit.register(lambda: print("atexit run:", f(), flush=True))
"""


@pytest.mark.parametrize("where", ["thread", "atexit"])
def test_a_run_first_started_during_shutdown_works(tmp_path: Path, where: str) -> None:
    """A run first started once the interpreter shuts down (a worker thread still going
    after the script body, an atexit handler) runs; Python refuses new exit hooks then."""
    proc = run_script(tmp_path, _LATE_START, args=[where])
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert f"{where} run: ran" in proc.stdout, proc.stderr[-3000:]


def test_a_run_first_started_in_a_thread_warns_once(tmp_path: Path) -> None:
    """Without install_signal_handlers(), a run started in a thread logs how to get it."""
    source = _THREADS.replace("t.join()", "t.join(0)") + "\nos._exit(0)\n"
    proc = run_script(tmp_path, "import logging; logging.basicConfig()\n" + source,
                      args=["no", "worker-only"])
    assert proc.stderr.count("install_signal_handlers()") == 1, proc.stderr[-3000:]


def test_install_signal_handlers_outside_the_main_thread_is_refused() -> None:
    """The public installer says where it must be called from."""
    import threading

    import resumable

    errors: list[BaseException] = []

    def call() -> None:
        try:
            resumable.install_signal_handlers()
        except RuntimeError as err:
            errors.append(err)

    t = threading.Thread(target=call)
    t.start()
    t.join()
    assert errors and "main thread" in str(errors[0])


# -- a SIGTERM while the script ends or while runs stop -----------------------------------

_SAY = """
import os, signal, sys, threading, time
import resumable
from resumable import _signals, checkpointed

resumable.install_signal_handlers()  # the runs start in a worker thread
DEADLINE = time.monotonic() + 60  # no SIGTERM, no gate: give up rather than run forever

def say(*words):  # one write per line: the threads' lines do not mix
    os.write(1, (" ".join(map(str, words)) + "\\n").encode())

def wait_for(condition, what):  # the child polls; the test waits on the lines it prints
    while not condition():
        if time.monotonic() > DEADLINE:
            say("gave up waiting for", what)
            os._exit(3)
        time.sleep(0.002)
"""


class _Child:
    """A script run as a real process whose printed lines the test waits for, each wait
    bounded: on a timeout the child is killed and the test fails with what it printed."""

    def __init__(self, tmp_path: Path, source: str, args: list[str] | None = None,
                 timeout: float = 60, **env: str) -> None:
        script = tmp_path / "script.py"
        script.write_text(textwrap.dedent(source.format(store=str(tmp_path / "store"))))
        self.err_path = tmp_path / "stderr"
        with self.err_path.open("wb") as err:  # a file: a full stderr pipe cannot block it
            self.proc = subprocess.Popen(
                [sys.executable, str(script), *(args or [])], stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE, stderr=err, cwd=ROOT,
                env=dict(os.environ, PYTHONPATH=str(ROOT), **env))
        self.deadline = time.monotonic() + timeout
        self.out = b""

    @property
    def stderr(self) -> str:
        return self.err_path.read_text(errors="replace")

    def _fail(self, why: str) -> None:
        self.kill()
        pytest.fail(f"{why}\nstdout:\n{self.out.decode()[-2000:]}\nstderr:\n"
                    f"{self.stderr[-3000:]}")

    def wait_for_line(self, prefix: str) -> str:
        """The first line the child printed that starts with prefix (waiting for it)."""
        assert self.proc.stdout is not None
        fd = self.proc.stdout.fileno()
        while True:
            for line in self.out.decode().splitlines(keepends=True):
                if line.startswith(prefix) and line.endswith("\n"):
                    return line.strip()
            left = self.deadline - time.monotonic()
            if left <= 0:
                self._fail(f"timed out waiting for a line {prefix!r}")
            ready, _, _ = select.select([fd], [], [], left)
            if ready:
                chunk = os.read(fd, 65536)
                if not chunk:
                    self.proc.wait(timeout=max(1.0, self.deadline - time.monotonic()))
                    self._fail(f"the child ended (status {self.proc.returncode}) before "
                               f"printing {prefix!r}")
                self.out += chunk

    def finish(self) -> tuple[int, str, str]:
        """Wait for the child to exit: its status, all it printed, its stderr."""
        try:
            rest, _ = self.proc.communicate(timeout=max(1.0, self.deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            self._fail("timed out waiting for the child to exit")
        self.out += rest
        return self.proc.returncode, self.out.decode(), self.stderr

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.out += self.proc.communicate(timeout=10)[0]


@contextlib.contextmanager
def _child(tmp_path: Path, source: str, args: list[str] | None = None,
           **env: str) -> Iterator[_Child]:
    child = _Child(tmp_path, source, args, **env)
    try:
        yield child
    finally:
        child.kill()


_DURING_THE_FINAL_JOIN = _SAY + """
started = threading.Event()

@checkpointed(store={store!r}, run_id="worker")
def f(*, state=None):
    started.set()
    s = state or 0
    announced = False
    while time.monotonic() < DEADLINE:
        s += 1
        if not announced and not threading.main_thread().is_alive():
            say("main over", s)  # Python joins this thread: the script body is over
            announced = True
        time.sleep(0.005)
        yield s
    say("no SIGTERM came")

threading.Thread(target=f).start()  # not a daemon: Python waits for it at the end
started.wait()  # the run is registered (one first started during shutdown: another test)
say("script body over")
"""


def test_sigterm_while_python_joins_the_runs_thread_at_exit(tmp_path: Path) -> None:
    """The script body is over and Python joins a thread whose run still goes: a SIGTERM
    makes the run save its next yield and the process exit 143 (an exception raised in
    the join would be ignored: exit 0, or a hang)."""
    with _child(tmp_path, _DURING_THE_FINAL_JOIN) as child:
        child.wait_for_line("script body over")
        seen = int(child.wait_for_line("main over").split()[2])
        child.proc.send_signal(signal.SIGTERM)
        status, out, err = child.finish()
    assert status == EXIT_SIGTERM, err[-3000:]
    assert "no SIGTERM came" not in out
    assert "Traceback" not in err and "Exception" not in err, err[-3000:]
    latest = Run(open_store(str(tmp_path / "store")), "worker").load_latest(with_state=False)
    assert latest is not None and latest.step >= seen


_TAKEN_BY_THE_RUNS_THREAD_DURING_THE_FINAL_JOIN = _SAY + """
import ctypes
started = threading.Event()

@checkpointed(store={store!r}, run_id="worker")
def f(*, state=None):
    started.set()
    s = state or 0
    sent = False
    while time.monotonic() < DEADLINE:
        s += 1
        if not sent and not threading.main_thread().is_alive():
            say("main over", s)  # Python joins this thread: the script body is over
            # The kernel hands the process's SIGTERM to this thread, not the main one
            # (tgkill: signal.pthread_kill would check for signals itself).
            ctypes.CDLL(None).tgkill(os.getpid(), threading.get_native_id(), signal.SIGTERM)
            sent = True
        time.sleep(0.005)
        yield s
    say("no SIGTERM came")

threading.Thread(target=f).start()  # not a daemon: Python waits for it at the end
started.wait()
say("script body over")
"""


def test_sigterm_taken_by_the_runs_thread_while_python_joins_it_at_exit(
        tmp_path: Path) -> None:
    """The script body is over and Python joins the run's thread (an untimed lock wait,
    main_thread().is_alive() is False): a SIGTERM the kernel hands to the run's thread
    must still wake the main thread, whose handler tells the run to stop. The relay
    skipped a main thread that was no longer 'alive': the SIGTERM went unserved until
    the run ended by itself."""
    with _child(tmp_path, _TAKEN_BY_THE_RUNS_THREAD_DURING_THE_FINAL_JOIN) as child:
        child.wait_for_line("script body over")
        seen = int(child.wait_for_line("main over").split()[2])
        status, out, err = child.finish()
    assert "no SIGTERM came" not in out, err[-3000:]
    assert status == EXIT_SIGTERM, err[-3000:]
    latest = Run(open_store(str(tmp_path / "store")), "worker").load_latest(with_state=False)
    assert latest is not None and latest.step >= seen


_SECOND_SIGTERM = _SAY + """
GATE = sys.argv[2]  # created by the test once it sent the second SIGTERM
r, w = os.pipe()
os.set_blocking(w, False)
signal.set_wakeup_fd(w)  # written as the signal arrives, before our handler runs

def signals():
    n = 0
    while os.read(r, 1):
        n += 1
        say("signal", n)

def main_waits_for_the_runs():  # the main thread is in our exit hook: its run is over
    frame = sys._current_frames().get(threading.main_thread().ident)
    while frame is not None:
        if (frame.f_code.co_name == "_at_exit"
                and frame.f_globals.get("__name__") == "resumable._signals"):
            return True
        frame = frame.f_back
    return False

worker_going = threading.Event()
main_waits = threading.Event()

def make(name):
    @checkpointed(store={store!r}, run_id=name)
    def f(*, state=None):
        s = state or 0
        while time.monotonic() < DEADLINE:
            s += 1
            if name == "worker":
                worker_going.set()
                if main_waits.is_set():  # both runs are mid-generation when SIGTERM comes
                    say("worker waits at", s)
                    wait_for(_signals.terminating, "SIGTERM")
                    if sys.argv[1] == "in-exit-hook":
                        wait_for(main_waits_for_the_runs, "the main thread's exit hook")
                    say("worker stopping at", s)
                    wait_for(lambda: os.path.exists(GATE), "the gate")
                time.sleep(0.002)
            elif s == 3:
                main_waits.set()
                say("main waits")
                wait_for(_signals.terminating, "SIGTERM")
                if sys.argv[1] == "in-main-run":
                    say("main stopping at", s)
                    wait_for(lambda: os.path.exists(GATE), "the gate")
            yield s
        say("no SIGTERM came")
    return f

threading.Thread(target=signals, daemon=True).start()
threading.Thread(target=make("worker")).start()
worker_going.wait()
try:
    make("main")()
finally:
    say("main run over")
"""


@pytest.mark.parametrize("when", ["in-exit-hook", "in-main-run"])
def test_a_second_sigterm_only_flags_and_both_runs_save(tmp_path: Path, when: str) -> None:
    """Runs in the main thread and in a worker thread, two SIGTERMs: the second one (while
    the main thread's run finishes its generation, or once it saved and the main thread
    waits for the worker's run at exit) raises nothing in the main thread; each run saves
    the generation it was in, and the process exits 143."""
    gate = tmp_path / "gate"
    with _child(tmp_path, _SECOND_SIGTERM, [when, str(gate)]) as child:
        child.wait_for_line("main waits")
        worker_at = int(child.wait_for_line("worker waits at").split()[3])
        child.proc.send_signal(signal.SIGTERM)
        child.wait_for_line("signal 1")
        assert child.wait_for_line("worker stopping at") == f"worker stopping at {worker_at}"
        if when == "in-main-run":
            child.wait_for_line("main stopping at 3")
        child.proc.send_signal(signal.SIGTERM)
        child.wait_for_line("signal 2")  # it arrived: our handler runs at the main
        gate.touch()  # thread's next bytecode, before the runs see the gate
        status, out, err = child.finish()
    store = open_store(str(tmp_path / "store"))
    main = Run(store, "main").load_latest(with_state=False)
    worker = Run(store, "worker").load_latest(with_state=False)
    assert main is not None and main.step == 3, err[-3000:]
    assert worker is not None and worker.step == worker_at, err[-3000:]  # its generation
    assert status == EXIT_SIGTERM, err[-3000:]
    assert "no SIGTERM came" not in out
    assert "Traceback" not in err and "Exception" not in err, err[-3000:]


# -- other handlers: chained, ignored, restored -------------------------------------------

_APP_HANDLER = """
import os, signal, sys
from resumable import checkpointed
from resumable._run import Run
from resumable.stores import open_store

def mine(signum, frame):
    latest = Run(open_store({store!r}), "r").load_latest(with_state=False)
    print("app handler saw step", latest and latest.step, flush=True)

if sys.argv[1] == "handler":
    signal.signal(signal.SIGTERM, mine)
else:
    signal.signal(signal.SIGTERM, signal.SIG_IGN)

@checkpointed(store={store!r}, run_id=sys.argv[2])
def f(n, *, state=None):
    s = state or 0
    while s < n:
        s += 1
        if s == 3 and sys.argv[2] == "r":
            os.kill(os.getpid(), signal.SIGTERM)
        yield s
    return s

if sys.argv[2] == "after":
    print("result", f(4), flush=True)
    print("restored", signal.getsignal(signal.SIGTERM) in (mine, signal.SIG_IGN), flush=True)
    os.kill(os.getpid(), signal.SIGTERM)  # no run active: the application's own handling
    print("still running", flush=True)
else:
    print("result", f(6), flush=True)
"""


def test_the_applications_handler_is_called_after_the_save(tmp_path: Path) -> None:
    """An application's SIGTERM handler is chained: called once the state is saved."""
    proc = run_script(tmp_path, _APP_HANDLER, args=["handler", "r"])
    assert proc.returncode == EXIT_SIGTERM, proc.stderr[-2000:]
    assert "app handler saw step 3" in proc.stdout


def test_an_ignored_sigterm_stays_ignored(tmp_path: Path) -> None:
    """SIG_IGN before the run: the SIGTERM changes nothing, the run completes."""
    proc = run_script(tmp_path, _APP_HANDLER, args=["ignore", "r"])
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "result 6" in proc.stdout


@pytest.mark.parametrize("previous", ["handler", "ignore"])
def test_the_previous_handling_is_restored_after_the_run(tmp_path: Path, previous: str) -> None:
    """Once no run is active, SIGTERM is handled as before the run."""
    proc = run_script(tmp_path, _APP_HANDLER, args=[previous, "after"])
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "restored True" in proc.stdout and "still running" in proc.stdout
    if previous == "handler":
        assert "app handler saw step" in proc.stdout


_REPLACED_IN_RUN = """
import signal
from resumable import checkpointed

def app(signum, frame):
    pass

@checkpointed(store={store!r}, run_id="r")
def f(*, state=None):
    signal.signal(signal.SIGTERM, app)  # e.g. a server or framework set up by the body
    yield 1

f()
print("kept", signal.getsignal(signal.SIGTERM) is app, flush=True)
"""


def test_a_handler_installed_during_the_run_is_kept(tmp_path: Path) -> None:
    """The run ends: the handler seen at its start is restored only if ours is still set."""
    proc = run_script(tmp_path, _REPLACED_IN_RUN)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "kept True" in proc.stdout


_REPLACED_IN_RUN_COUNTS = """
import array, fcntl, os, signal, sys, termios, threading, time
from resumable import checkpointed, _signals

calls = []

def app(signum, frame):
    calls.append(signum)

def relay_done():  # the relay read every byte the signals wrote and waits for more
    n = array.array("i", [0])
    fcntl.ioctl(_signals._relay_fds[0], termios.FIONREAD, n)
    relay = next(t for t in threading.enumerate() if t.name == "resumable-sigterm-relay")
    frame = sys._current_frames().get(relay.ident)
    if n[0] or frame is None or frame.f_code.co_name != "_relay":
        return False
    with open(frame.f_code.co_filename) as source:
        return "os.read(" in source.read().splitlines()[frame.f_lineno - 1]

@checkpointed(store={store!r}, run_id="r")
def f(*, state=None):
    signal.signal(signal.SIGTERM, app)  # e.g. a server or framework set up by the body
    yield 1
    os.kill(os.getpid(), signal.SIGTERM)
    deadline = time.monotonic() + 30
    while not calls or not relay_done():
        if time.monotonic() > deadline:
            print("gave up waiting", flush=True)
            os._exit(3)
    for _ in range(1000):  # bytecodes: a SIGTERM the relay sent would be handled here
        pass
    print("app handler calls", len(calls), flush=True)
    yield 2

f()
"""


def test_a_handler_installed_during_the_run_is_called_once_per_sigterm(
        tmp_path: Path) -> None:
    """The body replaced our handler with its own: one SIGTERM calls it once. The relay
    sent the main thread a second SIGTERM (it only checked that no SIGTERM was being
    served, which ours records), so the application's handler ran twice."""
    proc = run_script(tmp_path, _REPLACED_IN_RUN_COUNTS)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "app handler calls 1" in proc.stdout, proc.stdout + proc.stderr[-2000:]


_ASYNCIO_SIGNAL_AS_A_RUN_ENDS = """
import asyncio, os, signal, sys
from resumable import checkpointed

@checkpointed(store={store!r}, run_id="r")
def f(*, state=None):
    yield 1

sent = []

def profile(frame, event, arg):
    # A SIGUSR1 arrives while the run ends: inside _stop_relay, after its first call to
    # set_wakeup_fd (or as it returns, if it makes none).
    if sent or frame.f_code.co_name != "_stop_relay":
        return
    if (event == "c_return" and arg is signal.set_wakeup_fd) or event == "return":
        sent.append(event)
        os.kill(os.getpid(), signal.SIGUSR1)

async def main():
    got = []
    asyncio.get_running_loop().add_signal_handler(signal.SIGUSR1, got.append, 1)
    sys.setprofile(profile)
    try:
        f()  # a run in the loop's thread, the main thread: our SIGTERM handler is set
    finally:
        sys.setprofile(None)
    for _ in range(3000):  # asyncio reads its wakeup socket: the callback runs soon
        if got:
            break
        await asyncio.sleep(0.01)
    print("sent", len(sent), "asyncio saw", len(got), flush=True)

asyncio.run(main())
"""


def test_a_signal_asyncio_handles_is_not_lost_as_a_run_ends(tmp_path: Path) -> None:
    """asyncio holds Python's wakeup fd (loop.add_signal_handler) and a run ends: the
    relay, which never took the fd, must not unset it to look, or a signal arriving
    then never reaches asyncio's callback."""
    proc = run_script(tmp_path, _ASYNCIO_SIGNAL_AS_A_RUN_ENDS)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "sent 1 asyncio saw 1" in proc.stdout, proc.stdout + proc.stderr[-2000:]


# -- program end with an unfinished iterator ----------------------------------------------

_ITER_AT_EXIT = """
import time
from resumable import checkpointed
from resumable.stores._local import LocalStore

class SlowStore(LocalStore):
    def put(self, key, data):
        if "/ckpt-" in key:
            time.sleep(0.3)  # the upload is still running when the program ends
        super().put(key, data)

@checkpointed(store=SlowStore({store!r}), run_id="r", every={every})
def f(n, *, state=None):
    s = state or 0
    while s < n:
        s += 1
        yield s

it = f.iter(10)
next(it)
next(it)
print("leaving", flush=True)
"""


@pytest.mark.parametrize("every", ["'generation'", "1000"])
def test_an_unfinished_iterator_is_saved_at_program_end(tmp_path: Path, every: str) -> None:
    """`it = f.iter(...)`; next(it); program ends: the state it holds is saved."""
    proc = run_script(tmp_path, _ITER_AT_EXIT.replace("{every}", every))
    assert proc.returncode == 0, proc.stderr[-2000:]
    latest = Run(open_store(str(tmp_path / "store")), "r").load_latest()
    assert latest is not None and latest.step == 2 and latest.state == 2


# -- interactive sessions -----------------------------------------------------------------

_REPL_INPUT = """
import os, signal
from resumable import checkpointed, ConfigurationError

@checkpointed(store={store!r}, run_id="r")
def f(n, *, state=None):
    s = state or 0
    while s < n:
        s += 1
        if s == 3:
            os.kill(os.getpid(), signal.SIGTERM)
        yield s

raise ConfigurationError("a mistake typed at the prompt")
print("alive after the error")
f(10)
print("alive after SIGTERM")
"""


def test_an_interactive_session_survives_errors_and_sigterm(tmp_path: Path) -> None:
    """`python -i`: a ResumableError does not end the session (no exit code there), and a
    SIGTERM stops the run (saved) with KeyboardInterrupt instead of exiting."""
    source = _REPL_INPUT.format(store=str(tmp_path / "store"))
    proc = subprocess.run([sys.executable, "-i", "-q"], input=textwrap.dedent(source),
                          capture_output=True, text=True, timeout=60, cwd=ROOT,
                          env=dict(os.environ, PYTHONPATH=str(ROOT)))
    assert "alive after the error" in proc.stdout + proc.stderr, proc.stderr[-2000:]
    assert "alive after SIGTERM" in proc.stdout + proc.stderr, proc.stderr[-2000:]
    assert "TerminatedInteractive: SIGTERM: the run saved its state" in proc.stderr
    assert proc.returncode == 0
    latest = Run(open_store(str(tmp_path / "store")), "r").load_latest(with_state=False)
    assert latest is not None and latest.step == 3


_SLOW_SAVE = """
import sys, time
from resumable import checkpointed
from resumable.stores import open_store

base = open_store({store!r})
slow = [False]

class Slow:  # a store whose checkpoint writes take longer than $RESUMABLE_TERM_TIMEOUT
    def __getattr__(self, name):
        return getattr(base, name)

    def put(self, key, data):
        if "ckpt-" in key and slow[0]:
            time.sleep(2 * {timeout})
        return base.put(key, data)

@checkpointed(store=Slow(), run_id="s", every=100)
def f(*, state=None):
    state = state or {{"i": 0}}
    while True:
        state["i"] += 1
        print("step", state["i"], flush=True)
        sys.stdin.readline()  # the test says when the generation may end
        slow[0] = True
        yield state

f()
"""


@pytest.mark.slow
def test_a_save_slower_than_the_term_timeout_is_not_an_interruption(tmp_path: Path) -> None:
    """The timeout bounds the body's run to its yield, not the save after it: the yield
    that came in time is saved, and nothing says the body reached no yield."""
    timeout = 2
    script = tmp_path / "script.py"
    script.write_text(_SLOW_SAVE.format(store=str(tmp_path / "store"), timeout=timeout))
    proc = subprocess.Popen(
        [sys.executable, str(script)], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
        stderr=subprocess.PIPE, text=True, cwd=ROOT,
        env=dict(os.environ, PYTHONPATH=str(ROOT), RESUMABLE_TERM_TIMEOUT=str(timeout)))
    assert proc.stdin is not None and proc.stdout is not None
    assert proc.stdout.readline().split() == ["step", "1"]
    proc.send_signal(signal.SIGTERM)
    proc.stdin.write("\n")  # the body finishes its generation and yields at once
    proc.stdin.flush()
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == EXIT_SIGTERM, err[-3000:]
    assert "reached no yield" not in err, err[-3000:]
    latest = Run(open_store(str(tmp_path / "store")), "s").load_latest()
    assert latest is not None and latest.step == 1


_SIGTERM_WHILE_ONE_COPY_WAITS = """
import os, signal, sys, threading, time
import numpy as np
from resumable import checkpointed
from resumable.stores._local import LocalStore

def main_waits_for_the_running_save():
    frame = sys._current_frames().get(threading.main_thread().ident)
    while frame is not None:
        if frame.f_code.co_name == "wait_not_busy":
            return True
        frame = frame.f_back
    return False

slowed = []

class SlowStore(LocalStore):  # the first checkpoint takes longer than the term timeout
    def put(self, key, data):
        if "ckpt-" in key and not slowed:
            slowed.append(key)
            deadline = time.monotonic() + 30
            while not main_waits_for_the_running_save():
                if time.monotonic() > deadline:
                    print("the loop never waited", flush=True)
                    os._exit(3)
                time.sleep(0.002)
            print("waits for", key.rsplit("-", 1)[1], flush=True)
            os.kill(os.getpid(), signal.SIGTERM)  # the body has yielded the next state
            time.sleep(3 * {timeout})
        super().put(key, data)

@checkpointed(store=SlowStore({store!r}), run_id="r")
def f(*, state=None):
    state = state or {{"i": 0, "big": np.zeros(2 << 20, dtype=np.uint8)}}  # over 1 MiB
    while True:
        state["i"] += 1
        yield state

f()
"""


def test_sigterm_while_one_copy_waits_for_the_running_save_saves_the_yield(
        tmp_path: Path) -> None:
    """RESUMABLE_SNAPSHOT_COPIES=1: the body yielded, and its snapshot waits for the
    previous state's upload. A SIGTERM then, with that upload slower than
    $RESUMABLE_TERM_TIMEOUT, is a slow save after a prompt yield, not a body that reached
    no yield: the yielded state is saved (it was interrupted and lost)."""
    timeout = 1
    script = tmp_path / "script.py"
    script.write_text(_SIGTERM_WHILE_ONE_COPY_WAITS.format(store=str(tmp_path / "store"),
                                                           timeout=timeout))
    proc = subprocess.run(
        [sys.executable, str(script)], capture_output=True, text=True, timeout=60, cwd=ROOT,
        env=dict(os.environ, PYTHONPATH=str(ROOT), RESUMABLE_TERM_TIMEOUT=str(timeout),
                 RESUMABLE_SNAPSHOT_COPIES="1"))
    waited = int(proc.stdout.split("waits for ")[1].split()[0])
    assert "reached no yield" not in proc.stderr, proc.stderr[-3000:]
    assert proc.returncode == EXIT_SIGTERM, proc.stderr[-3000:]
    latest = Run(open_store(str(tmp_path / "store")), "r").load_latest(with_state=False)
    assert latest is not None and latest.step == waited + 1, proc.stderr[-3000:]


_LATE_POOL_TASK = """
import sys
from concurrent.futures import ThreadPoolExecutor
import resumable
from resumable import checkpointed

@checkpointed(store={store!r}, every=5)
def work(task, *, state=None):
    s = state or 0
    while s < 50:
        s += 1
        if task == 0 and s >= 3:
            print("task0 at", s, flush=True)
            sys.stdin.readline()  # the test sends SIGTERM, then lets the generation end
        yield s
    return s

resumable.install_signal_handlers()
with ThreadPoolExecutor(1) as ex:
    futures = [ex.submit(work, t) for t in range(4)]
    try:
        for f in futures:
            print("result", f.result(), flush=True)
    except BaseException:  # the SIGTERM, raised here: the runs are told to stop by now
        print("main stopped", flush=True)
        raise
"""


def test_a_run_that_would_start_after_sigterm_does_not_start(tmp_path: Path) -> None:
    """A thread pool's next task started after the SIGTERM was never told to stop: it ran
    on (here to its end, 50 generations; in review 29, until the exit guard cut it off
    unsaved). e5a9dc6 stopped it at its first yield, but every queued task still ran a
    generation in turn, holding up the exit by as many (review 32). Now it does not start
    at all; the process exits 143."""
    script = tmp_path / "script.py"
    script.write_text(textwrap.dedent(_LATE_POOL_TASK.format(store=str(tmp_path / "store"))))
    proc = subprocess.Popen([sys.executable, str(script)], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            cwd=ROOT, env=dict(os.environ, PYTHONPATH=str(ROOT),
                                               RESUMABLE_TERM_TIMEOUT="120"))
    assert proc.stdin is not None and proc.stdout is not None
    try:
        assert proc.stdout.readline().strip() == "task0 at 3"
        proc.send_signal(signal.SIGTERM)
        assert proc.stdout.readline().strip() == "main stopped"
        proc.stdin.write("\n")
        proc.stdin.flush()
        out, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == EXIT_SIGTERM, err
    assert "result" not in out
    steps = {}
    for run_dir in (tmp_path / "store").iterdir():
        names = sorted(p.name for p in run_dir.glob("ckpt-*"))
        steps[run_dir.name] = [int(n.rsplit("-", 1)[1]) for n in names]
    assert [v for v in steps.values() if v] == [[3]], steps  # the others never started


_FORK_IN_BODY = """
import os, sys
from resumable import checkpointed

MODE = sys.argv[1]

@checkpointed(store={store!r}, run_id="r")
def work(*, state=None):
    s = state or {{"g": 0, "end": 6}}
    while s["g"] < s["end"]:
        s = {{**s, "g": s["g"] + 1}}
        if s["g"] == 3:
            pid = os.fork()
            if pid == 0:  # the child does side work, then leaves the way a user might
                if MODE == "sysexit":
                    sys.exit(0)
                if MODE == "raise":
                    raise RuntimeError("child failed")
                s = {{**s, "end": 10, "child": True}}  # "continue": runs on, further
            else:
                assert os.waitpid(pid, 0)[1] == 0 or MODE == "raise"
        yield s
    return s

result = work()
if "child" not in result:
    print("parent", result["g"], flush=True)
"""


@pytest.mark.parametrize("mode", ["sysexit", "raise", "continue"])
def test_a_child_the_body_forks_neither_hangs_nor_saves(tmp_path: Path, mode: str) -> None:
    """A child forked by the body inherited the upload's state but not its thread: when
    it left by sys.exit() or an exception (or ran on to its end), it waited for ever for
    saves no thread would run (review 29). It is not the run's attempt: it saves
    nothing, and ends as it asked."""
    script = tmp_path / "script.py"
    script.write_text(textwrap.dedent(_FORK_IN_BODY.format(store=str(tmp_path / "store"))))
    proc = subprocess.run([sys.executable, str(script), mode], capture_output=True, text=True,
                          timeout=120, cwd=ROOT, env=dict(os.environ, PYTHONPATH=str(ROOT)))
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["parent", "6"]
    steps = sorted(int(p.name.rsplit("-", 1)[1])
                   for p in (tmp_path / "store" / "r").glob("ckpt-*"))
    assert steps and max(steps) == 6  # the parent's; none of the child's 7-10


_ERROR_EXIT_WITH_OTHER_RUNS = """
import sys, threading
from resumable import checkpointed

release = threading.Event()
previous = sys.excepthook

def hook(kind, value, tb):  # the uncaught error: the other run may go on now
    release.set()
    previous(kind, value, tb)

sys.excepthook = hook

@checkpointed(store={store!r}, run_id="other", every=5)
def other(*, state=None):
    s = state or 0
    while s < 8:
        s += 1
        if s == 2:
            print("other at 2", flush=True)
            release.wait()  # until the main thread's run has failed
        yield s
    return s

@checkpointed(store={store!r}, run_id="it", every=5)
def counter(*, state=None):
    s = state or 0
    while s < 100:
        s += 1
        yield s

@checkpointed(store={store!r}, run_id="bad")
def bad(*, state=None):
    yield {{"lock": threading.Lock()}}  # unpicklable: SerializationError, exit 70

t = threading.Thread(target=other)
t.start()
it = counter.iter()
for _ in range(3):
    next(it)
while "other at 2" not in sys.stdin.readline():
    pass
bad()
"""


def test_an_uncaught_resumable_error_exits_with_its_code_after_the_other_runs(
        tmp_path: Path) -> None:
    """The exit-code hook ended the process with os._exit at once: a run in another
    thread was cut unsaved, and an unfinished f.iter's state was not saved at exit
    (review 29). Now the exit is Python's own, but for its status: the iterator's state
    is saved, the other thread's run goes on to its end, then exit 70."""
    from resumable._errors import EXIT_SERIALIZATION

    script = tmp_path / "script.py"
    script.write_text(textwrap.dedent(
        _ERROR_EXIT_WITH_OTHER_RUNS.format(store=str(tmp_path / "store"))))
    proc = subprocess.Popen([sys.executable, str(script)], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            cwd=ROOT, env=dict(os.environ, PYTHONPATH=str(ROOT)))
    assert proc.stdout is not None and proc.stdin is not None
    line = proc.stdout.readline()
    proc.stdin.write(line)  # the other run is at 2: now the main thread's run fails
    proc.stdin.flush()
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == EXIT_SERIALIZATION, err
    assert "SerializationError" in err
    store = open_store(str(tmp_path / "store"))
    assert "other/result" in store.list("other/")
    saved = [k for k in store.list("it/") if k.startswith("it/ckpt-")]
    assert saved[-1].endswith("-000000000003"), saved


_THREAD_ERROR_ROUTED_TO_EXCEPTHOOK = """
import sys, threading
from resumable import checkpointed, FencedError

# one logging path for every uncaught error, threads' too (a common set-up)
threading.excepthook = lambda a: sys.excepthook(a.exc_type, a.exc_value, a.exc_traceback)

def side_task():
    raise FencedError("a newer pod owns the side run")

@checkpointed(store={store!r}, run_id="main")
def main_run(*, state=None):
    s = state or 0
    while s < 6:
        s += 1
        if s == 3:
            t = threading.Thread(target=side_task)
            t.start()
            t.join()
        yield s
    return s

print("result", main_run(), flush=True)
"""


def test_a_resumable_error_in_another_thread_does_not_end_the_program(
        tmp_path: Path) -> None:
    """An app that routes its threads' errors to sys.excepthook: a worker thread's
    FencedError made the exit-code hook call os._exit from that thread, in the middle of
    the main thread's run, which lost its steps (review 32). Only the main thread's
    uncaught error decides the exit status; the main run goes on to its result."""
    script = tmp_path / "script.py"
    script.write_text(_THREAD_ERROR_ROUTED_TO_EXCEPTHOOK.format(store=str(tmp_path / "s")))
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                          cwd=ROOT, env=dict(os.environ, PYTHONPATH=str(ROOT)), timeout=120)
    assert done.returncode == 0, done.stderr
    assert "result 6" in done.stdout
    assert "FencedError" in done.stderr  # still reported
    assert "main/result" in open_store(str(tmp_path / "s")).list("main/")


_INTERRUPT_DURING_THE_ERROR_EXITS_JOIN = """
import signal as _s; _s.signal(_s.SIGINT, _s.default_int_handler)  # (not SIG_IGN)
import atexit, linecache, signal, sys, threading, time
from resumable import checkpointed

atexit.register(lambda: print("atexit ran", flush=True))
main = threading.main_thread()

def in_the_join():
    # The main thread waits in threading._shutdown's join of this thread: lock.acquire()
    # up to 3.12, the C function _thread_shutdown() from 3.13
    frame = sys._current_frames().get(main.ident)
    return (frame is not None and frame.f_code is threading._shutdown.__code__
            and linecache.getline(frame.f_code.co_filename, frame.f_lineno).strip()
            in ("lock.acquire()", "_thread_shutdown()"))

def interrupts_the_join():
    # Ctrl-C, to the main thread itself, for as long as it waits in the join: a signal
    # that comes after the GIL is released but before the lock wait begins does not end
    # that wait (Python's limit, not the library's), so it is sent again. Never outside
    # the join, so it cannot land in an atexit handler. This thread never ends: only an
    # exit that goes on past the join ends the process.
    while True:
        if in_the_join():
            signal.pthread_kill(main.ident, signal.SIGINT)
        time.sleep(0.01)

threading.Thread(target=interrupts_the_join).start()

@checkpointed(store={store!r}, run_id="bad")
def bad(*, state=None):
    yield {{"lock": threading.Lock()}}  # unpicklable: SerializationError, exit 70

bad()
"""


def test_ctrl_c_during_the_error_exits_join_still_runs_atexit(tmp_path: Path) -> None:
    """A Ctrl-C while the exit-code hook joined the other threads skipped every atexit
    handler (logging's flush, the user's), as the hook went straight to os._exit
    (review 32). The exit goes on: atexit runs, then the error's status."""
    from resumable._errors import EXIT_SERIALIZATION

    script = tmp_path / "script.py"
    script.write_text(_INTERRUPT_DURING_THE_ERROR_EXITS_JOIN.format(
        store=str(tmp_path / "s")))
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                          cwd=ROOT, env=dict(os.environ, PYTHONPATH=str(ROOT)), timeout=60)
    assert done.returncode == EXIT_SERIALIZATION, done.stderr
    assert "atexit ran" in done.stdout
    if sys.version_info < (3, 13):  # (3.13's C join prints the interrupt it was ended by)
        assert "KeyboardInterrupt" not in done.stderr  # taken by the join, not by atexit


_ITER_DRIVEN_IN_A_CHILD = """
import multiprocessing as mp
from resumable import checkpointed

@checkpointed(store={store!r}, run_id="r")
def count(n, *, state=None):
    s = state or 0
    while s < n:
        s += 1
        yield s
    return s

def consume(it):
    for _ in it:
        pass
    print("result", it.result, flush=True)

if __name__ == "__main__":
    it = count.iter(5)  # made here, first driven in the child
    p = mp.get_context("fork").Process(target=consume, args=(it,))
    p.start()
    p.join()
    print("exit", p.exitcode, flush=True)
"""


def test_an_iterator_made_here_and_driven_in_a_forked_child_saves_there(
        tmp_path: Path) -> None:
    """f.iter() handed to a fork Process: nothing ran in the parent, so the child is the
    run's attempt. It ran the whole run and saved nothing (review 32): the run took the
    process it was opened in for its attempt's."""
    script = tmp_path / "script.py"
    script.write_text(_ITER_DRIVEN_IN_A_CHILD.format(store=str(tmp_path / "s")))
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                          cwd=ROOT, env=dict(os.environ, PYTHONPATH=str(ROOT)), timeout=120)
    assert done.returncode == 0, done.stderr
    assert "result 5" in done.stdout and "exit 0" in done.stdout
    names = open_store(str(tmp_path / "s")).list("r/")
    assert "r/result" in names, names
    assert any(n.startswith("r/ckpt-") for n in names), names


_SUB_RUNS_AFTER_SIGTERM = """
import sys, time
from resumable import checkpointed
from resumable._signals import terminating

def wait_for_sigterm():
    print("ready", flush=True)
    while not terminating():  # until the SIGTERM has been handled
        time.sleep(0.01)

@checkpointed(store={store!r})
def inner(k, *, state=None):
    state = state or 0
    while state < 3:
        state += 1
        if k == 102 and state == 2 and sys.argv[1] == "during":
            wait_for_sigterm()
        yield state
    return k * 10

@checkpointed(store={store!r}, run_id="outer")
def outer(n, *, state=None):
    state = state or {{"gen": 0, "got": []}}
    while state["gen"] < n:
        if state["gen"] == 2 and sys.argv[1] == "between":
            wait_for_sigterm()
        # a sub-run that completed before, and one that starts now: both are part of
        # this generation, which the SIGTERM lets finish
        state["got"] += [inner(1), inner(state["gen"] + 100)]
        state["gen"] += 1
        yield state
    return state["got"]

if sys.argv[1] == "prepare":
    inner(1)
else:
    outer(5)
"""


@pytest.mark.parametrize("when", ["between", "during"])
def test_sub_runs_called_by_a_body_after_sigterm_are_part_of_its_generation(
        tmp_path: Path, when: str) -> None:
    """A body that calls other @checkpointed functions after the SIGTERM: a completed one
    raised Terminated instead of returning its stored result, so the body never reached
    the yield the SIGTERM promises to save (review 34); a new one stopped at its first
    yield, with the same effect; so did one under way when the SIGTERM came (review 35).
    They run as part of the body's generation."""
    script = tmp_path / "script.py"
    script.write_text(_SUB_RUNS_AFTER_SIGTERM.format(store=str(tmp_path / "s")))
    env = dict(os.environ, PYTHONPATH=str(ROOT), RESUMABLE_TERM_TIMEOUT="120")
    subprocess.run([sys.executable, str(script), "prepare"], check=True, cwd=ROOT, env=env,
                   timeout=120)
    proc = subprocess.Popen([sys.executable, str(script), when], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, cwd=ROOT, env=env)
    assert proc.stdout is not None
    try:
        assert proc.stdout.readline() == "ready\n"
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=120)
    finally:
        proc.kill()
    assert proc.returncode == EXIT_SIGTERM, err
    saved = Run(open_store(str(tmp_path / "s")), "outer").load_latest()
    assert saved is not None and saved.state["gen"] == 3, err
    assert saved.state["got"][-2:] == [10, 1020]
