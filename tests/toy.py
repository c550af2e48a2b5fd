"""A small GA-shaped body used across the tests: draws from the global RNGs every generation."""

from __future__ import annotations

import random
from collections.abc import Generator
from dataclasses import dataclass, field
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
