"""A small GA-shaped body used across the tests: draws from the global RNGs every generation."""

from __future__ import annotations

import os
import random
import subprocess
import sys
from collections.abc import Callable, Generator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from resumable import checkpointed


class Crash(Exception):
    """The fault the tests inject mid-generation."""


@dataclass
class Faults:
    """Where to crash (each generation once), and a record of every entry into the body."""

    crash_at: set[int] = field(default_factory=set)
    entered: list[int] = field(default_factory=list)
    generations_run: int = 0


def evolve_body(
    generations: int, pop: int, *, state: dict[str, Any] | None, faults: Faults
) -> Generator[dict[str, Any], None, float]:
    """Mutates its population in place and draws from random and numpy's global RNG."""
    faults.entered.append(0 if state is None else state["generation"])
    if state is None:
        state = {"generation": 0, "population": np.zeros(pop), "best": None, "trace": []}
    while state["generation"] < generations:
        g = state["generation"] + 1
        faults.generations_run += 1
        state["population"] += np.random.normal(size=pop)  # in place, before the yield
        kick = random.random()
        if g in faults.crash_at:
            faults.crash_at.discard(g)  # a crash happens once; the next attempt goes through
            raise Crash(f"injected crash in generation {g}")
        state["population"] *= 0.9
        state["best"] = float(state["population"].max() + kick)
        state["trace"].append(state["best"])
        state["generation"] = g
        yield state
    return float(sum(state["trace"]))


def make_evolve(faults: Faults, **options: Any) -> Any:
    """``evolve(generations, pop)`` decorated with ``options``, crashing as ``faults`` says."""

    @checkpointed(**options)
    def evolve(generations: int, pop: int = 8, *, state: dict[str, Any] | None = None) -> Any:
        return (yield from evolve_body(generations, pop, state=state, faults=faults))

    return evolve


def reference(generations: int, pop: int = 8, seed: int = 0) -> float:
    """The uninterrupted result, with no library involved."""
    random.seed(seed)
    np.random.seed(seed)
    gen = evolve_body(generations, pop, state=None, faults=Faults())
    while True:
        try:
            next(gen)
        except StopIteration as stop:
            return float(stop.value)


def call_until_done(evolve: Callable[[int], Any], generations: int, reseed: int) -> tuple[Any, int]:
    """Call ``evolve(generations)`` until it returns: (result, crashes along the way).

    Between attempts the global RNGs are scrambled, as in a new process.
    """
    random.seed(0)
    np.random.seed(0)
    crashes = 0
    while True:
        try:
            return evolve(generations), crashes
        except Crash:
            crashes += 1
            random.seed(reseed + crashes)
            np.random.seed((reseed + crashes) % 2**32)


WORKER = Path(__file__).parent / "workers" / "core_worker.py"
ROOT = Path(__file__).resolve().parents[1]


def start_worker(store: str, generations: int, pause: float, every: str,
                 env: dict[str, str] | None = None) -> subprocess.Popen[str]:
    """``workers/core_worker.py`` as a real process (``env`` adds variables)."""
    return subprocess.Popen(
        [sys.executable, str(WORKER), store, str(generations), str(pause), every],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        env=dict(os.environ, PYTHONPATH=str(ROOT), **(env or {})),
    )


def finish_worker(store: str, generations: int, every: str = "generation",
                  env: dict[str, str] | None = None) -> tuple[str, str]:
    """Run a worker to the end: (its result as float.hex(), its stderr)."""
    proc = start_worker(store, generations, 0.0, every, env)
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, err
    result = next(line.split()[1] for line in out.splitlines() if line.startswith("RESULT"))
    return result, err
