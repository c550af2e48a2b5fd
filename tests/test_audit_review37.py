"""Review 37: false divergences in the value walk (pandas' weak references, bytes that hold
no value) and the return value, which f.audit did not compare."""

from __future__ import annotations

import dataclasses
import itertools
import pickle
import sys
import weakref
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest

from resumable import checkpointed
from resumable._audit import first_difference
from resumable.islands import Archipelago, MigrantConflictError
from resumable.stores._memory import MemoryStore

_INFO = np.finfo(np.longdouble)
X87 = (sys.byteorder == "little" and (_INFO.nexp, _INFO.nmant) == (15, 63)
       and np.dtype(np.longdouble).itemsize > 10)
needs_x87 = pytest.mark.skipif(not X87, reason="long double is not x87's 80-bit format here")
ALIGNED = np.dtype([("flag", np.int8), ("value", np.float64)], align=True)  # 7 padding bytes


def _roundtrip(x: Any) -> Any:
    return pickle.loads(pickle.dumps(x, protocol=5))


def _scribble(arr: Any, start: int, stop: int, byte: int) -> Any:
    """``arr`` (a copy) with bytes [start, stop) of each element set to ``byte``."""
    out = arr.copy()
    out.view(np.uint8).reshape(out.size, -1)[:, start:stop] = byte
    return out


# -- 1. pandas: weak references, objects with a __getstate__ ---------------------------

@pytest.mark.parametrize("make", [
    lambda: pd.DataFrame({"x": [1.0, 2.0], "s": ["a", None]}),
    lambda: pd.Series([1.0, float("nan")], index=["p", "q"], name="s"),
])
def test_equal_pandas_objects_unpickled_separately_are_equal(make: Any) -> None:
    """Each has a ._flags._obj weakref to itself; a weakref's == asks the DataFrame's,
    which cannot be made a bool: that was a difference."""
    assert first_difference(_roundtrip(make()), _roundtrip(make())) is None


def test_a_real_difference_in_a_dataframe_is_still_found() -> None:
    a = _roundtrip(pd.DataFrame({"x": [1.0, 2.0]}))
    b = _roundtrip(pd.DataFrame({"x": [1.0, 2.5]}))
    found = first_difference(a, b)
    assert found is not None
    assert found.path.startswith("state._mgr"), found  # (the attribute's path, review 38)
    assert (found.expected, found.actual) == ("np.float64(2.0)", "np.float64(2.5)")
    renamed = first_difference(pd.Series([1.0], name="s"), pd.Series([1.0], name="t"))
    assert renamed is not None and renamed.path == "state._name", renamed


class _Holder:
    def __init__(self, value: Any, target: Any = None) -> None:
        self.value = value
        self.ref = weakref.ref(self if target is None else target)


def test_weak_references_compare_by_what_they_point_to() -> None:
    frames = [_roundtrip(pd.DataFrame({"x": [1.0]})) for _ in range(2)]
    assert first_difference(_Holder(1, frames[0]), _Holder(1, frames[1])) is None
    # a reference back to the object itself (being compared): a cycle
    assert first_difference(_Holder([1]), _Holder([1])) is None
    other = [_Holder([2]), _Holder([3])]
    found = first_difference(_Holder(0, other[0]), _Holder(0, other[1]))
    assert found is not None and found.path == "state.ref().value[0]", found
    gone = _Holder(None)
    dead = _Holder(0, gone)
    del gone
    found = first_difference(_Holder(0, frames[0]), dead)
    assert found is not None and found.path == "state.ref", found
    assert "dead" in found.reason and "dead" in found.actual


EVENT = "generation done"


@checkpointed(store="memory://review37-df")
def frame_and_log(n: int, *, state: Any = None) -> Any:
    """After a resume the log's strings are no longer one object: other pickle bytes."""
    state = state or {"g": 0, "df": pd.DataFrame({"x": [0.0]}), "log": []}
    while state["g"] < n:
        state["g"] += 1
        state["df"] = pd.DataFrame({"x": [float(state["g"])]})
        state["log"].append(EVENT)
        yield state


@checkpointed(store="memory://review37-df-fresh")
def frame_and_tags(n: int, *, state: Any = None) -> Any:
    """A set of strings: another PYTHONHASHSEED pickles it in another order."""
    state = state or {"g": 0}
    while state["g"] < n:
        state["g"] += 1
        state["df"] = pd.DataFrame({"x": np.arange(3.0) * state["g"]})
        state["tags"] = frozenset({"alpha", "beta", "gamma", f"g{state['g']}"})
        yield state


def test_a_dataframe_body_passes_the_audit() -> None:
    report = frame_and_log.audit(4)
    assert report.ok, report
    assert MemoryStore("review37-df").list("") == []


def test_a_dataframe_body_passes_the_audit_in_fresh_processes() -> None:
    report = frame_and_tags.audit(3, steps=2, fresh_process=True)
    assert report.ok, report


def test_a_resumed_island_may_republish_an_equal_dataframe(tmp_path: Path) -> None:
    """Equal values, other pickle bytes (a column name shared with another string in
    one of them): the same emigrants, no MigrantConflictError."""
    arch = Archipelago(str(tmp_path), "exp", islands=2, every=1, timeout=1)
    name = "".join(["fit", "ness"])
    arch.publish(0, 1, {"best": pd.DataFrame({name: [1.0, 2.0]}), "column": name})
    again = Archipelago(str(tmp_path), "exp", islands=2, every=1, timeout=1)
    again.publish(0, 1, {"best": pd.DataFrame({"".join(["fit", "ness"]): [1.0, 2.0]}),
                         "column": "".join(["fit", "ness"])})
    with pytest.raises(MigrantConflictError, match=r"emigrants\['best'\]"):
        again.publish(0, 1, {"best": pd.DataFrame({name: [1.0, 2.5]}), "column": name})


# -- 2. bytes that hold no value -------------------------------------------------------

@needs_x87
@pytest.mark.parametrize("dtype", [np.longdouble, np.clongdouble, np.dtype(">g")])
def test_long_doubles_compare_by_their_ten_value_bytes(dtype: Any) -> None:
    a = np.array([1.5, -0.0, np.inf], dtype=dtype)
    size = a.dtype.itemsize // (2 if a.dtype.kind == "c" else 1)
    pad = slice(0, size - 10) if a.dtype.byteorder == ">" else slice(10, size)
    b = _scribble(a, pad.start, pad.stop, 0xAB)
    if a.dtype.kind == "c":
        b = _scribble(b, size + pad.start, size + pad.stop, 0xCD)
    assert a.tobytes() != b.tobytes()
    assert first_difference(a, b) is None
    assert first_difference([a[0]], [b[0]]) is None  # numpy scalars copy the padding
    c = b.copy()
    c[1] = 0.0  # -0.0 and 0.0: other bits
    found = first_difference(a, c)
    assert found is not None and found.path == "state[1]", found
    assert "1 of 3 element(s) differ" in found.reason


@needs_x87
def test_long_double_nans_differ_by_their_bits_and_the_detail_shows_them() -> None:
    a = np.array([np.nan], dtype=np.longdouble)
    b = _scribble(a, 10, 16, 0x5A)
    assert first_difference(a, b) is None  # the same NaN
    b.view(np.uint8)[0] ^= 1  # another payload
    found = first_difference(a, b)
    assert found is not None and found.path == "state[0]", found
    assert found.expected == "np.longdouble('nan') (bits 7fffc000000000000000)", found
    assert found.actual == "np.longdouble('nan') (bits 7fffc000000000000001)", found
    found = first_difference(a[0], b[0])
    assert found is not None and "(bits 7fffc000000000000001)" in found.actual, found


def test_structured_arrays_compare_field_by_field_not_their_padding() -> None:
    a = np.zeros(3, dtype=ALIGNED)
    a["flag"], a["value"] = 1, [0.5, 1.5, 2.5]
    b = _scribble(a, 1, 8, 0xCD)
    assert a.tobytes() != b.tobytes()
    assert first_difference(a, b) is None
    assert first_difference(a[2], b[2]) is None  # np.void scalars
    nested = np.dtype([("tag", np.int8), ("pair", ALIGNED, (2,))], align=True)
    n = np.zeros(2, dtype=nested)
    n["pair"]["value"] = 3.25
    m = _scribble(_scribble(n, 1, 8, 0xEE), 9, 16, 0xEF)  # tag's padding, pair[0]'s
    assert first_difference(n, m) is None
    c = b.copy()
    c["value"][1] = -0.0
    found = first_difference(a, c)
    assert found is not None and found.path == "state[1]", found
    assert "differ" in found.reason


def test_structured_padding_is_not_hidden_where_it_is_a_field() -> None:
    """Packed (no padding): every byte is a field's."""
    packed = np.dtype([("flag", np.int8), ("value", np.float64)])
    a = np.zeros(2, dtype=packed)
    b = _scribble(a, 1, 2, 0x01)
    assert first_difference(a, b) is not None


_ROUNDS = itertools.count(1)  # which run of the body this is: only the padding sees it


@checkpointed(store="memory://review37-pad")
def padded(n: int, *, state: Any = None) -> Any:
    """The same values every run; padding left as the memory was (here: the run's number)."""
    state = state or {"i": 0}
    run = next(_ROUNDS) % 256
    while state["i"] < n:
        state["i"] += 1
        rec = _scribble(np.zeros(2, dtype=ALIGNED), 1, 8, run)
        rec["flag"], rec["value"] = 1, state["i"] / 3
        state["rec"] = rec
        if X87:
            state["x"] = _scribble(np.array([1.5, state["i"]], dtype=np.longdouble),
                                   10, 16, run)
            state["x0"] = state["x"][0]
        yield state


def test_padding_bytes_do_not_make_an_audit_diverge() -> None:
    report = padded.audit(4, steps=3)
    assert report.ok, report
    assert report.resumes == 3


@needs_x87
def test_a_resumed_island_may_republish_equal_long_doubles(tmp_path: Path) -> None:
    arch = Archipelago(str(tmp_path), "exp", islands=2, every=1, timeout=1)
    first = np.array([1.5, 2.5, 3.5], dtype=np.longdouble)
    arch.publish(0, 1, _scribble(first, 10, 16, 0x11))
    arch.publish(0, 1, _scribble(first, 10, 16, 0x22))
    with pytest.raises(MigrantConflictError, match=r"emigrants\[2\]"):
        arch.publish(0, 1, _scribble(first + np.array([0, 0, 1]), 10, 16, 0x22))


# -- 3. the return value ---------------------------------------------------------------

@checkpointed(store="memory://review37-ret")
def evolve(n: int, *, state: Any = None) -> Any:
    state = state or {"g": 0, "x": 1}
    history = []  # lives outside the state: a resume forgets it
    while state["g"] < n:
        state["g"] += 1
        state["x"] = state["x"] * 3 % 11
        history.append(state["x"])
        yield state
    return {"best": max(history, default=0)}


@checkpointed(store="memory://review37-ret")
def evolve_state_only(n: int, *, state: Any = None) -> Any:
    state = state or {"g": 0, "x": 1, "history": []}
    while state["g"] < n:
        state["g"] += 1
        state["x"] = state["x"] * 3 % 11
        state["history"].append(state["x"])
        yield state
    return {"best": max(state["history"])}


@checkpointed(store="memory://review37-ret")
def last_seen(n: int, *, state: Any = None) -> Any:
    state = state or {"g": 0}
    while state["g"] < n:
        state["g"] += 1
        last = state["g"]  # set only in the loop: a resume after the last step has none
        yield state
    return last


@checkpointed(store="memory://review37-ret")
def budgeted(n: int, *, state: Any = None) -> Any:
    state = state or {"g": 0}
    budget = 3  # per call, not per run: a resume yields more than the uninterrupted run
    while state["g"] < n and budget > 0:
        budget -= 1
        state["g"] += 1
        yield state
    return state["g"]


@pytest.mark.parametrize("fresh_process", [False, True])
def test_a_return_value_from_outside_the_state_diverges(fresh_process: bool) -> None:
    report = evolve.audit(4, steps=10, fresh_process=fresh_process)
    assert not report.ok, report
    assert (report.step, report.resumed_from, report.path) == (5, 2, "result['best']")
    assert report.detail is not None
    assert report.detail.startswith("the return value differs: values differ; "
                                    "uninterrupted: 9; resumed from step 2"), report.detail
    assert report.detail.endswith(": 5"), report.detail
    assert MemoryStore("review37-ret").list("") == []


def test_a_return_value_from_the_state_passes() -> None:
    report = evolve_state_only.audit(4, steps=10)
    assert report.ok and report.returned, report
    assert (report.steps, report.resumes) == (4, 5)
    assert "every resumed state and return value is bit-identical" in str(report)
    assert evolve.audit(4, steps=10, exclude=["result['best']"]).ok


def test_a_body_that_fails_to_return_after_its_last_checkpoint_diverges() -> None:
    """Killed after the last step's checkpoint, before the result was stored."""
    report = last_seen.audit(3, steps=5)
    assert not report.ok, report
    assert (report.step, report.resumed_from, report.path) == (4, 3, None), report
    assert "raised UnboundLocalError" in str(report.detail)
    assert "instead of returning after step 3" in str(report.detail)


def test_a_resume_that_yields_where_the_run_returned_diverges() -> None:
    report = budgeted.audit(10, steps=5)
    assert not report.ok, report
    assert (report.step, report.resumed_from, report.path) == (4, 1, None), report
    assert "the body yielded step 4 where the uninterrupted run returned" in str(
        report.detail)


def test_a_run_still_going_after_the_steps_compares_no_return_value() -> None:
    report = evolve.audit(10, steps=3)
    assert report.ok and not report.returned, report
    assert (report.steps, report.resumes) == (3, 3)


# -- review 38: exclude= paths, for the return value and for objects with __getstate__ ----


def _clocked(n: int, *, state: Any = None) -> Any:
    import time

    state = state or {"g": 0, "seconds": 0.0}
    while state["g"] < n:
        state = {"g": state["g"] + 1, "seconds": state["seconds"] + time.perf_counter()}
        yield state
    return state  # (the GA example returns its state: state['seconds'] differs here too)


def test_an_excluded_state_path_is_excluded_from_the_return_value(tmp_path: Path) -> None:
    """The documented GA audit (exclude=["state['seconds']"]) failed at result['seconds']
    once the return value was compared (review 38)."""
    f = checkpointed(store=str(tmp_path), run_id="clocked")(_clocked)
    report = f.audit(3, steps=5, exclude=["state['seconds']"])
    assert report.ok and report.returned, report
    assert not f.audit(3, steps=5).ok  # (without it the seconds differ, also returned)


class _Cached:
    """The "drop the cache" idiom: its own __getstate__."""

    def __init__(self, t: float) -> None:
        self.t, self.cache = t, {}

    def __getstate__(self) -> dict[str, Any]:
        return {"t": self.t}


@dataclasses.dataclass(frozen=True, slots=True)
class _Point:
    x: int
    t: float


def test_exclude_paths_of_objects_with_their_own_getstate_are_attribute_paths() -> None:
    """exclude=["state['m'].t"] stopped matching once such objects were compared by what
    __getstate__ returns (state['m'].__getstate__()['t']); a slots dataclass's field
    became a position (review 38). The paths are the attributes' again."""
    a = {"m": _Cached(1.0), "p": _Point(1, 1.0)}
    b = {"m": _Cached(2.0), "p": _Point(1, 2.0)}
    found = first_difference(a, b)
    assert found is not None and found.path == "state['m'].t", found
    found = first_difference(a, b, exclude=["state['m'].t"])
    assert found is not None and found.path == "state['p'].t", found
    assert first_difference(a, b, exclude=["state['m'].t", "state['p'].t"]) is None
