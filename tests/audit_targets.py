"""Bodies for tests/test_audit.py, importable by module path (f.audit(fresh_process=True)).

Each is a small loop that is, or is not, bit-for-bit resumable, for a known reason.
"""

from __future__ import annotations

import random
import time
from collections.abc import Generator
from typing import Any

import numpy as np

from resumable import checkpointed

STORE = "memory://audit-targets"  # the audit never writes here; tests check that it stays empty

# A module-level generator, outside the state and not captured: a resumed run (and a new
# process, which seeds it again at import) draws other numbers than the uninterrupted one.
SHARED = random.Random(7)


@checkpointed(store=STORE)
def draws_from_module_rng(n: int, *, state: dict[str, Any] | None = None) -> Generator[Any]:
    if state is None:
        state = {"step": 0, "draws": []}
    while state["step"] < n:
        state["draws"].append(SHARED.random())
        state["step"] += 1
        yield state


@checkpointed(store=STORE)
def iterates_a_set(n: int, *, state: dict[str, Any] | None = None) -> Generator[Any]:
    """Takes 'the first' tag of a set of strings each step: an order set by the hash seed."""
    if state is None:
        state = {"step": 0, "tags": {f"tag-{i}" for i in range(64)}, "taken": []}
    while state["step"] < n:
        first = next(iter(state["tags"]))
        state["tags"].discard(first)
        state["taken"].append(first)
        state["step"] += 1
        yield state


@checkpointed(store=STORE)
def reads_the_clock(n: int, *, state: dict[str, Any] | None = None) -> Generator[Any]:
    if state is None:
        state = {"step": 0, "started": time.time(), "stamps": []}
    while state["step"] < n:
        state["stamps"].append(time.time())
        state["step"] += 1
        yield state


@checkpointed(store=STORE)
def numpy_walk(n: int, size: int, seed: int, *,
               state: dict[str, Any] | None = None) -> Generator[Any]:
    """Vectorised updates from a Generator in the state and from numpy's global RNG."""
    if state is None:
        rng = np.random.default_rng(seed)
        state = {"step": 0, "rng": rng, "x": rng.normal(size=(size, 3)),
                 "best": float("nan"), "history": []}
    while state["step"] < n:
        x = state["x"]
        x += state["rng"].normal(scale=0.1, size=x.shape) + np.random.normal(size=x.shape)
        x *= 0.5 + 0.5 * np.cos(x)
        state["best"] = float(np.min((x * x).sum(axis=1)))
        state["history"].append(np.float32(x.mean()))
        state["step"] += 1
        yield state


@checkpointed(store=STORE)
def fails_on_resume(n: int, *, state: dict[str, Any] | None = None) -> Generator[Any]:
    """Needs something that only a fresh start sets up (here: a key of the first state)."""
    scratch = {"ready": True} if state is None else {}
    if state is None:
        state = {"step": 0}
    while state["step"] < n:
        if not scratch["ready"]:
            raise AssertionError("unreachable")
        state["step"] += 1
        yield state


class Walker:
    """A decorated method: its object takes part in the call (obj.walk.audit(...))."""

    def __init__(self, scale: float) -> None:
        self.scale = scale
        self.calls = 0  # changed by the body: state outside the state

    @checkpointed(store=STORE)
    def walk(self, n: int, *, state: dict[str, Any] | None = None) -> Generator[Any]:
        if state is None:
            state = {"step": 0, "rng": random.Random(3), "x": 0.0}
        while state["step"] < n:
            state["x"] += self.scale * state["rng"].gauss(0.0, 1.0)
            state["step"] += 1
            yield state

    @checkpointed(store=STORE)
    def counts(self, n: int, *, state: dict[str, Any] | None = None) -> Generator[Any]:
        if state is None:
            state = {"step": 0, "seen": []}
        while state["step"] < n:
            self.calls += 1
            state["seen"].append(self.calls)
            state["step"] += 1
            yield state


class Sampler:
    """Draws from an RNG held by the object (self.rng), outside the state."""

    def __init__(self, seed: int) -> None:
        self.rng = np.random.default_rng(seed)

    @checkpointed(store=STORE)
    def run(self, n: int, *, state: dict[str, Any] | None = None) -> Generator[Any]:
        state = state or {"step": 0, "xs": []}
        while state["step"] < n:
            state["xs"].append(float(self.rng.normal()))
            state["step"] += 1
            yield state


# DEAP: individuals are list subclasses with a .fitness; evaluation may be noisy.
from deap import base, creator, tools  # noqa: E402

if not hasattr(creator, "AuditFitnessMin"):
    creator.create("AuditFitnessMin", base.Fitness, weights=(-1.0,))
    creator.create("AuditIndividual", list, fitness=creator.AuditFitnessMin)
NOISE = random.Random(11)  # a noisy fitness from a generator outside the state


def _deap_generation(population: list[Any], noisy: bool) -> list[Any]:
    offspring = [creator.AuditIndividual(ind) for ind in tools.selTournament(
        population, len(population), tournsize=3)]
    for child in offspring:
        tools.mutGaussian(child, mu=0.0, sigma=0.2, indpb=0.3)
        child.fitness.values = (sum(x * x for x in child) + (NOISE.random() if noisy else 0),)
    return offspring


@checkpointed(store=STORE)
def deap_sphere(n: int, noisy: bool = False, *,
                state: dict[str, Any] | None = None) -> Generator[Any]:
    if state is None:
        population = [creator.AuditIndividual(random.uniform(-1, 1) for _ in range(4))
                      for _ in range(12)]
        for ind in population:
            ind.fitness.values = (sum(x * x for x in ind),)
        state = {"gen": 0, "population": population}
    while state["gen"] < n:
        state["population"] = _deap_generation(state["population"], noisy)
        state["gen"] += 1
        yield state
