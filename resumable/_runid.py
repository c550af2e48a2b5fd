"""Run identity: a name that every process derives alike from the same call."""

from __future__ import annotations

import collections
import copyreg
import dataclasses
import enum
import functools
import hashlib
import importlib
import math
import pickle
import random
import re
import struct
import sys
import types
from collections.abc import Callable, Mapping, Sequence
from pathlib import PurePath, PureWindowsPath
from typing import Any, NoReturn

from . import _numpy, _rng, _settings
from ._errors import ConfigurationError

MAX_RUN_ID = 200
_REFS = re.compile(rb"ref:(\d+);")  # a back-reference to the depth where a container began
_ALLOWED = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9._:@+=-]*$")
_UNSAFE = re.compile(r"[^A-Za-z0-9._-]+")


def validate_run_id(run_id: str, source: str = "run_id") -> str:
    """Reject ids that could escape the run's folder or confuse a store; never rewrite them.

    Rewriting (sanitising) could map two different ids onto one run, so bad ids fail.
    """
    if not isinstance(run_id, str):
        raise ConfigurationError(f"{source} must be a str, got {type(run_id).__name__}")
    problem = None
    if not run_id:
        problem = "is empty"
    elif len(run_id) > MAX_RUN_ID:
        problem = f"is {len(run_id)} characters long (at most {MAX_RUN_ID})"
    elif any(ord(c) < 32 or ord(c) == 127 for c in run_id):
        problem = "contains control characters"
    elif "/" in run_id or "\\" in run_id:
        problem = "contains a path separator"
    elif run_id in (".", "..") or ".." in run_id:
        problem = "contains '..'"
    elif not _ALLOWED.match(run_id):
        problem = "must start with a letter, digit or _ and use only letters, digits and _.:@+=-"
    if problem:
        raise ConfigurationError(
            f"{source} {run_id!r} {problem}; choose a plain name like 'ga-2024'"
        )
    return run_id


_MAX_DEPTH = 100
# The version of the encoding, kept in a run's identity record. 2: paths have tags of
# their own (before, a path was the tuple ("path", str(path))). 3: numpy scalars by dtype
# and bytes (before, by .item(): np.float32(0.5) was 0.5), a 0-d array's own shape,
# Fortran order, an OrderedDict's order, attributes of list, tuple and dict subclasses
# and a dataclass's attributes beyond its fields, classes made at run time by value.
# 4 (review 106: each pair had one run id): the class of a container (list, tuple, dict
# or set subclass, dataclass) or an enum member made at run time by value; a set
# subclass by module and name; an enum member without a name (a Flag
# value no member spells) by its value; an int, float or str subclass by its class and
# attributes (not numpy's float64: the same as a float, as before); an array's axes in
# memory order when that is neither C's nor Fortran's (a transposed or reversed view).
# 5 (review 114: each pair had one run id): the slots of list, tuple, dict, set, int,
# float, complex, str and bytes subclasses (a genome's slotted ``sigma``), and a set
# subclass's attributes; values without such attributes keep their bytes.
# 6 (review 119: float("nan") and -float("nan") had one run id): a NaN by its bits, as an
# array's are, except float("nan")'s own (math.nan, np.nan), which keeps its bytes.
# 7 (review 142: each pair had one run id, or a call none): an array's values without the
# padding bytes its dtype leaves (a long double's 6 of 16, an aligned structured dtype's
# gaps: whatever memory held, another id in every process); a dataclass's slots beyond its
# fields; an RNG subclass's own attributes; the class a __reduce__'s classmethod is bound
# to (type(self).create, inherited, named the base class).
ENCODING = 7
_ATOMS = (type(None), bool, int, float, complex, str, bytes, bytearray)
_FAST = frozenset(_ATOMS)


class _Encoder:
    """A canonical byte encoding: equal values give equal bytes in every process.

    Independent of ``hash()`` (sets and dicts are sorted by their encoded items) and of
    memory addresses. Cycles become back-references to the enclosing level. ``path`` is
    where a value sits in the call (``self.rng``, ``fitness.__closure__[0]``), for errors.
    """

    def __init__(self, *, encoding: int = ENCODING) -> None:
        self._active: dict[int, int] = {}  # id of a container on the current path -> depth
        self.encoding = encoding  # as that version of the encoding did (older records)
        self.legacy_paths = encoding == 1
        self.nan_bits = encoding >= 6  # (a NaN other than float("nan") by its bits)
        self.paths = 0  # how many paths were encoded
        self.np = _numpy.loaded()  # once per encoding, not per container
        # a class's encoding at a depth, once made, with the containers it went through
        # (encoding 4)
        self._classes: dict[tuple[type, int], tuple[bytes, frozenset[int]]] = {}
        self._entered: list[int] = []  # ids of the containers encoded, in order
        self._slots: dict[type, list[str]] = {}  # a class's slot names (encoding 5)
        self.budget: int | None = None  # containers left to encode (encode_within)

    def encode(self, obj: Any, path: str) -> bytes:
        out = bytearray()
        self._encode(obj, out, path, 0)
        return bytes(out)

    def _fail(self, obj: Any, path: str, why: str = "it has no stable value") -> NoReturn:
        raise ConfigurationError(
            f"cannot derive a run id: {path} is a {_mod(type(obj).__module__)}."
            f"{type(obj).__qualname__} and {why}; pass run_id= (or $RESUMABLE_RUN_ID) to "
            "name the run yourself, or leave the argument out of the identity with ignore="
        )

    def _encode(self, obj: Any, out: bytearray, path: str, depth: int) -> None:
        if depth > _MAX_DEPTH:
            raise ConfigurationError(f"cannot derive a run id: {path} is nested more than "
                                     f"{_MAX_DEPTH} levels deep; pass run_id= or ignore=")
        if isinstance(obj, (*_ATOMS, enum.Enum)):
            if self.encoding >= 4 and type(obj) not in _FAST and not self._plain_atom(obj):
                self._atom_subclass(obj, out, path, depth)
                return
            _atom(obj, out, self.nan_bits)
            return
        key = id(obj)
        if key in self._active:  # a cycle: refer to the level where obj started
            out += f"ref:{self._active[key]};".encode()
            return
        if self.budget is not None:
            self.budget -= 1
            if self.budget < 0:
                raise OverBudget
        self._active[key] = depth
        self._entered.append(key)
        try:
            self._compound(obj, out, path, depth + 1)
        finally:
            del self._active[key]

    def _compound(self, obj: Any, out: bytearray, path: str, depth: int) -> None:
        enc = self._encode
        tag = type(obj).__qualname__
        np = self.np
        if isinstance(obj, PurePath):  # a tag of its own: not the tuple ("path", str)
            self.paths += 1
            if self.legacy_paths:
                enc(("path", str(obj)), out, path, depth)
            elif isinstance(obj, PureWindowsPath):
                # Not PurePosixPath('a\\b') (whose str is that of PureWindowsPath('a/b')),
                # and equal as Windows compares paths: without regard to case.
                out += b"winpath:"
                _atom(str(obj).lower(), out)
            else:
                out += b"path:"
                _atom(str(obj), out)
        elif isinstance(obj, (list, tuple)):
            self._subclass(obj, out, path, depth, (list, tuple))
            out += f"{tag}:{len(obj)}[".encode()
            if not (len(obj) >= _BULK and _bulk(obj, out, np)):
                for i, item in enumerate(obj):
                    if type(item) in _FAST:  # skip building a path nobody reads
                        _atom(item, out, self.nan_bits)
                    else:
                        enc(item, out, f"{path}[{i}]", depth)
            out += b"]"
            self._extra_attrs(obj, out, path, depth)
        elif isinstance(obj, _Attrs):
            items = sorted(self._sub(name, path, depth) + b"="
                           + self._sub(value, f"{path}.{name}", depth)
                           for name, value in obj.items())
            out += f"map:{len(items)}{{".encode() + b"".join(items) + b"}"
        elif isinstance(obj, (set, frozenset)):
            self._subclass(obj, out, path, depth, (set, frozenset), named=True)
            parts = sorted(self._sub(item, f"{path} item", depth) for item in obj)
            out += f"set:{len(parts)}{{".encode() + b"".join(parts) + b"}"
            if self.encoding >= 5:
                self._extra_attrs(obj, out, path, depth)
        elif isinstance(obj, Mapping):
            if type(obj) is not dict:  # OrderedDict, Counter, defaultdict: not a dict
                out += f"mapping:{_name(type(obj))}:".encode()
                self._subclass(obj, out, path, depth, ())
                if isinstance(obj, collections.defaultdict):
                    enc(obj.default_factory, out, f"{path}.default_factory", depth)
            items = [self._sub(k, f"{path} key", depth) + b"="
                     + self._sub(v, f"{path}[{_key(k)}]", depth) for k, v in obj.items()]
            if not (self.encoding >= 3 and isinstance(obj, collections.OrderedDict)):
                items.sort()  # (an OrderedDict's order is part of its value)
            out += f"map:{len(items)}{{".encode() + b"".join(items) + b"}"
            self._extra_attrs(obj, out, path, depth)
        elif dataclasses.is_dataclass(obj) and not isinstance(obj, type):
            out += f"dc:{_mod(type(obj).__module__)}.{tag}".encode()
            self._subclass(obj, out, path, depth, ())
            fields = {f.name: getattr(obj, f.name) for f in dataclasses.fields(obj)}
            enc(_Attrs(fields), out, path, depth)
            if self.encoding >= 3:
                extra = getattr(obj, "__dict__", None)
                extra = extra if isinstance(extra, dict) else {}
                slots = {k: v for k, v in self._instance_attrs(obj).items()
                         if k not in extra} if self.encoding >= 7 else {}
                if set(extra) - set(fields) or set(slots) - set(fields):
                    out += b"dcextra"
                    enc(_Attrs({k: v for k, v in extra.items() if k not in fields}), out,
                        path, depth)
                if set(slots) - set(fields):  # (without a stable value: by its type, as
                    # before encoding 7, when they were not encoded at all)
                    self._lenient_attrs({k: v for k, v in slots.items() if k not in fields},
                                        out, path, depth)
        elif np is not None and isinstance(obj, np.ndarray):
            if obj.dtype.hasobject:
                if obj.dtype != object:
                    self._fail(obj, path, "its structured dtype holds Python objects")
                out += f"objarray:{obj.shape}[".encode()
                for i, item in enumerate(obj.flat):
                    enc(item, out, f"{path}.flat[{i}]", depth)
                out += b"]"
            else:
                arr = np.ascontiguousarray(obj)
                # A structured or void dtype's str is only its size (|V16): use its fields.
                dtype = (repr(arr.dtype.descr) if arr.dtype.kind == "V" else arr.dtype.str)
                shape = arr.shape
                if self.encoding >= 3:
                    # (ascontiguousarray makes a 0-d array 1-d.) Fortran order: equal
                    # values, but sums along an axis add in another order.
                    shape = obj.shape
                    if obj.ndim > 1 and obj.flags.f_contiguous and not obj.flags.c_contiguous:
                        dtype += ":F"
                    elif self.encoding >= 4 and not obj.flags.c_contiguous:
                        dtype += _axis_order(obj)
                data = _value_bytes(np, arr) if self.encoding >= 7 else arr.tobytes()
                out += f"ndarray:{dtype}:{shape}:".encode() + data
            if type(obj) is not np.ndarray:  # a subclass: its class and what it adds
                out += f"ndsub:{_name(type(obj))}:".encode()
                if isinstance(obj, np.ma.MaskedArray):
                    enc(np.ma.getmaskarray(obj).view(np.ndarray), out, f"{path}.mask", depth)
                    enc(obj.fill_value, out, f"{path}.fill_value", depth)
                else:
                    enc(_Attrs(getattr(obj, "__dict__", {})), out, path, depth)
        elif np is not None and isinstance(obj, np.generic):
            if self.encoding < 3:
                enc(obj.item(), out, path, depth)
            else:
                self._numpy_scalar(obj, out, path, depth)
        elif _is_global_rng(obj):
            # random's and numpy's global RNG (a scipy frozen distribution holds numpy's):
            # seeded from the OS in every process; capture_rng keeps its state, not this
            out += f"global-rng:{_name(type(obj))};".encode()
        elif (state := _rng_state(obj)) is not None:
            # RNGs are identified by their state: seeded alike is the same argument.
            out += f"rng:{_mod(type(obj).__module__)}.{tag}".encode()
            enc(state, out, f"{path} state", depth)
            if self.encoding >= 4 and (spawned := _rng._spawned(obj)):
                # (children spawned, which its state does not hold: default_rng(1) after
                # .spawn(5) hands out others, review 109; 0 leaves the id as it was)
                out += f"spawned:{spawned};".encode()
            if self.encoding >= 7 and type(obj) not in _rng.rng_classes():
                # A subclass's own attributes (Noisy(seed, scale)): its state is not all
                # of it. (random.Random's gauss_next is in its state.)
                extra = {k: v for k, v in self._instance_attrs(obj).items()
                         if k != "gauss_next"}
                if extra:  # (one without a stable value by its type: a lock worked before)
                    self._lenient_attrs(extra, out, path, depth)
        elif isinstance(obj, type):
            known = self._cached(obj, depth) if self.encoding >= 4 else None
            if known is not None:  # (once per class, depth and encoding: each instance
                out += known       # of a subclass names its class, review 108)
                return
            start, entered = len(out), len(self._entered)
            if self.encoding >= 3 and _resolve(obj.__module__, obj.__qualname__) is not obj:
                self._class_by_value(obj, out, path, depth)
            else:
                out += f"type:{_name(obj)};".encode()
            if self.encoding >= 4:
                made = bytes(out[start:])
                # Kept for its depth (the depth limit, and its back-references, spell it),
                # and only if every back-reference points inside it (the class itself, a
                # method calling super()): one to an object on the path above depends on
                # the path, and reusing it made the bytes depend on which occurrence came
                # first, a set's order, so the hash seed (reviews 109, 110)
                if all(int(ref) >= depth - 1 for ref in _REFS.findall(made)):
                    self._classes[(obj, depth)] = (made, frozenset(self._entered[entered:]))
        elif isinstance(obj, types.ModuleType):
            out += f"module:{obj.__name__};".encode()
        elif (isinstance(obj, (types.BuiltinFunctionType, types.MethodType))
              and _is_global_rng(obj.__self__)):
            # random.random, np.random.normal: the module's function, not a state that
            # differs in every process (the global RNGs are seeded from os.urandom)
            out += f"global-rng:{_mod(type(obj.__self__).__module__)}.{obj.__name__};".encode()
        elif isinstance(obj, types.FunctionType):
            self._function(obj, out, path, depth)
        elif isinstance(obj, types.MethodType):
            out += b"method:"
            enc(obj.__func__, out, f"{path}.__func__", depth)
            enc(obj.__self__, out, f"{path}.__self__", depth)
        elif isinstance(obj, functools.partial):
            out += f"partial:{tag}:".encode()
            enc(obj.func, out, f"{path}.func", depth)
            enc(obj.args, out, f"{path}.args", depth)
            enc(obj.keywords, out, f"{path}.keywords", depth)
        elif isinstance(obj, types.CodeType):
            _code(obj, out)
        elif isinstance(obj, types.BuiltinFunctionType):
            owner = obj.__self__
            out += f"builtin:{_name(obj)};".encode()
            if owner is not None and not isinstance(owner, types.ModuleType):
                enc(owner, out, f"{path}.__self__", depth)
        elif isinstance(obj, _DESCRIPTORS):
            out += f"descriptor:{_name(obj.__objclass__)}.{obj.__name__};".encode()
        elif type(obj) is object:
            self._fail(obj, path, "a bare object() is only ever equal to itself")
        elif (identify := getattr(type(obj), "_identity_parts", None)) is not None:
            # a @checkpointed function or method passed as an argument: by the code it
            # wraps (it pickles by name, which would identify it by its name alone)
            func, owner = identify(obj)
            out += b"checkpointed:"
            enc(func, out, f"{path}.__wrapped__", depth)
            if owner is not None:
                enc(owner, out, f"{path}.__self__", depth)
        else:
            self._reduce(obj, out, path, depth)

    def _subclass(self, obj: Any, out: bytearray, path: str, depth: int,
                  builtins: tuple[type, ...], named: bool = False) -> None:
        """Encoding 4: a container's class, beyond what encoding 3 wrote of it (a list or
        tuple subclass's qualname, a mapping's or a dataclass's module and name; nothing
        of a set's): by value when made at run time; a set subclass by module and name
        (``named``). An importable list or tuple subclass stays as it was (a namedtuple,
        a DEAP individual: their runs keep their ids), so two modules' classes of one
        qualname holding equal values still share a run."""
        cls = type(obj)
        if self.encoding < 4 or cls in builtins:
            return
        if _resolve(cls.__module__, cls.__qualname__) is not cls:
            self._class(cls, out, path, depth)
        elif named:
            out += f"cls:{_name(cls)};".encode()

    @staticmethod
    def _plain_atom(obj: Any) -> bool:
        """What encoding 3's ``_atom`` told apart, with nothing more to tell: a member of
        an enum importable by name, numpy's float64 (a float, as before)."""
        if isinstance(obj, enum.Enum):
            cls = type(obj)
            return obj.name is not None and _resolve(cls.__module__, cls.__qualname__) is cls
        return type(obj).__module__ == "numpy"

    def _atom_subclass(self, obj: Any, out: bytearray, path: str, depth: int) -> None:
        """Encoding 4: an enum member of a class made at run time or without a name, an
        int, float or str subclass: its value, its class, its attributes."""
        if isinstance(obj, enum.Enum):
            out += b"enum4:"
            self._class(type(obj), out, path, depth)
            _atom(obj.name, out)
            self._encode(obj.value, out, f"{path}.value", depth)
            return
        base: Any = _atom_base(type(obj))
        out += b"atomsub:"
        self._class(type(obj), out, path, depth)
        _atom(base(obj), out, self.nan_bits)
        extra = self._instance_attrs(obj)
        if extra:
            out += b"attrs"
            self._encode(_Attrs(extra), out, path, depth)

    def _cached(self, cls: type, depth: int) -> bytes | None:
        """The class's encoding made at this depth, unless something it went through is
        on the path now (then _encode refers back to it there: a class attribute holding
        an instance of the class, met first through another instance)."""
        found = self._classes.get((cls, depth))
        if found is None or not found[1].isdisjoint(self._active):
            return None
        # (what it went through, as if encoded here: a class whose encoding reuses this
        # one went through it too)
        self._entered.extend(found[1])
        return found[0]

    def _class(self, cls: type, out: bytearray, path: str, depth: int) -> None:
        """An instance's class, as ``_encode`` writes it, from the cache when it is there
        (without the walk through the other kinds of value: once per item of a list of
        str subclass instances, review 108)."""
        # (not while the class is being encoded above: _encode refers back to it then)
        known = None if id(cls) in self._active else self._cached(cls, depth + 1)
        if known is not None:
            out += known
        else:
            self._encode(cls, out, f"{path}.__class__", depth)

    def _extra_attrs(self, obj: Any, out: bytearray, path: str, depth: int) -> None:
        """A list, tuple, dict or set subclass's own attributes (a genome's ``sigma``)."""
        if self.encoding < 3:
            return
        extra = self._instance_attrs(obj)
        if extra:
            out += b"attrs"
            self._encode(_Attrs(extra), out, path, depth)

    def _lenient_attrs(self, attrs: Mapping[str, Any], out: bytearray, path: str,
                       depth: int) -> None:
        """Attributes encoding 7 added to an identity, each one without a stable value by
        its type (a lock in an RNG subclass: the call worked before, review 145)."""
        items = sorted(self._sub(name, path, depth) + b"="
                       + self._sub_or_type(value, f"{path}.{name}", depth)
                       for name, value in attrs.items())
        out += f"lattrs:{len(items)}{{".encode() + b"".join(items) + b"}"

    def _instance_attrs(self, obj: Any) -> dict[str, Any]:
        """An instance's attributes: its ``__dict__``, and from encoding 5 its slots."""
        extra = getattr(obj, "__dict__", None)
        found: dict[str, Any] = extra if isinstance(extra, dict) else {}
        if self.encoding >= 5:
            cls = type(obj)
            names = self._slots.get(cls)
            if names is None:
                names = self._slots[cls] = _rng.slot_names(cls)
            if names:
                found = {**found, **dict(_rng.slot_items(obj, names))}
        return found

    def _numpy_scalar(self, obj: Any, out: bytearray, path: str, depth: int) -> None:
        """By dtype and bytes: np.float32(0.5) is not 0.5 (float32 arithmetic gives
        other bits, int32 overflows)."""
        dtype = obj.dtype
        if dtype.hasobject:  # a structured scalar with object fields
            self._fail(obj, path, "its structured dtype holds Python objects")
        token = repr(dtype.descr) if dtype.kind == "V" else dtype.str
        if dtype.kind in "fc" and dtype.itemsize not in (2, 4, 8, 16 if dtype.kind == "c" else 8):
            # long doubles: padding bytes around the 80 bits are not part of the value;
            # numpy's repr is the shortest string that reads back the same value
            out += f"npscalar:{token}:{obj!r};".encode()
            return
        np: Any = self.np  # (loaded: obj is a numpy scalar)
        data = (_value_bytes(np, np.asarray(obj)) if self.encoding >= 7 and dtype.kind == "V"
                else obj.tobytes())  # (a structured scalar's padding: see _value_bytes)
        out += f"npscalar:{token}:{len(data)}:".encode() + data

    def _class_by_value(self, cls: type, out: bytearray, path: str, depth: int) -> None:
        """A class made at run time (in a function, or by type()): its name leads
        nowhere, or to another class, so its bases and attributes identify it."""
        out += f"class:{_name(cls)}(".encode()
        self._encode(cls.__bases__, out, f"{path}.__bases__", depth)
        out += b")"
        items = []
        # (a copy: reducing an instance of the class, one of its attributes, may add
        # __slotnames__ to it meanwhile; review 110)
        for name, value in list(vars(cls).items()):
            if name in _CLASS_BOOKKEEPING or (self.encoding >= 4 and name in _ENUM_CACHES):
                continue
            if isinstance(value, (staticmethod, classmethod)):
                value = (type(value).__name__, value.__func__)
            elif isinstance(value, property):
                value = ("property", value.fget, value.fset, value.fdel)
            elif isinstance(value, functools.cached_property):
                value = ("cached_property", value.func)  # (not its lock, in 3.11)
            # (a descriptor without a stable value by its type: this class was named by
            # its name alone before; failing the call would be a regression)
            part = self._sub_or_type(value, f"{path}.__dict__[{name!r}]", depth)
            items.append(self._sub(name, path, depth) + b"=" + part)
        items.sort()
        out += f"map:{len(items)}{{".encode() + b"".join(items) + b"}"

    def _sub_or_type(self, obj: Any, path: str, depth: int) -> bytes:
        """``_sub``, or for a value without a stable one its type."""
        try:
            return self._sub(obj, path, depth)
        except ConfigurationError:
            return f"unstable:{_name(type(obj))};".encode()

    def _sub(self, obj: Any, path: str, depth: int) -> bytes:
        buf = bytearray()
        if type(obj) in _FAST:
            _atom(obj, buf, self.nan_bits)
        else:
            self._encode(obj, buf, path, depth)
        return bytes(buf)

    def _function(self, fn: types.FunctionType, out: bytearray, path: str, depth: int) -> None:
        """Code (bytecode, constants, names; nested code too), defaults, closure cells."""
        out += f"function:{_mod(fn.__module__)}.{fn.__qualname__}:".encode()
        _code(fn.__code__, out)
        self._encode(fn.__defaults__, out, f"{path}.__defaults__", depth)
        self._encode(fn.__kwdefaults__, out, f"{path}.__kwdefaults__", depth)
        cells = fn.__closure__ or ()
        out += f"closure:{len(cells)}[".encode()
        for i, cell in enumerate(cells):
            try:
                content = cell.cell_contents
            except ValueError:  # an empty cell (a name assigned later in the outer scope)
                out += b"empty;"
                continue
            self._encode(content, out, f"{path}.__closure__[{i}]", depth)
        out += b"]"

    def _reduce(self, obj: Any, out: bytearray, path: str, depth: int) -> None:
        """Any other object is identified the way pickle would rebuild it."""
        try:
            reducer = copyreg.dispatch_table.get(type(obj))
            rv = reducer(obj) if reducer is not None else obj.__reduce_ex__(4)
        except Exception as err:
            self._fail(obj, path, f"cannot be pickled ({err})")
        if isinstance(rv, str):  # a module-level singleton, pickled by name
            module = getattr(obj, "__module__", None) or pickle.whichmodule(obj, rv)  # type: ignore[attr-defined]
            if _resolve(module, rv) is obj:
                out += f"global:{_mod(module)}.{rv};".encode()
                return
            # The name does not lead back to it (an lru_cache'd closure, `<locals>`):
            # identify what it wraps, by value, or refuse.
            wrapped = getattr(obj, "__wrapped__", None)
            if wrapped is None or wrapped is obj:
                self._fail(obj, path, f"it pickles by the name {module}.{rv}, which does "
                                      "not lead back to it (a local or replaced object)")
            out += f"wrapped:{_name(type(obj))}:".encode()
            self._encode(wrapped, out, f"{path}.__wrapped__", depth)
            return
        if not isinstance(rv, tuple) or len(rv) < 2:
            self._fail(obj, path, f"its __reduce_ex__ returned {type(rv).__name__}")
        rebuild, args, state, items, pairs = (*rv, None, None, None)[:5]
        out += f"obj:{_name(rebuild)}(".encode()
        if self.encoding >= 7 and isinstance(rebuild, types.MethodType):
            # type(self).create, a classmethod a subclass inherits: its name is the base
            # class's, the class it is bound to is not (review 142)
            out += b"bound:"
            self._encode(rebuild.__self__, out, f"{path}.__reduce__()[0].__self__", depth)
        self._encode(args, out, f"{path}.__reduce__()[1]", depth)
        out += b")"
        if isinstance(state, tuple) and len(state) == 2 and isinstance(state[1], dict):
            # (__dict__, slots): name each attribute in errors
            state = {**(state[0] or {}), **state[1]}
        if isinstance(state, dict) and all(isinstance(k, str) for k in state):
            out += b"attrs"
            self._encode(_Attrs(state), out, path, depth)
        elif state is not None:
            self._encode(state, out, f"{path}.__getstate__()", depth)
        if items is not None:
            self._encode(list(items), out, f"{path} item", depth)
        if pairs is not None:
            self._encode(dict(pairs), out, path, depth)


def _value_bytes(np: Any, arr: Any) -> bytes:
    """An array's values as bytes, without the padding bytes its dtype leaves, which hold
    whatever memory held (review 142: a long double array had another run id in every
    process): a structured dtype field by field, an 80-bit long double's 10 bytes of 16."""
    dtype = arr.dtype
    if dtype.names is not None:
        return b"".join(_value_bytes(np, np.ascontiguousarray(arr[name]))
                        for name in dtype.names)
    arr = np.ascontiguousarray(arr)
    if dtype.kind in "fc" and np.finfo(dtype).nmant == 63:  # x87's extended precision
        part = dtype.itemsize // (2 if dtype.kind == "c" else 1)
        octets = arr.reshape(-1).view(np.uint8).reshape(-1, part)
        big = dtype.byteorder == ">" or (dtype.byteorder == "=" and sys.byteorder == "big")
        return bytes(np.ascontiguousarray(octets[:, part - 10:] if big else octets[:, :10]))
    return bytes(arr.tobytes())


def _atom_base(cls: type) -> Any:
    """The built-in type a subclass of an atom (int, float, str...) derives from."""
    for base in cls.__mro__:
        if base in _FAST:
            return base
    raise TypeError(f"{cls!r} derives from no atom")  # (never: isinstance said it does)


def _axis_order(arr: Any) -> str:
    """Encoding 4: the axes of an array neither C- nor F-contiguous in memory order
    (largest stride first) and those it steps through backwards, when that order is not
    C's: a reduction runs in memory order, so a transposed or reversed view sums to
    other bits than its C copy (review 106)."""
    strides = arr.strides
    order = tuple(sorted(range(arr.ndim), key=lambda a: (-abs(strides[a]), a)))
    backwards = tuple(a for a in range(arr.ndim) if strides[a] < 0 and arr.shape[a] > 1)
    if order == tuple(range(arr.ndim)) and not backwards:
        return ""
    return f":axes{order}{backwards}"


def _key(k: Any) -> str:
    """A dict key in an error's path (its repr, unless that fails too)."""
    try:
        return repr(k)
    except Exception:
        return f"<{type(k).__qualname__} key>"


def _resolve(module: str, qualname: str) -> Any:
    """The object ``module.qualname`` names, or None when it names nothing (``<locals>``)."""
    found: Any = sys.modules.get(module)
    if found is None:
        try:
            found = importlib.import_module(module)
        except Exception:
            return None
    for part in qualname.split("."):
        found = getattr(found, part, None)
        if found is None:
            return None
    return found


# What Python, pickle, abc and dataclasses put in a class's __dict__ besides its
# behaviour and configuration (pickle caches __slotnames__ on a class it pickled).
_CLASS_BOOKKEEPING = frozenset({
    "__module__", "__dict__", "__weakref__", "__doc__", "__qualname__", "__slotnames__",
    "__annotations__", "__firstlineno__", "__static_attributes__", "__orig_bases__",
    "__parameters__", "__dataclass_fields__", "__dataclass_params__", "__match_args__",
    "__abstractmethods__", "_abc_impl",
})


# What enum adds to a class as it is used: each Flag combination computed, once made
# (review 108: a run-time Flag's id changed with the combinations a process had made).
_ENUM_CACHES = frozenset({"_value2member_map_", "_unhashable_values_", "_inverted_"})


class _Attrs(dict[str, Any]):
    """An object's attributes: encoded as a mapping, with ``path.name`` in errors."""


_DESCRIPTORS = (types.MethodDescriptorType, types.WrapperDescriptorType,
                types.ClassMethodDescriptorType, types.MethodWrapperType)


def _mod(module: str) -> str:
    """A module's name in run ids: a script is ``__main__``, also where multiprocessing's
    spawn and forkserver workers import it as ``__mp_main__`` (one run, either way)."""
    return "__main__" if module == "__mp_main__" else module


def _name(obj: Any) -> str:
    module = _mod(getattr(obj, "__module__", None) or "?")
    return f"{module}.{getattr(obj, '__qualname__', getattr(obj, '__name__', '?'))}"


_BULK = 64  # items of a list from which one of floats or ints is encoded in bulk
_DOUBLE = struct.Struct("<d")
_FLOAT_ITEM: Any = None  # numpy's record of one float's encoding: b"float:", 8 bytes, b";"


def _bulk(items: Sequence[Any], out: bytearray, np: Any) -> bool:
    """A list of floats only, or ints only, encoded at once, to the bytes ``_atom`` gives
    one item at a time (review 103: a problem holding four 1000x1000 tables of floats
    took seconds per call, 4 us a float). False, and nothing written, for anything else."""
    global _FLOAT_ITEM
    kinds = set(map(type, items))
    if kinds == {int}:
        # %d, where it writes no int of 4,301 digits or more: under a limit of 4,300 or
        # less (the default), or when none is that long (review 119)
        limit = sys.get_int_max_str_digits()
        if 0 < limit <= _DECIMAL_DIGITS or max(
                max(items).bit_length(), min(items).bit_length()) <= _DECIMAL_BITS:
            try:
                out += b"".join([b"int:%d;" % v for v in items])
                return True
            except ValueError:  # (a process limit below 4300 digits: review 119)
                pass
        out += b"".join([b"int:" + _int_text(v).encode() + b";" for v in items])
        return True
    if kinds != {float}:
        return False
    if np is None:  # (numpy is not imported here: only then, not for this)
        if any(v != v for v in items):  # (a NaN)
            return False
        pack = _DOUBLE.pack
        out += b"".join([b"float:" + pack(v) + b";" for v in items])
        return True
    values = np.array(items, dtype="<f8")
    if np.isnan(values).any():  # (a NaN is b"float:nan;", another length)
        return False
    if _FLOAT_ITEM is None:
        _FLOAT_ITEM = np.dtype([("tag", "S6"), ("value", "<f8"), ("end", "S1")])
    encoded = np.empty(len(values), dtype=_FLOAT_ITEM)
    encoded["tag"] = b"float:"
    encoded["value"] = values
    encoded["end"] = b";"
    out += encoded.tobytes()
    return True


# An int is written in decimal below 10**4300 (4,300 digits: str()'s default limit, as
# encoding 5 wrote them under it), in hex from there (review 119: the choice followed the
# process's limit, PYTHONINTMAXSTRDIGITS, so a restart with another setting started over)
_DECIMAL_DIGITS = 4300
_DECIMAL_BOUND = 10**_DECIMAL_DIGITS
_DECIMAL_BITS = _DECIMAL_BOUND.bit_length() - 1  # ints of as many bits or fewer are below
_CHUNK_DIGITS = 500  # (below the smallest limit a process may set, 640)
_CHUNK = 10**_CHUNK_DIGITS


def int_decimal(value: int) -> str | None:
    """An int's decimal digits when it is below 10**4300 in magnitude, whatever the
    process's int_max_str_digits; None from there."""
    magnitude = -value if value < 0 else value
    if magnitude.bit_length() > _DECIMAL_BITS and magnitude >= _DECIMAL_BOUND:
        return None
    try:
        return str(value)
    except ValueError:  # (a limit set below 4300 digits: in parts below it)
        pass
    parts = []
    while magnitude >= _CHUNK:
        magnitude, part = divmod(magnitude, _CHUNK)
        parts.append(str(part).zfill(_CHUNK_DIGITS))
    text = str(magnitude) + "".join(reversed(parts))
    return "-" + text if value < 0 else text


def _int_text(value: int) -> str:
    """An int as run ids write it: decimal below 10**4300, else ``x`` and hex."""
    text = int_decimal(value)
    return f"x{value:x}" if text is None else text


_NAN_BITS = struct.pack("<d", float("nan"))  # (the NaN that keeps b"float:nan;")


def _atom(obj: Any, out: bytearray, nan_bits: bool = False) -> None:
    """``nan_bits``: a NaN of other bits than float("nan") by them (encoding 6), not as
    b"float:nan;" (a code object's constants keep that: code has no encoding version)."""
    tag = type(obj).__qualname__
    if obj is None or isinstance(obj, bool):
        out += f"{tag}:{obj!r};".encode()
    elif isinstance(obj, enum.Enum):
        out += f"enum:{_mod(type(obj).__module__)}.{tag}.{obj.name};".encode()
    elif isinstance(obj, int):
        out += f"int:{_int_text(obj)};".encode()
    elif isinstance(obj, float):
        bits = struct.pack("<d", obj)
        if math.isnan(obj) and (not nan_bits or bits == _NAN_BITS):
            bits = b"nan"
        out += b"float:" + bits + b";"
    elif isinstance(obj, complex):
        out += b"complex:" + struct.pack("<dd", obj.real, obj.imag) + b";"
    elif isinstance(obj, str):
        data = obj.encode("utf-8", "surrogatepass")
        out += f"str:{len(data)}:".encode() + data
    else:
        kind = "bytes" if isinstance(obj, bytes) else "bytearray"
        out += f"{kind}:{len(obj)}:".encode() + bytes(obj)


def _code(code: types.CodeType, out: bytearray) -> None:
    """Bytecode, constants (nested code objects recursively), names and signature shape.

    Bytecode differs between Python versions (3.11 -> 3.12), so does this encoding.
    File names and line numbers are left out: moving a function does not change it.
    """
    out += (f"code:{code.co_argcount}:{code.co_posonlyargcount}:{code.co_kwonlyargcount}:"
            f"{code.co_flags}:{len(code.co_code)}:").encode() + code.co_code
    for names in (code.co_names, code.co_varnames, code.co_freevars, code.co_cellvars):
        out += b"|" + ",".join(names).encode()
    out += f"consts:{len(code.co_consts)}[".encode()
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            _code(const, out)
        else:
            _const(const, out)
    out += b"]"


def _const(const: Any, out: bytearray) -> None:
    if isinstance(const, (tuple, frozenset)):
        parts = []
        for item in const:
            buf = bytearray()
            if isinstance(item, types.CodeType):
                _code(item, buf)
            else:
                _const(item, buf)
            parts.append(bytes(buf))
        if isinstance(const, frozenset):
            parts.sort()
        out += f"{type(const).__name__}:{len(parts)}[".encode() + b"".join(parts) + b"]"
    elif const is Ellipsis:
        out += b"ellipsis;"
    else:
        _atom(const, out)


def _is_global_rng(obj: Any) -> bool:
    if obj is getattr(random, "_inst", None):
        return True
    np = _numpy.loaded()
    return np is not None and obj is getattr(np.random.mtrand, "_rand", None)


def _rng_state(obj: Any) -> Any:
    """The state of an RNG object (random.Random, numpy Generator/RandomState/BitGenerator)."""
    if isinstance(obj, random.Random):
        if isinstance(obj, random.SystemRandom):
            return None
        return obj.getstate()
    np = _numpy.loaded()
    if np is None:
        return None
    if isinstance(obj, np.random.Generator):
        return obj.bit_generator.state
    if isinstance(obj, np.random.RandomState):
        return obj.get_state(legacy=False)
    if isinstance(obj, np.random.BitGenerator):
        return obj.state
    return None


def encode_value(value: Any, path: str) -> bytes:
    """The canonical encoding of one value; ``path`` names it in errors."""
    return _Encoder().encode(value, path)


def encode_value_as(value: Any, path: str, encoding: int) -> bytes:
    """The encoding of ``value`` as version ``encoding`` of it did (to check older
    records and find runs older versions derived)."""
    return _Encoder(encoding=encoding).encode(value, path)


class OverBudget(Exception):
    """``encode_within`` met more containers than its budget."""


def encode_within(value: Any, path: str, encoding: int, budget: int) -> bytes:
    """Like ``encode_value_as``, or OverBudget after ``budget`` containers (the same
    value meets the same count in every process)."""
    encoder = _Encoder(encoding=encoding)
    encoder.budget = budget
    return encoder.encode(value, path)


def encode_leniently(value: Any, path: str, encoding: int = ENCODING) -> bytes:
    """For a fixed run id, which never needs a value: ``value``'s encoding, or, where it
    has no stable one, its type and each of its immediate parts (items, attributes),
    a part without a stable value by its type. ``Experiment(pop_size, lock)`` is then
    compared by ``pop_size``; a part that holds a thread or a pool, whatever it holds
    (a thread's id differs in every process), by its type. ``encoding``: as that version
    of the encoding did (a record written under it, review 108: a run started under
    encoding 3 got a RunMismatchError for the arguments encoding 4 moved)."""
    try:
        return encode_value_as(value, path, encoding)
    except ConfigurationError:
        pass
    parts: list[tuple[Any, Any]] | None = None
    if isinstance(value, Mapping):
        parts = list(value.items())
    elif isinstance(value, (list, tuple)):
        parts = list(enumerate(value))
    else:
        attrs = getattr(value, "__dict__", None)
        if isinstance(attrs, dict):
            parts = list(attrs.items())
        for klass in type(value).__mro__:
            slots = klass.__dict__.get("__slots__", ())
            for slot in (slots,) if isinstance(slots, str) else slots:
                if slot not in ("__dict__", "__weakref__") and hasattr(value, slot):
                    parts = (parts or []) + [(slot, getattr(value, slot))]
    head = f"lenient:{_name(type(value))}:".encode()
    if parts is None:
        return head
    items = []
    for key, part in parts:
        try:
            data = encode_value_as(part, path, encoding)
        except ConfigurationError:
            data = f"unstable:{_name(type(part))};".encode()
        try:
            name = encode_value_as(key, path, encoding)
        except ConfigurationError:
            name = f"unstable:{_name(type(key))};".encode()
        items.append(name + b"=" + data)
    items.sort()
    return head + f"{len(items)}{{".encode() + b"".join(items) + b"}"


def fingerprint(value: Any, path: str) -> str:
    """A short hash of one value (one per argument in the run's identity record)."""
    return hashlib.sha256(encode_value(value, path)).hexdigest()[:16]


def code_fingerprint(func: Callable[..., Any]) -> str:
    """A hash of a function's code (bytecode, constants, names), for the code-change warning."""
    code = getattr(func, "__code__", None)
    if not isinstance(code, types.CodeType):
        return ""
    buf = bytearray()
    _code(code, buf)
    return hashlib.sha256(bytes(buf)).hexdigest()[:16]


def encode_arguments(arguments: Mapping[str, Any],
                     encoding: int = ENCODING) -> dict[str, bytes]:
    """Each argument's encoding; errors name the argument (``self.rng``, ``fitness...``)."""
    return {name: encode_value_as(value, name, encoding) for name, value in arguments.items()}


def derive_run_id(func: Callable[..., Any], arguments: Mapping[str, Any],
                  version: str | int | None = None,
                  encoded: Mapping[str, bytes] | None = None) -> str:
    """``<module>.<qualname>-<12 hex>`` from the bound arguments (state excluded)."""
    if encoded is None:
        encoded = encode_arguments(arguments)
    # The same bytes as encoding the dict of arguments as a whole (ids stay stable).
    items = sorted(encode_value(k, "name") + b"=" + v for k, v in encoded.items())
    buf = f"map:{len(items)}{{".encode() + b"".join(items) + b"}"
    if version is not None:
        buf += b"version:" + encode_value(version, "version")
    digest = hashlib.sha256(buf).hexdigest()[:12]
    name = _UNSAFE.sub("_", f"{_mod(func.__module__)}.{func.__qualname__}").strip(".")
    return f"{name[: MAX_RUN_ID - 13]}-{digest}"


def fixed_run_id(explicit: str | None) -> str | None:
    """``run_id=``, else ``$RESUMABLE_RUN_ID``, else None (the id is derived)."""
    if explicit is not None:
        return validate_run_id(explicit)
    return _settings.RUN_ID.read()


def resolve_run_id(
    explicit: str | None, func: Callable[..., Any], arguments: Mapping[str, Any],
    version: str | int | None = None,
) -> str:
    return fixed_run_id(explicit) or derive_run_id(func, arguments, version)
