"""A child process of tests/test_review116.py: a run whose RNG arguments sit under dict
keys spelled by value, built in the order the command line says."""

from __future__ import annotations

import enum
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np

from resumable import checkpointed


class Op:
    """An operator used as a key: printed by its kind (or, ``address``, not at all)."""

    def __init__(self, kind: str, rate: float) -> None:
        self.kind, self.rate = kind, rate

    def __repr__(self) -> str:
        return f"Op({self.kind})"


class AddressOp:
    def __init__(self, rate: float) -> None:
        self.rate = rate


def evolve(rngs: dict[Any, Any], n: int, *, state: Any = None) -> Any:
    state = state or {"g": 0, "draws": []}
    while state["g"] < n:
        state["g"] += 1
        if "mutate" in rngs:  # (one generator under several names: drawn by one)
            state["draws"].append(float(rngs["mutate"].random()))
            yield state
            continue
        state["draws"].append(sorted((getattr(op, "rate", None) or sorted(getattr(op, "value", op)),
                                      float(r.random())) for op, r in rngs.items()))
        yield state
    return state["draws"]


class SetOp:
    """Operators named by a frozenset of str: printed in hash order (review 117)."""

    def __init__(self, names: frozenset[str], rate: float) -> None:
        self.names, self.rate = names, rate

    def __hash__(self) -> int:
        return hash(self.names)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, SetOp) and other.names == self.names

    def __repr__(self) -> str:
        return f"SetOp({self.names!r})"


class Region(enum.Enum):
    """Members whose values print in hash order (review 118)."""

    EU = frozenset({"de", "fr", "it", "es", "nl"})
    NA = frozenset({"us", "ca", "mx"})


def make(order: str, keys: str) -> dict[Any, Any]:
    if keys == "shared":  # (review 119: one generator under several keys)
        rng = np.random.default_rng(7)
        names = ["crossover", "mutate", "select"]
        return {name: rng for name in (names if order == "AB" else names[::-1])}
    if keys == "enum":
        pairs = [(Region.EU, np.random.default_rng(1)), (Region.NA, np.random.default_rng(2))]
        return dict(pairs if order == "AB" else pairs[::-1])
    if keys == "frozenset":
        a, b = (frozenset({"select", "crossover", "mutate"}), frozenset({"migrate", "repair"}))
        pairs = [(a, np.random.default_rng(1)), (b, np.random.default_rng(2))]
        return dict(pairs if order == "AB" else pairs[::-1])
    a, b = (Op("mutate", 0.1), Op("mutate", 0.2)) if keys == "alike" else (
        AddressOp(0.1), AddressOp(0.2))
    pairs = [(a, np.random.default_rng(1)), (b, np.random.default_rng(2))]
    return dict(pairs if order == "AB" else pairs[::-1])


def resumed_in_another_order(store: Path, keys: str, seeds: tuple[str, str] = ("1", "1"),
                             spawn: bool = False) -> None:
    """For tests: a run stopped at step 2 in one process (dict built A, B; hash seed
    ``seeds[0]``), resumed in another (B, A; ``seeds[1]``; ``spawn``: in a multiprocessing
    spawn worker of it, which imports this script as ``__mp_main__``), gives the
    uninterrupted run's draws, with every generator restored (no warning)."""
    def run(seed: str, *args: str) -> str:
        done = subprocess.run([sys.executable, __file__, *args, keys], capture_output=True,
                              text=True, timeout=120,
                              env={**os.environ, "PYTHONHASHSEED": seed})
        assert done.returncode == 0, done.stderr
        assert "no state for the RNG" not in done.stderr, done.stderr
        return done.stdout

    reference = run(seeds[0], "full", str(store / "a"), "AB")
    assert run(seeds[0], "part", str(store / "b"), "AB").strip() == "stopped at step 2"
    assert run(seeds[1], "spawned" if spawn else "full", str(store / "b"), "BA") == reference


def _full(store: str, order: str, keys: str) -> str:
    """The whole run (a spawn worker's task: this script is ``__mp_main__`` there)."""
    return str(checkpointed(store=store)(evolve)(make(order, keys), 4))


if __name__ == "__main__":
    role, store, order, keys = sys.argv[1:]
    f = checkpointed(store=store)(evolve)
    rngs = make(order, keys)
    if role == "part":
        it = f.iter(rngs, 4)
        for _ in range(2):
            s = next(it)
        it.close()  # (saves the state it holds: step 2)
        print("stopped at step", s["g"])
    elif role == "spawned":
        import multiprocessing

        with multiprocessing.get_context("spawn").Pool(1) as pool:
            print(pool.apply(_full, (store, order, keys)))
    else:
        print(f(rngs, 4))
