"""The byte-level store protocol. A store never serializes; it moves bytes under keys.

Keys are '/'-separated paths relative to the store's root (``<run_id>/ckpt-...``).
A payload is a sequence of bytes-like buffers whose concatenation is the object's
content: large states arrive as many zero-copy buffers (pickle protocol 5
out-of-band frames), and a store may stream them without joining them first. A payload
from the format may carry ``crc32c`` (an int, the CRC32C of the whole object), which a
store may hand to the storage so that it verifies what it received (S3 does).

``get`` of the bundled stores returns writable memory whose first byte is 64-byte
aligned, so the format's aligned frames are aligned in memory and unpickled in place;
a buffer that is not gets copied into aligned memory on load.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Protocol, TypeGuard, runtime_checkable

# Buffer-protocol objects; collections.abc.Buffer only exists from Python 3.12.
Buffer = bytes | bytearray | memoryview
Payload = Sequence[Buffer]
# Called by a store with an object's first bytes and its size before it allocates memory
# for the whole: raises to refuse the object (see get_screened)
Screen = Callable[[memoryview, int], None]


def payload_size(data: Payload) -> int:
    return sum(memoryview(b).nbytes for b in data)


def join_payload(data: Payload) -> bytes:
    return b"".join(memoryview(b).cast("B") for b in data)


@runtime_checkable
class Store(Protocol):
    """What every store implements. All methods are thread-safe."""

    #: The URL the store was opened with, used in every error message.
    url: str

    def put(self, key: str, data: Payload) -> None:
        """Write the object atomically: readers see the old content or the new, never part."""

    def put_if_absent(self, key: str, data: Payload) -> bool:
        """Create the object only if no object has the key; return False if one had.

        Where the server ignores conditional writes, a store checks for the key first
        and then writes: two writers racing at the same moment may both succeed.
        ``conditional_writes()`` tells which guarantee holds.
        """

    def get(self, key: str) -> bytes | bytearray | memoryview | None:
        """The object's whole content, or None when there is no such object."""

    def list(self, prefix: str, start_after: str | None = None) -> list[str]:
        """Keys that start with ``prefix`` (and sort after ``start_after``), ascending."""

    def delete(self, key: str) -> None:
        """Remove the object; removing a missing object is not an error."""

    def conditional_writes(self) -> bool:
        """True when ``put_if_absent`` is enforced by the storage itself."""


@runtime_checkable
class SupportsHead(Protocol):
    """An optional store method, kept out of ``Store`` so a store without it still is one.

    The ``resumable`` command reads object headers with it (``ls``, ``show``) instead of
    downloading whole objects, and falls back to ``get`` on a store that lacks it
    (``head_of`` below). The bundled stores all implement it.
    """

    def head(self, key: str, n: int) -> tuple[bytes, int] | None:
        """The object's first ``n`` bytes (all of it when shorter) and its total size
        in bytes, or None when there is no such object."""


def reads_heads(store: Store) -> TypeGuard[SupportsHead]:
    """Whether ``head_of`` reads only the first bytes of an object from ``store``, not
    the whole of it."""
    return isinstance(store, SupportsHead) and _beside_get(store, "head")


def head_of(store: Store, key: str, n: int) -> tuple[bytes, int] | None:
    """``store.head(key, n)`` where the store has it beside the ``get`` it uses, else a
    whole ``get`` cut to ``n`` (a subclass whose ``get`` decompresses: see
    ``get_screened``)."""
    if reads_heads(store):
        return store.head(key, n)
    data = store.get(key)
    if data is None:
        return None
    view = memoryview(data).cast("B")
    return bytes(view[:n]), view.nbytes


@runtime_checkable
class SupportsScreenedGet(Protocol):
    """An optional store method: ``get``, where ``screen(first, size)`` is called with the
    object's first ``n`` bytes and its size before memory for the whole is allocated, and
    whatever it raises propagates (the object is not read). Objects of ``n`` bytes or fewer
    are read whole and not screened. The bundled file and S3 stores implement it."""

    def get_screened(self, key: str, screen: Screen, n: int) -> Buffer | None: ...


def get_screened(store: Store, key: str, screen: Screen, n: int) -> Buffer | None:
    """``store.get_screened(key, screen, n)`` where the store's class has it beside the
    ``get`` it uses, else ``get``: a subclass that overrides ``get`` (bytes it decompresses
    or checks), or a wrapper that forwards other attributes to a store, is read through
    its own ``get`` (review 145: a zlib subclass's objects were read raw)."""
    if isinstance(store, SupportsScreenedGet) and _beside_get(store, "get_screened"):
        return store.get_screened(key, screen, n)
    return store.get(key)


def _beside_get(store: Store, method: str) -> bool:
    """Whether ``store.<method>`` reads what its ``get`` does: ``get`` is not overridden
    below the class that defines ``method`` (nor set on the instance: a test's wrapper),
    so a subclass overriding ``method`` alone keeps it (review 146)."""
    if "get" in getattr(store, "__dict__", {}):
        return False
    mro = type(store).__mro__
    reader = next((k for k in mro if method in vars(k)), None)
    getter = next((k for k in mro if "get" in vars(k)), None)
    if reader is None or getter is None:
        return False
    if not reader.__module__.startswith(__name__.rpartition(".")[0] + "."):
        return True  # (the program's own: it says what it reads, review 100's counters)
    return issubclass(reader, getter)
