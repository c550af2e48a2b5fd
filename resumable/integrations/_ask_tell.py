"""``ask_tell``: run any ask()/tell() optimizer resumably, one checkpoint per round."""

from __future__ import annotations

import ast
import logging
import sys
from collections.abc import Callable, Generator
from dataclasses import dataclass
from typing import Any

from .._errors import ConfigurationError, SerializationError
from ._common import (
    ADDRESS,
    Pristine,
    adopt,
    check_options,
    progress_option,
    run_checkpointed,
)

log = logging.getLogger("resumable")


@dataclass(frozen=True)
class _Adapter:
    """How one library asks, evaluates, tells, knows it is done and names its best."""

    name: str
    round: Callable[[Any, Callable[..., Any]], None]
    done: Callable[[Any], bool]
    best: Callable[[Any], dict[str, Any]]
    identity: Callable[[Any], Any]


def _module(obj: Any) -> str:
    return type(obj).__module__.split(".", 1)[0]


def _cma_round(es: Any, objective: Callable[..., Any]) -> None:
    solutions = es.ask()
    es.tell(solutions, [objective(x) for x in solutions])


def _cma_best(es: Any) -> dict[str, Any]:
    f = getattr(getattr(es, "best", None), "f", None)
    return {} if f is None else {"best": f}


def _ng_round(opt: Any, objective: Callable[..., Any]) -> None:
    candidate = opt.ask()
    opt.tell(candidate, objective(*candidate.args, **candidate.kwargs))


def _ng_best(opt: Any) -> dict[str, Any]:
    best = getattr(opt, "current_bests", {}).get("pessimistic")
    loss = getattr(best, "mean", None)
    return {} if loss is None else {"best": loss}


def _pymoo_round(algorithm: Any, objective: Callable[..., Any] | None) -> None:
    pop = algorithm.ask()
    if pop is None:  # an algorithm that does not ask for evaluations
        algorithm.tell()
        return
    if objective is None:
        algorithm.evaluator.eval(algorithm.problem, pop, algorithm=algorithm)
    else:
        from pymoo.core.evaluator import Evaluator
        from pymoo.problems.static import StaticProblem

        Evaluator().eval(StaticProblem(algorithm.problem, F=objective(pop.get("X"))), pop)
    algorithm.tell(infills=pop)


def _pymoo_best(algorithm: Any) -> dict[str, Any]:
    opt = getattr(algorithm, "opt", None)
    if opt is None or len(opt) == 0:
        return {}
    f = opt.get("F")
    return {"best": float(f.min())} if f.shape[1] == 1 else {"front": len(opt)}


def _pymoo_identity(algorithm: Any) -> Any:
    if getattr(algorithm, "problem", None) is None:
        raise ConfigurationError(
            f"ask_tell: the pymoo algorithm {type(algorithm).__name__} is not set up; call "
            "algorithm.setup(problem, termination=..., seed=...) first (or use "
            "resumable.integrations.pymoo.minimize)")
    skip = {"display", "output", "callback", "history", "start_time", "evaluator"}
    return {k: v for k, v in vars(algorithm).items() if k not in skip}


# Wall-clock and logging fields of pycma's es: not progress, and never equal twice.
_CMA_VOLATILE = frozenset({"logger", "timer", "time_last_displayed"})


def _cma_unseeded(es: Any) -> bool:
    """pycma chose the seed from the clock: a ``CMAEvolutionStrategy`` whose "seed" option
    (under any spelling pycma corrects, e.g. "Seed") is absent, or one pycma reads as the
    clock (None, 0, "time...", or a string of these), with numpy's randn drawing (else
    pycma seeds nothing). False when unsure (another pycma optimizer, an odd option): a
    warning only where it is right."""
    try:
        import numpy as np

        cma = sys.modules["cma"]
        if not isinstance(es, cma.CMAEvolutionStrategy) or not isinstance(es.inopts, dict):
            return False
        seed = cma.CMAOptions(dict(es.inopts)).get("seed")
        if isinstance(seed, str) and not seed.startswith("time"):
            try:  # pycma evaluates a string option: "0" and "None" are the clock too
                seed = ast.literal_eval(seed)
            except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
                return False  # an expression pycma evaluates ("np.nan"...): not told
        if isinstance(seed, str):
            clock = seed.startswith("time")
        else:
            clock = seed is None or (isinstance(seed, int | float) and seed == 0)
        randn = es.opts.get("randn", np.random.randn)
        return clock and randn in (np.random.randn, "np.random.randn")
    except Exception:  # (never a reason for the run to fail)
        return False


def _cma_identity(es: Any) -> Any:
    """A pycma es by its whole state (countiter, mean, sigma, C, archives...), so a second
    call on the same es continues it instead of finding the first call's run."""
    return {k: v for k, v in vars(es).items() if k not in _CMA_VOLATILE}




def _ng_identity(opt: Any) -> Any:
    """A nevergrad optimizer by value: its parameters carry random uids, so not vars()."""
    p = opt.parametrization
    identity = {
        "name": getattr(opt, "name", None), "budget": opt.budget,
        "num_workers": opt.num_workers, "asked": opt.num_ask, "told": opt.num_tell,
        # (nevergrad names a Choice of functions with their addresses: not those)
        "parametrization": ADDRESS.sub(">", p.name), "dimension": p.dimension,
        "value": p.value,
        # None until someone draws or seeds; then its state (the seed).
        "random_state": vars(p).get("_random_state"),
        "constraints": vars(p).get("_constraint_checkers")}
    if _ng_named(p) or _ng_array_steps(p):
        # A name given with set_name() replaces a parameter's description (its bounds,
        # its mutation) in the names above: two searches over Scalar(upper=1) and
        # Scalar(upper=5), both named "lr", shared one run (review 99). And an array of
        # mutation steps is in the description as numpy prints it, middle elided and 8
        # digits (review 102). Each parameter's own description and steps, whatever its
        # name; only then, so that the ids of the other runs stay as they were.
        identity["structure"] = _ng_structure(p)
    return identity


def _ng_children(p: Any) -> dict[Any, Any] | None:
    content = vars(p).get("_content") if hasattr(p, "__dict__") else None
    return content if isinstance(content, dict) else None


def _ng_named(p: Any) -> bool:
    """Whether a parameter of the tree has a name given with set_name()."""
    children = _ng_children(p)
    return bool(vars(p).get("_name")) or (
        children is not None and any(_ng_named(c) for c in children.values()))


def _ng_array_steps(p: Any) -> bool:
    """Whether a parameter of the tree has an array of mutation steps (set_mutation)."""
    children = _ng_children(p)
    if children is not None:
        return any(_ng_array_steps(c) for c in children.values())
    hyper = vars(p).get("parameters") if hasattr(p, "__dict__") else None
    content = _ng_children(hyper) if hyper is not None else None
    return any(getattr(getattr(c, "value", None), "ndim", 0) > 0
               for c in (content or {}).values())


def _ng_structure(p: Any) -> Any:
    """The parameter tree by each parameter's own description (not its set name)."""
    children = _ng_children(p)
    if children is not None:
        return (type(p).__name__, vars(p).get("_name"),
                {str(k): _ng_structure(c) for k, c in children.items()})
    # (its description names its mutation's kind, not its values: set_mutation(sigma=5)
    # and sigma=0.01 read alike, review 102)
    hyper = vars(p).get("parameters")
    content = _ng_children(hyper) if hyper is not None else None
    # (the values themselves, digested whole with the identity: an array's repr elides
    # its middle, review 103)
    values = {str(k): getattr(c, "value", None) for k, c in (content or {}).items()}
    return (ADDRESS.sub(">", p._get_name()), vars(p).get("_name"), values)


_ADAPTERS = {
    "cma": _Adapter("cma", _cma_round, lambda es: bool(es.stop()), _cma_best,
                    _cma_identity),
    "nevergrad": _Adapter("nevergrad", _ng_round, lambda opt: False, _ng_best,
                          lambda opt: _ng_identity(opt)),
    "pymoo": _Adapter("pymoo", _pymoo_round, lambda algo: not algo.has_next(), _pymoo_best,
                      _pymoo_identity),
}


def _generic_round(opt: Any, objective: Callable[..., Any]) -> None:
    x = opt.ask()
    opt.tell(x, objective(x))


_GENERIC = _Adapter("ask/tell", _generic_round, lambda opt: False, lambda opt: {},
                    lambda opt: opt)


def ask_tell(optimizer: Any, objective: Callable[..., Any] | None, budget: int | None,
             **options: Any) -> Any:
    """Drive ``optimizer`` for ``budget`` ask/tell rounds, each one a checkpoint.

    A round is one ``ask()``, the objective on what it returned, one ``tell()``:

    - pycma ``CMAEvolutionStrategy``: ``X = es.ask(); es.tell(X, [objective(x) for x in
      X])``, so a round is an iteration of ``popsize`` evaluations; it also ends when
      ``es.stop()`` is true. pycma draws from numpy's global RNG, saved with each
      checkpoint (``capture_rng``).
    - nevergrad optimizers: ``c = opt.ask(); opt.tell(c, objective(*c.args,
      **c.kwargs))``: one evaluation per round. Its RandomState lives in the
      parametrization, which is saved with the optimizer.
    - pymoo algorithms (after ``algorithm.setup(problem, termination=..., seed=...)``):
      ``pop = algorithm.ask()``, evaluated by the problem when ``objective`` is None or
      ``F = objective(pop.get("X"))``, then ``algorithm.tell(infills=pop)``: a round is a
      generation; it also ends when ``algorithm.has_next()`` is false. The default
      serializer is then ``"cloudpickle"`` (pymoo's GA holds local functions).
    - any other object: ``x = opt.ask(); opt.tell(x, objective(x))``.

    ``budget`` is the total number of rounds of the run, counted across restarts (None:
    until the optimizer stops by itself; pycma and pymoo only). Returns the optimizer,
    as the uninterrupted loop leaves it (the caller's object, updated in place).
    The keyword arguments are the ``@checkpointed`` options.
    """
    check_options("ask_tell", options)
    adapter = _ADAPTERS.get(_module(optimizer), _GENERIC)
    missing = [m for m in ("ask", "tell") if not callable(getattr(optimizer, m, None))]
    if missing:
        raise ConfigurationError(
            f"ask_tell: {type(optimizer).__name__} has no {'() or '.join(missing)}() "
            "method: give an ask/tell optimizer (a pycma CMAEvolutionStrategy, a nevergrad "
            "optimizer, a pymoo algorithm after algorithm.setup(problem, ...), or any "
            "object with ask() and tell(x, value))")
    if budget is None and adapter.name not in ("cma", "pymoo"):
        raise ConfigurationError(
            f"ask_tell: budget=None needs an optimizer that stops by itself (pycma, pymoo); "
            f"give {type(optimizer).__name__} a number of rounds")
    if budget is not None and (isinstance(budget, bool) or not isinstance(budget, int)
                               or budget < 0):
        raise ConfigurationError(f"ask_tell: budget must be an int >= 0 or None, got {budget!r}")
    if objective is None and adapter.name != "pymoo":
        raise ConfigurationError("ask_tell: objective=None works only for a pymoo algorithm "
                                 "(whose problem evaluates); pass the function to minimize")
    if adapter.name == "nevergrad":
        _refuse_recast(optimizer, options)
    if adapter.name == "pymoo":
        from .pymoo import PYMOO_SERIALIZER, refuse_unresumable

        refuse_unresumable(optimizer, "resumable.integrations.ask_tell")
        options.setdefault("serializer", PYMOO_SERIALIZER)
    progress_option(options, budget, lambda state: adapter.best(state["optimizer"]))

    pristine = Pristine(options)

    def body(state: dict[str, Any] | None) -> Generator[dict[str, Any], None, Any]:
        if state is None:
            if adapter.name == "cma" and _cma_unseeded(optimizer):
                log.warning(
                    "ask_tell: this CMAEvolutionStrategy has no fixed 'seed' option, so "
                    "pycma seeded it from the clock (seed=%s): a restarted process makes "
                    "another es, which is another run, and starts over instead of resuming "
                    "this one (under a fixed run_id= it fails with RunMismatchError). Give "
                    "it a fixed seed: "
                    "cma.CMAEvolutionStrategy(x0, sigma0, {'seed': 1})",
                    getattr(optimizer, "opts", {}).get("seed"))
            state = {"round": 0, "optimizer": pristine.fresh(optimizer)}
        opt = state["optimizer"]
        while (budget is None or state["round"] < budget) and not adapter.done(opt):
            adapter.round(opt, objective)  # type: ignore[arg-type]
            state["round"] += 1
            yield state
        return opt

    def identity() -> dict[str, Any]:
        return {"library": adapter.name, "class": type(optimizer),
                "optimizer": adapter.identity(optimizer), "objective": objective,
                "budget": budget}

    def ignorable(part: str) -> str | None:
        if part in ("budget", "objective"):  # the loop takes this call's: budget extends
            return None
        return ("a resumed run takes the optimizer from its checkpoint, so a new one would "
                "not be used; only budget and objective can be left out of the run's "
                "identity")

    try:
        final = run_checkpointed("resumable.integrations.ask_tell", identity, body, options,
                                 ignorable=ignorable)
    except BaseException as err:
        # A recast optimizer chosen inside a meta-optimizer (NGOpt picking Cobyla) runs its
        # library in a thread, which would keep the process from exiting once the save
        # failed (review 99: a pod hung); stopped whatever ended the run.
        if adapter.name == "nevergrad" and _stop_recast(optimizer) and isinstance(
                err, SerializationError):
            raise SerializationError(f"{err}. {_RECAST}") from err
        raise
    return adopt(optimizer, final)


_RECAST = ("nevergrad's optimizers that run a library in a background thread (the recast "
           "ones: scipy's BFGS, Powell, NelderMead, Cobyla...) cannot be pickled, with "
           "pickle or cloudpickle, so they cannot be resumed; choose one that can (CMA, "
           "OnePlusOne, DE, PSO, TwoPointsDE...)")


def _refuse_recast(optimizer: Any, options: dict[str, Any]) -> None:
    """Fail before the first ask, not at the first save with a thread left running."""
    from nevergrad.optimization.recaster import RecastOptimizer

    if isinstance(optimizer, RecastOptimizer):
        raise SerializationError(
            f"ask_tell: the nevergrad optimizer {optimizer.name} cannot be serialized with "
            f"serializer {options.get('serializer', 'pickle')!r} (nevergrad: \"If you want "
            f"picklability you should have asked for it\"). {_RECAST}")


def _stop_recast(optimizer: Any) -> bool:
    """Stop the background thread of a recast optimizer chosen inside a meta-optimizer;
    whether there was one."""
    stopped = False
    seen: set[int] = set()
    todo = [optimizer]
    while todo:
        opt = todo.pop()
        if id(opt) in seen:
            continue
        seen.add(id(opt))
        thread = getattr(opt, "_messaging_thread", None)
        if thread is not None:
            thread.stop()
            stopped = True
        inner = vars(opt).get("_optim") if hasattr(opt, "__dict__") else None
        if inner is not None:
            todo.append(inner)
    return stopped
