"""A state that waits for the upload in a local file, not in a second copy in memory.

With ``every="generation"`` the newest state must outlive an exception while the one
before it uploads, so two copies of a large state used to live in memory at once (the
one uploading, the newest one waiting). A pod sized for the state plus one copy was
OOM-killed by the second. Now, when a due yield comes while a save runs (or waits behind
one that runs), the state's large buffers are written to one unlinked file in
``$RESUMABLE_SPILL_DIR`` (the system's temporary folder unless set) instead of a second
buffer: a write into the page cache, about twice the memory copy it replaces (64 MiB:
10.3 ms against 5.8 ms on the 2-core VM, ``benchmarks/memory_costs.py``, 3 December; the
CRC32C below adds 2-3 ms), and page cache is memory the kernel can write out and take
back, where a copy in the process's heap is not. When its turn comes, the upload reads
the file into the buffers the save before it has just handed back, so the process holds
one copy of the state, not two. A yield that comes while the upload thread rests (paced,
``RESUMABLE_UPLOAD_DUTY``) with a save waiting is not spilled: that save is held back
(``Uploader.hold_resting``) and the newer state replaces it in its own buffers, half the
loop's cost of a spill and no read back for the upload.

Two files per call, reused: one can be read back by the upload while the loop writes
the next state into the other, so the loop never waits for the upload; a newer state
replaces one still waiting. A spill that fails (disk full, folder gone) falls back to a memory copy
for the rest of the call, with a warning; on a folder in memory (tmpfs) spilling would
gain nothing, so it is not done there. The file has no name (``O_TMPFILE``): a process
killed with it open leaves nothing behind.

The frames are hashed (CRC32C) as they are written, from the buffers just written, and
the CRCs stay with the spilled state; the read-back hashes what it read and compares.
The checkpoint's own CRC is computed from the frames read back, so without this a byte
changed in the file meanwhile (a bad disk or page cache, another process of the same
user writing through /proc/<pid>/fd) became a checkpoint that verifies, and a resumed
run got other bits than it yielded. A mismatch is a read-back failure: that state is
not saved (a StoreError, as for a file that cannot be read). The hash adds about half
the write's time on the loop (64 MiB: 4.4 ms without it, 6.6 ms with it on the 2-core
VM, quiet), and as much to the read-back on the upload thread. It runs on the loop's
own thread: hashing on a second one while the write runs saved under 1 ms there when
quiet and nothing when busy (the upload thread runs during a spill), and hashing each
piece right after its own write, still in the CPU's cache, was slower (a write each).
"""

from __future__ import annotations

import contextlib
import errno
import logging
import os
import re
import tempfile
import threading
import weakref
from collections.abc import Callable, Sequence
from typing import Any

from . import _crc
from ._errors import StoreError
from ._forked import Superseded

log = logging.getLogger("resumable")

_CHUNK = 1 << 30  # bytes per pwrite/preadv call (Linux writes at most ~2 GiB per call)
_SMALL = 1 << 16  # frames below this are written and read in batches of about _BATCH bytes
_BATCH = 1 << 20
_OWNER_WAIT = 5.0  # seconds the loop waits for a file to be free (see SpillFile.spill)
_MEMORY_FS = {"tmpfs", "ramfs", "hugetlbfs"}


def _fs_type(path: str) -> str | None:
    """The type of the filesystem holding ``path`` (Linux's mount table), else None."""
    try:
        with open("/proc/self/mounts", encoding="utf-8", errors="replace") as f:
            mounts = [line.split()[1:3] for line in f if len(line.split()) >= 3]
    except OSError:
        return None
    real = os.path.realpath(path)
    best, kind = "", None
    for point, fs in mounts:
        point = re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), point)
        if (real == point or real.startswith(point.rstrip("/") + "/")) and len(point) > len(best):
            best, kind = point, fs
    return kind


class _Slot:
    """One file: free, written by the loop, holding a waiting state, or read back."""

    def __init__(self) -> None:
        self.fd: int | None = None
        self.owner: Spilled | None = None
        self.busy = False  # being written or read (outside the lock)


class SpillFile:
    """The call's spill files: two, each holding at most one state. One may be read back
    by the upload while the loop writes the next state into the other, so the loop never
    waits for the upload; a newer state replaces one still waiting (its file is reused)."""

    def __init__(self, folder: str | None, where: str) -> None:
        self.folder = folder  # None: spilling is off
        self.where = where  # the run, for log lines
        self._slots = (_Slot(), _Slot())
        self._lock = threading.Lock()
        self._freed = threading.Condition(self._lock)
        self.failed = False
        self._closed = False
        self._checked = False  # the folder's filesystem, looked at by the first `usable`
        _open_files.add(self)
        if not (hasattr(os, "pwrite") and hasattr(os, "preadv")):
            self.folder = None  # Windows (and old macOS): the copy stays in memory

    @property
    def usable(self) -> bool:
        if not self._checked and self.folder is not None:
            # At the first spill, not at every call's start: reading the mount table
            # costs ~0.1 ms, and most calls never spill (small or rarely saved states).
            self._checked = True
            kind = _fs_type(self.folder)
            if kind in _MEMORY_FS:
                log.info("run %s: $RESUMABLE_SPILL_DIR %s is in memory (%s); a newer state "
                         "waits for the upload as a copy in memory instead",
                         self.where, self.folder, kind)
                self.folder = None
        return self.folder is not None and not (self.failed or self._closed)

    def _free_slot(self) -> _Slot | None:
        free = [s for s in self._slots if s.owner is None and not s.busy]
        # the file written before (its pages are in the page cache already) first
        return next((s for s in free if s.fd is not None), free[0] if free else None)

    def spill(self, step: int, frames: Sequence[Any], size: int,
              make_room: Callable[[], Any] | None = None) -> Spilled | None:
        """Write ``frames[1:]`` (views of the live state) to a free file; the returned
        object reads them back. None if no file is free (something else holds both), or
        writing failed (then spilling stays off for this call). ``make_room`` takes back
        the save still waiting, called here only if no file is free without that."""
        if not self.usable:
            return None
        with self._lock:
            slot = self._free_slot()
        if slot is None and make_room is not None:
            make_room()  # (outside the lock: a dropped spilled save lets go of its file)
        with self._lock:
            # Two states at most are in files: one waiting (let go of by make_room) and
            # one that an upload reads back. Both taken means something else holds one:
            # wait a little, then copy in memory.
            slot = self._free_slot()
            if slot is None and self._freed.wait_for(
                    lambda: self._free_slot() is not None, _OWNER_WAIT):
                slot = self._free_slot()
            if slot is None:
                return None
            slot.busy = True
        try:
            if slot.fd is None:
                slot.fd = _open_unnamed(self.folder or ".")
            sizes, pieces = _write_frames(slot.fd, frames[1:])
        except BaseException as err:
            with self._lock:
                # Whatever stopped the write (a full disk, or Ctrl-C in the middle of
                # it), the file is free again: a slot left busy would never be closed.
                self.failed = self.failed or isinstance(err, OSError)
                slot.busy = False
                if self._closed:
                    self._close(slot)
                self._freed.notify_all()
            if not isinstance(err, OSError):
                raise
            log.warning("run %s: could not write the state of step %d to a file in %s (%s); "
                        "from now on a newer state waits for the upload as a copy in memory "
                        "(set $RESUMABLE_SPILL_DIR to a folder with room, or to off)",
                        self.where, step, self.folder, err)
            return None
        owner = Spilled(self, slot, frames[0] if isinstance(frames[0], bytes)
                        else bytes(frames[0]), sizes, step, pieces)
        with self._lock:
            slot.owner, slot.busy = owner, False
        return owner

    def _read(self, owner: Spilled, take: Callable[[int], Any] | None) -> list[Any]:
        slot = owner.slot
        with self._lock:
            if slot.owner is not owner or slot.fd is None or slot.busy:
                raise Superseded(f"the spilled state of step {owner.step} was let go of")
            slot.busy = True
        try:
            return [owner.stream, *_read_frames(slot.fd, owner.sizes, take, owner.crcs)]
        except _Damaged as bad:
            self.failed = True  # the disk (or memory) is suspect: newer states wait in memory
            first, end = bad.frames
            which = (f"frame {first + 1}" if end - first == 1
                     else f"one of frames {first + 1}-{end}, written together,")
            raise StoreError(
                f"run {self.where}: the spilled copy of step {owner.step} was damaged: "
                f"{which} of {len(owner.sizes)} ({bad.size} bytes at byte {bad.offset} of its "
                f"spill file in {self.folder}) read back with CRC32C {bad.got:08x}, not the "
                f"{bad.want:08x} it was written with (a bad disk or memory page, another "
                "process writing to the file, or another thread of the application changing "
                "the state's arrays while they were written: the body waits at its yield, "
                "other threads do not); that state is not saved, the checkpoints "
                "already stored are untouched. A new attempt resumes from the newest of them; "
                "check that folder's disk, or set $RESUMABLE_SPILL_DIR=off (or to another "
                "folder)") from bad
        except OSError as err:
            self.failed = True  # the disk is suspect: newer states wait in memory
            raise StoreError(
                f"run {self.where}: could not read the state of step {owner.step} back from "
                f"its spill file in {self.folder} ({err}); that state is not saved, the "
                "checkpoints already stored are untouched. A new attempt resumes from the "
                "newest of them; check that folder's disk, or set $RESUMABLE_SPILL_DIR=off "
                "(or to another folder)") from err
        finally:
            with self._lock:  # read (or failed): the file is free for another state
                slot.busy = False
                if slot.owner is owner:
                    slot.owner = None
                if self._closed:
                    self._close(slot)
                self._freed.notify_all()

    def _let_go(self, owner: Spilled) -> None:
        with self._lock:
            if owner.slot.owner is owner:
                owner.slot.owner = None
                self._freed.notify_all()

    def close(self) -> None:
        """End of the call: close the files (a read still running keeps its own)."""
        with self._lock:
            self._closed = True  # nothing is spilled after the call ended
            for slot in self._slots:
                slot.owner = None
                if not slot.busy:
                    self._close(slot)

    @staticmethod
    def _close(slot: _Slot) -> None:
        fd, slot.fd = slot.fd, None
        if fd is not None:
            with contextlib.suppress(OSError):
                os.close(fd)


_open_files: weakref.WeakSet[SpillFile] = weakref.WeakSet()


def _close_in_child() -> None:
    """After a fork, in the child: the parent's spill files are not the child's (a
    multiprocessing pool's workers would hold them, and their blocks on disk, for as
    long as the pool lives, past the end of the call). No lock is taken: a thread of
    the parent may have held one at the fork."""
    for file in list(_open_files):
        file._closed = True
        for slot in file._slots:
            slot.owner = None
            SpillFile._close(slot)


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_close_in_child)


class Spilled:
    """A spilled state's frames, read back once (the ``Forked`` interface of ``Snapshot``)."""

    def __init__(self, file: SpillFile, slot: _Slot, stream: bytes, sizes: list[int],
                 step: int, crcs: list[tuple[int, int, int]]) -> None:
        self.file = file
        self.slot = slot
        self.stream = stream
        self.sizes = sizes
        self.step = step
        # (first frame, frame after the last, CRC32C) of each piece as written (see
        # _write_frames): checked at the read-back
        self.crcs = crcs

    def collect(self, take: Callable[[int], Any] | None,
                deadline: float | None = None) -> list[Any]:
        return self.file._read(self, take)

    def cancel(self) -> None:
        self.file._let_go(self)


def _open_unnamed(folder: str) -> int:
    flags = os.O_RDWR | getattr(os, "O_CLOEXEC", 0)
    if hasattr(os, "O_TMPFILE"):
        try:
            return os.open(folder, flags | os.O_TMPFILE, 0o600)
        except OSError as err:  # filesystems (kernels) without O_TMPFILE: a named file
            if err.errno not in (errno.EOPNOTSUPP, errno.EISDIR, errno.EINVAL):
                raise  # the folder's own error (gone, read-only, full), not a made-up name
    fd, name = tempfile.mkstemp(prefix=".resumable-spill-", dir=folder)
    os.unlink(name)
    return fd


class _Damaged(Exception):
    """A piece of a spill file read back with another CRC32C than it was written with."""

    def __init__(self, frames: tuple[int, int], offset: int, size: int, want: int,
                 got: int) -> None:
        super().__init__(f"frames {frames[0]}-{frames[1] - 1}: CRC32C {got:08x} != {want:08x}")
        self.frames, self.offset, self.size, self.want, self.got = frames, offset, size, want, got


def _write_frames(fd: int, frames: Sequence[Any]
                  ) -> tuple[list[int], list[tuple[int, int, int]]]:
    """Write ``frames`` one after another from byte 0; their sizes, and the pieces they
    were written in: ``(first frame, frame after the last, CRC32C)`` of each.

    Small frames are joined into batches of about ``_BATCH`` bytes: a state of many
    small arrays (a population of 50,000 individuals of 32 floats) took one system call
    per array, twice the time of the memory copy the spill replaces; joined, less.

    Each piece written (a large frame, or a batch of small ones) is hashed from the
    buffer just written: ``_read_frames`` reads the same pieces back and checks them.
    """
    offset, sizes = 0, []
    crcs: list[tuple[int, int, int]] = []
    pending: list[memoryview] = []
    pending_size = 0
    first = 0  # the first frame of the batch pending

    def flush() -> None:
        nonlocal offset, pending_size
        if pending:
            data = b"".join(pending)
            _pwrite_all(fd, memoryview(data), offset)
            crcs.append((first, first + len(pending), _crc.extend(0, data)))
            offset += pending_size
            pending.clear()
            pending_size = 0

    for i, frame in enumerate(frames):
        view = memoryview(frame).cast("B")
        sizes.append(view.nbytes)
        if view.nbytes < _SMALL:
            if not pending:
                first = i
            pending.append(view)
            pending_size += view.nbytes
            if pending_size >= _BATCH:
                flush()
            continue
        flush()
        _pwrite_all(fd, view, offset)
        # The same buffer, just written (hashing it in pieces as each was written, the
        # piece still in the CPU's cache, was slower: a pwrite per piece).
        crcs.append((i, i + 1, _crc.extend(0, view)))
        offset += view.nbytes
    flush()
    return sizes, crcs


def _read_frames(fd: int, sizes: Sequence[int], take: Callable[[int], Any] | None,
                 crcs: Sequence[tuple[int, int, int]]) -> list[Any]:
    """The frames ``_write_frames`` wrote, in the pieces it returned with ``sizes``:
    large ones read into ``take(n)`` buffers, runs of small ones read at once and cut
    into ``bytes``. Each piece's CRC32C is checked against ``crcs``; ``_Damaged`` if one
    differs."""
    out: list[Any] = []
    offset = 0
    for i, j, want in crcs:
        total = sum(sizes[i:j])
        if j - i == 1 and total >= _SMALL:
            buf = take(total) if take is not None else bytearray(total)
            view = memoryview(buf).cast("B")[:total]
            _pread_all(fd, view, offset)
            frames: list[Any] = [buf]
        else:
            view = memoryview(bytearray(total))
            _pread_all(fd, view, offset)
            frames = []
        got = _crc.extend(0, view)
        if got != want:
            raise _Damaged((i, j), offset, total, want, got)
        if not frames:  # cut the batch into its frames
            at = 0
            for k in range(i, j):
                frames.append(bytes(view[at:at + sizes[k]]))
                at += sizes[k]
        out.extend(frames)
        offset += total
    return out


def _pwrite_all(fd: int, view: memoryview, offset: int) -> None:
    done = 0
    while done < view.nbytes:
        n = os.pwrite(fd, view[done:done + _CHUNK], offset + done)
        if n <= 0:
            raise OSError(f"short write at byte {offset + done}")
        done += n


def _pread_all(fd: int, view: memoryview, offset: int) -> None:
    done = 0
    while done < view.nbytes:
        n = os.preadv(fd, [view[done:done + _CHUNK]], offset + done)
        if n <= 0:
            raise OSError(f"the spill file ended at byte {offset + done}")
        done += n
