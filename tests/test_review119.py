"""Review 119 (of the RNG key spelling and the run-id encoding): enum keys in spawn
workers, numpy scalar keys, ints past str()'s digit limit, NaN's bits, one generator
under several keys."""

from __future__ import annotations

import enum
import logging
import math
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from resumable import _rng, checkpointed
from resumable._runid import encode_value

from .rng_keys_child import resumed_in_another_order


def _evolve(streams: Any, n: int, *, state: Any = None) -> Any:
    state = state or {"g": 0, "draws": []}
    while state["g"] < n:
        state["g"] += 1
        state["draws"].append([round(float(r.random()), 9) for r in streams.values()])
        yield state
    return state["draws"]


def _resumed_with(tmp_path: Path, first: Any, then: Any,
                  caplog: pytest.LogCaptureFixture) -> tuple[Any, Any]:
    """(the uninterrupted run's result with ``then()``'s arguments, the result of a run
    stopped at step 2 with ``first()``'s and resumed with ``then()``'s)."""
    reference = checkpointed(store=str(tmp_path / "ref"))(_evolve)(then(), 4)
    f = checkpointed(store=str(tmp_path / "run"))(_evolve)
    assert f.run_id(first(), 4) == f.run_id(then(), 4)
    it = f.iter(first(), 4)
    next(it)
    next(it)
    it.close()  # (saves step 2)
    with caplog.at_level(logging.WARNING, logger="resumable"):
        got = f(then(), 4)
    assert "no state for the RNG" not in caplog.text, caplog.text
    return reference, got


# -- D1: an enum key in a multiprocessing spawn worker ------------------------------------

def test_an_enum_key_is_spelled_alike_in_a_spawn_worker(tmp_path: Path) -> None:
    """A spawn worker imports the script as ``__mp_main__``: its enum keys were spelled
    ``<__mp_main__.Region.EU>`` there, ``<__main__.Region.EU>`` in the script's process,
    under one run id; the worker's resume found no state for the generators."""
    resumed_in_another_order(tmp_path, "enum", spawn=True)


def test_an_enum_of_the_script_is_spelled_as_the_run_id_names_it() -> None:
    def member(module: str) -> Any:
        cls = enum.Enum("Op", {"MUTATE": 1})
        cls.__module__ = module
        return cls.MUTATE

    main, worker = member("__main__"), member("__mp_main__")
    assert _rng.key_texts([(0, worker)]) == _rng.key_texts([(0, main)]) == [
        "<__main__.Op.MUTATE>"]


# -- D3: numpy scalar keys the run id takes as the plain value ---------------------------

@pytest.mark.parametrize(("numpy_key", "plain"), [
    (np.float64(0.1), 0.1), (np.str_("mutate"), "mutate"), (np.bytes_(b"x"), b"x"),
    (np.complex128(1 + 2j), 1 + 2j), ((np.float64(0.5), np.str_("a")), (0.5, "a")),
    (np.float64(-0.0), -0.0), (np.float64("inf"), math.inf),
])
def test_numpy_keys_the_run_id_takes_as_plain_values_are_spelled_so(
        numpy_key: Any, plain: Any) -> None:
    assert encode_value(numpy_key, "k") == encode_value(plain, "k")
    assert _rng.key_texts([(0, numpy_key)]) == _rng.key_texts([(0, plain)])
    assert _rng.key_texts([(0, numpy_key)]) == [repr(plain)]


@pytest.mark.parametrize(("numpy_key", "plain"), [
    (np.int64(3), 3), (np.bool_(True), True), (np.float32(0.5), 0.5),
])
def test_numpy_keys_the_run_id_tells_apart_are_spelled_apart(numpy_key: Any, plain: Any) -> None:
    assert encode_value(numpy_key, "k") != encode_value(plain, "k")
    assert _rng.key_texts([(0, numpy_key)]) != _rng.key_texts([(0, plain)])


def test_a_run_keyed_by_linspace_resumes_keyed_by_its_tolist(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """np.float64 keys and the same floats (``.tolist()``) are one run: the resume found
    no state for its generators (spelled by digest, then by repr)."""
    rates = np.linspace(0.1, 0.2, 2)
    reference, got = _resumed_with(
        tmp_path, lambda: {r: np.random.default_rng(i) for i, r in enumerate(rates)},
        lambda: {r: np.random.default_rng(i) for i, r in enumerate(rates.tolist())}, caplog)
    assert got == reference
