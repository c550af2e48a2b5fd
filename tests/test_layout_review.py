"""Review 31 of the layout of saved numpy arrays (``resumable/_layout.py``).

Each test reproduces one defect the review found (its reproducers are quoted) and failed
on the layout before the fix.
"""

from __future__ import annotations

import pickle
from typing import Any

import numpy as np
import pytest
from numpy.lib.stride_tricks import as_strided, sliding_window_view

from resumable import _layout
from resumable.serializers import dumps_frames, get_serializer, loads_frames


def _frames(obj: Any, serializer: str = "pickle") -> list[Any]:
    return list(dumps_frames(get_serializer(serializer), obj, "state"))


def _round_trip(obj: Any, serializer: str = "pickle") -> Any:
    frames = _frames(obj, serializer)
    return loads_frames(get_serializer(serializer), [memoryview(f) for f in frames])


def _size(obj: Any) -> int:
    return sum(memoryview(f).nbytes for f in _frames(obj))


def _read_only(a: np.ndarray) -> np.ndarray:
    a.flags.writeable = False
    return a


# -- 1. pandas copy-on-write -----------------------------------------------------------


def test_pandas_objects_that_share_lazily_stay_independent() -> None:
    """A Series taken from a DataFrame shares its memory lazily (copy-on-write): a write
    to it copies first. The layout rebuilt the arrays in the managers' state as views of
    one span, so after a resume ``s.iloc[0] = 99`` changed ``df`` (t_pandas.py)."""
    pd = pytest.importorskip("pandas")

    def make() -> dict[str, Any]:
        df = pd.DataFrame({"a": np.arange(5.0), "b": np.arange(5.0) * 2,
                           "c": pd.Categorical(list("xyzxy"))})
        return {"df": df, "s": df["a"], "head": df.iloc[:3], "c": df["c"],
                "indexed": df.set_index("a", drop=False)}

    def scenario(state: dict[str, Any]) -> tuple[Any, ...]:
        state["s"].iloc[0] = 99.0
        state["head"].iloc[1, 0] = -1.0
        state["indexed"].iloc[2, 0] = 42.0
        df = state["df"]
        return (float(df.iloc[0, 0]), float(df.iloc[1, 0]), float(df.iloc[2, 0]),
                list(state["indexed"].index), float(state["s"].iloc[0]))

    live = scenario(make())
    assert live == scenario(pickle.loads(pickle.dumps(make(), protocol=5)))
    assert scenario(_round_trip(make())) == live
    assert scenario(_round_trip(make(), "cloudpickle")) == live


def test_a_read_only_array_from_pandas_stays_read_only() -> None:
    """``df.to_numpy()`` is a read-only view of the frame's memory (copy-on-write); it
    came back writeable, and a write through it changed the resumed ``df``."""
    pd = pytest.importorskip("pandas")
    df = pd.DataFrame({"a": np.arange(5.0), "b": np.arange(5.0) * 2})
    arr = df.to_numpy()
    assert not arr.flags.writeable
    got = _round_trip({"df": df, "arr": arr})
    assert not got["arr"].flags.writeable
    with pytest.raises(ValueError):
        got["arr"][0, 0] = 123.0
    assert float(got["df"].iloc[0, 0]) == 0.0


# -- 2. views of a much larger buffer ---------------------------------------------------


def test_samples_of_a_large_buffer_not_in_the_state_are_saved_as_their_elements() -> None:
    """``{"head": big[:10], "sample": big[::100000]}`` with ``big`` (160 MB) not in the
    state made a 159 MB checkpoint (numpy's pickle: 1.9 KB): the two arrays share memory,
    and were saved as views of all the bytes between them (t_size.py head_and_sample).
    Saved as copies instead, they lost their sharing, and samples that kept their strides
    each loaded into a buffer of the whole extent (review 35). Now their elements are
    saved, and written into one blank span on load: sharing and strides as saved."""
    big = np.random.default_rng(0).random(2_000_000)  # 16 MB
    state = {"head": big[:10], "sample": big[::100_000], "more": big[7::100_000]}
    plain = len(pickle.dumps(state, protocol=5))
    assert _size(state) < 4 * plain
    got = _round_trip(state)
    for name in state:
        assert np.array_equal(got[name], state[name])
        assert got[name].strides == state[name].strides  # (the same bits)
    assert np.shares_memory(got["head"], got["sample"])  # (big[0]: a write shows in both)
    got["head"][0] = -1.0
    assert got["sample"][0] == -1.0
    spans = {id(a.base) for a in got.values()}
    assert len(spans) == 1  # (one buffer of the extent, as the live state had one big)


def test_a_sample_does_not_unshare_views_that_overlap_densely() -> None:
    """A sample of a large buffer in the state made the whole cluster copies: ``x`` and
    ``y``, overlapping halves, no longer shared memory after a resume (review 35)."""
    big = np.arange(4_000_000, dtype=np.float64)
    state = {"x": big[0:1000], "y": big[500:1500], "s": big[::100_000]}
    assert _size(state) < 100_000
    got = _round_trip(state)
    got["x"][600] = -1.0
    assert got["y"][100] == -1.0


def test_arrays_that_share_no_byte_are_not_saved_with_the_bytes_between() -> None:
    """``big[::10**6]`` and ``big[5*10**5::10**6]`` share no byte, but their bounds
    overlap: they were saved as views of the 156 MB between them (t_size.py two_samples)."""
    big = np.random.default_rng(0).random(2_000_000)
    state = {"a": big[::100_000], "b": big[50_000::100_000]}
    assert not np.shares_memory(state["a"], state["b"])
    assert _size(state) < 4096
    got = _round_trip(state)
    assert not np.shares_memory(got["a"], got["b"])  # (no byte in common, still)
    for name in state:
        assert np.array_equal(got[name], state[name])
        assert got[name].strides == state[name].strides


def test_views_that_share_memory_densely_still_share() -> None:
    pop = np.random.default_rng(1).random(300_000)
    state = {"head": pop[:10], "odd": pop[1::2], "tail": pop[-5:]}
    got = _round_trip(state)
    assert np.shares_memory(got["head"], got["odd"])
    assert np.shares_memory(got["odd"], got["tail"])
    got["odd"][0] = -1.0
    assert got["head"][1] == -1.0


# -- 3. read-only arrays ---------------------------------------------------------------


@pytest.mark.parametrize("make", [
    lambda: {"a": _read_only(np.arange(10.0)[::2])},
    lambda: {"w": sliding_window_view(np.arange(10.0), 3)},
    lambda: {"b": np.broadcast_to(np.arange(3.0), (4, 3))},
    lambda: (lambda x: {"x": x, "a": _read_only(x[2:6])})(np.arange(10.0)),
    lambda: (lambda b: {"f": np.frombuffer(b, np.float64), "v": np.frombuffer(b)[2:5]})(
        bytes(range(80))),
], ids=["strided", "sliding-window", "broadcast", "view-of-another", "bytes"])
def test_read_only_arrays_stay_read_only(make: Any) -> None:
    """numpy's own pickling keeps an array read-only; ``rebuild_strided`` and
    ``rebuild_view`` made it writeable, and a write through a resumed read-only view
    reached the array it views (t_readonly.py)."""
    state = make()
    got = _round_trip(state)
    for name, arr in state.items():
        assert got[name].flags.writeable == arr.flags.writeable, name
        assert np.array_equal(got[name], arr)
        assert got[name].strides == arr.strides


def test_rebuilds_accept_the_arguments_of_checkpoints_already_written() -> None:
    data = np.arange(3.0)
    out = _layout.rebuild_strided(data, (3,), (16,), data.dtype, 0, 40, 8)
    assert out.flags.writeable and list(out) == [0.0, 1.0, 2.0] and out.strides == (16,)
    span = np.zeros(64, np.uint8)
    view = _layout.rebuild_view(span, 8, (2,), (8,), np.dtype(np.float64))
    assert view.flags.writeable and np.shares_memory(view, span)


# -- 4. unaligned contiguous arrays -------------------------------------------------------


def test_an_unaligned_contiguous_array_keeps_its_offset_and_bits() -> None:
    """An array at an odd address (a record after a 1-byte header) came back on a
    64-byte boundary, and summed to other bits (e2e.py unaligned, t_bits.py)."""
    buf = bytearray(8 * 100_001 + 1)
    u = np.frombuffer(buf, np.float64, offset=1)
    u[:] = np.random.default_rng(0).standard_normal(100_001)
    assert not u.flags.aligned
    F = np.frombuffer(bytearray(8 * 100_000 + 3), np.float64, offset=3).reshape(400, 250).T
    F[...] = u[:100_000].reshape(250, 400)
    assert F.flags.f_contiguous and not F.flags.aligned
    for serializer in ("pickle", "cloudpickle"):
        for arr in (u, F):  # (each alone: not a view of another array in the state)
            got = _round_trip({"arr": arr}, serializer)["arr"]
            assert got.ctypes.data % 64 == arr.ctypes.data % 64
            assert not got.flags.aligned and got.strides == arr.strides
            assert np.array_equal(got, arr)
            assert got.sum() == arr.sum() and got.sum(axis=0).tobytes() == arr.sum(
                axis=0).tobytes()
        got = _round_trip({"u": u}, serializer)["u"]
        assert (got @ got) == (u @ u)


def test_aligned_contiguous_arrays_keep_numpys_reduction() -> None:
    frames = _frames({"a": np.zeros(1000), "F": np.asfortranarray(np.zeros((20, 30)))})
    assert b"rebuild" not in bytes(frames[0])


# -- 5. cloudpickle's per-dump state -------------------------------------------------------


def test_cloudpickle_functions_keep_their_own_globals() -> None:
    """cloudpickle keeps a map from ``id(func.__globals__)`` to the namespace it pickled
    on its Pickler; the kept pickler carried it from one snapshot to the next, and an id
    reused by another namespace resumed a function with the first one's globals
    (t_cp_globals.py: at the 3rd snapshot)."""
    cloudpickle = pytest.importorskip("cloudpickle")

    def make(name: str) -> Any:
        namespace = {"__name__": name, "__package__": name}
        exec("def f():\n    return 1\n", namespace)
        return namespace["f"]

    for i in range(50):
        f = make(f"mod{i}")
        got = _round_trip({"x": np.zeros(1), "f": f}, "cloudpickle")
        assert got["f"].__globals__["__name__"] == f"mod{i}"
        # Freed now, without a gc.collect() (which takes a second in a large process):
        # its id is free for the next namespace
        f.__globals__.clear()
        del f, got
    kept = _layout._local.picklers.get(cloudpickle.Pickler)
    assert kept is not None and not kept.pickler.globals_ref


# -- 6. arrays over one buffer through numpy's DummyArray -------------------------------


def test_a_sliding_window_shares_memory_with_its_array() -> None:
    """``sliding_window_view(x, 7)`` (and ``as_strided``) ends its chain of bases at
    numpy's DummyArray, not at ``x``: it was not grouped with ``x`` and came back as a
    copy, so ``x *= 1.01`` no longer showed through it (e2e.py window)."""
    x = np.random.default_rng(0).random(1000)
    state = {"x": x, "w": sliding_window_view(x, 7), "s": as_strided(x, (10, 3), (80, 8))}
    got = _round_trip(state)
    assert np.shares_memory(got["x"], got["w"]) and np.shares_memory(got["x"], got["s"])
    got["x"] *= 1.01
    assert np.array_equal(got["w"][:, 0], got["x"][:-6])
    assert got["w"].strides == state["w"].strides and not got["w"].flags.writeable
    assert got["s"].strides == state["s"].strides


def test_columns_of_a_matrix_not_in_the_state_share_one_span() -> None:
    """The columns of a matrix the state does not hold overlap in bounds but share no
    byte: asked np.shares_memory pair by pair, a snapshot of 2,000 columns took 5 s, and
    each column, saved on its own in a buffer of its extent, loaded into a copy of
    nearly the whole matrix (6.7 GB for 1,000 columns; review 34). They are one span."""
    matrix = np.arange(300 * 200, dtype=np.float64).reshape(300, 200)
    state = {"cols": [matrix[:, j] for j in range(200)]}
    assert _size(state) < 2 * matrix.nbytes
    got = _round_trip(state)["cols"]
    assert all(np.array_equal(a, b) for a, b in zip(got, state["cols"], strict=True))
    assert got[0].base is got[199].base or np.shares_memory(got[0].base, got[199].base)


def test_a_view_does_not_change_how_its_sample_is_saved() -> None:
    """``x = big[::100]`` kept its strides alone, but came back contiguous (other bits for
    ``x @ x``) once its own view ``x[::2]`` was in the state too (review 34)."""
    big = np.random.default_rng(1).random(400_000)
    x = big[::100]
    got = _round_trip({"x": x, "y": x[::2]})
    assert got["x"].strides == x.strides and got["y"].strides == x[::2].strides
    assert (got["x"] @ got["x"]).tobytes() == (x @ x).tobytes()
