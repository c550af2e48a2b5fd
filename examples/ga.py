"""A genetic algorithm that survives the death of its process (the article's use case).

It minimises the 30-dimensional Rastrigin function with tournament selection, uniform
crossover and Gaussian mutation. Each generation is a checkpoint: kill the process
and start it again (what a Kubernetes Job does with a failed pod) and it continues
from the last saved generation, ending with the same best fitness, bit for bit, as a
run that was never interrupted.

    python examples/ga.py --crash-at 30 || python examples/ga.py --verify

--crash-at N simulates a pod failure at generation N. The default, --crash-mode term,
is what Kubernetes does to a preempted or evicted pod: SIGTERM. The library saves the
last generation and the process exits 143, so the next start resumes from N.
--crash-mode kill is an OOM kill or a lost node: SIGKILL, no chance to save. Checkpoints
are uploaded in the background, so the one for N (and, with slow storage, a few before
it) may be lost; the next start resumes from the newest one that was written.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import signal
import sys
import time
import uuid
from collections.abc import Generator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

try:
    from resumable import checkpointed
    from resumable.stores import default_store_url
except ImportError:  # run from a clone without `pip install -e .`
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
    from resumable import checkpointed
    from resumable.stores import default_store_url

BOUND = 5.12  # Rastrigin's usual search domain is [-5.12, 5.12] per dimension
ARTICLE_GENERATION_SECONDS = 10.0


def rastrigin(x: np.ndarray) -> np.ndarray:
    """Fitness of each row of ``x`` (lower is better; the optimum is 0 at the origin)."""
    total: np.ndarray = 10.0 * x.shape[-1] + np.sum(x * x - 10.0 * np.cos(2.0 * np.pi * x),
                                                    axis=-1)
    return total


def next_population(pop: np.ndarray, fitness: np.ndarray, rng: np.random.Generator,
                    elite: int = 2, tournament: int = 3, crossover: float = 0.9,
                    sigma: float = 0.3) -> np.ndarray:
    """One generation: elitism, tournament selection, uniform crossover, Gaussian mutation."""
    n, dims = pop.shape
    order = np.argsort(fitness, kind="stable")
    children = n - elite

    def select(count: int) -> np.ndarray:
        entrants = rng.integers(0, n, size=(count, tournament))
        winners = entrants[np.arange(count), np.argmin(fitness[entrants], axis=1)]
        chosen: np.ndarray = pop[winners]
        return chosen

    mothers, fathers = select(children), select(children)
    mask = rng.random((children, dims)) < 0.5
    offspring = np.where(mask, mothers, fathers)
    # Parents that skip crossover pass on unchanged, which keeps good building blocks.
    keep = rng.random(children) >= crossover
    offspring[keep] = mothers[keep]
    mutate = rng.random((children, dims)) < 1.0 / dims
    offspring = offspring + mutate * rng.normal(0.0, sigma, size=(children, dims))
    np.clip(offspring, -BOUND, BOUND, out=offspring)
    nxt: np.ndarray = np.concatenate([pop[order[:elite]], offspring])
    return nxt


@dataclass
class Demo:
    """Knobs of this demo that must not change the run's identity, so not arguments."""

    crash_at: int | None = None
    crash_mode: str = "term"
    gen_time: float = 0.0
    entered_at: int | None = None  # generation the body started from in this process
    ran: int = 0  # generations computed in this process


DEMO = Demo()


def evolve(
    generations: int, population: int, seed: int, dims: int = 30, *,
    state: dict[str, Any] | None = None,
) -> Generator[dict[str, Any], None, dict[str, Any]]:
    """The GA as a generator: every ``yield state`` is a checkpoint boundary."""
    if state is None:  # fresh start; on resume ``state`` is the last saved generation
        rng = np.random.default_rng(seed)
        pop = rng.uniform(-BOUND, BOUND, size=(population, dims))
        fitness = rastrigin(pop)
        best = int(np.argmin(fitness))
        state = {
            "generation": 0,
            "population": pop,
            "best_solution": pop[best].copy(),
            "best_fitness": float(fitness[best]),
            # The RNG travels with the state, so a resumed run draws the same numbers.
            "rng": rng,
            "seconds": 0.0,  # compute time spent on the saved generations, for "time saved"
        }
    DEMO.entered_at = state["generation"]
    while state["generation"] < generations:
        started = time.perf_counter()
        pop = state["population"]
        pop = next_population(pop, rastrigin(pop), state["rng"])
        fitness = rastrigin(pop)
        best = int(np.argmin(fitness))
        if fitness[best] < state["best_fitness"]:
            state["best_fitness"] = float(fitness[best])
            state["best_solution"] = pop[best].copy()
        state["population"] = pop
        state["generation"] += 1
        if DEMO.gen_time:
            time.sleep(DEMO.gen_time)  # stands in for an expensive fitness function
        state["seconds"] += time.perf_counter() - started
        DEMO.ran += 1
        if state["generation"] == DEMO.crash_at and DEMO.crash_mode == "term":
            crash(state["generation"])  # while generation N is under way: saved at its yield
        yield state
        if state["generation"] == DEMO.crash_at:
            crash(state["generation"])
    return {
        "generations": state["generation"],
        "best_fitness": state["best_fitness"],
        "best_solution": state["best_solution"],
        "seconds": state["seconds"],
    }


def crash(generation: int) -> None:
    """Simulate the pod failing at generation ``generation``.

    SIGKILL comes right after it was yielded; SIGTERM while it is under way (resumable
    lets it finish, saves it at the yield and exits 143).
    """
    if DEMO.crash_mode == "kill":
        print(f"simulated pod failure at generation {generation}: SIGKILL (OOM kill, node "
              "lost); a checkpoint still uploading is lost", flush=True)
        os.kill(os.getpid(), signal.SIGKILL)
    print(f"simulated pod failure at generation {generation}: SIGTERM (preemption, "
          "eviction); resumable saves the last generation and exits 143", flush=True)
    # The body is not interrupted: it runs to its yield, which is saved, then exits 143.
    os.kill(os.getpid(), signal.SIGTERM)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--generations", type=int, default=50, help="default: %(default)s")
    p.add_argument("--population", type=int, default=200, help="default: %(default)s")
    p.add_argument("--dims", type=int, default=30, help="default: %(default)s")
    p.add_argument("--seed", type=int, default=42, help="default: %(default)s")
    p.add_argument("--store", default=None,
                   help="where checkpoints go: a folder, file:///abs/path or s3://bucket/prefix "
                        "(default: $RESUMABLE_STORE, else ./.resumable)")
    p.add_argument("--crash-at", type=int, metavar="N",
                   help="simulate a pod failure at generation N (term: SIGTERM while generation "
                        "N is under way, so N is saved; kill: SIGKILL right after it)")
    p.add_argument("--crash-mode", choices=("term", "kill"), default="term",
                   help="term: SIGTERM, the last generation is saved, exit 143 (default); "
                        "kill: SIGKILL, checkpoints still uploading are lost")
    p.add_argument("--gen-time", type=float, default=0.0, metavar="SECONDS",
                   help="sleep this long per generation, like the article's 10 s generations")
    p.add_argument("--fresh", action="store_true",
                   help="delete this run's checkpoints and result first, and start over")
    p.add_argument("--verify", action="store_true",
                   help="also run the same GA uninterrupted in memory and compare")
    p.add_argument("--json-summary", action="store_true",
                   help="print the summary as one JSON line as well (for scripts and tests)")
    p.add_argument("-q", "--quiet", action="store_true",
                   help="log warnings and errors only: resumable's INFO lines (start, "
                        "resume, finish) go, its warnings (the SIGTERM line) stay")
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    logging.basicConfig(level=logging.WARNING if args.quiet else logging.INFO,
                        format="[%(name)s] %(message)s")
    DEMO.crash_at, DEMO.crash_mode, DEMO.gen_time = args.crash_at, args.crash_mode, args.gen_time
    store = args.store or default_store_url()
    # In your own code this is a plain `@checkpointed(...)` above `def evolve`; it is
    # applied here because the store is a command-line flag.
    ga = checkpointed(every="generation", store=store, progress="generations")(evolve)
    params = {"generations": args.generations, "population": args.population,
              "seed": args.seed, "dims": args.dims}

    if args.fresh:
        ga.reset(**params)
        print("--fresh: deleted the run's checkpoints and result")
    latest = ga.latest(**params)
    print(f"run {ga.run_id(**params)} in {store}")
    if latest is None:
        print(f"starting fresh: {args.generations} generations of {args.population}")
    elif latest.state["generation"] >= args.generations:
        print(f"found the checkpoint of the last generation ({latest.state['generation']}): "
              "the run is complete")
    else:
        age = time.time() - latest.created.timestamp()
        print(f"found a checkpoint of generation {latest.state['generation']} "
              f"(saved {age:.0f} s ago); resuming from it")

    wall = time.perf_counter()
    result = ga(**params)
    wall = time.perf_counter() - wall
    fitness = result["best_fitness"]

    if DEMO.entered_at is None:
        print("this run was already complete: its stored result was returned without running "
              "a generation (start over with --fresh)")
        skipped = result["generations"]
    else:
        skipped = DEMO.entered_at
        print(f"generations run in this process: {DEMO.ran}")
        print(f"generations skipped thanks to the checkpoint: {skipped}")
    saved = result["seconds"] * skipped / max(result["generations"], 1)
    print(f"time saved: {saved:.2f} s of computing here; with the article's "
          f"{ARTICLE_GENERATION_SECONDS:.0f} s generations, "
          f"{skipped * ARTICLE_GENERATION_SECONDS:.0f} s")
    print(f"best fitness: {fitness!r} (wall time {wall:.2f} s)")

    summary: dict[str, Any] = {"run_id": ga.run_id(**params), "best_fitness": fitness,
                               "resumed_from": DEMO.entered_at, "ran": DEMO.ran,
                               "skipped": skipped, "complete_before": DEMO.entered_at is None}
    if args.verify:
        DEMO.crash_at = None
        DEMO.gen_time = 0.0
        reference = checkpointed(store=f"memory://verify-{uuid.uuid4().hex}")(evolve)
        logging.getLogger("resumable").setLevel(logging.WARNING)
        expected = reference(**params)["best_fitness"]
        same = expected == fitness and repr(expected) == repr(fitness)
        print(f"uninterrupted run in memory: best fitness {expected!r}: "
              + ("identical, bit for bit" if same else "DIFFERENT"))
        summary["verified"] = same
        if not same:
            return 1
    if args.json_summary:
        print(json.dumps(summary))
    return 0


if __name__ == "__main__":
    sys.exit(main())
