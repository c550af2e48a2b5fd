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

from tests.scripts import run_script

ROOT = Path(__file__).resolve().parents[1]


_run = run_script


def _runs(store: Path, ids: tuple[str, ...], finish: bool = False) -> None:
    """Runs of two generations in ``store``: finished (a result stored) or, by default,
    left in progress (no result)."""
    from resumable import checkpointed

    for rid in ids:
        @checkpointed(store=str(store), run_id=rid, capture_rng=False)
        def body(*, state=None):
            state = state or 0
            while state < 2:
                state += 1
                yield state
            if not finish:
                raise KeyboardInterrupt  # (no result)
            return state

        if finish:
            assert body() == 2
        else:
            with pytest.raises(KeyboardInterrupt):
                body()


def _ls(*args: str) -> subprocess.CompletedProcess[str]:
    """``resumable ls ARGS`` with no $RESUMABLE_STORE."""
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    env.pop("RESUMABLE_STORE", None)
    return subprocess.run([sys.executable, "-m", "resumable", "ls", *args], env=env,
                          capture_output=True, text=True, timeout=120)


def _loop_link(path: Path) -> None:
    """``path`` replaced by a symbolic link to itself: unreadable (ELOOP)."""
    path.unlink()
    path.symlink_to(path.name)


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


# Review 154: attacks on review 151's fixes.

_UNPICKLABLE_THEN_RAISE = """
import threading
from resumable import checkpointed

raised = []

class Stop(Exception):
    pass

@checkpointed(store={store!r}, run_id="r", every="generation", restarts=1,
              restart_on=ValueError, capture_rng=False)
def body(*, state=None):
    state = state or {{"gen": 0}}
    while state["gen"] < 6:
        state["gen"] += 1
        if state["gen"] == 3:
            state["lock"] = threading.Lock()  # a bug: the state cannot be pickled
        yield state
        if "lock" in state:  # and generation 4 fails on it, every time
            raised.append(1)
            if len(raised) > 5:
                raise Stop("restarted for ever")
            raise ValueError("generation 4 fails")
    return state["gen"]

try:
    body()
except BaseException as err:
    print("ended with", type(err).__name__, "after", len(raised), flush=True)
"""


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")
def test_a_state_a_forked_child_cannot_pickle_is_not_a_lost_snapshot(tmp_path: Path) -> None:
    """Review 154: 742ef15 took a snapshot whose child failed to pickle for a lost one and
    restarted from the store, for ever; the SerializationError was never raised."""
    proc = _run(tmp_path, _UNPICKLABLE_THEN_RAISE.format(store=str(tmp_path / "s")),
                RESUMABLE_SNAPSHOT_FORK="1")
    assert "ended with SerializationError after 1" in proc.stdout, (proc.stdout,
                                                                      proc.stderr[-3000:])


def test_restarts_bound_a_failure_that_comes_back_after_replayed_generations(
        tmp_path: Path) -> None:
    """Review 154: with every=3 a restart goes back to step 3, the replayed generation 4
    completed again and reset the count, so a deterministic failure of generation 5 was
    attempted for ever under restarts=1."""
    from resumable import checkpointed

    attempts = []

    class Stop(Exception):
        pass

    @checkpointed(store=str(tmp_path / "s"), every=3, run_id="r", restarts=1,
                  restart_on=ValueError, capture_rng=False)
    def body(*, state=None):
        state = state or 0
        while state < 8:
            if state == 4:  # generation 5 fails, every time
                attempts.append(1)
                if len(attempts) > 5:
                    raise Stop("restarted for ever")
                raise ValueError("generation 5 fails")
            state += 1
            yield state
        return state

    with pytest.raises(ValueError, match="generation 5 fails"):
        body()
    assert len(attempts) == 2  # restarts + 1


def test_a_transient_failure_after_a_completed_generation_gets_its_restarts_again(
        tmp_path: Path) -> None:
    """The count still starts again once a generation beyond the failed one completes."""
    from resumable import checkpointed

    fails = {3: 1, 6: 1}  # generations 3 and 6 fail once each

    @checkpointed(store=str(tmp_path / "s"), every=2, run_id="r", restarts=1,
                  restart_on=ValueError, capture_rng=False)
    def body(*, state=None):
        state = state or 0
        while state < 8:
            if fails.get(state + 1):
                fails[state + 1] -= 1
                raise ValueError(f"generation {state + 1} fails once")
            state += 1
            yield state
        return state

    assert body() == 8


_MANY_FILES_OPEN = """
import os, resource
from resumable import checkpointed

soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
if soft < 1200:
    resource.setrlimit(resource.RLIMIT_NOFILE, (min(hard, 4096), hard))
null = os.open(os.devnull, os.O_RDONLY)
held = [os.dup(null) for _ in range(1100)]  # the application's open files

@checkpointed(store={store!r}, run_id="r", every="generation", capture_rng=False)
def body(*, state=None):
    state = state or {{"gen": 0}}
    while state["gen"] < 5:
        state["gen"] += 1
        yield state
    return state["gen"]

print("result", body(), flush=True)
"""


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")
def test_forked_snapshots_work_with_more_than_1024_files_open(tmp_path: Path) -> None:
    """Review 154: the child's pipe was waited on with select(), which refuses a file
    descriptor >= 1024: the call died of a ValueError."""
    import resource

    if resource.getrlimit(resource.RLIMIT_NOFILE)[1] < 1200:
        pytest.skip("the hard limit on open files is below 1200 here")
    proc = _run(tmp_path, _MANY_FILES_OPEN.format(store=str(tmp_path / "s")),
                RESUMABLE_SNAPSHOT_FORK="1")
    assert proc.returncode == 0 and "result 5" in proc.stdout, proc.stderr[-3000:]


def test_the_store_variable_is_named_only_for_a_bad_url(tmp_path: Path) -> None:
    """Review 154: the $RESUMABLE_STORE hint was added to any error naming the URL: an
    AWS profile that does not exist, a storage fault in one run's object."""
    env = dict(os.environ, PYTHONPATH=str(ROOT), RESUMABLE_STORE="s3://some-bucket/runs",
               AWS_PROFILE="no-such-profile-review154", AWS_CONFIG_FILE=os.devnull,
               AWS_SHARED_CREDENTIALS_FILE=os.devnull)
    out = subprocess.run([sys.executable, "-c", textwrap.dedent("""
        from resumable.stores import open_store
        try:
            open_store(None)
        except Exception as err:
            print(type(err).__name__, err)
        """)], env=env, capture_output=True, text=True, timeout=120)
    assert "no-such-profile-review154" in out.stdout, (out.stdout, out.stderr[-2000:])
    assert "RESUMABLE_STORE" not in out.stdout, out.stdout

    store = tmp_path / "store"
    _runs(store, ("run-a", "run-b"))
    run_b = store / "run-b"
    _loop_link(max(p for p in run_b.iterdir() if p.name.startswith("ckpt-")))
    cli = subprocess.run([sys.executable, "-m", "resumable", "ls", "--check"],
                         env=dict(os.environ, PYTHONPATH=str(ROOT), RESUMABLE_STORE=str(store)),
                         capture_output=True, text=True, timeout=120)
    assert cli.returncode == 74, (cli.stdout, cli.stderr)
    assert "run-a" in cli.stdout and "RESUMABLE_STORE" not in cli.stderr, cli.stderr


def test_an_unreadable_newest_checkpoint_shows_no_made_up_age_or_size(tmp_path: Path) -> None:
    """Review 154: a run whose newest checkpoint could not be read (a symbolic-link loop
    at its name, listed with time 0 and size 0) showed AGE 20793d and SIZE 0 B, and
    newest_created 1970-01-01 in --json; with every run unreadable the error still said
    "the other runs are listed"."""
    import json

    store = tmp_path / "store"
    _runs(store, ("run-a", "run-b"))
    for rid in ("run-a", "run-b"):
        _loop_link(max(p for p in (store / rid).iterdir() if p.name.startswith("ckpt-")))
    table = _ls("--check", str(store))
    assert table.returncode == 74, table.stderr
    assert "d (unreadable)" not in table.stdout and " 0 B" not in table.stdout, table.stdout
    assert "no run could be read" in table.stderr, table.stderr
    js = _ls("--check", "--json", str(store))
    runs = json.loads(js.stdout)["runs"]
    assert [r["run_id"] for r in runs] == ["run-a", "run-b"]
    assert all(r["newest_created"] is None and r["newest_bytes"] is None for r in runs), runs


# Review 155: attacks on review 154's fixes.

def test_each_generation_has_its_own_restarts(tmp_path: Path) -> None:
    """Review 155: one count for all generations until the failed one completed: with
    every=10, generation 15 failed once, the restart replayed 11-14, generation 13 failed
    once there, and that used up 15's restart (the call raised; before 68a202c it
    returned, and DESIGN gives each generation restarts + 1 attempts)."""
    from resumable import checkpointed

    class Transient(Exception):
        pass

    attempts: dict[int, int] = {}

    @checkpointed(store=str(tmp_path / "s"), every=10, run_id="r", restarts=1,
                  restart_on=Transient, capture_rng=False)
    def body(*, state=None):
        state = state or 0
        while state < 20:
            g = state + 1
            attempts[g] = attempts.get(g, 0) + 1
            if (g == 15 and attempts[g] == 1) or (g == 13 and attempts[g] == 2):
                raise Transient(f"generation {g} fails once")
            state = g
            yield state
        return state

    assert body() == 20
    assert attempts[13] == 3 and attempts[15] == 2, attempts


def test_the_store_variable_is_named_for_bad_url_options_and_paths(tmp_path: Path) -> None:
    """Review 155: 68a202c matched the words "store URL", and lost the hint for a bad
    option (`?sse=bogus`) and for a store path that is a file."""
    a_file = tmp_path / "a-file"
    a_file.write_text("")
    for value in ("s3://bucket/runs?sse=bogus", "s3://bucket/runs?read_timeout=0",
                  str(a_file)):
        env = dict(os.environ, PYTHONPATH=str(ROOT), RESUMABLE_STORE=value)
        out = subprocess.run([sys.executable, "-c", textwrap.dedent("""
            from resumable.stores import open_store
            try:
                open_store(None)
            except Exception as err:
                print(type(err).__name__, err)
            """)], env=env, capture_output=True, text=True, timeout=120)
        assert "$RESUMABLE_STORE" in out.stdout, (value, out.stdout, out.stderr[-2000:])
        cli = subprocess.run([sys.executable, "-m", "resumable", "ls"], env=env,
                             capture_output=True, text=True, timeout=120, cwd=tmp_path)
        assert cli.returncode == 78 and "$RESUMABLE_STORE" in cli.stderr, (value, cli.stderr)


def test_ls_keeps_a_listed_time_of_zero_for_a_readable_checkpoint(tmp_path: Path) -> None:
    """Review 155: 68a202c blanked AGE and SIZE of any checkpoint listed at time 0 (an
    archive's, --mtime=@0), as if the run had none."""
    import json

    store = tmp_path / "store"
    _runs(store, ("run-a",))
    for path in (store / "run-a").iterdir():
        os.utime(path, (0, 0))
    js = _ls("--json", str(store))
    (row,) = json.loads(js.stdout)["runs"]
    assert row["newest_bytes"] and row["newest_created"], row


def test_ls_says_runs_are_listed_when_only_their_results_are_unreadable(
        tmp_path: Path) -> None:
    """Review 155: with every run's result unreadable (and their checkpoints read), the
    error said "no run could be read"."""
    store = tmp_path / "store"
    _runs(store, ("run-a", "run-b"), finish=True)
    for rid in ("run-a", "run-b"):
        _loop_link(next(p for p in (store / rid).iterdir() if p.name.startswith("result")))
    cli = _ls("--check", str(store))
    assert cli.returncode == 74, cli.stderr
    assert "no run could be read" not in cli.stderr, cli.stderr
    assert "run-a" in cli.stdout and "run-b" in cli.stdout, cli.stdout
