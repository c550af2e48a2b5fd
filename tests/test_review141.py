"""Review 141 (of 742a1b2): resumable.integrations.pymoo.minimize saved the caller's
problem in every checkpoint, though a resume always puts the caller's back. A problem
holding a database connection or a lock could not be checkpointed at all (a
SerializationError telling the user to keep it out of a state the integration builds),
and one holding 8 MB of data made every checkpoint 8 MB."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import numpy as np
import pytest

pytest.importorskip("pymoo")

from pymoo.algorithms.soo.nonconvex.ga import GA
from pymoo.core.callback import Callback
from pymoo.core.problem import ElementwiseProblem
from pymoo.optimize import minimize as pymoo_minimize

from resumable.integrations.pymoo import minimize


class Guarded(ElementwiseProblem):  # type: ignore[misc]
    """Evaluates under a lock (no serializer takes one) beside 8 MB of data."""

    def __init__(self) -> None:
        super().__init__(n_var=3, n_obj=1, xl=-1.0, xu=1.0)
        self.lock = threading.Lock()
        self.table = np.zeros(1 << 20)  # 8 MiB
        self.evaluations = 0

    def _evaluate(self, x: Any, out: Any, *args: Any, **kwargs: Any) -> None:
        with self.lock:
            self.evaluations += 1
        out["F"] = float(np.sum(x ** 2) + self.table[0])


class Crash(Exception):
    pass


CRASH_AT: dict[str, int | None] = {"n_gen": None}


class CrashAt(Callback):  # type: ignore[misc]
    def notify(self, algorithm: Any) -> None:
        if algorithm.n_gen == CRASH_AT["n_gen"]:
            raise Crash


def test_a_problem_no_serializer_takes_is_left_out_of_the_checkpoints(tmp_path: Path) -> None:
    reference = pymoo_minimize(Guarded(), GA(pop_size=10), ("n_gen", 8), seed=1)
    full_run = reference.problem.evaluations
    problem = Guarded()
    store = str(tmp_path / "store")
    CRASH_AT["n_gen"] = 5
    try:
        with pytest.raises(Crash):
            minimize(problem, GA(pop_size=10), ("n_gen", 8), seed=1, run_id="guarded",
                     ignore=("problem",), store=store, callback=CrashAt())
    finally:
        CRASH_AT["n_gen"] = None
    checkpoints = list((tmp_path / "store" / "guarded").glob("ckpt-*"))
    assert checkpoints and max(p.stat().st_size for p in checkpoints) < (1 << 20)
    before = problem.evaluations
    res = minimize(problem, GA(pop_size=10), ("n_gen", 8), seed=1, run_id="guarded",
                   ignore=("problem",), store=store, callback=CrashAt())
    assert res.problem is problem and res.algorithm.problem is problem
    assert problem.evaluations - before < full_run  # resumed, not run again from the start
    np.testing.assert_array_equal(res.X, reference.X)
    np.testing.assert_array_equal(res.F, reference.F)
    again = minimize(problem, GA(pop_size=10), ("n_gen", 8), seed=1, run_id="guarded",
                     ignore=("problem",), store=store, callback=CrashAt())  # (stored)
    assert again.problem is problem and again.algorithm.problem is problem
    np.testing.assert_array_equal(again.F, reference.F)
