"""Background saving: one upload in flight, and a newer snapshot replaces one still waiting.

Coalescing keeps the loop from ever waiting on slow storage: the loop pays only for
its snapshot, and when storage is slower than the loop some intermediate states are
skipped (the newest always wins). ``flush`` waits until everything handed in is durable.
``duty`` caps the share of wall time spent saving ($RESUMABLE_UPLOAD_DUTY, default
1/3): after a save that took T seconds the next one starts no sooner than
T * (1/duty - 1) later. On fast storage this changes nothing; when saving a large
state takes longer than a generation, continuous uploads would compete with the loop
for CPU and memory bandwidth (on a 2-core pod, a non-stop 64 MiB upload slows the
loop by ~40 %), so the newest snapshot waits a little and the loop keeps most of the
machine. Measured on 2 cores against a loopback rclone, 100 ms generations: duty 0.5
gave 1.13x / 1.44x per generation at 16 / 64 MiB, duty 1/3 gave 1.07x / 1.34x.
``flush`` never waits for the pace.
"""

from __future__ import annotations

import logging
import os
import threading
import time
import weakref
from collections.abc import Callable
from typing import Any

log = logging.getLogger("resumable")

Job = Callable[[], None]

_live: weakref.WeakSet[Uploader] = weakref.WeakSet()


def _abandon_in_child() -> None:
    for uploader in list(_live):
        uploader._abandon()


os.register_at_fork(after_in_child=_abandon_in_child)


class Uploader:
    """One background thread that runs saves one at a time, newest first, paced.

    Failures: the error of a save that failed is kept until it is raised, by the next
    ``submit`` (the loop should not compute for hours on storage that is failing for
    good) or ``flush``; a later save that succeeds does not hide it (which made whether
    a failure surfaced depend on timing).
    """

    def __init__(self, name: str, *, duty: float = 1 / 3) -> None:
        if not 0 < duty <= 1:
            raise ValueError(f"upload duty must be in (0, 1], got {duty!r}")
        self._abandoned = False  # in a child the body forked: see _abandon
        self._name = name
        self._rest = 1.0 / duty - 1.0
        self._not_before = 0.0
        self._urgent = False
        self._lock = threading.RLock()
        self._cond = threading.Condition(self._lock)
        self._waiting: Job | None = None
        self._on_drop: Job | None = None
        self._busy = False
        self._held = False  # the loop is about to replace the save waiting: don't start it
        self._error: BaseException | None = None
        self._closed = False
        self._thread: threading.Thread | None = None
        self.skipped = 0
        _live.add(self)

    def _abandon(self) -> None:
        """In a child process the body forked: the parent's upload thread is not here,
        its locks may have been held at the fork, and its saves are the parent's. Saves
        handed in here are dropped, and nothing waits (a child that ended with
        sys.exit() waited for ever for a save no thread would run)."""
        self._lock = threading.RLock()
        self._cond = threading.Condition(self._lock)
        self._waiting = self._on_drop = self._error = self._thread = None
        self._busy = self._held = False
        self._closed = self._abandoned = True

    def _ensure_thread(self) -> None:
        if self._thread is None:
            self._thread = threading.Thread(target=self._work, name=self._name, daemon=True)
            self._thread.start()

    def _work(self) -> None:
        while True:
            with self._cond:
                while True:
                    if self._waiting is None:
                        if self._closed:
                            return
                        self._cond.wait()
                        continue
                    if self._held and not (self._urgent or self._closed):
                        self._cond.wait()
                        continue
                    pause = self._not_before - time.monotonic()
                    if pause <= 0 or self._urgent or self._closed:
                        break
                    self._cond.wait(min(pause, 3600.0))  # (looked at again after)
                job, self._waiting, self._on_drop, self._busy = self._waiting, None, None, True
                self._cond.notify_all()  # (a loop in let_start waits for this)
            started = time.monotonic()
            error: BaseException | None = None
            try:
                job()
            except BaseException as err:  # handed to the loop at its next submit or flush
                error = err
            finally:
                job = None  # type: ignore[assignment]  # let go of the snapshot it held
                ended = time.monotonic()
                with self._cond:
                    if error is not None:  # kept until raised, even if a later save works:
                        self._error = error  # a store error has outlived its retries
                    self._busy = False
                    self._not_before = ended + (ended - started) * self._rest
                    self._cond.notify_all()

    def _raise_pending(self) -> None:
        if self._error is not None:
            err, self._error = self._error, None
            raise err

    def submit(self, job: Job, on_drop: Job | None = None, *, raise_pending: bool = True) -> None:
        """Hand a save to the background.

        With ``raise_pending`` an earlier save's failure is raised instead and ``job`` is
        not taken; without it (the final save) the job is taken whatever happened before.
        ``on_drop`` runs if a newer submission replaces this one before it started.
        """
        dropped = None
        if self._abandoned:  # (a child the body forked: it saves nothing)
            if on_drop is not None:
                on_drop()
            return
        with self._lock:  # (the condition's own lock: this runs at every yield)
            if raise_pending and self._error is not None:
                self._raise_pending()
            if self._waiting is not None:
                # The thread knows of a save already: it runs, or it rests and takes the
                # newest when it wakes. Telling it again would wake it for nothing.
                self.skipped += 1
                dropped = self._on_drop
            else:
                self._cond.notify_all()
            self._waiting, self._on_drop = job, on_drop
            if self._thread is None:
                self._ensure_thread()
        if dropped is not None:
            dropped()

    def replace_waiting(self, job: Job | None, change: Callable[..., None], *args: Any) -> bool:
        """``change(*args)`` if ``job`` is the save waiting, not started; else False.

        Under the lock the thread takes a save by: it cannot start ``job`` while it is
        changed, and once it has, nothing changes it. For the loop, which refills the
        waiting save's snapshot with a newer small state instead of handing in another
        (no new snapshot, job and drop at every yield of a fast loop). A failure of an
        earlier save is left for the next ``submit`` to raise.
        """
        with self._lock:
            if self._waiting is not job or job is None or self._error is not None:
                return False
            change(*args)
            self.skipped += 1
            return True

    @property
    def busy(self) -> bool:
        """A save is running now."""
        return self._busy

    @property
    def pending(self) -> bool:
        """A save is running or waits to (a racy read, for other threads' decisions)."""
        return self._busy or self._waiting is not None

    def drop_waiting(self) -> bool:
        """Take back a save that has not started (a newer one is about to replace it)."""
        with self._cond:
            dropped, self._waiting, self._on_drop = self._on_drop, None, None
            if dropped is None:
                return False
            self.skipped += 1
        dropped()
        return True

    def hold_resting(self) -> bool:
        """Keep the save that waits from starting until ``release_hold``, if none runs.

        For the loop, about to replace that save with a newer state: while the thread
        rests (paced) the newer state can go into the waiting save's buffers, where a
        save that started meanwhile would keep them and force a second copy. False when
        a save runs or none waits, and when the rest is over: the thread is free to
        start that save, and a loop that yields faster than the thread gets the GIL
        back would otherwise hold it for good (no save started during a fast loop of a
        large state). ``flush``, ``wait_idle`` and ``close`` are not held.
        """
        with self._cond:
            if (self._busy or self._waiting is None
                    or self._not_before <= time.monotonic()):
                return False
            self._held = True
            return True

    def let_start(self, timeout: float = 0.1) -> None:
        """If the thread is free to start the save that waits (none runs, its rest is
        over, nothing holds it), wait until it has, letting go of the GIL, up to
        ``timeout`` seconds. For the loop, before it takes that save back for a newer
        state: a loop that holds the GIL from one yield to the next (pure-Python
        generations) took every save back before the thread got the GIL to start it,
        and no save started while it ran. Costs the loop the thread's wake-up, once
        per save started."""
        with self._cond:
            if (self._busy or self._waiting is None or self._held or self._closed
                    or self._thread is None or self._not_before > time.monotonic()):
                return
            self._cond.wait_for(lambda: self._busy or self._waiting is None, timeout)

    def release_hold(self) -> None:
        with self._cond:
            if self._held:
                self._held = False
                self._cond.notify_all()

    def wait_not_busy(self) -> None:
        """Wait until no save is running (one may wait, paced); raises nothing."""
        with self._cond:
            while self._busy:
                self._cond.wait()

    def wait_idle(self) -> None:
        """Wait until nothing runs or waits; unlike ``flush`` it raises nothing."""
        with self._cond:
            self._urgent = True
            self._cond.notify_all()
            try:
                while self._waiting is not None or self._busy:
                    self._cond.wait()
            finally:
                self._urgent = False

    def flush(self) -> None:
        """Wait until every submitted save is done; raise the last one's failure."""
        with self._cond:  # re-entrant: no save can finish between the wait and the raise
            self.wait_idle()
            self._raise_pending()

    def close(self) -> None:
        """Run what is still waiting, stop the thread; a failure there is logged."""
        with self._cond:
            self._closed = True
            self._cond.notify_all()
        if self._thread is not None:
            self._thread.join()
            self._thread = None
        if self._error is not None:
            log.error("%s: a save failed after the run ended: %s", self._name, self._error)
            self._error = None
