"""Review of the Ctrl-C shield (122972b): a held Ctrl-C must not be lost or delayed
without end, and a run handled by two threads must not leave the main thread shielded.

Each test runs a child with a real SIGINT (``signal.raise_signal`` in the main thread at
a chosen call, as tests/test_sigint.py does) and a timeout.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
# Each child starts with Python's own SIGINT handler, as in a terminal: a CI runner may
# start the tests with SIGINT ignored (a background job), and children inherit that.
_DEFAULT_SIGINT = "import signal as _s; _s.signal(_s.SIGINT, _s.default_int_handler)\n"


def _run_child(code: str, *args: str, env: dict[str, str] | None = None,
               timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", _DEFAULT_SIGINT + textwrap.dedent(code), *args],
        capture_output=True, text=True,
        env={**os.environ, **(env or {}),
             "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])},
        timeout=timeout, cwd=ROOT)


def _child(code: str, *args: str, env: dict[str, str] | None = None,
           timeout: float = 60) -> dict:
    proc = _run_child(code, *args, env=env, timeout=timeout)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


# -- a Ctrl-C held during the cleanup of a call that ends by an exception ---------------

_ERROR = """
    import faulthandler, json, signal, sys
    faulthandler.dump_traceback_later(50, exit=True)
    from resumable import checkpointed
    from resumable._decorator import _Execution

    @checkpointed(store=sys.argv[1], run_id="err", every="generation")
    def body(*, state=None):
        i = 0
        while True:
            i += 1
            yield {"i": i}
            if i == 3:
                raise ValueError("body failed")

    fired = []
    def profile(frame, event, arg):  # Ctrl-C as the last state is being saved
        if event == "call" and frame.f_code is _Execution._flush_after_error.__code__:
            fired.append(1)
            sys.setprofile(None)
            signal.raise_signal(signal.SIGINT)

    out = {}
    sys.setprofile(profile)
    try:
        body()
    except KeyboardInterrupt:
        out["raised"] = "KeyboardInterrupt"
    except ValueError:
        out["raised"] = "ValueError"  # a caller that handles the body's error goes on
    sys.setprofile(None)
    out["fired"] = bool(fired)
    out["default_back"] = signal.getsignal(signal.SIGINT) is signal.default_int_handler
    print(json.dumps(out))
"""


def test_a_ctrl_c_held_while_a_failed_call_saves_is_raised_not_dropped(tmp_path: Path) -> None:
    """The body raises; Ctrl-C comes while the call saves its last state. README: a held
    Ctrl-C is raised 'by the call once its cleanup is done'. It was dropped: the call
    ended with the body's ValueError and a caller handling that error went on, the
    user's Ctrl-C lost after its 'stopping once the save ... is handed over' line."""
    out = _child(_ERROR, str(tmp_path / "store"))
    assert out == {"raised": "KeyboardInterrupt", "fired": True, "default_back": True}


_CLOSE = """
    import faulthandler, json, signal, sys
    faulthandler.dump_traceback_later(50, exit=True)
    from resumable import checkpointed
    from resumable._decorator import _Execution

    @checkpointed(store=sys.argv[1], run_id="close", every=5)
    def body(*, state=None):
        i = 0
        while True:
            i += 1
            yield {"i": i}

    fired = []
    def profile(frame, event, arg):  # Ctrl-C while close() saves the state held
        if event == "call" and frame.f_code is _Execution._flush_last.__code__:
            fired.append(1)
            sys.setprofile(None)
            signal.raise_signal(signal.SIGINT)

    out = {}
    it = body.iter()
    for state in it:
        if state["i"] == 3:
            break
    sys.setprofile(profile)
    try:
        it.close()
        out["close"] = "returned"
    except KeyboardInterrupt:
        out["close"] = "KeyboardInterrupt"
    sys.setprofile(None)
    out["fired"] = bool(fired)
    out["default_back"] = signal.getsignal(signal.SIGINT) is signal.default_int_handler
    print(json.dumps(out))
"""


def test_a_ctrl_c_held_while_an_iterator_closes_is_raised_by_close(tmp_path: Path) -> None:
    """``it.close()`` saves the state the consumer holds (a final upload that may take
    long); a Ctrl-C then was held and dropped: close() returned and the program went on."""
    out = _child(_CLOSE, str(tmp_path / "store"))
    assert out == {"close": "KeyboardInterrupt", "fired": True, "default_back": True}


# -- a main-thread run handed to another thread -----------------------------------------

_THREAD = """
    import faulthandler, json, signal, sys, threading
    faulthandler.dump_traceback_later(50, exit=True)
    from resumable import checkpointed

    @checkpointed(store=sys.argv[1], run_id="t", every="generation")
    def body(*, state=None):
        i = 0
        while i < 5:
            i += 1
            yield {"i": i}
        return i

    it = body.iter()
    next(it)  # started in the main thread
    work = it.close if sys.argv[2] == "close" else (lambda: list(it))
    t = threading.Thread(target=work)
    t.start()
    t.join()
    out = {}
    try:
        signal.raise_signal(signal.SIGINT)  # Ctrl-C in the application's own code
        out["ctrl_c"] = "nothing raised"
    except KeyboardInterrupt:
        out["ctrl_c"] = "KeyboardInterrupt"
    # (only the main thread can put the default handler back: its next call does)
    @checkpointed(store=sys.argv[1], run_id="t2", every="generation")
    def again(*, state=None):
        yield {"i": 1}
        return 1

    try:
        out["again"] = again()
    except KeyboardInterrupt:  # the Ctrl-C held all along, thrown into this new call
        out["again"] = "KeyboardInterrupt"
    out["default_back"] = signal.getsignal(signal.SIGINT) is signal.default_int_handler
    print(json.dumps(out))
"""


@pytest.mark.parametrize("how", ["close", "consume"])
def test_a_run_closed_or_consumed_in_another_thread_leaves_ctrl_c_working(
    tmp_path: Path, how: str
) -> None:
    """An ``f.iter`` run started in the main thread, then closed (or iterated to its end)
    by another thread: that thread set the main thread's shield and never took it down,
    so a Ctrl-C in the main thread's own code was only 'held' (a line on stderr) and
    never raised; the handler stayed installed for good, even after later calls."""
    out = _child(_THREAD, str(tmp_path / "store"), how)
    assert out == {"ctrl_c": "KeyboardInterrupt", "again": 1, "default_back": True}


_NESTED = """
    import faulthandler, json, signal, sys, threading, traceback
    faulthandler.dump_traceback_later(50, exit=True)
    from resumable import ConfigurationError, checkpointed
    from resumable._uploader import Uploader

    @checkpointed(store=sys.argv[1], run_id="inner", every="generation")
    def inner(*, state=None):
        i = 0
        while True:
            i += 1
            yield {"i": i}

    @checkpointed(store=sys.argv[1], run_id="outer", every="generation")
    def outer(*, state=None):
        # (refused at the first yield, as the inner run is open: review 57; then closed
        # when the outer call closes its body)
        for s in inner.iter():
            yield {"inner": s["i"]}

    fired = []
    def profile(frame, event, arg):  # Ctrl-C as the outer's cleanup stops its uploader
        if (event == "call" and frame.f_code is Uploader.close.__code__
                and frame.f_locals["self"]._name.endswith("-outer")):
            fired.append(1)
            sys.setprofile(None)
            signal.raise_signal(signal.SIGINT)

    out = {}
    it = outer.iter()
    sys.setprofile(profile)
    try:
        next(it)
        out["close"] = "returned"
    except ConfigurationError:
        out["close"] = "ConfigurationError"
    except KeyboardInterrupt as err:
        out["over"] = type(err.__context__).__name__
        out["close"] = "KeyboardInterrupt"
        out["inside_uploader_close"] = any(
            f.name == "close" and f.filename.endswith("_uploader.py")
            for f in traceback.extract_tb(err.__traceback__))
    sys.setprofile(None)
    out["fired"] = bool(fired)
    out["upload_threads"] = [t.name for t in threading.enumerate()
                             if t.name.startswith("resumable-upload")]
    out["default_back"] = signal.getsignal(signal.SIGINT) is signal.default_int_handler
    print(json.dumps(out))
"""


def test_a_run_closed_by_another_runs_cleanup_leaves_that_cleanup_shielded(
    tmp_path: Path
) -> None:
    """A body that iterates another run's ``f.iter``: the outer call's cleanup closes the
    body, which ends the inner run, which put back the shield as it was when the inner
    run *began* (off: the outer's body ran then). The rest of the outer's cleanup ran
    unshielded: a Ctrl-C in it was raised in the middle of stopping its uploader, whose
    thread was left running."""
    out = _child(_NESTED, str(tmp_path / "store"))
    assert out == {"close": "KeyboardInterrupt", "over": "ConfigurationError",
                   "inside_uploader_close": False, "fired": True, "upload_threads": [],
                   "default_back": True}


# -- waits in the run's own code that last long -------------------------------------------

_RESTART = """
    import faulthandler, json, signal, sys, time
    faulthandler.dump_traceback_later(50, exit=True)
    from resumable import checkpointed

    @checkpointed(store=sys.argv[1], run_id="rs", every="generation", restarts=1)
    def body(*, state=None):
        i = state["i"] if state else 0
        while i < 5:
            i += 1
            yield {"i": i}
            if i == 2 and state is None:
                raise ValueError("flaky")
        return i

    fired = []
    def profile(frame, event, arg):  # Ctrl-C in the restart's pause
        if event == "c_call" and arg is time.sleep:
            fired.append(1)
            sys.setprofile(None)
            signal.raise_signal(signal.SIGINT)

    out = {}
    sys.setprofile(profile)
    try:
        out["returned"] = body()
    except KeyboardInterrupt:
        out["raised"] = "KeyboardInterrupt"
    sys.setprofile(None)
    out["fired"] = bool(fired)
    print(json.dumps(out))
"""


def test_a_ctrl_c_in_a_restart_pause_stops_the_call_without_waiting_it_out(
    tmp_path: Path
) -> None:
    """$RESUMABLE_RESTART_BACKOFF: the pause before a restart (30 to 60 s here) is the
    run's own code; a Ctrl-C in it was held until the pause was over. The child must end
    well before that (the timeout)."""
    try:
        out = _child(_RESTART, str(tmp_path / "store"),
                     env={"RESUMABLE_RESTART_BACKOFF": "600"}, timeout=25)
    except subprocess.TimeoutExpired:
        pytest.fail("the call waited out its restart pause after Ctrl-C")
    assert out == {"raised": "KeyboardInterrupt", "fired": True}


_RETRY = """
    import faulthandler, json, signal, sys, time
    faulthandler.dump_traceback_later(50, exit=True)
    from resumable import checkpointed

    @checkpointed(store=sys.argv[1], run_id="rt", every="generation")
    def body(*, state=None):
        yield {"i": 1}
        return 1

    fired = []
    def profile(frame, event, arg):  # Ctrl-C in the first pause between retries
        if event == "c_call" and arg is time.sleep:
            fired.append(1)
            sys.setprofile(None)
            signal.raise_signal(signal.SIGINT)

    out = {}
    sys.setprofile(profile)
    try:
        out["returned"] = body()
    except KeyboardInterrupt:
        out["raised"] = "KeyboardInterrupt"
    except Exception as err:
        out["raised"] = type(err).__name__
    sys.setprofile(None)
    out["fired"] = bool(fired)
    print(json.dumps(out))
"""


def test_a_ctrl_c_while_the_start_of_a_call_retries_the_store_stops_it(
    tmp_path: Path
) -> None:
    """The start of a call (result check, claim, load) is the run's own code; against an
    endpoint nothing answers, its store operations retry for $RESUMABLE_RETRY_DEADLINE
    (120 s here). A Ctrl-C then was held through all of it (then dropped for the
    StoreError); before the shield it stopped the program at once."""
    # (the discard port, as in test_s3_store: a port picked free here could be taken)
    env = {"AWS_ENDPOINT_URL": "http://127.0.0.1:9",
           "AWS_ACCESS_KEY_ID": "k", "AWS_SECRET_ACCESS_KEY": "s",
           "AWS_DEFAULT_REGION": "us-east-1", "RESUMABLE_RETRY_DEADLINE": "120"}
    try:
        out = _child(_RETRY, "s3://nobody-listens/p", env=env, timeout=25)
    except subprocess.TimeoutExpired:
        pytest.fail("the call went on retrying after Ctrl-C")
    assert out == {"raised": "KeyboardInterrupt", "fired": True}

# -- Ctrl-C while the handler itself is put in place or taken down -------------------------

_RESTORE = """
    import faulthandler, json, signal, sys
    faulthandler.dump_traceback_later(50, exit=True)
    from resumable import checkpointed
    from resumable import _signals

    @checkpointed(store=sys.argv[1], run_id="first", every="generation")
    def first(*, state=None):
        yield {"i": 1}
        return 1

    @checkpointed(store=sys.argv[1], run_id="later", every="generation")
    def later(*, state=None):
        i = 0
        while i < 3:
            i += 1
            yield {"i": i}
        return i

    def profile(frame, event, arg):  # Ctrl-C inside signal.signal(), as the call ends
        caller = frame.f_back
        if (event == "call" and frame.f_code is signal._int_to_enum.__code__
                and caller.f_code is signal.signal.__code__
                and caller.f_back.f_code is _signals.sigint_end.__code__):
            sys.setprofile(None)
            signal.raise_signal(signal.SIGINT)

    out = {}
    sys.setprofile(profile)
    try:
        out["first"] = first()
    except KeyboardInterrupt:
        out["first"] = "KeyboardInterrupt"
    sys.setprofile(None)
    it = later.iter()
    next(it)
    try:
        signal.raise_signal(signal.SIGINT)  # Ctrl-C in an f.iter consumer's own code
        out["consumer"] = "nothing raised"
    except KeyboardInterrupt:
        out["consumer"] = "KeyboardInterrupt"
    it.close()
    out["default_back"] = signal.getsignal(signal.SIGINT) is signal.default_int_handler
    print(json.dumps(out))
"""


def test_a_ctrl_c_while_the_handler_is_taken_down_leaves_no_stale_shield(
    tmp_path: Path
) -> None:
    """sigint_end put the default handler back before the shield down: a Ctrl-C in that
    window (signal.signal() swaps the handler, then runs Python code) was raised with
    the shield still up, for good. Every later call then began 'inside another call's
    own code': an f.iter consumer's code was shielded (its Ctrl-C only held) and a Ctrl-C
    held at a call's end was never raised. (A scan of the exception path hit it.)"""
    out = _child(_RESTORE, str(tmp_path / "store"))
    assert out == {"first": "KeyboardInterrupt", "consumer": "KeyboardInterrupt",
                   "default_back": True}


# -- other SIGINT users ------------------------------------------------------------------

# asyncio.run of a task that sends itself a Ctrl-C: "cancelled cleanly" when asyncio's own
# handling (the main task cancelled) is in place, "KeyboardInterrupt" when it is not.
_ASYNCIO_JOB = """
    import asyncio, faulthandler, json, signal, sys
    faulthandler.dump_traceback_later(50, exit=True)
    from resumable import checkpointed

    async def job():
        asyncio.get_running_loop().call_soon(signal.raise_signal, signal.SIGINT)  # Ctrl-C
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            return "cancelled cleanly"  # asyncio's Ctrl-C: the main task is cancelled
        return "not reached"

    def plain():
        try:
            return asyncio.run(job())
        except KeyboardInterrupt:
            return "KeyboardInterrupt"
"""

_ASYNCIO = _ASYNCIO_JOB + """

    @checkpointed(store=sys.argv[1], run_id="aio", every="generation")
    def body(*, state=None):
        yield {"i": 1}
        got = plain()
        yield {"i": 2}
        return got

    out = {"without_resumable": plain()}
    try:
        out["in_a_body"] = body()
    except KeyboardInterrupt:
        out["in_a_body"] = "KeyboardInterrupt"
    print(json.dumps(out))
"""


def test_asyncio_run_in_a_body_gets_its_own_ctrl_c_handling(tmp_path: Path) -> None:
    """asyncio.Runner installs its SIGINT handler (Ctrl-C cancels the main task, which
    may clean up) only if getsignal(SIGINT) is signal.default_int_handler. The library's
    handler was in place for the whole call, the body's time included, so asyncio.run in
    a body got a bare KeyboardInterrupt raised wherever its loop was, not the
    cancellation it gets without the library. While the body runs, Python's own handler
    is in place now."""
    out = _child(_ASYNCIO, str(tmp_path / "store"))
    assert out == {"without_resumable": "cancelled cleanly", "in_a_body": "cancelled cleanly"}


_LENT = _ASYNCIO_JOB + """

    out = {}

    @checkpointed(store=sys.argv[1], run_id="inner", every="generation")
    def inner(*, state=None):
        yield {"i": 1}
        out["inner body"] = plain()
        yield {"i": 2}
        return 2

    @checkpointed(store=sys.argv[1], run_id="outer", every="generation")
    def outer(*, state=None):
        yield {"i": 1}
        inner()  # a call inside a body, which then goes on
        out["outer body after the inner call"] = plain()
        yield {"i": 2}
        return 2

    outer()

    @checkpointed(store=sys.argv[1], run_id="consumed", every="generation")
    def consumed(*, state=None):
        for i in range(3):
            yield {"i": i}

    it = consumed.iter()
    next(it)
    out["consumer"] = plain()  # an f.iter consumer's own code
    it.close()

    def mine(signum, frame):
        out["own handler called"] = out.get("own handler called", 0) + 1

    @checkpointed(store=sys.argv[1], run_id="own", every="generation")
    def own(*, state=None):
        yield {"i": 1}
        signal.signal(signal.SIGINT, mine)  # the program takes Ctrl-C over, for good
        yield {"i": 2}
        signal.raise_signal(signal.SIGINT)
        yield {"i": 3}

    own()
    out["own handler kept"] = signal.getsignal(signal.SIGINT) is mine
    signal.signal(signal.SIGINT, signal.default_int_handler)

    @checkpointed(store=sys.argv[1], run_id="raises", every="generation")
    def raises(*, state=None):
        yield {"i": 1}
        raise ValueError("body")

    try:
        raises()
    except ValueError:
        pass
    back = signal.getsignal(signal.SIGINT) is signal.default_int_handler
    out["default back after an error"] = back
    print(json.dumps(out))
"""


def test_python_s_own_handler_is_in_place_wherever_code_not_the_library_s_runs(
    tmp_path: Path
) -> None:
    """The same in a body after a call made inside it, in a call's body inside another
    body, and in an f.iter consumer's code; a handler the body installs stays its own,
    and Python's comes back after a call that ends by an error."""
    out = _child(_LENT, str(tmp_path / "store"))
    assert out == {"inner body": "cancelled cleanly",
                   "outer body after the inner call": "cancelled cleanly",
                   "consumer": "cancelled cleanly", "own handler called": 1,
                   "own handler kept": True, "default back after an error": True}


# -- a Ctrl-C as the handler changes hands at a yield ---------------------------------------

_SWAP = """
    import _thread, faulthandler, json, signal, sys
    faulthandler.dump_traceback_later(50, exit=True)
    from resumable import checkpointed
    from resumable import _signals

    store, where, when, whose = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4]
    real, seen, calls = _signals._set_handler, [], []

    class Stop(Exception):
        pass

    def own(signum, frame):  # a body's handler, that raises an exception of its own
        calls.append(signum)
        raise Stop()

    def swapping(signum, handler):  # the swaps of unshield (to the body's) and shield (ours)
        going = "shield" if handler is _signals._on_sigint else "unshield"
        seen.append(going)
        if going != where or seen.count(where) != 3:  # (at the body's third yield)
            return real(signum, handler)
        if when == "pending":  # came before: handled as signal.signal() begins
            _thread.interrupt_main()
            return real(signum, handler)
        got = real(signum, handler)  # came at the swap's system call: handled after it
        signal.raise_signal(signal.SIGINT)
        return got

    _signals._set_handler = swapping

    @checkpointed(store=store, run_id="swap", every="generation")
    def body(*, state=None):
        if whose == "own":
            signal.signal(signal.SIGINT, own)
        i = 0
        while True:
            i += 1
            try:
                yield {"i": i}
            except (KeyboardInterrupt, Stop):  # the README's graceful stop
                return {"stopped at the yield of": i}

    try:
        out = {"call": body()}
    except (KeyboardInterrupt, Stop) as err:
        out = {"call": type(err).__name__}
    out["saved"] = body.latest().state["i"]
    out["handler after"] = signal.getsignal(signal.SIGINT) is (
        own if whose == "own" else signal.default_int_handler)
    out["own handler called"] = len(calls)
    print(json.dumps(out))
"""


@pytest.mark.parametrize("whose", ["python", "own"])
@pytest.mark.parametrize("when", ["pending", "at_the_swap"])
@pytest.mark.parametrize("where", ["unshield", "shield"])
def test_a_ctrl_c_as_the_handler_changes_hands_reaches_the_body_at_its_yield(
    tmp_path: Path, where: str, when: str, whose: str
) -> None:
    """While the body runs Python's handler is lent back to it (67fb962). A Ctrl-C that
    came as the handler changed hands was raised in the library's code: signal.signal()
    runs the handlers of signals pending before it swaps, and a signal delivered at the
    swap's own system call is handled right after it, by the new handler (review 50: a
    quarter of the Ctrl-Cs sent to a busy loop). The body never got it at its yield
    (where it may stop gracefully) and, in shield(), the state it had just yielded was
    not saved. It is held now, and thrown into the body at its yield. With a handler of
    the body's own that raises an exception of its own, that exception, once: it escaped
    the library, or (held as a Ctrl-C) the handler ran twice (review 51)."""
    out = _child(_SWAP, str(tmp_path / "store"), where, when, whose)
    stopped = out["call"]["stopped at the yield of"] if isinstance(out["call"], dict) else None
    # (unshield: the third resume, after the yield of 2; shield: after the yield of 3)
    assert stopped == (2 if where == "unshield" else 3), out
    assert out["saved"] == stopped and out["handler after"], out
    assert out["own handler called"] == (1 if whose == "own" else 0), out


_CHAINED = """
    import faulthandler, json, signal, sys
    faulthandler.dump_traceback_later(50, exit=True)
    from resumable import checkpointed

    calls = []

    @checkpointed(store=sys.argv[1], run_id="chain", every="generation")
    def body(*, state=None):
        previous = signal.getsignal(signal.SIGINT)

        def chained(signum, frame):  # a program's handler that also calls the one before
            calls.append(signum)
            previous(signum, frame)

        signal.signal(signal.SIGINT, chained)
        i = 0
        while True:
            i += 1
            try:
                yield {"i": i}
            except KeyboardInterrupt:
                return {"stopped at the yield of": i}

    from resumable._decorator import _Execution
    checkpoint, n = _Execution._checkpoint, []

    def interrupted(self, *args, **kwargs):  # a Ctrl-C in the library's own work
        n.append(1)
        if len(n) == 3:
            signal.raise_signal(signal.SIGINT)
        return checkpoint(self, *args, **kwargs)

    _Execution._checkpoint = interrupted
    try:
        out = {"call": body()}
    except KeyboardInterrupt:
        out = {"call": "KeyboardInterrupt"}
    out["program's handler called"] = len(calls)
    out["saved"] = body.latest().state["i"]
    out["program's handler kept"] = signal.getsignal(signal.SIGINT).__name__
    print(json.dumps(out))
"""


def test_a_handler_the_body_installs_gets_a_ctrl_c_of_the_librarys_work_once_it_is_safe(
    tmp_path: Path
) -> None:
    """A body's handler that calls the one it replaced called Python's (lent to the body
    by 67fb962), so a Ctrl-C during a snapshot raised KeyboardInterrupt in the middle of
    the library's work, which the shield is there to prevent (review 50: a spill file
    left open). The library takes that handler over too while it works, and hands it a
    held Ctrl-C at the body's next yield."""
    out = _child(_CHAINED, str(tmp_path / "store"))
    assert out == {"call": {"stopped at the yield of": 3}, "program's handler called": 1,
                   "saved": 3, "program's handler kept": "chained"}, out


_FIRST = """
    import faulthandler, json, signal, sys
    faulthandler.dump_traceback_later(50, exit=True)
    from resumable import checkpointed
    from resumable import _signals

    @checkpointed(store=sys.argv[1], run_id="first", every="generation")
    def body(*, state=None):
        yield {"i": 1}
        return 1

    def profile(frame, event, arg):  # Ctrl-C inside signal.signal(), as the call begins
        caller = frame.f_back
        if (event == "call" and frame.f_code is signal._int_to_enum.__code__
                and caller.f_code is signal.signal.__code__
                and caller.f_back.f_code is _signals.sigint_begin.__code__):
            sys.setprofile(None)
            signal.raise_signal(signal.SIGINT)

    sys.setprofile(profile)
    try:
        out = {"call": body()}
    except KeyboardInterrupt:
        out = {"call": "KeyboardInterrupt"}
    sys.setprofile(None)
    out["default back"] = signal.getsignal(signal.SIGINT) is signal.default_int_handler
    print(json.dumps(out))
"""


def test_a_ctrl_c_as_the_first_call_installs_the_handler_leaves_none_behind(
    tmp_path: Path
) -> None:
    """In a program's first call, a Ctrl-C right after the handler went in (signal.signal()
    runs Python code after the swap) was not held: the process the handler belongs to
    was not recorded yet. It was raised with no call counted, and the library's handler
    stayed in place after the call, so a later asyncio.run installed none of its own
    (review 50). It is held now, and raised by the call."""
    out = _child(_FIRST, str(tmp_path / "store"))
    assert out == {"call": "KeyboardInterrupt", "default back": True}


_IGNORED = """
    import json, os, signal, sys
    from resumable import checkpointed
    from resumable import _decorator

    start, sent = _decorator._Execution._start, []

    def starting(self):  # two Ctrl-Cs as the inner call loads its checkpoint
        if self.run.run_id == "inner" and not sent:
            sent.append(1)
            os.kill(os.getpid(), signal.SIGINT)
            sum(range(1000))  # (the first is handled before the second is sent)
            os.kill(os.getpid(), signal.SIGINT)
        return start(self)

    _decorator._Execution._start = starting

    @checkpointed(store=sys.argv[1], run_id="inner", every="generation")
    def inner(*, state=None):
        yield {"i": 0}
        return "inner done"

    @checkpointed(store=sys.argv[1], run_id="outer", every="generation")
    def outer(*, state=None):
        signal.signal(signal.SIGINT, signal.SIG_IGN)  # this body ignores Ctrl-C
        yield {"i": 0}
        got = inner()  # a call inside the body
        yield {"i": 1}
        return got

    try:
        out = {"call": outer()}
    except KeyboardInterrupt:
        out = {"call": "KeyboardInterrupt"}
    out["ignored after"] = signal.getsignal(signal.SIGINT) == signal.SIG_IGN
    print(json.dumps(out))
"""


def test_a_call_inside_a_body_that_ignores_ctrl_c_leaves_it_ignored(tmp_path: Path) -> None:
    """A call made inside a body took over whatever handler was in place, SIG_IGN too:
    two Ctrl-Cs while it loaded its checkpoint raised KeyboardInterrupt in a program
    that ignores SIGINT (review 51). SIG_IGN and SIG_DFL are left alone."""
    out = _child(_IGNORED, str(tmp_path / "store"))
    assert out == {"call": "inner done", "ignored after": True}


_TERM_AT_SWAP = """
    import faulthandler, json, os, signal, sys
    faulthandler.dump_traceback_later(50, exit=True)
    from resumable import checkpointed
    from resumable import _signals

    store, out_path = sys.argv[1], sys.argv[2]
    real, lends = _signals._set_handler, []

    def swapping(signum, handler):  # a SIGTERM pending as a consumer is handed step 3
        if handler is not _signals._on_sigint:
            lends.append(1)  # (body, consumer, body, consumer...: the sixth is step 3's)
            if len(lends) == 6:
                os.kill(os.getpid(), signal.SIGTERM)
        return real(signum, handler)

    _signals._set_handler = swapping

    @checkpointed(store=store, run_id="term", every=10**9)
    def body(*, state=None):
        i = 0
        while True:
            i += 1
            yield {"i": i}

    if out_path == "check":
        print(json.dumps(body.latest().state))
        sys.exit(0)
    got = []
    try:
        for s in body.iter():
            got.append(s["i"])
            with open(out_path, "w") as f:
                json.dump(got, f)
    finally:
        with open(out_path, "w") as f:
            json.dump(got, f)
"""


def test_a_sigterm_as_a_consumer_is_handed_a_state_stops_it_and_keeps_that_state(
    tmp_path: Path
) -> None:
    """signal.signal() runs every pending handler before it swaps, the library's SIGTERM
    handler too, which stops a run suspended at a consumer's yield at once. Since
    b1e1a03 the swap took its Terminated for a Ctrl-C of the consumer's: the consumer
    was handed the state and went on after the SIGTERM (6 to 9 of 40 real SIGTERMs), and
    the log spoke of a Ctrl-C. And a SIGTERM stopping the run there saved nothing since
    the last checkpoint (older): the state the consumer was to have is kept now, as when
    a consumer stops early (review 53)."""
    out = tmp_path / "got.json"
    proc = _run_child(_TERM_AT_SWAP, str(tmp_path / "store"), str(out))
    assert proc.returncode == 143, proc.stderr[-3000:]
    assert json.loads(out.read_text()) == [1, 2], proc.stderr[-3000:]
    assert "Ctrl-C" not in proc.stderr, proc.stderr[-3000:]
    assert _child(_TERM_AT_SWAP, str(tmp_path / "store"), "check") == {"i": 3}


# A consumer's run stopped by a SIGTERM at the two other points of the hand-over: as the
# consumer's next() resumes the run (the handler runs at the generator's resumption), and
# just before the state is handed on (the SIGTERM only flags the run there: no consumer
# is running yet). argv[3] picks the point.
_TERM_AT_HANDOVER = """
    import faulthandler, json, os, signal, sys
    faulthandler.dump_traceback_later(50, exit=True)
    from resumable import checkpointed, _decorator, _progress, _signals

    store, out_path, where = sys.argv[1], sys.argv[2], sys.argv[3]

    @checkpointed(store=store, run_id="term", every=10**9)
    def body(*, state=None):
        i = 0
        while True:
            i += 1
            yield {"i": i}

    if out_path == "check":
        print(json.dumps(body.latest().state))
        sys.exit(0)
    got = []
    STEPS = _decorator._Execution._steps.__code__

    def tracer(frame, event, arg):  # the run's generator resumes after step 3 was had
        if event == "call" and frame.f_code is STEPS and frame.f_lasti > 0:
            sys.settrace(None)
            os.kill(os.getpid(), signal.SIGTERM)  # handled at the resumption

    advance = _progress.Progress.advance

    def advancing(self, step, state=None):  # runs after the save, before the hand-over
        if where == "before" and step == 3:
            os.kill(os.getpid(), signal.SIGTERM)
        return advance(self, step, state)

    _progress.Progress.advance = advancing
    try:
        for s in body.iter():
            got.append(s["i"])
            if where == "resume" and s["i"] == 3:
                sys.settrace(tracer)
    finally:
        with open(out_path, "w") as f:
            json.dump({"got": got, "after": _signals._term_at is not None and got[-1:]}, f)
"""


@pytest.mark.parametrize("where, had", [("resume", [1, 2, 3]), ("before", [1, 2])])
def test_a_sigterm_at_either_side_of_a_hand_over_keeps_the_consumers_state(
    where: str, had: list[int], tmp_path: Path
) -> None:
    """At the resumption, the Terminated came out of the yield after its finally had
    cleared `suspended`, so the state the consumer had was not saved (the run was saved
    at step 0); just before the hand-over, the SIGTERM only flagged the run and the
    consumer was handed step 3 after it and went on (review 54). Now: exit 143, no state
    handed after the SIGTERM, and step 3, made before it, saved."""
    out = tmp_path / "got.json"
    proc = _run_child(_TERM_AT_HANDOVER, str(tmp_path / "store"), str(out), where)
    assert proc.returncode == 143, proc.stderr[-3000:]
    assert json.loads(out.read_text())["got"] == had, proc.stderr[-3000:]
    assert _child(_TERM_AT_HANDOVER, str(tmp_path / "store"), "check", where) == {"i": 3}


# A program's own handler of another signal (a SIGALRM deadline raising TimeoutError)
# that runs as the SIGINT handler changes hands after the body's K-th yield.
_OTHER_SIGNAL = """
    import faulthandler, json, os, signal, sys
    faulthandler.dump_traceback_later(50, exit=True)
    from resumable import checkpointed, _signals

    store, k = sys.argv[1], int(sys.argv[2])
    real, swaps = _signals._set_handler, []

    def swapping(signum, handler):
        swaps.append(1)
        if len(swaps) == k:  # the alarm goes off just as the handler changes hands
            signal.pthread_sigmask(signal.SIG_BLOCK, [signal.SIGALRM])
            os.kill(os.getpid(), signal.SIGALRM)
            signal.pthread_sigmask(signal.SIG_UNBLOCK, [signal.SIGALRM])
        return real(signum, handler)

    _signals._set_handler = swapping

    def on_alarm(signum, frame):
        raise TimeoutError("generation took too long")

    signal.signal(signal.SIGALRM, on_alarm)
    out = {"yielded": []}

    @checkpointed(store=store, run_id="alarm", every=1)
    def body(*, state=None):
        i = 0
        while i < 6:
            i += 1
            out["yielded"].append(i)
            try:
                yield {"i": i}
            except TimeoutError:
                out["body got"] = i
                return {"i": i}

    try:
        out["result"] = body()
    except TimeoutError:
        out["result"] = "TimeoutError out of the call"
    out["saved"] = body.latest().state
    print(json.dumps(out))
"""


@pytest.mark.parametrize("k", [4, 5])
def test_another_signals_error_at_the_swap_reaches_the_body_at_its_yield(
    k: int, tmp_path: Path
) -> None:
    """Since 8133d23 only a KeyboardInterrupt (with Python's handler lent) was held at the
    swap: a TimeoutError from a program's SIGALRM handler was raised out of the library's
    code, the state just yielded unsaved, and the call failed as if the body had raised
    (review 54). It is held and thrown in at the body's yield, as before 8133d23."""
    out = _child(_OTHER_SIGNAL, str(tmp_path / "store"), str(k))
    assert out["result"] == {"i": 2} and out["body got"] == 2, out
    assert out["saved"] == {"i": 2}, out


# A Ctrl-C held while the run saved, then a program's SIGALRM handler raising as the
# SIGINT handler is lent back at the next resume (argv[2]: before or after the swap).
_HELD_THEN_ALARM = """
    import faulthandler, json, os, signal, sys, threading
    faulthandler.dump_traceback_later(50, exit=True)
    from resumable import checkpointed, _signals

    store, when = sys.argv[1], sys.argv[2]
    real, ours, swaps, log = _signals._set_handler, _signals._on_sigint, [], []

    def fire(sig):
        signal.pthread_sigmask(signal.SIG_BLOCK, [sig])
        signal.pthread_kill(threading.main_thread().ident, sig)
        signal.pthread_sigmask(signal.SIG_UNBLOCK, [sig])

    def swapping(signum, handler):
        swaps.append(1)
        if handler is ours and len(swaps) >= 2 and not log:  # the library's work: held
            done = real(signum, handler)
            log.append("Ctrl-C while shielded")
            fire(signal.SIGINT)
            return done
        if handler is not ours and log == ["Ctrl-C while shielded"]:
            log.append("alarm")
            if when == "before":
                fire(signal.SIGALRM)
                return real(signum, handler)
            done = real(signum, handler)
            fire(signal.SIGALRM)
            return done
        return real(signum, handler)

    _signals._set_handler = swapping

    def on_alarm(signum, frame):
        raise TimeoutError("generation deadline")

    signal.signal(signal.SIGALRM, on_alarm)

    @checkpointed(store=store, run_id="x", every=1)
    def body(*, state=None):
        i = state or 0
        while i < 6:
            i += 1
            try:
                yield i
            except TimeoutError:
                log.append("body: TimeoutError")
        return i

    try:
        out = {"result": body()}
    except KeyboardInterrupt:
        out = {"result": "KeyboardInterrupt"}
    out["log"] = log
    print(json.dumps(out))
"""


@pytest.mark.parametrize("when", ["before", "after"])
def test_a_held_ctrl_c_is_not_replaced_by_another_handlers_error_at_the_swap(
    when: str, tmp_path: Path
) -> None:
    """Since 08a59bb another handler's exception at the swap is thrown into the body; met
    as the swap began, it replaced the Ctrl-C held meanwhile, which was never delivered:
    the run went on to its end (review 56). The Ctrl-C now waits for the next yield."""
    out = _child(_HELD_THEN_ALARM, str(tmp_path / "store"), when)
    assert out["result"] == "KeyboardInterrupt", out
    assert "body: TimeoutError" in out["log"], out


_NESTED_ITER = """
    import faulthandler, json, os, signal, sys
    faulthandler.dump_traceback_later(50, exit=True)
    from resumable import checkpointed

    store = sys.argv[1]

    @checkpointed(store=store, run_id="inner", every=10**9)
    def inner(*, state=None):
        k = state or 0
        while k < 3:
            k += 1
            yield k

    @checkpointed(store=store, run_id="outer", every=10**9)
    def outer(*, state=None):
        i = state or 0
        while i < 10:
            i += 1
            inner.reset()
            for k in inner.iter():
                if i == 4 and k == 2:
                    os.kill(os.getpid(), signal.SIGTERM)  # the outer body at work
            yield i

    if len(sys.argv) > 2:
        print(json.dumps(outer.latest().state))
        sys.exit(0)
    for s in outer.iter():
        pass
"""


def test_a_sigterm_lets_a_body_consuming_an_inner_run_finish_its_generation(
    tmp_path: Path
) -> None:
    """An f.iter run whose consumer is a running body was told to stop like a top-level
    one: its Terminated cut the outer body's generation, and the outer run was saved at
    step 0 (every=10**9) after three states (review 56). Like a call inside a body, it is
    part of the body's generation now: the outer body reaches its yield, which is saved."""
    store = str(tmp_path / "store")
    proc = _run_child(_NESTED_ITER, store)
    assert proc.returncode == 143, proc.stderr[-3000:]
    assert _child(_NESTED_ITER, store, "check") == 4
