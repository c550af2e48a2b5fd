"""pycma (and nevergrad) ask/tell loops, resumable: ``resumable.integrations.ask_tell``.

    python examples/cma_ask_tell.py --crash-at 30 || python examples/cma_ask_tell.py --verify
    python examples/cma_ask_tell.py --library nevergrad --crash-at 100 || \\
        python examples/cma_ask_tell.py --library nevergrad --verify

Minimises the 8-dimensional Rosenbrock function. ``ask_tell(optimizer, objective,
budget, store=...)`` replaces the ask/evaluate/tell loop; a round is cma's iteration of
popsize evaluations (a checkpoint each) or one nevergrad evaluation (a checkpoint every
20, ``every=20``). --crash-at N sends
SIGTERM during round N+1 (from the objective): the last round is saved and the process
exits 143; --crash-mode kill is SIGKILL. --verify runs the plain loop with the same seed.
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

try:
    from resumable.integrations import ask_tell
except ImportError:  # run from a clone without `pip install -e .`
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
    from resumable.integrations import ask_tell

CRASH: dict[str, Any] = {"at": None, "mode": "term", "evaluations": 0, "per_round": 1}


def rosenbrock(x: Any) -> float:
    CRASH["evaluations"] += 1
    if CRASH["at"] is not None and CRASH["evaluations"] == CRASH["at"] * CRASH["per_round"] + 1:
        how = "SIGKILL" if CRASH["mode"] == "kill" else "SIGTERM"
        print(f"simulated pod failure after round {CRASH['at']}: {how}", flush=True)
        os.kill(os.getpid(), signal.SIGKILL if CRASH["mode"] == "kill" else signal.SIGTERM)
    x = np.asarray(x)
    return float(np.sum(100.0 * (x[1:] - x[:-1] ** 2) ** 2 + (1 - x[:-1]) ** 2))


def make(library: str, seed: int) -> Any:
    if library == "cma":
        import cma

        return cma.CMAEvolutionStrategy(8 * [0.0], 0.5, {"seed": seed, "verbose": -9})
    import nevergrad as ng

    param = ng.p.Array(shape=(8,))
    param.random_state.seed(seed)
    return ng.optimizers.TwoPointsDE(parametrization=param, budget=100_000)


def plain_loop(optimizer: Any, library: str, rounds: int) -> None:
    """What ask_tell replaces."""
    for _ in range(rounds):
        if library == "cma":
            if optimizer.stop():
                break
            solutions = optimizer.ask()
            optimizer.tell(solutions, [rosenbrock(x) for x in solutions])
        else:
            candidate = optimizer.ask()
            optimizer.tell(candidate, rosenbrock(*candidate.args, **candidate.kwargs))


def best(optimizer: Any, library: str) -> tuple[float, np.ndarray]:
    if library == "cma":
        return float(optimizer.best.f), np.asarray(optimizer.best.x)
    x = optimizer.provide_recommendation().value
    return rosenbrock(x), x


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--library", choices=("cma", "nevergrad"), default="cma")
    p.add_argument("--rounds", type=int, default=None,
                   help="ask/tell rounds (default: 60 for cma, 400 for nevergrad)")
    p.add_argument("--seed", type=int, default=3)
    p.add_argument("--store", default=None, help="folder or s3://bucket/prefix "
                   "(default: $RESUMABLE_STORE, else ./.resumable)")
    p.add_argument("--crash-at", type=int, metavar="N", help="SIGTERM after round N")
    p.add_argument("--crash-mode", choices=("term", "kill"), default="term")
    p.add_argument("--verify", action="store_true", help="compare with the plain loop")
    args = p.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="[%(name)s] %(message)s")
    rounds = args.rounds or (60 if args.library == "cma" else 400)
    optimizer = make(args.library, args.seed)
    CRASH.update(at=args.crash_at, mode=args.crash_mode,
                 per_round=optimizer.popsize if args.library == "cma" else 1)

    # One nevergrad round is one cheap evaluation: a checkpoint every 20 rounds is plenty.
    every = 1 if args.library == "cma" else 20
    ask_tell(optimizer, rosenbrock, rounds, store=args.store, every=every)  # was: plain_loop
    f, x = best(optimizer, args.library)
    print(f"{args.library}: {rounds} rounds, best f {f!r}")
    if args.verify:
        CRASH["at"] = None
        own = make(args.library, args.seed)
        plain_loop(own, args.library, rounds)
        f2, x2 = best(own, args.library)
        same = f == f2 and np.array_equal(x, x2)
        print("the plain ask/tell loop, same seed: " + ("identical" if same else "DIFFERENT"))
        return 0 if same else 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
