"""Review 151: issue 13's paths attacked again (forked snapshots, settings, stores).

The forked-snapshot cases run in a child Python process of their own (the fork happens
there, not in pytest's process with its servers and threads), as in test_forked.py.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _run(tmp_path: Path, source: str, timeout: float = 120, **env: str
         ) -> subprocess.CompletedProcess[str]:
    script = tmp_path / "script.py"
    script.write_text(textwrap.dedent(source))
    return subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                          timeout=timeout, cwd=ROOT,
                          env=dict(os.environ, PYTHONPATH=str(ROOT), **env))


# The snapshot of generation 2 is forked, and its child never finishes pickling (it
# waits for ever in __reduce__, as a child that forked while another thread held a lock
# does). The body then raises, once, with restarts=1: the restart must begin from what
# the store holds, not fail on the lost snapshot.
_STUCK_THEN_RAISE = """
import os, threading
from resumable import checkpointed

PARENT = os.getpid()

class Hangs:
    def __reduce__(self):
        if os.getpid() != PARENT:
            threading.Event().wait()  # the forked child: never done
        return (Hangs, ())

raised = []

@checkpointed(store={store!r}, run_id="r", every="generation", restarts=1,
              capture_rng=False)
def body(*, state=None):
    print("start", None if state is None else state["gen"], flush=True)
    state = state or {{"gen": 0, "h": None}}
    while state["gen"] < 4:
        state["gen"] += 1
        state["h"] = Hangs() if state["gen"] == 2 and not raised else None
        yield state
        if state["gen"] == 2 and not raised:
            raised.append(1)
            raise RuntimeError("a transient failure in generation 3")
    return state["gen"]

print("result", body(), flush=True)
"""


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")
def test_a_restart_after_a_stuck_forked_snapshot_starts_from_the_store(tmp_path: Path) -> None:
    """Before: the restart re-raised the lost snapshot's error (resumable._forked.Stuck,
    not a ResumableError), and the run died instead of restarting."""
    proc = _run(tmp_path, _STUCK_THEN_RAISE.format(store=str(tmp_path / "s")),
                RESUMABLE_SNAPSHOT_FORK="1", RESUMABLE_FORK_TIMEOUT="0.5")
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "result 4" in proc.stdout, proc.stdout
    assert "restart 1 of 1" in proc.stderr, proc.stderr[-3000:]
    assert "was lost" in proc.stderr, proc.stderr[-3000:]


# The first checkpoint's upload is held until the body lets it go. Meanwhile the body
# yields step 2 (a forked child pickles it at once and exits), waits until that child's
# deadline has passed for certain, lets the upload go and returns: step 2 is the final
# state and must be saved.
_FORKED_BEHIND_A_SLOW_UPLOAD = """
import os, threading, time
from resumable import checkpointed
from resumable.stores._local import LocalStore

entered, release = threading.Event(), threading.Event()

class SlowFirst(LocalStore):
    def put(self, key, data):
        if "/ckpt-" in key and not entered.is_set():
            entered.set()
            release.wait(60)
        return super().put(key, data)

def a_child_has_exited():
    me = os.getpid()
    for task in os.listdir(f"/proc/{{me}}/task"):
        with open(f"/proc/{{me}}/task/{{task}}/children") as f:
            for pid in f.read().split():
                try:
                    with open(f"/proc/{{pid}}/stat") as s:
                        if s.read().rsplit(")", 1)[1].split()[0] == "Z":
                            return True
                except OSError:
                    pass
    return False

marks = {{}}

@checkpointed(store=SlowFirst({store!r}), run_id="r", every="generation", capture_rng=False)
def body(*, state=None):
    state = state or {{"gen": 0, "pop": list(range(1000))}}
    state["gen"] += 1
    t0 = time.monotonic()
    yield state                 # step 1: pickled on the loop's thread; its upload waits
    pickled = time.monotonic() - t0  # (at least what that pickle took)
    assert entered.wait(60)
    state["gen"] += 1
    yield state                 # step 2: a forked child pickles it
    t2 = time.monotonic()
    while not a_child_has_exited():  # it pickled, wrote to its pipe and left
        assert time.monotonic() < t2 + 60, "the forked child never finished"
        threading.Event().wait(0.01)
    # Its deadline: forked before t2, + $RESUMABLE_FORK_TIMEOUT + 20 x the last pickle.
    threading.Event().wait(max(0.0, t2 + 0.3 + 20 * pickled + 0.3 - time.monotonic()))
    release.set()
    return state["gen"]

print("result", body(), flush=True)
print("newest", body.latest().step, flush=True)
"""


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")
def test_a_forked_snapshot_that_waited_behind_an_upload_is_saved(tmp_path: Path) -> None:
    """Before: the child's deadline ran from the fork, so a child that had pickled in
    milliseconds was ended as stuck when the upload thread got to it after a slow upload,
    and the final state was not saved ("sent nothing in 1 s", forking turned off)."""
    proc = _run(tmp_path, _FORKED_BEHIND_A_SLOW_UPLOAD.format(store=str(tmp_path / "s")),
                RESUMABLE_SNAPSHOT_FORK="1", RESUMABLE_FORK_TIMEOUT="0.3")
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "result 2\nnewest 2" in proc.stdout, (proc.stdout, proc.stderr[-3000:])
    assert "sent nothing" not in proc.stderr, proc.stderr[-3000:]


def test_a_bad_exit_codes_value_does_not_break_the_import(tmp_path: Path) -> None:
    """Before: $RESUMABLE_EXIT_CODES was read at ``import resumable``, so a bad value
    made the import raise (exit 1, a traceback), and ``resumable ls``, which does not use
    it, died of it with a traceback. A decorated call still fails on it, naming it."""
    env = dict(os.environ, PYTHONPATH=str(ROOT), RESUMABLE_EXIT_CODES="maybe")
    imp = subprocess.run([sys.executable, "-c", "import resumable; print('imported')"],
                         env=env, capture_output=True, text=True, timeout=120)
    assert imp.returncode == 0 and imp.stdout == "imported\n", imp.stderr
    cli = subprocess.run([sys.executable, "-m", "resumable", "ls", str(tmp_path)], env=env,
                         capture_output=True, text=True, timeout=120)
    # (the CLI reads only the variables it uses, as with a bad $RESUMABLE_UPLOAD_DUTY)
    assert cli.returncode == 0 and "Traceback" not in cli.stderr, cli.stderr
    call = subprocess.run([sys.executable, "-c", textwrap.dedent(f"""
        from resumable import checkpointed
        @checkpointed(store={str(tmp_path / 's')!r})
        def f(*, state=None):
            yield 1
            return 1
        f()
        """)], env=env, capture_output=True, text=True, timeout=120)
    assert call.returncode == 78, call.stderr[-2000:]
    assert "RESUMABLE_EXIT_CODES" in call.stderr and "maybe" in call.stderr, call.stderr


@pytest.mark.parametrize("value", ["ftp://x/y", "s3://", "s3://Bad_Bucket!/x"])
def test_a_bad_store_url_from_the_environment_names_the_variable(tmp_path: Path,
                                                                  value: str) -> None:
    """Before: the error named the URL but not $RESUMABLE_STORE, where it came from."""
    env = dict(os.environ, PYTHONPATH=str(ROOT), RESUMABLE_STORE=value)
    call = subprocess.run([sys.executable, "-c", textwrap.dedent("""
        from resumable import checkpointed
        @checkpointed()
        def f(*, state=None):
            yield 1
            return 1
        f()
        """)], env=env, capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert call.returncode == 78, call.stderr[-2000:]
    last = call.stderr.strip().splitlines()[-1]
    assert value in last and "$RESUMABLE_STORE" in last, last
    cli = subprocess.run([sys.executable, "-m", "resumable", "ls"], env=env,
                         capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert cli.returncode == 78, cli.stderr
    lines = cli.stderr.strip().splitlines()
    assert len(lines) == 1 and value in lines[0] and "$RESUMABLE_STORE" in lines[0], lines
