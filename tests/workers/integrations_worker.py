"""Each integration on a small problem, as a real process the tests kill.

    python integrations_worker.py LIB STORE [--block-at N] [--reference]

LIB is deap, pygad, pymoo, cma or nevergrad (variants: deap-plus, deap-comma; deap-pool, whose
toolbox.map is a multiprocessing pool's, named with run_id="deap-pool", blocking at the N-th
map call, one per generation; pygad-thread, with ``parallel_processing=["thread", 2]``).
Prints ``RESULT <sha256>`` of everything the
call returned (population, fitness, histories...). With ``--block-at N`` the objective
(DEAP's evaluate, PyGAD's fitness function, pymoo's callback, cma's and nevergrad's
objective) prints ``BLOCKED`` at its N-th call and waits there for a signal: a SIGTERM
lets it go on (the library saves at the next generation boundary and exits 143); a
SIGKILL ends it; a SIGUSR1 lets it go on as if it had not blocked. ``--reference`` runs
the library's own call instead (no resumable).
The same functions serve the in-process tests through ``reference()`` and ``resumable()``.
"""

from __future__ import annotations

import argparse
import hashlib
import random
import signal
import sys
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

LIBS = ("deap", "pygad", "pymoo", "cma", "nevergrad")


class _Blocker:
    """Counts objective calls; at the chosen one, reports and waits for a signal."""

    def __init__(self) -> None:
        self.at: int | None = None
        self.calls = 0
        self.signalled = False
        self.lock = threading.Lock()  # PyGAD's parallel_processing calls from threads

    # pymoo's checkpoints hold the callback that ticks, and cloudpickle saves this
    # __main__ object with it: without its lock, which cannot be pickled.
    def __getstate__(self) -> dict[str, Any]:
        return {k: v for k, v in vars(self).items() if k != "lock"}

    def __setstate__(self, state: dict[str, Any]) -> None:
        vars(self).update(state)
        self.lock = threading.Lock()

    def tick(self) -> None:
        with self.lock:
            self.calls += 1
            calls = self.calls
        if calls != self.at:
            return
        print("BLOCKED", flush=True)
        # SIGKILL ends this. After a SIGTERM the objective returns, as a real one would
        # once its work is done: the generation finishes and resumable saves it (the
        # library chains the script's own handler, which sets the flag, only after that
        # save). Without resumable's handler (the references) the flag ends it.
        while not self.signalled and not _terminating():
            time.sleep(0.01)


def _terminating() -> bool:
    signals = sys.modules.get("resumable._signals")
    return signals is not None and signals.terminating()


BLOCK = _Blocker()


def _canonical(obj: Any, out: list[bytes]) -> None:
    """Values only: equal results give equal bytes however their objects are shared."""
    if isinstance(obj, (np.ndarray, np.generic)):
        arr = np.asarray(obj)
        if arr.dtype.hasobject:
            out.append(f"objarray{arr.shape}".encode())
            for item in arr.ravel():
                _canonical(item, out)
        else:
            out.append(f"array{arr.dtype.str}{arr.shape}".encode() + arr.tobytes())
    elif isinstance(obj, (list, tuple)):
        out.append(f"seq{len(obj)}[".encode())
        for item in obj:
            _canonical(item, out)
        out.append(b"]")
    elif isinstance(obj, dict):
        out.append(f"map{len(obj)}{{".encode())
        for key in sorted(obj, key=repr):
            _canonical(key, out)
            _canonical(obj[key], out)
        out.append(b"}")
    elif isinstance(obj, float):
        out.append(b"f" + float(obj).hex().encode())
    else:
        out.append(f"{type(obj).__name__}:{obj!r}".encode())


def digest(*parts: Any) -> str:
    out: list[bytes] = []
    _canonical(parts, out)
    return hashlib.sha256(b"|".join(out)).hexdigest()


# -- DEAP -----------------------------------------------------------------------------

def _deap_toolbox() -> Any:
    from deap import base, creator, tools

    if not hasattr(creator, "MaxFitness"):
        creator.create("MaxFitness", base.Fitness, weights=(1.0,))
        creator.create("BitString", list, fitness=creator.MaxFitness)
    tb = base.Toolbox()
    tb.register("attr_bool", random.randint, 0, 1)
    tb.register("individual", tools.initRepeat, creator.BitString, tb.attr_bool, 24)
    tb.register("population", tools.initRepeat, list, tb.individual)
    tb.register("evaluate", onemax)
    tb.register("mate", tools.cxTwoPoint)
    tb.register("mutate", tools.mutFlipBit, indpb=0.05)
    tb.register("select", tools.selTournament, tournsize=3)
    return tb


def onemax(individual: list[int]) -> tuple[int]:
    BLOCK.tick()
    return (sum(individual),)


def _deap_stats() -> Any:
    from deap import tools

    stats = tools.Statistics(lambda ind: ind.fitness.values)
    stats.register("avg", np.mean)
    stats.register("max", np.max)
    return stats


def pool_map(pool: Any, func: Any, items: Any) -> list[Any]:
    """DEAP's toolbox.map on a multiprocessing pool; the blocker counts generations here."""
    BLOCK.tick()
    return pool.map(func, items)


def _deap_evaluate(individual: list[int]) -> tuple[int]:
    return (sum(individual),)


def _deap(algorithm: str, options: dict[str, Any] | None) -> str:
    tb = _deap_toolbox()
    if algorithm == "pool":  # a pool has no stable value: the run is named with run_id=
        import multiprocessing

        pool = multiprocessing.get_context("fork").Pool(2)
        tb.register("map", pool_map, pool)
        tb.register("evaluate", _deap_evaluate)  # the blocker counts map calls, not these
        if options is not None:
            options = {"run_id": "deap-pool", **options}
        try:
            result = _deap_with(tb, "simple", options)
        except BaseException:
            # Stopped (resumable's exit 143 after a SIGTERM, say): abort the pool. This may
            # hang (a worker the group's SIGTERM killed holding the pool's queue lock; one
            # that main()'s on_term, inherited at the fork, keeps alive): resumable's exit
            # guard must still end the process.
            pool.terminate()
            pool.join()
            raise
        # Done: close() and join(), not terminate(). terminate() takes the task queue's
        # lock for good (Pool._help_stuff_finish) and relies on SIGTERM to end the
        # workers still waiting for it; ours run main()'s on_term, which returns, so
        # one that lost that lock race waited for ever and so did join() (CPython's,
        # with or without resumable). close() sends each worker its end-of-work sentinel.
        pool.close()
        pool.join()
        return result
    return _deap_with(tb, algorithm, options)


def _deap_with(tb: Any, algorithm: str, options: dict[str, Any] | None) -> str:
    from deap import algorithms, tools

    from resumable.integrations import deap as rdeap

    random.seed(12)
    pop = tb.population(n=16)
    hof = tools.HallOfFame(3)
    own, ours, extra = {
        "simple": (algorithms.eaSimple, rdeap.ea_simple, (0.5, 0.2, 8)),
        "plus": (algorithms.eaMuPlusLambda, rdeap.ea_mu_plus_lambda, (12, 20, 0.5, 0.3, 8)),
        "comma": (algorithms.eaMuCommaLambda, rdeap.ea_mu_comma_lambda, (12, 20, 0.5, 0.3, 8)),
    }[algorithm]
    if options is None:
        out, log = own(pop, tb, *extra, stats=_deap_stats(), halloffame=hof, verbose=False)
    else:
        out, log = ours(pop, tb, *extra, stats=_deap_stats(), halloffame=hof, verbose=False,
                        **options)
        assert out is pop
    return digest([list(i) for i in out], [i.fitness.values for i in out], list(log),
                  [list(i) for i in hof], [i.fitness.values for i in hof])


# -- PyGAD ----------------------------------------------------------------------------

GENERATIONS_SEEN: list[int] = []


def sphere_fitness(ga: Any, solution: Any, index: Any) -> float:
    BLOCK.tick()
    return -float(np.sum((solution - 0.25) ** 2))


def on_generation(ga: Any) -> None:
    GENERATIONS_SEEN.append(ga.generations_completed)


def _pygad_instance(parallel: str = "") -> Any:
    import pygad

    extra = {"parallel_processing": [parallel, 2]} if parallel else {}
    return pygad.GA(num_generations=8, num_parents_mating=4, fitness_func=sphere_fitness,
                    sol_per_pop=8, num_genes=4, random_seed=5, suppress_warnings=True,
                    on_generation=on_generation, save_solutions=True, keep_elitism=1,
                    **extra)


def _pygad_digest(ga: Any) -> str:
    solution, fitness, index = ga.best_solution()
    return digest(ga.population, solution, fitness, index, list(ga.best_solutions_fitness),
                  ga.best_solutions, [np.asarray(s) for s in ga.solutions],
                  list(ga.solutions_fitness), ga.generations_completed, ga.run_completed,
                  ga.last_generation_fitness, ga.numpy_random_generator.get_state()[1],
                  ga.python_random_generator.getstate())


def _pygad(options: dict[str, Any] | None, parallel: str = "") -> str:
    from resumable.integrations import pygad as rpygad

    ga = _pygad_instance(parallel)
    if options is None:
        ga.run()
    else:
        assert rpygad.run(ga, **options) is ga
    return _pygad_digest(ga)


# -- pymoo ----------------------------------------------------------------------------

def front_callback() -> Any:
    """A pymoo Callback (a module-level class, so pickle can save it) that records sizes."""
    from pymoo.core.callback import Callback

    global Front
    if Front is None:
        class _Front(Callback):  # type: ignore[misc]
            def notify(self, algorithm: Any) -> None:
                BLOCK.tick()
                self.data.setdefault("sizes", []).append(len(algorithm.opt))

        _Front.__qualname__ = _Front.__name__ = "Front"
        Front = _Front
    return Front()


Front: Any = None


def _pymoo(options: dict[str, Any] | None) -> str:
    from pymoo.algorithms.moo.nsga2 import NSGA2
    from pymoo.optimize import minimize
    from pymoo.problems import get_problem

    from resumable.integrations.pymoo import minimize as rminimize

    problem = get_problem("zdt1", n_var=5)
    callback = front_callback()
    call = minimize if options is None else rminimize
    res = call(problem, NSGA2(pop_size=12), ("n_gen", 8), seed=3, callback=callback,
               **(options or {}))
    assert res.problem is problem
    return digest(res.X, res.F, res.pop.get("X"), res.pop.get("F"), res.algorithm.n_gen,
                  callback.data, res.algorithm.random_state.bit_generator.state)


# -- ask/tell: pycma and nevergrad ----------------------------------------------------

def shifted_sphere(x: Any) -> float:
    BLOCK.tick()
    return float(np.sum((np.asarray(x) - 0.3) ** 2))


def _cma(options: dict[str, Any] | None) -> str:
    import cma

    from resumable.integrations import ask_tell

    es = cma.CMAEvolutionStrategy([1.0] * 3, 0.5, {"seed": 5, "verbose": -9})
    if options is None:
        for _ in range(8):
            if es.stop():
                break
            solutions = es.ask()
            es.tell(solutions, [shifted_sphere(x) for x in solutions])
    else:
        assert ask_tell(es, shifted_sphere, 8, **options) is es
    return digest(es.mean, es.sigma, es.best.x, es.best.f, es.countevals, es.countiter)


def _nevergrad(options: dict[str, Any] | None) -> str:
    import nevergrad as ng

    from resumable.integrations import ask_tell

    param = ng.p.Array(shape=(3,))
    param.random_state.seed(11)
    opt = ng.optimizers.TwoPointsDE(parametrization=param, budget=24)
    if options is None:
        for _ in range(24):
            candidate = opt.ask()
            opt.tell(candidate, shifted_sphere(*candidate.args, **candidate.kwargs))
    else:
        assert ask_tell(opt, shifted_sphere, 24, **options) is opt
    return digest(opt.provide_recommendation().value, opt.num_tell, opt.num_ask,
                  opt.parametrization.random_state.get_state()[1])


def run(lib: str, options: dict[str, Any] | None) -> str:
    """The digest of ``lib``'s small run: the library's own (``options=None``) or resumable."""
    if lib.startswith("deap"):
        return _deap(lib.partition("-")[2] or "simple", options)
    if lib.startswith("pygad-"):  # pygad-thread: parallel_processing=["thread", 2]
        return _pygad(options, lib.partition("-")[2])
    return {"pygad": _pygad, "pymoo": _pymoo, "cma": _cma, "nevergrad": _nevergrad}[lib](options)


def reference(lib: str) -> str:
    BLOCK.at, BLOCK.calls = None, 0
    return run(lib, None)


def resumable(lib: str, store: str, **options: Any) -> str:
    BLOCK.at, BLOCK.calls = None, 0
    return run(lib, {"store": store, **options})


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("lib")
    p.add_argument("store")
    p.add_argument("--block-at", type=int)
    p.add_argument("--reference", action="store_true")
    args = p.parse_args()

    def on_term(signum: int, frame: Any) -> None:
        BLOCK.signalled = True

    # Chained by resumable (or replaced by its own handler, which raises in the body).
    signal.signal(signal.SIGTERM, on_term)
    signal.signal(signal.SIGUSR1, on_term)  # the blocker goes on; resumable is not told
    BLOCK.at = args.block_at
    result = run(args.lib, None if args.reference else {"store": args.store})
    print(f"RESULT {result}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
