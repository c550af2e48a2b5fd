"""pymoo's NSGA-II on ZDT1, resumable: ``minimize`` from ``resumable.integrations.pymoo``.

    python examples/pymoo_zdt1.py --crash-at 25 || python examples/pymoo_zdt1.py --verify

Same call as pymoo's ``minimize`` plus ``store=``. --crash-at N sends SIGTERM at the end
of generation N (from a pymoo Callback): the generation is saved and the process exits
143; --crash-mode kill is SIGKILL. The next start resumes; --verify runs pymoo's own
``minimize`` with the same seed and compares the Pareto front.
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
from pymoo.algorithms.moo.nsga2 import NSGA2
from pymoo.core.callback import Callback
from pymoo.optimize import minimize as pymoo_minimize
from pymoo.problems import get_problem

try:
    from resumable.integrations.pymoo import minimize
except ImportError:  # run from a clone without `pip install -e .`
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
    from resumable.integrations.pymoo import minimize

CRASH: dict[str, Any] = {"at": None, "mode": "term"}


class CrashAt(Callback):  # type: ignore[misc]
    """Simulates a pod failure at the end of generation CRASH["at"]."""

    def notify(self, algorithm: Any) -> None:
        if CRASH["at"] is not None and algorithm.n_iter == CRASH["at"]:
            how = "SIGKILL" if CRASH["mode"] == "kill" else "SIGTERM"
            print(f"simulated pod failure in generation {CRASH['at']}: {how}", flush=True)
            os.kill(os.getpid(), signal.SIGKILL if CRASH["mode"] == "kill" else signal.SIGTERM)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--generations", type=int, default=50)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--store", default=None, help="folder or s3://bucket/prefix "
                   "(default: $RESUMABLE_STORE, else ./.resumable)")
    p.add_argument("--crash-at", type=int, metavar="N", help="SIGTERM in generation N")
    p.add_argument("--crash-mode", choices=("term", "kill"), default="term")
    p.add_argument("--verify", action="store_true", help="compare with pymoo's own minimize")
    args = p.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="[%(name)s] %(message)s")
    CRASH["at"], CRASH["mode"] = args.crash_at, args.crash_mode

    problem = get_problem("zdt1")
    res = minimize(problem, NSGA2(pop_size=40), ("n_gen", args.generations), seed=args.seed,
                   callback=CrashAt(), store=args.store)
    print(f"generations: {res.algorithm.n_iter - 1}, Pareto front: {len(res.F)} points, "
          f"min f1 {float(res.F[:, 0].min())!r}, min f2 {float(res.F[:, 1].min())!r}")
    if args.verify:
        CRASH["at"] = None
        own = pymoo_minimize(problem, NSGA2(pop_size=40), ("n_gen", args.generations),
                             seed=args.seed)
        same = np.array_equal(own.F, res.F) and np.array_equal(own.X, res.X)
        print("pymoo's own minimize, same seed: " + ("identical" if same else "DIFFERENT"))
        return 0 if same else 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
