"""Describe a library's objects by value, so a run id never depends on object addresses.

``describe(obj, path)`` feeds a canonical, tagged byte encoding of ``obj`` into a hash:
values by value, functions by module, name and code (with defaults, closure cells and
``__self__``), partials by function and arguments, RNGs by their state, other objects by
class and attributes. What has no stable value raises ``Unidentifiable`` naming its path
(``toolbox.evaluate.__closure__[0]``), and the integrations turn that into "pass run_id=".
"""

from __future__ import annotations

import enum
import functools
import hashlib
import logging
import math
import pickle
import random
import struct
import sys
import types
from collections.abc import Mapping
from typing import Any

from .. import _numpy
from .._errors import ConfigurationError


class Unidentifiable(ConfigurationError):
    """A part of the call has no value that is the same in every process."""

    def __init__(self, path: str, reason: str) -> None:
        super().__init__(f"{path}: {reason}")
        self.path, self.reason = path, reason


_MAX_DEPTH = 60


class _Describer:
    def __init__(self) -> None:
        self.h = hashlib.sha256()
        self.seen: dict[int, int] = {}
        self.keep: list[Any] = []  # keeps ids valid while the walk runs
        self.np = _numpy.loaded()  # once per description, not per object

    def put(self, tag: str, data: bytes = b"") -> None:
        self.h.update(f"{tag}:{len(data)}:".encode())
        self.h.update(data)

    def sub(self, obj: Any, path: str, depth: int, own_refs: bool = False) -> bytes:
        """The digest of ``obj`` alone (for sorting set and mapping items).

        ``own_refs``: references inside ``obj`` are numbered on their own (a copy of the
        table so far), for a set's items, whose order depends on hashes (an object hashed
        by its address is visited first in one process and last in another)."""
        inner = _Describer()
        inner.seen = dict(self.seen) if own_refs else self.seen
        inner.keep = self.keep
        inner.walk(obj, path, depth)
        return inner.h.digest()

    def walk(self, obj: Any, path: str, depth: int = 0) -> None:
        if depth > _MAX_DEPTH:
            raise Unidentifiable(path, "nested too deeply to describe")
        if obj is None or isinstance(obj, bool):
            self.put("const", repr(obj).encode())
            return
        if isinstance(obj, enum.Enum):
            self.put("enum", f"{type(obj).__module__}.{type(obj).__qualname__}.{obj.name}"
                     .encode())
            return
        if type(obj) is int:
            self.put("int", str(obj).encode())
            return
        if type(obj) is float:
            self.put("float", b"nan" if math.isnan(obj) else struct.pack("<d", obj))
            return
        if type(obj) is complex:
            self.put("complex", struct.pack("<dd", obj.real, obj.imag))
            return
        if type(obj) is str:
            self.put("str", obj.encode("utf-8", "surrogatepass"))
            return
        if type(obj) in (bytes, bytearray):
            self.put("bytes", bytes(obj))
            return
        np = self.np
        if np is not None and isinstance(obj, np.generic):
            self.put("npscalar", f"{obj.dtype.str}".encode() + obj.tobytes())
            return
        if np is not None and isinstance(obj, np.dtype):
            self.put("dtype", obj.str.encode())
            return
        if type(obj) in (tuple, frozenset):  # by value: equal ones may or may not be shared
            self._walk_object(obj, path, depth, np)
            return
        # Mutable containers and objects: a second visit is a reference to the first (the
        # same script shares the same objects in every process; cycles end here).
        if id(obj) in self.seen:
            self.put("ref", str(self.seen[id(obj)]).encode())
            return
        self.seen[id(obj)] = len(self.seen)
        self.keep.append(obj)
        self._walk_object(obj, path, depth, np)

    def _walk_object(self, obj: Any, path: str, depth: int, np: Any) -> None:
        t = type(obj)
        if isinstance(obj, type):
            self.put("type", f"{obj.__module__}.{obj.__qualname__}".encode())
            if _made_at_run_time(obj):
                self.walk(obj.__bases__, f"{path}.__bases__", depth + 1)
                # Not the dunders: pickle caches __slotnames__ on a class it pickled.
                self.walk({k: v for k, v in vars(obj).items()
                           if not (k.startswith("__") and k.endswith("__"))},
                          f"{path}.__dict__", depth + 1)
            return
        if _made_at_run_time(t):  # an individual, its fitness: their class's attributes count
            self.walk(t, f"{path}.__class__", depth + 1)
        if isinstance(obj, types.ModuleType):
            self.put("module", obj.__name__.encode())
            return
        if isinstance(obj, logging.Logger):
            self.put("logger", obj.name.encode())
            return
        if obj is getattr(random, "_inst", None) or (
                np is not None and obj is getattr(np.random.mtrand, "_rand", None)):
            # the module's global RNG (scipy's frozen distributions hold numpy's): seeded
            # from the OS in every process; its state is not the call's (capture_rng)
            self.put("global-rng", f"{t.__module__}.{t.__qualname__}".encode())
            return
        if isinstance(obj, random.Random):
            self.put("random", f"{t.__module__}.{t.__qualname__}".encode())
            self.walk(obj.getstate(), f"{path}.getstate()", depth + 1)
            return
        if np is not None:
            if isinstance(obj, np.ndarray):
                self.put("ndarray", f"{t.__qualname__}:{obj.dtype.str}:{obj.shape}".encode())
                if obj.dtype.hasobject:
                    for i, item in enumerate(obj.ravel()):
                        self.walk(item, f"{path}[{i}]", depth + 1)
                else:
                    self.h.update(np.ascontiguousarray(obj).tobytes())
                extra = getattr(obj, "__dict__", None)
                if extra:
                    self.walk(dict(extra), f"{path}.__dict__", depth + 1)
                return
            if isinstance(obj, np.random.RandomState):
                self.put("RandomState")
                self.walk(obj.get_state(legacy=False), f"{path}.get_state()", depth + 1)
                return
            if isinstance(obj, np.random.Generator):
                self.put("Generator")
                self.walk(obj.bit_generator.state, f"{path}.bit_generator.state", depth + 1)
                return
            if isinstance(obj, np.random.BitGenerator):
                self.put("BitGenerator")
                self.walk(obj.state, f"{path}.state", depth + 1)
                return
        if isinstance(obj, functools.partial):
            self.put("partial")
            self.walk(obj.func, f"{path}.func", depth + 1)
            self.walk(obj.args, f"{path}.args", depth + 1)
            self.walk(obj.keywords, f"{path}.keywords", depth + 1)
            return
        if isinstance(obj, types.FunctionType):
            self._function(obj, path, depth)
            return
        if isinstance(obj, types.MethodType):
            self.put("method")
            self.walk(obj.__func__, f"{path}.__func__", depth + 1)
            self.walk(obj.__self__, f"{path}.__self__", depth + 1)
            return
        if isinstance(obj, (types.BuiltinFunctionType, types.BuiltinMethodType)):
            owner = getattr(obj, "__self__", None)
            name = f"{getattr(obj, '__module__', None)}.{obj.__qualname__}"
            self.put("builtin", name.encode())
            # random.random, numpy.random.normal...: methods of the global generators,
            # whose state the integrations describe (and capture_rng saves) on their own.
            if owner is not None and not isinstance(owner, types.ModuleType) \
                    and owner is not getattr(random, "_inst", None) \
                    and not (np is not None and owner is getattr(np.random.mtrand, "_rand", None)):
                self.walk(owner, f"{path}.__self__", depth + 1)
            return
        if isinstance(obj, (list, tuple)):
            self.put(f"seq:{t.__module__}.{t.__qualname__}", str(len(obj)).encode())
            for i, item in enumerate(obj):
                self.walk(item, f"{path}[{i}]", depth + 1)
            extra = getattr(obj, "__dict__", None)  # a DEAP individual's fitness
            if extra:
                self.walk(dict(extra), f"{path}.__dict__", depth + 1)
            return
        if isinstance(obj, (set, frozenset)):
            parts = sorted(self.sub(item, f"{path}{{...}}", depth + 1, own_refs=True)
                           for item in obj)
            self.put(f"set:{t.__qualname__}", b"".join(parts))
            return
        if isinstance(obj, Mapping):
            items = sorted(self.sub(k, f"{path} key", depth + 1)
                           + self.sub(v, f"{path}[{k!r}]", depth + 1) for k, v in obj.items())
            self.put(f"map:{t.__module__}.{t.__qualname__}", b"".join(items))
            extra = getattr(obj, "__dict__", None)
            if extra:
                self.walk(dict(extra), f"{path}.__dict__", depth + 1)
            return
        attrs = _attributes(obj)
        if attrs is not None:
            self.put("obj", f"{t.__module__}.{t.__qualname__}".encode())
            self.walk(attrs, path, depth + 1)
            return
        # No attributes (operator.attrgetter, numpy ufuncs...): what pickle records.
        try:
            data = pickle.dumps(obj, protocol=4)
        except Exception as err:
            raise Unidentifiable(
                path, f"a {t.__module__}.{t.__qualname__} has no value to identify it by "
                f"({type(err).__name__}: {err})") from None
        self.put("pickled", data)

    def _function(self, fn: types.FunctionType, path: str, depth: int) -> None:
        self.put("function", f"{fn.__module__}.{fn.__qualname__}".encode())
        self._code(fn.__code__)
        self.walk(fn.__defaults__, f"{path}.__defaults__", depth + 1)
        self.walk(fn.__kwdefaults__, f"{path}.__kwdefaults__", depth + 1)
        for i, cell in enumerate(fn.__closure__ or ()):
            try:
                value = cell.cell_contents
            except ValueError:  # an empty cell
                self.put("emptycell")
                continue
            self.walk(value, f"{path}.__closure__[{i}] ({fn.__code__.co_freevars[i]})",
                      depth + 1)

    def _code(self, code: types.CodeType) -> None:
        # Not the line numbers: an edit above a function does not change what it does.
        self.put("code", code.co_code)
        self.put("names", " ".join(code.co_names + code.co_varnames).encode())
        for const in code.co_consts:
            if isinstance(const, types.CodeType):
                self._code(const)
            else:
                self.put("const", _const_repr(const).encode())


def _const_repr(const: Any) -> str:
    """A code constant's repr, with a frozenset's items sorted: its repr lists them in
    hash order, which for strings differs between processes (PYTHONHASHSEED)."""
    if isinstance(const, frozenset):
        return "frozenset({" + ", ".join(sorted(map(_const_repr, const))) + "})"
    if type(const) is tuple and any(isinstance(c, (frozenset, tuple)) for c in const):
        inner = ", ".join(map(_const_repr, const))
        return f"({inner},)" if len(const) == 1 else f"({inner})"
    return repr(const)


# Classes that a library makes at run time from the caller's arguments, whose class
# attributes are configuration: DEAP's creator.create("FitnessMax", base.Fitness,
# weights=(1.0,)) puts the weights on the class, so by name alone a maximization and a
# minimization would be one run. Other classes are identified by name (their code is the
# program's, see version=).
_RUN_TIME_CLASS_MODULES = frozenset({"deap.creator"})


def _made_at_run_time(klass: type) -> bool:
    return getattr(klass, "__module__", None) in _RUN_TIME_CLASS_MODULES


def _attributes(obj: Any) -> dict[str, Any] | None:
    attrs: dict[str, Any] = {}
    found = False
    d = getattr(obj, "__dict__", None)
    if isinstance(d, dict):
        attrs.update(d)
        found = True
    for klass in type(obj).__mro__:
        for name in getattr(klass, "__slots__", ()) if isinstance(
                getattr(klass, "__slots__", ()), (tuple, list)) else ():
            if name not in ("__dict__", "__weakref__") and hasattr(obj, name):
                attrs[f"slot:{name}"] = getattr(obj, name)
                found = True
    return attrs if found else None


def digest(parts: Mapping[str, Any]) -> str:
    """A hex digest of ``parts`` (name -> object), equal in every process for equal values.

    Raises ``Unidentifiable`` naming the first part that has no stable value.
    """
    d = _Describer()
    for name in sorted(parts):
        d.put("part", name.encode())
        d.walk(parts[name], name)
    return d.h.hexdigest()


def global_random_state() -> tuple[Any, ...]:
    """The state of the ``random`` module: DEAP draws from it, so it is part of the run."""
    return random.getstate()


def numpy_seed() -> int | None:
    """``n`` when numpy's global RNG holds exactly the state ``np.random.seed(n)`` left it
    in (no number drawn since), else None. Never imports numpy.

    A fitness that calls ``np.random.normal`` after ``np.random.seed(2)`` is another run
    than after ``seed(1)``, but numpy's whole global state cannot be part of a run id: a
    program that never seeds numpy has an unseeded state from the OS, a new one in every
    process, and its restarted pod would not find its run. The two are told apart by the
    state itself: ``seed(n)`` (any ``n`` numpy takes, 0 to 2**32 - 1) fills the Mersenne
    Twister's key by Knuth's recurrence from ``n`` and sets its position to the end,
    whereas a state seeded from the OS (or from a sequence) has ``key[0] = 0x80000000``
    and random words after it: 623 words follow the recurrence by chance with
    probability 2**-19936. Once a number has been drawn the key is twisted and ``n`` is
    not recognised (None, as unseeded).
    """
    np = _numpy.loaded()
    if np is None or "numpy.random" not in sys.modules:  # nobody has used its global RNG
        return None
    state = np.random.get_state(legacy=False)  # (legacy=True warns for other generators)
    if state.get("bit_generator") != "MT19937" or state.get("has_gauss"):
        return None
    key, pos = state["state"]["key"], state["state"]["pos"]
    if pos != len(key):
        return None
    k = key.astype(np.uint64)
    step = (np.uint64(1812433253) * (k[:-1] ^ (k[:-1] >> np.uint64(30)))
            + np.arange(1, len(k), dtype=np.uint64)) & np.uint64(0xFFFFFFFF)
    return int(k[0]) if np.array_equal(step, k[1:]) else None
