"""Review 57: a program's own signal handler (a SIGALRM deadline that raises) running as
the library moves the SIGINT handler, and a real Ctrl-C around it.

Each child makes the SIGALRM pending at one exact point (blocked, sent, unblocked: it
runs at the next instruction) and sends its one Ctrl-C with ``signal.raise_signal`` from
the main thread while the state is pickled (the library's own code, shielded).
"""

from __future__ import annotations

from pathlib import Path

from tests.test_sigint_review15 import _child

_COMMON = """
    import faulthandler, json, os, signal, sys, threading, traceback
    faulthandler.dump_traceback_later(50, exit=True)
    from resumable import checkpointed, _signals

    store = sys.argv[1]
    real, ours = _signals._set_handler, _signals._on_sigint
    armed = []

    def fire(sig):  # pending now, handled at the next instruction
        signal.pthread_sigmask(signal.SIG_BLOCK, [sig])
        try:  # (to this thread: a process's signal may go to the upload thread, which
            # runs no handler, and the handler then ran at the main thread's next check,
            # later than this point: 1 run in 10 or so beside CPU hogs)
            signal.pthread_kill(threading.main_thread().ident, sig)
        finally:
            signal.pthread_sigmask(signal.SIG_UNBLOCK, [sig])

    def on_alarm(signum, frame):
        raise TimeoutError("generation deadline")
    signal.signal(signal.SIGALRM, on_alarm)

    class Pop:
        '''Pickled on the loop's thread, in the library's own code: a Ctrl-C there is held.'''
        def __init__(self, i, ctrl_c=False):
            self.i, self.ctrl_c = i, ctrl_c
        def __getstate__(self):
            if self.ctrl_c:
                self.ctrl_c = False
                signal.raise_signal(signal.SIGINT)  # one Ctrl-C, during the save
            return {"i": self.i, "ctrl_c": False}

    log, out = [], {}

    @checkpointed(store=store, run_id="r", every="generation")
    def body(*, state=None):
        i = state.i if state else 0
        while i < 5:
            i += 1
            if i == 2:
                armed.append(1)
            try:
                yield Pop(i, ctrl_c=(i == CTRL_C_AT))
            except TimeoutError:
                log.append(f"TimeoutError at yield {i}")
            except KeyboardInterrupt:
                log.append(f"KeyboardInterrupt at yield {i}")
                raise
            if i == 2 and CHECK_HANDLER:
                handler = signal.getsignal(signal.SIGINT)
                out["handler in body"] = handler is signal.default_int_handler
                try:
                    signal.raise_signal(signal.SIGINT)  # a Ctrl-C while the body works
                    out["ctrl-c in body"] = "not raised"
                except KeyboardInterrupt:
                    out["ctrl-c in body"] = "raised"
                    raise
        return i

    def finish():
        try:
            out["result"] = body()
        except KeyboardInterrupt as err:
            where = traceback.extract_tb(err.__traceback__)[-1]
            out["result"] = "KeyboardInterrupt in " + where.name
        out["log"] = log
        latest = body.latest()
        out["saved"] = latest.step if latest else None
        print(json.dumps(out))
"""

_AT_UNSHIELD = _COMMON.replace("CTRL_C_AT", "0").replace("CHECK_HANDLER", "True") + """
    def swapping(signum, handler):
        if handler is not ours and armed == [1]:  # lending it back for the body, yield 2
            armed.append(2)
            fire(signal.SIGALRM)  # runs before the swap
        return real(signum, handler)
    _signals._set_handler = swapping
    finish()
"""


def test_another_handlers_error_before_the_swap_leaves_the_body_unshielded(
    tmp_path: Path
) -> None:
    """The TimeoutError raised before the handler was lent back reached the body, but the
    swap was never made: the body ran with the library's handler, and a Ctrl-C there
    was held until its next yield (a whole generation)."""
    out = _child(_AT_UNSHIELD, str(tmp_path / "store"))
    assert out["handler in body"] is True, out
    assert out["ctrl-c in body"] == "raised", out
    assert out["log"] == ["TimeoutError at yield 2"], out


_AFTER_SHIELD = _COMMON.replace("CTRL_C_AT", "2").replace("CHECK_HANDLER", "False") + """
    def swapping(signum, handler):
        done = real(signum, handler)
        if handler is ours and armed == [1]:  # taken back at yield 2, before its save
            armed.append(2)
            fire(signal.SIGALRM)  # held for the body
        return done
    _signals._set_handler = swapping
    finish()
"""


def test_a_first_ctrl_c_while_another_handlers_error_is_held_is_held_too(
    tmp_path: Path
) -> None:
    """With the TimeoutError held, the one Ctrl-C during the save was taken for a second
    one: raised at once in the library's code, step 2 never saved, the TimeoutError
    dropped. Both reach the body now, in order, at its next yields."""
    out = _child(_AFTER_SHIELD, str(tmp_path / "store"))
    assert out["log"] == ["TimeoutError at yield 2", "KeyboardInterrupt at yield 3"], out
    assert out["result"] == "KeyboardInterrupt in body", out
    assert out["saved"] == 3, out


_AT_DELIVERY = _COMMON.replace("CTRL_C_AT", "2").replace("CHECK_HANDLER", "False") + """
    def profile(frame, event, arg):
        if event == "call" and frame.f_code is _signals.deliver_held.__code__:
            sys.setprofile(None)
            fire(signal.SIGALRM)  # as the held Ctrl-C is about to be delivered
    sys.setprofile(profile)
    finish()
"""


def test_a_held_ctrl_c_survives_another_handlers_error_as_it_is_delivered(
    tmp_path: Path
) -> None:
    """The Ctrl-C held during step 2's save was taken, then the TimeoutError raised as
    it was to be delivered replaced it: the run went on to its end as if no Ctrl-C had
    come (result 5). It waits for the next yield now, as review 56 made it do when the
    error comes one step earlier."""
    out = _child(_AT_DELIVERY, str(tmp_path / "store"))
    assert out["log"] == ["TimeoutError at yield 2", "KeyboardInterrupt at yield 3"], out
    assert out["result"] == "KeyboardInterrupt in body", out


_BODY_HANDLER = """
    import faulthandler, json, os, signal, sys, threading, traceback
    faulthandler.dump_traceback_later(50, exit=True)
    from resumable import checkpointed, _signals

    store = sys.argv[1]
    real, ours = _signals._set_handler, _signals._on_sigint
    armed, log, out = [], [], {}

    class Stop(Exception):
        pass

    def on_int(signum, frame):  # the body's own Ctrl-C handling: its own exception
        log.append("the body's handler ran")
        raise Stop("Ctrl-C")

    def fire(sig):  # pending now, handled at the next instruction
        signal.pthread_sigmask(signal.SIG_BLOCK, [sig])
        try:
            signal.pthread_kill(threading.main_thread().ident, sig)
        finally:
            signal.pthread_sigmask(signal.SIG_UNBLOCK, [sig])

    class Pop:
        def __init__(self, i, ctrl_c=False):
            self.i, self.ctrl_c = i, ctrl_c
        def __getstate__(self):
            if self.ctrl_c:
                self.ctrl_c = False
                signal.raise_signal(signal.SIGINT)  # Ctrl-C 2, during the save
                log.append("Ctrl-C 2 did not raise")
            return {"i": self.i, "ctrl_c": False}

    @checkpointed(store=store, run_id="r")
    def body(*, state=None):
        signal.signal(signal.SIGINT, on_int)  # (the body's: taken over while the library works)
        i = state.i if state else 0
        while i < 5:
            i += 1
            if i == 2:
                armed.append(1)
            try:
                yield Pop(i, ctrl_c=(i == 2))
            except Stop:
                log.append(f"Stop at yield {i}")
        return i

    def swapping(signum, handler):
        if handler is ours and armed == [1]:  # taken back at yield 2, before its save
            armed.append(2)
            fire(signal.SIGINT)  # Ctrl-C 1: the body's handler runs before the swap
        return real(signum, handler)
    _signals._set_handler = swapping

    try:
        out["result"] = body()
    except BaseException as err:
        where = traceback.extract_tb(err.__traceback__)[-1]
        out["result"] = f"{type(err).__name__} in {where.name}"
    out["log"] = log
    print(json.dumps(out))
"""


def test_a_second_ctrl_c_raises_at_once_after_the_bodys_own_handler_took_the_first(
    tmp_path: Path
) -> None:
    """The body's SIGINT handler raised its own exception for the first Ctrl-C as the
    handler changed hands; 9aa2617 took that for another signal's error, and held the
    second Ctrl-C (during the save) as if it were the first: it raises at once again."""
    out = _child(_BODY_HANDLER, str(tmp_path / "store"))
    assert out["result"] == "KeyboardInterrupt in _on_sigint", out
    assert out["log"] == ["the body's handler ran"], out


_INSTALL = "        signal.signal(signal.SIGINT, on_int)  # (the body's: taken over while"
_SHARED = _BODY_HANDLER.replace(
    _INSTALL, "        signal.signal(signal.SIGHUP, on_int)  # one handler for both\n" + _INSTALL
).replace("fire(signal.SIGINT)  # Ctrl-C 1", "fire(signal.SIGHUP)  # a SIGHUP, not a Ctrl-C")


def test_a_handler_shared_with_another_signal_does_not_make_a_first_ctrl_c_second(
    tmp_path: Path
) -> None:
    """The body's one stop handler for SIGINT and SIGHUP ran for a SIGHUP as the handler
    changed hands: its exception was taken for a Ctrl-C's (its frame was the lent
    handler's), so the first Ctrl-C, during the save, raised at once in the library's
    code (review 59). The signal it ran for decides now."""
    out = _child(_SHARED, str(tmp_path / "store"))
    assert out["result"] == 5, out
    assert out["log"] == ["the body's handler ran", "Ctrl-C 2 did not raise", "Stop at yield 2",
                          "the body's handler ran", "Stop at yield 3"], out
