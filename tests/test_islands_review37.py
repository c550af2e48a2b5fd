"""Review 37 of resumable.islands: an island that ended before the generation a neighbour
waits for, and something other than an object (a folder) where an islands object belongs."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from resumable import ConfigurationError, StoreError
from resumable.islands import Archipelago, MigrantConflictError, MigrationError
from resumable.stores import open_store

ROOT = Path(__file__).resolve().parent.parent

# --- 1. islands that end at other generations ------------------------------------------------

# One island as a pod: a checkpointed body that migrates every 2 generations and records
# where its run ended. Generations differ per island (argv), the plan does not.
_ISLAND = r'''
import sys
from resumable import checkpointed
from resumable.islands import Archipelago

store, index, generations = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
arch = Archipelago(store, "exp", islands=2, every=2)

@checkpointed(store=store, run_id=f"exp.island-{index}")
def island(generations, *, state=None):
    state = state or {"g": 0, "pop": [float(index)] * 4}
    while state["g"] < generations:
        g = state["g"] + 1
        for imm in arch.migrate(index, g, state["pop"][:1]):
            state["pop"][-1:] = imm
        state["g"] = g
        yield state
    arch.finish(index, state["g"])
    return state["pop"]

print("RESULT", island(generations), flush=True)
'''


def _island(store: Path, index: int, generations: int) -> subprocess.Popen[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("RESUMABLE_")}
    # A guard only: the expected outcome comes at once, a timeout would exit 74, not 78.
    env.update(PYTHONPATH=str(ROOT), RESUMABLE_MIGRATION_TIMEOUT="60")
    return subprocess.Popen([sys.executable, "-c", _ISLAND, str(store), str(index),
                             str(generations)], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=env)


def _ended(proc: subprocess.Popen[str]) -> tuple[int, str, str]:
    out, err = proc.communicate(timeout=120)
    return proc.returncode, out, err


def test_a_neighbour_that_finished_earlier_is_a_prompt_fatal_error_in_every_retry(
    tmp_path: Path,
) -> None:
    """Island 1 runs 2 generations and finishes; island 0 runs 4 and needs island 1's
    generation-4 migrants. Before: island 0 waited the whole timeout (600 s by default),
    then MigrationError, exit 74 (retriable), 'is island 1 running?', and every pod retry
    waited again. Now: ConfigurationError, exit 78, at once, saying where island 1
    ended, in the first attempt and in the retry (which resumes from its checkpoint)."""
    store = tmp_path / "store"
    one, zero = _island(store, 1, 2), _island(store, 0, 4)
    code, out, err = _ended(one)
    assert code == 0, err[-3000:]
    assert "RESULT [1.0, 1.0, 1.0, 0.0]" in out
    for attempt in (zero, _island(store, 0, 4)):  # the first pod, and a pod retry
        code, _, err = _ended(attempt)
        assert code == 78, err[-3000:]
        last = err.strip().splitlines()[-1]
        assert "ConfigurationError" in last, last
        for part in ("island 0 needs the emigrants of island 1 at generation 4",
                     "experiment 'exp'", f"{store.as_uri()}/exp/migrants/1/4",
                     "island 1 finished at generation 2", "exp/finished/1",
                     "retrying does not help", "same generations"):
            assert part in last, (part, last)
    # Island 1, called again (its run is complete): the same result, nothing rewritten.
    code, again, err = _ended(_island(store, 1, 2))
    assert code == 0 and again == out, err[-3000:]


def test_generations_in_the_plan_refuse_another_number_at_the_first_migration(
    any_store_url: str,
) -> None:
    """Archipelago(..., generations=N): the last generation joins the plan. An island
    with another number is refused (exit 78) before it publishes or waits, and a
    migration past the last generation is refused at once, not after the timeout."""
    short = Archipelago(any_store_url, "exp", 2, every=2, generations=2, timeout=30)
    assert short.plan()["generations"] == 2
    short.publish(1, 2, "i1g2")
    before = sorted(open_store(any_store_url).list("exp/"))
    long = Archipelago(any_store_url, "exp", 2, every=2, generations=4, timeout=30)
    with pytest.raises(ConfigurationError) as info:
        long.migrate(0, 2, "i0g2")
    message = str(info.value)
    assert '"generations":2' in message and '"generations":4' in message, message
    assert "'exp'" in message and "exp/plan" in message and info.value.exit_code == 78
    assert sorted(open_store(any_store_url).list("exp/")) == before
    for call in (lambda: short.migrate(0, 3, "x"), lambda: short.receive(1, 4, reader=0),
                 lambda: short.publish(0, 4, "x")):
        with pytest.raises(ConfigurationError, match=(
                r"island 0 of experiment 'exp' in \S+ [^,]+ at generation [34], past the "
                r"experiment's last generation 2 \(generations=2 in its plan\)")):
            call()
    assert sorted(open_store(any_store_url).list("exp/")) == before
    # Without generations the plan is what it was: experiments recorded before still match.
    assert "generations" not in Archipelago(any_store_url, "old", 2).plan()
    with pytest.raises(ConfigurationError, match=r"^generations must be a positive int"):
        Archipelago(any_store_url, "exp", 2, generations=0)


def test_finish_is_create_only_and_ends_the_island(any_store_url: str) -> None:
    """finish() again with the same generation (a resumed island) is a no-op; with another
    it is refused; the finished island cannot publish later generations; a neighbour
    reading a generation the island skipped is told so at once."""
    arch = Archipelago(any_store_url, "exp", 2, every=1, timeout=30)
    arch.publish(1, 1, "i1g1")
    arch.publish(1, 3, "i1g3")  # (generation 2 never published: a body that skipped it)
    arch.finish(1, 3)
    resumed = Archipelago(any_store_url, "exp", 2, every=1, timeout=30)
    resumed.finish(1, 3)
    resumed.publish(1, 3, "i1g3")  # a replayed publish up to the end is fine
    with pytest.raises(ConfigurationError, match=r"finishes at generation 4, but it already "
                       r"finished at generation 3 \(\S+/exp/finished/1\)"):
        resumed.finish(1, 4)
    with pytest.raises(ConfigurationError, match=r"island 1 of experiment 'exp' publishes "
                       r"emigrants for generation 4 .*already finished at generation 3"):
        resumed.publish(1, 4, "i1g4")
    reader = Archipelago(any_store_url, "exp", 2, every=1, timeout=30)
    assert reader.receive(1, 3) == "i1g3"
    with pytest.raises(ConfigurationError, match=r"island 0 needs the emigrants of island 1 at "
                       r"generation 2 .*finished at generation 3 .*without publishing them.*"
                       r"call migrate\(\) at every generation"):
        reader.migrate(0, 2, "i0g2")
    with pytest.raises(ConfigurationError, match=r"finished at generation 3"):
        reader.receive(1, 5)


# --- 2. a folder where an islands object belongs (local store) ------------------------------


def test_publishing_onto_a_folder_is_a_store_error_not_a_zombie(tmp_path: Path) -> None:
    """Before: MigrantConflictError (exit 65) blaming 'a zombie pod'."""
    arch = Archipelago(tmp_path, "f", 2, timeout=5)
    (tmp_path / "f" / "migrants" / "1" / "1").mkdir(parents=True)
    with pytest.raises(StoreError) as info:
        arch.publish(1, 1, [1.0])
    assert not isinstance(info.value, MigrantConflictError)
    message = str(info.value)
    assert "f/migrants/1/1" in message and "experiment 'f'" in message, message
    assert "zombie" not in message and info.value.key == "f/migrants/1/1"


def test_a_folder_where_the_plan_belongs_is_a_store_error(tmp_path: Path) -> None:
    """Before: both Archipelagos (other plans) published; the plan was never enforced."""
    (tmp_path / "pl" / "plan").mkdir(parents=True)
    for arch in (Archipelago(tmp_path, "pl", 2, every=1, timeout=5),
                 Archipelago(tmp_path, "pl", 3, every=2, timeout=5)):
        with pytest.raises(StoreError) as info:
            arch.publish(0, 2, [1])
        message = str(info.value)
        assert "pl/plan" in message and "experiment 'pl'" in message, message
    assert not (tmp_path / "pl" / "migrants").exists()


def test_a_reader_waiting_where_a_folder_is_is_told_so(tmp_path: Path) -> None:
    """A folder at the name is no object (the store contract, as on S3): the reader waits,
    and its sender's publish fails with the StoreError above. Before, the timeout's
    MigrationError only asked whether island 1 was running; now it names the folder.
    (timeout=0: the timeout is the expected outcome here, no time passes.)"""
    arch = Archipelago(tmp_path, "f", 2, timeout=0)
    (tmp_path / "f" / "migrants" / "1" / "1" / "x").mkdir(parents=True)
    (tmp_path / "f" / "migrants" / "1" / "1" / "x" / "y").write_bytes(b"")
    with pytest.raises(MigrationError) as info:
        arch.migrate(0, 1, [1.0])
    message = str(info.value)
    assert "f/migrants/1/1" in message and "experiment 'f'" in message, message
    assert "1 key(s) lie below that name ('f/migrants/1/1/x/y'...)" in message, message
    assert "move them away" in message
    with pytest.raises(StoreError, match=r"f/migrants/1/1"):
        arch.publish(1, 1, [1.0])
