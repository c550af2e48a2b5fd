"""One run's objects in a store: checkpoints, epochs (fencing), the result, the RNG record.

Layout under ``<run_id>/``::

    ckpt-<epoch:08>-<step:012>   checkpoints; the greatest name is the newest
    epoch-<epoch:08>             one per attempt, created only if absent (fencing); the
                                 attempt rewrites it once, to record the checkpoint it
                                 resumed from (see Run.claim_and_load)
    result                       the completed run's return value
    rng-start                    the global RNG state at the fresh start
    identity                     the call's fingerprint (one hash per argument), see _identity
    call-<epoch:08>              what attempt <epoch> ran: ignored arguments, code hash

Every object is in the verified format of ``_format``.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import pickle
import shlex
import socket
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from . import _forked, _format, _rng, _spill
from ._aligned import aligned_copy
from ._errors import (
    CheckpointCorruptError,
    CheckpointTamperedError,
    ConfigurationError,
    FencedError,
    SerializationError,
    StoreError,
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
from .stores._base import (
    Buffer,
    Payload,
    get_screened,
    head_of,
    join_payload,
    payload_size,
    reads_heads,
)

log = logging.getLogger("resumable")

CKPT = "ckpt-"
EPOCH = "epoch-"
RESULT = "result"
RNG_START = "rng-start"
RNG_END = "rng-end"  # the RNGs as the completed run left them (restored on recall)
IDENTITY = "identity"
CALL = "call-"
_RAW = "raw"  # serializer name for records that hold no user object
MAX_EPOCH = 99_999_999  # the 8-digit field of the names; never overflowed
RELISTS = 5  # listings tried when listed checkpoints vanish before they are read


def ckpt_name(epoch: int, step: int) -> str:
    return f"{CKPT}{epoch:08d}-{step:012d}"


def object_kind(name: str) -> str:
    """The record kind a name in a run's folder must hold ("ckpt", "epoch", "call",
    "result", "rng", "identity"); "" for a name the library never writes (someone
    else's file). A checkpoint name holding a result is damage too."""
    if parse_ckpt_name(name) is not None:
        return "ckpt"
    # Attempt and call records are <prefix><8 digits>, as the library names them: a
    # file named epoch-10.pt or call-graph.txt is someone else's, never read.
    for prefix, kind in ((EPOCH, "epoch"), (CALL, "call")):
        tail = name[len(prefix):]
        if name.startswith(prefix) and len(tail) == 8 and tail.isdigit() and tail.isascii():
            return kind
    return {RESULT: "result", RNG_START: "rng", RNG_END: "rng", IDENTITY: "identity"}.get(name, "")


def parse_ckpt_name(name: str) -> tuple[int, int] | None:
    if not name.startswith(CKPT):  # (most names of a listing are not checkpoints)
        return None
    try:
        _, epoch, step = name.split("-")
        if len(epoch) != 8 or len(step) != 12:
            return None
        return int(epoch), int(step)
    except ValueError:
        return None


@dataclass(frozen=True)
class _Refused:
    """An object refused before it was read whole (see Run._get)."""

    error: _format.InvalidObject


class _IsFinal(_format.InvalidObject):
    """Raised by the screen of a read that passes over final checkpoints
    (Run._get_resumable)."""


class _Final:
    """What Run._get_resumable returns for a final checkpoint, passed over."""


_FINAL = _Final()


@dataclass(frozen=True)
class Checkpoint:
    """A verified checkpoint: ``step`` completed yields, the ``state``, when and where."""

    step: int
    state: Any
    created: datetime
    key: str
    epoch: int
    rng: _rng.RngState | None = field(default=None, repr=False)
    # The state as the body left it at its return, saved because its last yield was not
    # snapshotted (every=n or a duration): the code past that yield may have changed it
    # (a sort, a draw), so no resume or extension starts from it
    final: bool = False


@dataclass(eq=False, slots=True)
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
    rng: Any = None  # pickled into frames[0] only when written or restored
    # A child serializing the state ($RESUMABLE_SNAPSHOT_FORK), or the file the state was
    # spilled to (_spill): frames[1:] come from it
    forked: _forked.Forked | _spill.Spilled | None = None
    failed: BaseException | None = None  # what reading them raised
    final: bool = False  # the state at the body's return (see Checkpoint.final)
    # Told the size of a forked child's frames once read: the next due yield's hint
    on_size: Callable[[int], None] | None = None
    deadline: float | None = None  # time.monotonic() by which a forked child must have pickled
    # Its own, not one for the process: reading the frames may wait for a forked child's
    # pickling (up to $RESUMABLE_FORK_TIMEOUT), and other calls' saves must not wait too.
    # Made at the first read of frames still to come (most snapshots have theirs: a lock
    # each would be made at every yield for nothing).
    _materialize_lock: threading.Lock | None = field(default=None, repr=False)

    def materialize(self) -> None:
        """Read a forked child's frames (once; every later call sees the same outcome)."""
        lock = self._materialize_lock
        if lock is None:
            with _pool_lock:
                lock = self._materialize_lock  # (again: another read may have made it)
                if lock is None:
                    if self.forked is None:
                        # Its frames are here: ``forked`` is never set again, and a read
                        # lets go of it only with the lock made (``release`` too, but a
                        # released snapshot is read by no one).
                        return
                    lock = self._materialize_lock = threading.Lock()
        with lock:
            if self.failed is not None:
                raise self.failed
            child = self.forked
            if child is None:
                return
            try:
                frames = child.collect(self.pool.take if self.pool is not None else None,
                                       self.deadline)
            except BaseException as err:
                self.failed = err
                raise
            finally:
                self.forked = None
            self.frames[1:] = frames
            self.size = sum(memoryview(f).nbytes for f in frames[1:])
            if self.on_size is not None:
                self.on_size(self.size)

    def rng_frame(self) -> Buffer:
        # Pickling the RNG state (625 ints for `random`) costs more than the rest of a small
        # snapshot; most snapshots of a fast loop are replaced before they are uploaded.
        if not self.frames[0]:
            self.frames[0] = _pickle_rng(self.rng)
        return self.frames[0]

    def refill(self, step: int, stream: bytes, rng: Any, created: float) -> None:
        """Hold the state of a later yield instead: a pickle with no out-of-band buffers.

        Only for a snapshot made from its frames (not forked, spilled or in place) that
        no save has started to write, and only under the lock its save is taken by (see
        ``Uploader.replace_waiting``): the save then writes the newer state.
        """
        self.step, self.frames, self.rng, self.created = step, [b"", stream], rng, created

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
            child, self.forked = self.forked, None
            pool = self.pool
            if pool is None and child is None and self.failed is None:
                if self.in_place:  # drop the views so the live state's memory can go
                    self.frames = []
                return
        if child is not None:  # never read: its child (or file) is not needed any more
            child.cancel()
        if child is not None or self.failed is not None or pool is None:
            # Its frames never came (or reading them failed): nothing to give back.
            # Handing the pool a snapshot without buffers would make it drop the ones it
            # keeps for the next copy.
            return
        pool.give_back(self.frames)


_pool_lock = threading.Lock()


def _new_pool_lock_in_child() -> None:
    # The upload thread may have held it at the fork (a body's os.fork, a fork pool whose
    # workers run decorated functions): the child has no such thread to let go of it, and
    # would hang at its first snapshot (review 39).
    global _pool_lock
    _pool_lock = threading.Lock()


os.register_at_fork(after_in_child=_new_pool_lock_in_child)
_POOLED = 1 << 16  # buffers the pool keeps: smaller ones cost less to make than to keep


class BufferPool:
    """Reuses snapshot buffers of equal size between generations (same shapes each time)."""

    def __init__(self, limit: int = 3) -> None:
        self._free: dict[int, list[bytearray]] = {}
        self._limit = limit

    def prepare(self) -> None:
        """Called once the state has serialized, before it is copied or spilled."""

    def take(self, n: int) -> bytearray:
        with _pool_lock:
            free = self._free.get(n)
            if free:
                return free.pop()
        return bytearray(n)

    def give_back(self, frames: list[Buffer]) -> None:
        if not self._free:
            for f in frames:  # (a loop, not any(): this runs at every yield)
                if isinstance(f, bytearray):
                    break
            else:
                return  # a small state: nothing to keep, nothing to let go of
        with _pool_lock:
            # Only the sizes of the snapshot given back are kept: a state whose arrays
            # change size (a growing archive) would otherwise leave every size it ever
            # had in the pool, up to gigabytes for a few MiB of state.
            sizes = {len(f) for f in frames if isinstance(f, bytearray)}
            for n in [n for n in self._free if n not in sizes]:
                del self._free[n]
            for f in frames:
                if isinstance(f, bytearray) and len(f) >= _POOLED:
                    free = self._free.setdefault(len(f), [])
                    if len(free) < self._limit and not any(b is f for b in free):
                        free.append(f)

    def clear(self) -> None:
        with _pool_lock:
            self._free.clear()


def _pickle_rng(state: _rng.RngState | None) -> bytes:
    return pickle.dumps(state, protocol=5)


def _newer(what: str, reason: object, more: str = "") -> ConfigurationError:
    """Objects of a newer format version: valid work of a newer resumable (the pods'
    image rolled back), never "damaged: delete the run" (reviews 106, 108)."""
    return ConfigurationError(f"{what} was written by a newer resumable ({reason}): "
                              f"upgrade resumable to resume the run{more}")


def command(*words: str) -> str:
    """A `resumable ...` command line to paste into a shell: each word quoted (an s3 URL's
    ?a=1&b=2 options, a folder's spaces)."""
    return "`resumable " + " ".join(shlex.quote(w) for w in words) + "`"


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
        # The call's RNG objects (see _rng.aliasing): one the state holds too is pickled
        # by its path, and loaded as the loading call's object
        self.rng_targets: Sequence[tuple[str, Any]] = ()
        self.serializer = get_serializer(serializer)
        self.signing_key = signing_key
        self.keep = keep
        self.epoch = 0
        self.result_epoch = 0  # set by load_result
        self._known: list[str] = []  # checkpoint names of this run, ascending (for retention)
        self._finals: set[str] = set()  # those known to hold a final state (Checkpoint.final)
        self._resumable: set[str] = set()  # those known to verify and not to be final
        self._own_record: bytes | None = None  # our attempt record as last written
        self._pid = os.getpid()  # the attempt's process: a child the body forks writes nothing

    def forked_away(self) -> bool:
        """This is a child process the body forked (not the attempt): it saves nothing."""
        return os.getpid() != self._pid

    def adopt_process(self) -> None:
        """This process is the attempt (the run was opened in its parent, nothing ran)."""
        self._pid = os.getpid()

    # -- naming -----------------------------------------------------------------------

    def key(self, name: str) -> str:
        return f"{self.run_id}/{name}"

    def where(self, name: str | None = None) -> str:
        return f"{self.store.url}/{self.run_id}" + (f"/{name}" if name else "")

    def _delete_command(self, name: str) -> str:
        """How to delete one object of the run by hand, e.g. `rm /data/ckpt/run/result`
        (the store's ``delete_command``, where it has one)."""
        how = getattr(self.store, "delete_command", None)
        return how(self.key(name)) if how is not None else f"key {self.key(name)!r} of the store"

    def rm_command(self, run_id: str | None = None) -> str:
        """`resumable rm STORE RUN`, quoted for a shell (an s3 URL's ?a=1&b=2 options)."""
        return command("rm", self.store.url, run_id or self.run_id)

    # -- reading ----------------------------------------------------------------------

    def _get(self, name: str) -> Buffer | _Refused | None:
        """The run's object ``name``, None if there is none. One whose first bytes show that
        it cannot be one of ours at its size is not read whole (_format.screen): _decode
        then refuses it, as it does a damaged object."""
        try:
            return get_screened(self.store, self.key(name), _format.screen,
                                _format.SCREEN_BYTES)
        except _format.InvalidObject as err:
            return _Refused(err)

    def _get_resumable(self, name: str) -> Buffer | _Refused | _Final | None:
        """``_get``, but a final checkpoint is not read whole: ``_FINAL`` (review 160: a
        resume downloaded, unpickled and held the final state it passes over, twice the
        memory, and one whose classes had changed since stopped it)."""
        def screen(prefix: Buffer, size: int) -> None:
            if _format.marked_final(prefix):
                raise _IsFinal("a final checkpoint")
            _format.screen(prefix, size)

        try:
            data = get_screened(self.store, self.key(name), screen, _format.SCREEN_BYTES)
        except _IsFinal:
            return _FINAL
        except _format.InvalidObject as err:
            return _Refused(err)
        if data is not None and _format.marked_final(data):
            return _FINAL  # (small, or from a store that reads whole)
        return data

    def _decode(self, name: str, data: Buffer | _Refused, kind: str) -> _format.Decoded:
        if isinstance(data, _Refused):
            raise data.error
        decoded = _format.decode(data, key=self.signing_key, kind=kind, name=self.key(name))
        if self.signing_key is None and decoded.header.signed:
            # Going on would write unsigned objects into a signed run; retention would then
            # delete the signed ones, and with the key back nothing would verify.
            raise ConfigurationError(
                f"{self.where(name)} is signed, but no signing key is set: set "
                "$RESUMABLE_SIGNING_KEY (or signing_key=) to the run's key to resume it, "
                f"or delete the run with {self.rm_command()}"
            )
        return decoded

    def checkpoint_names(self) -> list[str]:
        prefix = self.key(CKPT)
        names = [k[len(self.run_id) + 1 :] for k in self.store.list(prefix)]
        return [n for n in names if parse_ckpt_name(n) is not None]

    def epochs(self) -> list[int]:
        """The attempt numbers whose records are listed (unverified; see ``latest_epoch``)."""
        out = []
        for k in self.store.list(self.key(EPOCH)):
            tail = k.rsplit("/", 1)[1][len(EPOCH):]
            if len(tail) == 8 and tail.isdigit():
                out.append(int(tail))
        return sorted(out)

    def _epoch_record(self, epoch: int) -> dict[str, Any] | None:
        """Attempt ``epoch``'s verified record, or None (absent, damaged, forged)."""
        name = f"{EPOCH}{epoch:08d}"
        data = self._get(name)
        if data is None:
            return None
        try:
            frame = self._decode(name, data, "epoch").frames[0]
        except _format.InvalidObject as err:
            log.error("ignoring attempt record %s: %s", self.where(name), err.reason)
            return None
        try:
            record = json.loads(bytes(frame))
        except ValueError:
            record = None
        if not isinstance(record, dict):
            log.error("ignoring attempt record %s: its content is not a record", self.where(name))
            return None
        return record

    def latest_epoch(self) -> int:
        """The newest attempt whose record verifies; strays and forgeries do not count.

        Verifies from the newest name down, so it reads one record in the usual case.
        """
        for epoch in reversed(self.epochs()):
            if self._epoch_record(epoch) is not None:
                return epoch
        return 0

    def _epoch_base(self, epoch: int) -> str | None:
        """The checkpoint name attempt ``epoch`` resumed from; '' for a fresh start.

        None when there is no verified record, or the attempt has claimed the run but
        not yet chosen its base (it supersedes nothing until then).
        """
        record = self._epoch_record(epoch)
        if record is None or record.get("base") is None:
            return None
        return str(record["base"])

    def _superseded(self, name: str, epochs: set[int]) -> str | None:
        """The base of the newer attempt that took over, if ``name`` was written after it.

        A zombie (an attempt that kept running after a newer one claimed the run) may
        write a few checkpoints before it notices; they sort after the newer attempt's
        base and are never resumed from. Returns None when ``name`` is legitimate.
        """
        parsed = parse_ckpt_name(name)
        if parsed is None:
            return None
        # The next attempt that really claimed the run: usually parsed + 1; a stray
        # record at that number (one that fails verification) is passed over.
        for epoch in sorted(e for e in epochs if e > parsed[0]):
            record = self._epoch_record(epoch)
            if record is None:
                continue
            base = record.get("base")
            return str(base) if base is not None and name > str(base) else None
        return None

    def load_latest(self, *, with_state: bool = True, finals: bool = False) -> Checkpoint | None:
        """The newest checkpoint that passes verification; older ones are fallbacks.

        A final state (``Checkpoint.final``) is the newest only with ``finals``
        (``f.latest()``); a resume never starts from one, but from the newest state that
        was yielded and saved, or afresh.

        Checkpoints a superseded attempt wrote after a newer one took over come last: they
        are used only when nothing else verifies (the newer attempt's base is gone, e.g.
        deleted by the old attempt's retention before it noticed), since a deterministic
        body makes them as good as any, and that beats refusing or starting over.
        """
        seen_vanish: list[str] = []  # checkpoints were seen: never report "none" then
        found: Checkpoint | None = None
        failures: list[tuple[str, _format.InvalidObject]] = []
        for _listing in range(RELISTS):
            found, vanished, failures = self._load_listed(with_state, finals)
            seen_vanish += vanished
            if found is not None or not vanished:
                break
            # Listed, then deleted before we read them: retention of an older attempt
            # (fenced by now, so it stops), or `resumable rm`. A newer listing sees what
            # replaced them.
            log.warning("%d checkpoint(s) of %s disappeared while loading; listing again",
                        len(vanished), self.where())
        if found is not None:
            return found
        if seen_vanish and not failures:
            raise StoreError(
                f"checkpoints of run {self.run_id!r} in {self.store.url} were listed but "
                f"disappeared while loading ({', '.join(seen_vanish[:3])}): "
                "another process is deleting them (an older attempt of the run, or "
                "`resumable rm`); refusing to start from scratch. Retry once it has stopped",
                url=self.store.url, key=self.key(seen_vanish[0]),
            )
        if not failures:
            return None
        summary = "; ".join(f"{n}: {e.reason}" for n, e in failures)
        passed = sorted(n for n in self._finals if n in self._known)
        if passed:
            summary += (f"; {', '.join(passed)}: final state(s), which no resume starts "
                        "from")
        if all(e.newer for _, e in failures):
            # Valid work of a newer version (the pods' image rolled back): deleting the
            # run, as the advice below says, would lose it (review 106)
            raise _newer(f"every checkpoint of run {self.run_id!r} in {self.store.url}",
                         summary, " (this version cannot read them, and does not start "
                         "over)")
        cls = CheckpointTamperedError if any(e.tampered for _, e in failures) else (
            CheckpointCorruptError)
        what = "is signed correctly" if cls is CheckpointTamperedError else "passes verification"
        raise cls(
            f"no checkpoint of run {self.run_id!r} in {self.store.url} {what} ({summary}); "
            f"refusing to start from scratch. Inspect with "
            f"{command('verify', self.store.url, self.run_id)}, and delete the run with "
            f"{self.rm_command()} to start over"
        )

    def _load_listed(self, with_state: bool, finals: bool = False) -> tuple[
            Checkpoint | None, list[str], list[tuple[str, _format.InvalidObject]]]:
        """One listing's newest verified checkpoint, the names that vanished, the failures."""
        names = self.checkpoint_names()
        self._known = list(names)
        vanished: list[str] = []
        failures: list[tuple[str, _format.InvalidObject]] = []
        if not names:
            return None, vanished, failures
        epochs = set(self.epochs())
        superseded: list[tuple[str, str]] = []
        for name in reversed(names):
            base = self._superseded(name, epochs)
            if base is not None and self._marked_final(name, whole=finals):
                # An older attempt's final state sorts after the base of the attempt that
                # extended the run from an older checkpoint: it was there before, not a
                # zombie's write. Passed over as any final is, not warned about (review
                # 160). (Its header alone says so, unverified: enough to pass one over,
                # never to use one. An attempt's record of finals it saw, trusted to
                # exempt names from this rule, let a stray object's header hide a
                # zombie's writes: reviews 161, 162). f.latest() reads it, verified, in
                # its place: the newest checkpoint (review 163: it was taken for a
                # zombie's too, warned about, and an older one returned). So does the
                # final of an attempt fenced as it ended, written just after the newer
                # one took over, which no header tells apart: a state of the same run,
                # shown, never resumed from (review 164; README, Fencing)
                if finals:
                    found = self._try_load(name, failures, with_state, vanished, finals)
                    if found is not None:
                        return found, vanished, failures
                else:
                    self._pass_over_final(name)
                continue
            if base is not None:
                log.warning(
                    "skipping %s: written by an attempt after a newer one took over the run",
                    self.where(name),
                )
                superseded.append((name, base))
                continue
            found = self._try_load(name, failures, with_state, vanished, finals)
            if found is not None:
                return found, vanished, failures
        for name, base in superseded:
            log.warning("%s was written by an attempt after a newer one took over from %s; "
                        "using it only because no other checkpoint verifies",
                        self.where(name), base or "a fresh start")
            found = self._try_load(name, failures, with_state, vanished, finals)
            if found is not None:
                return found, vanished, failures
        return None, vanished, failures

    def _marked_final(self, name: str, whole: bool = False) -> bool:
        """Whether checkpoint ``name``'s header says it is final (its first bytes only).

        On a store that cannot read just the first bytes (a wrapper, a subclass with its
        own ``get``), False unless ``whole``: its whole object is not downloaded at every
        resume to tell (review 162). ``f.latest()`` reads it whole anyway (review 164)."""
        if not whole and not reads_heads(self.store):
            return False
        try:
            head = head_of(self.store, self.key(name), _format.SCREEN_BYTES)
        except StoreError:
            return False
        return head is not None and _format.marked_final(head[0])

    def _pass_over_final(self, name: str) -> None:
        self._finals.add(name)
        log.info("run %s: passing over %s, the state the body left at its return after a "
                 "last yield that was not snapshotted (every=n or a duration): no resume "
                 "starts from it", self.where(), name)

    def _try_load(self, name: str, failures: list[tuple[str, _format.InvalidObject]],
                  with_state: bool, vanished: list[str],
                  finals: bool = True) -> Checkpoint | None:
        data = self._get(name) if finals else self._get_resumable(name)
        if data is None:  # deleted by retention of another attempt since the listing
            vanished.append(name)
            return None
        if isinstance(data, _Final):
            # Not verified, nor read whole: a final state is never resumed from, whole or
            # damaged (`resumable verify` checks it)
            self._pass_over_final(name)
            return None
        try:
            decoded = self._decode(name, data, "ckpt")
        except _format.InvalidObject as err:
            log.error("checkpoint %s fails verification: %s; trying an older one",
                      self.where(name), err.reason)
            failures.append((name, err))
            return None
        if failures:
            newer = sum(1 for _, e in failures if e.newer)
            log.warning("resuming %s from %s after skipping %s", self.where(), name, ", ".join(
                part for part in (
                    f"{len(failures) - newer} damaged checkpoint(s)" if newer < len(failures)
                    else "",
                    f"{newer} checkpoint(s) a newer resumable wrote (this version cannot "
                    "read them; it redoes their generations)" if newer else "") if part))
        return self._to_checkpoint(name, decoded, with_state)

    def _to_checkpoint(self, name: str, decoded: _format.Decoded, with_state: bool) -> Checkpoint:
        header = decoded.header
        state: Any = None
        rng = None
        if with_state:
            self._check_serializer(name, header.serializer)
            try:
                rng = _rng_loads(decoded.frames[0])
                with self._aliasing():
                    state = loads_frames(self.serializer, decoded.frames[1:])
            except Exception as err:
                raise SerializationError(
                    f"checkpoint {self.where(name)} passed verification but cannot be "
                    f"deserialized: {type(err).__name__}: {err}. Is the code that defines the "
                    "state's classes importable here, at a compatible version?"
                ) from err
        if header.final:
            self._finals.add(name)
        else:
            self._resumable.add(name)
        return Checkpoint(
            step=header.step,
            state=state,
            created=_created(header.created),
            key=self.key(name),
            epoch=header.epoch,
            rng=rng,
            final=header.final,
        )

    def _check_serializer(self, name: str, recorded: str) -> None:
        if recorded != self.serializer.name:
            raise SerializationError(
                f"{self.where(name)} was written with serializer {recorded!r} but this run uses "
                f"{self.serializer.name!r}; pass serializer={recorded!r} to read it"
            )

    def load_result(self) -> tuple[bool, Any]:
        """(found, value); ``result_epoch`` is then the attempt that wrote it."""
        data = self._get(RESULT)
        if data is None:
            return False, None
        try:
            decoded = self._decode(RESULT, data, "result")
        except _format.InvalidObject as err:
            if err.newer:
                raise _newer(f"the result record {self.where(RESULT)}", err.reason) from None
            cls = CheckpointTamperedError if err.tampered else CheckpointCorruptError
            # (not `resumable rm`, which deletes every checkpoint too: review 138, all the
            # run's generations were computed again)
            raise cls(
                f"the result record {self.where(RESULT)} fails verification ({err.reason}); "
                f"delete that one object ({self._delete_command(RESULT)}) and call again: "
                f"the run's last checkpoint recomputes the result. To run it again from "
                f"the start instead: {self.rm_command()}"
            ) from None
        self._check_serializer(RESULT, decoded.header.serializer)
        self.result_epoch = decoded.header.epoch
        try:
            with self._aliasing():
                return True, loads_frames(self.serializer, decoded.frames)
        except Exception as err:
            raise SerializationError(
                f"the result record {self.where(RESULT)} passed verification but cannot be "
                f"deserialized: {type(err).__name__}: {err}. Is the code that defines its "
                "classes importable here, at a compatible version?"
            ) from err

    def load_rng_start(self, name: str = RNG_START) -> _rng.RngState | None:
        data = self._get(name)
        if data is None:
            return None
        try:
            decoded = self._decode(name, data, "rng")
            if name == RNG_END and decoded.header.epoch != self.result_epoch:
                # Written just before the result, as a separate object: an attempt that
                # wrote it and died (or failed to store its result) left it beside the
                # result of another attempt (review 157). Its RNGs are not this result's.
                log.warning(
                    "RNG record %s was written by attempt %d, the stored result by attempt "
                    "%d (an attempt, say an extension, ended between writing the two): the "
                    "RNGs are left as they are, so what this program draws next differs "
                    "from what it drew after the run; calling with that attempt's arguments "
                    "completes it", self.where(name), decoded.header.epoch, self.result_epoch)
                return None
            return _rng_loads(decoded.frames[0])
        except _format.InvalidObject as err:
            log.error("RNG record %s fails verification (%s); %s", self.where(name),
                      err.reason, "capturing a new one" if name == RNG_START else "ignoring it")
            return None

    def read_record(self, name: str, kind: str, *, strict: bool = False) -> dict[str, Any] | None:
        """A small JSON record (identity, call-<epoch>), verified; None if absent, or bad
        and not ``strict``. With ``strict`` a bad one raises CheckpointCorruptError (or
        CheckpointTamperedError): the identity record, without which a fixed run id
        cannot tell another call's arguments apart (review 106: a damaged one was ignored,
        and a call with other arguments resumed the run)."""
        data = self._get(name)
        if data is None:
            return None
        try:
            record = json.loads(bytes(self._decode(name, data, kind).frames[0]))
            if not isinstance(record, dict):
                raise ValueError(f"a JSON {type(record).__name__}, not an object")
        except ConfigurationError:  # a signed run without its key: refuse, never ignore
            raise
        except (_format.InvalidObject, ValueError, IndexError) as err:
            reason = getattr(err, "reason", err)
            if strict and getattr(err, "newer", False):
                # (read before any checkpoint: the run of a newer version, not damage;
                # deleting it would lose valid work, review 108)
                raise _newer(f"the {kind} record {self.where(name)}", reason) from None
            if strict:
                tampered = getattr(err, "tampered", False)
                cls = CheckpointTamperedError if tampered else CheckpointCorruptError
                raise cls(
                    f"the {kind} record {self.where(name)} fails verification ({reason}), "
                    f"so this call's arguments cannot be checked against the run's. If "
                    f"this call is the run's own, delete that one object "
                    f"({self._delete_command(name)}) and call again "
                    f"(it is written anew from this call); otherwise delete the run with "
                    f"{self.rm_command()}, or give this call "
                    f"another run id") from None
            log.error("record %s is unreadable (%s); ignoring it", self.where(name), reason)
            return None
        return record

    # -- writing ----------------------------------------------------------------------

    def write_record(self, name: str, kind: str, record: dict[str, Any], *,
                     create_only: bool = False) -> bool:
        """Write a JSON record in the verified format; False if ``create_only`` and present."""
        if self.forked_away():
            return False
        payload = self._encode(name, [json.dumps(record, sort_keys=True).encode()], kind, _RAW)
        if create_only:
            return self.store.put_if_absent(self.key(name), payload)
        self.store.put(self.key(name), payload)
        return True

    def _encode(self, name: str, frames: list[Buffer], kind: str, serializer: str,
                step: int = 0, created: float | None = None, *,
                final: bool = False) -> list[Buffer]:
        return _format.encode(
            frames, kind=kind, serializer=serializer, step=step, epoch=self.epoch,
            created=time.time() if created is None else created, name=self.key(name),
            key=self.signing_key, final=final,
        )

    def claim_epoch(self, base: str | None = None, *, pending: bool = False) -> int:
        """Claim a new attempt number with a create-only write; a newer claim fences us.

        ``base`` is the checkpoint name this attempt resumes from (None: a fresh start).
        With ``pending`` the base is not known yet (``claim_and_load`` records it once it
        has loaded); until then the attempt supersedes no checkpoint of the older one.
        Only verified records count, so a stray or forged ``epoch-99999999`` neither
        overflows the 8-digit names nor hides the checkpoints written after it.
        """
        latest = self.latest_epoch()
        if latest == 0 and self.signing_key is not None:
            self._refuse_wrong_key()
        if latest >= MAX_EPOCH:
            name = f"{EPOCH}{latest:08d}"
            raise CheckpointCorruptError(
                f"run {self.run_id!r} in {self.store.url} has an attempt record {name}, the "
                f"last attempt number there is; no attempt can follow it. It is not one this "
                f"library wrote in the usual way: inspect it with `resumable show "
                f"{self.store.url} {self.run_id}` and delete it, or delete the run"
            )
        claimed_after = time.time()  # temp files older than our claim are stale
        for candidate in range(latest + 1, min(latest + 1000, MAX_EPOCH + 1)):
            self.epoch = candidate
            name = f"{EPOCH}{candidate:08d}"
            payload = self._encode(name, [self._epoch_json(None if pending else base or "")],
                                   "epoch", _RAW)
            if self.store.put_if_absent(self.key(name), payload):
                self._own_record = join_payload(payload)
                self._remove_stale_temp(claimed_after)
                return candidate
        raise FencedError(f"could not claim an attempt number for {self.where()}: "
                          "a thousand concurrent attempts?")

    def _refuse_wrong_key(self) -> None:
        """Before a claim, with a key: attempt records exist but none verifies, and the
        newest fails its signature. The key is wrong (or all were forged): raise before
        writing anything, rather than add an attempt the run's key cannot verify."""
        listed = self.epochs()
        if not listed:
            return
        name = f"{EPOCH}{listed[-1]:08d}"
        data = self._get(name)
        if data is None:
            return
        try:
            self._decode(name, data, "epoch")
        except _format.InvalidObject as err:
            if err.tampered:
                raise CheckpointTamperedError(
                    f"run {self.run_id!r} in {self.store.url}: no attempt record verifies "
                    f"with this signing key ({name}: {err.reason}); the key is not the "
                    "run's. Set $RESUMABLE_SIGNING_KEY (or signing_key=) to the key the "
                    f"run was started with; inspect with "
                    f"{command('verify', self.store.url, self.run_id)}. Nothing was written"
                ) from None

    def _epoch_json(self, base: str | None) -> bytes:
        return json.dumps({
            "host": socket.gethostname(), "pid": os.getpid(), "started": time.time(),
            "base": base, "pod": os.environ.get("HOSTNAME", ""),
        }).encode()

    def record_base(self, base: str | None) -> None:
        """Rewrite our own epoch record (claimed ``pending``) with the base we resume from.

        Only this attempt writes its record, so a plain put is safe; readers see the
        pending record or this one, both valid.
        """
        name = f"{EPOCH}{self.epoch:08d}"
        payload = self._encode(name, [self._epoch_json(base or "")], "epoch", _RAW)
        self.store.put(self.key(name), payload)
        self._own_record = join_payload(payload)

    def claim_and_load(self, *, with_state: bool = True) -> Checkpoint | None:
        """Start an attempt: claim first (fencing the older attempt), then load, then
        record the base.

        Loading first let an older attempt, not yet fenced, prune the checkpoints just
        listed, and the new attempt started over with good steps in the store. After the
        claim the older attempt writes at most the save it is in the middle of, and its
        retention stops at its next fence check; ``load_latest`` lists again when
        listed checkpoints vanish, and raises rather than start fresh when checkpoints
        were seen.
        """
        self.claim_epoch(pending=True)  # refuses a signed run without a key, writing nothing
        try:
            latest = self.load_latest(with_state=with_state)
        except StoreError:  # checkpoints vanished while loading: `rm` says so by our record
            self.check_not_deleted()
            raise
        # `rm` during the load (a large checkpoint downloads for a while) deleted our
        # pending record; rewriting it would bring the run back, and another attempt may
        # have claimed the number since. One GET.
        self.check_not_deleted()
        self.record_base(latest.key.rsplit("/", 1)[1] if latest else None)
        return latest

    def _remove_stale_temp(self, older_than: float | None = None) -> None:
        """Temp files of this run's unfinished writes (a killed save) are stale once we
        hold the newest claim: every older attempt is fenced. Only those begun before
        ``older_than`` (the time we started to claim): an attempt that claimed after us
        may already be saving, and its temp file is not ours to remove."""
        remove = getattr(self.store, "remove_temp_files", None)
        if remove is None:
            return
        try:
            n = (remove(self.run_id + "/") if older_than is None
                 else remove(self.run_id + "/", older_than=older_than))
        except (OSError, StoreError) as err:
            log.warning("could not remove leftover temp files of %s: %s", self.where(), err)
            return
        if n:
            log.info("removed %d temp file(s) of unfinished saves in %s", n, self.where())

    def check_fenced(self) -> None:
        """Raise FencedError if a newer attempt has claimed the run (one small GET).

        Claims take the next free number, so one past ours is the one to read; only if a
        record there fails verification (a stray object) are later numbers listed too.
        """
        name = f"{EPOCH}{self.epoch + 1:08d}"
        newer = self._get(name)
        if newer is None:
            return
        try:
            self._decode(name, newer, "epoch")
            found = self.epoch + 1
        except _format.InvalidObject as err:
            # With a signing key, someone without it cannot stop the run this way.
            log.error("ignoring attempt record %s: %s", self.where(name), err.reason)
            later = [e for e in self.epochs() if e > self.epoch + 1]
            found = next((e for e in later if self._epoch_record(e) is not None), 0)
            if not found:
                return
        raise FencedError(
            f"run {self.run_id!r} in {self.store.url} was taken over by a newer attempt "
            f"(epoch {found} > ours, {self.epoch}); this attempt stops without "
            "writing. Another pod is running the same run: check the Job's pods"
        )

    def check_not_deleted(self, written: Sequence[str] = ()) -> None:
        """Raise FencedError if our own attempt record is gone or is not ours (one GET).

        ``resumable rm`` or ``f.reset`` of the run while this attempt runs deletes it; a
        new attempt may since have started over and claimed our number again. Writing on
        would put this attempt's checkpoints into a run that no longer exists, or into
        the new one. What this attempt wrote (``written``, and its checkpoints still
        known) is removed first, so the run stays as the deletion left it.
        """
        if self._own_record is None:  # no claim: nothing to compare (tests, audits)
            return
        name = f"{EPOCH}{self.epoch:08d}"
        found = self.store.get(self.key(name))
        if found is not None and bytes(found) == self._own_record:
            return
        if found is not None:
            try:
                self._decode(name, found, "epoch")
            except _format.InvalidObject as err:
                # Damaged or forged (with a signing key, someone without it cannot stop
                # the run this way): not a record of an attempt, so not a takeover.
                log.error("ignoring attempt record %s: %s", self.where(name), err.reason)
                return
        # Gone: our checkpoints' names are ours alone (a new attempt claims a number
        # before it writes). Written again: the new attempt has our number, so its
        # checkpoints may have our names; only what we just wrote is removed.
        ours = [n for n in self._known
                if found is None and (parse_ckpt_name(n) or (0, 0))[0] == self.epoch]
        for extra in (*ours, *written):
            try:
                self.store.delete(self.key(extra))
            except (OSError, StoreError) as err:
                log.warning("could not remove %s: %s", self.where(extra), err)
        self._known = [n for n in self._known if n not in ours]
        if found is None:
            raise FencedError(
                f"run {self.run_id!r} in {self.store.url} was deleted while this attempt "
                f"(epoch {self.epoch}) ran (`resumable rm` or f.reset()): its attempt "
                f"record {name} is gone. This attempt stops and removed what it wrote "
                "since; run it again to start over"
            )
        raise FencedError(
            f"run {self.run_id!r} in {self.store.url}: this attempt's record {name} was "
            f"written again by another attempt, which owns the run now. Either the run was "
            "deleted (`resumable rm` or f.reset()) and started over, or, on a store without "
            "conditional writes (rclone), another pod claimed the same attempt number at "
            "the same moment: check the Job's pods. This attempt stops and removed what it "
            "had just written"
        )

    def snapshot(
        self, state: Any, step: int, rng: _rng.RngState | None, pool: BufferPool | None = None,
        copy_limit: float = float("inf"), spill: _spill.SpillFile | None = None,
        room_first: bool = True, frames: list[Buffer] | None = None, returned: bool = False,
    ) -> Snapshot:
        """Serialize ``state``; its large buffers are copied only up to ``copy_limit`` bytes.

        Above the limit the snapshot is ``in_place``: its frames are views of the live
        state, valid only until the body resumes, so it must be written before that and
        never kept. With ``spill`` the buffers are written to that file instead of being
        copied (see ``_spill``), when it is free; they are read back at the upload.
        ``room_first``: the pool makes room (takes back the save still waiting) before
        the state is spilled, else after it (see below). ``frames``: what ``serialize``
        made of ``state`` already. ``returned``: ``state`` is the object the body left at
        its return (what an error calls it).
        """
        if frames is None:
            frames = self.serialize(state, step, returned)
        if len(frames) == 1:  # no out-of-band buffers (a small or object-only state)
            return Snapshot(step=step, frames=[b"", frames[0]], rng=rng, created=time.time(),
                            pool=pool)
        size = sum(memoryview(f).nbytes for f in frames[1:])
        in_place = size > copy_limit
        # (nothing of a small state is pooled: no room to make)
        prepare = pool.prepare if pool is not None and not in_place and size >= _POOLED else None
        if prepare is not None and (spill is None or room_first):
            prepare()
        if spill is not None and not in_place:
            # Not room_first: the save still waiting is taken back once this state is in
            # its file, not before. The file's write lets go of the GIL, and an upload
            # thread free to start that save then does (taken back first, a fast loop of
            # a large state left it nothing to start, ever). Only if both files are
            # taken (one read back, one that save's) is it taken back first.
            spilled = spill.spill(step, frames, size, make_room=prepare)
            if prepare is not None:
                prepare()
            if spilled is not None:
                return Snapshot(step=step, frames=[b""], rng=rng, created=time.time(),
                                pool=pool, forked=spilled, size=size)
        if not in_place:
            frames = copy_frames(frames, None if pool is None else pool.take)
        return Snapshot(step=step, frames=[b"", *frames], rng=rng, created=time.time(),
                        pool=None if in_place else pool, in_place=in_place, size=size)

    def _aliasing(self) -> contextlib.AbstractContextManager[None]:
        targets = self.rng_targets
        return _rng.aliasing(targets) if targets else contextlib.nullcontext()

    def serialize(self, state: Any, step: int, returned: bool = False) -> list[Buffer]:
        """The state's pickle stream, then views of its large buffers (see dumps_views)."""
        def what() -> str:
            if returned:
                return (f"the state the body left at its return (after step {step}) of run "
                        f"{self.where()}")
            return f"the state yielded at step {step} of run {self.where()}"

        if not self.rng_targets:  # (the common case, at every yield: no context to enter)
            return dumps_views(self.serializer, state, what)
        with self._aliasing():
            return dumps_views(self.serializer, state, what)

    def snapshot_forked(self, state: Any, step: int, rng: _rng.RngState | None,
                        pool: BufferPool | None, size_hint: int = 0) -> Snapshot:
        """Like ``snapshot``, serialized by a forked child (see ``_forked``). Its size is
        ``size_hint`` (the last known state's) until its frames are read."""
        what = f"the state yielded at step {step} of run {self.where()}"
        serializer = self.serializer
        targets = self.rng_targets

        def dump() -> list[Buffer]:
            with _rng.aliasing(targets):
                return dumps_views(serializer, state, what)

        child = _forked.Forked(dump, what)
        return Snapshot(step=step, frames=[b""], rng=rng, created=time.time(), pool=pool,
                        forked=child, size=size_hint)

    def restore_snapshot(self, snap: Snapshot) -> tuple[Any, _rng.RngState | None]:
        snap.materialize()
        snap.rng_frame()
        # Private, aligned copies of the out-of-band buffers: the snapshot's go back to
        # the pool and get overwritten. The pickle streams are only read.
        views = [memoryview(f).cast("B") for f in snap.frames[:2]]
        views += [aligned_copy(f) for f in snap.frames[2:]]
        with self._aliasing():
            state = loads_frames(self.serializer, views[1:])
        return state, _rng_loads(views[0])

    def write_checkpoint(self, snap: Snapshot) -> str:
        """Fence check, write, then apply retention. Runs on the uploader thread."""
        if self.forked_away():
            return ckpt_name(self.epoch, snap.step)
        self.check_fenced()
        name = ckpt_name(self.epoch, snap.step)
        started = time.perf_counter()
        snap.materialize()
        snap.rng_frame()
        payload = self._encode(name, snap.frames, "ckpt", self.serializer.name, snap.step,
                               snap.created, final=snap.final)
        self._put_checked(name, payload)
        (self._finals if snap.final else self._resumable).add(name)
        log.debug("saved %s (%d bytes, %.3f s)", self.where(name), payload_size(payload),
                  time.perf_counter() - started)
        if name not in self._known:
            self._known.append(name)
            self._known.sort()
        # Checked again before deleting anything: a newer attempt may have taken over
        # during the write and resumed from a checkpoint retention would now remove; or
        # the run was deleted meanwhile, and this checkpoint must not bring it back.
        self.check_fenced()
        self.check_not_deleted((name,))
        self.prune()
        return name

    def _put_checked(self, name: str, payload: Payload, written: Sequence[str] = ()) -> None:
        """``store.put``; a write that fails because the run was deleted under it (`rm`
        removed the temp file being renamed, or the run's folder) raises FencedError, as
        the deletion found after a write does, not the StoreError of a storage fault.
        Only a failure where something vanished costs the GET that tells."""
        try:
            self.store.put(self.key(name), payload)
        except StoreError as err:
            if isinstance(err.__cause__, FileNotFoundError):
                self.check_not_deleted((name, *written))
            raise

    def prune(self) -> None:
        """Delete all but the newest ``keep`` checkpoints of this attempt's epoch and the
        ones before it. A name from a later epoch is left alone, and not counted: a newer
        attempt's (the fence check stops this one) or a stray object named like one
        (which, sorted last, made retention delete every good checkpoint, the one just
        written too)."""
        if self.keep is None or self.forked_away():
            return
        ours = [n for n in self._known
                if (parsed := parse_ckpt_name(n)) is not None and parsed[0] <= self.epoch]
        doomed = ours[: max(0, len(ours) - self.keep)]
        if doomed and not any(n in self._resumable for n in ours[len(doomed):]):
            # No checkpoint left that a resume may start from (final states only: keep=1
            # and a final state just saved, or several extensions that each left one):
            # the newest one known stays too, or an extension would start over. (Known:
            # verified at the resume, or written here; review 160: a final of an older
            # attempt, never read, was taken for one and kept instead)
            for name in reversed(doomed):
                if name in self._resumable:
                    doomed.remove(name)
                    break
        for old in doomed:
            self._known.remove(old)
            # (names of deleted checkpoints: the sets grew by one at every save)
            self._resumable.discard(old)
            self._finals.discard(old)
            self.store.delete(self.key(old))

    def write_rng_start(self, rng: _rng.RngState, name: str = RNG_START) -> None:
        if self.forked_away():
            return
        self.store.put(self.key(name), self._encode(name, [_pickle_rng(rng)], "rng", _RAW))

    def write_result(self, value: Any) -> None:
        if self.forked_away():
            return
        self.check_fenced()
        self.check_not_deleted((RNG_END,))  # written just before, if RNGs are captured
        with self._aliasing():  # (the RNG arguments it holds: as the state's, review 108)
            frames = dumps_frames(self.serializer, value,
                                  f"the return value of run {self.where()}", root="result")
        self._put_checked(RESULT, self._encode(RESULT, frames, "result", self.serializer.name),
                          (RNG_END,))
        self.check_not_deleted((RESULT, RNG_END))

    def _own_keys(self) -> list[str]:
        """The keys of the run's own objects: the names the library writes, directly in
        the run's folder. Not another run's or an islands experiment's in a folder below
        it (a store nested in it, an experiment of the same name), nor someone else's
        file in it (review 37: reset deleted them)."""
        prefix = self.run_id + "/"
        return [k for k in self.store.list(prefix)
                if "/" not in k[len(prefix):] and object_kind(k[len(prefix):])]

    def reset(self) -> int:
        """Delete every object of the run; returns how many."""
        keys = self._own_keys()
        # Attempt records first: a live attempt of the run notices at its next save.
        epochs = [k for k in keys if k.rsplit("/", 1)[1].startswith(EPOCH)]
        for k in epochs:
            self.store.delete(k)
        # An attempt whose last check passed before its record went may have written
        # since the listing (its last checkpoint, the result) and never looks again.
        keys = sorted(set(keys) | set(self._own_keys()))
        for k in sorted((k for k in keys if k not in epochs),
                        key=lambda k: not k.rsplit("/", 1)[1].startswith(EPOCH)):
            self.store.delete(k)
        self._known = []
        self._resumable.clear()
        self._finals.clear()
        self._remove_stale_temp()
        return len(keys)


def _created(timestamp: float) -> datetime:
    """A verified header's time; a writer with a broken clock must not stop a resume."""
    try:
        return datetime.fromtimestamp(timestamp, UTC)
    except (OverflowError, ValueError, OSError):
        return datetime.fromtimestamp(0, UTC)


def _rng_loads(frame: memoryview) -> _rng.RngState | None:
    value = pickle.loads(frame)
    return value if isinstance(value, dict) else None
