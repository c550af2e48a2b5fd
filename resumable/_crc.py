"""CRC32C (Castagnoli), the checksum of unsigned objects and of S3's ``ChecksumCRC32C``.

Two packages compute it with the CPU's CRC instructions (10-15 GB/s here, the GIL
released), several times faster than zlib's CRC32:

- ``google-crc32c`` takes ``bytes`` only (a memoryview, bytearray or mmap is refused),
  and imports in a few milliseconds; buffers below 1 MiB go through it, copied into
  ``bytes`` where they are not (microseconds at that size).
- ``crc32c`` takes any buffer, so large frames are hashed where they lie, without a
  copy (copying 1 MiB pieces for google-crc32c made 256 MiB take twice as long); its
  import costs tens of milliseconds (it reads its own package metadata), so it is
  imported on the first large buffer, and a process with small states never pays it.

``combine`` joins two CRCs without reading the data again: the format hashes the
payload once and derives from that both the header's checksum and the whole
object's (for S3).
"""

from __future__ import annotations

import functools
import os
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor

from .stores._base import Buffer

_POLY = 0x82F63B78  # reflected Castagnoli polynomial
_LARGE = 1 << 20

_large: Callable[[int, Buffer], int] | None = None


def _load_large() -> Callable[[int, Buffer], int]:
    global _large
    try:
        from crc32c import crc32c

        def large(crc: int, data: Buffer) -> int:
            return crc32c(data, crc)

    except ImportError:  # pragma: no cover - crc32c is a dependency
        def large(crc: int, data: Buffer) -> int:
            view = memoryview(data).cast("B")
            for i in range(0, view.nbytes, _LARGE):
                crc = _small(crc, bytes(view[i : i + _LARGE]))
            return crc

    _large = large
    return large


@functools.cache
def _google() -> Callable[[int, bytes], int]:
    import google_crc32c

    extend: Callable[[int, bytes], int] = google_crc32c.extend
    return extend


def _small(crc: int, data: bytes) -> int:
    return int(_google()(crc, data))


def extend(crc: int, data: Buffer) -> int:
    """The CRC32C of the bytes hashed into ``crc`` followed by ``data``."""
    if type(data) is bytes and len(data) < _LARGE:
        return _small(crc, data)
    view = memoryview(data)
    if view.nbytes < _LARGE:
        return _small(crc, view.tobytes())
    return (_large or _load_large())(crc, view)


def _multmodp(a: int, b: int) -> int:
    """a(x) * b(x) modulo the polynomial, in reflected bit order (as zlib's crc32_combine)."""
    m = 1 << 31
    p = 0
    while True:
        if a & m:
            p ^= b
            if not a & (m - 1):
                break
        m >>= 1
        b = (b >> 1) ^ _POLY if b & 1 else b >> 1
    return p


def _powers() -> list[int]:
    table = [1 << 30]  # x^1
    for _ in range(31):
        table.append(_multmodp(table[-1], table[-1]))  # x^(2^k)
    return table


_X2N = _powers()


@functools.lru_cache(maxsize=64)
def _x8n(n: int) -> int:
    """x^(8n) modulo the polynomial: the effect of appending n bytes on a CRC."""
    p = 1 << 31  # x^0
    k = 3
    while n:
        if n & 1:
            p = _multmodp(_X2N[k & 31], p)
        n >>= 1
        k += 1
    return p


def combine(crc1: int, crc2: int, len2: int) -> int:
    """The CRC32C of A + B from crc(A), crc(B) and len(B)."""
    return _multmodp(_x8n(len2), crc1) ^ crc2


def join(pieces: Iterable[tuple[int, int]]) -> int:
    """The CRC32C of consecutive pieces given as (crc, length) pairs."""
    crc = 0
    for piece_crc, length in pieces:
        crc = combine(crc, piece_crc, length)
    return crc


_PARALLEL_FROM = 32 << 20


def of(data: Buffer) -> int:
    """The CRC32C of ``data``; large buffers are hashed in pieces on several cores.

    Used where the caller waits for nothing else (verifying an object on load): with
    the GIL released, two cores hash 256 MiB in about half the time of one.
    """
    view = memoryview(data).cast("B")
    workers = min(4, os.cpu_count() or 1)
    if view.nbytes < _PARALLEL_FROM or workers < 2:
        return extend(0, view)
    step = -(-view.nbytes // workers)
    pieces = [view[i : i + step] for i in range(0, view.nbytes, step)]
    with ThreadPoolExecutor(max_workers=len(pieces) - 1,
                            thread_name_prefix="resumable-crc") as pool:
        futures = [pool.submit(extend, 0, piece) for piece in pieces[1:]]
        first = extend(0, pieces[0])  # this thread takes a piece too
        crcs = [first, *(f.result() for f in futures)]
    return join(zip(crcs, (p.nbytes for p in pieces), strict=True))
