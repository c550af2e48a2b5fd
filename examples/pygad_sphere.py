"""PyGAD, resumable: ``resumable.integrations.pygad.run(ga)`` instead of ``ga.run()``.

    python examples/pygad_sphere.py --crash-at 30 || python examples/pygad_sphere.py --verify

Minimises a shifted sphere with PyGAD's GA. --crash-at N sends SIGTERM as generation N+1
begins (from PyGAD's on_fitness callback): the last generation is saved and the process
exits 143; --crash-mode kill is SIGKILL. The next start resumes, and on_generation fires
only for the generations it runs. --verify runs ``ga.run()`` with the same seed and
compares the final instance.
"""

from __future__ import annotations

import argparse
import logging
import os
import signal
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pygad

try:
    from resumable.integrations import pygad as resumable_pygad
except ImportError:  # run from a clone without `pip install -e .`
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
    from resumable.integrations import pygad as resumable_pygad

CRASH: dict[str, Any] = {"at": None, "mode": "term", "ran": 0}


def fitness(ga: pygad.GA, solution: np.ndarray, index: Any) -> float:
    return -float(np.sum((solution - 1.5) ** 2))


def on_fitness(ga: pygad.GA, fitness: np.ndarray) -> None:
    """Called as each generation begins, with the number of generations completed."""
    if CRASH["at"] is not None and ga.generations_completed == CRASH["at"]:
        how = "SIGKILL" if CRASH["mode"] == "kill" else "SIGTERM"
        print(f"simulated pod failure after generation {CRASH['at']}: {how}", flush=True)
        os.kill(os.getpid(), signal.SIGKILL if CRASH["mode"] == "kill" else signal.SIGTERM)


def on_generation(ga: pygad.GA) -> None:
    CRASH["ran"] += 1


def make(generations: int, seed: int) -> pygad.GA:
    return pygad.GA(num_generations=generations, num_parents_mating=10, sol_per_pop=40,
                    num_genes=10, fitness_func=fitness, on_fitness=on_fitness,
                    on_generation=on_generation, random_seed=seed, suppress_warnings=True)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--generations", type=int, default=60)
    p.add_argument("--seed", type=int, default=7)
    p.add_argument("--store", default=None, help="folder or s3://bucket/prefix "
                   "(default: $RESUMABLE_STORE, else ./.resumable)")
    p.add_argument("--crash-at", type=int, metavar="N", help="SIGTERM after generation N")
    p.add_argument("--crash-mode", choices=("term", "kill"), default="term")
    p.add_argument("--verify", action="store_true", help="compare with PyGAD's own ga.run()")
    args = p.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="[%(name)s] %(message)s")
    CRASH["at"], CRASH["mode"] = args.crash_at, args.crash_mode

    ga = make(args.generations, args.seed)
    resumable_pygad.run(ga, store=args.store)  # before: ga.run()
    _, best, _ = ga.best_solution()
    print(f"generations: {ga.generations_completed} ({CRASH['ran']} run in this process), "
          f"best fitness: {float(best)!r}")
    if args.verify:
        CRASH["at"] = None
        own = make(args.generations, args.seed)
        own.run()
        same = (np.array_equal(own.population, ga.population)
                and own.best_solutions_fitness == ga.best_solutions_fitness)
        print("PyGAD's own ga.run(), same seed: " + ("identical" if same else "DIFFERENT"))
        return 0 if same else 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
