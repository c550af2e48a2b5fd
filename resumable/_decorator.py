"""``@checkpointed``: bind, name the run, drive the generator, save, restart, return."""

from __future__ import annotations

import atexit
import contextlib
import functools
import inspect
import logging
import os
import random
import signal
import threading
import time
from collections.abc import Callable, Generator, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from types import FrameType
from typing import Any, Generic, ParamSpec, TypeVar

from . import _rng
from ._errors import ConfigurationError, FencedError, ResumableError
from ._policy import KeepLast, SavePolicy, parse_every
from ._progress import Bar, Progress
from ._run import BufferPool, Checkpoint, Run, Snapshot
from ._runid import resolve_run_id, validate_run_id
from ._uploader import Uploader
from .serializers import Serializer, get_serializer
from .stores import Store, default_store_url, normalize_url, open_store

log = logging.getLogger("resumable")

P = ParamSpec("P")
R = TypeVar("R")


class _Terminated(SystemExit):
    """Raised into the body by our SIGTERM handler; uncaught, the process exits 143."""

    def __init__(self) -> None:
        super().__init__(143)


def _signing_key(value: bytes | str | None) -> bytes | None:
    if value is None:
        value = os.environ.get("RESUMABLE_SIGNING_KEY") or None
    if value is None:
        return None
    if isinstance(value, str):
        value = value.encode()
    if not isinstance(value, bytes) or len(value) < 16:
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
    raw = os.environ.get("RESUMABLE_RESTART_BACKOFF", "")
    if not raw:
        return
    try:
        base = float(raw)
    except ValueError:
        raise ConfigurationError(
            f"$RESUMABLE_RESTART_BACKOFF={raw!r} must be a number of seconds, e.g. 0.5"
        ) from None
    if base > 0:
        until = time.monotonic() + min(60.0, base * 2 ** (failure - 1)) * _jitter.uniform(0.5, 1)
        while not stop() and (left := until - time.monotonic()) > 0:
            time.sleep(min(left, 0.1))


def _upload_duty() -> float:
    raw = os.environ.get("RESUMABLE_UPLOAD_DUTY", "")
    if not raw:
        return 1 / 3
    try:
        duty = float(raw)
    except ValueError:
        duty = -1.0
    if not 0 < duty <= 1:
        raise ConfigurationError(
            f"$RESUMABLE_UPLOAD_DUTY={raw!r} must be a number in (0, 1], e.g. 0.33"
        )
    return duty


_SIZE_UNITS = {"": 1, "k": 10**3, "m": 10**6, "g": 10**9, "t": 10**12,
               "ki": 2**10, "mi": 2**20, "gi": 2**30, "ti": 2**40}
DEFAULT_SNAPSHOT_LIMIT = 256 * 2**20


def parse_size(text: str) -> float:
    """'256MiB', '1Gi', '500MB', '1e9', 'inf' -> bytes; ValueError otherwise."""
    t = text.strip().lower().replace(" ", "")
    if t in ("inf", "none", "unlimited"):
        return float("inf")
    unit = t.rstrip("b") if t.endswith("b") and not t[:-1].endswith("e") else t
    digits = unit.rstrip("kmgti")
    factor = _SIZE_UNITS.get(unit[len(digits):])
    if factor is None or not digits:
        raise ValueError(text)
    value = float(digits) * factor
    if not value >= 0 or value == float("inf"):
        raise ValueError(text)
    return value


def _snapshot_limit() -> float:
    """$RESUMABLE_SNAPSHOT_LIMIT: the largest state copied for a background save."""
    raw = os.environ.get("RESUMABLE_SNAPSHOT_LIMIT", "")
    if not raw:
        return DEFAULT_SNAPSHOT_LIMIT
    try:
        return parse_size(raw)
    except ValueError:
        raise ConfigurationError(
            f"$RESUMABLE_SNAPSHOT_LIMIT={raw!r} must be a size such as 256MiB, 2GiB, "
            "0 (always save in place) or inf (always copy)"
        ) from None


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

    def _run(
        self, args: tuple[Any, ...], kwargs: dict[str, Any]
    ) -> tuple[Run, inspect.BoundArguments]:
        bound = self._bind(args, kwargs)
        identity = {k: v for k, v in bound.arguments.items() if k != self._opts.state_arg}
        run_id = resolve_run_id(self._opts.run_id, self._func, identity)
        store = open_store(self._opts.store)
        run = Run(store, run_id, self._opts.serializer, _signing_key(self._opts.signing_key),
                  self._opts.keep)
        return run, bound

    def run_id(self, *args: P.args, **kwargs: P.kwargs) -> str:
        """The run id this call maps to."""
        return self._run(args, kwargs)[0].run_id

    def latest(self, *args: P.args, **kwargs: P.kwargs) -> Checkpoint | None:
        """The newest valid checkpoint of this call's run, or None."""
        return self._run(args, kwargs)[0].load_latest()

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
        run, bound = self._run(args, kwargs)
        found, value = run.load_result()
        if found:
            log.info("run %s is complete; returning its stored result without running it",
                     run.where())
            return RunIterator(None, value)
        return RunIterator(_Execution(self, run, bound).states())

    def __call__(self, *args: P.args, **kwargs: P.kwargs) -> R:
        run, bound = self._run(args, kwargs)
        states = _Execution(self, run, bound).states()
        while True:
            try:
                next(states)
            except StopIteration as stop:
                return stop.value  # type: ignore[no-any-return]


_PENDING: Any = object()


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


class _BoundCheckpointed:
    """A decorated method bound to its instance, with the same helpers."""

    def __init__(self, fn: CheckpointedFunction[Any, Any], obj: Any) -> None:
        functools.update_wrapper(self, fn._func)
        self._fn, self._obj = fn, obj

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self._fn(self._obj, *args, **kwargs)

    def iter(self, *args: Any, **kwargs: Any) -> RunIterator:
        return self._fn.iter(self._obj, *args, **kwargs)

    def run_id(self, *args: Any, **kwargs: Any) -> str:
        return self._fn.run_id(self._obj, *args, **kwargs)

    def latest(self, *args: Any, **kwargs: Any) -> Checkpoint | None:
        return self._fn.latest(self._obj, *args, **kwargs)

    def reset(self, *args: Any, **kwargs: Any) -> None:
        self._fn.reset(self._obj, *args, **kwargs)


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


class _Execution:
    """One call: resume or start, drive the body, save, restart, finish."""

    def __init__(self, fn: CheckpointedFunction[Any, Any], run: Run,
                 bound: inspect.BoundArguments) -> None:
        self.fn = fn
        self.opts = fn._opts
        self.run = run
        self.bound = bound
        self.in_body = False
        self.suspended = False
        self.terminate = False
        self.progress: Progress | None = None
        self.uploader = Uploader(f"resumable-upload-{run.run_id}", duty=_upload_duty())
        # $RESUMABLE_SYNC=1: every save completes before the body goes on (no coalescing).
        self.synchronous = os.environ.get("RESUMABLE_SYNC", "0") not in ("", "0")
        self.last_snap: Snapshot | None = None
        self.pool = BufferPool()
        self.submitted_step = -1
        # States whose buffers exceed this are saved in place (no copy; the loop waits).
        self.copy_limit = _snapshot_limit()
        self.in_place_saved = False
        self.durable_step = 0  # resumed from or saved in place (last_snap, if set, is newer)
        self.last_save = time.monotonic()

    # -- signals --------------------------------------------------------------------

    def _on_sigterm(self, signum: int, frame: FrameType | None) -> None:
        # No blocking work here: the interrupted code may hold locks (a logging handler's,
        # say) that the upload thread needs. Raise, let the stack unwind, save there.
        self.terminate = True
        if self.in_body:
            raise _Terminated()
        if self.suspended:
            # An f.iter consumer is working on a yielded state: stop it now rather than at
            # its next request. Unwinding closes this generator, whose GeneratorExit path
            # saves; atexit is the backstop if something keeps the generator alive.
            self.suspended = False
            atexit.register(self._save_at_exit)
            raise _Terminated()

    def _save_at_exit(self) -> None:
        try:
            self._flush_last()
        except BaseException as err:
            log.error("run %s: saving at exit after SIGTERM failed: %s", self.run.where(), err)

    def _install_sigterm(self) -> Any:
        if threading.current_thread() is not threading.main_thread():
            return None
        try:
            return signal.signal(signal.SIGTERM, self._on_sigterm)
        except ValueError:
            return None

    # -- saving ---------------------------------------------------------------------

    def _save(self, snap: Snapshot, *, final: bool = False) -> None:
        progress = self.progress

        def job() -> None:
            try:
                self.run.write_checkpoint(snap)
                if progress is not None:
                    progress.saved()
            finally:
                snap.release()

        snap.hold()
        try:
            self.uploader.submit(job, on_drop=snap.release, raise_pending=not final)
        except BaseException:
            snap.release()  # an earlier save failed; this one was never handed over
            raise
        self.submitted_step = snap.step
        self.last_save = time.monotonic()
        if self.synchronous and not final:
            self._wait_for_saves()

    def _save_in_place(self, snap: Snapshot, due: bool) -> None:
        """Save a state too large to copy (see Run.snapshot) before the body resumes.

        Its frames alias the live state, so the save completes here and nothing keeps
        them: between saves no yielded state is held, and a restart or a SIGTERM falls
        back to the last save.
        """
        if not self.in_place_saved:
            log.info(
                "run %s: the state (%.0f MiB) is larger than $RESUMABLE_SNAPSHOT_LIMIT "
                "(%.0f MiB), so it is saved in place, without a copy: the loop waits for "
                "each save", self.run.where(), snap.size / 2**20, self.copy_limit / 2**20)
        try:
            if not due:
                return
            if self.last_snap is not None:  # older than what is about to be saved
                self.last_snap.release()
                self.last_snap = None
            self._save(snap)
        finally:
            snap.release()
            self.in_place_saved = True
        self._wait_for_saves()
        self.durable_step = snap.step

    def _saved_step(self) -> int:
        """The step the last flush made durable (for the SIGTERM log line)."""
        return self.last_snap.step if self.last_snap is not None else self.durable_step

    def _wait_for_saves(self) -> None:
        try:
            self.uploader.flush()
        except BaseException:
            self.submitted_step = -1  # the save failed: a later flush tries it again
            raise

    def _flush_last(self) -> None:
        """Make the last yielded state durable (end, exception, SIGTERM).

        It is saved even when an earlier save failed; only its own failure is raised.
        """
        if self.last_snap is not None and self.last_snap.step != self.submitted_step:
            self._save(self.last_snap, final=True)
        self._wait_for_saves()

    # -- the loop -------------------------------------------------------------------

    def _body(self, state: Any) -> Generator[Any, None, Any]:
        self.bound.arguments[self.opts.state_arg] = state
        return self.fn._func(*self.bound.args, **self.bound.kwargs)

    def _restore_rng(self, saved: _rng.RngState | None) -> bool:
        if self.opts.capture_rng and saved is not None:
            _rng.restore(saved)
            return True
        return False

    def _start(self) -> tuple[Any, int, Checkpoint | None]:
        """Find where to begin: (state, step, checkpoint resumed from)."""
        run = self.run
        latest = run.load_latest()
        run.claim_epoch(latest.key.rsplit("/", 1)[1] if latest else None)
        if latest is not None:
            self._restore_rng(latest.rng)
            return latest.state, latest.step, latest
        if self.opts.capture_rng:
            if self._restore_rng(run.load_rng_start()):
                log.info("run %s: no checkpoint yet; restored the RNG recorded at its fresh "
                         "start, so it replays identically", run.where())
            else:
                run.write_rng_start(_rng.capture())
        return None, 0, None

    def _restart_point(self, resumed: Checkpoint | None) -> tuple[Any, int]:
        """Where an in-process restart begins: the last yielded state, else the start."""
        if self.last_snap is not None:
            state, rng = self.run.restore_snapshot(self.last_snap)
            self._restore_rng(rng)
            return state, self.last_snap.step
        # The body may have changed the loaded state in place; and a state saved in place
        # is kept only in the store.
        if resumed is not None or self.in_place_saved:
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

    def states(self) -> Generator[Any, None, Any]:
        run = self.run
        found, value = run.load_result()
        if found:
            log.info("run %s is complete; returning its stored result without running it",
                     run.where())
            return value
        state, step, resumed = self._start()
        if resumed is not None:
            age = (datetime.now(UTC) - resumed.created).total_seconds()
            log.info("resuming run %s from %s: step %d (saved %.0f s ago); %d generation(s) "
                     "not run again", run.where(), resumed.key.rsplit("/", 1)[1], step, age, step)
        else:
            log.info("starting run %s fresh (attempt %d)", run.where(), run.epoch)
        start_step = step
        self.durable_step = step  # the checkpoint resumed from, or 0
        last_state = state
        failures = 0
        progress = self._progress(step)
        self.progress = progress
        previous_handler = self._install_sigterm()
        gen = self._body(state)
        try:
            while True:
                try:
                    self.in_body = True
                    if self.terminate:
                        raise _Terminated()
                    yielded = next(gen)
                except StopIteration as stop:
                    self.in_body = False
                    result = stop.value if stop.value is not None else last_state
                    self._flush_last()
                    run.write_result(result)
                    log.info("run %s finished at step %d (%d new, %d snapshot(s) coalesced)",
                             run.where(), step, step - start_step, self.uploader.skipped)
                    if self.terminate:  # SIGTERM during the final save: saved, now exit
                        raise _Terminated() from None
                    return result
                except _Terminated:
                    raise
                except BaseException as err:
                    self.in_body = False
                    self._flush_after_error(err)
                    if (isinstance(err, self.opts.restart_on)
                            and not isinstance(err, ResumableError)
                            and failures < self.opts.restarts):
                        failures += 1
                        gen.close()
                        _restart_pause(failures, lambda: self.terminate)
                        if self.terminate:
                            raise _Terminated() from err
                        state, step = self._restart_point(resumed)
                        log.warning("run %s: body raised %s: %s; restart %d of %d from step %d",
                                    run.where(), type(err).__name__, err, failures,
                                    self.opts.restarts, step)
                        last_state = state
                        gen = self._body(state)
                        continue
                    raise
                finally:
                    self.in_body = False
                # A SIGTERM here (between the yield and the snapshot) costs at most this
                # generation: the outer handler saves the previous one.
                step += 1
                failures = 0
                try:
                    rng = _rng.capture() if self.opts.capture_rng else None
                    snap = run.snapshot(yielded, step, rng, self.pool, self.copy_limit)
                    last_state = yielded
                    due = self.opts.every.due(step, time.monotonic() - self.last_save)
                    if snap.in_place:
                        self._save_in_place(snap, due)
                    else:
                        if self.last_snap is not None:
                            self.last_snap.release()
                        self.last_snap = snap
                        if due:
                            self._save(self.last_snap)
                except _Terminated:
                    raise
                except BaseException as err:
                    # A state that cannot be serialized, or storage failing for good:
                    # the last good state is still saved before the error propagates.
                    self._flush_after_error(err)
                    raise
                progress.advance(step, yielded)
                self.suspended = True
                try:
                    if self.terminate:  # SIGTERM arrived during the bookkeeping
                        raise _Terminated()
                    yield yielded
                finally:
                    self.suspended = False
        except _Terminated:
            self.in_body = False
            self._flush_last()
            log.warning("SIGTERM: run %s saved at step %d; exiting with 143", run.where(),
                        self._saved_step())
            raise
        except GeneratorExit:  # an f.iter consumer stopped early: keep what it saw
            self._flush_last()
            if self.terminate:
                log.warning("SIGTERM: run %s saved at step %d; exiting with 143", run.where(),
                            self._saved_step())
            raise
        finally:
            # Each step runs even if one before it fails (a body whose cleanup raises):
            # a handler left installed would swallow every later SIGTERM.
            with contextlib.ExitStack() as cleanup:
                if previous_handler is not None:
                    cleanup.callback(signal.signal, signal.SIGTERM, previous_handler)
                cleanup.callback(self.pool.clear)
                if self.last_snap is not None:
                    cleanup.callback(self.last_snap.release)
                cleanup.callback(self.uploader.close)
                cleanup.callback(progress.close)
                cleanup.callback(gen.close)

    def _flush_after_error(self, err: BaseException) -> None:
        """Save the last yielded state after the body raised; a failure to save is noted.

        A fenced attempt, or an interrupt during the save, ends the run at once.
        """
        try:
            self._flush_last()
        except BaseException as flush_err:
            if isinstance(flush_err, FencedError) or not isinstance(flush_err, Exception):
                raise flush_err from err
            log.error("run %s: saving the last state after %s failed: %s", self.run.where(),
                      type(err).__name__, flush_err)
            err.add_note(f"resumable: saving the last yielded state also failed: {flush_err}")


def checkpointed(
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
) -> Callable[[Callable[P, Generator[Any, None, R]]], CheckpointedFunction[P, R]]:
    """Make a generator function resumable: each yield is a checkpoint boundary.

    See the README for every option; the function gets ``state=None`` on a fresh start
    and the last saved state on resume, and the call returns the generator's return value.
    """
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
            )
        except ConfigurationError as err:
            raise ConfigurationError(f"@checkpointed on {name}: {err}") from err
        return CheckpointedFunction(func, opts)

    return decorate


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
                    signing_key=o["signing_key"])


__all__ = ["CheckpointedFunction", "RunIterator", "checkpointed", "default_store_url"]
