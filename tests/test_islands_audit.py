"""``f.audit`` of an island body never writes to the real experiment.

The audit runs the body (uninterrupted, then resumed from each checkpoint), and the body
migrates and finishes. Every write of those runs (plan, migrants, finish marker) goes to
a private overlay of the audit; reads look there first, then in the experiment's store.
Each test compares the experiment's folder before and after the audit, and runs the real
islands afterwards. No test sleeps: threads are coordinated with events.
"""

from __future__ import annotations

import contextvars
import functools
import os
import random
import threading
from collections.abc import Generator
from pathlib import Path
from typing import Any

import pytest

from resumable import ConfigurationError, ResumableError, checkpointed
from resumable.islands import Archipelago

# The islands' own checkpoints (not the experiment): runs are told apart by their
# arguments, which name each test's folder. The audit never writes here.
RUNS = "memory://islands-audit-runs"
# Island 0 receives from nobody, island 1 from island 0: islands can run one after the
# other (0 first), so no test needs two real islands running at once.
TOPOLOGY = {0: [], 1: [0]}

# In this process only (a fresh interpreter has none): events set and awaited by the body,
# keyed by (experiment, island, generation, what).
EVENTS: dict[tuple[str, int, int, str], threading.Event] = {}
# Archipelagos shared by every call of the body in this process (one module-level object,
# as in the README), keyed by (folder, experiment).
SHARED: dict[tuple[str, str], Archipelago] = {}


def _archipelago(folder: str, experiment: str, shared: bool, timeout: float) -> Archipelago:
    if not shared:  # the body makes its own, on every call (and in a fresh interpreter)
        return Archipelago(folder, experiment, 2, TOPOLOGY, every=2, timeout=timeout)
    key = (folder, experiment)
    if key not in SHARED:
        SHARED[key] = Archipelago(folder, experiment, 2, TOPOLOGY, every=2, timeout=timeout)
    return SHARED[key]


def _event(experiment: str, index: int, generation: int, what: str) -> threading.Event | None:
    return EVENTS.get((experiment, index, generation, what))


def _exchange(arch: Archipelago, index: int, generation: int, emigrants: Any,
              experiment: str) -> list[Any]:
    gate = _event(experiment, index, generation, "gate")
    if gate is not None:  # the test holds this body here (set once: later runs pass)
        entered = _event(experiment, index, generation, "entered")
        assert entered is not None
        entered.set()
        assert gate.wait(120)
    arch.publish(index, generation, emigrants)
    published = _event(experiment, index, generation, "published")
    if published is not None:
        published.set()
    return [arch.receive(s, generation, reader=index) for s in arch.sources[index]]


@checkpointed(store=RUNS)
def island(folder: str, experiment: str, index: int, generations: int, *,
           noise: bool = False, shared: bool = False, in_thread: bool = False,
           timeout: float = 600.0, state: dict[str, Any] | None = None) -> Generator[Any]:
    """A tiny island: ``noise`` adds emigrants the state does not determine (os.urandom,
    never captured); ``in_thread`` migrates from a thread the body starts (in a copy of
    its context, as the README says such a thread must be)."""
    arch = _archipelago(folder, experiment, shared, timeout)
    if state is None:
        rng = random.Random(index)
        state = {"generation": 0, "pop": [rng.random() for _ in range(4)], "sent": [],
                 "got": []}
    while state["generation"] < generations:
        state["generation"] += 1
        g = state["generation"]
        state["pop"] = [x * 0.9 + random.random() * 0.1 for x in state["pop"]]  # captured
        if arch.due(g):
            emigrants: Any = [max(state["pop"])]
            if noise:
                emigrants.append(os.urandom(8).hex())
            if in_thread:
                out: list[Any] = []
                errors: list[BaseException] = []

                def work(g: int = g, emigrants: Any = emigrants, out: list[Any] = out,
                         errors: list[BaseException] = errors) -> None:
                    try:
                        out.extend(_exchange(arch, index, g, emigrants, experiment))
                    except BaseException as err:
                        errors.append(err)

                # In a copy of the body's context: the audit's own (a plain thread is
                # real, and would write to the experiment during an audit)
                worker = threading.Thread(target=contextvars.copy_context().run,
                                          args=(work,))
                worker.start()
                worker.join()
                if errors:
                    raise errors[0]
                immigrants = out
            else:
                immigrants = _exchange(arch, index, g, emigrants, experiment)
            state["sent"].append(emigrants)
            state["got"].append(immigrants)
        yield state
    arch.finish(index, state["generation"])
    return state


def _files(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*"))
            if p.is_file()}


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    root = tmp_path / "experiment"
    root.mkdir()
    return root


def test_an_audit_with_fewer_generations_leaves_the_experiment_as_it_was(folder: Path) -> None:
    """island.audit(..., 3) of a run that really goes to 6: before, the audit wrote the plan,
    island 0's migrants of generation 2 and a finish marker at 3 into the experiment, and
    the real island 0 then failed at generation 4 ('already finished at generation 3')."""
    url, exp = str(folder), "exp"
    before = _files(folder)
    report = island.audit(url, exp, 0, 3, shared=True, steps=5)
    assert report.ok, report
    assert report.resumes >= 3
    assert _files(folder) == before == {}
    # The real islands, afterwards (island 0 through the same module-level Archipelago
    # the audit's body used): their full run, nothing refused.
    zero = island(url, exp, 0, 6, shared=True)
    one = island(url, exp, 1, 6, shared=True)
    assert zero["generation"] == one["generation"] == 6
    assert one["got"] == [[sent] for sent in zero["sent"]]
    assert sorted(_files(folder)) == ["exp/finished/0", "exp/finished/1",
                                      "exp/migrants/0/2", "exp/migrants/0/4",
                                      "exp/migrants/0/6", "exp/migrants/1/2",
                                      "exp/migrants/1/4", "exp/migrants/1/6", "exp/plan"]


def test_an_audit_reads_neighbours_migrants_already_in_the_experiment(folder: Path) -> None:
    url, exp = str(folder), "exp"
    zero = island(url, exp, 0, 6)
    before = _files(folder)
    report = island.audit(url, exp, 1, 6, steps=6)
    assert report.ok, report
    assert report.resumes >= 6
    assert _files(folder) == before
    assert "exp/migrants/1/2" not in before and "exp/finished/1" not in before
    one = island(url, exp, 1, 6)  # the real island 1 reads what island 0 published
    assert one["got"] == [[sent] for sent in zero["sent"]]


@pytest.mark.timeout(120)
def test_missing_neighbours_fail_the_audit_at_once_naming_what_it_needs(folder: Path) -> None:
    """Island 0 never ran: an island's wait would last the timeout (600 s here); the
    audit's body fails at once instead, naming the island, generation and key."""
    url, exp = str(folder), "exp"
    with pytest.raises(ResumableError) as caught:
        island.audit(url, exp, 1, 6)
    text = str(caught.value) + str(caught.value.__cause__)
    assert "island 0" in text and "generation 2" in text and "exp/migrants/0/2" in text
    assert "audit" in text.lower()
    assert _files(folder) == {}


def test_a_non_deterministic_island_body_still_diverges(folder: Path) -> None:
    """Emigrants the state does not determine: a resume republishes other values than the
    audit's own uninterrupted run did, and the audit says so; the experiment is untouched."""
    url, exp = str(folder), "exp"
    report = island.audit(url, exp, 0, 6, noise=True, steps=6)
    assert not report.ok, report
    assert "MigrantConflictError" in (report.detail or ""), report
    assert _files(folder) == {}
    # The deterministic body's real run afterwards is not held to the audit's migrants.
    assert island(url, exp, 0, 6)["generation"] == 6


def test_fresh_process_audits_write_nothing_either(folder: Path) -> None:
    url, exp = str(folder), "exp"
    island(url, exp, 0, 6)
    before = _files(folder)
    report = island.audit(url, exp, 1, 6, steps=6, fresh_process=True)
    assert report.ok, report
    assert report.fresh_process and report.resumes >= 6
    assert _files(folder) == before
    # A non-deterministic body is caught in the fresh interpreters too: each compares its
    # republish with the audit's uninterrupted run's, handed to it.
    noisy = island.audit(url, "exp-noise", 0, 4, noise=True, steps=4, fresh_process=True)
    assert not noisy.ok, noisy
    assert "MigrantConflictError" in (noisy.detail or ""), noisy
    assert _files(folder) == before
    assert island(url, exp, 1, 6)["generation"] == 6


def test_a_body_that_migrates_in_its_own_thread_writes_nothing(folder: Path) -> None:
    url, exp = str(folder), "exp"
    report = island.audit(url, exp, 0, 6, in_thread=True, steps=6)
    assert report.ok, report
    assert _files(folder) == {}
    noisy = island.audit(url, exp, 0, 6, in_thread=True, noise=True, steps=6)
    assert not noisy.ok and "MigrantConflictError" in (noisy.detail or ""), noisy
    assert _files(folder) == {}
    assert island(url, exp, 0, 6, in_thread=True)["generation"] == 6
    assert "exp/finished/0" in _files(folder)


def test_an_audit_that_fails_leaves_this_thread_writing_to_the_real_store(
        folder: Path) -> None:
    url, exp = str(folder), "exp"
    with pytest.raises(ResumableError):
        island.audit(url, exp, 1, 6)  # island 0's migrants are missing
    arch = Archipelago(url, exp, 2, TOPOLOGY, every=2)
    arch.publish(0, 2, ["real"])
    assert sorted(_files(folder)) == ["exp/migrants/0/2", "exp/plan"]
    arch.finish(0, 2)
    assert "exp/finished/0" in _files(folder)
    with pytest.raises(ConfigurationError, match="already finished at generation 2"):
        Archipelago(url, exp, 2, TOPOLOGY, every=2).finish(0, 4)  # read back from the folder


def _real_island_in_a_thread(url: str, exp: str, index: int,
                             results: dict[str, Any]) -> threading.Thread:
    """Run the real island ``index`` in a thread; its result (or error) lands in
    ``results`` under "one" (or "error")."""
    def real() -> None:
        try:
            results["one"] = island(url, exp, index, 6)
        except BaseException as err:
            results["error"] = err

    thread = threading.Thread(target=real)
    thread.start()
    return thread


def test_a_real_island_in_another_thread_writes_to_the_experiment_during_an_audit(
        folder: Path) -> None:
    """The audit's body is held at generation 2 while a real island 1 runs in another
    thread of this process and publishes: its objects land in the experiment, the
    audit's do not, and the real island later reads the real island 0's migrants."""
    url, exp = str(folder), "exp"
    entered, gate, published = threading.Event(), threading.Event(), threading.Event()
    EVENTS[(exp, 0, 2, "entered")], EVENTS[(exp, 0, 2, "gate")] = entered, gate
    EVENTS[(exp, 1, 2, "published")] = published
    reports: list[Any] = []
    results: dict[str, Any] = {}
    try:
        auditor = threading.Thread(
            target=lambda: reports.append(island.audit(url, exp, 0, 6, noise=True, steps=6)))
        auditor.start()
        assert entered.wait(120)

        real = _real_island_in_a_thread(url, exp, 1, results)
        assert published.wait(120)  # the real island 1 published while the audit runs
        gate.set()
        auditor.join(120)
        assert not auditor.is_alive()
        assert not reports[0].ok and "MigrantConflictError" in reports[0].detail
        assert sorted(_files(folder)) == ["exp/migrants/1/2", "exp/plan"]
        zero = island(url, exp, 0, 6)
        real.join(120)
        assert not real.is_alive()
        assert "error" not in results, results.get("error")
        assert results["one"]["generation"] == zero["generation"] == 6
        assert "exp/finished/0" in _files(folder) and "exp/finished/1" in _files(folder)
    finally:
        gate.set()
        for key in [k for k in EVENTS if k[0] == exp]:
            del EVENTS[key]


def test_a_body_thread_and_a_real_island_in_this_process_each_write_where_they_belong(
        folder: Path) -> None:
    """The audited body migrates from a thread it starts (in its context), while a real
    island 1 runs in another thread of this process: the audit's writes stay in the
    audit, the real island's reach the experiment, and it goes on afterwards (8215498
    refused the body thread: it guessed whose thread it was, review 41)."""
    url, exp = str(folder), "exp"
    published = threading.Event()
    EVENTS[(exp, 1, 2, "published")] = published
    results: dict[str, Any] = {}
    try:
        real = _real_island_in_a_thread(url, exp, 1, results)
        assert published.wait(120)  # now waiting for island 0's generation 2
        assert island.audit(url, exp, 0, 6, in_thread=True, steps=6).ok
        assert sorted(_files(folder)) == ["exp/migrants/1/2", "exp/plan"]
        island(url, exp, 0, 6)
        real.join(120)
        assert not real.is_alive()
        assert "error" not in results, results.get("error")
        assert results["one"]["generation"] == 6
    finally:
        for key in [k for k in EVENTS if k[0] == exp]:
            del EVENTS[key]


@checkpointed(store=RUNS)
def _held(name: str, *, state: Any = None) -> Generator[Any]:
    """Not an island: held at its first yield until the test lets it go."""
    state = state or 0
    gate = _event(name, 0, 0, "gate")
    entered = _event(name, 0, 0, "entered")
    if gate is not None and entered is not None:
        entered.set()
        assert gate.wait(120)
    while state < 2:
        state += 1
        yield state
    return state


@pytest.mark.parametrize("how", ["plain-thread", "thread-pool"])
def test_real_migrations_from_other_threads_reach_the_store_while_an_audit_runs(
        folder: Path, how: str) -> None:
    """While an unrelated audit runs in another thread of this process, code that is not
    the audit's publishes and finishes from a plain thread or a pool worker: 8215498 took
    such a thread as the audit's when no real run was registered (the writes vanished into
    the audit's overlay) and refused it when one was (a real island failed, exit 78).
    They reach the experiment, whatever audit runs."""
    from concurrent.futures import ThreadPoolExecutor

    url, name = str(folder), f"held-{how}"
    entered, gate = threading.Event(), threading.Event()
    EVENTS[(name, 0, 0, "entered")], EVENTS[(name, 0, 0, "gate")] = entered, gate
    reports: list[Any] = []
    try:
        auditor = threading.Thread(target=lambda: reports.append(_held.audit(name, steps=2)))
        auditor.start()
        assert entered.wait(120)  # the audit's body runs, held

        def real() -> None:
            arch = Archipelago(url, "exp", 2, TOPOLOGY, every=2)
            arch.publish(0, 2, ["real"])
            arch.finish(0, 2)

        if how == "plain-thread":
            worker = threading.Thread(target=real)
            worker.start()
            worker.join(120)
            assert not worker.is_alive()
        else:
            with ThreadPoolExecutor(1) as pool:
                pool.submit(real).result(120)
        assert sorted(_files(folder)) == ["exp/finished/0", "exp/migrants/0/2", "exp/plan"]
        gate.set()
        auditor.join(120)
        assert not auditor.is_alive() and reports and reports[0].ok, reports
    finally:
        gate.set()
        for key in [k for k in EVENTS if k[0] == name]:
            del EVENTS[key]


def test_a_process_the_audited_body_starts_in_a_fresh_interpreter_is_refused(
        folder: Path) -> None:
    """Such a process (not forked) inherits $RESUMABLE_AUDIT_CHILD and no overlay: its
    migrations are refused, and nothing reaches the experiment."""
    import subprocess
    import sys

    code = ("import sys; from resumable.islands import Archipelago\n"
            f"a = Archipelago({str(folder)!r}, 'exp', 2, {{0: [], 1: [0]}}, every=2)\n"
            "try:\n    a.publish(0, 2, ['x'])\nexcept Exception as err:\n"
            "    print(type(err).__name__, err); sys.exit(3)\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=120, env={**os.environ, "RESUMABLE_AUDIT_CHILD": "island"})
    assert done.returncode == 3, (done.stdout, done.stderr)
    assert done.stdout.startswith("ConfigurationError"), done.stdout
    assert "started by the body of f.audit" in done.stdout, done.stdout
    assert _files(folder) == {}


def test_the_audited_islands_own_real_objects_do_not_bind_the_audit(folder: Path) -> None:
    """The real island 1 already ran (with emigrants of its own: noise) and finished at
    6; an audit of island 1 for 4 generations, with other emigrants, compares its
    republishes with its own uninterrupted run only: no conflict with the real migrants,
    no 'already finished at 6', nothing written."""
    url, exp = str(folder), "exp"
    island(url, exp, 0, 6)
    island(url, exp, 1, 6, noise=True)
    before = _files(folder)
    report = island.audit(url, exp, 1, 4, steps=5)
    assert report.ok, report
    assert _files(folder) == before


class _Worker:
    """A long-lived thread a body starts on first use, in a copy of the caller's context,
    and runs jobs on: each in its submitter's context (``per_job``, as the README asks),
    or in the one it was started in."""

    def __init__(self, per_job: bool) -> None:
        self.per_job = per_job
        self.jobs: list[tuple[Any, threading.Event, list[Any]]] = []
        self.ready = threading.Condition()
        self.thread: threading.Thread | None = None

    def run(self, job: Any) -> Any:
        if self.thread is None:
            self.thread = threading.Thread(target=contextvars.copy_context().run,
                                           args=(self._serve,), daemon=True)
            self.thread.start()
        if self.per_job:
            job = functools.partial(contextvars.copy_context().run, job)
        done, out = threading.Event(), []
        with self.ready:
            self.jobs.append((job, done, out))
            self.ready.notify()
        assert done.wait(120)
        if isinstance(out[0], BaseException):
            raise out[0]
        return out[0]

    def stop(self) -> None:
        if self.thread is not None:
            with self.ready:
                self.jobs.append((None, threading.Event(), []))
                self.ready.notify()
            self.thread.join(120)

    def _serve(self) -> None:
        while True:
            with self.ready:
                self.ready.wait_for(lambda: bool(self.jobs))
                job, done, out = self.jobs.pop(0)
            if job is None:
                return
            try:
                out.append(job())
            except BaseException as err:
                out.append(err)
            done.set()


WORKERS: dict[str, _Worker] = {}


@checkpointed(store=RUNS)
def _via_worker(folder: str, experiment: str, index: int, generations: int, *,
                per_job: bool = True, state: Any = None) -> Generator[Any]:
    """Island 0, migrating through the process's worker (started at the first call)."""
    worker = WORKERS.setdefault(folder, _Worker(per_job))
    arch = Archipelago(folder, experiment, 2, TOPOLOGY, every=2)
    state = state or {"generation": 0}
    while state["generation"] < generations:
        state["generation"] += 1
        g = state["generation"]
        if arch.due(g):
            worker.run(lambda g=g: arch.publish(index, g, [g]))
        yield state
    worker.run(lambda: arch.finish(index, state["generation"]))
    return state


def test_a_worker_the_audit_started_serves_a_later_real_run(folder: Path) -> None:
    """The audit is the process's first call, so the body's worker starts inside it and
    outlives it. Run as the README asks (each job in its submitter's context), a later
    real run's migrations through it reach the experiment (review 42: they went into the
    finished audit's overlay)."""
    url, exp = str(folder), "exp"
    try:
        assert _via_worker.audit(url, exp, 0, 4, steps=4).ok
        assert _files(folder) == {}
        assert _via_worker(url, exp, 0, 4)["generation"] == 4  # the real island 0
        assert sorted(_files(folder)) == [
            "exp/finished/0", "exp/migrants/0/2", "exp/migrants/0/4", "exp/plan"]
    finally:
        WORKERS.pop(url, _Worker(True)).stop()


def test_a_copy_of_the_audits_context_used_after_it_is_refused(folder: Path) -> None:
    """Work in a copy of an audit's context after the audit ended cannot be told to be
    the audit's or a real run's: a worker running jobs in the context it was started in
    (review 42: a real run's writes were lost), and a thread the audited body left behind
    (review 43: taken as real, the audit wrote to the experiment). Both are refused, and
    nothing reaches the experiment."""
    url, exp = str(folder), "exp"
    try:
        assert _via_worker.audit(url, exp, 0, 4, per_job=False, steps=4).ok
        with pytest.raises(ConfigurationError, match=r"copy_context\(\)\.run per job"):
            _via_worker(url, exp, 0, 4, per_job=False)
        assert _files(folder) == {}
    finally:
        WORKERS.pop(url, _Worker(False)).stop()

    go, done = threading.Event(), threading.Event()
    errors: list[BaseException] = []

    @checkpointed(store=RUNS)
    def leaves_a_thread(folder: str, *, state: Any = None) -> Generator[Any]:
        arch = Archipelago(folder, exp, 2, TOPOLOGY, every=2)

        def late() -> None:  # fire and forget: publishes once the audit is over
            try:
                assert go.wait(120)
                arch.publish(0, 2, ["late"])
            except BaseException as err:
                errors.append(err)
            finally:
                done.set()

        if state is None and not go.is_set() and not done.is_set():
            threading.Thread(target=contextvars.copy_context().run, args=(late,),
                             daemon=True).start()
        state = state or 0
        while state < 2:
            state += 1
            yield state
        return state

    assert leaves_a_thread.audit(url, steps=2).ok
    go.set()
    assert done.wait(120)
    assert errors and isinstance(errors[0], ConfigurationError), errors
    assert _files(folder) == {}


POOLS: dict[str, Any] = {}


def _pool_publish(folder: str, experiment: str, index: int, generation: int) -> int:
    Archipelago(folder, experiment, 2, TOPOLOGY, every=2).publish(index, generation,
                                                                  [generation])
    return os.getpid()


@checkpointed(store=RUNS)
def _via_fork_pool(folder: str, experiment: str, index: int, generations: int, *,
                   state: Any = None) -> Generator[Any]:
    """Island 0, migrating through a fork pool the process makes at its first call."""
    import multiprocessing

    if folder not in POOLS:
        POOLS[folder] = multiprocessing.get_context("fork").Pool(1)
    state = state or {"generation": 0}
    while state["generation"] < generations:
        state["generation"] += 1
        g = state["generation"]
        if g % 2 == 0:
            POOLS[folder].apply(_pool_publish, (folder, experiment, index, g))
        yield state
    return state


def test_a_process_forked_inside_an_audit_is_refused_not_a_silent_overlay(
        folder: Path) -> None:
    """A fork pool the body makes at its first use, when that is inside an audit: its
    worker inherited a copy of the audit's overlay, so the audit's migrations went into a
    copy nobody reads (the audit reported ok), and so did every later real run's through
    that pool: the experiment stayed empty and the neighbours waited their timeout
    (review 44). Work in a process forked from an audit is refused, during the audit and
    after it, and nothing reaches the experiment."""
    url, exp = str(folder), "exp"
    try:
        # (before: the audit reported ok, its migrations in a copy nobody read)
        with pytest.raises(ResumableError, match=r"uninterrupted run raised "
                           r"ConfigurationError.*forked from f\.audit of _via_fork_pool"):
            _via_fork_pool.audit(url, exp, 0, 4, steps=4)
        with pytest.raises(ConfigurationError, match=r"forked from f\.audit"):
            _via_fork_pool(url, exp, 0, 4)
        assert _files(folder) == {}
    finally:
        pool = POOLS.pop(url, None)
        if pool is not None:
            pool.terminate()
            pool.join()
