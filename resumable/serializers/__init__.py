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
import pickletools
import sys
from collections.abc import Callable, Iterator, Mapping, Sequence
from types import AsyncGeneratorType, CoroutineType, GeneratorType, MappingProxyType
from typing import Any, Protocol, runtime_checkable

from .. import _format, _gc, _layout, _numpy
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

    def _pickler_class(self) -> type:
        return pickle.Pickler

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
        # numpy arrays laid out as saved: strides, and memory they share (see _layout)
        main = _layout.dumps(obj, self._pickler_class(), self._pickler(), buffers) \
            if type(self) is not PickleSerializer else \
            _layout.dumps(obj, pickle.Pickler, pickle.dumps, buffers)  # (at every yield)
        return [main, *(b.raw() for b in buffers)] if buffers else [main]

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

    def _pickler_class(self) -> type:
        self._pickler()  # (cloudpickle installed, or the ConfigurationError saying so)
        import cloudpickle

        return cloudpickle.Pickler  # type: ignore[no-any-return]


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
    try:
        size = len(spec.name.encode("utf-8"))
    except UnicodeEncodeError:
        size = -1
    if not 0 <= size <= 255:  # (an empty name works: the format records 0 bytes)
        # (every checkpoint's header records it: one too long failed at the first save,
        # after a generation had run; review 138)
        raise ConfigurationError(
            f"serializer {spec!r}: its name {spec.name[:40]!r}... must be at most 255 bytes "
            "of UTF-8 (each checkpoint records it)" if size > 255 else
            f"serializer {spec!r}: its name {spec.name!r} must be UTF-8 (each checkpoint "
            "records it)"
        )
    return spec


def dumps_views(
    serializer: Serializer, obj: Any, what: str | Callable[[], str], root: str = "state"
) -> list[Buffer]:
    """Serialize ``obj``; out-of-band buffers stay views of the live object.

    Failures become SerializationError naming the offending part, and ``what`` (or, if it
    is a function, what it returns: a loop that snapshots every yield builds the words
    only for an error).
    """
    try:
        if isinstance(serializer, PickleSerializer):
            frames = serializer.dumps_views(obj)
            _refuse_remote_references(serializer, frames[0], obj, what, root)
            if len(frames) >= _MOST_FRAMES:  # (with the RNG frame, one more: see _format)
                raise SerializationError(
                    f"cannot save {_words(what)}: its {root} holds {len(frames) - 1:,} numpy "
                    f"arrays, each a frame of the checkpoint, and a checkpoint can hold at "
                    f"most {_MOST_FRAMES - 2:,}; hold them in fewer, larger arrays "
                    "(np.stack)")
            return frames
        data = serializer.dumps(obj)
        try:
            memoryview(data)
        except TypeError:
            raise SerializationError(
                f"cannot save {_words(what)}: serializer {serializer.name!r}'s dumps() "
                f"returned a {type(data).__name__}, not bytes; make it return bytes (or a "
                "bytes-like object)") from None
        return [data]
    except (SerializationError, ConfigurationError):
        raise
    except Exception as err:
        raise SerializationError(_explain(serializer, obj, _words(what), root, err)) from err


def _words(what: str | Callable[[], str]) -> str:
    return what if isinstance(what, str) else what()


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
            n = memoryview(raw).nbytes
            dst = alloc(n)
            if n < _UNLOCKED_COPY or not _unlocked_copy(dst, raw):
                memoryview(dst)[:] = raw
            out.append(dst)
    return out


_MOST_FRAMES = _format.MAX_FRAMES  # a checkpoint's frames: the RNG's, the pickle's, arrays
_UNLOCKED_COPY = 1 << 20  # frames from which a copy lets go of the GIL (with numpy)


def _unlocked_copy(dst: Buffer, raw: Buffer) -> bool:
    """Copy ``raw`` into ``dst`` without the GIL, if numpy is loaded; whether it was.

    A memoryview copy holds the GIL: an upload thread that needs it back for its next
    write waits for the switch interval and the whole copy, and a loop that held the
    GIL from one yield to the next starved the upload. numpy's copy lets go of it.
    """
    np = _numpy.loaded()
    if np is None:
        return False
    try:
        np.copyto(np.frombuffer(dst, np.uint8), np.frombuffer(raw, np.uint8))
    except Exception:  # (not the numpy it should be): the copy is made without it
        return False
    return True


def loads_frames(serializer: Serializer, frames: Sequence[memoryview]) -> Any:
    with _gc.paused():  # (nothing it builds is garbage: see _gc)
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


def _find_offender(serializer: Serializer, obj: Any, path: str, depth: int = 0,
                   errors: dict[int, Exception] | None = None) -> tuple[str, Any]:
    """The deepest part of ``obj`` that the serializer cannot handle on its own; what each
    part tried raised goes into ``errors`` (by id)."""
    if depth < 50:
        for suffix, child in _children(obj):
            try:
                serializer.dumps(child)
            except Exception as child_err:
                if errors is not None:
                    errors[id(child)] = child_err
                return _find_offender(serializer, child, path + suffix, depth + 1, errors)
    return path, obj


# Types that are live handles: a connection, a thread primitive, a running computation.
# Saved, they would come back (if at all) pointing at something that is gone.
_HANDLE_MODULES = ("distributed", "socket", "_socket", "ssl", "_thread", "threading",
                   "asyncio", "_asyncio", "concurrent", "multiprocessing", "subprocess",
                   "selectors", "sqlite3", "_io", "io", "queue", "_queue")
# Handles that pickle without complaint, as a reference to a result held elsewhere (a
# Dask Future pickles as its key): a resumed run would hold a key that names nothing.
_REMOTE_REFERENCES = {("distributed.client", "Future"), ("distributed.actor", "Actor"),
                      ("distributed.actor", "BaseActorFuture"), ("ray._raylet", "ObjectRef")}
# Substrings every pickle naming one of them contains. Not a regex: an alternation is
# tried at every byte of the stream (~50 ms on a 9 MB DEAP population), a substring
# search is a memchr pass.
_REMOTE_MODULES = (b"distributed.", b"ray._raylet")
_REMOTE_PACKAGES = ("distributed", "ray")
assert all(any(m.encode().startswith(p) for p in _REMOTE_MODULES) for m, _ in _REMOTE_REFERENCES)
_GATHER_HINT = (
    "keep it out of the state: gather results before yielding (e.g. values = "
    "client.gather(futures)), and rebuild clients, sockets, locks, open files and "
    "generators after a resume"
)


def _is_handle(obj: Any) -> bool:
    kind = type(obj)
    return (
        kind.__module__.split(".")[0] in _HANDLE_MODULES
        or (kind.__module__, kind.__qualname__) in _REMOTE_REFERENCES
        or isinstance(obj, (GeneratorType, CoroutineType, AsyncGeneratorType))
    )


def _find_handle(
    obj: Any, path: str, fails: Callable[[Any], bool], depth: int = 0
) -> tuple[str, Any] | None:
    """The outermost live handle along the parts of ``obj`` for which ``fails`` holds."""
    if _is_handle(obj):
        return path, obj
    if depth < 50:
        for suffix, child in _children(obj):
            if fails(child):
                found = _find_handle(child, path + suffix, fails, depth + 1)
                if found is not None:
                    return found
    return None


def _named_globals(stream: bytes) -> Iterator[tuple[str, str]]:
    """(module, name) of every class or function a pickle stream refers to."""
    recent: list[Any] = [None, None]
    memo: dict[Any, Any] = {}
    for op, arg, _ in pickletools.genops(stream):
        if op.name == "STACK_GLOBAL":
            yield str(recent[-2]), str(recent[-1])
        elif op.name == "GLOBAL":
            module, _, name = str(arg).partition(" ")
            yield module, name
        if op.name == "MEMOIZE":
            memo[len(memo)] = recent[-1]
        elif op.name in ("PUT", "BINPUT", "LONG_BINPUT"):
            memo[arg] = recent[-1]
        elif op.name in ("BINGET", "LONG_BINGET", "GET"):
            recent.append(memo.get(arg))
        elif op.name in ("SHORT_BINUNICODE", "BINUNICODE", "BINUNICODE8", "UNICODE"):
            recent.append(arg)
        elif op.name != "FRAME":
            recent.append(None)
        del recent[:-2]


def _refuse_remote_references(
    serializer: Serializer, stream: Buffer, obj: Any, what: str | Callable[[], str], root: str
) -> None:
    """Raise if the pickle stream refers to a remote result (a Dask Future...)."""
    modules = sys.modules
    for name in _REMOTE_PACKAGES:  # (a loop, not any(): this runs at every yield)
        if modules.get(name):
            break
    else:
        return  # no such handle can exist in a process that never imported its package
    data = stream if isinstance(stream, bytes) else bytes(stream)  # pickle gives bytes
    if not any(module in data for module in _REMOTE_MODULES):
        return  # the common case: two substring searches (memchr-fast) of the stream
    found = next((g for g in _named_globals(data) if g in _REMOTE_REFERENCES), None)
    if found is None:
        return
    where = _find_handle(obj, root, lambda child: True)
    path = where[0] if where else f"something in {root}"
    raise SerializationError(
        f"cannot serialize {_words(what)} with serializer {serializer.name!r}: {path} is a "
        f"{found[0]}.{found[1]}, a handle to a result that lives on a cluster, not the "
        f"result, and a resumed run would get a handle to nothing; {_GATHER_HINT}"
    )


def _explain(serializer: Serializer, obj: Any, what: str, root: str, err: Exception) -> str:
    errors: dict[int, Exception] = {}  # what each part tried alone raised, by id

    def fails(child: Any) -> bool:
        try:
            serializer.dumps(child)
        except Exception as child_err:
            errors[id(child)] = child_err
            return True
        return False

    def own_error(part: Any) -> Exception:
        """What serializing ``part`` alone raised (``err`` may be another part's), as
        recorded when it was tried: a large part is not pickled again (review 55)."""
        if part is obj:
            return err
        return errors.get(id(part), err)

    handle = _find_handle(obj, root, fails)
    if handle is not None:
        kind = type(handle[1])
        return (
            f"cannot serialize {what} with serializer {serializer.name!r}: {handle[0]} is a "
            f"{kind.__module__}.{kind.__qualname__}, a live handle ({own_error(handle[1])}); "
            f"{_GATHER_HINT}"
        )
    path, offender = _find_offender(serializer, obj, root, errors=errors)
    kind = type(offender)
    message = (
        f"cannot serialize {what} with serializer {serializer.name!r}: {path} is a "
        f"{kind.__module__}.{kind.__qualname__} ({own_error(offender)})"
    )
    if serializer.name == "pickle":
        try:
            import cloudpickle

            # (what it brings back as another type, it does not handle: a memoryview
            # comes back as bytes, neither writable nor a view, review 106)
            back = cloudpickle.loads(cloudpickle.dumps(offender))
            if type(back) is not type(offender):
                raise TypeError(f"cloudpickle brings it back as {type(back).__name__}")
        except Exception:
            message += "; keep it out of the state (rebuild it after a resume)"
        else:
            message += "; serializer='cloudpickle' can handle it"
    return message
