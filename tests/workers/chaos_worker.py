"""A checkpointed GA-like worker for the chaos and fencing suites.

usage: chaos_worker.py STORE RUN_ID [--generations N] [--delay S] [--pop P] [--seed K]
                       [--keep K] [--slow-after G --slow-delay S]

STORE and RUN_ID may also come from $RESUMABLE_STORE / $RESUMABLE_RUN_ID ("-" for the
argument). One JSON line per event on stdout, flushed at once so that a SIGKILLed
worker leaves an exact record::

    {"event": "start", "start": S, "pid": P}  the body was entered at step S (0: fresh)
    {"event": "begin", "g": G}                 generation G was begun
    {"event": "gen", "g": G}                   generation G was yielded (and snapshotted)
    {"event": "result", "result": {...}}       the run's return value

Library log lines (retries, "fails verification", "skipping ...") go to stderr.

The generation draws from ``random`` and numpy's global RNG, as the article's GA does,
so a resume that did not restore them exactly would end with a different result.
Outside the library's SIGTERM handler (start-up, after the end) SIGTERM exits 143 at
once: there is nothing to flush then.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import logging
import os
import random
import signal
import sys
import time
from collections.abc import Generator
from typing import Any

import numpy as np


def _emit(**event: Any) -> None:
    sys.stdout.write(json.dumps(event) + "\n")
    sys.stdout.flush()


def body(generations: int, pop: int, delay: float, *, state: dict[str, Any] | None,
         slow_after: int = 0, slow_delay: float = 0.0
         ) -> Generator[dict[str, Any], None, dict[str, Any]]:
    """Tournament selection, crossover and mutation on a real-valued population."""
    _emit(event="start", start=0 if state is None else state["generation"], pid=os.getpid())
    if state is None:
        state = {"generation": 0, "population": np.random.uniform(-5, 5, size=(pop, 8)),
                 "best": []}
    while state["generation"] < generations:
        _emit(event="begin", g=state["generation"] + 1)
        population = state["population"]
        fitness = np.sum(population * population, axis=1)
        a = np.random.randint(0, pop, size=pop)
        b = np.random.randint(0, pop, size=pop)
        parents = population[np.where(fitness[a] < fitness[b], a, b)]
        mates = parents[np.random.permutation(pop)]
        mask = np.array([random.random() < 0.5 for _ in range(pop * 8)]).reshape(pop, 8)
        children = np.where(mask, parents, mates) + np.random.normal(0, 0.1, size=(pop, 8))
        children[0] = population[int(np.argmin(fitness))]  # elitism
        state["population"] = children
        state["best"].append(float(np.min(np.sum(children * children, axis=1))))
        state["generation"] += 1
        pause = slow_delay if slow_after and state["generation"] > slow_after else delay
        if pause:
            time.sleep(pause)
        yield state
    return summary(state)


def summary(state: dict[str, Any]) -> dict[str, Any]:
    """What the run returns: exact enough to tell any divergence."""
    return {
        "generation": state["generation"],
        "best": state["best"][-1],
        "digest": hashlib.sha256(np.ascontiguousarray(state["population"]).tobytes()
                                 + json.dumps(state["best"]).encode()).hexdigest(),
    }


def seed_globals(seed: int) -> None:
    """What every process does first, like a program's main."""
    random.seed(seed)
    np.random.seed(seed)


def reference(generations: int, pop: int = 32, seed: int = 0) -> dict[str, Any]:
    """The uninterrupted result, computed in-process without the library."""
    saved = random.getstate(), np.random.get_state()
    seed_globals(seed)
    stdout, sys.stdout = sys.stdout, open(os.devnull, "w")  # noqa: SIM115
    try:
        gen = body(generations, pop, 0.0, state=None)
        while True:
            try:
                next(gen)
            except StopIteration as stop:
                return dict(stop.value)
    finally:
        sys.stdout.close()
        sys.stdout = stdout
        random.setstate(saved[0])
        np.random.set_state(saved[1])


def main(argv: list[str] | None = None) -> int:
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    parser = argparse.ArgumentParser()
    parser.add_argument("store")
    parser.add_argument("run_id")
    parser.add_argument("--generations", type=int, default=60)
    parser.add_argument("--delay", type=float, default=0.03)
    parser.add_argument("--pop", type=int, default=32)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--keep", type=int, default=3)
    parser.add_argument("--slow-after", type=int, default=0)
    parser.add_argument("--slow-delay", type=float, default=0.0)
    args = parser.parse_args(argv)
    store = os.environ["RESUMABLE_STORE"] if args.store == "-" else args.store
    run_id = os.environ["RESUMABLE_RUN_ID"] if args.run_id == "-" else args.run_id
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr,
                        format="%(levelname)s %(name)s: %(message)s")
    seed_globals(args.seed)

    from resumable import checkpointed

    @checkpointed(store=store, run_id=run_id, keep=args.keep)
    def evolve(generations: int, pop: int, *, state: Any = None) -> Any:
        return (yield from body(generations, pop, args.delay, state=state,
                                slow_after=args.slow_after, slow_delay=args.slow_delay))

    states = evolve.iter(args.generations, args.pop)
    while True:
        try:
            state = next(states)
        except StopIteration as stop:
            _emit(event="result", result=stop.value)
            return 0
        _emit(event="gen", g=state["generation"])


if __name__ == "__main__":
    sys.exit(main())
