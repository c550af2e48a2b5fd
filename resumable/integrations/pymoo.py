"""pymoo's ``minimize``, resumable: same signature, same ``Result``.

    from resumable.integrations.pymoo import minimize
    res = minimize(problem, NSGA2(pop_size=100), ("n_gen", 200), seed=1,
                   store="s3://bucket/moo-runs")

Each generation (``algorithm.next()``) is a checkpoint of the algorithm, which holds
pymoo's random generator (``algorithm.random_state``), its population, termination and
history. The loop is pymoo's ``minimize`` and ``Algorithm.run``; the keyword arguments
that are ``@checkpointed`` options (``store=``, ``run_id=``, ``every=``, ``progress=``...)
go to resumable, the others (``seed=``, ``verbose=``, ``callback=``, ``save_history=``...)
to ``algorithm.setup`` as in pymoo, except a near miss of an option name (``stor=``),
which is a ``TypeError`` naming the option meant. The default serializer is
``"cloudpickle"``: some of pymoo's operators (GA's mating) hold local functions that
pickle cannot save.
``progress=`` is resumable's bar (with the best
fitness); pymoo's own progress bar is not used.

The result equals pymoo's with the same seed whether or not the process died on the
way; ``res.problem`` is the problem passed in and a ``callback=`` object ends as the
uninterrupted run leaves it. The run id comes from the problem, the algorithm, the
termination and the setup arguments (seed included), described by value.
"""

from __future__ import annotations

import copy
import time
from collections.abc import Generator
from typing import Any

from .._errors import ConfigurationError
from ._common import (
    HeldRngs,
    Pristine,
    adopt,
    progress_option,
    refuse_near_misses,
    run_checkpointed,
    split_options,
)

__all__ = ["minimize"]

# Some of pymoo's own operators hold local functions (GA's mating, through its
# `default_random_state` decorator), which pickle cannot save; cloudpickle can.
PYMOO_SERIALIZER = "cloudpickle"

# Setup arguments that change what is shown, not what is computed.
_DISPLAY_ONLY = frozenset({"verbose", "display", "progress", "output"})


def _best(state: dict[str, Any]) -> dict[str, Any]:
    algorithm = state["algorithm"]
    opt = getattr(algorithm, "opt", None)
    if opt is None or len(opt) == 0:
        return {}
    f = opt.get("F")
    items: dict[str, Any] = {"gen": algorithm.n_iter - 1}
    if f.shape[1] == 1:
        items["best"] = float(f.min())
    else:
        items["front"] = len(opt)
    return items


class _CallersProblem:
    """Where a checkpoint's algorithm held the problem: the caller's, put back on resume."""

    def __repr__(self) -> str:
        return "<the caller's problem>"


CALLERS_PROBLEM = _CallersProblem()


def minimize(problem: Any, algorithm: Any, termination: Any = None,
             copy_algorithm: bool = True, copy_termination: bool = True,
             **kwargs: Any) -> Any:
    """``pymoo.optimize.minimize``, one checkpoint per generation."""
    options, setup = split_options(kwargs)
    refuse_near_misses("resumable.integrations.pymoo.minimize", setup)
    refuse_unresumable(algorithm)
    options.setdefault("serializer", PYMOO_SERIALIZER)
    total = None
    if isinstance(termination, tuple) and len(termination) == 2 and termination[0] == "n_gen":
        total = termination[1]
    progress_option(options, total, _best)
    callback = setup.get("callback")
    pristine = Pristine(options if not copy_algorithm else {})
    # The problem is the caller's, not the checkpoint's: its own RNGs (self.rng) are
    # saved with each checkpoint and restored in place
    held = HeldRngs({"problem": problem})

    def body(state: dict[str, Any] | None) -> Generator[dict[str, Any], None, Any]:
        if state is None:
            algo = copy.deepcopy(algorithm) if copy_algorithm else pristine.fresh(algorithm)
            if algo.problem is None:
                args = dict(setup)
                if termination is not None:
                    args["termination"] = (copy.deepcopy(termination) if copy_termination
                                           else termination)
                algo.setup(problem, **args)
            state = {"algorithm": algo}
            held.attach(state)
        else:
            algo = state["algorithm"]
            _reattach(algo, problem, callback)
            held.resume(state)
            if "elapsed" in state and isinstance(getattr(algo, "start_time", None), float):
                # The time the run has had, not the time since it first started: pymoo's
                # ("time", s) termination would count the time the process was down.
                algo.start_time = time.time() - state["elapsed"]
        while algo.has_next():
            algo.next()
            if isinstance(getattr(algo, "start_time", None), float):
                state["elapsed"] = time.time() - algo.start_time
            # Saved without the caller's problem, which a resume never takes from the
            # checkpoint (_reattach): one holding a database connection or a lock could
            # not be saved at all, and one holding 8 MB of data was 8 MB in every
            # checkpoint (review 141)
            algo.problem = CALLERS_PROBLEM
            try:
                yield state
            finally:
                algo.problem = problem
        res = algo.result()
        res.algorithm = algo
        res.problem = algo.problem = CALLERS_PROBLEM  # (the result record's: minimize's)
        return res

    def identity() -> dict[str, Any]:
        already = getattr(algorithm, "problem", None) is not None
        skip = {"display", "output", "callback", "history", "start_time"} if already else set()
        return {
            "problem": problem,
            "algorithm": (type(algorithm),
                          {k: v for k, v in vars(algorithm).items() if k not in skip}),
            "termination": termination,
            "copy": (copy_algorithm, copy_termination),
            "setup": {k: v for k, v in setup.items() if k not in _DISPLAY_ONLY},
        }

    res = run_checkpointed(
        "resumable.integrations.pymoo.minimize", identity, body, options,
        ignorable=lambda part: None if part == "problem" else (
            "a resumed run takes the algorithm, with its termination and setup, from its "
            "checkpoint, so a new value would not be used; only problem (the caller's is "
            "always used) can be left out of the run's identity"))
    if not copy_algorithm:  # pymoo then works on (and leaves) the caller's algorithm
        res.algorithm = adopt(algorithm, res.algorithm)
    _reattach(res.algorithm, problem, callback)
    res.problem = problem
    return res


def refuse_unresumable(algorithm: Any,
                       caller: str = "resumable.integrations.pymoo.minimize") -> None:
    """A ConfigurationError, before anything runs, for the pymoo algorithms whose state a
    checkpoint cannot hold (review 99):

    - ``CMAES`` (and ``BIPOPCMAES``) drops its running ``cma`` search when pickled
      (``CMAES.__getstate__`` pops ``es``): resumed, it stopped two generations later and
      that short result was stored as the run's;
    - the algorithms driven by a Python generator (``LoopwiseAlgorithm._advance``:
      ``MOEAD``, ``NelderMead``, ``PatternSearch``, ``G3PCX``) failed at their second or
      third checkpoint, with advice meant for a hand-written loop.
    """
    from pymoo.core.algorithm import LoopwiseAlgorithm

    try:
        from pymoo.algorithms.soo.nonconvex.cmaes import CMAES
    except ImportError:  # pragma: no cover - pymoo without cma
        CMAES = ()
    name = type(algorithm).__name__
    if isinstance(algorithm, CMAES):
        why = ("it drops its running cma.CMAEvolutionStrategy when pickled "
               "(CMAES.__getstate__), so a resumed run would stop at once with a wrong result")
    elif (isinstance(algorithm, LoopwiseAlgorithm)
          and type(algorithm)._advance is LoopwiseAlgorithm._advance):
        why = ("it runs as a Python generator (pymoo's LoopwiseAlgorithm), which no "
               "serializer can save")
    else:
        return
    raise ConfigurationError(
        f"{caller}: pymoo's {name} cannot be checkpointed: "
        f"{why}. Use an algorithm whose state pickles (GA, DE, NSGA2, NSGA3, PSO, "
        "SimpleCMAES), or cma's own CMAEvolutionStrategy through "
        "resumable.integrations.ask_tell")


def _reattach(algorithm: Any, problem: Any, callback: Any) -> None:
    """A restored algorithm works on the caller's problem and reports to its callback."""
    if getattr(algorithm, "problem", None) is not None:
        algorithm.problem = problem
    if callback is not None and getattr(algorithm, "callback", None) is not None:
        algorithm.callback = adopt(callback, algorithm.callback)
