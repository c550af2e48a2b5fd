"""Review 116 (of the fixes of reviews 114 and 115): RNG dict keys spelled by value,
`show` and `ls --check` beside a newer resumable's objects."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from resumable import checkpointed

from .rng_keys_child import resumed_in_another_order
from .test_format import _newer


@pytest.mark.parametrize("keys", ["alike", "address"])
def test_rng_keys_spelled_by_value_survive_another_dict_order(tmp_path: Path, keys: str) -> None:
    """Keys that print alike (or print an address) went by position: a resumed process
    that built the dict in another order (from a set, whose order follows addresses)
    restored each generator with the other's state (review 116)."""

    resumed_in_another_order(tmp_path, keys)


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "resumable", *args], capture_output=True,
                          text=True, timeout=120)


def _run(store: Path) -> Any:
    @checkpointed(store=str(store), every=1, ignore=["gens"], run_id="ga")
    def evolve(gens: int, *, state: Any = None) -> Any:
        state = state or {"g": 0, "x": np.zeros(4)}
        while state["g"] < gens:
            state["g"] += 1
            yield state
        return state["g"]

    return evolve


def test_show_says_not_complete_while_a_newer_resumable_extends_the_run(tmp_path: Path) -> None:
    """`show` said "complete: yes" where `ls` and `rm --completed` kept the run: a user
    checking it before `rm STORE RUN` deleted the newer version's work (review 116)."""
    store = tmp_path / "store"
    _run(store)(3)
    record = store / "ga" / "epoch-00000001"
    (store / "ga" / "epoch-00000002").write_bytes(bytes(_newer(bytearray(record.read_bytes()))))
    shown = _cli("show", str(store), "ga")
    assert shown.returncode == 0, shown.stderr
    line = next(x for x in shown.stdout.splitlines() if x.startswith("complete:"))
    assert line.startswith("complete: no") and "newer resumable" in line


def test_ls_check_says_newer_for_a_checkpoint_a_newer_resumable_wrote(tmp_path: Path) -> None:
    """`ls --check` said "(damaged)" (review 116)."""
    import json

    store = tmp_path / "store"
    _run(store)(3)
    for path in (store / "ga").glob("ckpt-*"):
        path.write_bytes(bytes(_newer(bytearray(path.read_bytes()))))
    listed = _cli("ls", "--check", str(store))
    assert listed.returncode == 0, listed.stderr
    row = next(x for x in listed.stdout.splitlines() if x.startswith("ga "))
    assert "(newer)" in row and "damaged" not in row
    rows = json.loads(_cli("ls", "--check", "--json", str(store)).stdout)["runs"]
    assert rows[0]["newest_newer"] is True
