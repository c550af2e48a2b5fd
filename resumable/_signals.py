"""One process-wide SIGTERM handler that serves every active run, in every thread.

On SIGTERM no body is interrupted: each active run saves the state of its next yield
(due or not) and ends, and the process exits 143. Only a run that yields nothing within
$RESUMABLE_TERM_TIMEOUT seconds (default 20) is interrupted; its last saved state stands.

- The handler acts only in the process that installed it: a forked child (a
  ``multiprocessing`` pool worker, say) gets the default action back at fork, so a
  SIGTERM to the whole process group stops the children as if we were not there.
- An application's own handler is called after the runs have saved; an ignored SIGTERM
  stays ignored (nothing is installed); the previous handler is restored once no run
  is active (from the main thread; elsewhere the handler stays and just chains).
- Python handlers can only be installed from the main thread: a run started first in
  another thread logs a WARNING once, naming ``install_signal_handlers()``.
- Exit status 143 is for scripts; in an interactive session (``python -i``, a REPL,
  IPython/Jupyter) the run ends with ``KeyboardInterrupt`` and the session lives on.
- At interpreter exit, runs still suspended at a yield (``it = f.iter(...)`` left
  unfinished) are closed, which saves the state they yielded, while the upload thread
  still lives; runs in other threads told to stop by a SIGTERM are waited for.
"""

from __future__ import annotations

import _signal  # type: ignore[import-not-found]
import _thread
import atexit
import contextlib
import ctypes
import importlib
import logging
import os
import signal
import sys
import threading
import time
import types
from functools import partial
from types import FrameType
from typing import Any, Protocol

try:
    _signal_module: Any = importlib.import_module("_signal")  # the C functions signal.py wraps
except ImportError:  # (not CPython)
    _signal_module = signal

from . import _settings

log = logging.getLogger("resumable")

DEFAULT_TERM_TIMEOUT = 20.0  # see _settings.TERM_TIMEOUT


class Terminated(SystemExit):
    """Ends a run after a SIGTERM (its state saved); uncaught, a script exits 143."""

    def __init__(self) -> None:
        super().__init__(143)


class TerminatedInteractive(KeyboardInterrupt):
    """The same in an interactive session, which must survive it (no exit status there)."""


TERMINATION = (Terminated, TerminatedInteractive)


def outcome() -> str:
    """What a run saved after a SIGTERM goes on to, as its log line says."""
    return "stopping" if interactive() else "exiting with 143"


def interactive() -> bool:
    """True in ``python -i``, the plain REPL, IPython and Jupyter kernels."""
    if sys.flags.interactive or hasattr(sys, "ps1"):
        return True
    ipython = sys.modules.get("IPython")
    get = getattr(ipython, "get_ipython", None)
    return get is not None and get() is not None


def terminated() -> BaseException:
    global _main_stopped
    if threading.current_thread() is threading.main_thread():
        _main_stopped = True  # (the SIGTERM is acted on in the main thread: see leave)
    if interactive():
        return TerminatedInteractive("SIGTERM: the run saved its state and stopped")
    if threading.current_thread() is threading.main_thread():
        _guard_unwinding()
    return Terminated()


_unwinding = False  # the main thread unwinds to exit 143; _unwind_guard watches


def _guard_unwinding() -> None:
    """The main thread is about to unwind to exit 143 after a SIGTERM. Code on the way
    out is the application's (a ``finally`` that calls ``pool.terminate()``, say) and can
    hang for ever: a pool whose workers the group's SIGTERM killed while one held its
    queue's lock never terminates. Without us the SIGTERM would have ended the process;
    with us it must still end, so a guard leaves as ``_hard_exit`` does if the process is
    still there ``$RESUMABLE_TERM_TIMEOUT`` seconds after its runs stopped."""
    global _unwinding
    if _unwinding or os.getpid() != _owner:
        return
    _unwinding = True
    threading.Thread(target=_unwind_guard, name="resumable-exit", daemon=True).start()


def quiet_thread() -> None:
    """In a thread of the library's own: SIGTERM and SIGINT are not handed to it (review
    131: a program that blocks them in its threads and waits for them with
    ``signal.sigwait`` had them taken by ours, started before its mask: it hung, or was
    killed). Not the upload thread, which runs the store's code: a thread's mask passes
    to the processes and threads it starts (review 132: a store's helper process ignored
    SIGTERM for good)."""
    with contextlib.suppress(ValueError, OSError, AttributeError):
        signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM, signal.SIGINT})


def _unwind_guard() -> None:
    quiet_thread()
    timeout = term_timeout()
    # The runs (this thread's too: it raised Terminated before its last save) may still
    # be saving, for as long as one upload of the state takes (the grace period covers
    # it, not some multiple of the timeout): a save is waited for, as the watchdog does.
    # A run that is not saving gets 3 x the timeout (the watchdog ends those that never stop).
    _wait_for_flagged_saves(time.monotonic() + 3 * timeout)
    time.sleep(timeout)
    _hard_exit("the program did not exit after its runs stopped (code on its way out "
               "hangs: a multiprocessing pool whose workers the SIGTERM killed while one "
               "held its queue's lock, say)")


def term_timeout() -> float:
    """$RESUMABLE_TERM_TIMEOUT: seconds a run may take to reach its next yield after SIGTERM."""
    return _settings.TERM_TIMEOUT.read()


class Active(Protocol):
    """What the handler needs of a run (``_Execution``)."""

    thread: threading.Thread
    suspended: bool  # at a yield: its consumer (not its body) is running
    within: Active | None  # the run whose body it last handed a state to (in that thread)
    terminate: bool  # told of a SIGTERM
    leaving: BaseException | None  # what it ends with, if it raises (set as it ends)
    body_thread: threading.Thread  # the thread that resumed its body last

    def where(self) -> str: ...  # the run, as messages name it
    def on_sigterm(self) -> None: ...  # set flags only: runs inside the signal handler
    def interrupt(self) -> None: ...  # the timeout passed: stop the body now
    def close_at_exit(self) -> None: ...  # suspended at interpreter exit: save and end
    def wait_for_saves(self) -> None: ...  # from another thread: uploads handed over are done
    @property
    def saving(self) -> bool: ...  # a save runs or waits to (read from another thread)


_lock = threading.Condition(threading.Lock())
_runs: list[Active] = []
_installed = False
_pinned = False  # install_signal_handlers() was called: stays installed
_previous: Any = None
_left_unacted = False  # a run told of the SIGTERM left without acting on it (see leave)
_redeliver = False  # ... one closed as it came: the SIGTERM is sent again once none is left
_error_kept = False  # ... one ended with an error, kept: no SIGTERM is sent again over it
_acting = False  # a main-thread call that returned raises Terminated for it: none either
_sent_again = False  # sent again (an interactive session's exit does not chain it again)
_main_stopped = False  # a Terminated was raised in the main thread for the SIGTERM
_owner = 0  # the pid that installed the handler
_warned = False
_term_at: float | None = None  # when the SIGTERM being served arrived
_flagged: list[Active] = []  # runs told to stop by it
_chained = False
_exit_hook = False
_shutting_down = False  # _at_exit ran: the main thread's script is over, threads are joined
_exit_closed = False  # ... and closed the iterators left open in the main thread
_exit_143 = False  # a SIGTERM came during that join: exit 143 once the runs saved
_interrupt_main = False  # the watchdog's own SIGTERM: the main thread's run missed the deadline
_previous_excepthook: Any = None


def install_signal_handlers() -> None:
    """Install the process-wide SIGTERM handler now; call it from the main thread.

    Needed only when runs start in other threads before any run has started in the
    main thread: Python lets only the main thread install signal handlers.
    """
    global _pinned, _put_back
    if threading.current_thread() is not threading.main_thread():
        raise RuntimeError(
            "resumable.install_signal_handlers() must be called from the main thread "
            "(Python installs signal handlers only there), e.g. at the top of your script"
        )
    with _lock:
        _install()
        _pinned, _put_back = True, None  # (in front for good: not put back behind)
        if _installed:
            # The relay takes the wakeup fd again if it is free: asyncio, say, took it and
            # set none at its loop's close (review 134: the relay stayed off for good)
            _start_relay()


def _install(reinstall: bool = True) -> bool:
    """Ours is the SIGTERM handler (True), or cannot be. ``reinstall``: also where ours was
    installed and replaced since (not while runs are active: a body's own framework may
    have replaced it on purpose)."""
    global _installed, _previous, _owner, _put_back
    if _installed and (not reinstall or _replaced() is None):
        return True
    if threading.current_thread() is not threading.main_thread():
        return False
    previous = signal.getsignal(signal.SIGTERM)
    if previous is _handler:  # (already in front: what ours chains to stays; review 133)
        _owner, _installed = os.getpid(), True
        return True
    if previous is signal.SIG_IGN or previous is None:
        return False  # ignored stays ignored; a handler set outside Python is left alone
    # (installed before and replaced since: the application's handler, set after
    # install_signal_handlers(), is chained as any other; review 120: it took the SIGTERM
    # for good, and no run saved)
    if not _replaced_handlers or _replaced_handlers[-1] is not previous:
        _replaced_handlers.append(previous)  # (see _called_back)
    if _installed and _pinned:  # (see _put_back)
        _put_back = (previous, _previous if _put_back is None else _put_back[1])
    # Set before the swap: ours runs at once for a SIGTERM that comes as it swaps (review
    # 134: _owner unset, it took the process for a forked child, the default action)
    saved = (_previous, _owner, _installed)
    _previous, _owner, _installed = previous, os.getpid(), True
    try:
        signal.signal(signal.SIGTERM, _handler)
    except BaseException:  # (a pending signal's handler raised, before the swap)
        if signal.getsignal(signal.SIGTERM) is not _handler:
            _previous, _owner, _installed = saved
        raise
    _start_relay()
    return True


_replaced_handlers: list[Any] = []  # what our installs replaced, oldest first (a fork too)
# Installed for good (install_signal_handlers()) and replaced since by the program's own
# handler, ours goes back in front of it for the runs (review 120): (that handler, what
# ours chained to before), to undo once they have left: by the main thread's last leave,
# or by ours when next delivered with no run active (the runs left in another thread, a
# SIGTERM sent on as they left, the handler set otherwise meanwhile: review 130), never
# dropped (ours chaining to that handler after the program had put ours back over it,
# "restore the old handler and kill again" looped, and the process lived on).
_put_back: tuple[Any, Any] | None = None
_takes = 0  # put-backs taken so far, and the handler the last one put in front: a
_taken: Any = None  # SIGTERM nested in another's first steps may take it (review 135)


def _take_put_back() -> Any:
    """From the main thread: the program's handler back in front, as it left it (ours
    chaining to what it did before), and no longer among those ours replaced."""
    global _put_back, _previous, _takes, _taken
    taken, _put_back = _put_back, None  # (no call between: a nested SIGTERM may take it)
    if taken is None:
        return None  # (one did: review 135)
    front, before = taken
    _takes, _taken = _takes + 1, front
    signal.signal(signal.SIGTERM, front)
    _previous = before
    if any(h is front for h in _in_front):
        # A run inside that handler, running in front for a SIGTERM ours handed it: it is
        # still what ours chains to (review 134: a component chaining to ours lost it)
        return front
    for i in range(len(_replaced_handlers) - 1, -1, -1):
        if _replaced_handlers[i] is front:
            del _replaced_handlers[i]  # (review 130: called after the program removed it)
            break
    return front


def _is_default(handler: Any) -> bool:
    """SIG_DFL (an int, compared as one: a program's handler object may define ``__eq__``
    for its own kind only; review 130, it raised in the relay thread)."""
    return isinstance(handler, int) and int(handler) == int(signal.SIG_DFL)


def _is_ignored(handler: Any) -> bool:
    return isinstance(handler, int) and int(handler) == int(signal.SIG_IGN)


def _replaced() -> Any:
    """The handler that replaced ours since we installed it, else None."""
    current = signal.getsignal(signal.SIGTERM)
    return None if current is _handler else current


# -- waking the main thread ---------------------------------------------------------------
# Python runs signal handlers in the main thread only. When the kernel hands a SIGTERM to
# another thread (multiprocessing's worker-handling thread after a group SIGTERM, say),
# a main thread blocked in a lock wait without a timeout (pool.map, Event.wait) never
# wakes to run the handler: the process hangs where the default action would have ended
# it. A relay thread reads the signals from Python's wakeup fd and sends a SIGTERM to the
# main thread itself, which interrupts such a wait. A SIGTERM the main thread had already
# taken then reaches the handler twice, which (runs active) only flags runs again. The
# wakeup fd is one slot per process: if something else holds it (asyncio), it stays theirs.

_relay_fds: tuple[int, int] | None = None  # (read, write) of the relay's pipe, this pid
_relay_echoes = 0  # SIGTERMs the relay sent itself: their bytes come back, not relayed
_relay_holds = False  # the wakeup fd is ours (set by _start_relay, not handed back)
_taken_at = -1.0  # when ours last took a SIGTERM delivered to it (monotonic)


def _start_relay() -> None:
    global _relay_fds, _relay_holds
    if _relay_fds is None:
        r, w = os.pipe()
        os.set_blocking(w, False)
        _relay_fds = (r, w)
        threading.Thread(target=_relay, args=(r,), name="resumable-sigterm-relay",
                         daemon=True).start()
    aio = sys.modules.get("asyncio")
    if aio is not None and aio.events._get_running_loop() is not None:
        # An asyncio loop runs here and may hold the wakeup fd: a signal coming while ours
        # tried it would be lost to the loop (review 135: its SIGTERM callback never ran).
        # Taken at the next install or run after the loop.
        return
    try:
        previous = signal.set_wakeup_fd(_relay_fds[1], warn_on_full_buffer=False)
    except (ValueError, OSError):  # not the main thread of the main interpreter
        return
    _relay_holds = previous in (-1, _relay_fds[1])
    if not _relay_holds:
        signal.set_wakeup_fd(previous)  # someone else's: theirs stays


def _stop_relay() -> None:
    """From the main thread: our wakeup fd is unset (the thread and pipe stay for reuse).

    Only if we took it: unsetting someone else's (asyncio's) to find out would lose the
    signals that arrive meanwhile."""
    global _relay_holds
    if _relay_fds is None or not _relay_holds:
        return
    _relay_holds = False
    with contextlib.suppress(ValueError, OSError):
        previous = signal.set_wakeup_fd(-1)
        if previous != _relay_fds[1]:
            signal.set_wakeup_fd(previous)


def _relay(r: int) -> None:
    quiet_thread()
    while True:
        began = time.monotonic()
        try:
            data = os.read(r, 512)
        except OSError:
            return
        if not data:
            return
        for signum in data:
            if signum != signal.SIGTERM:
                continue
            try:
                _relay_one(began)
            except Exception:  # (the thread must outlive whatever one signal met)
                log.debug("relaying a SIGTERM failed", exc_info=True)


def _relay_one(began: float) -> None:
    """One SIGTERM read from the wakeup fd: sent on to the main thread if it is to be.
    ``began``: when the read that returned it began."""
    global _relay_echoes
    if _relay_echoes:
        _relay_echoes -= 1
        return
    if _taken_at >= began:
        # Ours ran in the main thread since: this SIGTERM is served (review 133: read late,
        # with a run begun meanwhile, it was relayed and stopped that run)
        return
    # The main thread may be past its script, joining the runs' threads at exit
    # (is_alive() is False then): its OS thread lives until the process ends,
    # and the handler has a branch for that join.
    main = threading.main_thread()
    if os.getpid() != _owner or _term_at is not None or main.ident is None:
        return  # served already, or not ours to serve
    if not _runs:
        if not _is_default(_previous):
            return  # a handler of the program's: the main thread runs it, as without us
        # The default action, as without us: the kernel takes it whichever thread
        # it hands the signal to, and ours runs only in the main thread, which may
        # wait in C (a join) for ever (review 126: no run active, the process lived
        # on). Sent twice, it ends the process all the same.
    elif _signalled_workers is None:
        # (awake as the signal lands, while the main thread may be in a long C
        # call: before a pool's manager joins the workers it killed, and forgets them)
        _note_workers()
    if signal.getsignal(signal.SIGTERM) is not _handler:
        # Replaced during the run (a framework the body set up): whether the main
        # thread already ran that handler is unknown; a relayed SIGTERM would call
        # it a second time for one signal.
        return
    _kick_main(main)


def _kick_main(main: threading.Thread) -> None:
    """A SIGTERM to the main thread, sent again until ours has run there.

    A signal interrupts a blocking wait (pool.map's lock) only if it lands while the
    thread is in it: one that lands just before is only recorded by Python's C handler,
    and the wait then blocks for good with ours pending. The relay gets the GIL when the
    main thread lets go of it, on its way into such a wait, so under load its kick often
    lands just there (a group SIGTERM during pool.map hung about 1 run in 100, stderr
    empty: no handler, no watchdog). Sent again once the last one has been delivered (no
    longer pending for the thread: two would merge, and each one's byte, counted as an
    echo, must come back) and ours has not run since, at growing intervals (a long C
    call runs ours only when it returns). None while the thread blocks SIGTERM."""
    global _relay_echoes

    def served() -> bool:  # ours ran since the kick, or need not run any more
        return _taken_at >= kicked or _term_at is not None or os.getpid() != _owner

    def late() -> bool:
        return time.monotonic() - kicked > max(term_timeout(), 1.0)

    pause = 0.005
    while True:
        kicked = time.monotonic()
        while _in_mask(main.native_id, b"SigBlk:"):
            # Blocked there (a body's section): ours runs at its next check point once the
            # SIGTERM another thread took is seen; a kick would stay pending and come after
            # the run (review 136: in an interactive session, the default action then)
            time.sleep(pause)
            if served() or late():
                return
        try:
            _relay_echoes += 1
            signal.pthread_kill(main.ident or 0, signal.SIGTERM)
        except (OSError, ValueError):
            _relay_echoes -= 1
            return
        while True:
            time.sleep(pause)
            if served() or signal.getsignal(signal.SIGTERM) is not _handler:
                return
            if not _in_mask(main.native_id, b"SigPnd:"):
                break  # delivered, and ours did not run: the wait began after it
            if late():
                return  # blocked in that thread: ours runs when it is unblocked
        pause = min(2 * pause, 1.0)


def _in_mask(tid: int | None, field: bytes) -> bool:
    """SIGTERM is in thread ``tid``'s ``field`` (SigPnd: pending; SigBlk: blocked), read on
    Linux; elsewhere False."""
    try:
        with open(f"/proc/self/task/{tid}/status", "rb") as f:
            for line in f:
                if line.startswith(field):
                    return bool(int(line.split()[1], 16) >> (signal.SIGTERM - 1) & 1)
    except (OSError, ValueError, IndexError):
        pass
    return False


def _uninstall() -> None:
    global _installed
    if threading.current_thread() is not threading.main_thread():
        return
    if _put_back is not None and _pinned:
        if signal.getsignal(signal.SIGTERM) is _handler:  # (else when next delivered)
            _take_put_back()
        return
    if _installed and not _pinned:
        if signal.getsignal(signal.SIGTERM) is _handler:  # else the application replaced it
            signal.signal(signal.SIGTERM, _previous)
        _stop_relay()
        _installed = False


def _excepthook(args: Any) -> None:
    """A worker thread ended by our Terminated stops as designed: no traceback."""
    if args.exc_type is not None and issubclass(args.exc_type, TERMINATION):
        return
    (_previous_excepthook or threading.__excepthook__)(args)


def _hook_exit() -> None:
    global _exit_hook, _previous_excepthook
    if _exit_hook:
        return
    _exit_hook = True
    atexit.register(_final_exit)
    if threading.excepthook is not _excepthook:
        _previous_excepthook, threading.excepthook = threading.excepthook, _excepthook
    try:
        threading._register_atexit(_at_exit)  # type: ignore[attr-defined]
    except RuntimeError:  # shutdown has begun: _at_exit has nothing left to do
        _at_exit_started()
        _at_exit_closed()


def enter(run: Active) -> None:
    """A run starts: it is served by the handler (installed now if this is the main thread)."""
    global _warned
    with _lock:
        nested = _in_a_body()
        _runs.append(run)
        if (_term_at is not None and os.getpid() == _owner and run not in _flagged
                and not nested):
            # Started after the SIGTERM (one that raced refuses_new_runs): told to stop
            # at once, so it saves its first yield and ends, instead of running on until
            # the exit guard cuts it off unsaved. (A sub-run of a body is part of that
            # body's generation, which finishes.)
            _flagged.append(run)
            run.on_sigterm()
        try:
            _hook_exit()
            if _install(reinstall=len(_runs) == 1) or _warned:
                return
            current = signal.getsignal(signal.SIGTERM)
            if current is None or _is_ignored(current):
                return
        except BaseException:
            _runs.remove(run)
            raise
        _warned = True
        replaced = _replaced() if _installed else None
    if replaced is not None:
        log.warning(
            "run started in thread %r: the SIGTERM handler resumable.install_signal_handlers() "
            "installed was replaced since (by %r), so a SIGTERM would not make this run save; "
            "call resumable.install_signal_handlers() again from the main thread after "
            "installing your own handler (it is called after the runs saved)",
            threading.current_thread().name, replaced)
        return
    log.warning(
        "run started in thread %r: SIGTERM handling needs a handler installed from the main "
        "thread, so a SIGTERM would kill this run without saving; call "
        "resumable.install_signal_handlers() from the main thread first",
        threading.current_thread().name)


def leave(run: Active) -> None:
    """A run ends (saved, failed or stopped).

    A run told of a SIGTERM that leaves without acting on it (``run.leaving``: an error,
    kept, or GeneratorExit: an ``f.iter`` iterator closed as it came, by ``close()``, a
    ``break`` or the collector, where nothing can be raised) lets the next SIGTERM be
    served afresh (review 58: all later ones were ignored); a closed one's is sent again
    once no run is left, to go on as if we were not there (the application's handler, or
    the default action). Not over a kept error, which says more (review 60: a
    SerializationError lost to the default action), nor a second time to an application
    handler already called for it."""
    global _left_unacted, _redeliver, _error_kept, _acting, _sent_again
    send = False
    with _lock:
        if run in _runs:
            _runs.remove(run)
        _lock.notify_all()
        leaving, run.leaving = run.leaving, None  # (its traceback holds the body's frames)
        if run.terminate and leaving is not None and not isinstance(leaving, TERMINATION):
            _left_unacted = True
            if isinstance(leaving, GeneratorExit):
                _redeliver = True
            else:
                _error_kept = True
        elif (run.terminate and leaving is None
              and run.body_thread is threading.main_thread()):
            # a call returning in the main thread: it raises Terminated and calls the
            # application's handler itself, next (review 61: called twice)
            _acting = True
        if _runs:
            return
        send = (_redeliver and not (_error_kept or _chained or _acting or _main_stopped)
                and os.getpid() == _owner)
        _redeliver = False
        if _term_at is not None and interactive():
            _reset_term()  # the session lives on: a later SIGTERM starts afresh
        if _term_at is None:
            _uninstall()
    if send:  # (outside the lock: the handler, or the application's, runs now)
        _sent_again = True  # (the exit's chain_once does not call it again: review 61)
        handler = signal.getsignal(signal.SIGTERM)
        if (callable(handler) and handler is not _handler
                and threading.current_thread() is threading.main_thread()):
            # (ours is uninstalled: called here, what it raises is known for its own)
            _call_previous(handler, signal.SIGTERM, None)
        else:
            os.kill(os.getpid(), signal.SIGTERM)


def _reset_term() -> None:
    global _term_at, _chained, _left_unacted, _redeliver, _error_kept, _acting, _main_stopped
    global _signalled_workers
    _term_at, _chained, _signalled_workers = None, False, None
    _left_unacted = _redeliver = _error_kept = _acting = _main_stopped = False
    _flagged.clear()


def terminating() -> bool:
    return _term_at is not None


def refuses_new_runs() -> bool:
    """A SIGTERM is being served in this process: a run that has not started yet (a
    thread pool's queued task) does not start its body. Except a sub-run called from a
    body that runs in this thread: that body finishes its generation, as promised."""
    if _term_at is None or os.getpid() != _owner:
        return False
    with _lock:
        return not _in_a_body()


def _outermost(runs: list[Active]) -> list[Active]:
    """The runs a SIGTERM tells to stop: not a sub-run that a running body called (in
    its thread, entered after it): that is part of the body's generation, which
    finishes, and the body's next yield is saved."""
    told, running = [], set()
    for run in runs:  # (in the order they started)
        if run.thread in running:
            # entered after a body running in its thread: a call, or an f.iter whose
            # consumer is that body (suspended; told, it cut the body's generation and
            # the outer run lost the state its consumer had: review 56)
            continue
        if not (run.suspended or getattr(run, "stopping", False)):
            # (a run that is only saving runs no body: an iterator closed as the SIGTERM
            # came is not one whose body called the runs after it; review 63)
            running.add(run.thread)
        told.append(run)
    return told


def consumers_to_stop() -> bool:
    """During the script, the main thread's runs are all iterators at a yield, and a
    SIGTERM told some of them: their consumer is to be stopped."""
    if _term_at is None or _main_stopped or _script_over():
        return False  # (once per SIGTERM: review 64, a program's finally was cut short)
    main = threading.main_thread()
    with _lock:
        mains = [r for r in _runs if r.thread is main]
        return (bool(mains) and all(r.suspended for r in mains)
                and any(r is f for r in mains for f in _flagged))


def _in_a_body() -> bool:
    """This thread runs a run's body (with _lock held)."""
    here = threading.current_thread()
    return any(run.thread is here and not run.suspended for run in _runs)


def consumer_body(run: Active) -> Active | None:
    """The run whose body is handed ``run``'s state now: the innermost other run whose
    body runs in this thread (None: the caller is not a body). At each hand-over."""
    runs = _runs
    if len(runs) < 2:
        return None
    here = threading.current_thread()
    for other in reversed(list(runs)):
        if other is not run and other.body_thread is here and not other.suspended:
            return other
    return None


def open_within(run: Active) -> Active | None:
    """A run whose last state went to ``run``'s body and that is still open: an f.iter
    run its body consumes, suspended at a yield (started by that body or not: review
    58). Checked at ``run``'s yields (one list read when ``run`` is the only run)."""
    runs = _runs
    if len(runs) < 2:
        return None
    return next((r for r in list(runs) if r.within is run and r in runs), None)


def forget_within(run: Active) -> None:
    """``run``'s body was closed (a restart): runs it consumed are no longer its."""
    for other in list(_runs):
        if other.within is run:
            other.within = None


def _handler(signum: int, frame: FrameType | None) -> None:
    # No locks and no blocking work here: the interrupted code may hold them.
    global _term_at, _interrupt_main, _exit_143, _sent_again, _main_stopped, _taken_at
    takes = _takes  # (first, before any call: see below)
    # Delivered: Python passes the handler the frame it interrupted, its caller's (None,
    # with no caller, when no Python code ran: review 126, a REPL's prompt, an atexit C
    # callback), and calls only the handler installed (review 127: a handler passing its
    # own frame to ours looked delivered).
    caller = sys._getframe().f_back
    delivered = frame is caller and signal.getsignal(signum) is _handler
    if delivered:
        _taken_at = time.monotonic()
    if _takes != takes and (delivered or frame is caller) and _term_at is None and not _runs:
        # A second SIGTERM, run at a check point of this one's first steps, took the
        # pending put-back and put the program's handler in front: this one goes there
        # too, as both would without us (review 135: the default action, or an
        # AssertionError). (Not one run before this function's first line: see the user
        # guide's known limits.)
        _call_in_front(_taken, signum, frame, stay=True)
        return
    if not delivered and _term_at is None and (not _runs or os.getpid() != _owner):
        # Called: by a handler that chains to ours (``old(signum, frame)``), or by a program
        # holding ours. With no run to serve, as without us (reviews 122-125; in a forked
        # child too, review 127).
        _called_back(signum, frame)
        return
    if os.getpid() != _owner:  # a child forked without our at-fork reset
        _default_action(signum)
        return
    runs = list(_runs)
    if not runs and _left_unacted and not (_unwinding or _script_over()):
        # The runs a SIGTERM stopped have all left, and the program goes on (a call that
        # ended with an error it caught, an iterator closed as it came): this one is
        # served afresh, as if we were not installed (review 58: ignored for good).
        _reset_term()
    if _term_at is None and not runs:
        if _in_front and delivered:
            # Ours, delivered while the program's handler runs in front (see
            # _call_in_front): it put ours back as what it replaced and killed again:
            # what it replaced (not a call of it for a chain: review 133, that one's
            # SIGTERMs go on as any)
            _called_back(signum, frame, loop=True)
            return
        if _put_back is not None and _pinned and delivered:
            front, before = _put_back
            if any(h is front for h, _ in _calling):
                # That handler, called for a chain, put ours back as what it replaced and
                # killed again (review 131: called twice): what ours chained to before
                _deliver_to(before, signum, frame)
                return
            # As if the program's handler were in front, as it left it (see _put_back)
            _take_put_back()  # (None if a nested SIGTERM took it meanwhile: review 135)
            _call_in_front(front, signum, frame, stay=True)
            return
        if _takes != takes:  # (taken by a nested SIGTERM since this one began: above)
            _call_in_front(_taken, signum, frame, stay=True)
            return
        _chain(signum, frame)
        return
    if _interrupt_main:
        _interrupt_main = False
        raise terminated()  # sent by the watchdog: the main thread's run missed the deadline
    told = _outermost(runs)
    if _term_at is not None:
        for run in told:  # a second SIGTERM, or a run started since: flags only; the
            if run not in _flagged:  # main thread was told to stop by the first one
                _flagged.append(run)
                run.on_sigterm()
        if _script_over(frame) and (_sent_again or any(r in _runs for r in _flagged)):
            # A closed iterator's signal sent on, as the exit hook closed the last run
            # (without us the process would end by it; review 65: exit 0), or one while
            # the runs the first stopped are still saving. Not another after those runs
            # have left: the status the program exits with stands (review 66: an
            # application handler's sys.exit(0) became 143).
            _exit_143 = True
        return
    _term_at, _sent_again, _main_stopped = time.monotonic(), False, False
    _note_workers()
    _flagged.extend(told)
    for run in told:
        run.on_sigterm()
    threading.Thread(target=_watchdog, name="resumable-sigterm", daemon=True).start()
    over = _script_over(frame)
    if over:
        # The script is over (the exit hook saves what iterators hold, joins threads):
        # whatever the runs do now, the exit is 143 once they saved (review 60: a run
        # the exit hook was closing in the main thread made it exit 0).
        _exit_143 = True
    mains = [r for r in runs if r.thread is threading.main_thread()]
    if mains and all(r.suspended or getattr(r, "loading", False) for r in mains):
        if over and not _exit_closed:
            # The consumer is Python's shutdown, whose exit hooks (ours among them, maybe
            # after another's, say a process pool's join) close these iterators: they
            # save what they hold, flagged, and the exit is 143. Raised into a hook, the
            # close was taken for a failed save, or ours was skipped (reviews 61, 62: the
            # state was lost). A consumer in an atexit function, after ours closed the
            # others, is stopped at once as during the script (review 62).
            return
        # An f.iter consumer is working on a yielded state: stop it now, not at its next
        # request; closing the run's iterator saves the state it holds.
        raise terminated()
    if not mains:
        if over or not threading.main_thread().is_alive():
            # The script is over and Python joins the runs' threads: an exception here
            # would be ignored (exit 0). Let the join end as the runs save; exit 143 then.
            _exit_143 = True
            return
        # Nothing to finish in this thread: end it; the exit hook waits for the runs in
        # other threads to save, then the process exits 143.
        raise terminated()


def _watchdog() -> None:
    quiet_thread()
    timeout = term_timeout()
    deadline = (_term_at or time.monotonic()) + timeout
    if _wait_for_flagged(deadline):
        return
    # Runs that reached their yield are saving it: the timeout bounds the body's run to
    # its yield, not the save after it, so only the others are interrupted.
    main = threading.main_thread()
    closed = False
    waited: list[Active] = []  # closed iterators' saves it waited for
    for run in [r for r in _flagged if r in _runs and not getattr(r, "stopping", False)]:
        if run.thread is main and _main_saves():
            # The main thread saves another run: not interrupted in the middle of that
            # save (review 63: that state was lost). That run stops this one's consumer
            # as it leaves (a call, raising Terminated; an iterator closed as the SIGTERM
            # came, see _decorator). A closed iterator's save that outlasts one more
            # timeout is interrupted then (review 64: the other state was lost with it);
            # a call's is not (review 65: its state was lost).
            waited += [r for r in list(_flagged) if r in _runs and r.thread is main
                       and getattr(r, "closing", False)]
            continue
        if (run.suspended and run.thread is main and _script_over()
                and not _exit_closed):
            # An iterator the script left open waits for our exit hook behind another one
            # that outlasts the timeout (a process pool's join): nothing runs it, so it is
            # closed here, and saves. Interrupted, the exit hook under way took the signal
            # and ours never ran (review 63: the state was lost). Its body's cleanup runs
            # in this thread.
            _close_open(run)
            closed = True
            continue
        _interrupt(run, timeout)
    if closed and not interactive():
        # (that exit hook may never end: the exit gets the time exit handlers get, and
        # our exit hook, which would see to it, may never run; review 64: a hang)
        threading.Thread(target=_exit_guard, name="resumable-exit", daemon=True).start()
    if _wait_for_flagged(deadline + timeout) or interactive():
        return
    if waited and not (_script_over() and not _exit_closed) and (
            not _main_stopped or any(r in _runs for r in waited)):
        # (looked at again: not when those closes have ended (their save and their body's
        # cleanup) and the consumer has been stopped, the program's own cleanup under way
        # (reviews 66, 68: another close's save, or a body's finally, was cut); but when
        # one still runs, or no one stopped the consumer (a break's close; reviews 67,
        # 69). Not while our exit hook closes the iterators left open: it closes the
        # others next, and this would cut that save (review 68); but in an atexit
        # function after it, as during the script (review 69))
        for run in [r for r in _flagged if r in _runs and r.thread is main
                    and not getattr(r, "stopping", False)]:
            _interrupt(run, timeout)
            break  # (one Terminated in the main thread is enough)
    # A slow save, or an interrupted body that does not unwind (its cleanup hangs, e.g.
    # terminating a pool whose workers died holding its queue's lock): finish the saves,
    # give the runs one more timeout to leave, then leave.
    for run in [r for r in _flagged if r in _runs]:
        run.wait_for_saves()
    if _wait_for_flagged(time.monotonic() + timeout):
        return
    _hard_exit("a run did not stop after its interruption")


def _main_saves() -> bool:
    """A run in the main thread is only saving now (it reached its yield after the
    SIGTERM, or its iterator was closed)."""
    main = threading.main_thread()
    return any(r.thread is main and getattr(r, "stopping", False)
               for r in list(_flagged) if r in _runs)


def _interrupt(run: Active, timeout: float) -> None:
    global _interrupt_main
    log.warning("SIGTERM: a run in thread %r reached no yield within "
                "$RESUMABLE_TERM_TIMEOUT=%gs; interrupting it (its last saved state "
                "stands)", run.thread.name, timeout)
    run.interrupt()
    if run.thread is threading.main_thread():
        _interrupt_main = True
        signal.pthread_kill(run.thread.ident or 0, signal.SIGTERM)
    elif run.thread.ident is not None:
        ctypes.pythonapi.PyThreadState_SetAsyncExc(
            ctypes.c_ulong(run.thread.ident), ctypes.py_object(Terminated))


def _wait_for_flagged(deadline: float) -> bool:
    with _lock:
        while any(r in _runs for r in _flagged):
            left = deadline - time.monotonic()
            if left <= 0:
                return False
            _lock.wait(left)
    return True


def _wait_for_flagged_saves(deadline: float) -> bool:
    """``_wait_for_flagged``, and past ``deadline`` as long as a run it waits for has a
    save running or handed over (one upload of the state may take longer than any
    multiple of the timeout: the grace period covers it), then a timeout more."""
    while not _wait_for_flagged(deadline):
        with _lock:
            flagged = [r for r in _flagged if r in _runs]
        if not any(r.saving for r in flagged):
            return False
        # Looked at again after a while (at least a second: a timeout of 0 must not spin);
        # a run that leaves wakes the wait at once.
        deadline = time.monotonic() + max(term_timeout(), 1.0)
    return True


_leaving = False  # _hard_exit has begun


def _hard_exit(why: str) -> None:
    log.error("SIGTERM: %s within $RESUMABLE_TERM_TIMEOUT=%gs; its saves are done, "
              "exiting with 143 now", why, term_timeout())
    global _leaving
    _leaving = True  # a child forked from now on leaves at once (see _after_fork_in_child)
    mp = sys.modules.get("multiprocessing")
    if mp is not None:
        # Pool workers forked after the group SIGTERM (a pool replaces dead workers)
        # would outlive us, blocked on the pool's queue, holding our stdout and stderr;
        # the pool's handler thread may fork more while we kill these.
        for _ in range(3):
            children = mp.active_children()
            if not children:
                break
            for child in children:
                with contextlib.suppress(Exception):
                    child.kill()
            for child in children:
                with contextlib.suppress(Exception):
                    child.join(1.0)
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(OSError, ValueError, AttributeError):
            stream.flush()
    os._exit(143)


def _exit_guard() -> None:
    quiet_thread()
    # Exit handlers run after the runs saved; one that hangs (multiprocessing's, joining a
    # pool whose workers the same SIGTERM killed) must not keep the pod alive.
    time.sleep(term_timeout())
    _hard_exit("the exit handlers did not finish")


def chain_once() -> None:
    """After the runs saved: call the application's own SIGTERM handler, once."""
    global _chained
    if _term_at is None and interactive() and not _runs and callable(_previous):
        # (the last run left, and leave() began the session afresh: review 58; unless
        # leave() sent the signal again, to that handler: review 61)
        if not _sent_again:
            _call_previous(_previous, signal.SIGTERM, None)
        return
    if _chained or _term_at is None:
        return
    _chained = True
    _chain(signal.SIGTERM, None)


def _chain(signum: int, frame: FrameType | None) -> None:
    if _term_at is None:  # (no run to serve: as without us)
        _call_in_front(_previous, signum, frame)
    else:
        _deliver_to(_previous, signum, frame)


def _call_in_front(handler: Any, signum: int, frame: FrameType | None,
                   stay: bool = False) -> None:
    """The program's handler, for a SIGTERM delivered to ours with no run active, runs as
    the installed one, as it would without us: a SIGTERM while it runs reaches it nested,
    directly (a supervisor's every 50 ms: review 131); one it makes by putting back what it
    replaced, ours, and killing again comes to ours while it runs, which then does what it
    replaced did (reviews 127-132: ours in front of it called it again, 20 times or until
    RecursionError). Ours is in front again after it, unless it installed another, or
    ``stay`` (it is being put back)."""
    if not callable(handler):
        _deliver_to(handler, signum, frame)
        return
    # Every call is a point where Python runs pending signals' handlers, which may raise:
    # the bookkeeping is undone by depth, first thing, and its checks make no call
    # (review 134: a handler raising at such a point left itself recorded as running,
    # and later SIGTERMs were dropped)
    forks, depth = _forks, len(_in_front)
    try:
        signal.signal(signum, handler)
        _in_front.append(handler)
        _call_previous(handler, signum, frame)
    finally:
        if forks == _forks:  # (not in a child it forked: there it stays, review 133)
            del _in_front[depth:]
            # Unless a run it made left and took ours out meanwhile (review 133)
            if not stay and _installed and signal.getsignal(signum) is handler:
                signal.signal(signum, _handler)


_in_front: list[Any] = []  # the program's handlers running in front now (_call_in_front)
_forks = 0  # forks this process descends from (see _after_fork_in_child)


def _call_previous(previous: Any, signum: int, frame: FrameType | None) -> None:
    """The application's handler; what it raises is marked as its own (see _at_exit)."""
    global _app_raised
    forks, depth = _forks, len(_calling)  # (see _call_in_front)
    try:
        _calling.append((previous, sys._getframe()))
        previous(signum, frame)
    except BaseException as err:
        _app_raised = err
        raise
    finally:
        if forks == _forks:  # (a child it forked has none: review 133)
            del _calling[depth:]


# An application's handler installed after ours chains to ours (``old(signum, frame)``);
# ours, installed again in front of it (see _install), calls it: while it runs, ours is
# entered again from it (review 122: RecursionError). That call is the application's
# chain going on past ours: it goes to what was there before ours was first installed.
_calling: list[tuple[Any, FrameType]] = []  # the program's handlers ours calls now, and
# the frames calling them


def _called_back(signum: int, frame: FrameType | None, loop: bool = False) -> None:
    """Ours was called, not delivered, with no run active: the caller holds it as the
    handler it replaced (``old``). Without us, ``old`` would have been what our install
    replaced: that is called, unless it is on the way here already (the caller itself,
    or one ours is calling); SIG_DFL or SIG_IGN there means nothing to call (a chaining
    handler calls ``old`` only if it is callable). ``loop``: ours was delivered while the
    program's handler ran in front, which put ours back and killed again: any call of a
    handler counts as on the way, and SIG_DFL is the default action."""
    interrupted = None if loop else frame if frame is not None else _under_installed()
    for before in reversed(_replaced_handlers):
        if before is _handler or _on_the_way(before, interrupted):
            continue
        if callable(before) or loop:
            _deliver_to(before, signum, frame)
        return


def _deliver_to(handler: Any, signum: int, frame: FrameType | None) -> None:
    """What a SIGTERM delivered to ``handler`` does: called, or (no SIGTERM being served)
    the default action, as if we were not installed: the process dies by SIGTERM."""
    if callable(handler):
        _call_previous(handler, signum, frame)
    elif _is_default(handler) and _term_at is None:
        _default_action(signum)


def _default_action(signum: int) -> None:
    signal.signal(signum, signal.SIG_DFL)
    os.kill(os.getpid(), signum)


def _code_of(handler: Any) -> Any:
    return getattr(_unwrapped(handler)[0], "__code__", None)


def _under_installed() -> FrameType | None:
    """The frame a SIGTERM interrupted, when the handler calling ours passed None (review
    130: as event loops' callbacks do): the caller of the installed handler's call on
    our way here, if one is found."""
    unwrapped = _unwrapped(signal.getsignal(signal.SIGTERM))
    code = getattr(unwrapped[0], "__code__", None)
    caller: FrameType | None = sys._getframe(3)  # (ours' caller)
    nearest = None  # (its code, whatever its arguments now: review 131, reassigned)
    for _ in range(64):
        if caller is None or code is None:
            break
        if caller.f_code is code:
            if _runs_as(caller, *unwrapped):
                return caller.f_back
            nearest = nearest or caller
        caller = caller.f_back
    return nearest.f_back if nearest is not None else None


def _on_the_way(handler: Any, interrupted: FrameType | None) -> bool:
    """``handler`` is running now for this SIGTERM: ours is calling it, or it is among
    our callers, down from the frame the SIGTERM ``interrupted`` (what a handler running
    there, or a call of it the program made, is doing is not this SIGTERM's: review 127,
    without us it is called again). One handler object is told from another of the same
    code (two instances' bound methods, a factory's closures, two partials of one
    function: reviews 127, 130) by what it binds: ``self``, closure values, arguments."""
    unwrapped = _unwrapped(handler)
    code = getattr(unwrapped[0], "__code__", None)
    calls = [f for h, f in _calling if h is handler]
    if calls and interrupted is None:  # (not known where this SIGTERM came in: any call)
        return True
    # When no other handler known has its code, a partial's arguments and the defaults
    # are not compared (a body may reassign them: review 131), its self and closure are
    # (another instance's handler of the same class may be on the way: review 132)
    known = {id(h): h for h in (*_replaced_handlers, signal.getsignal(signal.SIGTERM))}
    alone = sum(_code_of(h) is code for h in known.values()) <= 1
    caller: FrameType | None = sys._getframe(2)
    for _ in range(64):
        if caller is None or caller is interrupted:
            return False
        if any(caller is f for f in calls):
            return True
        if caller.f_code is code and _runs_as(caller, *unwrapped, loose=alone):
            return True
        caller = caller.f_back
    return False


def _unwrapped(handler: Any) -> tuple[Any, tuple[Any, ...], tuple[Any, ...], dict[str, Any]]:
    """The function a handler runs (a partial's, a method's, a callable object's
    ``__call__``), the object it is bound to (none or one), and the arguments a partial
    adds, first and by name."""
    args: tuple[Any, ...] = ()
    keywords: dict[str, Any] = {}
    for _ in range(8):
        if isinstance(handler, partial):
            args, keywords = handler.args + args, {**handler.keywords, **keywords}
            handler = handler.func
        elif isinstance(handler, types.MethodType):
            return handler.__func__, (handler.__self__,), args, keywords
        elif isinstance(handler, types.FunctionType):
            return handler, (), args, keywords
        else:
            call = next((vars(k)["__call__"] for k in type(handler).__mro__
                         if "__call__" in vars(k)), None)  # (as written: review 131)
            first: tuple[Any, ...] = (handler,)
            if isinstance(call, staticmethod):
                call, first = call.__func__, ()
            elif isinstance(call, classmethod):
                call, first = call.__func__, (type(handler),)
            if isinstance(call, types.FunctionType):
                return call, first, args, keywords
            break
    return None, (), (), {}


_VARARGS, _VARKEYWORDS = 0x04, 0x08  # (a code object's flags: it takes *args, **kwargs)
_MISSING = object()


def _runs_as(frame: FrameType, func: Any, bound: tuple[Any, ...], partial_args: tuple[Any, ...],
             keywords: dict[str, Any], loose: bool = False) -> bool:
    """Whether ``frame``, running ``func``'s code, is a call of this very handler: its
    first arguments are ``bound`` and ``partial_args`` (by identity), its named ones
    ``keywords``, its closure ``func``'s (a decorator's ``*args`` wrapper included: review
    130). ``loose``: only ``bound`` and the closure are compared."""
    code = frame.f_code
    try:
        values = frame.f_locals
        given = [values.get(name, _MISSING) for name in code.co_varnames[:code.co_argcount]]
        if code.co_flags & _VARARGS:
            given += list(values.get(
                code.co_varnames[code.co_argcount + code.co_kwonlyargcount], ()))
        if len(given) < len(bound) or any(a is not b for a, b in zip(given, bound, strict=False)):
            return False
        for name, cell in zip(code.co_freevars, func.__closure__ or (), strict=False):
            if values.get(name, cell) is not cell.cell_contents:
                return False
        if loose:
            return True
        args = (*bound, *partial_args)
        if len(given) < len(args) or any(a is not b for a, b in zip(given, args, strict=False)):
            return False
        # Called with (signum, frame) after those: the rest are the handler's defaults
        # (a handler made in a loop, ``lambda s, f, name=name: ...``: review 131)
        defaults = func.__defaults__ or ()
        first_default = code.co_argcount - len(defaults)
        for i in range(max(len(args) + 2, first_default), min(code.co_argcount, len(given))):
            if given[i] is not defaults[i - first_default]:
                return False
        for name, value in (func.__kwdefaults__ or {}).items():
            if name not in keywords and values.get(name, _MISSING) is not value:
                return False
        if keywords and code.co_flags & _VARKEYWORDS:
            at = code.co_argcount + code.co_kwonlyargcount + bool(code.co_flags & _VARARGS)
            values = {**values.get(code.co_varnames[at], {}), **values}
        for name, value in keywords.items():
            if values.get(name, _MISSING) is not value:
                return False
    except (ValueError, AttributeError, TypeError):  # (an empty cell, say): as far as known
        return True
    return True


def _at_exit_started() -> None:
    global _shutting_down
    _shutting_down = True


def _at_exit_closed() -> None:
    global _exit_closed
    _exit_closed = True


def _script_over(frame: FrameType | None = None) -> bool:
    """The main thread's script is over: Python's shutdown has begun (threading's exit
    hooks, ours among them, or one registered after ours that runs before it; the joins
    of the threads; atexit). ``frame``: the main thread's, interrupted by the handler
    (in threading's shutdown, before it says so)."""
    if _shutting_down or getattr(threading, "_SHUTTING_DOWN", False):
        return True
    while frame is not None and frame.f_back is not None:
        frame = frame.f_back
    return frame is not None and frame.f_code is _SHUTDOWN_CODE


_SHUTDOWN_CODE = getattr(getattr(threading, "_shutdown", None), "__code__", None)


def _final_exit() -> None:
    """Last exit handler: a SIGTERM that came while Python joined the runs' threads."""
    failed = _failed_at_exit is not None and _term_at is not None
    if not (_exit_143 or failed or _app_exit is not None):
        return
    _chain_at_exit()
    if _app_exit is not None:
        code = _exit_status(_app_exit)
    elif failed:  # (not 143: a pod failure policy must not retry it as saved; review 62)
        code = (_failed_at_exit or 1) if _settings.EXIT_CODES.read() else 1
    else:
        code = 143
    logging.shutdown()  # registered before us, it would not run after os._exit
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(OSError, ValueError, AttributeError):
            stream.flush()
    os._exit(code)


_app_exit: BaseException | None = None  # what the application's handler raised at exit
_app_raised: BaseException | None = None  # what it raised last (see _chain)
_failed_at_exit: int | None = None  # the exit code of an exit-time save's error, if one failed


def _chain_at_exit() -> None:
    """chain_once() at exit: what the application's handler raises (``sys.exit(7)``)
    decides the exit status, as it does during the script (review 62: raised out of an
    exit hook, Python printed and dropped it, and the exit was 143)."""
    global _app_exit
    try:
        chain_once()
    except BaseException as err:
        _app_exit = err


def _exit_status(err: BaseException) -> int:
    """The status Python exits with for ``err`` raised out of the script (printed as
    Python prints it)."""
    if isinstance(err, SystemExit):
        code = err.code
        if code is None or isinstance(code, int):
            return (code or 0) & 0xFF  # (what the system keeps of it; os._exit takes a C int)
        with contextlib.suppress(Exception):
            print(code, file=sys.stderr)
        return 1
    if isinstance(err, KeyboardInterrupt):
        return 128 + signal.SIGINT  # (as a shell reports a process that SIGINT ended)
    with contextlib.suppress(Exception):
        sys.excepthook(type(err), err, err.__traceback__)
    return 1


_closing: list[Active] = []  # runs the exit hook or the watchdog closes (see _close_open)


def _close_open(run: Active) -> None:
    """Close a suspended run at the script's end (it saves what its consumer held), once:
    by the exit hook, or by the watchdog while another exit hook holds ours up."""
    global _app_exit, _failed_at_exit
    with _lock:
        if run not in _runs or any(r is run for r in _closing):
            return
        _closing.append(run)
    try:
        run.close_at_exit()
    except BaseException as err:
        if err is _app_raised:  # the application's handler, reached by the SIGTERM sent
            _app_exit = err  # on as the iterator closed: its status is the exit's; the
            return  # save was done (review 62)
        with _lock:
            if run in _runs:  # (not closed: "already executing", say; the exit hook may)
                _closing[:] = [r for r in _closing if r is not run]
        # exit goes on; say what was not saved
        code = getattr(err, "exit_code", None)
        if isinstance(code, int):  # (a SIGTERM's exit says so: review 62, it was 143,
            _failed_at_exit = code  # "saved")
            log.error("saving a run at exit failed: %s", err)
        else:  # (the body's cleanup, say, after the save: review 64)
            log.error("closing run %s at exit failed: %s: %s", run.where(),
                      type(err).__name__, err)


def _at_exit() -> None:
    """Before the interpreter joins threads: save what suspended runs hold; let the
    runs a SIGTERM stopped in other threads finish their save."""
    _at_exit_started()
    try:
        for run in list(_runs):
            if run.suspended and (run.thread is threading.current_thread()
                                  or not run.thread.is_alive()):
                _close_open(run)
    finally:
        _at_exit_closed()
    if _term_at is not None:
        # The watchdog acts meanwhile. A save is waited for: Python may not join the
        # run's thread (3.11 marks a thread stopped when the handler's Terminated cut
        # the main thread's join of it), so this wait is all the save gets.
        _wait_for_flagged_saves(_term_at + 2 * term_timeout())
        _chain_at_exit()
        if not interactive():
            threading.Thread(target=_exit_guard, name="resumable-exit", daemon=True).start()


# -- Ctrl-C while a run keeps its books ---------------------------------------------------
# Python raises KeyboardInterrupt between any two bytecodes of the main thread. Raised in
# the library's own code -- a snapshot being handed to the upload thread, a state being
# written to its spill file, the cleanup at the end of a call -- it left a lock held (a
# `with` block's exit is an instruction like any other), a snapshot released twice or a
# spill file open, and the program hung at its next wait for the upload thread or ended
# with a RuntimeError instead of KeyboardInterrupt. So while a run on the main thread is
# in its own code (not in its body, not in an ``f.iter`` consumer) it is shielded: a
# Ctrl-C is held, and delivered where it is safe -- thrown into the body at its yield when
# the body resumes (as if it came right then), or raised by the call once its cleanup is
# done. A second Ctrl-C while one is held raises at once. The handler is installed only
# over Python's default one (an application's or a framework's own handler is left to
# work as it does), only during calls made in the main thread, and restored after them.
# While code that is not the library's runs (the body, an ``f.iter`` consumer) Python's
# own handler is lent back (``unshield``): code that looks for it finds it (asyncio.run
# installs its own only over it, and then cancels its main task on a Ctrl-C), and one
# that saves and restores the handler restores Python's. ``shield`` takes it back, unless
# that code put a handler of its own in place, which is then left as it is.

_shielded = False  # the main thread's run is in its own code
_sigint_held = False  # a Ctrl-C came while shielded, not yet delivered
_sigint_calls = 0  # main-thread calls using the handler
_sigint_pid = 0  # the process that installed it
_sigint_lock = threading.Lock()  # _sigint_calls: a call may end in another thread
# signal.signal/getsignal without signal.py's enum wrapping (16 us a pair here, against
# 0.7): ``unshield``/``shield`` run at every yield.
_set_handler, _get_handler = _signal_module.signal, _signal_module.getsignal
_SIGINT = int(signal.SIGINT)
# What code outside the library had in place when the library took the handler over
# (Python's, or one a body installed): lent back while that code runs, and put back when
# the last call ends.
_lent: Any = signal.default_int_handler
_held_error: BaseException | None = None  # what the lent handler raised for a held Ctrl-C
# A first Ctrl-C that came while what another signal's handler raised is held (review 57:
# it was taken for a second one and raised at once, in the library's code): delivered at
# the yield after the one that gets the held error, or at the call's end.
_ctrl_c_after = False


# A second Ctrl-C, raised at once while one was held, is marked so: every call it ends
# (nested ones, and the calls around them) gives up its saves still under way rather
# than wait for them. A mark on the exception, not a flag of the process: a later
# KeyboardInterrupt (the body's own, another thread's) is not taken for it (review 159).
_AT_ONCE = "_resumable_stops_at_once"


def _at_once(err: BaseException) -> BaseException:
    with contextlib.suppress(AttributeError, TypeError):
        setattr(err, _AT_ONCE, True)
    return err


def at_once(err: BaseException | None) -> bool:
    """Whether ``err`` is a Ctrl-C that stops at once (a second one while the first was
    held), not one the body or the application raised; or a KeyboardInterrupt raised
    while such a one was on its way out (a third Ctrl-C, by Python's handler, as the
    body's frames unwind: it takes the place of the one marked)."""
    seen = 0
    while err is not None and seen < 8:
        if getattr(err, _AT_ONCE, False) is True:
            return True
        if not isinstance(err, KeyboardInterrupt):
            return False
        err, seen = err.__context__, seen + 1
    return False


def _on_sigint(signum: int, frame: FrameType | None) -> None:
    global _sigint_held, _held_error, _ctrl_c_after
    if _shielded and os.getpid() == _sigint_pid and (
            not _sigint_held or (_holds_another() and not _ctrl_c_after)):
        if _sigint_held:
            _ctrl_c_after = True  # (the first Ctrl-C: after what is held)
        _sigint_held = True
        # no logging here: the interrupted code may hold the logging lock
        with contextlib.suppress(OSError):
            os.write(2, b"resumable: Ctrl-C: stopping once the save under way is handed "
                        b"over (Ctrl-C again stops at once)\n")
        return
    second = _shielded and _sigint_held and os.getpid() == _sigint_pid
    _sigint_held, _held_error, _ctrl_c_after = False, None, False
    if second:
        raise _at_once(KeyboardInterrupt())
    signal.default_int_handler(signum, frame)  # KeyboardInterrupt, as without us


def _holds_another() -> bool:
    """What is held is another signal's handler's exception, not a Ctrl-C: neither a
    KeyboardInterrupt nor raised by the SIGINT handler lent to the body (one that raises
    its own exception for a Ctrl-C, review 58: its second Ctrl-C must raise at once)."""
    err = _held_error
    if err is None or isinstance(err, KeyboardInterrupt):
        return False
    code = getattr(getattr(_lent, "__func__", _lent), "__code__", None)
    tb = err.__traceback__
    while tb is not None:
        if tb.tb_frame.f_code is code:
            # (one handler may serve SIGINT and another signal: the signal it ran for,
            # its signum argument, says which; review 59)
            signum = tb.tb_frame.f_locals.get(code.co_varnames[code.co_argcount - 2]) \
                if code.co_argcount >= 2 else None
            return isinstance(signum, int) and signum != _SIGINT
        tb = tb.tb_next
    return True


def sigint_begin() -> bool | None:
    """A call starts in the main thread: shield it (installing the handler if Python's
    default one is there). Returns what ``sigint_end`` needs; None: not shielded."""
    global _shielded, _sigint_calls, _sigint_pid, _lent
    if threading.current_thread() is not threading.main_thread():
        return None
    # (no call under way: nothing to go back to, whatever a Ctrl-C left the flag at)
    outer = _shielded and _sigint_calls > 0
    _shielded = True  # first: a Ctrl-C once ours is in place is held, not lost
    try:
        with _sigint_lock:
            if _sigint_calls == 0:
                handler = signal.getsignal(signal.SIGINT)
                # (ours, left by a call that ended in another thread: reused)
                if handler is not _on_sigint or os.getpid() != _sigint_pid:
                    if handler is not signal.default_int_handler:
                        _shielded = outer
                        return None
                    # (first: a Ctrl-C as signal.signal() returns is held by ours, review 50)
                    _sigint_pid = os.getpid()
                    _lent = signal.default_int_handler
                    signal.signal(signal.SIGINT, _on_sigint)
            elif os.getpid() == _sigint_pid:
                # Made in the body (or consumer) of another call: take the handler back from
                # it, Python's or one that code installed since (put back at this call's end)
                handler = _get_handler(_SIGINT)
                if _taken_over(handler):
                    _lent = handler
                    _set_handler(_SIGINT, _on_sigint)
            _sigint_calls += 1
    except (ValueError, OSError):  # not the main interpreter
        _shielded = outer
        return None
    except BaseException:  # a Ctrl-C before ours was in place: raised, no shield left up
        _shielded = outer
        raise
    return outer


def _taken_over(handler: Any) -> bool:
    """Whether the library takes this SIGINT handler over while it works: Python's, or
    one a body installed; not ours, not SIG_IGN or SIG_DFL (plain ints here, review 51),
    not None (one not set from Python)."""
    return handler is not _on_sigint and handler is not None and not isinstance(handler, int)


def from_sigint(err: BaseException) -> bool:
    """Whether an exception raised as the SIGINT handler changed hands is held for the
    body, as a Ctrl-C is: anything but the library's SIGTERM handler's Terminated (a swap
    runs every pending handler: review 53). A program's own handler of another signal (a
    SIGALRM deadline's TimeoutError) is held too, and thrown in at the body's yield, not
    raised in the library's code with the state just yielded unsaved (review 54)."""
    return not isinstance(err, TERMINATION)


def held_what() -> str:
    """How the log names what is held: a Ctrl-C, or what a handler raised."""
    err = _held_error
    if err is None or isinstance(err, KeyboardInterrupt):
        return "Ctrl-C"
    return f"{type(err).__name__} (raised by a signal handler)"


def unshield() -> None:
    """Code that is not the library's runs now (the body, an f.iter consumer): a Ctrl-C
    is handled at once, by the handler that code had (Python's, or one it installed),
    lent back to it. Main thread, during a call that ``sigint_begin`` shielded; run at
    every yield.

    A Ctrl-C that comes as the handler changes hands is held (the caller delivers it to
    the body): signal.signal() runs the handlers of signals pending before it swaps
    (ours, shielded, holds), and a signal is often delivered at a system call, the swap's
    own, and handled right after it, by the handler lent back (review 50: a quarter of
    the Ctrl-Cs sent to a busy loop); what that handler raised is kept, and thrown into
    the body (review 51: not run twice). A second one raises, as ours does.
    """
    global _shielded, _sigint_held, _held_error
    before: BaseException | None = None  # another handler's, raised before the swap
    while _get_handler(_SIGINT) is _on_sigint:
        try:
            _set_handler(_SIGINT, _lent)
        except BaseException as err:
            if _get_handler(_SIGINT) is _on_sigint:  # (raised before the swap)
                if (before is not None or isinstance(err, KeyboardInterrupt)
                        or not from_sigint(err)):
                    raise  # (ours: a second Ctrl-C; or a SIGTERM's; or two)
                # Another signal's handler (a SIGALRM deadline's): the swap is done still,
                # and its exception raised after it, for the body (review 57: the body ran
                # with the library's handler, a Ctrl-C held for a whole generation)
                before = err
                continue
            if _sigint_held and from_sigint(err):
                _at_once(err)
                raise  # (a second one)
            if not from_sigint(err):
                raise  # (not a Ctrl-C)
            _sigint_held, _held_error = True, err
    _shielded = False
    if before is not None:
        raise before


def shield(came: BaseException | None = None) -> BaseException | None:
    """The library's own code again: take the handler over (Python's, or one the code
    installed, lent back at the next ``unshield``; not SIG_IGN or SIG_DFL) and hold a
    Ctrl-C from now on. What the lent handler raised as ours went in (a signal pending
    before the swap), or just before this call (``came``: the caller caught it as the
    call began), is held, to be thrown into the body. Returns a second one, which the
    caller raises at once."""
    global _shielded, _sigint_held, _held_error, _lent, _ctrl_c_after
    _shielded = True  # first: once ours is in, a Ctrl-C is held
    if came is not None and not from_sigint(came):
        shield()  # (a SIGTERM's: the library goes on, shielded, as it stops)
        raise came
    if _sigint_calls:  # (no call counted: a child forked in the body)
        handler = _get_handler(_SIGINT)
        if _taken_over(handler):
            _lent = handler
            while _get_handler(_SIGINT) is not _on_sigint:
                try:
                    _set_handler(_SIGINT, _on_sigint)
                except BaseException as err:
                    if not from_sigint(err):
                        raise  # (not a Ctrl-C: the SIGTERM handler's, as before)
                    if came is not None or (_get_handler(_SIGINT) is _on_sigint
                                             and isinstance(err, KeyboardInterrupt)):
                        return _at_once(err)  # (two; or ours raised it, holding one)
                    came = err  # (not swapped: signal.signal() ran the lent handler first)
    if came is None:
        return None
    if _sigint_held:
        if _holds_another() and isinstance(came, KeyboardInterrupt) and not _ctrl_c_after:
            _ctrl_c_after = True  # the first Ctrl-C, after what is held (review 57)
            return None
        return _at_once(came)  # a second Ctrl-C: at once, as ours does
    _sigint_held, _held_error = True, came
    return None


def deliver_held() -> BaseException | None:
    """A held Ctrl-C for the code the handler is lent to (``unshield`` first): what the
    lent handler raised for it, if it ran already as the handler changed hands; else
    what it raises now (Python's: KeyboardInterrupt), or None if it handled it
    otherwise."""
    global _held_error, _sigint_held, _ctrl_c_after
    err, _held_error = _held_error, None
    if err is not None:
        if _ctrl_c_after:  # a Ctrl-C came after it: held again, for the next delivery
            _sigint_held, _ctrl_c_after = True, False
        return err
    if _lent is signal.default_int_handler:
        return KeyboardInterrupt()
    try:
        signal.raise_signal(signal.SIGINT)  # (runs the handler in place, in this thread)
    except BaseException as raised:
        return raised
    return None


def sigint_held() -> bool:
    """A Ctrl-C is held (a long wait in the run's own code ends early for it)."""
    return _sigint_held


def hold_again() -> None:
    """A Ctrl-C taken (``take_sigint``) but not delivered: held again, for the next yield."""
    global _sigint_held
    _sigint_held = True


def take_sigint() -> bool:
    """A Ctrl-C was held: True once (the caller delivers it)."""
    global _sigint_held
    held, _sigint_held = _sigint_held, False
    return held


def sigint_end(outer: bool | None, deliver: bool) -> None:
    """The call ends: back to the caller's shield; the handler goes with the last call.
    With ``deliver`` a held Ctrl-C is raised now (not over a call that ends by one)."""
    global _shielded, _sigint_calls, _sigint_held, _held_error, _ctrl_c_after
    if outer is None:
        return
    if threading.current_thread() is not threading.main_thread():
        # An f.iter run the main thread began, closed or finished by another thread: the
        # main thread's shield is the main thread's (it is in its own code now), and the
        # handler can only be restored from there (the next call reuses or restores it).
        with _sigint_lock:
            _sigint_calls = max(0, _sigint_calls - 1)
        return
    with _sigint_lock:  # (the shield is still up: a Ctrl-C from here to the swap is held)
        _sigint_calls = max(0, _sigint_calls - 1)
        last = _sigint_calls == 0
    try:
        with contextlib.suppress(ValueError, OSError):
            if last:  # what code outside the library had: Python's, or the body's own
                if signal.getsignal(signal.SIGINT) is _on_sigint:
                    signal.signal(signal.SIGINT, _lent)
            elif not outer and _get_handler(_SIGINT) is _on_sigint:
                # back in the body (or consumer) of the call this one was made in (a Ctrl-C
                # pending as the handler is swapped is held by ours, delivered below)
                _set_handler(_SIGINT, _lent)
    except BaseException:
        # A Ctrl-C right after the swap (signal.signal() runs Python code after it) is
        # raised by the default handler: the shield goes down with it. (A second one
        # raised by ours before the swap: ours is not left behind, review 51.)
        _shielded, _sigint_held, _held_error, _ctrl_c_after = outer, False, None, False
        if last:
            with contextlib.suppress(BaseException):
                if _get_handler(_SIGINT) is _on_sigint:
                    _set_handler(_SIGINT, _lent)
        raise
    # (a Ctrl-C just before this line, the default handler back, leaves the flag up with
    # no call under way: the next sigint_begin ignores it)
    _shielded = outer
    if outer:
        return  # inside another call's own code: that call delivers it
    held, _sigint_held = _sigint_held, False
    if held and deliver:
        err = deliver_held()
        if _sigint_held:  # a Ctrl-C came after what another handler raised: it ends the call
            _sigint_held = False
            ctrl_c = deliver_held()
            if ctrl_c is not None:
                raise ctrl_c from err
        if err is not None:
            raise err
    _held_error, _ctrl_c_after = None, False


# -- workers a group SIGTERM ended ---------------------------------------------------------
# A SIGTERM to the process group (``kill -TERM -PGID``, ``tini -g``, dumb-init) reaches a
# pool's workers too, and they die mid-task (forked ones get the default action back;
# spawned ones have it). A body that catches the pool's error (a BrokenProcessPool) and
# goes on, with a penalty for the evaluations that failed, yields a state computed
# around them: saved, it would be resumed as if nothing had happened (review 120). So a
# yield reached after a SIGTERM is not saved when one of the multiprocessing workers the
# generation could use was ended by a signal: those alive at the previous yield (the
# pool a GA keeps), at the SIGTERM, or now. A pool made and joined within the generation
# before the handler ran escapes this (its workers are forgotten once joined).


_signalled_workers: tuple[Any, ...] | None = None  # workers() as the SIGTERM came


def _note_workers() -> None:
    global _signalled_workers
    if _signalled_workers is None:
        _signalled_workers = workers()


def signalled_workers() -> tuple[Any, ...]:
    return _signalled_workers or ()


def workers() -> tuple[Any, ...]:
    """This process's multiprocessing children not known to have ended: (process,) each.

    Cheap enough for every yield: a look at multiprocessing's own set, no system call."""
    mp = sys.modules.get("multiprocessing.process")
    children = getattr(mp, "_children", None)
    if not children:
        return ()
    try:
        return tuple(p for p in tuple(children)
                     if getattr(getattr(p, "_popen", None), "returncode", 0) is None)
    except Exception:  # (not the multiprocessing it should be)
        return ()


def killed(*groups: tuple[Any, ...]) -> list[str]:
    """Those of ``groups``' processes a SIGTERM has ended since, as "pid (how)".

    Only SIGTERM: a worker the body killed (``p.kill()``, a runaway evaluation) or the
    OOM killer ended (SIGKILL) does not hold up the save (review 122). A forkserver's
    workers report 255 when the group's SIGTERM ended the forkserver too, which tells
    their parent how they ended (review 122): counted as well. A pool the body ends with
    ``terminate()`` in that generation (``with Pool() as p``) sends SIGTERM: counted,
    one generation redone."""
    found, seen = [], set()
    deadline = time.monotonic() + 0.2  # (for all the exit codes waited for: see below)
    for group in groups:
        for proc in group:
            if id(proc) in seen:
                continue
            seen.add(id(proc))
            try:
                code = proc.exitcode  # (polls: a child ended but not yet waited for)
                forkserver = type(proc._popen).__module__.endswith("popen_forkserver")
                if code is None and _ended(proc):
                    # Ended, and waited for by another thread (a pool's manager joining
                    # it) that has yet to record how: given a moment (review 125: a worker
                    # of maxtasksperchild=1 that exited 0 counted). Unknown after it: the
                    # generation's pool broke, which is what this looks for.
                    code = _recorded_exit(proc, deadline)
                    if code is None:
                        found.append(f"{proc.pid} (ended)")
                        continue
            except Exception:
                continue
            if code == -signal.SIGTERM:
                found.append(f"{proc.pid} (SIGTERM)")
            elif code == 255 and forkserver:
                found.append(f"{proc.pid} (its forkserver ended)")
    return found


def _recorded_exit(proc: Any, deadline: float) -> int | None:
    """The exit code another thread is about to record (it waited for the process), or
    None at ``deadline`` (a fifth of a second for all of them; only after a SIGTERM)."""
    while True:
        code = getattr(proc._popen, "returncode", None)
        if code is not None:
            return int(code)
        if time.monotonic() >= deadline:
            return None
        time.sleep(0.001)  # (lets go of the GIL, which that thread needs to record it)


def _ended(proc: Any) -> bool:
    """The process has ended (its sentinel, which its end makes readable, is)."""
    from multiprocessing.connection import wait

    return bool(wait([proc.sentinel], 0))


def _after_fork_in_child() -> None:
    global _installed, _pinned, _term_at, _chained, _lock, _exit_143, _interrupt_main
    global _relay_fds, _relay_echoes, _relay_holds, _unwinding
    global _shielded, _sigint_held, _sigint_calls, _sigint_lock, _lent, _held_error
    global _ctrl_c_after, _left_unacted, _redeliver, _error_kept, _acting, _sent_again
    global _main_stopped, _signalled_workers, _put_back, _forks
    _unwinding = False
    if signal.getsignal(signal.SIGINT) is _on_sigint:
        signal.signal(signal.SIGINT, _lent)  # the child's own Ctrl-C
    _lent = signal.default_int_handler
    _held_error = None
    _shielded = _sigint_held = _ctrl_c_after = False
    _sigint_calls = 0
    _sigint_lock = threading.Lock()
    if _leaving:  # forked while the parent leaves after a SIGTERM: do not outlive it
        os._exit(143)
    if _relay_fds is not None:  # the relay thread is the parent's; its pipe too
        _stop_relay()
        for fd in _relay_fds:
            with contextlib.suppress(OSError):
                os.close(fd)
        _relay_fds, _relay_echoes, _relay_holds = None, 0, False
    _lock = threading.Condition(threading.Lock())  # another thread may have held it
    if _installed and signal.getsignal(signal.SIGTERM) is _handler:
        # A pool's worker forked during a run: the default action (see the README). With
        # no run active: what ours would hand the SIGTERM to, as without us (review 134:
        # the program's handler behind ours was lost to the default action)
        front = _put_back[0] if _put_back is not None and _pinned else _previous
        idle = not _runs and _term_at is None and callable(front)
        signal.signal(signal.SIGTERM, front if idle else signal.SIG_DFL)
    _installed = _pinned = _chained = False
    _term_at = None
    _signalled_workers, _put_back = None, None
    _forks += 1
    _calling.clear()  # (_replaced_handlers stays: a child's handlers are its parent's)
    _in_front.clear()
    _exit_143 = _interrupt_main = False
    _left_unacted = _redeliver = _error_kept = _acting = _sent_again = False
    _main_stopped = False
    _closing.clear()
    _runs.clear()
    _flagged.clear()


# A SIGTERM that reaches a child before the hook above has run would find the parent's
# handler and wakeup fd, the relay's pipe: the parent's relay then took it for its own
# (review 135: a pool's terminate() of a worker just forked killed an idle parent, or
# stopped its run), or ours took the default action where the program's handler would
# have run. The forking thread blocks SIGTERM across the fork; the child unblocks it
# once it is set up, and a SIGTERM that came meanwhile is delivered then.
# Each call is a check point where a pending signal's handler may raise (a Ctrl-C as the
# process forks): the record is made before the block and dropped after the unblock, with
# the C functions (signal's wrappers add frames), and the unblock is registered twice, so
# that one raising is done again by the next (review 136: SIGTERM stayed blocked for good,
# in the parent, or in a child and the programs it execs).
_fork_masks: dict[int, bool] = {}  # forking thread -> SIGTERM was blocked there before
_TERM = int(signal.SIGTERM)


def _block_for_fork() -> None:
    if _relay_fds is None and not _installed:
        return
    tid = _thread.get_ident()
    try:
        blocked = _TERM in _signal.pthread_sigmask(signal.SIG_BLOCK, ())  # (reads it)
    except (OSError, ValueError):
        return
    _fork_masks[tid] = blocked
    _signal.pthread_sigmask(signal.SIG_BLOCK, {_TERM})


def _unblock_after_fork() -> None:
    tid = _thread.get_ident()
    if _fork_masks.get(tid, True) is False:
        _signal.pthread_sigmask(signal.SIG_UNBLOCK, {_TERM})
    _fork_masks.pop(tid, None)


os.register_at_fork(before=_block_for_fork, after_in_parent=_unblock_after_fork,
                    after_in_child=_after_fork_in_child)
# (hooks of their own, after those: run even if one before raised)
os.register_at_fork(after_in_parent=_unblock_after_fork, after_in_child=_unblock_after_fork)
os.register_at_fork(after_in_child=_unblock_after_fork)
