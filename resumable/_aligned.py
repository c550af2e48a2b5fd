"""Memory whose first byte sits on a 64-byte boundary: where resumed numpy arrays live.

numpy computes on unaligned memory through a different (buffered) loop, whose
floating-point results differ in the last bits from the pairwise SIMD loop it uses on
aligned memory; a resumed array must therefore be aligned to give the same bits as the
never-saved one. The format puts every frame at a 64-byte offset of the object
(``_format``), and the stores read objects into buffers from ``aligned_buffer``, so the
frames are aligned in memory without another copy.
"""

from __future__ import annotations

import contextlib
import ctypes
import mmap

from .stores._base import Buffer

ALIGN = 64
# Above this size a buffer is an anonymous private mapping: page aligned, its pages
# come zeroed from the kernel on first touch (no memset of the whole buffer, as a
# bytearray does), and on Linux it may be backed by huge pages.
_MAP_FROM = 1 << 20


def address(buf: Buffer) -> int:
    """The address of a writable buffer's first byte (0 for an empty one)."""
    view = memoryview(buf)
    if view.nbytes == 0:
        return 0
    return ctypes.addressof(ctypes.c_char.from_buffer(view.cast("B")))


def aligned_buffer(n: int) -> memoryview:
    """A zero-filled, writable buffer of ``n`` bytes whose first byte is 64-byte aligned.

    The memory is private to the process (a forked child that writes to it does not
    change the parent's), and freed when the last view of it goes.
    """
    if n >= _MAP_FROM and hasattr(mmap, "MAP_PRIVATE"):
        mapped = mmap.mmap(-1, n, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS,
                           prot=mmap.PROT_READ | mmap.PROT_WRITE)
        if hasattr(mmap, "MADV_HUGEPAGE"):
            with contextlib.suppress(OSError):  # fewer page faults while it is read in
                mapped.madvise(mmap.MADV_HUGEPAGE)
        return memoryview(mapped)
    raw = bytearray(n + ALIGN)
    view = memoryview(raw)
    start = -address(view) % ALIGN
    return view[start : start + n]


def is_aligned(buf: Buffer) -> bool:
    """True when ``buf`` is writable and starts on a 64-byte boundary."""
    view = memoryview(buf)
    return not view.readonly and address(view) % ALIGN == 0


def aligned_copy(buf: Buffer) -> memoryview:
    """A private, writable, aligned copy of ``buf``."""
    src = memoryview(buf).cast("B")
    dst = aligned_buffer(src.nbytes)
    dst[:] = src
    return dst


def realigned(buf: Buffer) -> memoryview:
    """``buf`` itself when it is writable and aligned, else an aligned copy of it."""
    view = memoryview(buf)
    if view.ndim != 1 or view.format != "B":
        view = view.cast("B")
    return view if is_aligned(view) else aligned_copy(view)
