"""PyGAD's ``ga_instance.run()``, resumable: ``run(ga_instance, **options)``.

    from resumable.integrations import pygad as resumable_pygad
    ga = pygad.GA(num_generations=100, ..., random_seed=42)
    resumable_pygad.run(ga, store="s3://bucket/ga-runs")   # instead of ga.run()
    solution, fitness, _ = ga.best_solution()

Each generation is a checkpoint of the instance's attributes (population, fitness,
histories, counters and PyGAD's own generators ``numpy_random_generator`` and
``python_random_generator``); functions and the logger stay those of the live instance.
The generation loop is PyGAD 3.9's ``run()``, statement for statement, with a ``yield``
after each generation, so the instance ends exactly as ``ga.run()`` leaves it, whether
or not the process died on the way. Callbacks fire once per generation: generations
restored from a checkpoint do not fire ``on_generation`` (or ``on_fitness``,
``on_parents``...) again, and ``on_start`` fires only on a fresh start.

The run id comes from the instance's attributes at the call (its parameters, initial
population, generator states, and functions by name and code); pass ``run_id=`` if one of
them has no stable value.
"""

from __future__ import annotations

import concurrent.futures
import functools
import logging
import time
import types
from collections.abc import Generator
from typing import Any

from . import missing_library

try:
    import numpy
except ModuleNotFoundError as err:
    raise missing_library(err, "pygad", "pygad") from None

from .._errors import SerializationError
from ._common import Pristine, _ignored, check_options, progress_option, run_checkpointed

__all__ = ["run"]

log = logging.getLogger("resumable")

_LIVE_TYPES = (types.FunctionType, types.MethodType, types.BuiltinFunctionType,
               functools.partial, logging.Logger, concurrent.futures.Executor)


def _live(value: Any) -> bool:
    """Attributes that stay the live instance's: functions, bound methods, the logger."""
    return isinstance(value, _LIVE_TYPES)


def _attributes(ga: Any) -> dict[str, Any]:
    return {k: v for k, v in vars(ga).items() if not _live(v)}


def _best(state: dict[str, Any]) -> dict[str, Any]:
    history = state["ga"].get("best_solutions_fitness") or []
    if not len(history):
        return {}
    best = history[-1]
    return {"best": float(best) if numpy.ndim(best) == 0 else list(numpy.ravel(best))}


def run(ga_instance: Any, **options: Any) -> Any:
    """Run all of ``ga_instance``'s generations resumably; return the instance.

    The keyword arguments are the ``@checkpointed`` options (``store=``, ``run_id=``,
    ``every=``, ``keep=``, ``serializer=``, ``progress=``...).
    """
    check_options("run", options)
    ga = ga_instance
    _check_version()
    progress_option(options, ga.num_generations + 1, _best)

    def snapshot(loop: dict[str, Any]) -> dict[str, Any]:
        loop["elapsed"] = time.monotonic() - ga.run_start_time
        return {"loop": loop, "ga": _attributes(ga)}

    pristine = Pristine(options)

    def body(state: dict[str, Any] | None) -> Generator[dict[str, Any], None, dict[str, Any]]:
        try:
            if state is None:
                if getattr(ga, "random_seed", 0) is None:
                    log.warning(
                        "resumable.integrations.pygad: this GA was made without random_seed, "
                        "so PyGAD seeded its generators (numpy_random_generator, "
                        "python_random_generator) from the OS, and drew the initial "
                        "population from them unless initial_population= was given. Unless "
                        "this program replaced both generators with seeded ones, a restarted "
                        "process makes another GA, which is another run, and starts over "
                        "instead of resuming this one (under a fixed run_id= it fails with "
                        "RunMismatchError). Give it a fixed seed: pygad.GA(..., random_seed=1)")
                vars(ga).update(pristine.fresh(_attributes(ga)))
                loop = _start(ga)
                yield snapshot(loop)
            else:
                vars(ga).update(state["ga"])
                # parallel_processing's pool belongs to the process that made it and is not
                # saved (a live attribute), but its configuration is: with the configuration
                # back and no pool, PyGAD would use the pool it thinks it has. Forget both;
                # PyGAD makes a new pool at the next fitness call, as run() does.
                ga._shutdown_fitness_executor()
                ga._fitness_run_active = True
                loop = state["loop"]
                ga.run_start_time = time.monotonic() - loop["elapsed"]
            while not loop["stopped"] and loop["generation"] < loop["last"]:
                _generation(ga, loop)
                yield snapshot(loop)
            _finish(ga)
            ga._fitness_run_active = False  # as run() leaves it, in the stored result too
            ga._shutdown_fitness_executor()
            return _attributes(ga)
        except Exception as ex:
            ga.logger.exception(ex)
            raise
        finally:
            ga._fitness_run_active = False
            ga._shutdown_fitness_executor()

    def identity() -> dict[str, Any]:
        # Each attribute is a part of its own, so that RunMismatchError names the one
        # that differs (mutation_probability), as the GA's constructor took it.
        dropped = set(_ignored(options)) & vars(ga).keys()
        if not dropped:
            return {"class": type(ga), **vars(ga)}
        # The GA's own bound methods (crossover, mutation...) carry the instance, and
        # with it the parts left out (a callback): bound to a copy without them instead.
        shadow = object.__new__(type(ga))
        vars(shadow).update({
            k: types.MethodType(v.__func__, shadow)
            if isinstance(v, types.MethodType) and v.__self__ is ga else v
            for k, v in vars(ga).items() if k not in dropped})
        rebound = {k: vars(shadow).get(k, v) for k, v in vars(ga).items()}
        return {"class": type(ga), **rebound}  # (the parts left out are left out later)

    try:
        final = run_checkpointed(
            "resumable.integrations.pygad.run", identity, body, options,
            ignorable=lambda part: None if _live(vars(ga).get(part)) else (
                # (callbacks, the logger: the live instance's, also in a resumed run)
                "a resumed PyGAD run takes every attribute of the GA instance but its "
                "functions and logger from its checkpoint, so a new value would not be "
                "used; to run more generations, name a new run (run_id=)"))
    except SerializationError as err:
        advice = _callback_advice(ga, str(err))
        if advice is None:
            raise
        raise SerializationError(advice) from err
    vars(ga).update(final)
    return ga


def _callback_advice(ga: Any, message: str) -> str | None:
    """The serialization error's message for a callback object (a class with
    ``__call__``) that cannot be pickled, with what a PyGAD user can do about it: the
    generic "keep it out of the state" cannot be acted on, since this module builds the
    state (review 99)."""
    for name, value in vars(ga).items():
        if (f"state['ga'][{name!r}]" in message and callable(value) and not _live(value)
                and not isinstance(value, type)):
            kind = type(value).__qualname__
            cause = message.split("; keep it out of the state")[0]
            return (f"{cause}; PyGAD's {name} is a {kind} object, which is saved with "
                    f"each checkpoint as the GA's other attributes are (its attributes "
                    f"are the run's state); a function is not, it stays the live "
                    f"instance's: pass {name}=lambda ga: {name}_object(ga) with the "
                    f"object in a variable, or give {kind} a __getstate__ and "
                    f"__setstate__ that leave out what cannot be pickled and remake it")
    return None


TESTED_VERSION = "3.9.2"
_warned: list[str] = []


def _check_version() -> None:
    import pygad

    version = getattr(pygad, "__version__", "?")
    if version != TESTED_VERSION and version not in _warned:
        _warned.append(version)
        log.warning("resumable.integrations.pygad mirrors PyGAD %s's run() loop; PyGAD %s is "
                    "installed, whose loop may differ (pip install 'resumable[pygad]' pins "
                    "the tested version)", TESTED_VERSION, version)


def _start(self: Any) -> dict[str, Any]:
    """``GA.run()`` up to its generation loop; returns the loop's variables."""
    self._fitness_run_active = True
    self._saved_fitness_indexes = {}
    self._fitness_value_shape = None
    if self.valid_parameters == False:  # noqa: E712 (PyGAD's test, kept)
        raise Exception("Error calling the run() method: \nThe run() method cannot be "
                        "executed with invalid parameters. Please check the parameters "
                        "passed while creating an instance of the GA class.\n")
    self._restore_history_generations()
    if type(self.best_solutions) is numpy.ndarray:
        self.best_solutions = self.best_solutions.tolist()
    if type(self.best_solutions_fitness) is numpy.ndarray:
        self.best_solutions_fitness = list(self.best_solutions_fitness)
    if type(self.solutions) is numpy.ndarray:
        self.solutions = self.solutions.tolist()
    if type(self.solutions_fitness) is numpy.ndarray:
        self.solutions_fitness = list(self.solutions_fitness)
    if self.on_start is not None:
        self.on_start(self)
    self.num_fitness_evaluations = 0
    self.run_start_time = time.monotonic()
    if self.generations_completed != 0 and type(self.generations_completed) \
            in self.supported_int_types:
        generation_first_idx = self.generations_completed
        generation_last_idx = self.num_generations + self.generations_completed
    else:
        generation_first_idx = 0
        generation_last_idx = self.num_generations
    self.last_generation_fitness = self.cal_pop_fitness()
    if type(self.last_generation_fitness[0]) in self.supported_int_float_types:
        if self.parent_selection_type in ['nsga2', 'tournament_nsga2', 'nsga3',
                                          'tournament_nsga3']:
            raise TypeError(
                f"Incorrect parent selection type. The fitness function returned a single "
                f"numeric fitness value which means the problem is single-objective. But the "
                f"parent selection type {self.parent_selection_type} is used which only "
                f"works for multi-objective optimization problems.")
    elif (type(self.last_generation_fitness[0]) in [list, tuple, numpy.ndarray]
          and self.parent_selection_type in ('nsga3', 'tournament_nsga3')):
        self._bootstrap_nsga3_reference_points()
    best_solution, best_solution_fitness, _ = self.best_solution(
        pop_fitness=self.last_generation_fitness)
    if self.save_best_solutions:
        self.best_solutions.append(list(best_solution))
    return {"generation": generation_first_idx, "last": generation_last_idx,
            "best_solution_fitness": best_solution_fitness, "unchanged_generations": 0,
            "stopped": False}


def _generation(self: Any, loop: dict[str, Any]) -> None:
    """One iteration of ``GA.run()``'s generation loop."""
    generation = loop["generation"]
    self.run_loop_head(loop["best_solution_fitness"])
    previous_best_fitness = self.best_solutions_fitness[-1]
    self.run_select_parents()
    self.run_crossover()
    self.run_mutation()
    self.run_update_population()
    if (any(callable(operator) for operator in
            (self.parent_selection_type, self.crossover_type, self.mutation_type))
            or any(callback is not None for callback in
                   (self.on_parents, self.on_crossover, self.on_mutation))):
        self._saved_fitness_indexes = {}
    self.generations_completed = generation + 1
    self.previous_generation_fitness = self.last_generation_fitness.copy()
    self.last_generation_fitness = self.cal_pop_fitness()
    best_solution, best_solution_fitness, _ = self.best_solution(
        pop_fitness=self.last_generation_fitness)
    loop["best_solution_fitness"] = best_solution_fitness
    if numpy.array_equal(previous_best_fitness, best_solution_fitness):
        loop["unchanged_generations"] += 1
    else:
        loop["unchanged_generations"] = 0
    if self.save_best_solutions:
        self.best_solutions.append(list(best_solution))
    loop["generation"] = generation + 1
    if self.on_generation is not None:
        r = self.on_generation(self)
        self._saved_fitness_indexes = {}
        if type(r) is str and r.lower() == "stop":
            loop["stopped"] = True
            return
    if self.stop_criteria is not None:
        loop["stopped"] = _stop(self, loop["unchanged_generations"])


def _stop(self: Any, unchanged_generations: int) -> bool:
    """``GA.run()``'s ``stop_criteria`` block: True when a criterion says stop."""
    stop_run = False
    for criterion in self.stop_criteria:
        if criterion[0] == "reach":
            if type(self.last_generation_fitness[0]) in self.supported_int_float_types:
                if max(self.last_generation_fitness) >= criterion[1]:
                    stop_run = True
                    break
            elif type(self.last_generation_fitness[0]) in [list, tuple, numpy.ndarray]:
                n_obj = len(self.last_generation_fitness[0])
                if len(criterion[1:]) > 1 and len(criterion[1:]) != n_obj:
                    self.valid_parameters = False
                    raise ValueError(
                        f"When the 'reach' keyword is used with the 'stop_criteria' parameter "
                        f"for solving a multi-objective problem, then the number of numeric "
                        f"values following the keyword can be:\n1) A single numeric value to "
                        f"be used across all the objective functions.\n2) A number of numeric "
                        f"values equal to the number of objective functions.\nBut the value "
                        f"{criterion} found with {len(criterion)-1} numeric values which is "
                        f"not equal to the number of objective functions {n_obj}.")
                stop_run = True
                for obj_idx in range(n_obj):
                    if len(criterion[1:]) == n_obj:
                        reach_fitness_value = criterion[obj_idx + 1]
                    elif len(criterion[1:]) == 1:
                        reach_fitness_value = criterion[1]
                    else:
                        self.valid_parameters = False
                        raise ValueError(
                            f"The number of values {len(criterion[1:])} does not equal the "
                            f"number of objectives {n_obj}.")
                    if not max(self.last_generation_fitness[:, obj_idx]) >= reach_fitness_value:
                        stop_run = False
                        break
        elif ((criterion[0] == "saturate" and unchanged_generations >= criterion[1])
              or (criterion[0] == "time"
                  and time.monotonic() - self.run_start_time >= float(criterion[1]))
              or (criterion[0] == "evaluations"
                  and self.num_fitness_evaluations >= int(criterion[1]))):
            stop_run = True
            break
    return stop_run


def _finish(self: Any) -> None:
    """``GA.run()`` after its generation loop."""
    self._save_population_snapshot()
    self.run_select_parents(call_on_parents=False)
    if self.keep_elitism > 0:
        self.last_generation_elitism, self.last_generation_elitism_indices = \
            self.steady_state_selection(self.last_generation_fitness,
                                        num_parents=self.keep_elitism)
    best_solution, best_solution_fitness, _ = self.best_solution(
        pop_fitness=self.last_generation_fitness)
    if self.save_best_solutions:
        self.best_solutions[-1] = best_solution.tolist()
    self.best_solutions_fitness.append(numpy.copy(best_solution_fitness)
                                       if isinstance(best_solution_fitness, numpy.ndarray)
                                       else best_solution_fitness)
    self.best_solutions_generations.append(self.generations_completed)
    self._update_best_solution_generation()
    self.run_completed = True
    if self.on_stop is not None:
        self.on_stop(self, self.last_generation_fitness)
    self.best_solutions = numpy.array(self.best_solutions, dtype=self.population.dtype)
    self.previous_generation_fitness = self.last_generation_fitness.copy()
