"""Snapshots serialized by a forked child: the loop pays a fork, not the pickling.

A state of many Python objects (a DEAP population: 10,000 lists of floats) takes the
loop 100 ms and more to pickle at every due yield. With ``$RESUMABLE_SNAPSHOT_FORK=1``
the yield forks instead (a few ms): the child sees the state as it was at the yield
(copy-on-write: pages the loop changes afterwards are copied for the loop, the child
keeps the old ones), pickles it and sends the frames through a pipe; the upload
thread reads them into buffers and saves them as any snapshot.

The child only serializes and writes to its pipe, then leaves with ``os._exit``: it
never touches the locks other threads of the parent may hold (the uploader's, boto3's),
never logs, never runs exit handlers. It blocks every signal but SIGKILL, so it runs
none of the parent's handlers (the parent decides what happens to the run) and dies
with the parent (``PR_SET_PDEATHSIG``), so a SIGKILL of the pod's process leaves no
child behind. A snapshot replaced before its upload began kills its child. A
serialization error in the child reaches the parent as the same ``SerializationError``
text the loop would have raised, one save later.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import re
import select
import signal
import struct
import sys
import threading
import time
import warnings
from collections.abc import Callable
from typing import Any

from ._errors import ConfigurationError, SerializationError

_OK, _ERR = b"K", b"E"
_U64 = struct.Struct("<Q")
_PR_SET_PDEATHSIG = 1
# Blocked across the fork, and for good in the child: it runs none of the parent's
# Python handlers (a SIGUSR1 preemption notice or SIGHUP sent to the process group while
# it pickles), SIGTERM and SIGINT included; SIGKILL (cancel, PDEATHSIG) still ends it.
_BLOCKED = signal.valid_signals() - {signal.SIGKILL, signal.SIGSTOP}

try:
    _libc: Any = ctypes.CDLL(None, use_errno=True)
    _prctl = _libc.prctl
except (OSError, AttributeError):  # not Linux: no parent-death signal
    _prctl = None


class Superseded(Exception):
    """A forked snapshot ended by ``cancel``: a newer state is being saved instead."""


class Stuck(Superseded):
    """A child that sent nothing within its deadline, ended: a lock another thread held
    at the fork (taken by the state's ``__getstate__``), say, which nobody releases in it."""


class Killed(Stuck):
    """A child killed by a SIGKILL its parent did not send: the out-of-memory killer's,
    most likely (the child's copy-on-write pages and its pickle count against the pod's
    memory), unless its message says otherwise; ``hint`` says what to do. Its snapshot is
    lost, as a stuck child's is; the state itself may well pickle, so this is no
    ``SerializationError``."""

    def __init__(self, message: str, *, hint: str = "a forked child needs memory beside "
                 "the loop's: raise the memory limit, or set RESUMABLE_SNAPSHOT_FORK=0") -> None:
        super().__init__(message)
        self.hint = hint  # what to do


def available() -> bool:
    """Linux only: the child's death with its parent and the check of shared memory
    below read Linux interfaces (prctl, /proc/self/maps)."""
    return hasattr(os, "fork") and sys.platform.startswith("linux")


# A mapping that is writable and shared (``rw-s``): multiprocessing.shared_memory,
# np.memmap in r+ mode, torch's share_memory_, multiprocessing's Value/Array arenas.
# Copy-on-write does not protect it: a child pickling an array on it would see what
# the loop writes after the yield. POSIX semaphores (a multiprocessing.Lock) hold no
# state and are left out.
_SHARED = re.compile(rb"^[0-9a-f]+-[0-9a-f]+ .w.s [^\n]*$", re.M)


def shared_writable_mappings() -> list[str]:
    """What this process maps shared and writable, but semaphores (names for a message)."""
    try:
        with open("/proc/self/maps", "rb") as fh:
            data = fh.read()
    except OSError:
        return ["(/proc/self/maps is unreadable)"]
    found = []
    for line in _SHARED.findall(data):
        if b"/dev/shm/sem." in line:
            continue
        fields = line.split(None, 5)
        found.append(fields[5].decode("utf-8", "replace").strip() if len(fields) > 5
                     else "(anonymous shared memory)")
    return found


def _write_all(fd: int, data: Any) -> None:
    view = memoryview(data).cast("B")
    while view:
        n = os.write(fd, view)
        view = view[n:]


def _readinto_exact(fd: int, buf: Any) -> None:
    view = memoryview(buf).cast("B")
    while view:
        n = os.readv(fd, [view])
        if not n:
            raise EOFError
        view = view[n:]


def _read_exact(fd: int, n: int) -> bytes:
    buf = bytearray(n)
    _readinto_exact(fd, buf)
    return bytes(buf)


class Forked:
    """A child serializing one state; ``collect`` gets its frames, ``cancel`` ends it."""

    def __init__(self, serialize: Callable[[], list[Any]], what: str) -> None:
        self.what = what
        parent = os.getpid()
        r, w = os.pipe()
        # Blocked across the fork (see _BLOCKED); the parent's arrive when the mask is
        # restored.
        mask = signal.pthread_sigmask(signal.SIG_BLOCK, _BLOCKED)
        try:
            with warnings.catch_warnings():
                # Python 3.12+ warns of fork with threads: the child touches no lock of
                # theirs.
                warnings.simplefilter("ignore", DeprecationWarning)
                pid = os.fork()
        except BaseException:
            signal.pthread_sigmask(signal.SIG_SETMASK, mask)
            os.close(r)
            os.close(w)
            raise
        if pid == 0:  # the child: serialize, write, leave
            code = 1
            try:
                os.close(r)
                with contextlib.suppress(ValueError, OSError):
                    signal.set_wakeup_fd(-1)  # the parent's relay pipe is not ours
                for signum in (signal.SIGTERM, signal.SIGINT):
                    with contextlib.suppress(ValueError, OSError):
                        signal.signal(signum, signal.SIG_IGN)
                # the mask stays: a signal of the group waits, blocked, until os._exit
                if _prctl is not None:
                    _prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
                if os.getppid() != parent:  # the parent died before prctl
                    os._exit(1)
                try:
                    frames = serialize()
                except BaseException as err:  # sent to the parent
                    kind = b"C" if isinstance(err, ConfigurationError) else b"S"
                    text = (str(err) if isinstance(err, (SerializationError,
                                                         ConfigurationError))
                            else f"{type(err).__name__}: {err}").encode("utf-8", "replace")
                    _write_all(w, _ERR + kind + _U64.pack(len(text)) + text)
                    code = 0
                else:
                    views = [memoryview(f).cast("B") for f in frames]
                    head = _OK + _U64.pack(len(views))
                    head += b"".join(_U64.pack(v.nbytes) for v in views)
                    _write_all(w, head)
                    for v in views:
                        _write_all(w, v)
                    code = 0
            finally:
                os._exit(code)
        signal.pthread_sigmask(signal.SIG_SETMASK, mask)
        os.close(w)
        # A pidfd names this child for good: a SIGKILL from cancel() cannot reach another
        # process that reused the pid (if the application reaps children itself).
        self.pidfd: int | None = None
        with contextlib.suppress(AttributeError, OSError):
            self.pidfd = os.pidfd_open(pid)
        self.pid: int | None = pid
        # Its parent-death signal follows this thread (prctl(2)), not the process: see
        # the SIGKILL in collect
        self.thread = threading.current_thread()
        self.fd: int | None = r
        self._lock = threading.Lock()
        self._reading = False
        self.sending = False  # its first byte came: it has pickled, and sends
        self.cancelled = False
        self.started = time.monotonic()

    def _wait_first_byte(self, fd: int, deadline: float | None) -> None:
        """Wait until the child has pickled (its first byte); ``Stuck`` past ``deadline``."""
        if deadline is None:
            return
        # poll, not select: select refuses a descriptor >= 1024, which a process with
        # many files open gets for the pipe (review 154)
        poller = select.poll()
        poller.register(fd, select.POLLIN)
        while True:
            left = deadline - time.monotonic()
            # Looked at before the deadline is: a save that waited behind a slow upload
            # reaches a child that pickled long ago, its bytes in the pipe (review 151:
            # such a child was ended as stuck, and the call's final state not saved).
            if poller.poll(int(min(max(left, 0.0), 1.0) * 1000)):
                return
            if left <= 0:
                self.cancel()
                raise Stuck(f"{self.what}: the child process pickling it sent nothing in "
                            f"{deadline - self.started:.0f} s")

    def collect(self, take: Callable[[int], Any] | None,
                deadline: float | None = None) -> list[Any]:
        """Read the child's frames (the first is the pickle stream, as bytes; the others
        into ``take(n)`` buffers), then reap it. Raises what the child's serialization
        raised; ``Superseded`` if ``cancel`` ended it; ``SerializationError`` if the child
        died without a word."""
        with self._lock:
            fd = self.fd
            if fd is None or self.cancelled:
                raise Superseded(f"{self.what}: its snapshot was cancelled")
            self._reading = True  # cancel() kills the child but leaves the pipe to us
        status: int | None = None
        read = False
        try:
            try:
                self._wait_first_byte(fd, deadline)
                tag = _read_exact(fd, 1)
                self.sending = True
                if tag == _ERR:
                    kind = _read_exact(fd, 1)
                    text = _read_exact(fd, _U64.unpack(_read_exact(fd, 8))[0])
                    cls = ConfigurationError if kind == b"C" else SerializationError
                    raise cls(text.decode("utf-8", "replace"))
                (n,) = _U64.unpack(_read_exact(fd, 8))
                sizes = [_U64.unpack(_read_exact(fd, 8))[0] for _ in range(n)]
                frames: list[Any] = []
                for i, size in enumerate(sizes):
                    buf = take(size) if (take is not None and i) else bytearray(size)
                    _readinto_exact(fd, buf)
                    frames.append(buf)
                read = True
                return frames
            except EOFError:
                with self._lock:
                    self._reading = False
                    status = self._reap()
                    if self.cancelled:
                        raise Superseded(f"{self.what}: its snapshot was cancelled") from None
                if status is None or (os.WIFSIGNALED(status)
                                      and os.WTERMSIG(status) == signal.SIGKILL):
                    raise self._killed(status) from None
                raise SerializationError(
                    f"{self.what}: the child process serializing it ended without "
                    f"sending it ({_describe(status)}); set RESUMABLE_SNAPSHOT_FORK=0 to "
                    "serialize on the loop's thread and see the error there") from None
        finally:
            with self._lock:
                self._reading = False
                if not read:
                    # Left on an error (a KeyboardInterrupt out of the wait, a failed
                    # read): the child may still be pickling, and the reap below would
                    # wait for it, for ever if it is stuck (review 155).
                    self._kill()
                self._close()
                self._reap()

    def _killed(self, status: int | None) -> Killed:
        """What a child that sent nothing and died of SIGKILL (or of what is unknown:
        another reaper took its status) is reported as. Not a pickling error: the child
        sends those."""
        if not self.thread.is_alive():
            # prctl(2): the parent-death signal is sent when the thread that forked the
            # child ends, though the process lives on (review 156)
            return Killed(
                f"{self.what}: the child process pickling it was killed by the parent-death "
                f"signal resumable gave it, because the thread that forked it "
                f"({self.thread.name}) ended before it had pickled (the kernel ties that "
                "signal to the thread: keep a run's iterator on a thread that outlives its "
                "saves, or set RESUMABLE_SNAPSHOT_FORK=0)",
                hint="so that no other state is lost this way")
        if status is None:
            # (not a pickling error, which the child sends; a crash or a kill)
            return Killed(
                f"{self.what}: the child process pickling it ended without sending it, and "
                "another reaper took its exit status (SIGCHLD ignored, or the application "
                "reaps children), so why is unknown: killed (by the out-of-memory killer?) "
                "or crashed",
                hint="if it recurs, set RESUMABLE_SNAPSHOT_FORK=0 to pickle on the loop's "
                     "thread and see any error there")
        return Killed(
            f"{self.what}: the child process pickling it was killed by SIGKILL, which "
            "resumable did not send (the out-of-memory killer? the child's copy-on-write "
            "pages and its pickle count against the memory limit)")

    def cancel(self) -> None:
        """The snapshot is no longer wanted: end the child (if still running). A
        ``collect`` reading it meanwhile gets ``Superseded``."""
        with self._lock:
            self.cancelled = True
            self._kill()
            if not self._reading:  # else the reader closes and reaps when it sees EOF
                self._close()
                self._reap()

    def _kill(self) -> None:
        if self.pidfd is not None:
            with contextlib.suppress(OSError):
                signal.pidfd_send_signal(self.pidfd, signal.SIGKILL)
        elif self.pid is not None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.pid, signal.SIGKILL)

    def _close(self) -> None:
        if self.fd is not None:
            with contextlib.suppress(OSError):
                os.close(self.fd)
            self.fd = None

    def _reap(self) -> int | None:
        pid, self.pid = self.pid, None
        pidfd, self.pidfd = self.pidfd, None
        if pidfd is not None:
            with contextlib.suppress(OSError):
                os.close(pidfd)
        if pid is None:
            return None
        try:
            return os.waitpid(pid, 0)[1]
        except ChildProcessError:  # reaped by someone else (a SIGCHLD handler)
            return None

    def __del__(self) -> None:
        # A snapshot dropped without release (an error path): no zombie, no open fd.
        with contextlib.suppress(Exception):
            if self.pid is not None or self.fd is not None or self.pidfd is not None:
                self.cancel()


def _describe(status: int | None) -> str:
    if status is None:
        return "status unknown"
    if os.WIFSIGNALED(status):
        sig = os.WTERMSIG(status)
        with contextlib.suppress(ValueError):
            return f"killed by {signal.Signals(sig).name}"
        return f"killed by signal {sig}"
    return f"exit status {os.WEXITSTATUS(status)}"
