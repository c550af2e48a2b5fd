"""Serializers: a name -> object registry with ``pickle`` and ``cloudpickle`` built in.

A serializer has a ``name``, ``dumps(obj) -> bytes`` and ``loads(bytes) -> obj``.
The built-ins also offer ``dumps_frames``/``loads_frames``: pickle protocol 5 with
out-of-band buffers, so a numpy array travels as its own frame and is copied at most
once, at the snapshot (the body may mutate it in place right after the yield); a state
saved in place while the body waits is not copied at all (``dumps_views``). On load,
arrays are built on the frames without a copy when the frames are writable and
64-byte aligned (as the stores deliver them), else on an aligned copy.
"""

from __future__ import annotations

import pickle
from collections.abc import Callable, Iterator, Mapping, Sequence
from types import MappingProxyType
from typing import Any, Protocol, runtime_checkable

from .._aligned import realigned
from .._errors import ConfigurationError, SerializationError
from ..stores._base import Buffer

# Gives a writable buffer of exactly n bytes; lets the snapshot reuse memory that is
# already mapped (a fresh large allocation costs page faults, several times the copy).
Alloc = Callable[[int], bytearray]


@runtime_checkable
class Serializer(Protocol):
    name: str

    def dumps(self, obj: Any) -> bytes: ...

    def loads(self, data: bytes) -> Any: ...


class PickleSerializer:
    """The standard library's pickle, protocol 5."""

    name = "pickle"

    def _pickler(self) -> Callable[..., bytes]:
        return pickle.dumps

    def dumps(self, obj: Any) -> bytes:
        return self._pickler()(obj, protocol=5)

    def loads(self, data: bytes) -> Any:
        return pickle.loads(data)

    def dumps_views(self, obj: Any) -> list[Buffer]:
        """The pickle stream, then views of the object's large buffers (not copied).

        The views alias the live object: they hold the state only while nothing changes
        it, i.e. while the body is suspended at its yield.
        """
        buffers: list[pickle.PickleBuffer] = []
        main = self._pickler()(obj, protocol=5, buffer_callback=buffers.append)
        return [main, *(b.raw() for b in buffers)]

    def dumps_frames(self, obj: Any, alloc: Alloc | None = None) -> list[Buffer]:
        # The copy is the snapshot: after it the body may change the arrays in place.
        return copy_frames(self.dumps_views(obj), alloc)

    def loads_frames(self, frames: Sequence[memoryview]) -> Any:
        # numpy arrays are built on these buffers without a copy: on read-only memory
        # they would be read-only for the body, on unaligned memory they would compute
        # other bits. Frames the stores read into aligned memory are used as they are.
        oob = [realigned(f) for f in frames[1:]]
        return pickle.loads(frames[0], buffers=oob)


class CloudpickleSerializer(PickleSerializer):
    """cloudpickle: also lambdas, closures and classes defined in ``__main__``."""

    name = "cloudpickle"

    def _pickler(self) -> Callable[..., bytes]:
        try:
            import cloudpickle
        except ImportError as err:
            raise ConfigurationError(
                "serializer='cloudpickle' needs cloudpickle: pip install 'resumable[cloudpickle]'"
            ) from err
        return cloudpickle.dumps  # type: ignore[no-any-return]


_registry: dict[str, Serializer] = {
    "pickle": PickleSerializer(),
    "cloudpickle": CloudpickleSerializer(),
}
registry: Mapping[str, Serializer] = MappingProxyType(_registry)


def register_serializer(serializer: Serializer, clobber: bool = False) -> None:
    """Make ``serializer`` available by its name."""
    if serializer.name in _registry and not clobber:
        raise ValueError(f"a serializer named {serializer.name!r} exists; pass clobber=True")
    _registry[serializer.name] = serializer


def get_serializer(spec: str | Serializer) -> Serializer:
    if isinstance(spec, str):
        try:
            return _registry[spec]
        except KeyError:
            raise ConfigurationError(
                f"unknown serializer {spec!r}; use one of {sorted(_registry)} "
                "or an object with name, dumps and loads"
            ) from None
    if not (
        isinstance(getattr(spec, "name", None), str)
        and callable(getattr(spec, "dumps", None))
        and callable(getattr(spec, "loads", None))
    ):
        raise ConfigurationError(
            f"serializer {spec!r} must be a name or an object with name (str), dumps and loads"
        )
    return spec


def dumps_views(
    serializer: Serializer, obj: Any, what: str, root: str = "state"
) -> list[Buffer]:
    """Serialize ``obj``; out-of-band buffers stay views of the live object.

    Failures become SerializationError naming the offending part.
    """
    try:
        if isinstance(serializer, PickleSerializer):
            return serializer.dumps_views(obj)
        return [serializer.dumps(obj)]
    except (SerializationError, ConfigurationError):
        raise
    except Exception as err:
        raise SerializationError(_explain(serializer, obj, what, root, err)) from err


def dumps_frames(
    serializer: Serializer, obj: Any, what: str, alloc: Alloc | None = None, root: str = "state"
) -> list[Buffer]:
    """Like ``dumps_views``, with private copies of the buffers (see ``copy_frames``)."""
    return copy_frames(dumps_views(serializer, obj, what, root), alloc)


def copy_frames(frames: Sequence[Buffer], alloc: Alloc | None = None) -> list[Buffer]:
    """Private copies of the views ``dumps_views`` made; the pickle stream is already one."""
    out: list[Buffer] = [frames[0]]
    for raw in frames[1:]:
        if alloc is None:
            out.append(bytes(raw))
        else:
            dst = alloc(memoryview(raw).nbytes)
            memoryview(dst)[:] = raw
            out.append(dst)
    return out


def loads_frames(serializer: Serializer, frames: Sequence[memoryview]) -> Any:
    if isinstance(serializer, PickleSerializer):
        return serializer.loads_frames(frames)
    return serializer.loads(bytes(frames[0]))


def _children(obj: Any) -> Iterator[tuple[str, Any]]:
    if isinstance(obj, dict):
        for k, v in obj.items():
            yield f"[{k!r}]", v
    elif isinstance(obj, (list, tuple)):
        for i, v in enumerate(obj):
            yield f"[{i}]", v
    elif isinstance(obj, (set, frozenset)):
        for v in obj:
            yield "{…}", v
    elif hasattr(obj, "__dict__") and not isinstance(obj, type) and not callable(obj):
        for k, v in vars(obj).items():
            yield f".{k}", v


def _find_offender(serializer: Serializer, obj: Any, path: str, depth: int = 0) -> tuple[str, Any]:
    """The deepest part of ``obj`` that the serializer cannot handle on its own."""
    if depth < 50:
        for suffix, child in _children(obj):
            try:
                serializer.dumps(child)
            except Exception:
                return _find_offender(serializer, child, path + suffix, depth + 1)
    return path, obj


def _explain(serializer: Serializer, obj: Any, what: str, root: str, err: Exception) -> str:
    path, offender = _find_offender(serializer, obj, root)
    kind = type(offender)
    message = (
        f"cannot serialize {what} with serializer {serializer.name!r}: {path} is a "
        f"{kind.__module__}.{kind.__qualname__} ({err})"
    )
    if serializer.name == "pickle":
        try:
            import cloudpickle

            cloudpickle.dumps(offender)
        except Exception:
            message += "; keep it out of the state (rebuild it after a resume)"
        else:
            message += "; serializer='cloudpickle' can handle it"
    return message
