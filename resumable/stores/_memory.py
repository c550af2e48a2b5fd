"""``memory://NAME``: one dict per NAME, shared inside the process (tests, simulations)."""

from __future__ import annotations

import bisect
import os
import threading
from urllib.parse import urlsplit

from .._aligned import aligned_copy
from ._base import Payload, join_payload

_spaces: dict[str, dict[str, bytes]] = {}
_lock = threading.Lock()


def _new_lock_in_child() -> None:
    # Another thread (an upload) may have held it at the fork: the child's copy would
    # stay held for ever.
    global _lock
    _lock = threading.Lock()


os.register_at_fork(after_in_child=_new_lock_in_child)


class MemoryStore:
    def __init__(self, name: str = "default") -> None:
        self.url = f"memory://{name}"
        with _lock:
            self._objects = _spaces.setdefault(name, {})

    @classmethod
    def from_url(cls, url: str) -> MemoryStore:
        parts = urlsplit(url)
        return cls((parts.netloc + parts.path) or "default")

    def put(self, key: str, data: Payload) -> None:
        blob = join_payload(data)
        with _lock:
            self._objects[key] = blob

    def put_if_absent(self, key: str, data: Payload) -> bool:
        blob = join_payload(data)
        with _lock:
            if key in self._objects:
                return False
            self._objects[key] = blob
            return True

    def get(self, key: str) -> memoryview | None:
        with _lock:
            blob = self._objects.get(key)
        # A private, writable, 64-byte aligned copy, as the other stores' reads give.
        return None if blob is None else aligned_copy(blob)

    def head(self, key: str, n: int) -> tuple[bytes, int] | None:
        with _lock:
            blob = self._objects.get(key)
        return None if blob is None else (blob[: max(0, n)], len(blob))

    def list(self, prefix: str, start_after: str | None = None) -> list[str]:
        with _lock:
            keys = sorted(k for k in self._objects if k.startswith(prefix))
        if start_after is not None:
            keys = keys[bisect.bisect_right(keys, start_after) :]
        return keys

    def delete(self, key: str) -> None:
        with _lock:
            self._objects.pop(key, None)

    def conditional_writes(self) -> bool:
        return True

    def clear(self) -> None:
        with _lock:
            self._objects.clear()
