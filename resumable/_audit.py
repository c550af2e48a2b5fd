"""``f.audit``: does a resumed run yield the uninterrupted run's states, bit for bit?

The audit runs the first ``steps`` generations uninterrupted in a private temporary
store, then resumes from every checkpoint it wrote (step 0, i.e. a restart before the
first yield, up to ``steps - 1``) through the real resume path, with the decorated
function's own options (serializer, ``capture_rng``, ``state_arg``...), and compares
each later state with the uninterrupted one: digests of the pickled states first, then
a walk that names the first differing path (``state['population'][3].fitness``).
A run that returns within ``steps`` is also resumed from its last checkpoint, and each
resume's return value is compared with the uninterrupted one's in the same way (path
``result``): a body may keep what it returns outside its state.
The user's store, run and arguments are never touched: the calls get copies of the
arguments, and the global RNGs are put back as they were. What the body itself writes
to shared places through resumable (an islands experiment's plan, migrants and finish
markers) goes to the audit's ``Sandbox``: a private overlay, one per audit, shared by
its uninterrupted run and every resume (handed to each fresh interpreter), so a resume's
republish is compared with the uninterrupted run's. ``current_sandbox()`` says whether
the calling code runs in an audit's body: the audit's thread and threads in a copy of
its context (a context variable) while the audit runs, and every thread of a fresh
interpreter. Any other thread is real; a context copy used after its audit is refused.
"""

from __future__ import annotations

import collections
import contextlib
import contextvars
import copyreg
import dataclasses
import functools
import hashlib
import importlib
import io
import json
import logging
import os
import pickle
import random
import re
import reprlib
import shutil
import struct
import subprocess
import sys
import tempfile
import threading
import types
import uuid
import weakref
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from . import _numpy, _rng, _settings
from ._errors import ConfigurationError, ResumableError
from ._policy import parse_every
from ._run import RESULT, parse_ckpt_name
from .stores import open_store
from .stores._base import Payload, join_payload

if TYPE_CHECKING:
    from ._decorator import CheckpointedFunction
    from .serializers import Serializer

log = logging.getLogger("resumable")

# How long the uninterrupted run may take to write one checkpoint to the in-memory store.
_SAVE_WAIT = 300.0


@dataclass(frozen=True, repr=False)
class AuditReport:
    """What ``f.audit(...)`` found. ``ok`` is True when every resumed state was identical."""

    ok: bool
    step: int | None = None  # the first step whose resumed state differs
    path: str | None = None  # where in that state, e.g. "state['pop'][3]"
    detail: str | None = None  # why, with both values' reprs
    resumed_from: int | None = None  # the checkpoint the divergent resume started from
    function: str = ""
    steps: int = 0  # yields of the uninterrupted run that were compared against
    resumes: int = 0  # resumes run and compared
    fresh_process: bool = False
    returned: bool = False  # the run returned within the steps: return values compared too

    def __str__(self) -> str:
        where = "in a fresh interpreter each" if self.fresh_process else "in this process"
        head = (f"audit of {self.function}: {self.steps} step(s) uninterrupted, "
                f"{self.resumes} resume(s) {where}: ")
        if self.ok and self.resumes == 0:
            # (nothing compared: a claim of bit-identity would be empty)
            why = ("the body returned before its first yield, so it is never checkpointed"
                   if self.steps == 0 else "no checkpoint to resume from")
            return head + f"nothing to compare ({why}); this shows nothing about resuming"
        if self.ok:
            what = "state and return value" if self.returned else "state"
            return head + f"every resumed {what} is bit-identical to the uninterrupted run"
        lines = [head + "DIVERGES",
                 f"  first divergent step: {self.step} (resumed from step {self.resumed_from})"]
        if self.path is not None:
            lines.append(f"  path: {self.path}")
        lines.append(f"  detail: {self.detail}")
        return "\n".join(lines)

    def __repr__(self) -> str:
        if self.ok:
            return (f"AuditReport(ok=True, function={self.function!r}, steps={self.steps}, "
                    f"resumes={self.resumes})")
        return (f"AuditReport(ok=False, step={self.step}, path={self.path!r}, "
                f"resumed_from={self.resumed_from}, detail={self.detail!r})")


# -- comparing two states -------------------------------------------------------------

_repr = reprlib.Repr()
_repr.maxstring = 80
_repr.maxother = 80
_repr.maxlist = _repr.maxtuple = _repr.maxdict = _repr.maxset = 6


def _show(value: Any) -> str:
    try:
        text = _repr.repr(value)
    except Exception as err:  # a broken __repr__ must not hide the finding
        text = f"<{type(value).__qualname__}: repr failed: {err}>"
    return text


@dataclass(frozen=True)
class Difference:
    path: str
    reason: str
    expected: str  # repr in the uninterrupted run
    actual: str  # repr in the resumed run


def _float_bits(x: float) -> bytes:
    return struct.pack(">d", x)  # big-endian: its hex reads as the IEEE 754 word


class _Walker:
    """Finds the first path where two states differ: equal means the same bits.

    Floats compare by their bits (NaN equals NaN, -0.0 differs from 0.0), numpy arrays by
    dtype, shape and the bytes holding their values (not a structured dtype's padding nor
    an x87 long double's unused bytes), containers element by element, weak references by
    what they point to, objects by their attributes, and objects that pickle themselves
    (their own ``__reduce__``: a ``functools.partial``, an exception, a ``defaultdict``;
    or ``__getstate__``: a pandas DataFrame) by what their ``__reduce_ex__`` gives pickle.
    """

    def __init__(self, dumps: Callable[[Any], bytes], exclude: frozenset[str]) -> None:
        self.dumps = dumps
        self.exclude = exclude
        self.seen: set[tuple[int, int]] = set()
        # Every pair compared stays alive until the walk ends: ``seen`` holds their ids,
        # and a temporary (a Random's getstate(), a reduce tuple) freed early could hand
        # its id to the next one, whose comparison would then be skipped.
        self.alive: list[tuple[Any, Any]] = []
        self.undecided = False  # a part was too deeply nested to compare
        self.classes: dict[tuple[int, int], bool] = {}
        self.np = _numpy.loaded()  # once per comparison, not per object

    def diff(self, path: str, reason: str, a: Any, b: Any,
             bits: tuple[str, str] | None = None) -> Difference:
        """``bits``: what the two hold, shown when their reprs are the same."""
        ea, eb = _show(a), _show(b)
        if ea == eb and isinstance(a, float) and isinstance(b, float):
            bits = _float_bits(a).hex(), _float_bits(b).hex()
        if ea == eb and bits is not None:
            ea, eb = f"{ea} (bits {bits[0]})", f"{eb} (bits {bits[1]})"
        return Difference(path, reason, ea, eb)

    def walk(self, a: Any, b: Any, path: str) -> Difference | None:
        """The first difference under ``path``; a part too deep for the stack is left
        undecided (``self.undecided``) and the walk goes on with the rest."""
        try:
            return self._walk(a, b, path)
        except RecursionError:
            self.undecided = True
            return None

    def _walk(self, a: Any, b: Any, path: str) -> Difference | None:
        if path in self.exclude or a is b:
            return None
        ta, tb = type(a), type(b)
        if ta is not tb and not self._same_class(ta, tb):
            return self.diff(path, f"types differ: {_tname(ta)} / {_tname(tb)}", a, b)
        pair = (id(a), id(b))
        if pair in self.seen:  # shared or cyclic structure: compared once
            return None
        self.seen.add(pair)
        self.alive.append((a, b))
        np = self.np
        if np is not None:
            found = self._numpy(np, a, b, path)
            if found is not NotImplemented:
                return found  # type: ignore[no-any-return]
        if isinstance(a, random.Random):
            return (self.walk(a.getstate(), b.getstate(), path + ".getstate()")
                    or self._attrs(a, b, path))
        if isinstance(a, weakref.ref):
            return self._weakref(a, b, path)
        if isinstance(a, (int, float, complex, str, bytes, bytearray)) or a is None:
            if _scalar_key(a) != _scalar_key(b):
                return self.diff(path, "values differ", a, b)
            return self._attrs(a, b, path)
        if isinstance(a, (types.FunctionType, types.BuiltinFunctionType, types.MethodType,
                          types.ModuleType, type)):
            return self._pickled(a, b, path)
        if isinstance(a, dict):
            if isinstance(a, collections.defaultdict):
                found = self.walk(a.default_factory, b.default_factory,
                                  path + ".default_factory")
                if found is not None:
                    return found
            return self._dict(a, b, path) or self._attrs(a, b, path)
        if isinstance(a, collections.deque) and a.maxlen != b.maxlen:
            return self.diff(path + ".maxlen", "values differ", a.maxlen, b.maxlen)
        if isinstance(a, (list, tuple, collections.deque)):
            return self._sequence(a, b, path) or self._attrs(a, b, path)
        if isinstance(a, (set, frozenset)):
            return self._set(a, b, path) or self._attrs(a, b, path)
        if _pickles_itself(ta):
            return self._reduced(a, b, path)
        if hasattr(a, "__dict__") or _slot_names(ta):
            return self._attrs(a, b, path)
        return self._pickled(a, b, path)

    def _weakref(self, a: Any, b: Any, path: str) -> Difference | None:
        """By the objects they point to (a weakref's ``==`` asks theirs, which may not be
        a bool: a DataFrame's). A reference back to an object being compared (pandas'
        flags to their frame) is a cycle: that pair is already in ``seen``."""
        target_a, target_b = a(), b()
        if (target_a is None) != (target_b is None):
            return self.diff(path, "one weak reference is dead, the other is not", a, b)
        return self.walk(target_a, target_b, path + "()") or self._attrs(a, b, path)

    def _reduced(self, a: Any, b: Any, path: str) -> Difference | None:
        """Objects that pickle themselves: the parts of their ``__reduce_ex__`` (the
        callable, its arguments, the state, the items), as pickle keeps them. The parts
        and the arguments are walked here, not as tuples of their own: a chain of such
        objects costs the stack no more than one of plain objects."""
        try:
            parts_a, parts_b = a.__reduce_ex__(5), b.__reduce_ex__(5)
        except Exception:
            return self._pickled(a, b, path)
        if not isinstance(parts_a, tuple) or not isinstance(parts_b, tuple):
            return self._pickled(a, b, path)  # a global, pickled by its name
        parts_a, parts_b = _listed(parts_a), _listed(parts_b)
        self.alive.append((parts_a, parts_b))
        where = path + ".__reduce_ex__(5)"
        # Only a __getstate__ of its own: pickle keeps the class and what that returns.
        state_at = (f"{path}.__getstate__()" if _default_reduce(type(a))
                    and parts_a[0] in _NEWOBJ
                    else f"{where}[2]")
        if len(parts_a) != len(parts_b):
            return self.diff(where, f"lengths differ: {len(parts_a)} / {len(parts_b)}",
                             parts_a, parts_b)
        for i, (x, y) in enumerate(zip(parts_a, parts_b, strict=True)):
            if i == 1 and type(x) is tuple and type(y) is tuple and len(x) == len(y):
                for j, (u, v) in enumerate(zip(x, y, strict=True)):
                    found = self.walk(u, v, f"{where}[1][{j}]")
                    if found is not None:
                        return found
                continue
            if i == 2 and state_at != f"{where}[2]":
                found = self._own_state(type(a), x, y, path, state_at)
            else:
                found = self.walk(x, y, f"{where}[{i}]")
            if found is not None:
                return found
        return None

    def _own_state(self, cls: type, x: Any, y: Any, path: str,
                   state_at: str) -> Difference | None:
        """What a ``__getstate__`` of the class's own returns, under the attribute paths
        the report gives an object without one (``state['m'].t``), so that an exclude=
        written for them still applies (review 38): a dict by its keys, a slots
        dataclass's values by its fields. Anything else under ``.__getstate__()``."""
        pairs: list[tuple[str, Any, Any]] | None = None
        if (type(x) is dict and type(y) is dict and list(x) == list(y)
                and all(isinstance(k, str) and k.isidentifier() for k in x)):
            pairs = [(k, x[k], y[k]) for k in x]
        elif (dataclasses.is_dataclass(cls) and type(x) in (list, tuple)
              and type(y) is type(x)):
            names = [f.name for f in dataclasses.fields(cls)]
            if len(names) == len(x) == len(y):
                pairs = list(zip(names, x, y, strict=True))
        if pairs is None:
            return self.walk(x, y, state_at)
        for name, u, v in pairs:
            found = self.walk(u, v, f"{path}.{name}")
            if found is not None:
                return found
        return None

    def _same_class(self, ta: type, tb: type) -> bool:
        """Two class objects of one definition: DEAP's creator classes pickle by value, so
        each load makes a new class object."""
        if (ta.__module__, ta.__qualname__) != (tb.__module__, tb.__qualname__):
            return False
        key = (id(ta), id(tb))
        if key not in self.classes:
            try:
                self.classes[key] = self._norm_dumps(ta) == self._norm_dumps(tb)
            except Exception:
                self.classes[key] = False
        return self.classes[key]

    def _norm_dumps(self, x: Any) -> bytes:
        """``x`` pickled, without the ids cloudpickle gives the classes it pickles by value
        (those defined in ``__main__``): each process gives the same class another one."""
        return _without_class_ids(self.dumps(x))

    def _numpy(self, np: Any, a: Any, b: Any, path: str) -> Any:
        if isinstance(a, np.ndarray):
            found = self._array(np, a, b, path)
            ma = sys.modules.get("numpy.ma")
            if found is None and ma is not None and isinstance(a, ma.MaskedArray):
                # what it holds, not how: a live one's unset fill value is set once loaded
                return (self.walk(ma.getmaskarray(a), ma.getmaskarray(b), path + ".mask")
                        or self.walk(a.fill_value, b.fill_value, path + ".fill_value")
                        or self.walk(a.hardmask, b.hardmask, path + ".hardmask"))
            # A subclass's attributes too (DEAP's numpy individuals keep their fitness there)
            return found or self._attrs(a, b, path)
        if isinstance(a, np.generic):
            if a.dtype == b.dtype and a.dtype.hasobject and a.dtype.names:
                # a structured element with object fields: its bytes hold pointers
                for name in a.dtype.names:
                    found = self.walk(a[name], b[name], f"{path}[{name!r}]")
                    if found is not None:
                        return found
                return None
            if a.dtype != b.dtype:
                return self.diff(path, f"values differ ({a.dtype} / {b.dtype})", a, b)
            raw_a = np.frombuffer(a.tobytes(), dtype=np.uint8)
            raw_b = np.frombuffer(b.tobytes(), dtype=np.uint8)
            mask = _value_bytes(np, a.dtype)
            if mask is None and raw_a.tobytes() == raw_b.tobytes():
                return None
            if mask is not None and raw_a.size == mask.size == raw_b.size and (
                    raw_a[mask] == raw_b[mask]).all():
                return None
            return self.diff(path, f"values differ ({a.dtype})", a, b,
                             (_bits(np, a.dtype, raw_a), _bits(np, a.dtype, raw_b)))
        if isinstance(a, np.random.Generator):
            return self._bit_generator(a.bit_generator, b.bit_generator,
                                       path + ".bit_generator")
        if isinstance(a, np.random.RandomState):
            return self.walk(a.get_state(legacy=False), b.get_state(legacy=False),
                             path + ".get_state()")
        if isinstance(a, np.random.BitGenerator):
            return self._bit_generator(a, b, path)
        return NotImplemented

    def _bit_generator(self, a: Any, b: Any, path: str) -> Difference | None:
        """Its state, and which children its SeedSequence has spawned and is (what
        ``spawn`` draws from next; numpy 2 pickles it). Not the sequence's entropy: numpy's
        ``jumped()`` gives the new bit generator fresh OS entropy that nothing draws from."""
        found = self.walk(a.state, b.state, path + ".state")
        if found is not None:
            return found
        seq_a, seq_b = getattr(a, "seed_seq", None), getattr(b, "seed_seq", None)
        for name in ("n_children_spawned", "spawn_key"):
            found = self.walk(getattr(seq_a, name, None), getattr(seq_b, name, None),
                              f"{path}.seed_seq.{name}")
            if found is not None:
                return found
        return None

    def _array(self, np: Any, a: Any, b: Any, path: str) -> Difference | None:
        if a.dtype != b.dtype:
            return Difference(path, "dtypes differ", f"dtype {a.dtype}", f"dtype {b.dtype}")
        if a.shape != b.shape:
            return Difference(path, "shapes differ", f"shape {a.shape}", f"shape {b.shape}")
        flat_a, flat_b = a.reshape(-1), b.reshape(-1)
        if a.dtype.hasobject:
            for i in range(flat_a.size):
                found = self.walk(flat_a[i], flat_b[i], path + _index(np, a.shape, i))
                if found is not None:
                    return found
            return None
        if a.size == 0 or a.dtype.itemsize == 0:
            return None
        bytes_a = np.ascontiguousarray(flat_a).view(np.uint8).reshape(a.size, -1)
        bytes_b = np.ascontiguousarray(flat_b).view(np.uint8).reshape(b.size, -1)
        mask = _value_bytes(np, a.dtype)  # not the padding, which may hold anything
        if mask is None:
            differs = np.flatnonzero((bytes_a != bytes_b).any(axis=1))
        else:
            differs = np.flatnonzero((bytes_a[:, mask] != bytes_b[:, mask]).any(axis=1))
        if differs.size == 0:
            return None
        i = int(differs[0])
        return self.diff(path + _index(np, a.shape, i),
                         f"{differs.size} of {a.size} element(s) differ ({a.dtype}); first",
                         flat_a[i], flat_b[i],
                         (_bits(np, a.dtype, bytes_a[i]), _bits(np, a.dtype, bytes_b[i])))

    def _dict(self, a: dict[Any, Any], b: dict[Any, Any], path: str) -> Difference | None:
        """Keys in order, each by its bits and type as any value (0.0 and -0.0, 1 and True
        are other keys; a NaN read back is the same one), then the values in that order."""
        if len(a) == len(b) and all(
                (x is y or (type(x) is type(y) and type(x) in (str, int) and x == y)
                 or self.walk(x, y, f"{path}.keys()") is None)
                for x, y in zip(a, b, strict=True)):
            for (k, x), y in zip(a.items(), b.values(), strict=True):
                found = self.walk(x, y, f"{path}[{k!r}]")
                if found is not None:
                    return found
            return None
        keys_a, keys_b = list(a), list(b)
        only_a = [k for k in keys_a if k not in b]
        only_b = [k for k in keys_b if k not in a]
        if only_a or only_b:
            return Difference(path, "keys differ", f"only here: {_show(only_a)}",
                              f"only here: {_show(only_b)}")
        if keys_a == keys_b:
            return Difference(path, "keys differ in their bits or types", _show(keys_a),
                              _show(keys_b))
        return Difference(path, "same keys in another order", _show(keys_a), _show(keys_b))

    def _sequence(self, a: Any, b: Any, path: str) -> Difference | None:
        for i, (x, y) in enumerate(zip(a, b, strict=False)):
            found = self.walk(x, y, f"{path}[{i}]")
            if found is not None:
                return found
        if len(a) != len(b):
            return self.diff(path, f"lengths differ: {len(a)} / {len(b)}", a, b)
        return None

    def _set(self, a: Any, b: Any, path: str) -> Difference | None:
        """Sets by their elements (not their order), the same bits being the same element.

        Each element by its pickle made without pickle's memo (an element's usual pickle
        also records which of its parts are shared: a tuple of two equal strings that are
        one object, or two); elements whose pickles find no twin are paired by walking
        (cloudpickle's classes, say). Where elements cannot be pickled so, as before: by
        their pickles, or ==, then pairing all of them."""
        # By bits: 0.0 == -0.0, and two NaN objects are never ==.
        keyed_a, keyed_b = _keyed(a), _keyed(b)
        if keyed_a is not None and keyed_b is not None:
            twins: dict[bytes, list[Any]] = {}
            for key, y in keyed_b:
                twins.setdefault(key, []).append(y)
            left_a = []
            for key, x in keyed_a:
                if twins.get(key):
                    twins[key].pop()
                else:
                    left_a.append(x)
            left_b = [y for ys in twins.values() for y in ys]
            if not left_a and not left_b:
                return None
        else:
            elements_a, elements_b = self._elements(a), self._elements(b)
            if elements_a == elements_b if elements_a is not None else a == b:
                return None
            left_a, left_b = list(a), list(b)
        if len(left_a) == len(left_b) and self._paired(left_a, left_b):
            return None  # the same elements, some of which pickle otherwise
        if not a - b and not b - a:  # equal by ==, not by bits
            return Difference(path, "elements differ in their bits", _sorted_show(a),
                              _sorted_show(b))
        return Difference(path, "elements differ", f"only here: {_sorted_show(a - b)}",
                          f"only here: {_sorted_show(b - a)}")

    def _paired(self, a: list[Any], b: list[Any]) -> bool:
        """Each element of ``a`` walks equal to its own element of ``b``. Candidates by hash
        first, then any left (a NaN's hash is its id, up to ``_MAX_UNPAIRED`` of those);
        each trial in a walk of its own, whose pairs must not count as compared here."""
        by_hash: dict[int, list[Any]] = {}
        for y in b:
            by_hash.setdefault(hash(y), []).append(y)
        left: list[Any] = []
        for x in a:
            candidates = by_hash.get(hash(x), [])
            match = next((i for i, y in enumerate(candidates) if self._same(x, y)), None)
            if match is None:
                left.append(x)
            else:
                candidates.pop(match)
        rest = [y for ys in by_hash.values() for y in ys]
        if len(left) > _MAX_UNPAIRED:
            return False
        for x in left:
            match = next((i for i, y in enumerate(rest) if self._same(x, y)), None)
            if match is None:
                return False
            rest.pop(match)
        return True

    def _same(self, x: Any, y: Any) -> bool:
        """Equal in a walk of their own; undecided (too deep) counts as equal here and
        leaves this walk undecided."""
        walker = _Walker(self.dumps, frozenset())
        walker.classes = self.classes  # the class comparisons hold for every trial
        if walker.walk(x, y, "") is not None:
            return False
        if walker.undecided:
            self.undecided = True
        self.alive.append((walker.alive, None))  # their ids stay unique while we walk
        return True

    def _elements(self, items: Any) -> list[bytes] | None:
        try:
            return sorted(self._norm_dumps(x) for x in items)
        except Exception:
            return None

    def _attrs(self, a: Any, b: Any, path: str) -> Difference | None:
        attrs_a, attrs_b = _attributes(a), _attributes(b)
        if list(attrs_a) != list(attrs_b):
            return Difference(path, "attributes differ", _show(list(attrs_a)),
                              _show(list(attrs_b)))
        for name, value in attrs_a.items():
            found = self.walk(value, attrs_b[name], f"{path}.{name}")
            if found is not None:
                return found
        return None

    def _pickled(self, a: Any, b: Any, path: str) -> Difference | None:
        """Objects without visible parts (C types, functions): compared by their pickles."""
        try:
            same = self._norm_dumps(a) == self._norm_dumps(b)
        except Exception:
            try:
                same = bool(a == b)
            except Exception:
                same = False
        return None if same else self.diff(path, "values differ", a, b)


_MAX_UNPAIRED = 1000  # set elements tried against every other one (a NaN's hash is its id)


_CLASS_ID = re.compile(rb"[0-9a-f]{32}")


def _without_class_ids(data: bytes) -> bytes:
    """``data`` with every class id known to cloudpickle's tracker replaced by one name."""
    cloudpickle = sys.modules.get("cloudpickle")
    known = getattr(getattr(cloudpickle, "cloudpickle", None), "_DYNAMIC_CLASS_TRACKER_BY_ID",
                    None)
    if not known:
        return data

    def replace(match: re.Match[bytes]) -> bytes:
        return b"<class id>" if match.group().decode() in known else match.group()

    try:
        return _CLASS_ID.sub(replace, data)
    except Exception:
        return data


def _keyed(items: Any) -> list[tuple[bytes, Any]] | None:
    """Each element with its pickle made without the memo (nothing shared, nothing
    referred back to), or None if any cannot be pickled so (a cycle, a lambda)."""
    try:
        out = []
        for x in items:
            buf = io.BytesIO()
            pickler = pickle.Pickler(buf, protocol=5)
            pickler.fast = True
            pickler.dump(x)
            out.append((buf.getvalue(), x))
        return out
    except Exception:
        return None


def _pickles_itself(cls: type) -> bool:
    """The class (or a base other than object) defines how it is pickled: its own
    ``__reduce_ex__`` or ``__reduce__``, or a ``__getstate__`` that says what of it
    pickle keeps (a pandas DataFrame leaves out its flags' weak reference to itself)."""
    return (cls.__reduce_ex__ is not object.__reduce_ex__  # type: ignore[comparison-overlap]
            or cls.__reduce__ is not object.__reduce__  # type: ignore[comparison-overlap]
            or cls.__getstate__ is not object.__getstate__)  # type: ignore[comparison-overlap]


@functools.lru_cache(maxsize=256)
def _value_bytes(np: Any, dtype: Any) -> Any:
    """Which bytes of an element of ``dtype`` hold its value (a bool array), or None for
    all of them. Not the padding of an aligned structured dtype (``np.empty`` leaves it
    as the memory was), nor the bytes an x87 long double (80 bits in 12 or 16 bytes)
    leaves unused: neither is pickled from a value, both are copied as they are."""
    mask = _value_mask(np, dtype)
    return None if mask.all() else mask


def _value_mask(np: Any, dtype: Any) -> Any:
    mask = np.zeros(dtype.itemsize, dtype=bool)
    if dtype.names is not None:
        for name in dtype.names:
            field, offset = dtype.fields[name][:2]
            mask[offset:offset + field.itemsize] |= _value_mask(np, field)
    elif dtype.subdtype is not None:
        base, shape = dtype.subdtype
        count = int(np.prod(shape))
        mask[:base.itemsize * count] = np.tile(_value_mask(np, base), count)
    elif dtype.type in (np.longdouble, np.clongdouble) and _x87(np):
        parts = 2 if dtype.kind == "c" else 1
        size = dtype.itemsize // parts
        for k in range(parts):  # the 10 bytes at the low end of each part's memory
            start = k * size + (size - 10 if _big_endian(dtype) else 0)
            mask[start:start + 10] = True
    else:
        mask[:] = True
    return mask


def _x87(np: Any) -> bool:
    """numpy's long double is x87's 80-bit extended format, stored in more bytes."""
    info = np.finfo(np.longdouble)
    return (sys.byteorder == "little" and (info.nexp, info.nmant) == (15, 63)
            and np.dtype(np.longdouble).itemsize > 10)


def _big_endian(dtype: Any) -> bool:
    return dtype.byteorder == ">" or (dtype.byteorder == "=" and sys.byteorder == "big")


def _bits(np: Any, dtype: Any, raw: Any) -> str:
    """An element's value bytes in hex: a number's as its word reads (most significant
    byte first, each part of a complex on its own), a structured one's in memory order."""
    raw = np.asarray(raw, dtype=np.uint8).reshape(-1)
    mask = _value_bytes(np, dtype)
    if dtype.names is not None or dtype.subdtype is not None or dtype.kind not in "biufcmM":
        return str((raw if mask is None else raw[mask]).tobytes().hex())
    parts = 2 if dtype.kind == "c" else 1
    words = []
    for k, part in enumerate(np.split(raw, parts)):
        if mask is not None:
            part = part[np.split(mask, parts)[k]]
        words.append((part if _big_endian(dtype) else part[::-1]).tobytes().hex())
    return " ".join(words)


_NEWOBJ = (copyreg.__newobj__, copyreg.__newobj_ex__)  # type: ignore[attr-defined]


def _default_reduce(cls: type) -> bool:
    return (cls.__reduce_ex__ is object.__reduce_ex__  # type: ignore[comparison-overlap]
            and cls.__reduce__ is object.__reduce__)  # type: ignore[comparison-overlap]


def _listed(parts: tuple[Any, ...]) -> tuple[Any, ...]:
    """A reduce tuple with its item iterators (list and dict items) made lists."""
    return tuple(list(p) if isinstance(p, Iterator) else p for p in parts)


def _tname(t: type) -> str:
    return t.__qualname__ if t.__module__ == "builtins" else f"{t.__module__}.{t.__qualname__}"


def _scalar_key(x: Any) -> Any:
    if isinstance(x, float):
        return _float_bits(x)
    if isinstance(x, complex):
        return _float_bits(x.real) + _float_bits(x.imag)
    if isinstance(x, int):
        return int(x)
    if isinstance(x, bytearray):
        return bytes(x)
    return x


def _sorted_show(items: Iterable[Any]) -> str:
    try:
        return _show(sorted(items))
    except TypeError:
        return _show(list(items))


def _slot_names(cls: type) -> list[str]:
    names: list[str] = copyreg._slotnames(cls)  # type: ignore[attr-defined]
    return names


def _attributes(obj: Any) -> dict[str, Any]:
    out: dict[str, Any] = dict(getattr(obj, "__dict__", None) or {})
    for name in _slot_names(type(obj)):
        if name not in out and name not in ("__dict__", "__weakref__"):
            with contextlib.suppress(AttributeError):
                out[name] = getattr(obj, name)
    return out


def _index(np: Any, shape: tuple[int, ...], flat: int) -> str:
    if len(shape) <= 1:
        return f"[{flat}]" if shape else "[()]"
    return "[" + ", ".join(str(int(i)) for i in np.unravel_index(flat, shape)) + "]"


TOO_DEEP = "too deeply nested to compare"  # first_difference's reason when it cannot tell


def first_difference(a: Any, b: Any, *, path: str = "state", exclude: Iterable[str] = (),
                     dumps: Callable[[Any], bytes] | None = None) -> Difference | None:
    """The first path where ``a`` and ``b`` differ (same bits = equal), or None."""
    def default_dumps(x: Any) -> bytes:
        return pickle.dumps(x, protocol=5)

    walker = _Walker(dumps or default_dumps, frozenset(exclude))
    found = walker.walk(a, b, path)
    if found is None and walker.undecided:
        return Difference(path, TOO_DEEP, "?", "?")
    return found


# -- the private store ----------------------------------------------------------------

class _TempStore:
    """The audit's own in-memory store, in no registry; it tells when a checkpoint lands.

    Written out rather than derived from ``MemoryStore``, so that a write path added to
    stores later fails here loudly instead of bypassing the notification.
    """

    def __init__(self, label: str) -> None:
        self.url = f"memory://resumable-audit-{label}"
        self._objects: dict[str, bytes] = {}
        self._saved = threading.Condition()
        self._steps: set[int] = set()

    def put(self, key: str, data: Payload) -> None:
        blob = join_payload(data)
        parsed = parse_ckpt_name(key.rsplit("/", 1)[-1])
        with self._saved:
            self._objects[key] = blob
            if parsed is not None:
                self._steps.add(parsed[1])
            self._saved.notify_all()

    def put_if_absent(self, key: str, data: Payload) -> bool:
        blob = join_payload(data)
        with self._saved:
            if key in self._objects:
                return False
            self._objects[key] = blob
            return True

    def get(self, key: str) -> bytearray | None:
        with self._saved:
            blob = self._objects.get(key)
        return None if blob is None else bytearray(blob)  # private and writable, as a GET

    def head(self, key: str, n: int) -> tuple[bytes, int] | None:
        with self._saved:
            blob = self._objects.get(key)
        return None if blob is None else (blob[: max(0, n)], len(blob))

    def list(self, prefix: str, start_after: str | None = None) -> list[str]:
        with self._saved:
            keys = sorted(k for k in self._objects if k.startswith(prefix))
        return [k for k in keys if start_after is None or k > start_after]

    def delete(self, key: str) -> None:
        with self._saved:
            self._objects.pop(key, None)

    def conditional_writes(self) -> bool:
        return True

    def wait_for_checkpoint(self, step: int) -> None:
        """Block until the checkpoint of ``step`` is stored (saves run in the background)."""
        with self._saved:
            if not self._saved.wait_for(lambda: step in self._steps, timeout=_SAVE_WAIT):
                raise ResumableError(
                    f"audit: the checkpoint of step {step} was not written to the audit's "
                    f"in-memory store within {_SAVE_WAIT:.0f} s; this is a bug in resumable, "
                    "please report it with the function's options")

    def objects_until(self, run_id: str, step: int) -> dict[str, bytes]:
        """The run's objects as a restart after ``step`` finds them: its newest checkpoint
        is that of ``step`` (older ones are left out, to save memory), and no result."""
        with self._saved:
            items = [(k, v) for k, v in self._objects.items() if k.startswith(run_id + "/")]
        out = {}
        for key, blob in items:
            name = key.rsplit("/", 1)[-1]
            parsed = parse_ckpt_name(name)
            if name != RESULT and (parsed is None or parsed[1] == step):
                out[key] = blob  # bytes: shared, never copied
        return out


def _store_with(label: str, objects: dict[str, bytes]) -> _TempStore:
    store = _TempStore(label)
    for key, blob in objects.items():
        store.put(key, [blob])
    return store


# -- what the audited body writes where others read -----------------------------------

class Sandbox:
    """The private overlay of one audit: objects the audited body writes to a shared place
    (an islands experiment) land here, never there. ``objects`` maps (store url, key) to
    bytes and lives as long as the audit, across its uninterrupted run and its resumes;
    ``caches`` holds what code caches about those objects, cleared at each run's start (a
    resumed run is a new process, which knows nothing yet)."""

    def __init__(self, name: str, objects: dict[tuple[str, str], bytes] | None = None, *,
                 whole_process: bool = False) -> None:
        self.name = name  # the audited function, for messages
        self.objects: dict[tuple[str, str], bytes] = dict(objects or {})
        self.caches: dict[Any, Any] = {}
        self.lock = threading.RLock()
        self.whole_process = whole_process  # a fresh interpreter: every thread is the body's
        # Set when its audit ends: a copy of the audit's context (a worker thread the body
        # started, an asyncio task) may outlive it, and is refused from then on (reviews
        # 42, 43: taken as the audit's, a real run's writes were lost; taken as real, the
        # audit's late work reached the experiment).
        self.closed = False
        # The process it lives in: a process forked from there (a fork pool the body makes)
        # has a copy, whose writes no one reads (review 44), and is refused.
        self.pid = os.getpid()

    def new_run(self) -> None:
        with self.lock:
            self.caches.clear()

    def snapshot(self) -> dict[tuple[str, str], bytes]:
        with self.lock:
            return dict(self.objects)


AUDIT_ENV = _settings.AUDIT_CHILD.name  # set in a fresh interpreter of f.audit, for its children
# Set when this process was started by the body of such an interpreter (read once: it is
# in the environment the process started with, and the real migrate path asks at every
# call, review 41).
_AUDITED_BY = _settings.AUDIT_CHILD.read()
_SANDBOX: contextvars.ContextVar[Sandbox | None] = contextvars.ContextVar(
    "resumable_audit_sandbox", default=None)
_whole_process: Sandbox | None = None  # a fresh interpreter's: every thread of it is the audit's


@contextlib.contextmanager
def _sandboxed(sandbox: Sandbox) -> Iterator[None]:
    """The audit's thread runs the body in ``sandbox`` until the block ends, however."""
    global _whole_process
    token = _SANDBOX.set(sandbox)
    if sandbox.whole_process:
        _whole_process = sandbox
    try:
        yield
    finally:
        sandbox.closed = True  # (before the reset: no moment with the audit still open)
        if sandbox.whole_process:
            _whole_process = None
        _SANDBOX.reset(token)


def _new_locks_in_child() -> None:
    # A thread of the body may have held the overlay's lock at the fork (review 41).
    for sandbox in (_SANDBOX.get(), _whole_process):
        if sandbox is not None:
            sandbox.lock = threading.RLock()


os.register_at_fork(after_in_child=_new_locks_in_child)


def _check_not_audit_child(what: str) -> None:
    """A process started (not forked) by the body of an audit's fresh interpreter has no
    sandbox: what it would write to the store is refused."""
    if _AUDITED_BY:
        raise ConfigurationError(
            f"{what} in a process started by the body of f.audit(fresh_process=True) of "
            f"{_AUDITED_BY} (${AUDIT_ENV} is set): the audit's overlay is not here, and an "
            "audit never writes to the store. Migrate from the body's own process, or "
            "audit with fresh_process=False.")


def current_sandbox(what: str) -> Sandbox | None:
    """The sandbox of the audit whose body the calling code runs in, or None: the real
    thing.

    Only the audit's own thread, and threads that run in a copy of its context
    (``contextvars.copy_context().run``, asyncio tasks), are the audit's; in a fresh
    interpreter of ``fresh_process=True``, every thread. Any other thread is real, even
    while an audit runs in this process: a thread cannot be told to be the body's by
    anything else, and guessing (8215498) sent a real island's writes into an unrelated
    audit's overlay, or refused them (review 41). So a body that migrates from a plain
    thread it starts writes to the experiment during an audit (README: limits). A copy of
    the audit's context used after the audit ended is refused (see the error).
    """
    mine = _SANDBOX.get()
    if mine is not None:
        if mine.pid != os.getpid():
            raise _forked(what, mine)
        if mine.closed:
            # A copy of an audit's context used after the audit: work of the audit still
            # going (a thread it left behind), or a real run's through a worker the audit
            # started. Which, nothing says: refused, neither written nor lost (reviews 42,
            # 43).
            raise ConfigurationError(
                f"{what} in a copy of the context of f.audit of {mine.name}, which has "
                "ended: resumable cannot tell whether this is the audit's work (it must not "
                "reach the store) or a real run's. A long-lived worker must run each job in "
                "its submitter's context (contextvars.copy_context().run per job), not in "
                "the context it was started in")
        return mine
    whole = _whole_process
    if whole is not None:
        if whole.pid != os.getpid():
            raise _forked(what, whole)
        return whole
    _check_not_audit_child(what)
    return None


def _forked(what: str, sandbox: Sandbox) -> ConfigurationError:
    return ConfigurationError(
        f"{what} in a process forked from f.audit of {sandbox.name} (pid {sandbox.pid}): "
        "the audit's overlay is in that process, not here, so what this one writes would "
        "reach neither the audit nor the store, and a process forked during an audit cannot "
        "be told from a real run's later. A fork pool made inside the audited body, or one "
        "whose workers start at a submit (concurrent.futures.ProcessPoolExecutor forks them "
        "from the submitting thread), has such workers: an audited body must migrate from "
        "its own process (its thread, or threads in a copy of its context), and a pool that "
        "serves real runs needs workers started outside any audit (make a new pool after "
        "the audit)")


# -- running the function -------------------------------------------------------------

class _Call:
    """The call's arguments; each run gets a fresh copy, as a restarted process would."""

    def __init__(self, serializer: Serializer, args: tuple[Any, ...],
                 kwargs: dict[str, Any]) -> None:
        self.serializer = serializer
        self.args, self.kwargs = args, kwargs
        self.blob: bytes | None = None
        self.error: Exception | None = None
        try:
            self.blob = serializer.dumps((args, kwargs))
        except Exception as err:
            self.error = err

    def fresh(self) -> tuple[tuple[Any, ...], dict[str, Any]]:
        if self.blob is None:
            return self.args, self.kwargs
        args, kwargs = self.serializer.loads(self.blob)
        return args, kwargs


def _clone(fn: CheckpointedFunction[Any, Any], opts: Any, store: Any,
           run_id: str) -> CheckpointedFunction[Any, Any]:
    """The decorated function with its own options, saving each yield into ``store``."""
    audit_opts = dataclasses.replace(
        opts, store=store, run_id=run_id, keep=None, every=parse_every("generation"),
        restarts=0, progress=False)
    return type(fn)(fn._func, audit_opts)


@dataclass
class _Outcome:
    """What a resumed run produced: pickled states, then how it stopped early, if it did."""

    states: list[bytes]
    stopped: str | None = None  # "returned" or "raised <Type>: <message>"
    error: Exception | None = None
    result: bytes | None = None  # the return value, pickled, when it returned


def _drive(states: Iterator[Any], count: int, dumps: Callable[[Any], bytes],
           check: Callable[[int, bytes], bool] | None = None) -> _Outcome:
    out = _Outcome([])
    try:
        for _ in range(count):
            try:
                state = next(states)
            except StopIteration as stop:
                out.stopped = "returned"
                # As the run stores it; a value it could not store raised in the run.
                with contextlib.suppress(Exception):
                    out.result = dumps(stop.value)
                break
            except Exception as err:
                out.stopped, out.error = f"raised {type(err).__name__}: {err}", err
                break
            out.states.append(dumps(state))
            if check is not None and not check(len(out.states), out.states[-1]):
                break
    finally:
        close = getattr(states, "close", None)
        if close is not None:
            close()
    return out


class _QuietRuns(logging.Filter):
    """Keeps the audit's own runs (this thread, below WARNING) out of the user's log."""

    def __init__(self) -> None:
        super().__init__()
        self.thread = threading.get_ident()

    def filter(self, record: logging.LogRecord) -> bool:
        return record.thread != self.thread or record.levelno >= logging.WARNING


@contextlib.contextmanager
def _quiet_runs() -> Iterator[None]:
    quiet = _QuietRuns()
    log.addFilter(quiet)
    try:
        yield
    finally:
        log.removeFilter(quiet)


# -- fresh interpreters ---------------------------------------------------------------

def _resolve(module: str, qualname: str) -> Any:
    target: Any = importlib.import_module(module)
    for part in qualname.split("."):
        target = getattr(target, part)
    return getattr(target, "_func", target)


def _check_importable(fn: CheckpointedFunction[Any, Any]) -> tuple[str, str]:
    func = fn._func
    module, qualname = func.__module__, func.__qualname__
    how = (f"f.audit(fresh_process=True) resumes {qualname} in a new interpreter, which must "
           "import it by module path")
    if not sys.executable:
        raise ConfigurationError(f"{how}, but this interpreter does not know its own path "
                                 "(sys.executable is empty); use fresh_process=False")
    if module == "__main__":
        raise ConfigurationError(
            f"{how}, but it is defined in __main__ (a script or a notebook): move it into a "
            "module, or audit it with fresh_process=False")
    if "<locals>" in qualname:
        raise ConfigurationError(
            f"{how}, but it is defined inside a function (a nested function or a closure): "
            "define it at module level, or audit it with fresh_process=False")
    try:
        found = _resolve(module, qualname)
    except Exception as err:
        raise ConfigurationError(f"{how}, but {module}.{qualname} cannot be imported: "
                                 f"{type(err).__name__}: {err}") from err
    if found is not func:
        raise ConfigurationError(
            f"{how}, but {module}.{qualname} names another object ({_show(found)}); audit "
            "the function under its own module-level name, or use fresh_process=False")
    return module, qualname


def _hash_seed(k: int) -> str:
    """A PYTHONHASHSEED other than this process's (set ones differ; random ones almost surely)."""
    mine = os.environ.get("PYTHONHASHSEED", "")
    base = int(mine) + 1 if mine.isdigit() else 1
    return str((base + k) % 4294967296)


def _resume_in_child(work: Path, k: int, target: tuple[str, str], opts: Any, run_id: str,
                     call: _Call, objects: dict[str, bytes], count: int,
                     sandbox: Sandbox) -> tuple[_Outcome, str]:
    folder = work / f"resume-{k}"
    store = open_store((folder / "store").as_uri())
    for key, blob in objects.items():
        store.put(key, [blob])
    try:
        options = pickle.dumps(dataclasses.replace(opts, store=store.url, restarts=0,
                                                   restart_on=(Exception,)), protocol=5)
    except Exception as err:
        raise ConfigurationError(
            f"f.audit(fresh_process=True): the options of {target[1]} cannot be sent to a new "
            f"interpreter ({type(err).__name__}: {err}); use fresh_process=False") from err
    (folder / "options").write_bytes(options)
    assert call.blob is not None
    (folder / "call").write_bytes(call.blob)
    # What the uninterrupted run published (islands): the resume's republish is compared
    # with it there, and the child's own writes stay in the child.
    (folder / "sandbox").write_bytes(pickle.dumps(sandbox.snapshot(), protocol=5))
    spec = {"sys_path": sys.path, "module": target[0], "qualname": target[1],
            "run_id": run_id, "count": count, "folder": str(folder)}
    (folder / "spec.json").write_text(json.dumps(spec))
    seed = _hash_seed(k)
    # (inherited by processes the body starts: there no Sandbox runs, and islands refuse)
    env = {**os.environ, "PYTHONHASHSEED": seed, AUDIT_ENV: target[1]}
    code = ("import json, sys; spec = json.load(open(sys.argv[1])); sys.path[:] = "
            "spec['sys_path']; from resumable._audit import _child; sys.exit(_child(spec))")
    proc = subprocess.run([sys.executable, "-c", code, str(folder / "spec.json")], env=env,
                          capture_output=True, text=True, check=False)
    result = folder / "outcome"
    if proc.returncode != 0 or not result.exists():
        tail = "\n".join(proc.stderr.strip().splitlines()[-15:])
        raise ResumableError(
            f"audit: the resume of {target[0]}.{target[1]} from step {k} in a new interpreter "
            f"(PYTHONHASHSEED={seed}) failed with exit status {proc.returncode}:\n{tail}")
    states, stopped, returned = pickle.loads(result.read_bytes())
    return _Outcome(states, stopped, result=returned), seed


def _child(spec: dict[str, Any]) -> int:
    """In the new interpreter: resume the run from the store copy, save the states."""
    from ._decorator import CheckpointedFunction

    folder = Path(spec["folder"])
    func = _resolve(spec["module"], spec["qualname"])
    opts = pickle.loads((folder / "options").read_bytes())
    args, kwargs = opts.serializer.loads((folder / "call").read_bytes())
    fn: CheckpointedFunction[Any, Any] = CheckpointedFunction(
        func, dataclasses.replace(opts, run_id=spec["run_id"]))
    # This interpreter exists for the audit: every thread of it writes to the sandbox.
    sandbox = Sandbox(spec["qualname"], pickle.loads((folder / "sandbox").read_bytes()),
                      whole_process=True)
    with _quiet_runs(), _sandboxed(sandbox):
        outcome = _drive(fn.iter(*args, **kwargs), spec["count"], opts.serializer.dumps)
    (folder / "outcome").write_bytes(
        pickle.dumps((outcome.states, outcome.stopped, outcome.result)))
    return 0


# -- the audit ------------------------------------------------------------------------

@dataclass(frozen=True)
class _Finding:
    step: int
    resumed_from: int
    path: str | None
    detail: str


class _Audit:
    """One ``f.audit(...)``: the uninterrupted run, then a resume from each checkpoint."""

    def __init__(self, fn: CheckpointedFunction[Any, Any], args: tuple[Any, ...],
                 kwargs: dict[str, Any], steps: int, fresh_process: bool,
                 exclude: Iterable[str]) -> None:
        self.fn, self.opts = fn, fn._opts
        self.name = getattr(fn._func, "__qualname__", repr(fn._func))
        if isinstance(steps, bool) or not isinstance(steps, int) or steps < 1:
            raise ConfigurationError(f"{self.name}.audit: steps must be an int >= 1, "
                                     f"got {steps!r}")
        self.steps = steps
        self.exclude = frozenset(_normal_path(p) for p in (
            [exclude] if isinstance(exclude, str) else exclude))
        self.serializer = self.opts.serializer
        self.target = _check_importable(fn) if fresh_process else None
        self.call = _Call(self.serializer, args, kwargs)
        if self.call.error is not None:
            if fresh_process:
                raise ConfigurationError(
                    f"{self.name}.audit(fresh_process=True): the arguments cannot be sent to "
                    f"a new interpreter with serializer {self.serializer.name!r}: "
                    f"{self.call.error}") from self.call.error
            log.warning("audit of %s: the arguments cannot be copied (%s), so its runs share "
                        "them and may change them", self.name, self.call.error)
        self.label = uuid.uuid4().hex[:12]
        self.run_id = f"audit-{self.label}"
        self.reference = _TempStore(self.label)
        # What the body writes to shared places (islands): this audit's, nobody else's.
        self.sandbox = Sandbox(self.name)
        self.expected: list[bytes] = []  # the uninterrupted run's pickled states
        self.digests: list[bytes] = []
        # The run returned within ``steps``: each resume must return the same value.
        self.returned = False
        self.result: bytes | None = None  # that value, pickled
        self.work: Path | None = None  # temporary folder for fresh interpreters
        self.found: _Finding | None = None
        self.resumes = 0

    def run(self) -> AuditReport:
        rng_before = _rng.capture()
        try:
            with _quiet_runs(), _sandboxed(self.sandbox):
                self._uninterrupted()
                # A run that returned is also resumed from its last checkpoint (killed
                # before its result was stored): the body then only returns.
                last = len(self.expected) + (1 if self.returned and self.expected else 0)
                for k in range(last):
                    if self.found is not None and k + 1 >= self.found.step:
                        break  # a later resume cannot diverge before the divergence found
                    self._check_resume(k)
        finally:
            _rng.restore(rng_before)  # as if the audit never ran
            if self.work is not None:
                shutil.rmtree(self.work, ignore_errors=True)
        report = self._report()
        log.log(logging.INFO if report.ok else logging.WARNING, "%s", report)
        return report

    def _uninterrupted(self) -> None:
        def keep(step: int, blob: bytes) -> bool:
            self.expected.append(blob)
            self.digests.append(_digest(blob))
            # Saves run in the background and may coalesce: the audit needs every one.
            self.reference.wait_for_checkpoint(step)
            return True

        args, kwargs = self.call.fresh()
        self.sandbox.new_run()
        states = _clone(self.fn, self.opts, self.reference, self.run_id).iter(*args, **kwargs)
        outcome = _drive(states, self.steps, self.serializer.dumps, keep)
        if outcome.stopped is not None and outcome.stopped != "returned":
            raise ResumableError(
                f"audit of {self.name}: the uninterrupted run {outcome.stopped} at step "
                f"{len(self.expected) + 1}; fix that first, the audit compares resumes with it"
            ) from outcome.error
        if outcome.stopped == "returned":
            self.returned, self.result = True, outcome.result

    def _difference(self, step: int, blob: bytes) -> Difference | None:
        if _digest(blob) == self.digests[step - 1]:
            return None
        # Other bytes with equal structure (a string shared in one state and not in the
        # other, say) are no divergence: the walk decides.
        loads = self.serializer.loads
        return first_difference(loads(self.expected[step - 1]), loads(blob),
                                path=self.opts.state_arg, exclude=self.exclude,
                                dumps=self.serializer.dumps)

    def _result_difference(self, blob: bytes | None) -> Difference | None:
        """The resumed run's return value against the uninterrupted one's, as a state."""
        if self.result is None or blob is None:
            if self.result is blob:
                return None  # neither could be pickled again here: the runs stored them
            return Difference("result", "one return value cannot be pickled",
                              "?" if self.result is None else "(pickled)",
                              "?" if blob is None else "(pickled)")
        if _digest(blob) == _digest(self.result):
            return None
        loads = self.serializer.loads
        # A path excluded in the state is excluded where the return value holds it too:
        # a body that returns its state (or a dict of the same shape) has the same
        # parts that may differ (the GA's state['seconds'], review 38).
        arg = self.opts.state_arg
        as_result = {"result" + p[len(arg):] for p in self.exclude
                     if p.startswith(arg) and p[len(arg):len(arg) + 1] in ("[", ".")}
        return first_difference(loads(self.result), loads(blob), path="result",
                                exclude=self.exclude | as_result, dumps=self.serializer.dumps)

    def _check_resume(self, k: int) -> None:
        """Resume from the checkpoint of step ``k`` and compare every later state, and the
        return value if the uninterrupted run returned."""
        self.resumes += 1
        objects = self.reference.objects_until(self.run_id, k)
        count = len(self.expected) - k
        drive = count + 1 if self.returned else count  # then one more next(): the return
        where = ""
        if self.target is not None:
            if self.work is None:
                self.work = Path(tempfile.mkdtemp(prefix="resumable-audit-"))
            outcome, seed = _resume_in_child(self.work, k, self.target, self.opts,
                                             self.run_id, self.call, objects, drive,
                                             self.sandbox)
            where = f" in a new interpreter (PYTHONHASHSEED={seed})"
        else:
            args, kwargs = self.call.fresh()
            self.sandbox.new_run()
            clone = _clone(self.fn, self.opts, _store_with(f"{self.label}-{k}", objects),
                           self.run_id)
            # Compared at each yield, so a divergent resume stops there.
            outcome = _drive(clone.iter(*args, **kwargs), drive, self.serializer.dumps,
                             lambda i, blob: i > count
                             or self._difference(k + i, blob) is None)
        for i, blob in enumerate(outcome.states[:count], start=1):
            diff = self._difference(k + i, blob)
            if diff is not None:
                self._found(_Finding(
                    k + i, k, diff.path, f"{diff.reason}; uninterrupted: {diff.expected}; "
                    f"resumed from step {k}{where}: {diff.actual}"))
                return
        if outcome.stopped is not None and len(outcome.states) < count:
            step = k + len(outcome.states) + 1
            self._found(_Finding(step, k, None, (
                f"resumed from step {k}{where}, the body {outcome.stopped} instead of "
                f"yielding step {step}, which the uninterrupted run yielded")))
            return
        if not self.returned:
            return
        step = len(self.expected) + 1  # the next() that returned
        if len(outcome.states) > count:
            self._found(_Finding(step, k, None, (
                f"resumed from step {k}{where}, the body yielded step {step} where the "
                f"uninterrupted run returned")))
        elif outcome.stopped != "returned":
            self._found(_Finding(step, k, None, (
                f"resumed from step {k}{where}, the body {outcome.stopped} instead of "
                f"returning after step {step - 1}, as the uninterrupted run did")))
        else:
            diff = self._result_difference(outcome.result)
            if diff is not None:
                self._found(_Finding(step, k, diff.path, (
                    f"the return value differs: {diff.reason}; uninterrupted: "
                    f"{diff.expected}; resumed from step {k}{where}: {diff.actual}")))

    def _found(self, finding: _Finding) -> None:
        if self.found is None or finding.step < self.found.step:
            self.found = finding

    def _report(self) -> AuditReport:
        common: dict[str, Any] = {"function": self.name, "steps": len(self.expected),
                                  "resumes": self.resumes,
                                  "fresh_process": self.target is not None,
                                  "returned": self.returned}
        f = self.found
        if f is None:
            return AuditReport(ok=True, **common)
        return AuditReport(ok=False, step=f.step, path=f.path, detail=f.detail,
                           resumed_from=f.resumed_from, **common)


def _digest(blob: bytes) -> bytes:
    return hashlib.blake2b(blob, digest_size=32).digest()


def _normal_path(path: str) -> str:
    """``state["seconds"]`` as the report writes it: ``state['seconds']``."""
    if not isinstance(path, str):
        raise ConfigurationError(f"audit: exclude takes paths as the report prints them, such "
                                 f"as \"state['seconds']\", not {path!r}")
    return re.sub(r'\["([^"\'\\]*)"\]', lambda m: f"[{m.group(1)!r}]", path.strip())


def audit(fn: CheckpointedFunction[Any, Any], args: tuple[Any, ...], kwargs: dict[str, Any],
          *, steps: int = 5, fresh_process: bool = False,
          exclude: Iterable[str] = ()) -> AuditReport:
    """See ``CheckpointedFunction.audit``."""
    return _Audit(fn, args, kwargs, steps, fresh_process, exclude).run()


__all__ = ["AuditReport", "Difference", "audit", "first_difference"]
