"""Review 142 (run identity, of 3a57ef7): each case failed before its fix.

- An argument array whose dtype leaves padding bytes (a long double's 6 of 16, an aligned
  structured dtype's gaps) hashed them, whatever memory held: another run id in every
  process (a SIGKILLed run started over; under a fixed run id, RunMismatchError).
- A dataclass's slots beyond its fields, an RNG subclass's own attributes, and the class
  a __reduce__'s inherited classmethod is bound to were not part of the run id: calls
  differing only there shared one run, and the second returned the first's result.
"""

from __future__ import annotations

import dataclasses
import functools
import logging
import random
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from resumable import checkpointed
from resumable._runid import encode_value


def _used(dtype: np.dtype, base: int = 0) -> list[tuple[int, int]]:
    """The byte ranges of an item of ``dtype`` that hold its value (x86: a long double's
    first 10 bytes of 16)."""
    if dtype.names is not None:
        return [r for name in dtype.names
                for r in _used(dtype.fields[name][0], base + dtype.fields[name][1])]
    if dtype.kind in "fc" and np.finfo(dtype).nmant == 63:
        part = dtype.itemsize // (2 if dtype.kind == "c" else 1)
        return [(base + k, base + k + 10) for k in range(0, dtype.itemsize, part)]
    return [(base, base + dtype.itemsize)]


def _with_padding(arr: np.ndarray, junk: int) -> np.ndarray:
    """``arr`` again, its padding bytes set to ``junk`` (its values the same)."""
    items = np.frombuffer(arr.tobytes(), dtype=np.uint8).reshape(-1, arr.dtype.itemsize).copy()
    used = np.zeros(arr.dtype.itemsize, dtype=bool)
    for a, b in _used(arr.dtype):
        used[a:b] = True
    items[:, ~used] = junk
    return items.reshape(-1).view(arr.dtype).reshape(arr.shape)


_ALIGNED = np.dtype([("a", np.int8), ("b", np.float64), ("c", np.longdouble)], align=True)


@pytest.mark.parametrize("arr", [
    np.array([0.5, 0.25], dtype=np.longdouble),
    np.array([0.5 + 1j, -2.0], dtype=np.clongdouble),
    np.array([(1, 0.5, 0.25), (2, 1.5, -3.0)], dtype=_ALIGNED),
], ids=["longdouble", "clongdouble", "aligned-struct"])
def test_padding_bytes_are_no_part_of_an_arrays_identity(arr: np.ndarray) -> None:
    a, b = _with_padding(arr, 0x00), _with_padding(arr, 0xA5)
    assert a.tobytes() != b.tobytes()  # (the dtype has padding: the case is real)
    assert np.array_equal(a, b)
    assert encode_value(a, "w") == encode_value(b, "w")
    assert encode_value(a[0], "w") == encode_value(b[0], "w")  # (a scalar of it)
    other = arr.copy()
    other.flat[0] = other.flat[1]
    assert encode_value(other, "w") != encode_value(arr, "w")  # (values still count)


def _summed(store: Path) -> Any:
    @checkpointed(store=str(store))
    def run(x: Any, *, state: Any = None) -> Any:
        state = state or {"i": 0, "x": 0.0}
        while state["i"] < 3:
            state = {"i": state["i"] + 1, "x": state["x"] + x.value()}
            yield state
        return state["x"]

    return run


@dataclasses.dataclass
class Params:
    size: int


class Tuned(Params):
    __slots__ = ("rate",)

    def __init__(self, size: int, rate: float) -> None:
        super().__init__(size)
        self.rate = rate

    def value(self) -> float:
        return self.rate


class Noisy(random.Random):
    def __init__(self, seed: int, scale: float) -> None:
        super().__init__(seed)
        self.scale = scale

    def value(self) -> float:
        return self.scale


class Scaled(np.random.Generator):
    def __init__(self, seed: int, scale: float) -> None:
        super().__init__(np.random.PCG64(seed))
        self.scale = scale

    def value(self) -> float:
        return self.scale


class Model:
    def __init__(self, k: float) -> None:
        self.k = k

    @classmethod
    def create(cls, k: float) -> Model:
        return cls(k)

    def __reduce__(self) -> Any:
        return (type(self).create, (self.k,))

    def value(self) -> float:
        return self.k


class Doubling(Model):
    def value(self) -> float:
        return 2 * self.k


@pytest.mark.parametrize("first, second", [
    (Tuned(3, 0.5), Tuned(3, 2.0)),
    (Noisy(1, 0.5), Noisy(1, 2.0)),
    (Scaled(1, 0.5), Scaled(1, 2.0)),
    (Model(1.0), Doubling(1.0)),
], ids=["dataclass-slot", "random-subclass", "generator-subclass", "reduce-classmethod"])
def test_calls_differing_only_there_have_runs_of_their_own(
        tmp_path: Path, first: Any, second: Any) -> None:
    run = _summed(tmp_path)
    assert run(first) == 3 * first.value()
    assert run(second) == 3 * second.value()  # (not the first call's stored result)
    assert run(first) == 3 * first.value()


# -- the decorated function's own closure ---------------------------------------------


def _factory(store: Path, n: int, seen: list[Any]) -> Any:
    @checkpointed(store=str(store))
    def scaled(x: int, *, state: int | None = None) -> Any:
        seen.append(state)  # (a list it closes over too: no value of the run's)
        s = state or 0
        while s < x:
            s += 1
            yield s
        return s * n

    return scaled


def _warnings(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]


def test_a_stored_result_made_with_other_closure_values_is_warned_about(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """make(3)(4) and make(5)(4) are one run (a closure is no part of the run id: it
    holds a factory's lists and counters too); the second returned the first's 12 without
    a word."""
    seen: list[Any] = []
    assert _factory(tmp_path, 3, seen)(4) == 12
    with caplog.at_level(logging.WARNING, logger="resumable"):
        assert _factory(tmp_path, 3, [])(4) == 12  # (the same values: no warning)
        assert _warnings(caplog) == []
        assert _factory(tmp_path, 5, seen)(4) == 12
    assert any("closure" in m and "n: <int> -> <int>" in m and "pass them as arguments" in m
               for m in _warnings(caplog)), _warnings(caplog)


def test_a_resume_made_with_other_closure_values_is_warned_about(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    class Stop(Exception):
        pass

    @checkpointed(store=str(tmp_path), run_id="job")
    def job(*, state: int | None = None) -> Any:
        s = state or 0
        while s < 4:
            s += 1
            if s == 3 and label == "first":
                raise Stop
            yield s
        return label

    label = "first"
    with pytest.raises(Stop):
        job()
    label = "second"
    with caplog.at_level(logging.WARNING, logger="resumable"):
        assert job() == "second"
    assert any("label: <str> -> <str>" in m for m in _warnings(caplog)), \
        _warnings(caplog)


def test_a_stored_result_written_by_other_code_is_warned_about(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """A resume warned that other code wrote its checkpoint; a stored result did not."""
    def first(*, state: int | None = None) -> Any:
        yield 1
        return "first code"

    def second(*, state: int | None = None) -> Any:
        yield 2
        return "second code"

    second.__qualname__ = first.__qualname__
    assert checkpointed(store=str(tmp_path), run_id="r")(first)() == "first code"
    with caplog.at_level(logging.WARNING, logger="resumable"):
        assert checkpointed(store=str(tmp_path), run_id="r")(second)() == "first code"
    assert any("different code" in m and "returning it anyway" in m
               for m in _warnings(caplog)), _warnings(caplog)


# -- RNGs a callable argument draws from ----------------------------------------------

_SCRIPT_RNG: Any = None  # (a script's global generator, which a lambda reads)


def _draws(kind: str) -> Any:
    """A callable argument drawing from a fresh default_rng(7), and its generator."""
    global _SCRIPT_RNG
    rng = np.random.default_rng(7)
    if kind == "method":
        return rng.random
    if kind == "partial":
        return functools.partial(rng.normal, 0.0, 1.0)
    if kind == "closure":
        return lambda: rng.random()
    _SCRIPT_RNG = rng
    return lambda: _SCRIPT_RNG.random()


@pytest.mark.parametrize("kind", ["method", "partial", "closure", "global"])
def test_an_rng_a_callable_argument_draws_from_is_restored(tmp_path: Path, kind: str) -> None:
    """rng.random, partial(rng.normal, 0, 1), lambda: rng.random() passed as an argument:
    the run id held the generator's state, but the generator was not saved, so a resume
    drew other numbers than the uninterrupted run, without a word."""
    class Stop(Exception):
        pass

    stop_at: list[int] = []

    def walk(draw: Any, *, state: Any = None) -> Any:
        xs = state or []
        while len(xs) < 8:
            if len(xs) + 1 in stop_at:
                raise Stop
            xs = [*xs, draw()]
            yield xs
        return xs

    whole = checkpointed(store=str(tmp_path / "whole"))(walk)(_draws(kind))
    resumable_walk = checkpointed(store=str(tmp_path / "cut"))(walk)
    stop_at.append(5)
    with pytest.raises(Stop):
        resumable_walk(_draws(kind))
    stop_at.clear()
    assert resumable_walk(_draws(kind)) == whole  # (a new process builds it from its seed)


def test_a_seed_sequence_argument_is_warned_about(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    def spawn(seq: Any, *, state: Any = None) -> Any:
        yield 1
        return np.random.default_rng(seq.spawn(1)[0]).random()

    with caplog.at_level(logging.WARNING, logger="resumable"):
        checkpointed(store=str(tmp_path))(spawn)(np.random.SeedSequence(7))
    assert any("seq is a numpy SeedSequence" in m for m in _warnings(caplog)), \
        _warnings(caplog)
