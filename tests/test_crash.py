"""Crash anywhere, call again until done: the result is the uninterrupted one."""

from __future__ import annotations

import random
import signal
from pathlib import Path
from typing import Any

import numpy as np
from hypothesis import given
from hypothesis import strategies as st

from resumable._errors import EXIT_SIGTERM
from resumable._run import Run
from resumable.stores import open_store
from tests.toy import (
    Faults,
    call_until_done,
    finish_worker,
    make_evolve,
    reference,
    start_worker,
)

GENERATIONS = 12
_stores = iter(range(10**9))


@given(
    crash_at=st.sets(st.integers(1, GENERATIONS), max_size=6),
    every=st.sampled_from(["generation", 1, 2, 3, 5, "1h", 0.0001]),
    reseed=st.integers(0, 2**32 - 1),
)
def test_any_crash_points_resume_to_the_uninterrupted_result(
    crash_at: set[int], every: Any, reseed: int
) -> None:
    """For any crash points and any `every`, retrying until done gives the reference result.

    Each crash happens mid-generation after it drew random numbers; between attempts the
    global RNGs are scrambled, as in a new process. The body is entered once per crash + 1.
    """
    expected = reference(GENERATIONS)
    faults = Faults(crash_at=set(crash_at))
    evolve = make_evolve(faults, store=f"memory://crash-{next(_stores)}", every=every)
    result, crashes = call_until_done(evolve, GENERATIONS, reseed)
    assert crashes == len(crash_at)
    assert result == expected
    assert len(faults.entered) == crashes + 1


@given(crash_at=st.sets(st.integers(1, GENERATIONS), max_size=5))
def test_in_process_restarts_give_the_uninterrupted_result(crash_at: set[int]) -> None:
    """With restarts=1 every single crash is absorbed in-process: one call, same result."""
    expected = reference(GENERATIONS)
    faults = Faults(crash_at=set(crash_at))
    evolve = make_evolve(faults, store=f"memory://restart-{next(_stores)}", restarts=1)
    random.seed(0)
    np.random.seed(0)
    assert evolve(GENERATIONS) == expected
    assert len(faults.entered) == len(crash_at) + 1


def finish(store: str, generations: int, every: str = "generation") -> str:
    return finish_worker(store, generations, every)[0]


def test_sigkill_at_random_moments_resumes_to_the_reference(tmp_path: Path) -> None:
    """A worker SIGKILLed at random moments (>= 10 times) and restarted ends as the reference."""
    generations = 400
    expected = finish(str(tmp_path / "reference"), generations)
    store = str(tmp_path / "killed")
    schedule = random.Random(7)
    kills = 0
    progress = []
    while kills < 12:
        proc = start_worker(store, generations, 0.02, "generation")
        # Killed a random number of generations into its work (counted on its output,
        # not a clock: on a loaded machine start-up alone can outlast any fixed sleep).
        assert proc.stdout is not None
        target = schedule.randint(1, 12)
        for line in proc.stdout:
            if line.startswith("done") and int(line.split()[1]) >= sum(progress[-1:]) + target:
                break
        if proc.poll() is not None:
            break
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)
        proc.stdout.close()
        kills += 1
        latest = Run(open_store(store), "worker").load_latest(with_state=False)
        progress.append(0 if latest is None else latest.step)
    assert kills >= 10
    assert progress[-1] > 0 and progress == sorted(progress), progress
    assert finish(store, generations) == expected


def test_sigterm_between_saves_leaves_the_last_yielded_state_durable(tmp_path: Path) -> None:
    """every=1000 never saves on schedule; SIGTERM still makes the last yielded state durable."""
    store = str(tmp_path / "store")
    proc = start_worker(store, 1000, 0.02, "1000")
    assert proc.stdout is not None
    seen = 0
    for line in proc.stdout:
        if line.startswith("done"):
            seen = int(line.split()[1])
            if seen >= 5:
                break
    proc.send_signal(signal.SIGTERM)
    proc.wait(timeout=60)  # (promptness is the watchdog's: tests/test_signals)
    assert proc.returncode == EXIT_SIGTERM
    latest = Run(open_store(store), "worker").load_latest()
    assert latest is not None
    assert latest.step >= seen
    assert latest.state["generation"] == latest.step


def test_sigterm_resume_matches_reference(tmp_path: Path) -> None:
    """A run stopped by SIGTERM and restarted gives the uninterrupted result."""
    generations = 30
    expected = finish(str(tmp_path / "reference"), generations)
    store = str(tmp_path / "store")
    proc = start_worker(store, generations, 0.02, "7")
    assert proc.stdout is not None
    for line in proc.stdout:
        if line.startswith("done 9"):
            break
    proc.send_signal(signal.SIGTERM)
    proc.wait(timeout=20)
    assert proc.returncode == EXIT_SIGTERM
    assert finish(store, generations, "7") == expected
