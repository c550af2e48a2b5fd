"""One run's objects in a store: checkpoints, epochs (fencing), the result, the RNG record.

Layout under ``<run_id>/``::

    ckpt-<epoch:08>-<step:012>   checkpoints; the greatest name is the newest
    epoch-<epoch:08>             one per attempt, created only if absent (fencing)
    result                       the completed run's return value
    rng-start                    the global RNG state at the fresh start

Every object is in the verified format of ``_format``.
"""

from __future__ import annotations

import json
import logging
import os
import pickle
import socket
import threading
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from . import _format, _rng
from ._aligned import aligned_copy
from ._errors import (
    CheckpointCorruptError,
    CheckpointTamperedError,
    FencedError,
    SerializationError,
)
from .serializers import (
    Serializer,
    copy_frames,
    dumps_frames,
    dumps_views,
    get_serializer,
    loads_frames,
)
from .stores import Store
from .stores._base import Buffer, payload_size

log = logging.getLogger("resumable")

CKPT = "ckpt-"
EPOCH = "epoch-"
RESULT = "result"
RNG_START = "rng-start"
_RAW = "raw"  # serializer name for records that hold no user object


def ckpt_name(epoch: int, step: int) -> str:
    return f"{CKPT}{epoch:08d}-{step:012d}"


def parse_ckpt_name(name: str) -> tuple[int, int] | None:
    try:
        tag, epoch, step = name.split("-")
        if tag + "-" != CKPT or len(epoch) != 8 or len(step) != 12:
            return None
        return int(epoch), int(step)
    except ValueError:
        return None


@dataclass(frozen=True)
class Checkpoint:
    """A verified checkpoint: ``step`` completed yields, the ``state``, when and where."""

    step: int
    state: Any
    created: datetime
    key: str
    epoch: int
    rng: _rng.RngState | None = field(default=None, repr=False)


@dataclass(eq=False)
class Snapshot:
    """A state serialized at its yield: what a save writes, and what a restart reloads.

    Its large frames may come from a ``BufferPool``; each holder (the loop, an upload)
    calls ``release`` when done, and the last one hands the buffers back.
    """

    step: int
    frames: list[Buffer]  # [rng pickle, state frames...]
    created: float
    pool: BufferPool | None = None
    holders: int = 1
    in_place: bool = False  # frames are views of the live state (see Run.snapshot)
    size: int = 0  # bytes in the state's out-of-band buffers

    def hold(self) -> None:
        with _pool_lock:
            self.holders += 1

    def release(self) -> None:
        with _pool_lock:
            self.holders -= 1
            if self.holders < 0:
                raise RuntimeError(f"snapshot of step {self.step} released more than held")
            if self.holders:
                return
            if self.pool is None:
                if self.in_place:  # drop the views so the live state's memory can go
                    self.frames = []
                return
        self.pool.give_back(self.frames)


_pool_lock = threading.Lock()


class BufferPool:
    """Reuses snapshot buffers of equal size between generations (same shapes each time)."""

    def __init__(self, limit: int = 3) -> None:
        self._free: dict[int, list[bytearray]] = {}
        self._limit = limit

    def take(self, n: int) -> bytearray:
        with _pool_lock:
            free = self._free.get(n)
            if free:
                return free.pop()
        return bytearray(n)

    def give_back(self, frames: list[Buffer]) -> None:
        with _pool_lock:
            for f in frames:
                if isinstance(f, bytearray) and len(f) >= 1 << 16:
                    free = self._free.setdefault(len(f), [])
                    if len(free) < self._limit and not any(b is f for b in free):
                        free.append(f)

    def clear(self) -> None:
        with _pool_lock:
            self._free.clear()


def _pickle_rng(state: _rng.RngState | None) -> bytes:
    return pickle.dumps(state, protocol=5)


class Run:
    def __init__(
        self,
        store: Store,
        run_id: str,
        serializer: Serializer | str = "pickle",
        signing_key: bytes | None = None,
        keep: int | None = 3,
    ) -> None:
        self.store = store
        self.run_id = run_id
        self.serializer = get_serializer(serializer)
        self.signing_key = signing_key
        self.keep = keep
        self.epoch = 0
        self._known: list[str] = []  # checkpoint names of this run, ascending (for retention)

    # -- naming -----------------------------------------------------------------------

    def key(self, name: str) -> str:
        return f"{self.run_id}/{name}"

    def where(self, name: str | None = None) -> str:
        return f"{self.store.url}/{self.run_id}" + (f"/{name}" if name else "")

    # -- reading ----------------------------------------------------------------------

    def _decode(self, name: str, data: Buffer, kind: str) -> _format.Decoded:
        return _format.decode(data, key=self.signing_key, kind=kind, name=self.key(name))

    def checkpoint_names(self) -> list[str]:
        prefix = self.key(CKPT)
        names = [k[len(self.run_id) + 1 :] for k in self.store.list(prefix)]
        return [n for n in names if parse_ckpt_name(n) is not None]

    def epochs(self) -> list[int]:
        out = []
        for k in self.store.list(self.key(EPOCH)):
            try:
                out.append(int(k.rsplit("-", 1)[1]))
            except ValueError:
                continue
        return sorted(out)

    def _epoch_base(self, epoch: int) -> str | None:
        """The checkpoint name attempt ``epoch`` resumed from; '' for a fresh start."""
        data = self.store.get(self.key(f"{EPOCH}{epoch:08d}"))
        if data is None:
            return None
        try:
            name = f"{EPOCH}{epoch:08d}"
            record = json.loads(bytes(self._decode(name, data, "epoch").frames[0]))
            return str(record.get("base") or "")
        except (_format.InvalidObject, ValueError):
            return None

    def _superseded(self, name: str, epochs: set[int]) -> str | None:
        """The base of the newer attempt that took over, if ``name`` was written after it.

        A zombie (an attempt that kept running after a newer one claimed the run) may
        write a few checkpoints before it notices; they sort after the newer attempt's
        base and are never resumed from. Returns None when ``name`` is legitimate.
        """
        parsed = parse_ckpt_name(name)
        if parsed is None or parsed[0] + 1 not in epochs:
            return None
        base = self._epoch_base(parsed[0] + 1)
        return base if base is not None and name > base else None

    def load_latest(self, *, with_state: bool = True) -> Checkpoint | None:
        """The newest checkpoint that passes verification; older ones are fallbacks.

        Checkpoints a superseded attempt wrote after a newer one took over come last: they
        are used only when nothing else verifies (the newer attempt's base is gone, e.g.
        deleted by the old attempt's retention before it noticed), since a deterministic
        body makes them as good as any, and that beats refusing or starting over.
        """
        names = self.checkpoint_names()
        self._known = list(names)
        if not names:
            return None
        epochs = set(self.epochs())
        failures: list[tuple[str, _format.InvalidObject]] = []
        superseded: list[tuple[str, str]] = []
        for name in reversed(names):
            base = self._superseded(name, epochs)
            if base is not None:
                log.warning(
                    "skipping %s: written by an attempt after a newer one took over the run",
                    self.where(name),
                )
                superseded.append((name, base))
                continue
            found = self._try_load(name, failures, with_state)
            if found is not None:
                return found
        for name, base in superseded:
            log.warning("%s was written by an attempt after a newer one took over from %s; "
                        "using it only because no other checkpoint verifies",
                        self.where(name), base or "a fresh start")
            found = self._try_load(name, failures, with_state)
            if found is not None:
                return found
        if not failures:
            return None
        summary = "; ".join(f"{n}: {e.reason}" for n, e in failures)
        cls = CheckpointTamperedError if any(e.tampered for _, e in failures) else (
            CheckpointCorruptError)
        what = "is signed correctly" if cls is CheckpointTamperedError else "passes verification"
        raise cls(
            f"no checkpoint of run {self.run_id!r} in {self.store.url} {what} ({summary}); "
            f"refusing to start from scratch. Inspect with `resumable verify {self.store.url} "
            f"{self.run_id}`, and delete the run with `resumable rm` to start over"
        )

    def _try_load(self, name: str, failures: list[tuple[str, _format.InvalidObject]],
                  with_state: bool) -> Checkpoint | None:
        data = self.store.get(self.key(name))
        if data is None:  # deleted by retention of another attempt since the listing
            return None
        try:
            decoded = self._decode(name, data, "ckpt")
        except _format.InvalidObject as err:
            log.error("checkpoint %s fails verification: %s; trying an older one",
                      self.where(name), err.reason)
            failures.append((name, err))
            return None
        if failures:
            log.warning("resuming %s from %s after skipping %d damaged checkpoint(s)",
                        self.where(), name, len(failures))
        return self._to_checkpoint(name, decoded, with_state)

    def _to_checkpoint(self, name: str, decoded: _format.Decoded, with_state: bool) -> Checkpoint:
        header = decoded.header
        state: Any = None
        rng = None
        if with_state:
            self._check_serializer(name, header.serializer)
            try:
                rng = _rng_loads(decoded.frames[0])
                state = loads_frames(self.serializer, decoded.frames[1:])
            except Exception as err:
                raise SerializationError(
                    f"checkpoint {self.where(name)} passed verification but cannot be "
                    f"deserialized: {type(err).__name__}: {err}. Is the code that defines the "
                    "state's classes importable here, at a compatible version?"
                ) from err
        return Checkpoint(
            step=header.step,
            state=state,
            created=datetime.fromtimestamp(header.created, UTC),
            key=self.key(name),
            epoch=header.epoch,
            rng=rng,
        )

    def _check_serializer(self, name: str, recorded: str) -> None:
        if recorded != self.serializer.name:
            raise SerializationError(
                f"{self.where(name)} was written with serializer {recorded!r} but this run uses "
                f"{self.serializer.name!r}; pass serializer={recorded!r} to read it"
            )

    def load_result(self) -> tuple[bool, Any]:
        data = self.store.get(self.key(RESULT))
        if data is None:
            return False, None
        try:
            decoded = self._decode(RESULT, data, "result")
        except _format.InvalidObject as err:
            cls = CheckpointTamperedError if err.tampered else CheckpointCorruptError
            raise cls(
                f"the result record {self.where(RESULT)} fails verification ({err.reason}); "
                f"delete it with `resumable rm {self.store.url} {self.run_id}` to run again"
            ) from None
        self._check_serializer(RESULT, decoded.header.serializer)
        try:
            return True, loads_frames(self.serializer, decoded.frames)
        except Exception as err:
            raise SerializationError(
                f"the result record {self.where(RESULT)} passed verification but cannot be "
                f"deserialized: {type(err).__name__}: {err}. Is the code that defines its "
                "classes importable here, at a compatible version?"
            ) from err

    def load_rng_start(self) -> _rng.RngState | None:
        data = self.store.get(self.key(RNG_START))
        if data is None:
            return None
        try:
            return _rng_loads(self._decode(RNG_START, data, "rng").frames[0])
        except _format.InvalidObject as err:
            log.error("RNG record %s fails verification (%s); capturing a new one",
                      self.where(RNG_START), err.reason)
            return None

    # -- writing ----------------------------------------------------------------------

    def _encode(self, name: str, frames: list[Buffer], kind: str, serializer: str,
                step: int = 0, created: float | None = None) -> list[Buffer]:
        return _format.encode(
            frames, kind=kind, serializer=serializer, step=step, epoch=self.epoch,
            created=time.time() if created is None else created, name=self.key(name),
            key=self.signing_key,
        )

    def claim_epoch(self, base: str | None) -> int:
        """Claim a new attempt number with a create-only write; a newer claim fences us."""
        latest = max(self.epochs(), default=0)
        record = json.dumps({
            "host": socket.gethostname(), "pid": os.getpid(), "started": time.time(),
            "base": base or "", "pod": os.environ.get("HOSTNAME", ""),
        }).encode()
        for candidate in range(latest + 1, latest + 1000):
            self.epoch = candidate
            name = f"{EPOCH}{candidate:08d}"
            payload = self._encode(name, [record], "epoch", _RAW)
            if self.store.put_if_absent(self.key(name), payload):
                return candidate
        raise FencedError(f"could not claim an attempt number for {self.where()}: "
                          "a thousand concurrent attempts?")

    def check_fenced(self) -> None:
        """Raise FencedError if a newer attempt has claimed the run (one small GET)."""
        name = f"{EPOCH}{self.epoch + 1:08d}"
        newer = self.store.get(self.key(name))
        if newer is not None:
            try:
                self._decode(name, newer, "epoch")
            except _format.InvalidObject as err:
                # With a signing key, someone without it cannot stop the run this way.
                log.error("ignoring attempt record %s: %s", self.where(name), err.reason)
                return
            raise FencedError(
                f"run {self.run_id!r} in {self.store.url} was taken over by a newer attempt "
                f"(epoch {self.epoch + 1} > ours, {self.epoch}); this attempt stops without "
                "writing. Another pod is running the same run: check the Job's pods"
            )

    def snapshot(
        self, state: Any, step: int, rng: _rng.RngState | None, pool: BufferPool | None = None,
        copy_limit: float = float("inf"),
    ) -> Snapshot:
        """Serialize ``state``; its large buffers are copied only up to ``copy_limit`` bytes.

        Above the limit the snapshot is ``in_place``: its frames are views of the live
        state, valid only until the body resumes, so it must be written before that and
        never kept.
        """
        frames = dumps_views(self.serializer, state,
                             f"the state yielded at step {step} of run {self.where()}")
        size = sum(memoryview(f).nbytes for f in frames[1:])
        in_place = size > copy_limit
        if not in_place:
            frames = copy_frames(frames, None if pool is None else pool.take)
        return Snapshot(step=step, frames=[_pickle_rng(rng), *frames], created=time.time(),
                        pool=None if in_place else pool, in_place=in_place, size=size)

    def restore_snapshot(self, snap: Snapshot) -> tuple[Any, _rng.RngState | None]:
        # Private, aligned copies of the out-of-band buffers: the snapshot's go back to
        # the pool and get overwritten. The pickle streams are only read.
        views = [memoryview(f).cast("B") for f in snap.frames[:2]]
        views += [aligned_copy(f) for f in snap.frames[2:]]
        return loads_frames(self.serializer, views[1:]), _rng_loads(views[0])

    def write_checkpoint(self, snap: Snapshot) -> str:
        """Fence check, write, then apply retention. Runs on the uploader thread."""
        self.check_fenced()
        name = ckpt_name(self.epoch, snap.step)
        started = time.perf_counter()
        payload = self._encode(name, snap.frames, "ckpt", self.serializer.name, snap.step,
                               snap.created)
        self.store.put(self.key(name), payload)
        log.debug("saved %s (%d bytes, %.3f s)", self.where(name), payload_size(payload),
                  time.perf_counter() - started)
        if name not in self._known:
            self._known.append(name)
            self._known.sort()
        # Checked again before deleting anything: a newer attempt may have taken over
        # during the write and resumed from a checkpoint retention would now remove.
        self.check_fenced()
        self.prune()
        return name

    def prune(self) -> None:
        if self.keep is None:
            return
        while len(self._known) > self.keep:
            old = self._known.pop(0)
            self.store.delete(self.key(old))

    def write_rng_start(self, rng: _rng.RngState) -> None:
        self.store.put(self.key(RNG_START),
                       self._encode(RNG_START, [_pickle_rng(rng)], "rng", _RAW))

    def write_result(self, value: Any) -> None:
        self.check_fenced()
        frames = dumps_frames(self.serializer, value, f"the return value of run {self.where()}",
                              root="result")
        self.store.put(self.key(RESULT),
                       self._encode(RESULT, frames, "result", self.serializer.name))

    def reset(self) -> int:
        """Delete every object of the run; returns how many."""
        keys = self.store.list(self.run_id + "/")
        for k in keys:
            self.store.delete(k)
        self._known = []
        return len(keys)


def _rng_loads(frame: memoryview) -> _rng.RngState | None:
    value = pickle.loads(frame)
    return value if isinstance(value, dict) else None
