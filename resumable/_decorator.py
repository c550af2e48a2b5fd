"""``@checkpointed``: bind, name the run, drive the generator, save, restart, return."""

from __future__ import annotations

import contextlib
import functools
import inspect
import logging
import os
import pickle
import random
import sys
import tempfile
import threading
import time
import weakref
from collections.abc import Callable, Generator, Iterable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Generic, ParamSpec, TypeVar

from . import _forked, _identity, _rng, _settings, _signals, _spill
from ._audit import AuditReport, audit
from ._errors import (
    ConfigurationError,
    FencedError,
    ResumableError,
    SerializationError,
    StoreError,
)
from ._policy import EveryN, EverySeconds, KeepLast, SavePolicy, parse_every
from ._progress import Bar, Progress
from ._run import _POOLED, RNG_END, BufferPool, Checkpoint, Run, Snapshot, parse_ckpt_name
from ._runid import _mod as _runid_mod
from ._runid import _resolve as _runid_resolve
from ._runid import validate_run_id
from ._uploader import Uploader
from .serializers import Serializer, get_serializer
from .stores import Store, default_store_url, normalize_url, open_store

log = logging.getLogger("resumable")

P = ParamSpec("P")
R = TypeVar("R")


def _signing_key(value: bytes | str | None) -> bytes | None:
    if value is None:
        return _settings.SIGNING_KEY.read()
    if isinstance(value, str):
        # UTF-8, whatever the locale; a key of random bytes read from the environment
        # (os.environ["KEY"]: surrogateescape) is those bytes (review 116)
        value = value.encode("utf-8", "surrogateescape")
    if not isinstance(value, bytes) or len(value) < _settings.MIN_KEY_BYTES:
        raise ConfigurationError(
            "signing_key must be bytes or str of at least 16 bytes "
            "(e.g. `openssl rand -hex 32`)"
        )
    return value


_jitter = random.Random()  # private: the global generator belongs to the body


def _restart_pause(failure: int, stop: Callable[[], bool]) -> None:
    """In-process restarts happen at once unless $RESUMABLE_RESTART_BACKOFF (seconds) is set.

    Then the n-th restart of a generation waits backoff * 2**(n-1) (at most 60 s), with
    jitter, e.g. for a body that calls a rate-limited service. ``stop()`` ends the wait
    early (a SIGTERM arrived).
    """
    base = _settings.RESTART_BACKOFF.read()
    if base > 0:
        until = time.monotonic() + min(60.0, base * 2 ** (failure - 1)) * _jitter.uniform(0.5, 1)
        while not stop() and (left := until - time.monotonic()) > 0:
            time.sleep(min(left, 0.1))


class CheckpointedFunction(Generic[P, R]):
    """The decorated function, with ``iter``, ``run_id``, ``latest`` and ``reset``."""

    def __init__(self, func: Callable[..., Generator[Any, None, Any]], options: _Options) -> None:
        functools.update_wrapper(self, func)
        self.__wrapped__ = func
        self._func = func
        self._opts = options
        self._sig = inspect.signature(func)

    def __get__(self, obj: Any, objtype: Any = None) -> Any:
        # Methods: bind like a function would, so self takes part in the run id.
        return self if obj is None else _BoundCheckpointed(self, obj)

    def __reduce__(self) -> str | tuple[Any, ...]:
        # As pickle takes a function (a process pool's task): by name where the name
        # leads back to it. Pickling its __dict__ instead found this wrapper where the
        # function it wraps should be ("not the same object").
        name = self._func.__qualname__
        resolves = _runid_resolve(self.__module__, name) is self
        if resolves and (_runid_mod(self.__module__) != "__main__" or not _cloudpickling()):
            # (a script's too, but for cloudpickle: multiprocessing's workers run the
            # script, and a checkpoint is loaded by the script)
            return name
        # Under another name (g = checkpointed(...)(f)), made in a function, or a
        # script's going where the script does not run (cloudpickle: joblib, Dask): the
        # function it wraps by name (f), or by value where cloudpickle pickles.
        if self._opts.signing_key is not None:
            raise pickle.PicklingError(
                f"cannot pickle @checkpointed function {self.__module__}.{name} by value: "
                "it would carry its signing_key= in clear; give the key through "
                "$RESUMABLE_SIGNING_KEY instead, or define the function in a module the "
                "worker imports (it is then pickled by name)")
        return CheckpointedFunction, (self._func, self._opts)

    def _identity_parts(self) -> tuple[Callable[..., Any], Any]:
        """What identifies it as another run's argument: the function it wraps."""
        return self._func, None

    # -- helpers --------------------------------------------------------------------

    def _bind(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> inspect.BoundArguments:
        state_arg = self._opts.state_arg
        if state_arg in kwargs:
            raise TypeError(
                f"{self._func.__qualname__}() got {state_arg}=...: resumable supplies the state "
                "(None on a fresh start, the saved state on resume)"
            )
        bound = self._sig.bind(*args, **kwargs, **{state_arg: None})
        bound.apply_defaults()
        return bound

    def _identify(
        self, args: tuple[Any, ...], kwargs: dict[str, Any]
    ) -> tuple[_identity.CallIdentity, inspect.BoundArguments]:
        bound = self._bind(args, kwargs)
        arguments = {k: v for k, v in bound.arguments.items() if k != self._opts.state_arg}
        opts = self._opts
        return _identity.identify(self._func, arguments, ignore=opts.ignore,
                                  version=opts.version, run_id=opts.run_id), bound

    def _run(
        self, args: tuple[Any, ...], kwargs: dict[str, Any]
    ) -> tuple[Run, inspect.BoundArguments]:
        ident, bound = self._identify(args, kwargs)
        return self._open(ident), bound

    def _open(self, ident: _identity.CallIdentity) -> Run:
        return Run(open_store(self._opts.store), ident.run_id, self._opts.serializer,
                   _signing_key(self._opts.signing_key), self._opts.keep)

    def _execution(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> _Execution:
        _settings.check_all()  # a bad value fails here, not at a SIGTERM or a retry
        ident, bound = self._identify(args, kwargs)
        return _Execution(self, self._open(ident), bound, ident)

    def run_id(self, *args: P.args, **kwargs: P.kwargs) -> str:
        """The run id this call maps to."""
        return self._run(args, kwargs)[0].run_id

    def latest(self, *args: P.args, **kwargs: P.kwargs) -> Checkpoint | None:
        """The newest valid checkpoint of this call's run, or None."""
        return self._run(args, kwargs)[0].load_latest(finals=True)

    def reset(self, *args: P.args, **kwargs: P.kwargs) -> None:
        """Delete the run's checkpoints and result, so the next call starts fresh."""
        run = self._run(args, kwargs)[0]
        n = run.reset()
        log.info("reset %s: deleted %d object(s)", run.where(), n)

    def iter(self, *args: P.args, **kwargs: P.kwargs) -> RunIterator:
        """Run (or resume) and yield each newly produced state; empty for a completed run.

        The iterator's ``.result`` is the run's return value once it is exhausted (at once
        for a completed run).
        """
        execution = self._execution(args, kwargs)
        found, value = execution.stored_result()
        if found:
            return RunIterator(None, value)
        return RunIterator(execution.states())

    def audit(self, *args: Any, steps: int = 5, fresh_process: bool = False,
              exclude: Iterable[str] = (), **kwargs: Any) -> AuditReport:
        """Check that resuming this call gives the uninterrupted states bit for bit (_audit)."""
        return audit(self, args, kwargs, steps=steps, fresh_process=fresh_process,
                     exclude=exclude)

    def __call__(self, *args: P.args, **kwargs: P.kwargs) -> R:
        # the consumer is this loop, library code: shielded from Ctrl-C as the rest is
        states = self._execution(args, kwargs).states(own_consumer=True)
        while True:
            try:
                next(states)
            except StopIteration as stop:
                return stop.value  # type: ignore[no-any-return]


_PENDING: Any = object()
_get_ident = threading.get_ident


class RunIterator(Iterator[Any]):
    """What ``f.iter(...)`` returns: the new states, then ``.result``.

    A thin wrapper around the run's generator: ``next``, ``send``, ``throw`` and
    ``close`` pass through, and the ``StopIteration`` at the end carries the return value
    as a generator's does.
    """

    def __init__(self, gen: Generator[Any, Any, Any] | None, result: Any = _PENDING) -> None:
        self._gen = gen
        self._result = result

    def __iter__(self) -> RunIterator:
        return self

    def _step(self, call: Callable[[], Any]) -> Any:
        if self._gen is None:
            raise StopIteration(None if self._result is _PENDING else self._result)
        try:
            return call()
        except StopIteration as stop:
            self._result, self._gen = stop.value, None
            raise StopIteration(stop.value) from None

    def __next__(self) -> Any:
        gen = self._gen
        return self._step(lambda: next(gen))  # type: ignore[arg-type]

    def send(self, value: Any) -> Any:
        gen = self._gen
        return self._step(lambda: gen.send(value))  # type: ignore[union-attr]

    def throw(self, error: BaseException) -> Any:
        gen = self._gen
        return self._step(lambda: gen.throw(error))  # type: ignore[union-attr]

    def close(self) -> None:
        if self._gen is not None:
            self._gen.close()

    @property
    def done(self) -> bool:
        """True once the run has finished (exhausted, or complete when ``iter`` was called)."""
        return self._result is not _PENDING

    @property
    def result(self) -> Any:
        """The run's return value; AttributeError until the iterator is exhausted."""
        if self._result is _PENDING:
            raise AttributeError(
                "the run has not finished yet: .result is set once the iterator is "
                "exhausted (iterate to the end, e.g. `for state in it: ...`)")
        return self._result


def _cloudpickling() -> bool:
    """Called from ``__reduce__``: the pickler is cloudpickle's (joblib's, Dask's), not
    plain pickle nor one of resumable's own snapshots."""
    try:
        frame = sys._getframe(2)  # (__reduce__, then the frame that called the C dump)
    except ValueError:  # pickled from C with no Python caller (a thread's target)
        return False
    pickler = frame.f_locals.get("self")
    if not isinstance(pickler, pickle.Pickler) or not any(
            "cloudpickle" in klass.__module__ for klass in type(pickler).__mro__):
        return False
    outer = frame.f_back  # cloudpickle.dumps: who called it
    while outer is not None and "cloudpickle" in outer.f_globals.get("__name__", ""):
        outer = outer.f_back
    return outer is None or not outer.f_globals.get("__name__", "").startswith("resumable.")


class _BoundCheckpointed:
    """A decorated method bound to its instance, with the same helpers."""

    def __init__(self, fn: CheckpointedFunction[Any, Any], obj: Any) -> None:
        functools.update_wrapper(self, fn._func)
        self._fn, self._obj = fn, obj

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self._fn(self._obj, *args, **kwargs)

    def __reduce__(self) -> tuple[Any, ...]:
        # As pickle takes a method: by the name under which its class holds it
        obj = self._obj
        for klass in (obj if isinstance(obj, type) else type(obj)).__mro__:
            for name, value in vars(klass).items():
                if value is self._fn or getattr(value, "__func__", None) is self._fn:
                    return getattr, (obj, name)  # (a classmethod's: obj is the class)
        return _BoundCheckpointed, (self._fn, self._obj)

    def _identity_parts(self) -> tuple[Callable[..., Any], Any]:
        return self._fn._func, self._obj

    def iter(self, *args: Any, **kwargs: Any) -> RunIterator:
        return self._fn.iter(self._obj, *args, **kwargs)

    def run_id(self, *args: Any, **kwargs: Any) -> str:
        return self._fn.run_id(self._obj, *args, **kwargs)

    def latest(self, *args: Any, **kwargs: Any) -> Checkpoint | None:
        return self._fn.latest(self._obj, *args, **kwargs)

    def reset(self, *args: Any, **kwargs: Any) -> None:
        self._fn.reset(self._obj, *args, **kwargs)

    def audit(self, *args: Any, **kwargs: Any) -> AuditReport:
        return self._fn.audit(self._obj, *args, **kwargs)


@dataclass(frozen=True)
class _Options:
    every: SavePolicy
    store: str | os.PathLike[str] | Store | None
    serializer: Serializer
    keep: int | None
    run_id: str | None
    state_arg: str
    restarts: int
    restart_on: tuple[type[BaseException], ...]
    capture_rng: bool
    progress: bool | int | str | Bar | Callable[[Any], Any]
    signing_key: bytes | str | None
    version: str | int | None = None
    ignore: tuple[str, ...] = ()


_BIG = 1 << 20  # states whose copies are worth not doubling
_EVERY_YIELD = EveryN(1)


class _RoomMakingPool(BufferPool):
    """A buffer pool that, before the first buffer of a snapshot is taken (the state has
    serialized by then), takes back a save still waiting, so that its buffers are reused
    instead of a third copy of the state being made."""

    make_room: Callable[[], bool] | None = None
    loop: int | None = None  # the thread that set make_room: only its take runs it

    def prepare(self) -> None:
        # The upload thread takes buffers too (a spilled or forked state read back): run
        # there, make_room would drop the save still waiting while the loop's new state
        # is still serializing, and a state that then fails to pickle loses it.
        if self.make_room is None or threading.get_ident() != self.loop:
            return
        make_room, self.make_room = self.make_room, None
        make_room()

    def take(self, n: int) -> bytearray:
        self.prepare()
        return super().take(n)


class _Execution:
    """One call: resume or start, drive the body, save, restart, finish.

    The loop reads: start -> (run the body to its next yield, checkpoint it if due,
    hand it to the consumer) -> finish. Snapshots are taken only at due yields (every
    yield with ``every="generation"``), at a SIGTERM's next yield and at the end.
    """

    def __init__(self, fn: CheckpointedFunction[Any, Any], run: Run,
                 bound: inspect.BoundArguments,
                 ident: _identity.CallIdentity | None = None) -> None:
        self.fn = fn
        self.opts = fn._opts
        self.run = run
        self.bound = bound
        arguments = {k: v for k, v in bound.arguments.items() if k != fn._opts.state_arg}
        self.ident = ident or _identity.identify(  # a run opened by the caller: its id
            fn._func, arguments, ignore=fn._opts.ignore, version=fn._opts.version,
            run_id=run.run_id)
        # RNG objects among the arguments (self.rng, ...), restored in place: see _rng.
        self.rng_objects = _rng.find(arguments) if fn._opts.capture_rng else []
        run.rng_targets = self.rng_objects
        self.thread = threading.current_thread()
        self.suspended = False  # at a yield: the consumer runs, not the body
        # the run whose body this run last handed a state to (see _signals.consumer_body)
        self.within: _signals.Active | None = None
        self.body_thread = self.thread  # the thread that resumed the body last
        self.leaving: BaseException | None = None  # what the run ends with, if it raises
        self.closing = False  # its iterator was closed (GeneratorExit at a yield)
        # From the hand-over to the body's resumption: set with suspended, cleared only
        # once resuming completed (a SIGTERM raised at the resumption clears suspended)
        self.handed = False
        self.sigint_outer: bool | None = None  # set by _drive (see _signals.sigint_begin)
        self.sigint_thread = 0  # the thread that called sigint_begin
        self.own_consumer = False  # states() consumed by __call__ (no user code between)
        self.terminate = False  # SIGTERM: save the next yield's state, then stop
        # multiprocessing workers alive at the last yield and at the SIGTERM: a yield after
        # a signal ended one of them is not saved (see _signals.workers)
        self.workers: tuple[Any, ...] = ()
        self.workers_at_term: tuple[Any, ...] = ()
        self.interrupted = False  # no yield came in time: nothing the body yields is saved
        self.progress: Progress | None = None
        self.uploader = self._new_uploader()
        # $RESUMABLE_SYNC=1: every save completes before the body goes on (no coalescing).
        self.synchronous = _settings.SYNC.read()
        self.last_snap: Snapshot | None = None  # the newest snapshot (due yields only)
        self.pool = _RoomMakingPool()
        self.submitted_step = -1
        self.last_job: Callable[[], None] | None = None  # the last save handed in
        self.written_step = 0  # the newest step a save wrote (the SIGTERM log line)
        # States whose buffers exceed this are saved in place (no copy; the loop waits).
        self.copy_limit = _settings.SNAPSHOT_LIMIT.read()
        self.copies = _settings.SNAPSHOT_COPIES.read()
        # A newer large state that comes while one uploads waits in a file (see _spill).
        spill_dir = _settings.SPILL_DIR.read()
        self.spill = _spill.SpillFile(tempfile.gettempdir() if spill_dir == "" else spill_dir,
                                      run.where())
        # $RESUMABLE_SNAPSHOT_FORK: due yields fork a child that serializes the state. The
        # first snapshot of a call is taken here (a state that cannot be serialized fails
        # at its yield, as without the setting), and so are the final ones.
        self.fork = _settings.SNAPSHOT_FORK.read()
        if self.fork and not _forked.available():
            raise ConfigurationError(
                f"run {run.where()}: $RESUMABLE_SNAPSHOT_FORK=1 needs os.fork, which "
                f"{sys.platform} does not have; unset it")
        self.fork_checked = False
        self.fork_timeout = _settings.FORK_TIMEOUT.read() if self.fork else 0.0
        self.pickle_seconds = 0.0  # what the last snapshot on the loop's thread took
        self.fork_shared_warned = False
        self.forked: list[Snapshot] = []  # forked snapshots, until their frames are read
        self.state_size = 0  # bytes in the out-of-band buffers of the last known snapshot
        self.in_place_saved = False
        self.durable_step = 0  # resumed from or saved in place (last_snap, if set, is newer)
        self.timed = isinstance(self.opts.every, EverySeconds)
        self.every_yield = self.opts.every == _EVERY_YIELD
        self.last_save = time.monotonic() if self.timed else 0.0
        self.step = 0
        self.held: Any = None  # the state the consumer holds (the last one yielded)
        self.outer: weakref.ref[Generator[Any, None, Any]] | None = None
        self.checked_result: tuple[bool, Any] | None = None
        self.identity_unchecked = False  # the run had no identity record (stored_result)
        self.stopping = False  # after SIGTERM: the body is done, the state is being saved
        self.skipped_step = -1  # the last due yield not snapshotted: a large save uploaded
        self.resumable_step = -1  # once a final state is saved: the newest step resumable
        self.at_yield = False  # the body yielded; its state is being snapshotted
        self.loading = False  # reading its result or checkpoint, before its body starts

    def where(self) -> str:
        return self.run.where()

    # -- signals (called by _signals; on_sigterm runs inside the handler: flags only) ------

    def on_sigterm(self) -> None:
        self.terminate = True
        if not self.workers_at_term:
            self.workers_at_term = _signals.workers()
        if self.at_yield:  # the body yielded before the SIGTERM: only saving is left
            self.stopping = True  # (the snapshot may wait for a running save: one copy)

    def interrupt(self) -> None:
        self.interrupted = True

    def wait_for_saves(self) -> None:
        # Waits only: a failure is the run's to raise (its own flush ends it with that
        # error's exit status); taken here, the run would exit 143 as if saved.
        self.uploader.wait_idle()

    @property
    def saving(self) -> bool:
        return self.uploader.pending

    def _finalized(self) -> bool:
        """Its iterator is being closed by its finalizer (a `break`, `del`, the collector):
        Python clears the weak reference first, and drops what the close raises."""
        return self.outer is not None and self.outer() is None

    def close_at_exit(self) -> None:
        outer = self.outer() if self.outer is not None else None
        if outer is not None:
            outer.close()  # GeneratorExit at the yield: saves the state the consumer holds

    # -- saving ---------------------------------------------------------------------

    def _checkpoint(self, state: Any, step: int, *, force: bool = False,
                    returned: bool = False) -> None:
        """Snapshot ``state`` (the one yielded at ``step``) if due, and hand it to the uploader.

        The previous snapshot is let go of first, so its buffers can be reused. ``returned``:
        ``state`` is the object the body left at its return, saved as a final state (see
        Checkpoint.final).
        """
        if not (force or self.terminate or self.every_yield or self.opts.every.due(
                step, time.monotonic() - self.last_save if self.timed else 0.0)):
            return
        if self._snapshotted(step):
            if force or self.terminate:  # the last snapshot is this state: older go
                self._end_children(keep=self.last_snap)
            return
        previous = self.last_snap
        known_size = self.state_size
        if previous is not None and previous.size > known_size:
            known_size = previous.size
        if known_size >= _POOLED and not (force or self.terminate):
            # Before anything takes that save back for this state (make_room, a fork),
            # and before the look at whether one runs: with every=n a due yield while
            # the previous state uploads is skipped, not copied beside it.
            self.uploader.let_start()
        if (previous is not None and previous.size >= _BIG and self.uploader.busy
                and not (force or self.terminate) and not self.every_yield):
            # The previous state is still being uploaded: a copy of this one would be a
            # second copy of a large state. Skip it; the schedule's next due yield (or,
            # for a duration, the next yield) is snapshotted instead.
            self.uploader.skipped += 1
            self.skipped_step = step
            return
        if force or self.terminate:
            # This state is saved now, on the loop's thread: children still pickling
            # older ones are ended (one that never finishes, say a lock held at the fork
            # by another thread, would hold up this save and the exit).
            self._end_children()
            if previous is not None and previous.size >= _BIG:
                # The run ends after this save and waits for every save anyway: waiting
                # first lets the new snapshot reuse the previous one's buffers.
                self.uploader.wait_idle()
        one_copy = self.copies == 1 and previous is not None and previous.size >= _BIG
        rng = _rng.capture(self.rng_objects) if self.opts.capture_rng else None
        frames = None
        if previous is not None and previous.step == self.submitted_step:
            if (known_size < _POOLED and previous.size == 0 and previous.forked is None
                    and not (force or self.terminate or self.synchronous or self.fork)):
                # A state pickled whole (no large buffers: a small state, or objects
                # such as a DEAP population) while the previous one's save still waits:
                # that snapshot is refilled with this state, if the save has not started
                # meanwhile. No new snapshot, save or drop: they were most of what a
                # yield of a small state cost (every="generation" still saves the newest
                # state whenever the upload thread is free).
                try:
                    frames = self.run.serialize(state, step)
                except BaseException as err:
                    self._flush_after_error(err)  # (the previous state is still saved)
                    raise
                if len(frames) == 1 and self.uploader.replace_waiting(
                        self.last_job, previous.refill, step, frames[0], rng, time.time()):
                    self.submitted_step = step
                    self.state_size = 0
                    self.fork_checked = True
                    if self.timed:
                        self.last_save = time.monotonic()
                    return
            # Handed over already: the uploader holds it as long as it needs it.
            previous.release()
            self.last_snap = previous = None
        if (self.fork and self.fork_checked and not (force or self.terminate)
                and self._fork_allowed(known_size)):
            # A save still waiting is taken back first (its child ended): at most two
            # children, the one uploading and this one.
            self.uploader.drop_waiting()
            try:
                snap = self.run.snapshot_forked(state, step, rng, self.pool, known_size)
                # Once read, its size is the next yield's hint: a state grown past
                # $RESUMABLE_SNAPSHOT_LIMIT is saved in place from then on, not forked.
                # (weakly: the snapshot is this execution's, and a cycle between the two
                # kept the last one, a copy of the state, until the cycle collector ran)
                snap.on_size = _weakly(self._sized)
                snap.deadline = time.monotonic() + self.fork_timeout + 20 * self.pickle_seconds
            except OSError as err:  # no process or memory left for a child (EAGAIN)
                log.warning("run %s: could not fork a child to snapshot step %d (%s); "
                            "snapshots are taken on the loop's thread from now on",
                            self.run.where(), step, err)
                self.fork = False
            else:
                self.forked = [x for x in self.forked if x.forked is not None] + [snap]
                if previous is not None:
                    previous.release()
                self.last_snap = snap
                self._save(snap)
                return

        def make_room() -> bool:
            # Once the state has serialized: a save still waiting is taken back (this
            # newer one replaces it). With one copy allowed, a save still running is
            # waited for (every="generation" keeps the newest state for an exception,
            # and the one uploading too); its buffers are then reused, not doubled.
            dropped = self.uploader.drop_waiting()
            if one_copy:
                self.uploader.wait_not_busy()
            return dropped

        # every="generation" keeps the newest state while the one before it uploads: in a
        # file rather than as a second copy in memory (the uploading save holds the first).
        # Pending, not just busy: a save still waiting may be taken up by the upload
        # thread between this look and make_room, which then has nothing to take back,
        # and a copy made in memory would be a second one beside the uploading save's.
        # While the upload thread rests (paced) with a save waiting, that save is held
        # back and replaced in its own buffers (make_room): one copy, in memory, which
        # costs the loop half of what a spill does and the upload no read back.
        two_copies = (known_size >= _BIG and self.copies == 2 and self.every_yield
                      and not (force or self.terminate or self.synchronous))
        held = two_copies and self.uploader.hold_resting()
        spill = self.spill if (two_copies and not held and self.uploader.pending) else None
        if known_size >= _POOLED:  # a save waiting holds buffers worth taking back first
            self.pool.make_room, self.pool.loop = make_room, threading.get_ident()
        started = time.perf_counter()
        try:
            # A save runs: the one waiting cannot start before this state is spilled,
            # and taken back first, its file is free for this state (one file, not two).
            snap = self.run.snapshot(state, step, rng, self.pool, self.copy_limit, spill,
                                     room_first=spill is None or self.uploader.busy,
                                     frames=frames, returned=returned)
        except BaseException as err:
            # A state that cannot be serialized: the last good state is still saved.
            self._flush_after_error(err)
            raise
        finally:
            self.pool.make_room = None
            if held:
                self.uploader.release_hold()
        snap.final = returned
        self.fork_checked = True
        self.pickle_seconds = time.perf_counter() - started
        self.state_size = snap.size
        if previous is not None:
            previous.release()
        if snap.in_place:
            self.last_snap = None
            self._save_in_place(snap)
        else:
            self.last_snap = snap
            self._save(snap)

    def _snapshotted(self, step: int) -> bool:
        """Whether the state yielded at ``step`` is saved or held in a snapshot (a
        submitted one is the last snapshot until the next, or saved in place: durable)."""
        return step == self.durable_step or (
            self.last_snap is not None and self.last_snap.step == step)

    def _save_final(self, state: Any, step: int, start_step: int) -> str:
        """At the body's return, the last yield not snapshotted (every=n, a duration):
        save ``state``, the object the body left, as a final state; what to log once it
        is durable.

        The body ran on after that yield (a sort, a draw), so a resume (an extension; a
        crash before the result is written) that started from it would differ from an
        uninterrupted run (review 115): ``f.latest()`` gives it, a resume passes over it.
        The saves of yielded states go first: it must not replace one still waiting, nor
        end a child still pickling one.
        """
        self._flush_last()
        newest = max(self._saved_step(), start_step)  # (saved at a yield: resumable)
        self.resumable_step = newest
        why = ("was due, but not snapshotted while the previous save still uploaded (a "
               "large state is not copied beside it)" if self.skipped_step == step
               else "was not due")
        where = self.run.where()
        try:
            self._checkpoint(state, step, force=True, returned=True)
        except SerializationError as err:
            # (only the object at the return: a yielded state that did not pickle raised
            # at its yield. The body is done; failing here would fail every call again,
            # with the result unwritten)
            log.warning("run %s: the state the body left at its return cannot be saved "
                        "(%s); its result is stored all the same", where, err)
            return ""
        return (f"run {where}: step {step}, its last, {why}: the state the body left at "
                f"its return is saved as a final checkpoint, which no resume starts from "
                f"(the body ran on after that yield); " + (
                    f"the newest checkpoint a resume starts from is of step {newest}"
                    if newest else "no checkpoint a resume starts from is stored"))

    def _end_children(self, keep: Snapshot | None = None) -> None:
        """End the children of forked snapshots not read yet, but ``keep``'s (their saves
        are skipped: a newer state is saved)."""
        children, self.forked = self.forked, [keep] if keep is not None else []
        for snap in children:
            child = snap.forked
            if child is not None and snap is not keep:
                child.cancel()

    def _give_up_children(self) -> None:
        """A Ctrl-C stops the call at once: the saves whose children still pickle are
        given up, each said."""
        for snap in self.forked:
            child = snap.forked
            if child is not None:
                # (one that has pickled and sends may have sent all: that save goes on)
                sending = isinstance(child, _forked.Forked) and child.sending
                log.warning("run %s: Ctrl-C: the save of step %d, %s, is given up%s",
                            self.run.where(), snap.step,
                            "whose child process was sending it" if sending else
                            "whose child process was still pickling it",
                            " unless it had all been sent" if sending else "")
        self._end_children()

    def _sized(self, size: int) -> None:
        self.state_size = size

    def _fork_allowed(self, size: int) -> bool:
        """Whether this due yield may be snapshotted by a forked child."""
        if size > self.copy_limit:
            return False  # saved in place: no copy at all, where a child adds one
        shared = _forked.shared_writable_mappings()
        if shared:
            if not self.fork_shared_warned:
                self.fork_shared_warned = True
                log.warning(
                    "run %s: the process maps shared memory writable (%s); a forked child "
                    "would see it as the loop changes it, not as it was at the yield, so "
                    "snapshots are taken on the loop's thread while it is mapped",
                    self.run.where(), ", ".join(sorted(set(shared))[:3]))
            return False
        return True

    def _save(self, snap: Snapshot, *, final: bool = False) -> None:
        progress = self.progress

        def job() -> None:
            try:
                try:
                    if isinstance(snap.forked, _spill.Spilled):
                        # Read back first: the file is free for the next yield's state, and
                        # the buffers come from the save that just ended, not a new copy.
                        snap.materialize()
                    self.run.write_checkpoint(snap)
                except _forked.Stuck as err:
                    # Each lost state is said (review 156: a second child killed while
                    # the first's loss turned forking off was lost without a word)
                    after = ""
                    if self.fork:  # the first: forking ends
                        self.fork = False
                        after = ", and snapshots are taken on the loop's thread for the " \
                            "rest of this call (%s)" % (
                                err.hint if isinstance(err, _forked.Killed) else
                                "does the state's pickling take a lock that another "
                                "thread holds? $RESUMABLE_FORK_TIMEOUT sets the time")
                    log.error("run %s: %s; this state is not saved%s", self.run.where(), err,
                              after)
                    return
                except _forked.Superseded:
                    return  # its child was ended: a newer state is saved after it
                self.written_step = max(self.written_step, snap.step)
                if progress is not None:
                    progress.saved()
            finally:
                snap.release()

        snap.hold()
        try:
            self.uploader.submit(job, on_drop=snap.release, raise_pending=not final)
        except BaseException as err:
            snap.release()  # an earlier save failed; this one was never handed over
            if not final:
                self._flush_after_error(err)
            raise
        self.submitted_step = snap.step
        self.last_job = job  # (the save a later small state may refill, see _checkpoint)
        if self.timed:
            self.last_save = time.monotonic()
        if self.synchronous and not final:
            try:
                self._wait_for_saves()
            except BaseException as err:
                self._flush_after_error(err)  # the failed state itself is tried once more
                raise

    def _save_in_place(self, snap: Snapshot) -> None:
        """Save a state too large to copy (see Run.snapshot) before the body resumes.

        Its frames alias the live state, so the save completes here and nothing keeps
        them: a restart or a SIGTERM falls back to the last save.
        """
        if not self.in_place_saved:
            log.info(
                "run %s: the state (%.0f MiB) is larger than $RESUMABLE_SNAPSHOT_LIMIT "
                "(%.0f MiB), so it is saved in place, without a copy: the loop waits for "
                "each save", self.run.where(), snap.size / 2**20, self.copy_limit / 2**20)
            self.in_place_saved = True
        try:
            self._save(snap)
        finally:
            snap.release()
        self._wait_for_saves()
        self.durable_step = snap.step

    def _saved_text(self) -> str:
        """The newest step saved, for the SIGTERM log lines: a final state's says so."""
        step = self._saved_step()
        if 0 <= self.resumable_step < step:
            # (saved once the body returned: its result is stored too, review 162)
            return (f"{step} (its final state, and its result; an extension starts from "
                    + (f"step {self.resumable_step})" if self.resumable_step else
                       "the beginning)"))
        return str(step)

    def _saved_step(self) -> int:
        """The newest step saved (for the SIGTERM log line), after the last flush.

        Not the last snapshot's: it may have been released (and its step with it)."""
        return max(self.written_step, self.durable_step)

    def _wait_for_saves(self) -> None:
        try:
            self.uploader.flush()
        except BaseException:
            self.submitted_step = -1  # the save failed: a later flush tries it again
            raise

    def _flush_last(self) -> None:
        """Make the last snapshot durable (end, exception, SIGTERM).

        It is saved even when an earlier save failed; only its own failure is raised.
        """
        if self.last_snap is not None and self.last_snap.step != self.submitted_step:
            self._save(self.last_snap, final=True)
        self._wait_for_saves()

    def _flush_after_error(self, err: BaseException) -> None:
        """Save the last snapshot after the body raised; a failure to save is noted.

        A fenced attempt, or an interrupt during the save, ends the run at once.
        """
        try:
            self._flush_last()
        except BaseException as flush_err:
            if isinstance(flush_err, FencedError) or not isinstance(flush_err, Exception):
                raise flush_err from err
            log.error("run %s: saving the last state after %s failed: %s", self.run.where(),
                      type(err).__name__, flush_err)
            err.add_note(f"resumable: saving the last snapshot also failed: {flush_err}")

    # -- the loop -------------------------------------------------------------------

    def _body(self, state: Any) -> Generator[Any, None, Any]:
        self.bound.arguments[self.opts.state_arg] = state
        return self.fn._func(*self.bound.args, **self.bound.kwargs)

    def _capture_rng(self) -> _rng.RngState | None:
        return _rng.capture(self.rng_objects) if self.opts.capture_rng else None

    def _restore_rng(self, saved: _rng.RngState | None) -> bool:
        if self.opts.capture_rng and saved is not None:
            _rng.restore(saved, self.rng_objects)
            return True
        return False

    def _start(self) -> tuple[Any, int, Checkpoint | None]:
        """Find where to begin: (state, step, checkpoint resumed from)."""
        run = self.run
        latest = run.claim_and_load()  # claim first: the older attempt stops pruning
        _identity.record_attempt(run, self.ident, latest)
        if latest is not None:
            _identity.warn_if_code_changed(run, self.ident, latest)
            self._restore_rng(latest.rng)
            return latest.state, latest.step, latest
        if self.opts.capture_rng:
            if self._restore_rng(run.load_rng_start()):
                log.info("run %s: no checkpoint yet; restored the RNG recorded at its fresh "
                         "start, so it replays identically", run.where())
            else:
                run.write_rng_start(_rng.capture(self.rng_objects))
        return None, 0, None

    def _restart_point(self, resumed: Checkpoint | None) -> tuple[Any, int]:
        """Where an in-process restart begins: the last snapshot, else the store, else the start."""
        snap = self.last_snap
        if snap is not None:
            try:
                state, rng = self.run.restore_snapshot(snap)
            except (_forked.Stuck, _forked.Superseded, StoreError) as err:
                if snap.failed is None:  # (its frames are here: unpickling them failed)
                    raise
                # Its frames never came: a forked child that did not finish, a spill file
                # that could not be read back (review 151: the restart died of that error).
                # The store holds what was saved before it. (A state that cannot be
                # pickled is not lost: its SerializationError ends the call, review 154.)
                log.warning("run %s: the snapshot of step %d was lost (%s: %s); the restart "
                            "begins from the newest checkpoint in the store instead",
                            self.run.where(), snap.step, type(err).__name__, err)
                self.last_snap = None
                snap.release()  # (the loop's hold; its frames never came, nothing to give back)
            else:
                self._restore_rng(rng)
                return state, snap.step
        # The body may have changed the loaded state in place; a state saved in place, or
        # a due state whose snapshot was let go of once durable, is kept only in the store.
        if resumed is not None or self.submitted_step >= 0 or self.in_place_saved or \
                snap is not None:
            again = self.run.load_latest()
            if again is not None:
                self._restore_rng(again.rng)
                return again.state, again.step
        if self.opts.capture_rng:
            self._restore_rng(self.run.load_rng_start())
        return None, 0

    def _progress(self, initial: int) -> Progress:
        option = self.opts.progress
        spec: bool | int | str = True
        total = None
        postfix = None
        if isinstance(option, Bar):
            spec, postfix = (True if option.total is None else option.total), option.postfix
        elif callable(option):
            postfix = option
        else:
            spec = option
        if isinstance(spec, str):
            value = self.bound.arguments.get(spec)
            total = value if isinstance(value, int) else None
        elif not isinstance(spec, bool) and isinstance(spec, int):
            total = spec
        return Progress(bool(spec), total=total, initial=initial, desc=self.fn._func.__name__,
                        postfix=postfix)

    def states(self, own_consumer: bool = False) -> Generator[Any, None, Any]:
        self.own_consumer = own_consumer  # __call__'s loop, not the application's
        gen = self._drive()
        self.outer = weakref.ref(gen)
        return gen

    def stored_result(self) -> tuple[bool, Any]:
        """(True, result) for a completed run whose result applies to this call (checked
        once per execution: the call's arguments first, then the result record)."""
        if self.checked_result is None:
            run = self.run
            identity = _identity.check_call(run, self.ident, self.opts.ignore)
            self.identity_unchecked = identity is None  # (none was there: this call's now)
            found, value = run.load_result()
            self.checked_result = (
                found and _identity.result_applies(run, self.ident, identity), value)
            if self.checked_result[0]:
                log.info("run %s is complete; returning its stored result without running it",
                         run.where())
                self._warn_identity_unchecked("a stored result", "the call that stored it")
                _identity.warn_if_result_changed(run, self.ident)
                # The RNGs as the run left them, so that what the caller does next (a
                # second phase, say) draws what it drew after the uninterrupted run.
                self._restore_rng(run.load_rng_start(RNG_END) if self.opts.capture_rng
                                  else None)
        return self.checked_result

    def _warn_identity_unchecked(self, had: str, against: str) -> None:
        """Under a fixed run id, a run with work in it but no identity record: deleted (as
        a damaged one's error advises) or lost. This call's arguments are the run's
        identity from now on (review 138: a call with other arguments took the run over
        without a word)."""
        if self.identity_unchecked and self.ident.fixed:
            log.warning(
                "run %s had %s but no identity record, so this call's arguments are "
                "unchecked against %s; they are recorded as the run's identity now. If the "
                "run was started by a call with other arguments, delete it (%s) or give "
                "this call another run id", self.run.where(), had, against,
                self.run.rm_command())

    def _drive(self) -> Generator[Any, None, Any]:
        # In the main thread a Ctrl-C is held while the call is in its own code, and
        # delivered where nothing is half done (see _signals: "Ctrl-C while a run keeps
        # its books").
        self.sigint_outer = _signals.sigint_begin()  # (updated at each resume, see below)
        self.sigint_thread = _get_ident()
        try:
            result = yield from self._steps()
        except BaseException as err:
            # A Ctrl-C held during the cleanup is raised over the call's own exception (a
            # caller that handles a body's error, or an iterator's close(), must not go
            # on as if it never came), not over one that stops the program already.
            _signals.sigint_end(self.sigint_outer, deliver=not isinstance(
                err, (KeyboardInterrupt, SystemExit)))
            raise
        _signals.sigint_end(self.sigint_outer, deliver=True)  # a held Ctrl-C is raised here
        return result

    def _resume(self, gen: Generator[Any, None, Any]) -> Any:
        """Run the body to its next yield (unshielded: a Ctrl-C there is raised at once);
        a Ctrl-C held while the call did its own work is thrown in at its yield."""
        if self.sigint_outer is None or _get_ident() != self.sigint_thread:
            return next(gen)  # (an f.iter run the main thread began, advanced elsewhere)
        held = _signals._sigint_held and _signals.take_sigint()
        if held:  # (logged while still shielded)
            log.warning("run %s: %s came while it saved step %d; raised in the body at its "
                        "yield", self.run.where(), _signals.held_what(), self.step)
        err: BaseException | None
        try:
            try:
                _signals.unshield()  # (the handler the body had lent back: Python's or its own)
            except BaseException as came:  # (a handler's, run by the swap as it began)
                if not _signals.from_sigint(came):
                    raise
                if held:  # (not delivered: it waits for the next yield, review 56)
                    _signals.hold_again()
                err = came
            else:
                try:
                    # (one that came as the handler changed hands is held too: delivered now)
                    held = held or (_signals._sigint_held and _signals.take_sigint())
                    err = _signals.deliver_held() if held else None  # (the body's handler's)
                except BaseException as came:  # (the body's handler's, as the body was to run)
                    if not _signals.from_sigint(came):
                        raise
                    if held:  # (another handler's, before the Ctrl-C was delivered: review
                        _signals.hold_again()  # 57; it waits for the next yield)
                    err = came
            return gen.throw(err) if err is not None else next(gen)
        finally:
            try:
                second = _signals.shield()
            except BaseException as came:  # (raised by the body's handler as shield() began)
                second = _signals.shield(came)
            if second is not None:
                raise second  # a second Ctrl-C: at once

    def _new_uploader(self) -> Uploader:
        return Uploader(f"resumable-upload-{self.run.run_id}", duty=_settings.UPLOAD_DUTY.read())

    def _steps(self) -> Generator[Any, None, Any]:
        run = self.run
        if run.forked_away():
            # An iterator made in another process and first driven in this one (f.iter()
            # handed to a fork Process): nothing ran there, so this process is the
            # attempt. Its uploader, made there, was abandoned at the fork.
            run.adopt_process()
            self.uploader = self._new_uploader()
        # Started after the SIGTERM (a thread pool's queued task): a generation of its
        # body would hold up the exit (each of the queue's, in turn); not starting loses
        # nothing, its checkpoints stay for the next attempt. (Asked before this run is
        # registered: then it is a body in this thread.)
        refused = _signals.refuses_new_runs()
        self.thread = self.body_thread = threading.current_thread()
        # Served by the SIGTERM handler from before a result or checkpoint is read
        # (reviews 120, 122: a SIGTERM during a long read found no run and killed the
        # process, status -15); meanwhile a SIGTERM stops the read in the main thread
        # at once (nothing to save), and a run in another thread after it.
        self.loading = True
        _signals.enter(self)
        leaving: BaseException | None = None  # what the call ends with, if it raises
        progress: Progress | None = None
        gen: Generator[Any, None, Any] | None = None
        start_step = 0
        try:
            found, value = self.stored_result()
            if found:
                self.loading = False
                return value
            if refused:
                log.info("run %s not started: a SIGTERM came before it", run.where())
                raise _signals.terminated()
            state, step, resumed = self._start()
            self.durable_step = step  # the checkpoint resumed from, or 0
            self.loading = False
            if self.terminate:
                # Came while the checkpoint was read: no generation began, none is run.
                self.stopping = True
                raise _signals.terminated()
            if resumed is not None:
                age = (datetime.now(UTC) - resumed.created).total_seconds()
                name = resumed.key.rsplit("/", 1)[1]
                by = parse_ckpt_name(name)
                log.info("resuming run %s (attempt %d) from %s: step %d (saved %.0f s ago%s); "
                         "%d generation(s) not run again", run.where(), run.epoch, name, step,
                         age, f" by attempt {by[0]}" if by else "", step)
                self._warn_identity_unchecked("checkpoints", "the state it resumes")
            else:
                log.info("starting run %s fresh (attempt %d)", run.where(), run.epoch)
                _identity.warn_if_older_version_derived_another(run, self.ident)
            start_step = step
            last_state = state
            # Failures of each generation not yet completed: its count starts again once it
            # completes (review 155: one count for all let a failure of a replayed
            # generation use up the restart of the one that caused the replay)
            fails: dict[int, int] = {}
            progress = self.progress = self._progress(step)
            gen = self._body(state)
            while True:
                # (the thread that runs the body now: an iterator may be handed to another
                # thread; review 58. self.thread stays the one that began the run: the
                # SIGTERM handling stops and saves a consumer there, review 59)
                self.body_thread = threading.current_thread()
                try:
                    yielded = self._resume(gen)
                except StopIteration as stop:
                    result = stop.value if stop.value is not None else last_state
                    said = ""
                    if step > start_step and not self.interrupted and \
                            self._snapshotted(step):
                        self._checkpoint(last_state, step, force=True)  # the last yield's
                    elif step > start_step and not self.interrupted:
                        said = self._save_final(last_state, step, start_step)
                    self._flush_last()
                    if said:
                        log.info(said)
                    end_rng = self._capture_rng()
                    if end_rng is not None:
                        run.check_fenced()
                        run.write_rng_start(end_rng, RNG_END)
                    run.write_result(result)
                    log.info("run %s finished at step %d (%d new, %d snapshot(s) coalesced)",
                             run.where(), step, step - start_step, self.uploader.skipped)
                    if self.terminate:  # SIGTERM during the final save: saved, now exit
                        raise _signals.terminated() from None
                    return result
                except _signals.TERMINATION:
                    raise
                except BaseException as err:
                    if self.terminate:  # e.g. a process pool whose workers the SIGTERM ended
                        log.warning("run %s: body raised %s after SIGTERM: %s", run.where(),
                                    type(err).__name__, err)
                        raise _signals.terminated() from err
                    if _signals.at_once(err):
                        # A Ctrl-C that stops at once, come out of a call in the body: this
                        # call's saves still pickled by children are given up too, not
                        # waited for (review 159: up to the fork timeout)
                        self._give_up_children()
                    self._flush_after_error(err)
                    failures = fails[step + 1] = fails.get(step + 1, 0) + 1
                    if (isinstance(err, self.opts.restart_on)
                            and not isinstance(err, ResumableError)
                            and failures <= self.opts.restarts):
                        gen.close()
                        _signals.forget_within(self)  # (an iterator a cycle keeps open)
                        # (a Ctrl-C held ends the pause: the new body gets it at once)
                        _restart_pause(failures, lambda: self.terminate or (
                            self.sigint_outer is not None and _signals.sigint_held()))
                        if self.terminate:
                            raise _signals.terminated() from err
                        state, step = self._restart_point(resumed)
                        log.warning("run %s: body raised %s: %s; restart %d of %d from step %d",
                                    run.where(), type(err).__name__, err, failures,
                                    self.opts.restarts, step)
                        last_state = state
                        gen = self._body(state)
                        continue
                    raise
                if self.interrupted:  # the body went on after its interruption: not saved
                    raise _signals.terminated()
                inner = _signals.open_within(self)
                if inner is not None:
                    raise ConfigurationError(
                        f"run {run.where()}: its body yielded (step {step + 1}) while the "
                        f"f.iter run {inner.where()} it consumes is still open. The two runs "
                        "save their checkpoints apart, so a crash, a restart or a resume "
                        "between them leaves the inner run ahead of the outer one, and the "
                        "resumed result differs from an uninterrupted run's. Consume the "
                        "inner run within one generation (`for s in inner.iter(...)` to its "
                        "end, or close it), or make it a plain generator whose position "
                        "is part of the outer state; nothing of this generation was saved")
                if self.terminate:
                    ended = _signals.killed(self.workers, self.workers_at_term,
                                            _signals.signalled_workers(), _signals.workers())
                    if ended:
                        self.stopping = True
                        log.warning(
                            "SIGTERM: run %s: step %d is not saved: multiprocessing "
                            "worker(s) %s ended during its generation (a SIGTERM to the "
                            "process group reaches a pool's workers; or the body terminated "
                            "its pool), so its state may hold results computed around "
                            "them; the last saved state stands", run.where(), step + 1,
                            ", ".join(ended))
                        raise _signals.terminated()
                step += 1
                # This generation completed: its count starts again. (Only its own: with
                # every=n a restart replays the generations since the last due step, and a
                # count reset by each of them restarted a failure that always comes back
                # for ever, review 154.)
                if fails:
                    fails.pop(step, None)
                last_state = self.held = yielded
                self.step = step
                self.stopping = self.terminate  # reached its yield after a SIGTERM
                self.at_yield = True
                try:
                    self._checkpoint(yielded, step)
                finally:
                    self.at_yield = False
                if self.terminate:
                    self.stopping = True  # the body reached its yield: only saving is left
                    self._checkpoint(yielded, step, force=True)  # SIGTERM came meanwhile
                    raise _signals.terminated()
                progress.advance(step, yielded)
                self.workers = _signals.workers()  # (the next generation's pool)
                self.within = _signals.consumer_body(self)
                self.suspended = self.handed = True
                if self.terminate:  # (a SIGTERM just before: flagged, as it found no consumer)
                    raise _signals.terminated()  # not handed on after it (review 54)
                # An f.iter consumer's code runs: as it was. Only the thread that began the
                # shield moves it (a consumer may pass the iterator to another thread).
                unshield = self.sigint_outer is not None and not self.own_consumer
                if unshield and _get_ident() == self.sigint_thread:
                    if self.sigint_outer:  # (inside another call's own code: still held)
                        _signals._shielded = True
                    else:
                        _signals.unshield()
                try:
                    yield yielded
                finally:
                    if unshield and _get_ident() == self.sigint_thread:
                        # Whoever resumes or closes us (a consumer, or another run's own
                        # code closing its body, or the garbage collector anywhere) gets
                        # its shield back when we hand back or end, not the one we began in.
                        self.sigint_outer = _signals._shielded
                        try:
                            second = _signals.shield()
                        except BaseException as came:  # (the consumer's handler's)
                            second = _signals.shield(came)
                        if second is not None:
                            raise second  # a second Ctrl-C: at once
                    # (first: in between, this run would look like a body running in the
                    # thread that last resumed it; review 59)
                    self.body_thread = threading.current_thread()
                    self.suspended = False
                self.handed = False  # (the finally above completed: the body goes on)
        except _signals.TERMINATION as err:
            leaving = err
            self.stopping = True
            if self.interrupted:  # out of time: children still pickling are not waited for
                self._end_children()
            if self.handed and self.step > start_step:
                # at an f.iter consumer's yield (raised in the consumer's code, as the
                # handler changed hands, or as the consumer resumed us): the state it was
                # handed, or had, is kept, as when it stops early (reviews 53, 54); the
                # body is paused at that yield, so also after an interruption
                self._checkpoint(self.held, self.step, force=True)
            self._flush_last()
            if gen is None:  # (stopped while it read its result or checkpoint)
                log.warning("SIGTERM: run %s stopped before its body started; its "
                            "checkpoints stand; %s", run.where(), _signals.outcome())
            else:
                log.warning("SIGTERM: run %s saved at step %s; %s", run.where(),
                            self._saved_text(), _signals.outcome())
            if self.thread is threading.main_thread():
                _signals.chain_once()
            raise
        except GeneratorExit as err:  # an f.iter consumer stopped early: keep what it holds
            # (raised at the yield: the body is paused there, interrupted or not)
            leaving = err
            # only saving is left: a SIGTERM's watchdog does not take this run for a body
            # that reached no yield, and cut its save (review 62: the state was lost)
            self.stopping = self.closing = True
            try:
                if self.step > start_step:
                    self._checkpoint(self.held, self.step, force=True)
                self._flush_last()
            except BaseException as failed:
                # The save's error is what the run ends with: kept, not taken for a close
                # (review 61). Unless a finalizer closed the iterator (a `break`, the
                # collector: its weak reference is cleared first), which drops the error
                # (Python prints it): then it was a close (review 62: the SIGTERM lost).
                if not self._finalized():
                    leaving = failed
                elif self.terminate:  # (said now: the signal sent on may end us first)
                    log.error("SIGTERM: run %s: saving the state its dropped iterator held "
                              "failed: %s: %s", run.where(), type(failed).__name__, failed)
                raise
            if self.terminate:
                log.warning("SIGTERM: run %s saved at step %s; %s", run.where(),
                            self._saved_text(), _signals.outcome())
            raise
        except BaseException as err:
            leaving = err
            raise
        finally:
            self.leaving = leaving  # (read by _signals.leave: see there)
            # Each step runs even if one before it fails (a body whose cleanup raises):
            # a run left registered would keep the SIGTERM handler installed.
            with contextlib.ExitStack() as cleanup:
                cleanup.callback(_signals.leave, self)
                cleanup.callback(self.spill.close)
                cleanup.callback(self.pool.clear)
                if self.last_snap is not None:
                    cleanup.callback(self.last_snap.release)
                cleanup.callback(self.uploader.close)
                if _signals.at_once(sys.exc_info()[1]):
                    # A Ctrl-C that stops at once (a second one while the save under way
                    # is handed over): forked children still pickling are ended first, or
                    # closing the uploader would wait for them, up to the fork timeout
                    # (review 156). Not for any other KeyboardInterrupt: a first Ctrl-C
                    # (raised at once under the application's own handler) leaves the
                    # saves handed over to finish (review 158).
                    cleanup.callback(self._give_up_children)
                if progress is not None:
                    cleanup.callback(progress.close)
                if gen is not None:
                    cleanup.callback(gen.close)
                self.held = None
                # The last save's job refers to this execution: kept, the pair would wait
                # for the cycle collector, and with it the last snapshot (a copy of the
                # state). The uploader keeps the job it has yet to run (review 39).
                self.last_job = None
            if (self.terminate and leaving is None
                    and self.body_thread is threading.main_thread()):
                # The SIGTERM was handled after the call's last look at the flag (as it
                # returned, or in the cleanup above): the run is saved and has left, so
                # nothing else acts on it, and the program went on. (Later, with the run
                # gone, a SIGTERM finds no run: the handler, or the default, ends us.) A
                # call that ends with an error keeps it (a SerializationError or a
                # FencedError says more than 143: review 58); the handler serves the next
                # SIGTERM afresh, and a run started meanwhile does not start.
                log.warning("SIGTERM: run %s saved at step %s as it ended; %s", run.where(),
                            self._saved_text(), _signals.outcome())
                _signals.chain_once()
                raise _signals.terminated()
            if (self.terminate and isinstance(leaving, GeneratorExit)
                    and threading.current_thread() is threading.main_thread()
                    and not self._finalized()
                    and _signals.consumers_to_stop()):
                # Closed as the SIGTERM came, beside other iterators open in this thread:
                # the handler could not stop their consumer while this close saved (its
                # code runs no consumer); it is stopped now (review 63: it went on, and
                # the SIGTERM was lost). Not from a finalizer (a `break`), where Python
                # drops what is raised: the watchdog stops it there (review 64).
                raise _signals.terminated()


def _weakly(method: Callable[[int], None]) -> Callable[[int], None]:
    """``method``, called only while its object lives (no reference to it is kept)."""
    ref = weakref.WeakMethod(method)

    def call(value: int) -> None:
        bound = ref()
        if bound is not None:
            bound(value)

    return call


def _hint(value: Any) -> str:
    """For a value given positionally, the keyword it likely meant (review 57: None and
    3 were offered as every= and store=, which refuse them)."""
    if value is None:
        return "@checkpointed() with no arguments takes the defaults"
    try:
        parse_every(value)
    except (ConfigurationError, TypeError, ValueError):
        pass
    else:
        return f"e.g. @checkpointed(every={value!r})"
    if isinstance(value, (str, os.PathLike)):
        return f"e.g. @checkpointed(store={value!r})"
    return "e.g. @checkpointed(store=..., every=...); see the README's table of options"


_NO_FUNCTION: Any = object()  # checkpointed() called as it should be: no positional


def checkpointed(
    _func: Any = _NO_FUNCTION,
    /,
    *,
    every: Any = "generation",
    store: str | os.PathLike[str] | Store | None = None,
    serializer: str | Serializer = "pickle",
    keep: int | None = 3,
    run_id: str | None = None,
    state_arg: str = "state",
    restarts: int = 0,
    restart_on: type[BaseException] | tuple[type[BaseException], ...] = Exception,
    capture_rng: bool = True,
    progress: bool | int | str | Bar | Callable[[Any], Any] = False,
    signing_key: bytes | str | None = None,
    version: str | int | None = None,
    ignore: Iterable[str] = (),
) -> Callable[[Callable[P, Generator[Any, None, R]]], CheckpointedFunction[P, R]]:
    """Make a generator function resumable: each yield is a checkpoint boundary.

    See the README for every option; the function gets ``state=None`` on a fresh start
    and the last saved state on resume, and the call returns the generator's return value.
    """
    if _func is not _NO_FUNCTION:
        if callable(_func):
            raise TypeError(
                f"@checkpointed needs parentheses: write @checkpointed() (or "
                f"@checkpointed(every=...)) above "
                f"{getattr(_func, '__qualname__', repr(_func))}; its options are keywords")
        raise TypeError(f"checkpointed({_func!r}): its options are keywords; {_hint(_func)}")

    def decorate(func: Callable[P, Generator[Any, None, R]]) -> CheckpointedFunction[P, R]:
        name = getattr(func, "__qualname__", repr(func))
        if not inspect.isgeneratorfunction(func):
            raise TypeError(
                f"@checkpointed needs a generator function, but {name} is not one: "
                f"yield the state once per generation (`yield state`)"
            )
        param = (inspect.signature(func).parameters.get(state_arg)
                 if isinstance(state_arg, str) else None)
        if param is None or param.kind not in (
            inspect.Parameter.KEYWORD_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD
        ):
            raise TypeError(
                f"@checkpointed: {name} needs a keyword parameter {state_arg!r} "
                f"(e.g. `def {getattr(func, '__name__', 'f')}(..., *, {state_arg}=None)`), "
                "which receives the saved state on resume"
            )
        try:
            opts = _validate(
                every=every, store=store, serializer=serializer, keep=keep, run_id=run_id,
                state_arg=state_arg, restarts=restarts, restart_on=restart_on,
                capture_rng=capture_rng, progress=progress, signing_key=signing_key,
                version=version, ignore=ignore,
            )
            _identity.check_ignore(func, opts.ignore, state_arg)
            _check_progress_name(func, opts.progress, state_arg)
        except ConfigurationError as err:
            raise ConfigurationError(f"@checkpointed on {name}: {err}") from err
        return CheckpointedFunction(func, opts)

    return decorate


# The contract's signature: keyword options only (_func is there to explain a mistake).
checkpointed.__signature__ = inspect.signature(checkpointed).replace(  # type: ignore[attr-defined]
    parameters=list(inspect.signature(checkpointed).parameters.values())[1:])


def _check_progress_name(func: Callable[..., Any], progress: Any, state_arg: str) -> None:
    """progress= (or a Bar's total) as a name: an argument of the function that is not the
    state (a misspelt name showed a bar with no total)."""
    name = progress.total if isinstance(progress, Bar) else progress
    if not isinstance(name, str):
        return
    params = inspect.signature(func).parameters
    if name != state_arg and (name in params or any(
            p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values())):
        return
    names = [p for p in params if p != state_arg]
    raise ConfigurationError(
        f"progress={name!r} names {'the state' if name == state_arg else 'no parameter'}: "
        "as a string it is the name of the argument that holds the number of generations "
        f"(the parameters are {', '.join(map(repr, names)) or 'none'}); or give an int "
        "total, or True")


def _validate(**o: Any) -> _Options:
    """Check every option (at decoration time) and return them ready for use."""
    policy = parse_every(o["every"])
    KeepLast(o["keep"])
    ser = get_serializer(o["serializer"])
    restarts = o["restarts"]
    if isinstance(restarts, bool) or not isinstance(restarts, int) or restarts < 0:
        raise ConfigurationError(f"restarts must be an int >= 0, got {restarts!r}")
    restart_on = o["restart_on"]
    on = restart_on if isinstance(restart_on, tuple) else (restart_on,)
    if not on or not all(isinstance(t, type) and issubclass(t, BaseException) for t in on):
        raise ConfigurationError(
            f"restart_on must be an exception type or a tuple of them, got {restart_on!r}"
        )
    if o["run_id"] is not None:
        validate_run_id(o["run_id"])
    store = o["store"]
    if store is not None and not isinstance(store, (str, os.PathLike)):
        open_store(store)  # validates the object
    elif store is not None:
        normalize_url(store)
    if o["signing_key"] is not None:
        _signing_key(o["signing_key"])
    state_arg = o["state_arg"]
    if not isinstance(state_arg, str) or not state_arg.isidentifier():
        raise ConfigurationError(f"state_arg must be a parameter name, got {state_arg!r}")
    progress = o["progress"]
    if not (isinstance(progress, (bool, int, str, Bar)) or callable(progress)):
        raise ConfigurationError(
            "progress must be a bool, an int total, the name of the argument holding the "
            "total, or a callable state -> dict of items to show on the bar, "
            f"got {progress!r}"
        )
    if isinstance(progress, int) and not isinstance(progress, bool) and progress < 0:
        raise ConfigurationError(f"progress as a total must be >= 0, got {progress!r}")
    return _Options(every=policy, store=store, serializer=ser, keep=o["keep"],
                    run_id=o["run_id"], state_arg=state_arg, restarts=restarts,
                    restart_on=on, capture_rng=bool(o["capture_rng"]), progress=progress,
                    signing_key=o["signing_key"],
                    version=_identity.check_version(o["version"]),
                    ignore=_identity.ignore_names(o["ignore"]))


__all__ = ["CheckpointedFunction", "RunIterator", "checkpointed", "default_store_url"]
