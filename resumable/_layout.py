"""numpy arrays in a pickle, laid out as saved: strides, and memory that arrays share.

numpy pickles each array on its own: a strided view (``x[::3]``) comes back
C-contiguous, and two arrays that share memory (``head = pop[:5]``) come back as two
copies. Both compute other bits than the never-saved state: a reduction over a strided
array runs another kernel, and a write through one view no longer shows in the other.

``dumps`` pickles with a ``dispatch_table`` entry for exact ``ndarray``s (a plain dict:
other objects pay nothing; subclasses keep numpy's own reduction):

- a C- or F-contiguous array on aligned memory is reduced as numpy does (one
  out-of-band buffer);
- a strided one as its elements, contiguous (not the gaps between them), with its
  strides; loading lays them out again in a buffer of the original extent, placed where
  the array was relative to a 64-byte boundary. So is a contiguous array on unaligned
  memory (a record after a 1-byte header): numpy would load it aligned, and unaligned
  memory computes other bits;
- arrays that share memory (found after the pass: arrays are grouped by the object that
  owns their memory, following numpy's ``DummyArray`` of ``as_strided`` and
  ``sliding_window_view``; in groups of two or more, arrays whose bounds overlap) are
  pickled again, each as a view of one shared span of bytes, pickled once. Where the
  arrays hold under half of the span's bytes (``big[:10]`` and ``big[::100000]`` of a
  ``big`` not in the state), the span is saved blank and each array as its elements,
  written into its view on load: sharing, strides and alignment as saved, and the
  checkpoint the size of the elements;
- a read-only array comes back read-only, as numpy's own pickling does.

Object arrays keep numpy's reduction (their elements are pickled objects, not memory),
and so do the arrays inside pandas' block managers (a ``DataFrame``'s, a ``Series``'s):
pandas shares memory between them lazily (copy-on-write: a write copies first) and
tracks that itself, so they must come back independent copies, as pickle makes them.
"""

from __future__ import annotations

import copyreg
import io
import pickle
import sys
import threading
import types
from collections.abc import Callable, Mapping
from typing import Any

from . import _numpy, _rng
from ._aligned import ALIGN, aligned_buffer

# A span whose arrays hold under half its bytes (samples of a buffer the state does not
# hold) is saved as their elements, not its bytes: marked in ``spans`` by this flag.
SPARSE_SPAN = 1 << 8


def _placed(np: Any, n: int, pad: int) -> Any:
    """``n`` writable bytes at ``pad`` bytes past a 64-byte boundary."""
    return np.frombuffer(aligned_buffer(pad + n), np.uint8)[pad:]


def rebuild_strided(data: Any, shape: tuple[int, ...], strides: tuple[int, ...],
                    dtype: Any, offset: int, extent: int, pad: int = 0,
                    writeable: bool = True) -> Any:
    """A strided array as it was saved: its elements in a buffer of its extent, whose
    first byte is where it was relative to a 64-byte boundary (``pad``)."""
    np = _numpy.loaded()
    assert np is not None  # (data is an ndarray: numpy is loaded)
    out = np.ndarray(shape, dtype, buffer=_placed(np, extent, pad), offset=offset,
                     strides=strides)
    out[...] = data
    if not writeable:
        out.flags.writeable = False
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


def rebuild_blank_span(nbytes: int, pad: int) -> Any:
    """The memory some arrays shared, without the bytes between them (they sampled a
    larger buffer): each is written into its view (``rebuild_filled_view``)."""
    np = _numpy.loaded()
    assert np is not None
    return _placed(np, nbytes, pad)


def rebuild_filled_view(span: Any, offset: int, shape: tuple[int, ...],
                        strides: tuple[int, ...], dtype: Any, data: Any,
                        writeable: bool = True) -> Any:
    """One of the arrays that shared a sparse span: a view of it, its elements written."""
    out = rebuild_view(span, offset, shape, strides, dtype)
    out[...] = data
    if not writeable:
        out.flags.writeable = False
    return out


def rebuild_view(span: Any, offset: int, shape: tuple[int, ...], strides: tuple[int, ...],
                 dtype: Any, writeable: bool = True) -> Any:
    """One of the arrays that shared memory: a view of the span they share."""
    np = _numpy.loaded()
    assert np is not None
    out = np.ndarray(shape, dtype, buffer=span, offset=offset, strides=strides)
    if not writeable:
        out.flags.writeable = False
    return out


def restore_state(obj: Any, packed: tuple[Any, Any, Any]) -> None:
    """A pandas manager's state, set as pickle would have (``packed``: the state, the
    manager's own state setter, and the marker that ended its arrays' numpy reduction)."""
    state, setter = packed[0], packed[1]
    if setter is not None:
        setter(obj, state)
        return
    if state is None:
        return
    setstate = getattr(obj, "__setstate__", None)
    if setstate is not None:
        setstate(state)
        return
    slots = None
    if isinstance(state, tuple) and len(state) == 2:
        state, slots = state
    if state:
        obj.__dict__.update(state)
    for name, value in (slots or {}).items():
        setattr(obj, name, value)


class _Leave:
    """Pickled after a pandas manager's state: its arrays are numpy's from there on."""

    __slots__ = ()


_MANAGERS = ("BlockManager", "SingleBlockManager")
_MANAGERS_MODULE = "pandas.core.internals.managers"


def _pandas_managers() -> tuple[type, ...] | None:
    """pandas' block manager classes, once pandas is imported (never imported here)."""
    module = sys.modules.get(_MANAGERS_MODULE)
    if module is None:
        return None
    found = tuple(getattr(module, name, None) for name in _MANAGERS)
    return found if all(isinstance(c, type) for c in found) else None  # type: ignore[return-value]


class _Span:
    """Bytes ``[low, high)`` of memory some arrays share, as an array interface; keeps
    the arrays (and so the memory) alive while it is pickled."""

    def __init__(self, low: int, high: int, keep: list[Any]) -> None:
        self.__array_interface__ = {"data": (low, False), "shape": (high - low,),
                                    "typestr": "|u1", "version": 3}
        self.keep = keep


def _owner(arr: Any, ndarray: type) -> Any:
    """The object whose memory ``arr`` uses: the end of its chain of bases, through
    numpy's ``DummyArray`` (``as_strided``, ``sliding_window_view``) and a memoryview of
    an array. (Not a memoryview's other exporters: arrays loaded from one object's frames
    each have a frame of their own, and frames do not overlap.)"""
    while True:
        base = arr.base
        if base is None:
            return arr
        if isinstance(base, ndarray):
            arr = base
            continue
        inner: Any
        if isinstance(base, memoryview):
            inner = base.obj
        elif type(base).__name__ == "DummyArray":
            inner = getattr(base, "base", None)
        else:
            return base
        if not isinstance(inner, ndarray):
            return base
        arr = inner


def _data(arr: Any) -> int:
    return int(arr.__array_interface__["data"][0])


_NONE: frozenset[int] = frozenset()
_NO_PLAN: dict[int, tuple[Any, int]] = {}  # (never written to)
_NO_SPANS: dict[int, int] = {}


class _Arrays:
    """One pickling pass's reduction of exact ndarrays, and what it saw of them."""

    __slots__ = ("inside", "keep", "ndarray", "np", "owners", "plain", "plan", "spans")

    def __init__(self, np: Any, plan: dict[int, tuple[Any, int]]) -> None:
        self.np = np
        self.ndarray = np.ndarray
        self.plan = plan  # id(array) -> (span, offset): pickled as views of the span
        self.plain: set[int] | frozenset[int] = _NONE  # copies made here: numpy's reduction
        self.spans: dict[int, int] = _NO_SPANS  # id(span) -> its first byte's address % 64
        self.owners: dict[int, list[Any]] = {}  # id(owner) -> its arrays in the pickle
        self.keep: list[Any] = []  # the copies (their ids must not be reused meanwhile)
        self.inside = 0  # within a pandas manager's pickle: numpy's reduction

    def reduce(self, arr: Any) -> Any:
        if self.inside or arr.dtype.hasobject or id(arr) in self.plain:
            return arr.__reduce_ex__(5)
        if self.spans and id(arr) in self.spans:
            pad = self.spans[id(arr)]
            if pad >= SPARSE_SPAN:  # (its arrays' elements are saved with them)
                return (rebuild_blank_span, (arr.nbytes, pad - SPARSE_SPAN))
            data = arr.view()
            self._plain(data)
            return (rebuild_span, (data, pad))
        if self.plan:
            planned = self.plan.get(id(arr))
            if planned is not None:
                span, offset = planned
                view = (span, offset, arr.shape, arr.strides, arr.dtype)
                if self.spans[id(span)] >= SPARSE_SPAN:
                    data = arr.view() if arr.flags.c_contiguous else \
                        self.np.ascontiguousarray(arr)
                    self._plain(data)
                    return (rebuild_filled_view, (*view, data, bool(arr.flags.writeable)))
                return (rebuild_view, view if arr.flags.writeable else (*view, False))
        if not arr.size:
            return arr.__reduce_ex__(5)
        self.owners.setdefault(id(_owner(arr, self.ndarray)), []).append(arr)
        flags = arr.flags
        if (flags.c_contiguous or flags.f_contiguous) and flags.aligned:
            return arr.__reduce_ex__(5)
        low, high = _bounds(arr)
        # (an unaligned C-contiguous array: a view of it, its memory out of band)
        data = arr.view() if flags.c_contiguous else self.np.ascontiguousarray(arr)
        self._plain(data)
        args = (data, arr.shape, arr.strides, arr.dtype, _data(arr) - low, high - low,
                low % ALIGN)
        return (rebuild_strided, args if flags.writeable else (*args, False))

    def manager(self, manager: Any) -> Any:
        """A pandas block manager, reduced as pandas does, with the arrays in it reduced
        as numpy does (until the ``_Leave`` pickled after its state)."""
        reduced = manager.__reduce_ex__(5)
        if not isinstance(reduced, tuple):
            return reduced
        self.inside += 1
        more = (*reduced[2:], None, None, None, None)
        return (reduced[0], reduced[1], (more[0], more[3], _Leave()), more[1], more[2],
                restore_state)

    def leave(self, marker: Any) -> Any:
        self.inside -= 1
        return (bool, ())  # (False: restore_state ignores it)

    def _plain(self, copy: Any) -> None:
        """An array made here, reduced as numpy does, kept alive until the pass ends."""
        if self.plain is _NONE:
            self.plain = set()
        self.plain.add(id(copy))  # type: ignore[union-attr]
        self.keep.append(copy)

    def reset(self) -> None:
        """Let go of what one pass saw (the state's arrays, the spans)."""
        if self.owners or self.keep or self.plan or self.spans or self.plain or self.inside:
            self.owners, self.keep, self.plan, self.spans, self.plain, self.inside = (
                {}, [], _NO_PLAN, _NO_SPANS, _NONE, 0)


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
    """Clusters of two or more arrays whose bounds overlap: (low, high, array) each, by
    their first byte. (Not asked np.shares_memory pair by pair: the columns of a matrix,
    each overlapping every other in bounds, made that quadratic, review 34.)"""
    clusters: list[list[tuple[int, int, Any]]] = []
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
        # A plain dict: the C pickler looks up the type of every object it reduces in it.
        self.dispatch = dispatch = {**_base_table(base), _Leave: arrays.leave}
        # (a program's own reducer for arrays, copyreg.pickle(np.ndarray, ...), stands:
        # its arrays are then pickled as it says, without the layout)
        dispatch.setdefault(arrays.ndarray, arrays.reduce)
        # (RNG objects the call holds as arguments too: by path, see _rng.aliasing)
        for cls in _rng.rng_classes():
            dispatch.setdefault(cls, _rng.reduce_rng)
        self.pandas = False  # (its managers' entries: once pandas is imported)
        pickler = _new_pickler(base, types.SimpleNamespace(write=self.chunks.append),
                               lambda b: sink[0](b), dispatch)
        self.pickler = pickler
        # cloudpickle's map of the globals it pickled, by id: for one dump only (an id
        # reused by another namespace at the next snapshot would find the first one's)
        self.globals_ref = "globals_ref" in getattr(pickler, "__dict__", ())
        self.busy = False  # (a __reduce__ that pickles a state itself gets its own)

    def _pandas(self) -> None:
        managers = _pandas_managers()
        if managers is not None:
            for cls in managers:
                self.dispatch.setdefault(cls, self.arrays.manager)
            self.pandas = True

    def dump(self, obj: Any, plan: dict[int, tuple[Any, int]], spans: dict[int, int],
             buffers: list[pickle.PickleBuffer]) -> tuple[bytes, dict[int, list[Any]]]:
        """The pickle, and the owners of the arrays in it (see ``_Arrays``)."""
        if not self.pandas and _MANAGERS_MODULE in sys.modules:
            self._pandas()
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
            if self.globals_ref and self.pickler.globals_ref:
                self.pickler.globals_ref = {}
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


def _plain_with_rngs(obj: Any, base: type, buffers: list[pickle.PickleBuffer]) -> bytes:
    """Without numpy, while a run's RNG objects are pickled by path (see _rng.aliasing):
    pickle's own pickler, with the RNG classes' entry (review 108: random.Random came back
    a copy in a process that never imported numpy)."""
    sink = io.BytesIO()
    dispatch = {**_base_table(base),
                **{cls: _rng.reduce_rng for cls in _rng.rng_classes()
                   if cls not in copyreg.dispatch_table}}
    _new_pickler(base, sink, buffers.append, dispatch).dump(obj)
    return sink.getvalue()


def _base_table(base: type) -> Mapping[type, Any]:
    """The reducers a pickler class starts from: its own table (cloudpickle's has
    entries of its own), else copyreg's."""
    table = getattr(base, "dispatch_table", None)
    return table if isinstance(table, Mapping) else copyreg.dispatch_table


def _new_pickler(base: type, file: Any, buffer_callback: Callable[[Any], None],
                 dispatch: dict[type, Any]) -> Any:
    """A ``base`` pickler (protocol 5) with ``dispatch`` as its table. Set before
    __init__ too: the C pickler of a subclass with a dispatch_table of its own
    (cloudpickle's) reads the attribute when it is made, and finds the instance's first
    (review 109: set after, the RNG entries went unused with cloudpickle)."""
    pickler: Any = base.__new__(base)  # type: ignore[call-overload]
    if base is not pickle.Pickler:
        pickler.dispatch_table = dispatch
    pickler.__init__(file, protocol=5, buffer_callback=buffer_callback)
    pickler.dispatch_table = dispatch
    return pickler


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
            if _rng.aliasing_active():  # (random.Random held as an argument too)
                return _plain_with_rngs(obj, base, buffers)
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
        # Samples of a larger buffer the state does not hold (big[:10], big[::1000]):
        # their elements, not the bytes between them (a blank span of the same size on
        # load, each written into its view: sharing, strides and alignment as saved).
        sparse = 2 * sum(a.nbytes for a in members) < high - low
        spans[id(span)] = low % ALIGN + (SPARSE_SPAN if sparse else 0)
        for arr in members:
            plan[id(arr)] = (span, _data(arr) - low)
    buffers.clear()
    main, _ = _pass(obj, base, np, plan, spans, buffers)
    return main
