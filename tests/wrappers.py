"""A store that hands every call to another one: the base for test stores that watch or
interfere with a few calls (count bytes, open a race window)."""

from __future__ import annotations

from resumable.stores import Payload, Store


class DelegatingStore:
    """Implements the store protocol by delegating to ``inner``; override what you need."""

    def __init__(self, inner: Store) -> None:
        self.inner = inner
        self.url = inner.url

    def put(self, key: str, data: Payload) -> None:
        self.inner.put(key, data)

    def put_if_absent(self, key: str, data: Payload) -> bool:
        return self.inner.put_if_absent(key, data)

    def get(self, key: str) -> bytes | bytearray | memoryview | None:
        return self.inner.get(key)

    def list(self, prefix: str, start_after: str | None = None) -> list[str]:
        return self.inner.list(prefix, start_after)

    def delete(self, key: str) -> None:
        self.inner.delete(key)

    def conditional_writes(self) -> bool:
        return self.inner.conditional_writes()
