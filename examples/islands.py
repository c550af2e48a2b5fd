"""An island-model GA: 4 checkpointed islands that exchange migrants through the store.

Each island runs the GA of examples/ga.py on its own population (its own seed) as its
own checkpointed run. Every --every generations it publishes its best --migrants
individuals to the store (create-only) and replaces its worst with those of its ring
neighbour (island i receives from island i-1). Kill any island at any time and start it
again: it resumes from its checkpoint, reads the same migrants it read before, and the
final populations of all islands are the same as in a run where nothing died.

    python examples/islands.py --store /tmp/islands          # all 4 islands, as processes
    python examples/islands.py --store /tmp/islands --island 2   # one island (a pod)

In a Kubernetes Indexed Job each pod runs one island: its index comes from
$JOB_COMPLETION_INDEX (see examples/k8s/islands-job.yaml).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import logging
import os
import subprocess
import sys
import time
from collections.abc import Generator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from ga import BOUND, next_population, rastrigin  # the GA of examples/ga.py

try:
    from resumable import checkpointed
    from resumable.islands import Archipelago
    from resumable.stores import default_store_url
except ImportError:  # run from a clone without `pip install -e .`
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
    from resumable import checkpointed
    from resumable.islands import Archipelago
    from resumable.stores import default_store_url


@dataclass
class Setup:
    """What the island body uses but is not part of its identity."""

    archipelago: Archipelago | None = None
    progress: bool = False  # print "GEN <island> <generation>" after each yield
    lockstep: bool = False  # tests: ... and then wait for a line on stdin
    gen_time: float = 0.0  # seconds of sleep per generation, standing in for real work
    entered_at: int | None = None  # generation the body started from in this process
    fresh: bool = False  # the body started with no checkpoint (state None)


SETUP = Setup()


def island(
    index: int, generations: int, population: int, dims: int, seed: int, migrants: int, *,
    state: dict[str, Any] | None = None,
) -> Generator[dict[str, Any], None, dict[str, Any]]:
    """One island's GA; ``migrate`` is a no-op except every ``every`` generations."""
    arch = SETUP.archipelago
    assert arch is not None
    if state is None:
        rng = np.random.default_rng([seed, index])
        pop = rng.uniform(-BOUND, BOUND, size=(population, dims))
        state = {"generation": 0, "population": pop, "fitness": rastrigin(pop), "rng": rng}
        SETUP.fresh = True
    SETUP.entered_at = state["generation"]
    while state["generation"] < generations:
        generation = state["generation"] + 1
        pop = next_population(state["population"], state["fitness"], state["rng"])
        fitness = rastrigin(pop)
        best_first = np.argsort(fitness, kind="stable")
        emigrants = pop[best_first[:migrants]].copy()
        for immigrants in arch.migrate(index, generation, emigrants):
            worst = np.argsort(fitness, kind="stable")[::-1][: len(immigrants)]
            pop[worst] = immigrants
            fitness[worst] = rastrigin(immigrants)
        if SETUP.gen_time:
            time.sleep(SETUP.gen_time)
        state.update(generation=generation, population=pop, fitness=fitness)
        yield state
        if SETUP.progress or SETUP.lockstep:
            print(f"GEN {index} {generation}", flush=True)
        if SETUP.lockstep:
            sys.stdin.readline()
    return {"island": index, "generations": state["generation"],
            "best_fitness": float(state["fitness"].min()).hex(),
            "population_sha256": hashlib.sha256(state["population"].tobytes()).hexdigest()}


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    index = os.environ.get("JOB_COMPLETION_INDEX")
    p.add_argument("--island", type=int, default=int(index) if index else None,
                   help="run only this island (default: $JOB_COMPLETION_INDEX; without "
                        "either, all islands run as local processes)")
    p.add_argument("--islands", type=int, default=4, help="default: %(default)s")
    p.add_argument("--topology", choices=("ring", "full"), default="ring")
    p.add_argument("--every", type=int, default=5,
                   help="migrate every N generations (default: %(default)s)")
    p.add_argument("--migrants", type=int, default=3, help="default: %(default)s")
    p.add_argument("--generations", type=int, default=40, help="default: %(default)s")
    p.add_argument("--population", type=int, default=100, help="default: %(default)s")
    p.add_argument("--dims", type=int, default=20, help="default: %(default)s")
    p.add_argument("--seed", type=int, default=42, help="default: %(default)s")
    p.add_argument("--experiment", default="islands-demo",
                   help="name of the archipelago in the store (default: %(default)s)")
    p.add_argument("--store", default=None, help="a folder, file:///abs/path or "
                   "s3://bucket/prefix (default: $RESUMABLE_STORE, else ./.resumable)")
    p.add_argument("--gen-time", type=float, default=0.0, metavar="SECONDS",
                   help="sleep this long per generation, standing in for real work")
    p.add_argument("--progress", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--lockstep", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("-q", "--quiet", action="store_true",
                   help="log warnings and errors only: resumable's INFO lines (start, "
                        "resume, finish) go, its warnings (the SIGTERM line) stay")
    return p.parse_args(argv)


def run_island(args: argparse.Namespace, store: str) -> dict[str, Any]:
    SETUP.archipelago = Archipelago(store, args.experiment, args.islands,
                                    topology=args.topology, every=args.every)
    SETUP.lockstep, SETUP.progress, SETUP.gen_time = args.lockstep, args.progress, args.gen_time
    run = checkpointed(store=store, run_id=f"{args.experiment}.island-{args.island}")(island)
    result: dict[str, Any] = run(args.island, args.generations, args.population, args.dims,
                                 args.seed, args.migrants)
    start = ("complete" if SETUP.entered_at is None  # its stored result, no generation run
             else "fresh" if SETUP.fresh else "resumed")
    return {**result, "resumed_from": SETUP.entered_at, "start": start}


def run_all(args: argparse.Namespace, store: str) -> int:
    """Every island as a local process of this script, like the pods of an Indexed Job."""
    common = [f"--{name.replace('_', '-')}={getattr(args, name)}" for name in (
        "islands", "topology", "every", "migrants", "generations", "population", "dims",
        "seed", "experiment", "gen_time")]
    common += ["--quiet"] if args.quiet else []
    procs = [subprocess.Popen([sys.executable, __file__, *common, f"--store={store}",
                               f"--island={i}"], stdout=subprocess.PIPE, text=True)
             for i in range(args.islands)]
    results = []
    for i, proc in enumerate(procs):
        out, _ = proc.communicate()
        if proc.returncode != 0:
            print(f"island {i} exited {proc.returncode}; start it again to resume",
                  file=sys.stderr)
            return proc.returncode or 1
        results.append(json.loads(out.strip().splitlines()[-1].split(" ", 1)[1]))
    for r in results:
        how = {"fresh": "started fresh",
               "resumed": f"resumed from generation {r['resumed_from']}",
               "complete": "already complete: its stored result"}[r["start"]]
        print(f"island {r['island']}: best fitness {float.fromhex(r['best_fitness']):.6g} "
              f"({how})")
    print("RESULTS " + json.dumps(results))
    return 0


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    logging.basicConfig(level=logging.WARNING if args.quiet else logging.INFO,
                        format="[%(name)s] %(message)s")
    store = args.store or default_store_url()
    if args.island is None:
        return run_all(args, store)
    print("RESULT " + json.dumps(run_island(args, store)), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
