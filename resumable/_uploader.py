"""Background saving: one upload in flight, and a newer snapshot replaces one still waiting.

Coalescing keeps the loop from ever waiting on slow storage: the loop pays only for
its snapshot, and when storage is slower than the loop some intermediate states are
skipped (the newest always wins). ``flush`` waits until everything handed in is durable.
With ``synchronous=True`` ($RESUMABLE_SYNC=1) every save completes before the loop
goes on: nothing is coalesced, at the price of the loop waiting for storage.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

log = logging.getLogger("resumable")

Job = Callable[[], None]


class Uploader:
    def __init__(self, name: str, *, synchronous: bool = False) -> None:
        self._name = name
        self._synchronous = synchronous
        self._cond = threading.Condition()
        self._waiting: Job | None = None
        self._on_drop: Job | None = None
        self._busy = False
        self._error: BaseException | None = None
        self._closed = False
        self._thread: threading.Thread | None = None
        self.skipped = 0

    def _ensure_thread(self) -> None:
        if self._thread is None:
            self._thread = threading.Thread(target=self._work, name=self._name, daemon=True)
            self._thread.start()

    def _work(self) -> None:
        while True:
            with self._cond:
                while self._waiting is None and not self._closed:
                    self._cond.wait()
                if self._waiting is None:
                    return
                job, self._waiting, self._on_drop, self._busy = self._waiting, None, None, True
            try:
                job()
            except BaseException as err:  # handed to the loop at its next submit or flush
                with self._cond:
                    if self._error is None:
                        self._error = err
            finally:
                with self._cond:
                    self._busy = False
                    self._cond.notify_all()

    def _raise_pending(self) -> None:
        if self._error is not None:
            err, self._error = self._error, None
            raise err

    def submit(self, job: Job, on_drop: Job | None = None) -> None:
        """Hand a save to the background; raises an earlier save's failure instead.

        ``on_drop`` runs if a newer submission replaces this one before it started.
        """
        dropped = None
        with self._cond:
            self._raise_pending()
            if self._waiting is not None:
                self.skipped += 1
                dropped = self._on_drop
            self._waiting, self._on_drop = job, on_drop
            self._ensure_thread()
            self._cond.notify_all()
        if dropped is not None:
            dropped()
        if self._synchronous:
            self.flush()

    def flush(self) -> None:
        """Wait until every submitted save is done; raise the first failure."""
        with self._cond:
            while self._waiting is not None or self._busy:
                self._cond.wait()
            self._raise_pending()

    def discard_error(self) -> BaseException | None:
        with self._cond:
            err, self._error = self._error, None
            return err

    def close(self) -> None:
        with self._cond:
            self._closed = True
            self._cond.notify_all()
        if self._thread is not None:
            self._thread.join()
            self._thread = None
