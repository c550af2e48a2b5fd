"""examples/ga.py as the Quickstart runs it: crash, resume, same best fitness."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, cast

import pytest

GA = Path(__file__).resolve().parent.parent / "examples" / "ga.py"


def _command(store: Path, args: tuple[str, ...]) -> tuple[list[str], dict[str, str]]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("RESUMABLE_")}
    return [sys.executable, str(GA), "--store", str(store), "--json-summary", *args], env


def ga(store: Path, *args: str) -> subprocess.CompletedProcess[str]:
    cmd, env = _command(store, args)
    return subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=120)


def start_ga(store: Path, *args: str) -> subprocess.Popen[str]:
    cmd, env = _command(store, args)
    return subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                            env=env)


def summary(proc: subprocess.CompletedProcess[str]) -> dict[str, Any]:
    assert proc.returncode == 0, proc.stderr
    return cast(dict[str, Any], json.loads(proc.stdout.strip().splitlines()[-1]))


def best_line(proc: subprocess.CompletedProcess[str]) -> str:
    return next(line for line in proc.stdout.splitlines() if line.startswith("best fitness:"))


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory: pytest.TempPathFactory) -> subprocess.CompletedProcess[str]:
    """The default run (50 generations of 200), never interrupted."""
    proc = ga(tmp_path_factory.mktemp("reference"))
    assert summary(proc)["resumed_from"] == 0
    return proc


def test_crash_then_resume_gives_the_uninterrupted_result(
    tmp_path: Path, uninterrupted: subprocess.CompletedProcess[str]
) -> None:
    """--crash-at 30 exits non-zero; the next start resumes at 30 with the same best fitness."""
    crashed = ga(tmp_path, "--crash-at", "30")
    assert crashed.returncode == 143, crashed.stderr
    assert "simulated pod failure at generation 30" in crashed.stdout
    resumed = ga(tmp_path)
    s = summary(resumed)
    assert "resuming from it" in resumed.stdout
    assert (s["resumed_from"], s["ran"], s["skipped"]) == (30, 20, 30)
    assert "generations skipped thanks to the checkpoint: 30" in resumed.stdout
    assert best_line(resumed).split(" (")[0] == best_line(uninterrupted).split(" (")[0]
    assert s["best_fitness"] == summary(uninterrupted)["best_fitness"]


def test_completed_run_returns_its_stored_result(
    tmp_path: Path, uninterrupted: subprocess.CompletedProcess[str]
) -> None:
    """Running the Quickstart again returns the stored result and says how to start over."""
    first = summary(ga(tmp_path))
    again = ga(tmp_path, "--crash-at", "30")
    s = summary(again)
    assert s["complete_before"] is True and s["ran"] == 0
    assert "already complete" in again.stdout and "--fresh" in again.stdout
    assert s["best_fitness"] == first["best_fitness"] == summary(uninterrupted)["best_fitness"]
    fresh = summary(ga(tmp_path, "--fresh"))
    assert fresh["resumed_from"] == 0 and fresh["ran"] == 50
    assert fresh["best_fitness"] == first["best_fitness"]


def test_crash_mode_kill_resumes_from_what_was_written(
    tmp_path: Path, uninterrupted: subprocess.CompletedProcess[str]
) -> None:
    """SIGKILL at 30 loses checkpoints still uploading; the resume starts at or before 30."""
    crashed = ga(tmp_path, "--crash-at", "30", "--crash-mode", "kill")
    assert crashed.returncode == -signal.SIGKILL
    s = summary(ga(tmp_path))
    assert 0 <= s["resumed_from"] <= 30 and s["ran"] == 50 - s["resumed_from"]
    assert s["best_fitness"] == summary(uninterrupted)["best_fitness"]


def test_sigkill_from_outside_then_resume(
    tmp_path: Path, uninterrupted: subprocess.CompletedProcess[str]
) -> None:
    """kill -9 mid-run (slow generations), rerun: it resumes and ends with the same result."""
    # Slow enough (50 x 0.3 s) that the run is still going when generation 5 is durable
    # and we kill it, whatever the machine's load (at 0.05 s a 2 s stall here let it
    # finish first); the deadline only stops a hang.
    proc = start_ga(tmp_path, "--gen-time", "0.3")
    deadline = time.monotonic() + 120
    try:
        # Kill once a few generations are durable, as a node loss would.
        while not any(int(p.name.rsplit("-", 1)[1]) >= 5
                      for p in tmp_path.glob("*/ckpt-*") if not p.name.startswith(".")):
            assert proc.poll() is None, proc.communicate()
            assert time.monotonic() < deadline, "no checkpoint of generation 5 appeared"
            time.sleep(0.02)
        proc.send_signal(signal.SIGKILL)
    finally:
        proc.wait(timeout=30)
        if proc.stderr is not None:
            proc.stderr.close()
    assert proc.returncode == -signal.SIGKILL
    s = summary(ga(tmp_path))
    assert 5 <= s["resumed_from"] < 50
    assert s["best_fitness"] == summary(uninterrupted)["best_fitness"]


def test_verify_flag_compares_with_an_in_memory_run(tmp_path: Path) -> None:
    """--verify reruns the GA uninterrupted in memory:// and reports a bit-exact match."""
    assert ga(tmp_path, "--crash-at", "10", "--generations", "20").returncode == 143
    proc = ga(tmp_path, "--generations", "20", "--verify")
    assert summary(proc)["verified"] is True
    assert "identical, bit for bit" in proc.stdout


def test_flags_that_do_not_define_the_run_keep_its_id(tmp_path: Path) -> None:
    """--crash-at, --gen-time and --store do not change the run id; --seed does."""
    ids = {summary(ga(tmp_path / str(i), *extra))["run_id"]
           for i, extra in enumerate([[], ["--gen-time", "0.001"]])}
    assert len(ids) == 1
    assert summary(ga(tmp_path / "seed", "--seed", "7"))["run_id"] not in ids
