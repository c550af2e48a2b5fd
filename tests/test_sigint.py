"""Ctrl-C (a real SIGINT) while a run on the main thread does its own work.

Python raises KeyboardInterrupt between any two bytecodes; raised inside the library's
bookkeeping it used to leave a lock held or a snapshot released twice. A scan sent a real
SIGINT at the Nth line the main thread ran after the first spill write began: 62 of 429
points went wrong -- 14 hung for ever (the upload thread's lock left held, or a spill
slot never freed), 38 ended with ``RuntimeError: snapshot of step 5 released more than
held`` instead of KeyboardInterrupt, 10 left a spill file open. Now the run holds a
Ctrl-C that comes while it is in its own code and delivers it at the body's yield.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

from resumable._run import Run
from resumable.stores import open_store
from tests.test_spill import SIZE, _checkpoints
from tests.test_spill_review import _PRELUDE

ROOT = Path(__file__).resolve().parents[1]
FULL = os.environ.get("RESUMABLE_CHAOS", "").lower() == "full"

# The child: the first checkpoint's put is held until the body has yielded again, so
# step 2's state goes to a spill file; at that write's start a trace function begins to
# count the lines the main thread runs, and at line N a real SIGINT is sent (its handler
# runs a few bytecodes later, wherever that is: the library's code, the body, cleanup).
# (_PRELUDE: the held first save, `note`, `open_in`, shared with test_spill_review)
_SCAN = _PRELUDE + textwrap.dedent("""
    import faulthandler
    faulthandler.dump_traceback_later(60, exit=True)  # a hang says where, then exits
    import resumable._spill as sp

    N, STORE, SPILL, SIZE = int(sys.argv[1]), sys.argv[2], sys.argv[3], int(sys.argv[4])
    UNTIL = 1

    count = [0]
    def tracer(frame, event, arg):
        if event == "line":
            count[0] += 1
            if count[0] == N:
                sys.settrace(None)
                f = sys._getframe(1)
                while f is not None:
                    f.f_trace = None
                    f = f.f_back
                signal.raise_signal(signal.SIGINT)
        return tracer

    def profile(frame, event, arg):
        if event == "call" and frame.f_code is sp._pwrite_all.__code__:
            sys.setprofile(None)
            note(2)  # the held save may go on
            f = frame
            while f is not None:
                f.f_trace = tracer
                f = f.f_back
            sys.settrace(tracer)

    @checkpointed(store=Held(open_store(STORE)), run_id="r", every="generation", keep=None)
    def body(*, state=None):
        i = 0
        while i < 30:
            i += 1
            yield {"i": i, "array": np.full(SIZE // 8, float(i))}
            if i == 1:
                began.wait(60)  # the first save is held: the next yield spills
                sys.setprofile(profile)
        return i

    try:
        out = {"returned": body()}
    except KeyboardInterrupt:
        out = {"interrupted": True}
    out["open"] = open_in(SPILL)
    out["handler_restored"] = signal.getsignal(signal.SIGINT) is signal.default_int_handler
    print(json.dumps(out))
""")

# Known bad points of the code before the shield (each went wrong there: a hang, a
# RuntimeError, an open file), then an even spread.
_POINTS = sorted({15, 64, 92, 218, 267, 302, 400, 589, 834, 1121, 1863,
                  *range(1, 3000, 230)})
if FULL:
    _POINTS = list(range(1, 4000))


def _env(spill: Path) -> dict[str, str]:
    return {**os.environ, "RESUMABLE_SPILL_DIR": str(spill),
            "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}


@pytest.mark.chaos
def test_ctrl_c_at_any_line_ends_the_call_cleanly(tmp_path: Path) -> None:
    """At every point: the call ends with KeyboardInterrupt (or returns, if the SIGINT
    came after the body's last yield), nothing hangs, no spill file stays open, the
    default SIGINT handler is back, and every stored checkpoint holds its own step's
    state, bit for bit."""
    failures = []
    for n in _POINTS:
        where = tmp_path / str(n)
        (where / "spill").mkdir(parents=True)
        try:
            proc = subprocess.run(
                [sys.executable, "-c", _SCAN, str(n), str(where / "store"),
                 str(where / "spill"), str(SIZE)],
                capture_output=True, text=True, env=_env(where / "spill"), timeout=120,
                cwd=ROOT)
        except subprocess.TimeoutExpired:
            failures.append((n, "no exit in 120 s"))
            continue
        if proc.returncode != 0:
            failures.append((n, f"exit {proc.returncode}: {proc.stderr[-600:]}"))
            continue
        out = json.loads(proc.stdout.strip().splitlines()[-1])
        if not (out.get("interrupted") or out.get("returned") == 30) or out["open"] \
                or not out["handler_restored"]:
            failures.append((n, out))
            continue
        for step, state in _checkpoints(where / "store", "r").items():
            if state["i"] != step or not np.array_equal(state["array"],
                                                        np.full(SIZE // 8, float(step))):
                failures.append((n, f"checkpoint {step} holds step {state['i']}"))
    assert not failures, f"{len(failures)} of {len(_POINTS)} points: {failures[:5]}"


_HELD = textwrap.dedent("""
    import signal as _s; _s.signal(_s.SIGINT, _s.default_int_handler)  # (not SIG_IGN)
    import json, signal, sys
    from resumable import checkpointed
    from resumable.stores import open_store

    PRESSES = int(sys.argv[2])
    custom = []
    if sys.argv[3] == "custom":
        signal.signal(signal.SIGINT, lambda *a: custom.append(1))

    class Key:
        # pickled inside the run's snapshot, i.e. while the run does its own work
        def __init__(self, i):
            self.i = i
        def __reduce__(self):
            if self.i == 3:
                for _ in range(PRESSES):
                    signal.raise_signal(signal.SIGINT)
            return (Key, (self.i,))

    caught = []

    @checkpointed(store=open_store(sys.argv[1]), run_id="held", every="generation")
    def body(*, state=None):
        i = 0
        while i < 6:
            i += 1
            try:
                yield {"i": i, "key": Key(i)}
            except KeyboardInterrupt:  # the body may stop gracefully on Ctrl-C
                caught.append(i)
                return i
        return i

    try:
        out = {"returned": body()}
    except KeyboardInterrupt:
        out = {"raised": True}
    out.update(caught=caught, custom=len(custom),
               default_back=signal.getsignal(signal.SIGINT) is signal.default_int_handler)
    print(json.dumps(out))
""")


def _held(tmp_path: Path, presses: int, handler: str = "default") -> tuple[dict, str]:
    proc = subprocess.run(
        [sys.executable, "-c", _HELD, str(tmp_path / "store"), str(presses), handler],
        capture_output=True, text=True, env=_env(tmp_path), timeout=120, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1]), proc.stderr


def test_a_ctrl_c_during_the_save_reaches_the_body_at_its_yield(tmp_path: Path) -> None:
    """The SIGINT comes while step 3's state is pickled (the run's own work): the save
    completes, and the body gets KeyboardInterrupt at that yield, where it can stop
    gracefully -- its return value is the call's, and step 3 is saved."""
    out, stderr = _held(tmp_path, presses=1)
    assert out == {"returned": 3, "caught": [3], "custom": 0, "default_back": True}, stderr
    assert "Ctrl-C again stops at once" in stderr
    names = Run(open_store(tmp_path / "store"), "held").checkpoint_names()
    assert int(names[-1][-12:]) == 3, names  # (Key is the child's class: names only)


def test_a_second_ctrl_c_stops_at_once(tmp_path: Path) -> None:
    out, stderr = _held(tmp_path, presses=2)
    assert out == {"raised": True, "caught": [], "custom": 0, "default_back": True}, stderr


def test_an_applications_own_sigint_handler_is_left_alone(tmp_path: Path) -> None:
    """A handler the application installed (a framework's, say) is called as before,
    at once, and is still there after the call."""
    out, stderr = _held(tmp_path, presses=1, handler="custom")
    assert out == {"returned": 6, "caught": [], "custom": 1, "default_back": False}, stderr
