"""Integrations: run ids from what identifies the run, errors that say what to do, lazy imports,
and parts pickle cannot handle."""

from __future__ import annotations

import random
import shutil
import subprocess
import sys
import threading
import types
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from resumable import ConfigurationError, RunMismatchError, SerializationError
from resumable.integrations import ask_tell
from tests.workers import integrations_worker as worker

ROOT = Path(__file__).resolve().parents[1]


def test_import_resumable_imports_no_ga_library() -> None:
    """`import resumable` (and resumable.integrations) leaves the libraries unimported."""
    code = ("import sys, resumable, resumable.integrations; "
            "print([m for m in ('deap', 'pygad', 'pymoo', 'cma', 'nevergrad') "
            "if m in sys.modules])")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         cwd=ROOT, timeout=60, check=True)
    assert out.stdout.strip() == "[]"


def _runs(store: Path) -> set[str]:
    return {p.name for p in store.iterdir()} if store.exists() else set()


def _onemax_run(store: Any, seed: int = 12, indpb: float = 0.05, evaluate: Any = None,
                cxpb: float = 0.5, ngen: int = 3, **options: Any) -> Any:
    from deap import tools

    from resumable.integrations.deap import ea_simple

    tb = worker._deap_toolbox()
    tb.register("mutate", tools.mutFlipBit, indpb=indpb)
    if evaluate is not None:
        tb.register("evaluate", evaluate)
    random.seed(seed)
    pop = tb.population(n=10)
    return ea_simple(pop, tb, cxpb, 0.2, ngen, verbose=False,
                     store=str(store) if isinstance(store, Path) else store, **options)


def test_deap_run_id_follows_seed_and_operator_parameters(tmp_path: Path) -> None:
    """Rebuilt toolboxes (new addresses) map to the same run; a seed or an operator
    parameter that differs makes a new one."""
    _onemax_run(tmp_path)
    first = _runs(tmp_path)
    assert len(first) == 1 and next(iter(first)).startswith(
        "resumable.integrations.deap.ea_simple-")
    _onemax_run(tmp_path)
    assert _runs(tmp_path) == first
    _onemax_run(tmp_path, seed=13)
    assert len(_runs(tmp_path)) == 2
    _onemax_run(tmp_path, indpb=0.1)
    assert len(_runs(tmp_path)) == 3


@pytest.fixture
def numpy_global() -> Any:
    """numpy's global generator and its state, put back after the test."""
    generator = np.random.get_bit_generator()
    state = generator.state
    yield
    np.random.set_bit_generator(generator)
    generator.state = state


@pytest.mark.usefixtures("numpy_global")
@pytest.mark.parametrize("seed", [0, 1, 2**31, 2**32 - 1, np.uint32(7)])
def test_numpy_seed_is_read_back_from_the_state_np_random_seed_leaves(seed: Any) -> None:
    from resumable.integrations._identity import numpy_seed

    np.random.seed(seed)
    assert numpy_seed() == int(seed)
    np.random.set_state(np.random.get_state())  # the same state, however it was set
    assert numpy_seed() == int(seed)


@pytest.mark.usefixtures("numpy_global")
@pytest.mark.parametrize("how", ["from the OS", "from a sequence", "a number drawn since",
                                 "a normal drawn since", "its key altered",
                                 "another generator"])
def test_numpy_seed_is_none_for_any_other_state(how: str) -> None:
    """None, and no warning (numpy warns when get_state(legacy=True) meets another
    generator than MT19937: an error where warnings are errors)."""
    import warnings

    from resumable.integrations._identity import numpy_seed

    np.random.seed(None if how == "from the OS" else [5, 6] if how == "from a sequence" else 5)
    if how == "another generator":
        np.random.set_bit_generator(np.random.PCG64(5))
        np.random.seed(5)
    if how == "a number drawn since":
        np.random.randint(10)
    elif how == "a normal drawn since":
        np.random.normal()  # (the state keeps a second normal: has_gauss)
    elif how == "its key altered":
        name, key, pos, gauss, cached = np.random.get_state()
        key = key.copy()
        key[623] ^= 1
        np.random.set_state((name, key, pos, gauss, cached))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert numpy_seed() is None


def test_numpy_seed_does_not_import_numpy_random() -> None:
    code = ("import sys, numpy, resumable.integrations._identity as i; "
            "print(i.numpy_seed(), 'numpy.random' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         cwd=ROOT, timeout=60, check=True)
    assert out.stdout.split() == ["None", "False"]


@pytest.mark.usefixtures("numpy_global")
def test_deap_run_id_leaves_an_unseeded_numpy_out(tmp_path: Path) -> None:
    """numpy never seeded: each process has another state, drawn from the OS, and a
    restarted one must still find its run (as it did before numpy's seed was a part)."""
    np.random.seed(None)
    _onemax_run(tmp_path)
    first = _runs(tmp_path)
    np.random.seed(None)  # what a new process has
    _onemax_run(tmp_path)
    assert _runs(tmp_path) == first and len(first) == 1
    np.random.seed(3)
    _onemax_run(tmp_path)
    np.random.seed(3)
    _onemax_run(tmp_path)
    assert len(_runs(tmp_path)) == 2


@pytest.mark.usefixtures("numpy_global")
def test_deap_fixed_run_id_refuses_another_numpy_seed(tmp_path: Path) -> None:
    np.random.seed(1)
    _onemax_run(tmp_path, run_id="fixed")
    np.random.seed(2)
    with pytest.raises(RunMismatchError) as err:
        _onemax_run(tmp_path, run_id="fixed")
    assert err.value.differences == ("numpy_seed",)
    assert "'numpy_seed' (1 in the run, 2 in this call)" in str(err.value)
    assert "ignore=" not in str(err.value)  # both have one: leaving it out is no answer


@pytest.mark.usefixtures("numpy_global")
def test_a_run_started_without_numpy_seed_is_named_and_resumed_with_ignore(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """A run whose id has no numpy seed (started by an older version, or by a process that
    drew from numpy before the call) and the same call with numpy just seeded: a new run,
    with a warning naming the other and ignore=; with ignore= it is resumed, and under a
    fixed run id the RunMismatchError says so too."""
    np.random.seed(0)
    np.random.rand()  # (drawn: not recognised)
    first = _onemax_run(tmp_path)
    assert len(_runs(tmp_path)) == 1
    older = next(iter(_runs(tmp_path)))
    np.random.seed(0)
    with caplog.at_level("WARNING", logger="resumable"):
        _onemax_run(tmp_path)
    assert len(_runs(tmp_path)) == 2
    warned = [r.getMessage() for r in caplog.records if older in r.getMessage()]
    assert len(warned) == 1 and "ignore=('numpy_seed',)" in warned[0], caplog.text
    # Its identity record damaged (or signed, where this call has no key): the older run
    # is still named, and not read (no error about a run this call does not use).
    newer = next(iter(_runs(tmp_path) - {older}))
    shutil.rmtree(tmp_path / newer)
    record = tmp_path / older / "identity"
    intact = record.read_bytes()
    record.write_bytes(b"junk" + intact[4:])
    caplog.clear()
    np.random.seed(0)
    with caplog.at_level("WARNING", logger="resumable"):
        _onemax_run(tmp_path)
    assert [r.levelname for r in caplog.records] == ["WARNING"], caplog.text
    assert older in caplog.text
    record.write_bytes(intact)
    caplog.clear()
    np.random.seed(0)
    with caplog.at_level("WARNING", logger="resumable"):
        _onemax_run(tmp_path)  # (done: no fresh start, no warning)
    assert not caplog.records, caplog.text
    caplog.clear()
    np.random.seed(0)
    with caplog.at_level("INFO", logger="resumable"):
        again = _onemax_run(tmp_path, ignore=("numpy_seed",))
    assert len(_runs(tmp_path)) == 2 and older in caplog.text
    assert [ind.fitness.values for ind in again[0]] == [ind.fitness.values for ind in first[0]]

    np.random.seed(0)
    np.random.rand()
    _onemax_run(tmp_path, run_id="fixed")
    np.random.seed(0)
    with pytest.raises(RunMismatchError) as err:
        _onemax_run(tmp_path, run_id="fixed")
    assert "'numpy_seed' (absent in the run, 0 in this call)" in str(err.value)
    assert "ignore=('numpy_seed',)" in str(err.value)
    np.random.seed(0)
    _onemax_run(tmp_path, run_id="fixed", ignore=("numpy_seed",))

    # The other way round: the run has a seed, this process has drawn from numpy first.
    np.random.seed(0)
    _onemax_run(tmp_path, run_id="fixed-2")
    np.random.seed(0)
    np.random.rand()
    with pytest.raises(RunMismatchError) as err:
        _onemax_run(tmp_path, run_id="fixed-2")
    assert "'numpy_seed' (0 in the run, absent in this call)" in str(err.value)
    assert "ignore=('numpy_seed',) resumes it" in str(err.value)
    assert err.value.differences == ("numpy_seed",)
    _onemax_run(tmp_path, run_id="fixed-2", ignore=("numpy_seed",))


@pytest.mark.usefixtures("numpy_global")
@pytest.mark.parametrize("fixed", [False, True])
def test_following_the_ignore_hints_returns_a_completed_runs_result(
        tmp_path: Path, caplog: pytest.LogCaptureFixture, fixed: bool) -> None:
    """The warning's hint (a run without the seed) on a completed run: its stored result,
    with no new attempt (fb15564 compared the ignored None with nothing, and extended the
    run). The RunMismatchError's (a fixed id whose run has seed 1, numpy drawn from in this
    process): the run had a seed, so None is a change, and the run is extended from its
    last checkpoint, by no generation: the same result."""
    run_id = {"run_id": "fixed"} if fixed else {}
    np.random.seed(1 if fixed else None)
    first = _onemax_run(tmp_path, **run_id)
    np.random.seed(1)
    if fixed:
        np.random.rand()
    with caplog.at_level("INFO", logger="resumable"):
        again = _onemax_run(tmp_path, ignore=("numpy_seed",), **run_id)
    extended = "extending" in caplog.text
    assert extended == fixed, caplog.text
    assert [ind.fitness.values for ind in again[0]] == [ind.fitness.values for ind in first[0]]
    assert len(_runs(tmp_path)) == 1


@pytest.mark.usefixtures("numpy_global")
@pytest.mark.parametrize("error", [RuntimeError("no head today"), OSError(5, "I/O error")])
def test_the_look_for_a_run_without_the_seed_never_fails_the_call(
        tmp_path: Path, error: Exception) -> None:
    """A store (here a local one with a fault) whose existence check raises something
    other than a StoreError while a seeded call looks for the run without the seed: only
    the warning is lost; not the call, nor one of its restarts."""
    from resumable.stores._local import LocalStore

    class Faulty(LocalStore):
        looked = 0

        def head(self, key: str, n: int) -> Any:
            if key.endswith("/identity"):
                Faulty.looked += 1
                raise error
            return super().head(key, n)

    np.random.seed(None)
    _onemax_run(tmp_path)
    np.random.seed(2)
    _onemax_run(Faulty(tmp_path))  # (restarts=0: a body error would raise)
    assert Faulty.looked == 1 and len(_runs(tmp_path)) == 2


@pytest.mark.usefixtures("numpy_global")
def test_ignore_numpy_seed_works_whether_or_not_numpy_is_seeded(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """Unseeded, then seeded 4, then 5: one run, whose stored result the later calls get
    (not an extension per seed: the ignored value is the same, None, in every call)."""
    np.random.seed(None)
    _onemax_run(tmp_path, ignore=("numpy_seed",))
    for seed in (4, 5):
        np.random.seed(seed)
        with caplog.at_level("INFO", logger="resumable"):
            _onemax_run(tmp_path, ignore=("numpy_seed",))
    assert len(_runs(tmp_path)) == 1
    assert "extending" not in caplog.text and "attempt" not in caplog.text, caplog.text


def _noisy(x: Any) -> float:
    return float(np.sum(np.asarray(x) ** 2) + np.random.normal())


def _pymoo_noisy(store: Path) -> float:
    from pymoo.algorithms.soo.nonconvex.ga import GA
    from pymoo.core.problem import ElementwiseProblem

    from resumable.integrations.pymoo import minimize

    class Noisy(ElementwiseProblem):
        def __init__(self) -> None:
            super().__init__(n_var=3, n_obj=1, xl=-2, xu=2)

        def _evaluate(self, x: Any, out: Any, *args: Any, **kwargs: Any) -> None:
            out["F"] = _noisy(x)

    return float(minimize(Noisy(), GA(pop_size=10), ("n_gen", 3), seed=5,
                          store=str(store)).F[0])


def _pygad_noisy(store: Path) -> float:
    import pygad

    from resumable.integrations.pygad import run

    ga = pygad.GA(num_generations=3, num_parents_mating=2, sol_per_pop=6, num_genes=3,
                  fitness_func=lambda g, s, i: -_noisy(s), random_seed=5,
                  suppress_warnings=True)
    return float(run(ga, store=str(store)).best_solution()[1])


@pytest.mark.usefixtures("numpy_global")
@pytest.mark.parametrize("case", [_pymoo_noisy, _pygad_noisy], ids=["pymoo", "pygad"])
def test_every_integration_tells_numpy_seeds_apart(tmp_path: Path, case: Any) -> None:
    """An objective that draws from numpy's global RNG, seeded 1 then 2 right before the
    call: the second call is its own run, not the first one's stored result."""
    np.random.seed(1)
    case(tmp_path / "shared")
    np.random.seed(2)
    shared = case(tmp_path / "shared")
    np.random.seed(2)
    assert shared == case(tmp_path / "alone")
    assert len(_runs(tmp_path / "shared")) == 2


def test_lambdas_are_identified_by_code(tmp_path: Path) -> None:
    """A lambda in the toolbox is identified by its code and constants, not its address."""
    _onemax_run(tmp_path, evaluate=lambda ind: (sum(ind),))
    _onemax_run(tmp_path, evaluate=lambda ind: (sum(ind),))
    assert len(_runs(tmp_path)) == 1
    _onemax_run(tmp_path, evaluate=lambda ind: (sum(ind) + 1,))
    assert len(_runs(tmp_path)) == 2


def _weighted_run(store: Path, weights: tuple[float, ...], ours: bool = True) -> Any:
    """OneMax with a fitness of ``weights``, its classes made anew by creator.create as a
    script edited between two runs makes them (same names, other weights)."""
    from deap import algorithms, base, creator, tools

    from resumable.integrations.deap import ea_simple

    for name in ("ReviewWeightedFitness", "ReviewWeightedBits"):
        if hasattr(creator, name):
            delattr(creator, name)
    creator.create("ReviewWeightedFitness", base.Fitness, weights=weights)
    creator.create("ReviewWeightedBits", list, fitness=creator.ReviewWeightedFitness)
    tb = base.Toolbox()
    tb.register("attr_bool", random.randint, 0, 1)
    tb.register("evaluate", worker.onemax)
    tb.register("mate", tools.cxTwoPoint)
    tb.register("mutate", tools.mutFlipBit, indpb=0.05)
    tb.register("select", tools.selTournament, tournsize=3)
    random.seed(7)
    pop = [creator.ReviewWeightedBits(random.randint(0, 1) for _ in range(16))
           for _ in range(10)]
    if ours:
        out, _ = ea_simple(pop, tb, 0.5, 0.2, 4, verbose=False, store=str(store))
    else:
        out, _ = algorithms.eaSimple(pop, tb, 0.5, 0.2, 4, verbose=False)
    return [list(i) for i in out], [i.fitness.values for i in out]


def test_deap_run_id_follows_the_fitness_weights(tmp_path: Path) -> None:
    """creator.create's class attributes are configuration: the same script maximizing,
    then minimizing, is two runs, and the second returns DEAP's minimization, not the
    stored result of the maximization (the classes have the same names)."""
    maximized = _weighted_run(tmp_path, (1.0,))
    assert len(_runs(tmp_path)) == 1
    assert _weighted_run(tmp_path, (1.0,)) == maximized  # rebuilt classes: the same run
    assert len(_runs(tmp_path)) == 1
    minimized = _weighted_run(tmp_path, (-1.0,))
    assert len(_runs(tmp_path)) == 2
    assert minimized == _weighted_run(tmp_path, (-1.0,), ours=False) != maximized


class Opaque:
    """No attributes and no pickle: nothing to identify it by."""

    __slots__ = ()

    def __reduce__(self) -> Any:
        raise TypeError("Opaque cannot be pickled")

    def __call__(self, ind: Any) -> tuple[int]:
        return (sum(ind),)


def test_unidentifiable_part_needs_run_id(tmp_path: Path) -> None:
    """A toolbox part without a stable value: the error names it and asks for run_id=."""
    with pytest.raises(ConfigurationError) as err:
        _onemax_run(tmp_path, evaluate=Opaque())
    message = str(err.value)
    assert "toolbox" in message and "evaluate" in message and "run_id=" in message
    assert _runs(tmp_path) == set()
    _onemax_run(tmp_path, evaluate=Opaque(), run_id="onemax-opaque")
    assert _runs(tmp_path) == {"onemax-opaque"}


def test_run_id_with_an_unidentifiable_part_still_refuses_other_arguments(
        tmp_path: Path) -> None:
    """With run_id= for a toolbox that has a part without a stable value (a pool's map,
    say), the rest of the call still identifies the run: another mutation probability or
    seed under that run id is a RunMismatchError, not the stored result of the first
    configuration; the same call (a rebuilt, equally opaque part) is the same run."""
    first = _onemax_run(tmp_path, evaluate=Opaque(), run_id="opaque-fixed")
    again = _onemax_run(tmp_path, evaluate=Opaque(), run_id="opaque-fixed")
    assert [list(i) for i in again[0]] == [list(i) for i in first[0]]
    with pytest.raises(RunMismatchError):
        _onemax_run(tmp_path, evaluate=Opaque(), run_id="opaque-fixed", indpb=0.3)
    with pytest.raises(RunMismatchError):
        _onemax_run(tmp_path, evaluate=Opaque(), run_id="opaque-fixed", seed=99)
    assert _runs(tmp_path) == {"opaque-fixed"}


def test_run_mismatch_names_the_library_argument_that_differs(tmp_path: Path) -> None:
    """Under one run id, another crossover probability is a RunMismatchError that names
    cxpb and shows both values (the contract: it names the arguments that differ), not
    an internal digest argument; a toolbox that differs is named as toolbox."""
    _onemax_run(tmp_path, run_id="fixed")
    with pytest.raises(RunMismatchError) as err:
        _onemax_run(tmp_path, run_id="fixed", cxpb=0.6)
    assert err.value.differences == ("cxpb",)
    assert "'cxpb' (0.5 in the run, 0.6 in this call)" in str(err.value)
    with pytest.raises(RunMismatchError) as err:
        _onemax_run(tmp_path, run_id="fixed", indpb=0.3)
    assert err.value.differences == ("toolbox",)


def test_deap_ignore_ngen_extends_a_finished_run_to_deaps_own_result(tmp_path: Path) -> None:
    """ignore=["ngen"] leaves ngen out of the run id, as ignore= does for any call: the
    run of 3 generations, called again with ngen=5, is extended from its last checkpoint,
    and equals DEAP's own eaSimple with ngen=5 (population and logbook)."""
    from deap import algorithms

    short = _onemax_run(tmp_path, ngen=3, ignore=["ngen"])
    assert len(_runs(tmp_path)) == 1 and len(short[1]) == 4
    pop, log = _onemax_run(tmp_path, ngen=5, ignore=["ngen"])
    assert len(_runs(tmp_path)) == 1  # the same run, extended
    tb = worker._deap_toolbox()
    random.seed(12)
    ref_pop, ref_log = algorithms.eaSimple(tb.population(n=10), tb, 0.5, 0.2, 5,
                                           verbose=False)
    assert [list(i) for i in pop] == [list(i) for i in ref_pop]
    assert [i.fitness.values for i in pop] == [i.fitness.values for i in ref_pop]
    assert list(log) == list(ref_log)


def test_ignore_takes_only_parts_a_resumed_run_would_use(tmp_path: Path) -> None:
    """ignore= names parts of the run's identity; a misspelt one lists them. A part that a
    resumed run takes from its checkpoint (ask_tell's optimizer, PyGAD's attributes,
    pymoo's termination) cannot be ignored: its new value would be dropped silently."""
    import cma

    with pytest.raises(ConfigurationError, match=r"'ngenn'.*the parts are .*ngen"):
        _onemax_run(tmp_path, ignore=["ngenn"])
    es = cma.CMAEvolutionStrategy([1.0, 1.0], 0.5, {"seed": 3, "verbose": -9})
    with pytest.raises(ConfigurationError, match="optimizer from its checkpoint"):
        ask_tell(es, lambda x: float(sum(v * v for v in x)), 4, store=str(tmp_path),
                 ignore=["optimizer"])
    from pymoo.algorithms.soo.nonconvex.ga import GA
    from pymoo.problems import get_problem

    from resumable.integrations.pymoo import minimize

    with pytest.raises(ConfigurationError, match="termination and setup, from its checkpoint"):
        minimize(get_problem("sphere", n_var=3), GA(pop_size=6), ("n_gen", 2), seed=1,
                 store=str(tmp_path), ignore=["termination"])
    assert _runs(tmp_path) == set()  # refused before anything was written


def test_an_unseeded_cma_es_is_told_it_cannot_resume(tmp_path: Path,
                                                    caplog: pytest.LogCaptureFixture) -> None:
    """pycma without a "seed" option seeds itself from the clock: each process's es is
    another run, so a restart starts over. That is said when such a run starts; a
    seeded es, or one resumed, is not warned about."""
    import cma

    def sphere(x: Any) -> float:
        return float(sum(v * v for v in x))

    caplog.set_level("WARNING", logger="resumable")
    first = cma.CMAEvolutionStrategy([1.0, 1.0], 0.5, {"verbose": -9})
    ask_tell(first, sphere, 2, store=str(tmp_path / "unseeded"))
    again = cma.CMAEvolutionStrategy([1.0, 1.0], 0.5, {"verbose": -9})
    ask_tell(again, sphere, 2, store=str(tmp_path / "unseeded"))
    told = [r.getMessage() for r in caplog.records if "no fixed 'seed'" in r.getMessage()]
    assert len(told) == 2, told  # each process's es is a new run: the warning was right
    assert f"seed={first.opts['seed']}" in told[0] and "{'seed': 1}" in told[0]
    assert len(_runs(tmp_path / "unseeded")) == 2

    caplog.clear()
    for _ in range(2):  # the second call finds the first's run
        es = cma.CMAEvolutionStrategy([1.0, 1.0], 0.5, {"seed": 4, "verbose": -9})
        ask_tell(es, sphere, 2, store=str(tmp_path / "seeded"))
    assert len(_runs(tmp_path / "seeded")) == 1
    assert not [r for r in caplog.records if "seed" in r.getMessage()]

    # pycma corrects an option's spelling, and evaluates a string (review 36)
    for options, warned in (({"Seed": 3}, False), ({"seed": "5"}, False),
                            ({"seed": "0"}, True), ({"seed": "None"}, True),
                            ({"seed": 0}, True), ({"seed": float("nan")}, False)):
        caplog.clear()
        es = cma.CMAEvolutionStrategy([1.0, 1.0], 0.5, {**options, "verbose": -9})
        ask_tell(es, sphere, 1, store=str(tmp_path / "spellings"))
        assert bool([r for r in caplog.records if "no fixed 'seed'" in r.getMessage()]) \
            == warned, options
    # pycma's other ask/tell optimizers have no options to look at: they run, untold
    from cma.more_algorithms.purecma import CMAES

    caplog.clear()
    pure = ask_tell(CMAES([1.0, 1.0], 0.5), sphere, 2, store=str(tmp_path / "pure"))
    assert pure.counteval > 0
    assert not [r for r in caplog.records if "seed" in r.getMessage()]


def test_ask_tell_ignore_budget_extends_the_run(tmp_path: Path) -> None:
    """ask_tell(..., budget, ignore=["budget"]): a finished run of 3 rounds, called with
    6, goes on from its last round to the same optimizer as 6 rounds in one go."""
    import cma

    def sphere(x: Any) -> float:
        return float(sum(v * v for v in x))

    def es() -> Any:
        return cma.CMAEvolutionStrategy([1.0, 1.0], 0.5, {"seed": 3, "verbose": -9})

    ask_tell(es(), sphere, 3, store=str(tmp_path), ignore=["budget"])
    longer = ask_tell(es(), sphere, 6, store=str(tmp_path), ignore=["budget"])
    assert len(_runs(tmp_path)) == 1
    whole = ask_tell(es(), sphere, 6, store=str(tmp_path / "whole"))
    assert longer.countiter == whole.countiter == 6
    assert np.array_equal(longer.mean, whole.mean)


def test_unpicklable_hall_of_fame_names_the_part_and_cloudpickle_works(tmp_path: Path) -> None:
    """A lambda in the saved state (the hall of fame's `similar`) is a SerializationError
    naming it; serializer="cloudpickle" saves it, with DEAP's own result."""
    from deap import algorithms, tools

    from resumable.integrations.deap import ea_simple

    def run(call: Any, **options: Any) -> Any:
        tb = worker._deap_toolbox()
        random.seed(3)
        pop = tb.population(n=10)
        hof = tools.HallOfFame(2, similar=lambda a, b: a == b)
        out, log = call(pop, tb, 0.5, 0.2, 3, halloffame=hof, verbose=False, **options)
        return [list(i) for i in out], list(log), [list(i) for i in hof]

    with pytest.raises(SerializationError) as err:
        run(ea_simple, store=str(tmp_path))
    assert "state['halloffame'].similar" in str(err.value)
    assert "cloudpickle" in str(err.value)
    expected = run(algorithms.eaSimple)
    assert run(ea_simple, store=str(tmp_path / "cp"), serializer="cloudpickle") == expected


def test_unknown_keyword_lists_the_options(tmp_path: Path) -> None:
    with pytest.raises(TypeError, match="store"):
        _onemax_run(tmp_path, stor="typo")


def test_nevergrad_recast_optimizer_fails_before_running() -> None:
    """A recast (thread-backed) optimizer cannot be pickled: refused before its thread starts."""
    import nevergrad as ng

    opt = ng.optimizers.registry["NelderMead"](parametrization=2, budget=10)
    before = set(threading.enumerate())
    with pytest.raises(SerializationError, match="picklability"):
        ask_tell(opt, worker.shifted_sphere, 5, store="memory://recast")
    # (threads, not their count: one an earlier test left, a server's request thread, may
    # end meanwhile)
    assert not set(threading.enumerate()) - before and opt.num_ask == 0


def test_ask_tell_on_a_pymoo_algorithm(memory_url: str) -> None:
    """A set-up pymoo algorithm: rounds are generations; objective=None uses its problem."""
    from pymoo.algorithms.soo.nonconvex.ga import GA
    from pymoo.problems import get_problem

    def algorithm() -> Any:
        algo = GA(pop_size=10)
        algo.setup(get_problem("sphere", n_var=3), termination=("n_gen", 6), seed=4)
        return algo

    expected = algorithm()
    while expected.has_next():
        pop = expected.ask()
        expected.evaluator.eval(expected.problem, pop, algorithm=expected)
        expected.tell(infills=pop)
    with pytest.raises(SerializationError, match=r"state\['optimizer'\]\.mating.*cloudpickle"):
        ask_tell(algorithm(), None, None, store=memory_url, serializer="pickle")
    ours = algorithm()  # cloudpickle by default for pymoo
    assert ask_tell(ours, None, None, store=f"{memory_url}-2") is ours
    assert ours.n_gen == expected.n_gen
    assert np.array_equal(ours.pop.get("X"), expected.pop.get("X"))
    assert np.array_equal(ours.opt.get("F"), expected.opt.get("F"))


@pytest.mark.parametrize("budget", [-1, 2.5, True])
def test_ask_tell_budget_must_be_a_count(budget: Any) -> None:
    import cma

    es = cma.CMAEvolutionStrategy([0.0, 0.0], 0.5, {"seed": 1, "verbose": -9})
    with pytest.raises(ConfigurationError, match="budget"):
        ask_tell(es, worker.shifted_sphere, budget, store="memory://budget")


def test_ask_tell_budget_none_needs_an_optimizer_that_stops() -> None:
    import nevergrad as ng

    with pytest.raises(ConfigurationError, match="budget=None"):
        ask_tell(ng.optimizers.OnePlusOne(parametrization=2, budget=5), worker.shifted_sphere,
                 None, store="memory://none")


def test_ask_tell_on_an_object_without_ask_and_tell_says_what_it_needs() -> None:
    """ask_tell(object(), ...) was a bare AttributeError from inside the run."""
    with pytest.raises(ConfigurationError, match=r"ask_tell: object has no ask\(\)"):
        ask_tell(object(), worker.shifted_sphere, 3, store="memory://noask")


@pytest.mark.parametrize("module, extra", [("deap", "deap"), ("pygad", "pygad")])
def test_an_integration_without_its_library_names_the_extra_to_install(
    module: str, extra: str
) -> None:
    """Without the library (hidden here by a meta path finder that refuses it), importing
    the integration was a bare ModuleNotFoundError: now it names the pip extra."""
    code = (
        "import sys\n"
        "class Hide:\n"
        "    def find_spec(self, name, path=None, target=None):\n"
        f"        if name.split('.')[0] in ({module!r}, 'numpy'):\n"
        "            raise ModuleNotFoundError(f'No module named {name!r}', name=name)\n"
        "sys.meta_path.insert(0, Hide())\n"
        f"import resumable.integrations.{module}\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         cwd=ROOT, timeout=60)
    assert out.returncode != 0
    assert f"pip install 'resumable[{extra}]'" in out.stderr, out.stderr[-2000:]


# -- the by-value description behind the run ids ----------------------------------------

from hypothesis import given  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from resumable.integrations._identity import digest  # noqa: E402

_leaves = (st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False)
           | st.text(max_size=8) | st.binary(max_size=8))
_values = st.recursive(
    _leaves,
    lambda inner: (st.lists(inner, max_size=4) | st.tuples(inner, inner)
                   | st.dictionaries(st.text(max_size=4), inner, max_size=4)),
    max_leaves=20)


@given(_values)
def test_equal_values_built_apart_give_one_digest(value: Any) -> None:
    """A deep copy and a pickle round trip (new objects, new addresses): the same digest."""
    import copy
    import pickle

    assert digest({"x": value}) == digest({"x": copy.deepcopy(value)})
    assert digest({"x": value}) == digest({"x": pickle.loads(pickle.dumps(value))})


@given(_values, _values)
def test_different_values_give_different_digests(a: Any, b: Any) -> None:
    import pickle

    if pickle.dumps(a) != pickle.dumps(b) and repr(a) != repr(b):
        assert digest({"x": a}) != digest({"x": b})


def test_functions_by_code_closures_and_partials() -> None:
    import functools

    def make(k: int) -> Any:
        return lambda x: x + k

    assert digest({"f": make(1)}) == digest({"f": make(1)})
    assert digest({"f": make(1)}) != digest({"f": make(2)})
    assert digest({"f": functools.partial(max, 1)}) == digest({"f": functools.partial(max, 1)})
    assert digest({"f": functools.partial(max, 1)}) != digest({"f": functools.partial(max, 2)})
    rng = np.random.default_rng(5)
    assert digest({"r": rng}) == digest({"r": np.random.default_rng(5)})
    assert digest({"r": rng}) != digest({"r": np.random.default_rng(6)})


def test_pygad_run_mismatch_names_the_ga_attribute_that_differs(tmp_path: Path) -> None:
    """Under one run id, a PyGAD GA built with another mutation_probability is a
    RunMismatchError naming mutation_probability and both values (the contract: it names
    the arguments that differ), not one digest of all the instance's attributes."""
    import numpy as np
    import pygad

    from resumable.integrations.pygad import run

    def fitness(ga: Any, solution: Any, index: int) -> float:
        return -float(np.sum(solution ** 2))

    def ga(mutation_probability: float) -> Any:
        return pygad.GA(num_generations=2, num_parents_mating=2, sol_per_pop=4,
                        num_genes=3, fitness_func=fitness, random_seed=3,
                        mutation_probability=mutation_probability, suppress_warnings=True)

    run(ga(0.1), store=str(tmp_path), run_id="pygad-fixed")
    run(ga(0.1), store=str(tmp_path), run_id="pygad-fixed")  # the same call: no error
    with pytest.raises(RunMismatchError) as err:
        run(ga(0.2), store=str(tmp_path), run_id="pygad-fixed")
    assert "mutation_probability" in err.value.differences, str(err.value)
    assert "'mutation_probability' (0.1 in the run, 0.2 in this call)" in str(err.value)


def test_an_unseeded_pygad_ga_is_told_it_cannot_resume(tmp_path: Path,
                                                      caplog: pytest.LogCaptureFixture) -> None:
    """PyGAD without random_seed draws its initial population and its generators from the
    OS: each process's GA is another run, so a restarted pod silently started over at
    generation 0 (left alone in notes 18-20). That is said when such a run starts, as for
    an unseeded cma es; a seeded GA, or one resumed, is not warned about."""
    import pygad

    from resumable.integrations.pygad import run

    def fitness(ga: Any, solution: Any, index: int) -> float:
        return -float(np.sum(solution ** 2))

    def ga(**seed: Any) -> Any:
        return pygad.GA(num_generations=2, num_parents_mating=2, sol_per_pop=4,
                        num_genes=3, fitness_func=fitness, suppress_warnings=True, **seed)

    caplog.set_level("WARNING", logger="resumable")
    for _ in range(2):
        run(ga(), store=str(tmp_path / "unseeded"))
    told = [r.getMessage() for r in caplog.records if "made without random_seed" in r.getMessage()]
    assert len(told) == 2, told  # each process's GA is a new run: the warning was right
    assert "random_seed=1" in told[0] and "starts over" in told[0], told[0]
    assert len(_runs(tmp_path / "unseeded")) == 2

    caplog.clear()
    for _ in range(2):  # the second call finds the first's run
        run(ga(random_seed=4), store=str(tmp_path / "seeded"))
    assert len(_runs(tmp_path / "seeded")) == 1
    assert not [r for r in caplog.records if "random_seed" in r.getMessage()]


_FROZENSET_CONST = """
from resumable.integrations._identity import digest

def objective(x):
    return x in {"alpha", "beta", "gamma", "delta", "epsilon", "zeta", "eta", "theta"}

print(digest({"f": objective}))
"""


def test_a_set_literal_in_a_function_is_the_same_in_every_process() -> None:
    """Code constants were described by repr(): a frozenset's repr lists its items in hash
    order, so every process (PYTHONHASHSEED) derived another run id for the same call."""
    import os

    digests = set()
    for seed in ("1", "2", "3"):
        out = subprocess.run([sys.executable, "-c", _FROZENSET_CONST], capture_output=True,
                             text=True, timeout=120, env={**os.environ, "PYTHONHASHSEED": seed})
        assert out.returncode == 0, out.stderr
        digests.add(out.stdout.strip())
    assert len(digests) == 1, digests


_ORDER = {"a": 1, "b": 2}


class _Penalty:
    def __init__(self, name: str, weights: list[float]) -> None:
        self.name, self.weights = name, weights

    def __hash__(self) -> int:  # (as an address would: other in every process)
        return _ORDER[self.name]


def test_set_items_that_share_an_object_are_described_alike_in_any_order() -> None:
    """Set items were described in iteration order with one table of references: an
    object two items share was described in full under the first item and as a reference
    under the second, so another order (hashes by address) gave another run id."""
    shared = [0.5, 0.25]
    _ORDER.update(a=1, b=2)
    first = frozenset([_Penalty("a", shared), _Penalty("b", shared)])
    _ORDER.update(a=2, b=1)
    second = frozenset([_Penalty("b", shared), _Penalty("a", shared)])
    assert [p.name for p in first] != [p.name for p in second]  # iterated in other orders
    assert digest({"p": first}) == digest({"p": second})
    assert digest({"p": first}) != digest({"p": frozenset([_Penalty("a", [0.5, 0.5])])})


def test_an_object_holding_a_global_rng_has_one_digest() -> None:
    holder = types.SimpleNamespace(rng=np.random.mtrand._rand)
    before = digest({"h": holder})
    np.random.random()
    assert digest({"h": holder}) == before


class _Interrupt(Exception):
    pass


def test_pygad_callbacks_can_be_ignored_and_the_new_one_is_called(tmp_path: Path) -> None:
    """A changed on_generation (a print added) was a new run, and ignore=("on_generation",)
    was refused with "a new value would not be used", which is false: callbacks are the
    live instance's, also in a resumed run (review 33)."""
    import numpy as np
    import pygad

    from resumable.integrations.pygad import run

    def fitness(ga: Any, solution: Any, index: int) -> float:
        return -float(np.sum(solution ** 2))

    def first(ga: Any) -> None:
        if ga.generations_completed == 2:
            raise _Interrupt  # the first pod ends here

    seen: list[int] = []

    def second(ga: Any) -> None:
        seen.append(ga.generations_completed)

    def ga(callback: Any) -> Any:
        return pygad.GA(num_generations=5, num_parents_mating=2, sol_per_pop=4,
                        num_genes=3, fitness_func=fitness, random_seed=3,
                        on_generation=callback, suppress_warnings=True)

    with pytest.raises(_Interrupt):
        run(ga(first), store=str(tmp_path), ignore=("on_generation",))
    done = run(ga(second), store=str(tmp_path), ignore=("on_generation",))
    assert done.generations_completed == 5
    assert seen and seen[-1] == 5 and 1 not in seen, seen  # resumed, with the new one


def _relu_and_tanh() -> list[Any]:
    """Two functions, new objects (at new addresses) on each call, with the same code."""
    ns: dict[str, Any] = {}
    exec("def relu(x):\n    return max(x, 0.0)\n\ndef tanh(x):\n    return x\n", ns)
    return [ns["relu"], ns["tanh"]]


def test_a_nevergrad_choice_of_functions_is_the_same_call_in_every_process() -> None:
    """nevergrad names a Choice of functions with their addresses (``<function relu at
    0x7f...>``); that name was part of the run id, so such a run never resumed, and under
    a fixed run_id every restart failed with RunMismatchError (review 33)."""
    import nevergrad as ng

    from resumable.integrations._ask_tell import _ng_identity
    from resumable.integrations._identity import digest

    def optimizer() -> Any:
        space = ng.p.Instrumentation(ng.p.Choice(_relu_and_tanh()), ng.p.Scalar(0.5))
        space.random_state.seed(1)
        return ng.optimizers.OnePlusOne(parametrization=space, budget=20)

    first, second = optimizer(), optimizer()
    assert first.parametrization.name != second.parametrization.name  # (the addresses)
    assert digest({"o": _ng_identity(first)}) == digest({"o": _ng_identity(second)})
