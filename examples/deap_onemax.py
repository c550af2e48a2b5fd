"""DEAP's OneMax with eaSimple, resumable: the one-line change is the import.

    python examples/deap_onemax.py --crash-at 20 || python examples/deap_onemax.py --verify

``ea_simple`` from ``resumable.integrations.deap`` takes DEAP's ``eaSimple`` arguments
plus ``store=`` and checkpoints every generation. --crash-at N sends the process SIGTERM
(what Kubernetes does to a preempted pod) as generation N+1 begins: the last generation
is saved and it exits 143; --crash-mode kill is SIGKILL (an OOM kill). The next start
resumes; --verify then runs DEAP's own eaSimple with the same seed and compares.
"""

from __future__ import annotations

import argparse
import logging
import os
import random
import signal
import sys
from pathlib import Path
from typing import Any

from deap import algorithms, base, creator, tools

try:
    from resumable.integrations.deap import ea_simple
except ImportError:  # run from a clone without `pip install -e .`
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
    from resumable.integrations.deap import ea_simple

CRASH = {"at": None, "mode": "term", "generation": 0}


def evaluate(individual: list[int]) -> tuple[int]:
    return (sum(individual),)


def select(population: list[Any], k: int) -> list[Any]:
    """Tournament selection; eaSimple calls it once at the start of each generation."""
    CRASH["generation"] += 1
    if CRASH["at"] is not None and CRASH["generation"] == CRASH["at"] + 1:
        crash(CRASH["at"])
    return tools.selTournament(population, k, tournsize=3)


def crash(generation: int) -> None:
    how = "SIGKILL" if CRASH["mode"] == "kill" else "SIGTERM"
    print(f"simulated pod failure after generation {generation}: {how}", flush=True)
    os.kill(os.getpid(), signal.SIGKILL if CRASH["mode"] == "kill" else signal.SIGTERM)


def setup(seed: int, population: int) -> tuple[list[Any], base.Toolbox]:
    if not hasattr(creator, "FitnessMax"):
        creator.create("FitnessMax", base.Fitness, weights=(1.0,))
        creator.create("Individual", list, fitness=creator.FitnessMax)
    toolbox = base.Toolbox()
    toolbox.register("attr_bool", random.randint, 0, 1)
    toolbox.register("individual", tools.initRepeat, creator.Individual, toolbox.attr_bool, 100)
    toolbox.register("population", tools.initRepeat, list, toolbox.individual)
    toolbox.register("evaluate", evaluate)
    toolbox.register("mate", tools.cxTwoPoint)
    toolbox.register("mutate", tools.mutFlipBit, indpb=0.05)
    toolbox.register("select", select)
    random.seed(seed)
    return toolbox.population(n=population), toolbox


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--generations", type=int, default=40)
    p.add_argument("--population", type=int, default=100)
    p.add_argument("--seed", type=int, default=64)
    p.add_argument("--store", default=None, help="folder or s3://bucket/prefix "
                   "(default: $RESUMABLE_STORE, else ./.resumable)")
    p.add_argument("--crash-at", type=int, metavar="N", help="SIGTERM after generation N")
    p.add_argument("--crash-mode", choices=("term", "kill"), default="term")
    p.add_argument("--verify", action="store_true", help="compare with DEAP's own eaSimple")
    args = p.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="[%(name)s] %(message)s")
    CRASH["at"], CRASH["mode"] = args.crash_at, args.crash_mode

    pop, toolbox = setup(args.seed, args.population)
    hof = tools.HallOfFame(1)
    # Before: algorithms.eaSimple(pop, toolbox, cxpb=0.5, mutpb=0.2, ngen=..., halloffame=hof)
    pop, log = ea_simple(pop, toolbox, cxpb=0.5, mutpb=0.2, ngen=args.generations,
                         halloffame=hof, verbose=False, store=args.store)
    best = hof[0].fitness.values[0]
    print(f"generations: {log[-1]['gen']}, best fitness: {best}")
    if args.verify:
        CRASH["at"] = None
        pop2, toolbox2 = setup(args.seed, args.population)
        hof2 = tools.HallOfFame(1)
        _, log2 = algorithms.eaSimple(pop2, toolbox2, cxpb=0.5, mutpb=0.2,
                                      ngen=args.generations, halloffame=hof2, verbose=False)
        same = ([list(i) for i in pop] == [list(i) for i in pop2]
                and list(hof[0]) == list(hof2[0]) and list(log) == list(log2))
        print("DEAP's own eaSimple, same seed: " + ("identical" if same else "DIFFERENT"))
        return 0 if same else 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
