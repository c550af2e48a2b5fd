"""Review 114: run ids of subclasses with slots, RNG dict keys that print alike, `rm
--completed` beside a newer resumable's attempt, states of more than 65,536 arrays."""

from __future__ import annotations

import random
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from resumable import checkpointed

from .test_format import _newer
from .test_identity import resumes_under_an_older_record


class SlottedIndividual(list):  # type: ignore[type-arg]
    __slots__ = ("sigma",)

    def __init__(self, genes: list[float], sigma: float) -> None:
        super().__init__(genes)
        self.sigma = sigma


class SlottedDict(dict):  # type: ignore[type-arg]
    __slots__ = ("scale",)


class Weight(float):
    __slots__ = ("unit",)

    def __new__(cls, value: float, unit: str) -> Weight:
        out = super().__new__(cls, value)
        out.unit = unit
        return out


class Tagged(set):  # type: ignore[type-arg]
    def __init__(self, items: Any, scale: int) -> None:
        super().__init__(items)
        self.scale = scale


class FrozenTagged(frozenset):  # type: ignore[type-arg]
    __slots__ = ("scale",)


def _slotted_dict(scale: int) -> SlottedDict:
    d = SlottedDict(a=1)
    d.scale = scale
    return d


def _frozen(scale: int) -> FrozenTagged:
    f = FrozenTagged({1, 2})
    f.scale = scale
    return f


@pytest.mark.parametrize(("a", "b"), [
    (SlottedIndividual([1.0, 2.0], 0.1), SlottedIndividual([1.0, 2.0], 5.0)),
    (_slotted_dict(1), _slotted_dict(2)),
    (Weight(2.0, "m"), Weight(2.0, "km")),
    (Tagged({1, 2}, 1), Tagged({1, 2}, 7)),
    (_frozen(1), _frozen(7)),
], ids=["list-slots", "dict-slots", "float-slots", "set-attribute", "frozenset-slots"])
def test_subclass_attributes_tell_run_ids_apart(tmp_path: Path, a: Any, b: Any) -> None:
    """Two arguments that differ only in a slot (or a set subclass's attribute) got one
    run id, and the second call returned the first call's result (review 114)."""

    @checkpointed(store=str(tmp_path))
    def run(x: Any, *, state: Any = None) -> Any:
        yield 1
        return repr(getattr(x, "sigma", None)) + repr(getattr(x, "unit", None)) + \
            repr(getattr(x, "scale", None))

    assert run.run_id(a) != run.run_id(b)
    assert run(a) != run(b)


def test_unset_slots_and_plain_subclasses_keep_their_run_ids() -> None:
    """Only values that collided move: a slotted subclass with its slots unset, and
    subclasses without attributes, encode as encoding 4 did."""
    from resumable._runid import encode_value_as

    values = [SlottedIndividual.__new__(SlottedIndividual), Tagged.__new__(Tagged),
              FrozenTagged({1}), SlottedDict(a=1)]
    for value in values:
        assert encode_value_as(value, "x", 5) == encode_value_as(value, "x", 4)


class Op:
    """An operator used as a dict key: compared by identity, printed by its kind."""

    def __init__(self, kind: str, rate: float) -> None:
        self.kind, self.rate = kind, rate

    def __repr__(self) -> str:
        return f"Op({self.kind})"

    def __reduce__(self) -> Any:
        return (Op, (self.kind, self.rate))


def _streams() -> dict[Any, Any]:
    return {Op("mutate", 0.1): np.random.default_rng(1),
            Op("mutate", 0.5): np.random.default_rng(2), "plain": random.Random(3)}


def _draws(streams: dict[Any, Any], crash: list[int], *, state: Any = None) -> Any:
    state = state or []
    while len(state) < 6:
        state.append([float(g.random()) for g in streams.values()])
        if len(state) == 3 and crash:
            crash.clear()
            raise RuntimeError("crash")
        yield state
    return state


def test_rng_keys_that_print_alike_are_restored_each_to_its_own(tmp_path: Path) -> None:
    """Two generators under dict keys with one repr were saved under one path: after a
    resume both drew the same numbers (review 114)."""
    reference = checkpointed(store=str(tmp_path / "a"), ignore=["crash"])(_draws)(_streams(), [])
    f = checkpointed(store=str(tmp_path / "b"), ignore=["crash"])(_draws)
    with pytest.raises(RuntimeError, match="crash"):
        f(_streams(), [1])
    assert f(_streams(), []) == reference


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "resumable", *args], capture_output=True,
                          text=True, timeout=120)


def _extendable(gens: int, crash_at: int | None = None, *, state: Any = None) -> Any:
    """A body a call extends (``gens`` ignored), stopped at ``crash_at`` if given."""
    state = state or {"g": 0}
    while state["g"] < gens:
        state["g"] += 1
        if state["g"] == crash_at:
            raise RuntimeError("pod preempted")
        yield state
    return state["g"]


def test_rm_completed_leaves_a_run_a_newer_resumable_is_extending(tmp_path: Path) -> None:
    """A newer-format attempt record was taken for damage that "fences nothing": the run
    counted as completed and `rm --completed` deleted the newer version's work."""
    store = tmp_path / "store"

    evolve = checkpointed(store=str(store), every=1, ignore=["gens", "crash_at"],
                          run_id="ga")(_extendable)
    assert evolve(3) == 3
    with pytest.raises(RuntimeError):
        evolve(10, crash_at=6)  # attempt 2 extends the completed run
    folder = store / "ga"
    attempts = sorted(p for p in folder.iterdir() if p.name.startswith("epoch-"))
    newest = attempts[-1]
    newest.write_bytes(bytes(_newer(bytearray(newest.read_bytes()))))
    done = _cli("rm", "--completed", "--yes", str(store))
    assert done.returncode == 0, done.stderr
    assert (folder / newest.name).exists()
    assert any(p.name.startswith("ckpt-") for p in folder.iterdir())
    shown = _cli("show", str(store), "ga")
    assert "upgrade" in shown.stdout + shown.stderr


def test_a_state_of_more_than_65536_arrays_resumes(tmp_path: Path) -> None:
    """Each array is a frame of the object: past 65,536 the checkpoints were written, then
    refused on resume as damaged, with the advice to delete the run (review 114)."""
    crash = [1]

    @checkpointed(store=str(tmp_path), every=1, ignore=["crash"])
    def evolve(n: int, crash: list[int], *, state: Any = None) -> Any:
        state = state or {"gen": 0, "pop": [np.full(2, i, dtype=np.float64) for i in range(n)]}
        while state["gen"] < 3:
            state["gen"] += 1
            for ind in state["pop"]:
                ind += 1.0
            if state["gen"] == 2 and crash:
                crash.clear()
                raise RuntimeError("preempted")
            yield state
        return float(sum(float(ind.sum()) for ind in state["pop"]))

    n = 66_000
    with pytest.raises(RuntimeError, match="preempted"):
        evolve(n, crash)
    assert evolve(n, crash) == float(sum(2 * (i + 3) for i in range(n)))


def test_more_arrays_than_a_checkpoint_holds_fail_the_save_not_the_resume(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Past the bound a reader keeps, the save fails (SerializationError naming the
    count), on the loop's thread: never a checkpoint that no resume can read."""
    from resumable import SerializationError, serializers

    monkeypatch.setattr(serializers, "_MOST_FRAMES", 100)

    @checkpointed(store=str(tmp_path))
    def evolve(n: int, *, state: Any = None) -> Any:
        yield {"pop": [np.zeros(2) for _ in range(n)]}

    evolve(50)
    with pytest.raises(SerializationError, match=r"holds 200 numpy arrays.*np\.stack"):
        evolve(200)


def test_a_fixed_run_started_under_encoding_4_resumes_under_5(tmp_path: Path) -> None:
    """A run named with run_id= whose record encoding 4 wrote: an argument whose bytes
    encoding 5 moved (a slotted attribute) is checked with encoding 4's hash, no
    RunMismatchError."""
    resumes_under_an_older_record(tmp_path, SlottedIndividual([1.0, 2.0], 0.5), older=4)


def test_verify_and_ls_say_upgrade_for_a_run_a_newer_resumable_wrote(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """`verify` exited 65 (corrupt) and `ls` said "damaged" where the library says
    "upgrade" (exit 78); a resume past newer checkpoints called them damaged."""
    store = tmp_path / "store"

    evolve = checkpointed(store=str(store), every=1, ignore=["gens", "crash_at"],
                          run_id="ga")(_extendable)
    evolve(3)
    for path in (store / "ga").iterdir():
        path.write_bytes(bytes(_newer(bytearray(path.read_bytes()))))
    verified = _cli("verify", str(store), "ga")
    assert verified.returncode == 78, verified.stderr
    assert "newer resumable" in verified.stderr and "upgrade" in verified.stderr
    listed = _cli("ls", str(store))
    assert listed.returncode == 0
    row = next(line for line in listed.stdout.splitlines() if line.startswith("ga "))
    assert "newer" in row.split() and "damaged" not in row

    other = tmp_path / "other"
    evolve2 = checkpointed(store=str(other), every=1, ignore=["gens", "crash_at"],
                           run_id="ga")(_extendable)
    evolve2(3)
    with pytest.raises(RuntimeError):
        evolve2(10, crash_at=6)
    for path in (other / "ga").iterdir():
        if path.name.startswith("ckpt-00000002"):
            path.write_bytes(bytes(_newer(bytearray(path.read_bytes()))))
    with caplog.at_level("WARNING", logger="resumable"):
        assert evolve2(10) == 10
    assert "a newer resumable wrote" in caplog.text
    assert "damaged" not in caplog.text
