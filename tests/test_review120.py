"""Review 120 (process trees): a group SIGTERM that ends a pool's workers while the body
catches their failures, an application handler installed after
install_signal_handlers(), and a SIGTERM while a resume loads its checkpoint."""

from __future__ import annotations

import os
import signal
import subprocess
from pathlib import Path

import pytest

from resumable._errors import EXIT_SIGTERM

from .signal_children import finish, spawn, wait_for

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
    def run(store: str, mark: str) -> tuple[subprocess.Popen[str], str, str]:
        proc = spawn(tmp_path, _PENALTY_GA, store, kind, mark, start_new_session=True)
        out, err = finish(proc, group=True)
        return proc, out, err

    ref, ref_out, err = run(str(tmp_path / "ref"), "-")
    assert ref.returncode == 0, err[-3000:]
    mark = tmp_path / "mark"
    mark.mkdir()
    proc = spawn(tmp_path, _PENALTY_GA, str(tmp_path / "store"), kind, str(mark),
                 start_new_session=True)
    try:
        wait_for(mark, proc, inside=True)
        os.killpg(proc.pid, signal.SIGTERM)
    finally:
        _, err = finish(proc, group=True)
    assert proc.returncode == EXIT_SIGTERM, err[-3000:]
    assert "step 3 is not saved" in err and "SIGTERM" in err, err[-3000:]
    again, out, err = run(str(tmp_path / "store"), "-")
    assert again.returncode == 0, err[-3000:]
    assert _result(out) == _result(ref_out)


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

    go = tmp_path / "go"
    proc = spawn(tmp_path, _APP_HANDLER_AFTER, str(tmp_path / "s"), str(go))
    try:
        assert proc.stdout is not None
        for line in proc.stdout:
            if line.strip() == "gen 20":
                break
        proc.send_signal(signal.SIGTERM)
        go.touch()
    finally:
        out, err = finish(proc)
    assert proc.returncode == EXIT_SIGTERM, (out, err[-3000:])
    assert "app handler called" in out  # chained, after the save
    latest = Run(open_store(str(tmp_path / "s")), "r").load_latest()
    assert latest is not None and latest.step == 20


SLOW_READ = """
import os, sys, time
from resumable import checkpointed

STORE, MARK, GO, MODE = sys.argv[1:5]

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
    return state["slow"] if MODE == "result" else state["s"]

if MODE == "first":  # two steps, then stopped (closing the iterator saves step 2)
    it = f.iter(5)
    next(it), next(it)
    it.close()
else:
    print("RESULT", f(5), flush=True)
"""


def test_a_sigterm_while_a_resume_reads_its_checkpoint_exits_143(tmp_path: Path) -> None:
    """A SIGTERM while the checkpoint was read (before the run was registered) found no
    run: the default action killed the process (status -15, not 143) (review 120)."""
    store, mark, go = str(tmp_path / "s"), tmp_path / "mark", tmp_path / "go"
    first = spawn(tmp_path, SLOW_READ, store, "-", "-", "first")
    _, err = finish(first)
    assert first.returncode == 0, err[-3000:]
    proc = spawn(tmp_path, SLOW_READ, store, str(mark), str(go), "again")
    wait_for(mark, proc)
    proc.send_signal(signal.SIGTERM)
    go.touch()
    out, err = finish(proc)
    assert proc.returncode == EXIT_SIGTERM, err[-3000:]
    assert "body ran" not in out and "stopped before its body started" in err, err[-3000:]
    again = spawn(tmp_path, SLOW_READ, store, "-", "-", "again")
    out, err = finish(again)
    assert "RESULT 5" in out, err[-3000:]
