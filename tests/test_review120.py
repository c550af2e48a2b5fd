"""Review 120 (process trees): a group SIGTERM that ends a pool's workers while the body
catches their failures, an application handler installed after
install_signal_handlers(), and a SIGTERM while a resume loads its checkpoint."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import threading
from pathlib import Path

import pytest

from resumable._errors import EXIT_SIGTERM

ROOT = Path(__file__).resolve().parents[1]
ENV = dict(os.environ, PYTHONPATH=str(ROOT), RESUMABLE_TERM_TIMEOUT="20")

_PENALTY_GA = """
import concurrent.futures as cf, multiprocessing as mp, os, sys, threading
import numpy as np
from resumable import checkpointed

STORE, KIND, MARK = sys.argv[1], sys.argv[2], sys.argv[3]

def fitness(args):
    gen, row = args
    if gen == 3 and MARK != "-":
        open(os.path.join(MARK, f"busy-{os.getpid()}"), "w").close()
        threading.Event().wait()  # an evaluation in flight when the group's SIGTERM comes
    return float(np.sum(row * row))

def evaluate(pool, pop, gen):
    out = []
    for fut in [pool.submit(fitness, (gen, row)) for row in pop]:
        try:
            out.append(fut.result())
        except Exception:  # a crashed evaluation gets a penalty: the run goes on
            out.append(1e9)
    return np.array(out)

@checkpointed(every="generation", store=STORE, run_id="ga")
def evolve(n, *, state=None):
    with cf.ProcessPoolExecutor(2, mp_context=mp.get_context(KIND)) as pool:
        if state is None:
            rng = np.random.default_rng(1)
            state = {"gen": 0, "rng": rng, "pop": rng.normal(size=(8, 4)), "best": []}
        while state["gen"] < n:
            g = state["gen"] + 1
            fit = evaluate(pool, state["pop"], g)
            order = np.argsort(fit)
            parents = state["pop"][order[:4]]
            kids = parents + state["rng"].normal(scale=0.1, size=parents.shape)
            state["pop"] = np.concatenate([parents, kids])
            state["best"].append(float(fit[order[0]]))
            state["gen"] = g
            yield state
    return state["best"]

if __name__ == "__main__":
    print("RESULT", repr(evolve(5)), flush=True)
"""


def _result(out: str) -> str:
    return [line for line in out.splitlines() if line.startswith("RESULT")][-1]


@pytest.mark.parametrize("kind", ["fork", "spawn", "forkserver"])
def test_a_group_sigterm_that_ends_the_pool_workers_saves_no_penalised_generation(
        tmp_path: Path, kind: str) -> None:
    """kill -TERM -PGID while a ProcessPoolExecutor evaluates generation 3, in a body that
    gives failed evaluations a penalty: the generation it yielded was computed around the
    dead workers, and was saved; the restarted run resumed it and differed (review 120)."""
    script = tmp_path / "ga.py"
    script.write_text(textwrap.dedent(_PENALTY_GA))
    ref = subprocess.run([sys.executable, str(script), str(tmp_path / "ref"), kind, "-"],
                         capture_output=True, text=True, env=ENV, timeout=300)
    assert ref.returncode == 0, ref.stderr[-3000:]
    mark = tmp_path / "mark"
    mark.mkdir()
    proc = subprocess.Popen(
        [sys.executable, str(script), str(tmp_path / "store"), kind, str(mark)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=ENV,
        start_new_session=True)
    try:
        _wait_for_a_file(mark, proc)
        os.killpg(proc.pid, signal.SIGTERM)
        _, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.communicate()
    assert proc.returncode == EXIT_SIGTERM, err[-3000:]
    assert "step 3 is not saved" in err and "SIGTERM" in err, err[-3000:]
    again = subprocess.run([sys.executable, str(script), str(tmp_path / "store"), kind, "-"],
                           capture_output=True, text=True, env=ENV, timeout=300)
    assert again.returncode == 0, again.stderr[-3000:]
    assert _result(again.stdout) == _result(ref.stdout)


def _wait_for_a_file(folder: Path, proc: subprocess.Popen[str]) -> None:
    """Until a file appears in ``folder`` (an event the child makes), or the child ends."""
    done = threading.Event()

    def watch() -> None:
        proc.wait()
        done.set()

    threading.Thread(target=watch, daemon=True).start()
    while not any(folder.iterdir()):
        if done.wait(0.01):
            _, err = proc.communicate()
            pytest.fail(f"the run ended before a worker was busy: {err[-3000:]}")


_APP_HANDLER_AFTER = """
import os, signal, sys, time
import resumable
from resumable import checkpointed

STORE, GO = sys.argv[1], sys.argv[2]
resumable.install_signal_handlers()  # as the README says for threads, then the app's own

def app_handler(signum, frame):  # (one that logs and returns: a metrics flusher's)
    print("app handler called", flush=True)

signal.signal(signal.SIGTERM, app_handler)

@checkpointed(every=50, store=STORE, run_id="r")
def count(*, state=None):
    s = state or 0
    while s < 400:
        s += 1
        if s == 20:
            print("gen 20", flush=True)
            while not os.path.exists(GO):  # (the test sends the SIGTERM, then makes GO)
                time.sleep(0.005)
        yield s
    return s

print("RESULT", count(), flush=True)
"""


def test_an_application_handler_installed_after_install_signal_handlers_is_chained(
        tmp_path: Path) -> None:
    """install_signal_handlers(), then the application's own SIGTERM handler: the run
    found ours 'installed' and did not install it again, so the SIGTERM went to the
    application's handler only; the run went on to its end, unsaved past its last due
    yield (in a pod: SIGKILL at the grace period's end) (review 120)."""
    from resumable._run import Run
    from resumable.stores import open_store

    script = tmp_path / "app.py"
    script.write_text(textwrap.dedent(_APP_HANDLER_AFTER))
    go = tmp_path / "go"
    proc = subprocess.Popen([sys.executable, str(script), str(tmp_path / "s"), str(go)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=ENV)
    try:
        assert proc.stdout is not None
        for line in proc.stdout:
            if line.strip() == "gen 20":
                break
        proc.send_signal(signal.SIGTERM)
        go.touch()
        out, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == EXIT_SIGTERM, (out, err[-3000:])
    assert "app handler called" in out  # chained, after the save
    latest = Run(open_store(str(tmp_path / "s")), "r").load_latest()
    assert latest is not None and latest.step == 20


_SLOW_RESUME = """
import os, sys, time
from resumable import checkpointed

STORE, MARK, GO = sys.argv[1], sys.argv[2], sys.argv[3]

class Slow:
    def __init__(self):
        self.loaded = False  # (an empty __dict__ is not set on load: no __setstate__)

    def __setstate__(self, state):
        self.__dict__.update(state)
        if MARK != "-":
            open(MARK, "w").close()
            while not os.path.exists(GO):  # (the test sends the SIGTERM, then makes GO)
                time.sleep(0.005)

@checkpointed(store=STORE, run_id="r")
def f(n, *, state=None):
    state = state or {"s": 0, "slow": Slow()}
    while state["s"] < n:
        state["s"] += 1
        yield state
    print("body ran to", state["s"], flush=True)
    return state["s"]

if sys.argv[4] == "first":  # two steps, then stopped (closing the iterator saves step 2)
    it = f.iter(5)
    next(it), next(it)
    it.close()
else:
    print("RESULT", f(5), flush=True)
"""


def test_a_sigterm_while_a_resume_reads_its_checkpoint_exits_143(tmp_path: Path) -> None:
    """A SIGTERM while the checkpoint was read (before the run was registered) found no
    run: the default action killed the process (status -15, not 143) (review 120)."""
    script = tmp_path / "resume.py"
    script.write_text(textwrap.dedent(_SLOW_RESUME))
    store, mark, go = str(tmp_path / "s"), tmp_path / "mark", tmp_path / "go"
    first = subprocess.run([sys.executable, str(script), store, "-", "-", "first"],
                           capture_output=True, text=True, env=ENV, timeout=120)
    assert first.returncode == 0, first.stderr[-3000:]
    proc = subprocess.Popen([sys.executable, str(script), store, str(mark), str(go), "again"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=ENV)
    try:
        _wait_for_a_file_named(mark, proc)
        proc.send_signal(signal.SIGTERM)
        go.touch()
        out, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == EXIT_SIGTERM, err[-3000:]
    assert "body ran" not in out and "stopped before its body started" in err, err[-3000:]
    again = subprocess.run([sys.executable, str(script), store, "-", "-", "again"],
                           capture_output=True, text=True, env=ENV, timeout=120)
    assert "RESULT 5" in again.stdout, again.stderr[-3000:]


def _wait_for_a_file_named(path: Path, proc: subprocess.Popen[str]) -> None:
    done = threading.Event()
    threading.Thread(target=lambda: (proc.wait(), done.set()), daemon=True).start()
    while not path.exists():
        if done.wait(0.01):
            _, err = proc.communicate()
            pytest.fail(f"the process ended first: {err[-3000:]}")
