"""The integration examples as their docstrings run them: crash, resume, identical result."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"

# (script, extra arguments, --crash-at), as in each example's docstring.
CASES = [
    ("deap_onemax.py", [], 20),
    ("pygad_sphere.py", [], 30),
    ("pymoo_zdt1.py", [], 25),
    ("cma_ask_tell.py", [], 30),
    ("cma_ask_tell.py", ["--library", "nevergrad"], 100),
]


def _run(script: str, store: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("RESUMABLE_")}
    env.update(OPENBLAS_NUM_THREADS="1", OMP_NUM_THREADS="1")
    return subprocess.run([sys.executable, "-W", "ignore", str(EXAMPLES / script),
                           "--store", str(store), *args],
                          capture_output=True, text=True, env=env, timeout=300)


@pytest.mark.slow
@pytest.mark.parametrize("script, extra, crash_at", CASES,
                         ids=[f"{c[0]}{'-' + c[1][-1] if c[1] else ''}" for c in CASES])
def test_example_crashes_resumes_and_matches_the_library(
        script: str, extra: list[str], crash_at: int, tmp_path: Path) -> None:
    crashed = _run(script, tmp_path, *extra, "--crash-at", str(crash_at))
    assert crashed.returncode == 143, crashed.stdout + crashed.stderr
    assert "simulated pod failure" in crashed.stdout
    resumed = _run(script, tmp_path, *extra, "--verify")
    assert resumed.returncode == 0, resumed.stdout + resumed.stderr
    assert "resuming run" in resumed.stderr
    assert "same seed: identical" in resumed.stdout


def test_crash_mode_kill(tmp_path: Path) -> None:
    """--crash-mode kill: SIGKILL, then the resumed run still matches DEAP's own."""
    crashed = _run("deap_onemax.py", tmp_path, "--crash-at", "10", "--crash-mode", "kill")
    assert crashed.returncode == -9
    resumed = _run("deap_onemax.py", tmp_path, "--verify")
    assert resumed.returncode == 0 and "identical" in resumed.stdout, resumed.stderr
