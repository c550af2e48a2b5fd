"""Integrations called again on the same optimizer continue it, as the plain loop does; the
run id follows numpy's global RNG; a misspelt resumable option is refused."""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from resumable.integrations import ask_tell
from tests.workers import integrations_worker as worker


def _sphere(x: Any) -> float:
    return float(np.sum(np.square(x)))


def test_ask_tell_twice_on_one_cma_es_continues(tmp_path: Path) -> None:
    """Two ask_tell(es, f, 3) calls on one pycma es run 6 iterations, like the plain loop."""
    import cma

    def make() -> Any:
        return cma.CMAEvolutionStrategy([1.0] * 3, 0.5, {"seed": 3, "verbose": -9})

    expected = make()
    for _ in range(6):
        solutions = expected.ask()
        expected.tell(solutions, [_sphere(x) for x in solutions])
    es = make()
    ask_tell(es, _sphere, 3, store=str(tmp_path))
    ask_tell(es, _sphere, 3, store=str(tmp_path))
    assert es.countiter == expected.countiter == 6
    assert np.array_equal(es.mean, expected.mean)
    # A fresh es with the same arguments is the first call's run again (stored, not rerun).
    again = make()
    ask_tell(again, _sphere, 3, store=str(tmp_path))
    assert again.countiter == 3 and len(list(tmp_path.iterdir())) == 2


def test_ask_tell_twice_on_one_nevergrad_optimizer_continues(tmp_path: Path) -> None:
    import nevergrad as ng

    def make() -> Any:
        opt = ng.optimizers.OnePlusOne(parametrization=3, budget=20)
        opt.parametrization.random_state.seed(5)
        return opt

    expected = make()
    for _ in range(8):
        c = expected.ask()
        expected.tell(c, _sphere(*c.args))
    opt = make()
    ask_tell(opt, _sphere, 4, store=str(tmp_path))
    ask_tell(opt, _sphere, 4, store=str(tmp_path))
    assert opt.num_tell == expected.num_tell == 8
    assert np.array_equal(opt.provide_recommendation().value,
                          expected.provide_recommendation().value)


def test_ask_tell_twice_on_one_pymoo_algorithm_continues(tmp_path: Path) -> None:
    from pymoo.algorithms.soo.nonconvex.ga import GA
    from pymoo.problems import get_problem

    def make() -> Any:
        algo = GA(pop_size=10)
        algo.setup(get_problem("sphere", n_var=3), termination=("n_gen", 20), seed=4)
        return algo

    expected = make()
    for _ in range(6):
        pop = expected.ask()
        expected.evaluator.eval(expected.problem, pop, algorithm=expected)
        expected.tell(infills=pop)
    algo = make()
    ask_tell(algo, None, 3, store=str(tmp_path))
    ask_tell(algo, None, 3, store=str(tmp_path))
    assert algo.n_gen == expected.n_gen
    assert np.array_equal(algo.pop.get("X"), expected.pop.get("X"))


def test_deap_run_id_follows_numpy_global_seed(tmp_path: Path) -> None:
    """A fitness that draws from numpy's global RNG: np.random.seed(1) and (2) are two runs."""
    from deap import algorithms

    from resumable.integrations.deap import ea_simple

    def noisy(ind: Any) -> tuple[float]:
        return (sum(ind) + float(np.random.normal()),)

    def go(np_seed: int, ours: bool) -> list[Any]:
        tb = worker._deap_toolbox()
        tb.register("evaluate", noisy)
        random.seed(1)
        np.random.seed(np_seed)
        pop = tb.population(n=10)
        if ours:
            pop, _ = ea_simple(pop, tb, 0.5, 0.2, 3, verbose=False, store=str(tmp_path))
        else:
            pop, _ = algorithms.eaSimple(pop, tb, 0.5, 0.2, 3, verbose=False)
        return [ind.fitness.values for ind in pop]

    assert go(1, True) == go(1, False)
    assert go(2, True) == go(2, False)


@pytest.mark.parametrize("typo, suggestion", [("stor", "store"), ("run_di", "run_id")])
def test_pymoo_minimize_refuses_a_misspelt_option(tmp_path: Path, typo: str,
                                                  suggestion: str) -> None:
    """pymoo's setup swallows unknown keywords; a near-miss of an option name is an error."""
    from pymoo.algorithms.soo.nonconvex.ga import GA
    from pymoo.problems import get_problem

    from resumable.integrations.pymoo import minimize

    with pytest.raises(TypeError, match=rf"{typo}=.*did you mean {suggestion}="):
        minimize(get_problem("sphere"), GA(pop_size=10), ("n_gen", 2), seed=1,
                 store=str(tmp_path), **{typo: "x"})
    assert not list(tmp_path.iterdir())
