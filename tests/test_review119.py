"""Review 119 (of the RNG key spelling and the run-id encoding): enum keys in spawn
workers, numpy scalar keys, ints past str()'s digit limit, NaN's bits, one generator
under several keys."""

from __future__ import annotations

import enum
import json
import logging
import math
import os
import struct
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from resumable import _rng, checkpointed
from resumable._runid import encode_value, encode_value_as
from resumable.integrations._common import _held_rngs

from .rng_keys_child import resumed_in_another_order
from .test_identity import resumes_under_an_older_record


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


# -- D2, D5: ints past str()'s digit limit -----------------------------------------------

_DIGITS = (600, 4300, 4301, 10000)


def _ints() -> list[int]:
    return [v for d in _DIGITS for v in (10 ** (d - 1) + 7, -(10 ** d - 1))]


def test_a_list_of_ints_past_the_digit_limit_has_a_run_id(tmp_path: Path) -> None:
    """64 ints or more are encoded in bulk, with b"%d": one past 4,300 digits raised
    ValueError, with run_id= and ignore= too (review 119)."""
    from resumable._runid import _atom, _bulk

    def body(xs: Any, *, state: Any = None) -> Any:
        yield 1
        return len(xs)

    big = [10**5000, *range(63)]
    assert checkpointed(store=str(tmp_path / "a"))(body)(big) == 64
    assert checkpointed(store=str(tmp_path / "b"), run_id="fixed")(body)(big) == 64
    assert checkpointed(store=str(tmp_path / "c"), ignore=["xs"])(body)(big) == 64
    for items in (big, _ints() * 8, [*range(60), 10**4299, -(10**4300), 2**14284, 2**14285]):
        out = bytearray()
        assert _bulk(items, out, np)
        one_by_one = bytearray()
        for v in items:
            _atom(v, one_by_one)
        assert out == one_by_one


_CHILD = r"""
import hashlib, json, sys
from resumable._runid import _atom, _bulk, encode_value
from resumable._rng import key_texts
digits = [int(d) for d in sys.argv[1:]]
values = [v for d in digits for v in (10 ** (d - 1) + 7, -(10 ** d - 1))]
def h(b):
    return hashlib.sha256(b).hexdigest()[:16]
out = {
    "each": [h(encode_value(v, "v")) for v in values],
    "list": h(encode_value(values * 8, "v")),
    "tuple": h(encode_value(tuple(values), "v")),
    "keys": key_texts(list(enumerate(values))),
    "tuple keys": key_texts([(0, (v, "a")) for v in values[:1]] + [(1, (values[-1],))]),
}
print(json.dumps(out))
"""


def test_int_run_ids_and_key_spellings_do_not_follow_the_digit_limit() -> None:
    """An int's encoding was decimal where str() took it and hex where it raised, so the
    run id and key spelling of a 600- to 10,000-digit int followed the process's
    PYTHONINTMAXSTRDIGITS (a restart with another setting started over). Decimal below
    10**4300 (encoding 5's bytes under the default limit), hex from there, whatever the
    limit."""
    outputs = {}
    for limit in ("0", "640", None, "8000"):
        env = {k: v for k, v in os.environ.items() if k != "PYTHONINTMAXSTRDIGITS"}
        if limit is not None:
            env["PYTHONINTMAXSTRDIGITS"] = limit
        done = subprocess.run([sys.executable, "-c", _CHILD, *map(str, _DIGITS)],
                              capture_output=True, text=True, env=env, timeout=120)
        assert done.returncode == 0, done.stderr
        outputs[limit] = json.loads(done.stdout)
    assert all(out == outputs[None] for out in outputs.values()), outputs
    keys = outputs[None]["keys"]
    assert keys[:4] == [repr(v) for v in _ints()[:4]]  # (by repr below 10**4300)
    assert all(k.startswith("~") for k in keys[4:])  # (by value from there)
    # (the bytes encoding 5 gave them under the default limit)
    assert encode_value(10**4300 - 1, "v") == b"int:" + str(10**4300 - 1).encode() + b";"
    assert encode_value(10**4300, "v") == b"int:x" + f"{10**4300:x}".encode() + b";"


# -- D6: NaN's bits ----------------------------------------------------------------------

def _nan(bits: int) -> float:
    value: float = struct.unpack("<d", struct.pack("<Q", bits))[0]
    return value


_CANONICAL = struct.unpack("<Q", struct.pack("<d", float("nan")))[0]


class Celsius(float):
    pass


def test_nans_of_other_bits_are_other_runs(tmp_path: Path) -> None:
    """Every NaN was b"float:nan;": f(-nan) returned f(nan)'s result (review 119)."""
    import copy

    @checkpointed(store=str(tmp_path))
    def sign(x: Any, *, state: Any = None) -> Any:
        yield 1
        return math.copysign(1.0, x if not isinstance(x, complex) else x.real)

    nan, negative, payload = float("nan"), -float("nan"), _nan(_CANONICAL | 5)
    assert math.isnan(payload)
    ids = {sign.run_id(v) for v in (nan, negative, payload)}
    assert len(ids) == 3
    assert sign(nan) == 1.0 and sign(negative) == -1.0
    # the canonical NaN keeps encoding 5's bytes (its runs keep their ids)
    assert encode_value(nan, "x") == encode_value_as(nan, "x", 5) == b"float:nan;"
    assert encode_value(copy.copy(nan), "x") == b"float:nan;"
    assert encode_value(math.nan, "x") == encode_value(np.nan, "x") == b"float:nan;"
    assert encode_value([nan] * 70, "x") == encode_value_as([nan] * 70, "x", 5)
    # as an array keeps them: numpy's float64, a list (in bulk or not), complex, subclass
    assert encode_value(np.float64(negative), "x") == encode_value(negative, "x")
    for n in (3, 70):
        assert encode_value([negative] * n, "x") != encode_value([nan] * n, "x")
    assert encode_value(complex(negative, 0), "x") != encode_value(complex(nan, 0), "x")
    assert encode_value(Celsius(negative), "x") != encode_value(Celsius(nan), "x")
    assert encode_value((1, negative), "x") != encode_value((1, nan), "x")


def test_a_fixed_run_with_a_negative_nan_started_under_encoding_5_resumes(
        tmp_path: Path) -> None:
    resumes_under_an_older_record(tmp_path, [1.0, -float("nan")], older=5)


def test_a_derived_run_of_a_negative_nan_under_encoding_5_is_pointed_out(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """The call's id moved: it starts fresh, with a WARNING naming the run encoding 5
    derived for it (as for the earlier encodings)."""
    import hashlib

    from resumable._runid import derive_run_id, encode_arguments

    from .test_identity import _rewrite_identity_record

    url = str(tmp_path / "store")
    crash = [True]

    def body(x: Any, *, state: Any = None) -> Any:
        yield 1
        if crash:
            raise RuntimeError("the pod died")
        return "done"

    negative = -float("nan")
    arguments = {"x": negative}
    old = derive_run_id(body, arguments, None, encode_arguments(arguments, 5))
    train = checkpointed(store=url)(body)
    assert old != train.run_id(negative) and old == train.run_id(float("nan"))
    with pytest.raises(RuntimeError):  # the run encoding 5 started, under that id
        checkpointed(store=url, run_id=old)(body)(negative)

    def as_encoding_5(record: dict[str, Any]) -> None:
        record["encoding"] = 5
        record["arguments"]["x"] = hashlib.sha256(
            encode_value_as(negative, "x", 5)).hexdigest()[:16]

    _rewrite_identity_record(url, old, as_encoding_5)
    crash.clear()
    with caplog.at_level(logging.WARNING, logger="resumable"):
        assert train(negative) == "done"
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1 and f"run_id={old!r}" in warnings[0], warnings


def test_nan_keys_of_other_bits_are_spelled_apart() -> None:
    nan, negative = float("nan"), -float("nan")
    assert _rng.key_texts([(0, nan)]) == ["nan"]  # (as before)
    assert _rng.key_texts([(0, negative)]) != ["nan"]
    assert _rng.key_texts([(0, (1, negative))]) != _rng.key_texts([(0, (1, nan))])
    assert _rng.key_texts([(0, complex(0, negative))]) != _rng.key_texts(
        [(0, complex(0, nan))])
    assert _rng.key_texts([(0, negative)]) == _rng.key_texts([(0, _nan(
        struct.unpack("<Q", struct.pack("<d", negative))[0]))])


# -- D4: one generator under several keys ------------------------------------------------

def test_a_generator_under_several_keys_is_restored_in_another_dict_order(
        tmp_path: Path) -> None:
    """Saved under the first key in dict order: a dict built in another order (from a set,
    under another hash seed) looked for it under another key (review 119)."""
    resumed_in_another_order(tmp_path, "shared", seeds=("1", "2"))


class _Holder:
    pass


def _holder(names: list[str], rng: Any) -> _Holder:
    h = _Holder()
    for name in names:
        setattr(h, name, rng)
    return h


def test_the_path_of_a_shared_generator_does_not_follow_dict_or_attribute_order() -> None:
    rng = np.random.default_rng(1)
    names = ["mutate", "crossover", "select", "b", "a"]
    orders = [names, names[::-1], sorted(names)]
    dicts = [_rng.find({"streams": {n: rng for n in order}}) for order in orders]
    assert dicts[0] == dicts[1] == dicts[2] and len(dicts[0]) == 1
    attrs = [_rng.find({"ga": _holder(order, rng)}) for order in orders]
    assert attrs[0] == attrs[1] == attrs[2] and len(attrs[0]) == 1
    # (a list's items: by position, as before; an argument before the next)
    other = np.random.default_rng(2)
    assert _rng.find({"rngs": [other, rng, rng]}) == [("rngs[0]", other), ("rngs[1]", rng)]
    assert _rng.find({"b": rng, "a": {"x": rng}}) == [("b", rng)]


def test_the_integrations_path_of_a_shared_generator_does_not_follow_dict_order() -> None:
    rng = np.random.default_rng(1)
    names = ["mutate", "crossover", "select"]
    found = []
    for order in (names, names[::-1]):
        holder = _Holder()
        holder.ops = {n: rng for n in order}  # type: ignore[attr-defined]
        middle = _holder(["z"], rng)
        holder.shared = {n: middle for n in order}  # type: ignore[attr-defined]
        found.append(_held_rngs({"toolbox": holder}))
        # (through a container met under several keys: the same path too)
        via = _Holder()
        via.table = {n: _holder(["rng"], rng) for n in ["x"]}  # type: ignore[attr-defined]
        shared = _holder(["rng"], rng)
        via.table = {n: shared for n in order}  # type: ignore[attr-defined]
        found.append(_held_rngs({"problem": via}))
    assert found[0] == found[2] and found[1] == found[3], found
    assert [p for p, _ in found[0]] == ["toolbox.ops['crossover']"]
    assert [p for p, _ in found[1]] == ["problem.table['crossover'].rng"]
