"""`resumable rm --completed [--older-than AGE] [STORE]`: completed runs go, others stay."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from resumable.cli import main
from tests.toy import Crash, Faults, make_evolve

ROOT = Path(__file__).resolve().parents[1]


def _store(tmp_path: Path) -> Path:
    """Two completed runs and one that crashed half-way."""
    store = tmp_path / "store"
    make_evolve(Faults(), store=str(store))(3)
    make_evolve(Faults(), store=str(store))(4)
    with pytest.raises(Crash):
        make_evolve(Faults(crash_at={2}), store=str(store))(5)
    return store


def _runs(store: Path) -> list[str]:
    return sorted(p.name for p in store.iterdir())


def test_removes_completed_runs_only(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    store = _store(tmp_path)
    before = _runs(store)
    assert len(before) == 3
    assert main(["rm", "--completed", str(store), "--yes"]) == 0
    out = capsys.readouterr().out
    assert "deleted 2 completed run(s)" in out
    left = _runs(store)
    assert len(left) == 1 and not (store / left[0] / "result").exists()
    assert main(["rm", "--completed", str(store), "--yes"]) == 0
    assert "no completed runs" in capsys.readouterr().out


def test_older_than(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    store = _store(tmp_path)
    assert main(["rm", "--completed", "--older-than", "7d", str(store), "--yes"]) == 0
    assert "no completed runs older than 7d" in capsys.readouterr().out
    assert len(_runs(store)) == 3
    assert main(["rm", "--completed", "--older-than", "0s", str(store), "--yes"]) == 0
    assert len(_runs(store)) == 1


def test_default_store_and_confirmation(tmp_path: Path) -> None:
    """STORE defaults to $RESUMABLE_STORE; without --yes and a terminal it refuses."""
    store = _store(tmp_path)
    env = dict(os.environ, RESUMABLE_STORE=str(store), PYTHONPATH=str(ROOT))
    cmd = [sys.executable, "-m", "resumable.cli", "rm", "--completed"]
    refused = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=60,
                             stdin=subprocess.DEVNULL)
    assert refused.returncode == 1 and "--yes" in refused.stderr
    assert len(_runs(store)) == 3
    done = subprocess.run([*cmd, "--yes"], capture_output=True, text=True, env=env, timeout=60)
    assert done.returncode == 0, done.stderr
    assert len(_runs(store)) == 1


@pytest.mark.parametrize("argv, message", [
    (["rm", "--completed", "--older-than", "soon", "--yes"], "not a duration"),
    (["rm", "--older-than", "7d", "x"], "goes with --completed"),
    (["rm"], "RUN_ID is missing"),
])
def test_usage_errors(argv: list[str], message: str, tmp_path: Path,
                      capsys: pytest.CaptureFixture[str]) -> None:
    assert main(argv) != 0
    assert message in capsys.readouterr().err


def test_store_and_run_id_together_is_an_error(tmp_path: Path,
                                               capsys: pytest.CaptureFixture[str]) -> None:
    store = _store(tmp_path)
    assert main(["rm", "--completed", str(store), "some-run", "--yes"]) != 0
    assert "give only the STORE" in capsys.readouterr().err
    assert len(_runs(store)) == 3


def test_a_run_being_extended_is_not_completed(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Called again with more generations (ignored), the run keeps its old result while
    the newer attempt runs: neither `ls` nor `rm --completed` may take it as completed."""
    from typing import Any

    from resumable import checkpointed

    store = tmp_path / "store"
    seen: dict[str, Any] = {}

    @checkpointed(store=str(store), run_id="ga", ignore=("generations",))
    def evolve(generations: int, *, state: Any = None) -> Any:
        g = state or 0
        while g < generations:
            g += 1
            if g == 5:  # the extension is live: ask the CLI now
                capsys.readouterr()
                assert main(["ls", "--json", str(store)]) == 0
                seen["ls"] = capsys.readouterr().out
                assert main(["rm", "--completed", str(store), "--yes"]) == 0
                seen["rm"] = capsys.readouterr().out
            yield g
        return g

    assert evolve(3) == 3
    assert evolve(6) == 6
    assert "no completed runs" in seen["rm"], seen["rm"]
    import json
    assert [r["complete"] for r in json.loads(seen["ls"])["runs"]] == [False]
    capsys.readouterr()
    assert main(["ls", "--json", str(store)]) == 0  # finished: completed again
    assert [r["complete"] for r in json.loads(capsys.readouterr().out)["runs"]] == [True]
