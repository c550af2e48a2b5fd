"""Every integration against its library's own call: equal results, uninterrupted and after
SIGTERM and SIGKILL at random points in real processes, on a folder and on S3 (moto).

The workers block inside the objective at a chosen call, report it, and get the signal
there, so the kill lands mid-generation at a chosen point with no timing involved.
RESUMABLE_INTEGRATION_ROUNDS=n repeats each kill sequence n times at new random points
(default 1); RESUMABLE_INTEGRATION_SEED fixes the points (every failure prints its seed).
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.s3servers import MotoServer
from tests.workers import integrations_worker as worker

ROOT = Path(__file__).resolve().parents[1]
WORKER = Path(worker.__file__)
LIBS = worker.LIBS
ROUNDS = int(os.environ.get("RESUMABLE_INTEGRATION_ROUNDS", "1"))

_references: dict[str, tuple[str, int]] = {}


def reference(lib: str) -> tuple[str, int]:
    """(the library's own result digest, how many objective calls its run makes)."""
    if lib not in _references:
        _references[lib] = (worker.reference(lib), worker.BLOCK.calls)
    return _references[lib]


def _seed() -> int:
    fixed = os.environ.get("RESUMABLE_INTEGRATION_SEED")
    return int(fixed) if fixed else random.SystemRandom().randrange(2**32)


# -- in process -----------------------------------------------------------------------


@pytest.mark.parametrize("lib", [*LIBS, "deap-plus", "deap-comma"])
def test_same_result_as_the_library(lib: str, memory_url: str) -> None:
    """Uninterrupted, the resumable call equals the library's; called again, it returns the
    stored result without evaluating anything."""
    expected, calls = reference(lib)
    assert worker.resumable(lib, memory_url) == expected
    assert worker.BLOCK.calls == calls
    assert worker.resumable(lib, memory_url) == expected
    assert worker.BLOCK.calls == 0


def test_pygad_callbacks_fire_once_per_generation(tmp_path: Path) -> None:
    """on_generation fires once per generation, and not for generations restored."""
    worker.GENERATIONS_SEEN.clear()
    worker.reference("pygad")
    assert list(range(1, 9)) == worker.GENERATIONS_SEEN
    worker.GENERATIONS_SEEN.clear()
    worker.BLOCK.at, worker.BLOCK.calls = 30, 0

    class Stop(Exception):
        pass

    def crash() -> None:
        raise Stop

    worker.BLOCK.tick = _crash_at(worker.BLOCK, 30, crash)  # type: ignore[method-assign]
    try:
        with pytest.raises(Stop):
            worker.run("pygad", {"store": str(tmp_path)})
    finally:
        del worker.BLOCK.tick
    before = list(worker.GENERATIONS_SEEN)
    assert before and before == list(range(1, len(before) + 1))
    worker.BLOCK.at = None
    assert worker.run("pygad", {"store": str(tmp_path)}) == reference("pygad")[0]
    assert list(range(1, 9)) == worker.GENERATIONS_SEEN


def _crash_at(blocker: Any, at: int, crash: Callable[[], None]) -> Callable[[], None]:
    def tick() -> None:
        blocker.calls += 1
        if blocker.calls == at:
            crash()

    return tick


# -- real processes, real signals -------------------------------------------------------


def _env() -> dict[str, str]:
    # One BLAS thread: the workers' arrays are tiny, and CI has two cores.
    return dict(os.environ, PYTHONPATH=str(ROOT), OPENBLAS_NUM_THREADS="1",
                OMP_NUM_THREADS="1", MKL_NUM_THREADS="1")


def _start(lib: str, store: str, block_at: int) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-W", "ignore", str(WORKER), lib, store, "--block-at", str(block_at)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        env=_env())


def _interrupt(lib: str, store: str, block_at: int, sig: int, seed: int) -> None:
    """Start the worker, wait until it blocks at objective call ``block_at``, signal it."""
    proc = _start(lib, store, block_at)
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        assert line.strip() == "BLOCKED", (
            f"seed {seed}: {lib} did not reach objective call {block_at}: {line!r} "
            f"{proc.communicate(timeout=60)}")
        proc.send_signal(sig)
        _, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    expected = 143 if sig == signal.SIGTERM else -signal.SIGKILL
    assert proc.returncode == expected, f"seed {seed}: {lib} exited {proc.returncode}: {err}"


def _finish(lib: str, store: str) -> str:
    proc = subprocess.run([sys.executable, "-W", "ignore", str(WORKER), lib, store],
                          capture_output=True, text=True, timeout=120,
                          env=_env())
    assert proc.returncode == 0, proc.stderr
    return next(line.split()[1] for line in proc.stdout.splitlines()
                if line.startswith("RESULT"))


def _kill_sequence(lib: str, store: str, signals: list[int]) -> None:
    expected, calls = reference(lib)
    for _ in range(ROUNDS):
        seed = _seed()
        rng = random.Random(seed)
        run_store = f"{store}/round-{seed}"
        # The first signal in the first half of the run, later ones soon after a resume,
        # so that each process still has that many calls left to make.
        points = [rng.randint(1, max(1, calls // 2))] + [rng.randint(1, 3) for _ in signals[1:]]
        for sig, at in zip(signals, points, strict=True):
            _interrupt(lib, run_store, at, sig, seed)
        assert _finish(lib, run_store) == expected, (
            f"seed {seed}: {lib} resumed after {signals} at objective calls {points} "
            "differs from the library's own result")


@pytest.mark.slow
@pytest.mark.parametrize("lib", LIBS)
def test_sigterm_then_sigkill_on_a_folder(lib: str, tmp_path: Path) -> None:
    """SIGTERM (exit 143), then SIGKILL right after the resume, then to the end: the
    library's own result."""
    _kill_sequence(lib, str(tmp_path / "store"), [signal.SIGTERM, signal.SIGKILL])


@pytest.mark.slow
@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGKILL])
def test_pygad_parallel_processing_resumes(sig: int, tmp_path: Path) -> None:
    """PyGAD with parallel_processing=["thread", 2], stopped in the third generation's
    fitness calls (checkpoints of generations 0 and 1 exist), then to the end: PyGAD's own
    result. The thread pool is the live process's: a checkpoint must not bring back the
    pool's configuration without the pool."""
    expected, calls = reference("pygad-thread")
    store = str(tmp_path / "store")
    at = 8 + 7 + 4  # generation 0 evaluates 8, each later one 7 (keep_elitism=1)
    assert at < calls
    _interrupt("pygad-thread", store, at, sig, 0)
    assert _finish("pygad-thread", store) == expected


@pytest.mark.slow
@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGKILL])
def test_deap_on_a_pool_resumes_after_a_signal_to_the_group(sig: int, tmp_path: Path) -> None:
    """DEAP with toolbox.map on a multiprocessing pool (no stable value, so the run is named
    with run_id=): the signal goes to the whole process group (the pool's workers too) in
    generation 3, then a new process with a new pool finishes: DEAP's own result. The run
    id's check of the other arguments must be the same in the new process. The worker's
    `pool.terminate()` on its way out after the SIGTERM may hang on a pool whose worker
    died holding its queue's lock (or whose workers inherited the script's own SIGTERM
    handler and outlived the signal): the process must still exit 143. (The finishing
    process closes its pool: see the next test.)"""
    expected, _ = reference("deap-pool")
    store = str(tmp_path / "store")
    proc = subprocess.Popen(
        [sys.executable, "-W", "ignore", str(WORKER), "deap-pool", store, "--block-at", "4"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True,
        env=dict(_env(), RESUMABLE_TERM_TIMEOUT="3"))
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        assert line.strip() == "BLOCKED", (line, proc.communicate(timeout=60))
        os.killpg(proc.pid, sig)
        _, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.communicate()
    assert proc.returncode == (143 if sig == signal.SIGTERM else -signal.SIGKILL), err
    assert _finish("deap-pool", store) == expected


def _proc(pid: int, name: str) -> str:
    try:
        return (Path("/proc") / str(pid) / name).read_text()
    except OSError:  # gone
        return ""


def _run_state(pid: int) -> str:
    """R, S, T (stopped), Z...: the field after the command in /proc/PID/stat."""
    return (_proc(pid, "stat").rsplit(")", 1)[1:] or [" ?"])[0].split()[0]


def _children(pid: int) -> list[int]:
    return sorted({int(c) for task in Path(f"/proc/{pid}/task").glob("*")
                   for c in _proc(int(task.name), f"task/{task.name}/children").split()})


def _until(found: Callable[[], Any], what: str, timeout: float = 60) -> Any:
    """Poll a process's state in /proc (it has no event to wait on) until ``found()``."""
    deadline = time.monotonic() + timeout
    while not (value := found()):
        assert time.monotonic() < deadline, f"no {what} within {timeout} s"
        time.sleep(0.01)
    return value


def _lock_waiter(pid: int) -> int | None:
    """An idle pool of two: one worker reads the task queue's pipe, holding the queue's
    lock; the other waits for that lock (a futex). That one's pid."""
    workers = _children(pid)
    if len(workers) != 2 or any(_run_state(w) != "S" for w in workers):
        return None
    waiting = [w for w in workers if "futex" in _proc(w, "wchan")]
    reading = [w for w in workers if "pipe" in _proc(w, "wchan")]
    return waiting[0] if len(waiting) == 1 and len(reading) == 1 else None


@pytest.mark.slow
@pytest.mark.skipif(not Path("/proc/self/wchan").exists(), reason="reads Linux's /proc")
def test_deap_pool_ends_when_a_pool_worker_is_late_for_the_queue_lock(tmp_path: Path) -> None:
    """The deap-pool script's end with a pool worker not yet back at the task queue's lock
    when the pool is shut down, which hung about one finishing run in 6 to 25 on a loaded
    machine (the test above timed out in `_finish`). Forced here: the worker waiting for
    the lock is stopped (SIGSTOP) for the rest of the run, and continued once the parent
    waits for its workers to exit. The script's `pool.terminate()` took the lock for good
    (multiprocessing's `_help_stuff_finish`) and relied on a SIGTERM to end that worker,
    which ran main()'s `on_term` (inherited at the fork, as any fork child inherits its
    parent's handlers), returned to its wait for the lock and never ended: nor did
    `pool.join()` (before: `the pool's end hung`; so does plain multiprocessing, resumable
    or not). With `close()` the worker reads its end-of-work sentinel and leaves."""
    expected, _ = reference("deap-pool")
    proc = subprocess.Popen(
        [sys.executable, "-W", "ignore", str(WORKER), "deap-pool", str(tmp_path / "store"),
         "--block-at", "2"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True,
        env=_env())
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        assert line.strip() == "BLOCKED", (line, proc.communicate(timeout=60))
        late = _until(lambda: _lock_waiter(proc.pid), "idle pool of two workers")
        os.kill(late, signal.SIGSTOP)
        _until(lambda: _run_state(late) == "T", "stopped worker")
        os.kill(proc.pid, signal.SIGUSR1)  # the run goes on, with the other worker
        # The main thread in waitpid: the pool is shut down, its workers joined.
        _until(lambda: _proc(proc.pid, "wchan") == "do_wait", "join of the pool's workers")
        os.kill(late, signal.SIGCONT)
        try:
            out, err = proc.communicate(timeout=60)
        except subprocess.TimeoutExpired:
            pytest.fail(f"the pool's end hung: worker {late} is "
                        f"{_run_state(late)} in {_proc(late, 'wchan')!r}")
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.communicate()
    assert proc.returncode == 0, err
    assert f"RESULT {expected}" in out.splitlines(), out


@pytest.mark.slow
@pytest.mark.s3
@pytest.mark.parametrize("lib", LIBS)
def test_sigkill_on_s3(lib: str, moto_server: MotoServer,
                       s3_env: Callable[..., dict[str, str]]) -> None:
    """On S3: SIGKILL at a random point, then to the end: the library's own result."""
    s3_env(moto_server)
    _kill_sequence(lib, moto_server.new_store_url(), [signal.SIGKILL])


class _Flaky(Exception):
    pass


@pytest.mark.parametrize("when", ["first-generation", "mid-run"])
@pytest.mark.parametrize("lib", [*LIBS, "pygad-thread"])
def test_in_process_restart_gives_the_same_result(lib: str, when: str, memory_url: str) -> None:
    """restarts=1: an objective that raises once (before the first checkpoint, or mid-run)
    is retried from the last checkpoint, or from the caller's objects as they were passed
    in, and the result is still the library's own."""
    expected, calls = reference(lib)

    def fail() -> None:
        raise _Flaky("injected")

    at = 2 if when == "first-generation" else calls // 2
    worker.BLOCK.tick = _crash_at(worker.BLOCK, at, fail)  # type: ignore[method-assign]
    try:
        worker.BLOCK.at, worker.BLOCK.calls = None, 0
        assert worker.run(lib, {"store": memory_url, "restarts": 1}) == expected
    finally:
        del worker.BLOCK.tick


def test_pymoo_copy_algorithm_false_leaves_the_callers_algorithm(memory_url: str) -> None:
    """copy_algorithm=False: as in pymoo, res.algorithm is the caller's object, run to the
    end, also when the result comes from the store."""
    import numpy as np
    from pymoo.algorithms.moo.nsga2 import NSGA2
    from pymoo.optimize import minimize
    from pymoo.problems import get_problem

    from resumable.integrations.pymoo import minimize as rminimize

    problem = get_problem("zdt1", n_var=5)
    own = minimize(problem, NSGA2(pop_size=12), ("n_gen", 6), seed=2, copy_algorithm=False)
    for _ in range(2):  # the run, then its stored result
        algorithm = NSGA2(pop_size=12)
        res = rminimize(problem, algorithm, ("n_gen", 6), seed=2, copy_algorithm=False,
                        store=memory_url)
        assert res.algorithm is algorithm and algorithm.n_gen == own.algorithm.n_gen
        assert np.array_equal(res.F, own.F) and np.array_equal(res.X, own.X)


class _StopAt(Exception):
    pass


_STOP_AT = {"gen": 3}


def _stop_at(algorithm: Any) -> None:
    if algorithm.n_gen == _STOP_AT["gen"]:
        raise _StopAt(algorithm.n_gen)


def test_pymoo_time_termination_does_not_count_the_time_the_process_was_down(
        memory_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """("time", s) counted from the first attempt's start: a run resumed after its pod
    was down longer than s stopped at once (review 33). It counts the time it has had."""
    from pymoo.algorithms.moo.nsga2 import NSGA2
    from pymoo.problems import get_problem

    from resumable.integrations.pymoo import minimize as rminimize

    problem = get_problem("zdt1", n_var=5)

    def call() -> Any:
        return rminimize(problem, NSGA2(pop_size=12), ("time", 600), seed=2,
                         callback=_stop_at, store=memory_url)

    _STOP_AT["gen"] = 3
    with pytest.raises(_StopAt):
        call()  # the first pod, stopped at generation 3
    down = time.time() + 3600.0  # an hour later
    monkeypatch.setattr(time, "time", lambda: down + time.perf_counter())
    _STOP_AT["gen"] = 6
    with pytest.raises(_StopAt):  # the resumed run goes on (it stopped at 4 before)
        call()
