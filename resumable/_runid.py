"""Run identity: a name that every process derives alike from the same call."""

from __future__ import annotations

import dataclasses
import enum
import hashlib
import math
import re
import struct
import sys
from collections.abc import Callable, Mapping
from pathlib import PurePath
from typing import Any

from . import _settings
from ._errors import ConfigurationError

MAX_RUN_ID = 200
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


def _encode(obj: Any, out: bytearray, depth: int = 0) -> None:
    """A canonical byte encoding: equal values give equal bytes in every process."""
    if depth > 100:
        raise ConfigurationError("argument nesting too deep to derive a run id; pass run_id=")
    tag = type(obj).__qualname__
    if obj is None or isinstance(obj, bool):
        out += f"{tag}:{obj!r};".encode()
    elif isinstance(obj, enum.Enum):
        out += f"enum:{type(obj).__module__}.{tag}.{obj.name};".encode()
    elif isinstance(obj, int):
        out += f"int:{obj};".encode()
    elif isinstance(obj, float):
        out += b"float:" + (b"nan" if math.isnan(obj) else struct.pack("<d", obj)) + b";"
    elif isinstance(obj, complex):
        out += b"complex:" + struct.pack("<dd", obj.real, obj.imag) + b";"
    elif isinstance(obj, str):
        data = obj.encode("utf-8", "surrogatepass")
        out += f"str:{len(data)}:".encode() + data
    elif isinstance(obj, (bytes, bytearray)):
        out += f"bytes:{len(obj)}:".encode() + bytes(obj)
    elif isinstance(obj, PurePath):
        _encode(("path", str(obj)), out, depth + 1)
    elif isinstance(obj, (list, tuple)):
        out += f"{tag}:{len(obj)}[".encode()
        for item in obj:
            _encode(item, out, depth + 1)
        out += b"]"
    elif isinstance(obj, (set, frozenset)):
        parts = []
        for item in obj:
            buf = bytearray()
            _encode(item, buf, depth + 1)
            parts.append(bytes(buf))
        out += f"set:{len(parts)}{{".encode() + b"".join(sorted(parts)) + b"}"
    elif isinstance(obj, Mapping):
        items = []
        for k, v in obj.items():
            kb, vb = bytearray(), bytearray()
            _encode(k, kb, depth + 1)
            _encode(v, vb, depth + 1)
            items.append(bytes(kb) + b"=" + bytes(vb))
        out += f"map:{len(items)}{{".encode() + b"".join(sorted(items)) + b"}"
    elif dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        out += f"dc:{type(obj).__module__}.{tag}".encode()
        _encode({f.name: getattr(obj, f.name) for f in dataclasses.fields(obj)}, out, depth + 1)
    elif "numpy" in sys.modules and isinstance(obj, sys.modules["numpy"].ndarray):
        arr = sys.modules["numpy"].ascontiguousarray(obj)
        out += f"ndarray:{arr.dtype.str}:{arr.shape}:".encode() + arr.tobytes()
    elif "numpy" in sys.modules and isinstance(obj, sys.modules["numpy"].generic):
        _encode(obj.item(), out, depth + 1)
    elif callable(obj) and hasattr(obj, "__qualname__"):
        out += f"callable:{getattr(obj, '__module__', '?')}.{obj.__qualname__};".encode()
    elif hasattr(obj, "__dict__") and vars(obj):
        # A plain object (e.g. `self` of a decorated method) is identified by its class and
        # attributes; one whose attributes have no stable value still needs run_id=.
        out += f"obj:{type(obj).__module__}.{tag}".encode()
        _encode(vars(obj), out, depth + 1)
    else:
        raise ConfigurationError(
            f"cannot derive a run id from an argument of type {type(obj).__qualname__}: "
            "it has no stable value; pass run_id= or $RESUMABLE_RUN_ID"
        )


def derive_run_id(func: Callable[..., Any], arguments: Mapping[str, Any]) -> str:
    """``<module>.<qualname>-<12 hex>`` from the bound arguments (state excluded)."""
    buf = bytearray()
    _encode(dict(arguments), buf)
    digest = hashlib.sha256(bytes(buf)).hexdigest()[:12]
    name = _UNSAFE.sub("_", f"{func.__module__}.{func.__qualname__}").strip(".")
    return f"{name[: MAX_RUN_ID - 13]}-{digest}"


def resolve_run_id(
    explicit: str | None, func: Callable[..., Any], arguments: Mapping[str, Any]
) -> str:
    if explicit is not None:
        return validate_run_id(explicit)
    env = _settings.RUN_ID.read()
    if env is not None:
        return env
    return derive_run_id(func, arguments)
