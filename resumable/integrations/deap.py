"""DEAP's ``eaSimple``, ``eaMuPlusLambda`` and ``eaMuCommaLambda``, resumable.

Same arguments in the same order, same defaults, same return value ``(population,
logbook)``, and the same result as DEAP's function with the same seed, whether or not the
process died on the way: each generation is a checkpoint holding the population, the
logbook and the hall of fame, and DEAP's random numbers (the global ``random``) are
saved with it (``capture_rng``). The loops below are DEAP 1.4's, statement for statement;
only the ``yield`` is new. Extra keyword arguments are the ``@checkpointed`` options::

    from resumable.integrations.deap import ea_simple
    pop, log = ea_simple(pop, toolbox, cxpb=0.5, mutpb=0.2, ngen=40, stats=stats,
                         halloffame=hof, store="s3://bucket/ga-runs")

The run id comes from the initial population, the state of ``random`` at the call (the
seed), the toolbox's operators (functions by name and code, with their registered
arguments), the probabilities, sizes, ``stats`` and the hall of fame; a part that has no
stable value (an object without attributes, say) needs ``run_id=``. numpy's global seed
is a part too when ``np.random.seed(n)`` set it and nothing has drawn from it since (a
fitness may draw from it): an unseeded numpy is left out, since its state is new in every
process and a restarted one would not find its run.
"""

from __future__ import annotations

import random
from collections.abc import Generator
from typing import Any

from . import missing_library

try:
    from deap import algorithms, tools
except ModuleNotFoundError as err:
    raise missing_library(err, "deap", "deap") from None

from ._common import (
    HeldRngs,
    Pristine,
    adopt,
    check_options,
    progress_option,
    run_checkpointed,
)

__all__ = ["ea_mu_comma_lambda", "ea_mu_plus_lambda", "ea_simple"]


def _best(state: dict[str, Any]) -> dict[str, Any]:
    """The progress bar's items: DEAP's best fitness (the hall of fame's, else the population's)."""
    hof = state.get("halloffame")
    pool = list(hof) if hof else [i for i in state["population"] if i.fitness.valid]
    if not pool:
        return {}
    values = max(ind.fitness for ind in pool).values
    return {"best": values[0] if len(values) == 1 else values}


def _evaluate(population: list[Any], toolbox: Any) -> int:
    """DEAP's "Evaluate the individuals with an invalid fitness" block."""
    invalid_ind = [ind for ind in population if not ind.fitness.valid]
    fitnesses = toolbox.map(toolbox.evaluate, invalid_ind)
    for ind, fit in zip(invalid_ind, fitnesses, strict=False):
        ind.fitness.values = fit
    return len(invalid_ind)


def _fresh(pristine: Pristine, population: list[Any], halloffame: Any) -> None:
    """At a fresh start: the population and hall of fame as the caller passed them."""
    items, hof = pristine.fresh((list(population), halloffame))
    population[:] = items
    if halloffame is not None:
        adopt(halloffame, hof)


def _run(name: str, population: list[Any], halloffame: Any, identity: dict[str, Any],
         body: Any, options: dict[str, Any], ngen: int,
         held: HeldRngs) -> tuple[list[Any], Any]:
    check_options(name, options)
    progress_option(options, ngen + 1, _best)

    def parts() -> dict[str, Any]:
        # (not the states of the global generators the RNG search finds: an unseeded one,
        # or one seeded from the PID, would give every restart a new run, review 104)
        return {**identity, "population": population, "halloffame": halloffame,
                "random": random.getstate()}

    final = run_checkpointed(f"resumable.integrations.deap.{name}", parts, body, options)
    # A completed run returned from the store: its RNGs as the run left them, as
    # `random` is (review 103)
    held.resume(final)
    # A resumed (or completed) run's objects are copies: hand them back in the caller's.
    population[:] = final["population"]
    if halloffame is not None:
        adopt(halloffame, final["halloffame"])
    return population, final["logbook"]


def _resume(state: dict[str, Any], population: list[Any], halloffame: Any) -> None:
    """Put a saved generation into the caller's population and hall of fame."""
    population[:] = state["population"]
    state["population"] = population
    if halloffame is not None:
        state["halloffame"] = adopt(halloffame, state["halloffame"])


def ea_simple(population: list[Any], toolbox: Any, cxpb: float, mutpb: float, ngen: int,
              stats: Any = None, halloffame: Any = None, verbose: bool = __debug__,
              **options: Any) -> tuple[list[Any], Any]:
    """``deap.algorithms.eaSimple``, one checkpoint per generation (generation 0 included)."""
    pristine = Pristine(options)
    held = HeldRngs({"toolbox": toolbox})  # (an operator's own rng=: saved, restored)

    def body(state: dict[str, Any] | None) -> Generator[dict[str, Any], None, dict[str, Any]]:
        if state is None:
            _fresh(pristine, population, halloffame)
            logbook = tools.Logbook()
            logbook.header = ['gen', 'nevals'] + (stats.fields if stats else [])
            nevals = _evaluate(population, toolbox)
            if halloffame is not None:
                halloffame.update(population)
            record = stats.compile(population) if stats else {}
            logbook.record(gen=0, nevals=nevals, **record)
            if verbose:
                print(logbook.stream)
            state = {"gen": 0, "population": population, "logbook": logbook,
                     "halloffame": halloffame}
            held.attach(state)
            yield state
        else:
            _resume(state, population, halloffame)
            held.resume(state)
            logbook = state["logbook"]
        for gen in range(state["gen"] + 1, ngen + 1):
            offspring = toolbox.select(population, len(population))
            offspring = algorithms.varAnd(offspring, toolbox, cxpb, mutpb)
            nevals = _evaluate(offspring, toolbox)
            if halloffame is not None:
                halloffame.update(offspring)
            population[:] = offspring
            record = stats.compile(population) if stats else {}
            logbook.record(gen=gen, nevals=nevals, **record)
            if verbose:
                print(logbook.stream)
            state["gen"] = gen
            yield state
        return state

    identity = {"algorithm": "eaSimple", "toolbox": toolbox, "cxpb": cxpb, "mutpb": mutpb,
                "ngen": ngen, "stats": stats}
    return _run("ea_simple", population, halloffame, identity, body, options, ngen, held)


def _mu_lambda(name: str, plus: bool, population: list[Any], toolbox: Any, mu: int,
               lambda_: int, cxpb: float, mutpb: float, ngen: int, stats: Any,
               halloffame: Any, verbose: bool, options: dict[str, Any]
               ) -> tuple[list[Any], Any]:
    pristine = Pristine(options)
    held = HeldRngs({"toolbox": toolbox})  # (an operator's own rng=: saved, restored)

    def body(state: dict[str, Any] | None) -> Generator[dict[str, Any], None, dict[str, Any]]:
        if state is None:
            _fresh(pristine, population, halloffame)
            logbook = tools.Logbook()
            logbook.header = ['gen', 'nevals'] + (stats.fields if stats else [])
            nevals = _evaluate(population, toolbox)
            if halloffame is not None:
                halloffame.update(population)
            record = stats.compile(population) if stats is not None else {}
            logbook.record(gen=0, nevals=nevals, **record)
            if verbose:
                print(logbook.stream)
            state = {"gen": 0, "population": population, "logbook": logbook,
                     "halloffame": halloffame}
            held.attach(state)
            yield state
        else:
            _resume(state, population, halloffame)
            held.resume(state)
            logbook = state["logbook"]
        for gen in range(state["gen"] + 1, ngen + 1):
            offspring = algorithms.varOr(population, toolbox, lambda_, cxpb, mutpb)
            nevals = _evaluate(offspring, toolbox)
            if halloffame is not None:
                halloffame.update(offspring)
            pool = population + offspring if plus else offspring
            population[:] = toolbox.select(pool, mu)
            record = stats.compile(population) if stats is not None else {}
            logbook.record(gen=gen, nevals=nevals, **record)
            if verbose:
                print(logbook.stream)
            state["gen"] = gen
            yield state
        return state

    identity = {"algorithm": name, "toolbox": toolbox, "mu": mu, "lambda": lambda_,
                "cxpb": cxpb, "mutpb": mutpb, "ngen": ngen, "stats": stats}
    return _run(name, population, halloffame, identity, body, options, ngen, held)


def ea_mu_plus_lambda(population: list[Any], toolbox: Any, mu: int, lambda_: int,
                      cxpb: float, mutpb: float, ngen: int, stats: Any = None,
                      halloffame: Any = None, verbose: bool = __debug__,
                      **options: Any) -> tuple[list[Any], Any]:
    """``deap.algorithms.eaMuPlusLambda``, one checkpoint per generation."""
    return _mu_lambda("ea_mu_plus_lambda", True, population, toolbox, mu, lambda_, cxpb,
                      mutpb, ngen, stats, halloffame, verbose, options)


def ea_mu_comma_lambda(population: list[Any], toolbox: Any, mu: int, lambda_: int,
                       cxpb: float, mutpb: float, ngen: int, stats: Any = None,
                       halloffame: Any = None, verbose: bool = __debug__,
                       **options: Any) -> tuple[list[Any], Any]:
    """``deap.algorithms.eaMuCommaLambda``, one checkpoint per generation."""
    assert lambda_ >= mu, "lambda must be greater or equal to mu."
    return _mu_lambda("ea_mu_comma_lambda", False, population, toolbox, mu, lambda_, cxpb,
                      mutpb, ngen, stats, halloffame, verbose, options)
