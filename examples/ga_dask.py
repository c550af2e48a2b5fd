"""The GA of examples/ga.py with its fitness evaluated on a Dask cluster.

The driver (this process) runs the generation loop and checkpoints it as usual; each
generation's population is cut into chunks whose fitness is computed by
``client.map`` on the cluster's workers and collected with ``client.gather``. Kill the
driver and start it again: it resumes from its last checkpoint. Kill a worker: Dask
runs its tasks again elsewhere. Either way the result is bit-identical to a run where
nothing died, because the rule below holds.

The rule: fitness functions are pure (the same arguments give the same bits, on any
worker, any number of times), and any randomness they need arrives as a seed drawn in
the driver from the RNG that travels in the checkpointed state. Results are gathered
before the yield: a state holding a Future or a client cannot be saved (the library
refuses it with a SerializationError).

    python examples/ga_dask.py --crash-at 10 --crash-mode kill; python examples/ga_dask.py
    python examples/ga_dask.py --scheduler tcp://dask-scheduler:8786   # an existing cluster

Without --scheduler (or $DASK_SCHEDULER_ADDRESS) it starts a LocalCluster with
--workers worker processes.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import logging
import os
import signal
import sys
import time
from collections.abc import Callable, Generator
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import cloudpickle
import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import ga  # the GA of examples/ga.py
from ga import BOUND, next_population, rastrigin

# Send this code to the scheduler and workers by value: they need Dask and numpy, not
# these example files.
cloudpickle.register_pickle_by_value(ga)
if __name__ != "__main__":
    cloudpickle.register_pickle_by_value(sys.modules[__name__])

try:
    from resumable import checkpointed
    from resumable.stores import default_store_url
except ImportError:  # run from a clone without `pip install -e .`
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
    from resumable import checkpointed
    from resumable.stores import default_store_url


def evaluate(rows: np.ndarray, seed: int, noise: float) -> np.ndarray:
    """Fitness of each row: Rastrigin plus measurement noise drawn from ``seed``. Pure."""
    rng = np.random.default_rng(seed)
    values: np.ndarray = rastrigin(rows) + noise * rng.standard_normal(len(rows))
    return values


@dataclass
class Cluster:
    """What the body uses but what is not part of the run: the client, and the function
    sent to the workers (tests swap in a wrapper that computes the same values)."""

    client: Any = None
    evaluate: Callable[..., np.ndarray] = evaluate
    crash_at: int | None = None
    crash_mode: str = "kill"
    entered_at: int | None = None  # generation the body started from in this process
    fresh: bool = False  # the body started with no checkpoint (state None)


CLUSTER = Cluster()


def fitness_on_cluster(pop: np.ndarray, rng: np.random.Generator, chunks: int,
                       noise: float) -> np.ndarray:
    """Evaluate ``pop`` in ``chunks`` tasks; the seeds come from the checkpointed ``rng``."""
    parts = np.array_split(pop, chunks)
    seeds = [int(s) for s in rng.integers(0, 2**63, size=len(parts))]
    # pure=True (Dask's default) names each task by its function and arguments: a
    # resumed driver asking again for the same chunk gets the same task.
    futures = CLUSTER.client.map(CLUSTER.evaluate, parts, seeds, [noise] * len(parts),
                                 pure=True)
    values: np.ndarray = np.concatenate(CLUSTER.client.gather(futures))
    return values


def evolve(
    generations: int, population: int, seed: int, dims: int = 30, chunks: int = 8,
    noise: float = 0.01, *, state: dict[str, Any] | None = None,
) -> Generator[dict[str, Any], None, dict[str, Any]]:
    """The GA as a generator; every ``yield state`` is a checkpoint boundary."""
    if state is None:
        rng = np.random.default_rng(seed)
        pop = rng.uniform(-BOUND, BOUND, size=(population, dims))
        fitness = fitness_on_cluster(pop, rng, chunks, noise)
        best = int(np.argmin(fitness))
        state = {"generation": 0, "population": pop, "fitness": fitness, "rng": rng,
                 "best_solution": pop[best].copy(), "best_fitness": float(fitness[best])}
        CLUSTER.fresh = True
    CLUSTER.entered_at = state["generation"]
    while state["generation"] < generations:
        pop = next_population(state["population"], state["fitness"], state["rng"])
        fitness = fitness_on_cluster(pop, state["rng"], chunks, noise)  # gathered: plain data
        best = int(np.argmin(fitness))
        if fitness[best] < state["best_fitness"]:
            state["best_fitness"] = float(fitness[best])
            state["best_solution"] = pop[best].copy()
        state["population"], state["fitness"] = pop, fitness
        state["generation"] += 1
        yield state
        if state["generation"] == CLUSTER.crash_at:
            crash(state["generation"])
    return {"generations": state["generation"], "best_fitness": state["best_fitness"],
            "population_sha256": hashlib.sha256(state["population"].tobytes()).hexdigest()}


def crash(generation: int) -> None:
    """Simulate the driver's pod failing right after ``generation`` was yielded."""
    sig = signal.SIGKILL if CLUSTER.crash_mode == "kill" else signal.SIGTERM
    print(f"simulated driver failure at generation {generation}: {sig.name}", flush=True)
    os.kill(os.getpid(), sig)
    time.sleep(30)  # the SIGTERM handler raises in here
    os._exit(1)


def connect(stack: ExitStack, scheduler: str | None, workers: int) -> Any:
    from distributed import Client, LocalCluster

    if scheduler:
        return stack.enter_context(Client(scheduler))
    cluster = stack.enter_context(LocalCluster(n_workers=workers, threads_per_worker=1,
                                               processes=True, dashboard_address=":0"))
    return stack.enter_context(Client(cluster))


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--scheduler", default=os.environ.get("DASK_SCHEDULER_ADDRESS") or None,
                   metavar="ADDRESS", help="a running Dask scheduler, e.g. tcp://host:8786 "
                   "(default: $DASK_SCHEDULER_ADDRESS, else a LocalCluster)")
    p.add_argument("--workers", type=int, default=2,
                   help="worker processes of the LocalCluster (default: %(default)s)")
    p.add_argument("--generations", type=int, default=30, help="default: %(default)s")
    p.add_argument("--population", type=int, default=200, help="default: %(default)s")
    p.add_argument("--dims", type=int, default=30, help="default: %(default)s")
    p.add_argument("--chunks", type=int, default=8, help="tasks per generation "
                   "(default: %(default)s)")
    p.add_argument("--noise", type=float, default=0.01,
                   help="standard deviation of the seeded fitness noise (default: %(default)s)")
    p.add_argument("--seed", type=int, default=42, help="default: %(default)s")
    p.add_argument("--store", default=None, help="a folder, file:///abs/path or "
                   "s3://bucket/prefix (default: $RESUMABLE_STORE, else ./.resumable)")
    p.add_argument("--crash-at", type=int, metavar="N",
                   help="simulate a driver failure right after generation N")
    p.add_argument("--crash-mode", choices=("term", "kill"), default="kill",
                   help="kill: SIGKILL (default); term: SIGTERM, saved, exit 143")
    p.add_argument("--fresh", action="store_true", help="delete this run first")
    p.add_argument("--json-summary", action="store_true", help="print the result as JSON")
    p.add_argument("-q", "--quiet", action="store_true",
                   help="log warnings and errors only: resumable's INFO lines (start, "
                        "resume, finish) go, its warnings (the SIGTERM line) stay")
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    logging.basicConfig(level=logging.WARNING if args.quiet else logging.INFO,
                        format="[%(name)s] %(message)s")
    logging.getLogger("distributed").setLevel(logging.WARNING)
    CLUSTER.crash_at, CLUSTER.crash_mode = args.crash_at, args.crash_mode
    store = args.store or default_store_url()
    ga = checkpointed(every="generation", store=store)(evolve)
    params = {"generations": args.generations, "population": args.population,
              "seed": args.seed, "dims": args.dims, "chunks": args.chunks, "noise": args.noise}
    if args.fresh:
        ga.reset(**params)
    with ExitStack() as stack:
        CLUSTER.client = connect(stack, args.scheduler, args.workers)
        where = CLUSTER.client.scheduler.address
        print(f"run {ga.run_id(**params)} in {store}; fitness on {where}", flush=True)
        result = ga(**params)
    how = ("already complete: its stored result" if CLUSTER.entered_at is None
           else "started fresh" if CLUSTER.fresh
           else f"resumed from generation {CLUSTER.entered_at}")
    print(f"{how}; best fitness {result['best_fitness']!r}")
    if args.json_summary:
        print(json.dumps({**result, "best_fitness": float(result["best_fitness"]).hex(),
                          "resumed_from": CLUSTER.entered_at}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
