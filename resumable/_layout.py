"""numpy arrays in a pickle, laid out as saved: strides, and memory that arrays share.

numpy pickles each array on its own: a strided view (``x[::3]``) comes back
C-contiguous, and two arrays that share memory (``head = pop[:5]``) come back as two
copies. Both compute other bits than the never-saved state: a reduction over a strided
array runs another kernel, and a write through one view no longer shows in the other.

``dumps`` pickles with a ``dispatch_table`` entry for exact ``ndarray``s (a plain dict:
other objects pay nothing; subclasses keep numpy's own reduction):

- a C- or F-contiguous array is reduced as numpy does (one out-of-band buffer);
- a strided one as its elements, contiguous (not the gaps between them), with its
  strides; loading lays them out again in an aligned buffer of the original extent;
- arrays whose bytes overlap (found after the pass: arrays are grouped by the object
  that owns their memory, and only groups of two or more have their bounds compared)
  are pickled again, each as a view of one shared span of bytes, pickled once.

Object arrays keep numpy's reduction (their elements are pickled objects, not memory).
"""

from __future__ import annotations

import copyreg
import pickle
import threading
import types
from collections.abc import Callable, Mapping
from typing import Any

from . import _numpy
from ._aligned import ALIGN, aligned_buffer


def _placed(np: Any, n: int, pad: int) -> Any:
    """``n`` writable bytes at ``pad`` bytes past a 64-byte boundary."""
    return np.frombuffer(aligned_buffer(pad + n), np.uint8)[pad:]


def rebuild_strided(data: Any, shape: tuple[int, ...], strides: tuple[int, ...],
                    dtype: Any, offset: int, extent: int, pad: int = 0) -> Any:
    """A strided array as it was saved: its elements in a buffer of its extent, whose
    first byte is where it was relative to a 64-byte boundary (``pad``)."""
    np = _numpy.loaded()
    assert np is not None  # (data is an ndarray: numpy is loaded)
    out = np.ndarray(shape, dtype, buffer=_placed(np, extent, pad), offset=offset,
                     strides=strides)
    out[...] = data
    return out


def rebuild_span(data: Any, pad: int) -> Any:
    """The bytes some arrays shared, placed as they were relative to a 64-byte boundary
    (so each view's alignment is what it was: unaligned memory computes other bits)."""
    if pad == 0:
        return data  # (loaded on a 64-byte boundary)
    np = _numpy.loaded()
    assert np is not None
    out = _placed(np, data.nbytes, pad)
    out[...] = data
    return out


def rebuild_view(span: Any, offset: int, shape: tuple[int, ...], strides: tuple[int, ...],
                 dtype: Any) -> Any:
    """One of the arrays that shared memory: a view of the span they share."""
    np = _numpy.loaded()
    assert np is not None
    return np.ndarray(shape, dtype, buffer=span, offset=offset, strides=strides)


class _Span:
    """Bytes ``[low, high)`` of memory some arrays share, as an array interface; keeps
    the arrays (and so the memory) alive while it is pickled."""

    def __init__(self, low: int, high: int, keep: list[Any]) -> None:
        self.__array_interface__ = {"data": (low, False), "shape": (high - low,),
                                    "typestr": "|u1", "version": 3}
        self.keep = keep


def _owner(arr: Any, ndarray: type) -> Any:
    """The object whose memory ``arr`` uses: the end of its chain of bases. (Not a
    memoryview's exporter: arrays loaded from one object's frames each have a frame of
    their own, and frames do not overlap.)"""
    while isinstance(arr.base, ndarray):
        arr = arr.base
    return arr if arr.base is None else arr.base


def _data(arr: Any) -> int:
    return int(arr.__array_interface__["data"][0])


_NONE: frozenset[int] = frozenset()
_NO_PLAN: dict[int, tuple[Any, int]] = {}  # (never written to)
_NO_SPANS: dict[int, int] = {}


class _Arrays:
    """One pickling pass's reduction of exact ndarrays, and what it saw of them."""

    __slots__ = ("keep", "ndarray", "np", "owners", "plain", "plan", "spans")

    def __init__(self, np: Any, plan: dict[int, tuple[Any, int]]) -> None:
        self.np = np
        self.ndarray = np.ndarray
        self.plan = plan  # id(array) -> (span, offset): pickled as views of the span
        self.plain: set[int] | frozenset[int] = _NONE  # copies made here: numpy's reduction
        self.spans: dict[int, int] = _NO_SPANS  # id(span) -> its first byte's address % 64
        self.owners: dict[int, list[Any]] = {}  # id(owner) -> its arrays in the pickle
        self.keep: list[Any] = []  # the copies (their ids must not be reused meanwhile)

    def reduce(self, arr: Any) -> Any:
        if arr.dtype.hasobject or id(arr) in self.plain:
            return arr.__reduce_ex__(5)
        if self.spans and id(arr) in self.spans:
            data = arr.view()
            self._plain(data)
            return (rebuild_span, (data, self.spans[id(arr)]))
        if self.plan:
            planned = self.plan.get(id(arr))
            if planned is not None:
                span, offset = planned
                return (rebuild_view, (span, offset, arr.shape, arr.strides, arr.dtype))
        if arr.size:
            self.owners.setdefault(id(_owner(arr, self.ndarray)), []).append(arr)
        flags = arr.flags
        if flags.c_contiguous or flags.f_contiguous:
            return arr.__reduce_ex__(5)
        low, high = _bounds(arr)
        data = self.np.ascontiguousarray(arr)
        self._plain(data)
        return (rebuild_strided, (data, arr.shape, arr.strides, arr.dtype, _data(arr) - low,
                                  high - low, low % ALIGN))

    def _plain(self, copy: Any) -> None:
        """An array made here, reduced as numpy does, kept alive until the pass ends."""
        if self.plain is _NONE:
            self.plain = set()
        self.plain.add(id(copy))  # type: ignore[union-attr]
        self.keep.append(copy)

    def reset(self) -> None:
        """Let go of what one pass saw (the state's arrays, the spans)."""
        if self.owners or self.keep or self.plan or self.spans or self.plain:
            self.owners, self.keep, self.plan, self.spans, self.plain = (
                {}, [], _NO_PLAN, _NO_SPANS, _NONE)


def _bounds(arr: Any) -> tuple[int, int]:
    """The addresses of an array's first byte and one past its last (size > 0)."""
    low = high = _data(arr)
    for n, stride in zip(arr.shape, arr.strides, strict=True):
        if stride < 0:
            low += (n - 1) * stride
        else:
            high += (n - 1) * stride
    return low, high + arr.itemsize


def _overlaps(owners: dict[int, list[Any]]) -> list[list[tuple[int, int, Any]]]:
    """Clusters of two or more arrays whose bytes overlap: (low, high, array) each."""
    clusters = []
    for arrays in owners.values():
        if len(arrays) < 2:
            continue
        bounded = sorted(((*_bounds(a), a) for a in arrays), key=lambda t: t[0])
        current, high = [bounded[0]], bounded[0][1]
        for item in bounded[1:]:
            if item[0] < high:
                current.append(item)
                high = max(high, item[1])
                continue
            if len(current) > 1:
                clusters.append(current)
            current, high = [item], item[1]
        if len(current) > 1:
            clusters.append(current)
    return clusters


class _Pickler:
    """A pickler for one ``base`` class, with its sink and its array reduction; each
    thread keeps one per class between calls (making a pickler costs more than pickling
    a small state, and a loop snapshots at every yield)."""

    def __init__(self, base: type, np: Any) -> None:
        self.chunks: list[bytes] = []  # what the pickler wrote (a BytesIO's getvalue
        # then truncate costs more than a small state's whole pickle)
        self.sink: list[Any] = [None]
        sink = self.sink
        self.arrays = arrays = _Arrays(np, {})
        self.copyreg = dict(copyreg.dispatch_table)  # (a reducer registered or replaced
        # since: a new pickler)
        table = getattr(base, "dispatch_table", None)  # (cloudpickle's has its own entries)
        # A plain dict: the C pickler looks up the type of every object it reduces in it.
        dispatch = {**(table if isinstance(table, Mapping) else copyreg.dispatch_table),
                    arrays.ndarray: arrays.reduce}
        pickler: Any = base.__new__(base)  # type: ignore[call-overload]
        if base is not pickle.Pickler:
            # A subclass with a dispatch_table of its own (cloudpickle's): the C pickler
            # reads the attribute when it is made, and finds the instance's first.
            pickler.dispatch_table = dispatch
        pickler.__init__(types.SimpleNamespace(write=self.chunks.append), protocol=5,
                         buffer_callback=lambda b: sink[0](b))
        pickler.dispatch_table = dispatch
        self.pickler = pickler
        self.busy = False  # (a __reduce__ that pickles a state itself gets its own)

    def dump(self, obj: Any, plan: dict[int, tuple[Any, int]], spans: dict[int, int],
             buffers: list[pickle.PickleBuffer]) -> tuple[bytes, dict[int, list[Any]]]:
        """The pickle, and the owners of the arrays in it (see ``_Arrays``)."""
        arrays = self.arrays
        arrays.plan, arrays.spans = plan, spans
        self.sink[0] = buffers.append
        self.busy = True
        chunks = self.chunks
        try:
            self.pickler.dump(obj)
            main = chunks[0] if len(chunks) == 1 else b"".join(chunks)
            return main, arrays.owners
        finally:
            self.busy = False
            self.pickler.clear_memo()  # (the memo holds the state's objects alive)
            chunks.clear()
            self.sink[0] = None
            arrays.reset()


class _Local(threading.local):
    def __init__(self) -> None:
        self.picklers: dict[type, _Pickler] = {}


_local = _Local()
_np: Any = None  # numpy, once loaded (it stays)


def _pass(obj: Any, base: type, np: Any, plan: dict[int, tuple[Any, int]],
          spans: dict[int, int],
          buffers: list[pickle.PickleBuffer]) -> tuple[bytes, dict[int, list[Any]]]:
    picklers = _local.picklers
    pickler = picklers.get(base)
    if pickler is None or pickler.busy or pickler.copyreg != copyreg.dispatch_table:
        fresh = _Pickler(base, np)  # (or copyreg.pickle registered a reducer meanwhile)
        if pickler is None or not pickler.busy:
            picklers[base] = fresh
        pickler = fresh
    return pickler.dump(obj, plan, spans, buffers)


def dumps(obj: Any, base: type, plain: Callable[..., bytes],
          buffers: list[pickle.PickleBuffer]) -> bytes:
    """``obj`` pickled with its arrays laid out as saved; out-of-band buffers are
    appended to ``buffers``. ``base`` is the Pickler class and ``plain`` the dumps
    function (pickle's, or cloudpickle's): without numpy, that pickles."""
    global _np
    np = _np
    if np is None:
        np = _np = _numpy.loaded()
        if np is None:
            return plain(obj, protocol=5, buffer_callback=buffers.append)
    pickler = _local.picklers.get(base)
    if pickler is None or pickler.busy or pickler.copyreg != copyreg.dispatch_table:
        main, owners = _pass(obj, base, np, _NO_PLAN, _NO_SPANS, buffers)
    else:  # (the kept pickler, without _pass's frame: this runs at every snapshot)
        main, owners = pickler.dump(obj, _NO_PLAN, _NO_SPANS, buffers)
    if not owners:
        return main
    clusters = _overlaps(owners)
    if not clusters:
        return main
    # Again, with each cluster's arrays as views of one span of its bytes.
    plan: dict[int, tuple[Any, int]] = {}
    spans: dict[int, int] = {}
    keep = []
    for cluster in clusters:
        low, high = cluster[0][0], max(t[1] for t in cluster)
        members = [t[2] for t in cluster]
        span = np.asarray(_Span(low, high, members))
        keep.append(span)  # (alive, so that its id stays its own, until pickled)
        spans[id(span)] = low % ALIGN
        for arr in members:
            plan[id(arr)] = (span, _data(arr) - low)
    buffers.clear()
    main, _ = _pass(obj, base, np, plan, spans, buffers)
    return main
