"""Review 105 of resumable.islands: an Archipelago as an island body's argument, islands
without (or with) the signing key of their experiment, experiment names too long or with
control characters, a sender named twice, and the signing key in a pickled Archipelago."""

from __future__ import annotations

import os
import pickle
import random
import subprocess
import sys
from pathlib import Path
from typing import Any

import cloudpickle
import pytest

from resumable import CheckpointTamperedError, ConfigurationError, checkpointed
from resumable._format import decode
from resumable.islands import Archipelago, MigrationError
from resumable.stores import open_store

ROOT = Path(__file__).resolve().parent.parent
KEY = "k" * 32


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("RESUMABLE_")}
    env.update(PYTHONPATH=str(ROOT), **extra)
    return env


def _run(code: str, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", code, *args], capture_output=True,
                          text=True, env=_env(**env), timeout=300, check=False)


# --- 1. an island body that takes its Archipelago as an argument ------------------------------

# One island pod: the documented pattern with the archipelago passed to the body (so the
# experiment is part of the run id). It dies (os._exit) right after the checkpoint of
# generation `stop` (0: never).
_ISLAND = r'''
import os, random, sys
from resumable import checkpointed
from resumable.islands import Archipelago

store, mode, experiment, stop = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
opts = {"store": store}
if mode == "fixed":
    opts["run_id"] = experiment + ".island-0"

@checkpointed(**opts)
def island(archipelago, index, generations, *, state=None):
    if state is None:
        state = {"generation": 0, "x": 0.0, "rng": random.Random(index)}
        print("START fresh", flush=True)
    else:
        print("START resumed", state["generation"], flush=True)
    while state["generation"] < generations:
        g = state["generation"] + 1
        state["x"] += state["rng"].random()
        archipelago.migrate(index, g, [state["x"]])
        state["generation"] = g
        yield state
        if g == stop:
            os._exit(9)  # the pod dies
    archipelago.finish(index, state["generation"])
    return state["x"]

arch = Archipelago(store, experiment, islands=1, every=2, generations=6)
print("RUNID", island.run_id(arch, 0, 6), flush=True)
print("RESULT", repr(island(arch, 0, 6)), flush=True)
'''


def _expected() -> float:
    rng, x = random.Random(0), 0.0
    for _ in range(6):
        x += rng.random()
    return x


def _lines(out: str, tag: str) -> list[str]:
    return [line[len(tag) + 1:] for line in out.splitlines() if line.startswith(tag + " ")]


@pytest.mark.parametrize("mode", ["derived", "fixed"])
def test_an_island_that_takes_its_archipelago_resumes_in_a_new_process(
    tmp_path: Path, mode: str
) -> None:
    """Before: Archipelago held a random.Random seeded from the OS, which the run id
    encodes by its state: a restarted island derived another id and started over
    (derived), or was refused with RunMismatchError naming 'archipelago' (fixed run_id=).
    Now the same Archipelago(...) identifies alike in every process: the killed island
    resumes from its checkpoint and ends with the uninterrupted result."""
    store = str(tmp_path / "store")
    sync = {"RESUMABLE_SYNC": "1"}  # (generation 3's checkpoint is durable before os._exit)
    first = _run(_ISLAND, store, mode, "exp-1", "3", **sync)
    assert first.returncode == 9, first.stderr[-3000:]
    assert _lines(first.stdout, "START") == ["fresh"]
    again = _run(_ISLAND, store, mode, "exp-1", "0", **sync)
    assert again.returncode == 0, again.stderr[-3000:]
    assert _lines(again.stdout, "START") == ["resumed 3"], again.stdout
    assert _lines(again.stdout, "RUNID") == _lines(first.stdout, "RUNID")
    assert _lines(again.stdout, "RESULT") == [repr(_expected())]
    # The docs' pattern: a new experiment name is a new run of every island, never the
    # old experiment's (its objects are under its own name).
    other = _run(_ISLAND, store, mode, "exp-2", "0", **sync)
    assert other.returncode == 0, other.stderr[-3000:]
    assert _lines(other.stdout, "START") == ["fresh"], other.stdout
    assert _lines(other.stdout, "RUNID") != _lines(first.stdout, "RUNID")
    assert open_store(store).list("exp-2/migrants/") == [
        "exp-2/migrants/0/2", "exp-2/migrants/0/4", "exp-2/migrants/0/6"]


@checkpointed(store="memory://review105-ids")
def _body(archipelago: Archipelago, index: int, *, state: Any = None) -> Any:
    yield {"generation": 1}


def test_an_archipelagos_identity_is_its_plan(tmp_path: Path,
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    """Equal plans identify alike, in this process too, whatever the archipelago has done
    (a receive that waited drew from its retry jitter), its timeout or where its key
    came from; another experiment, store or plan is another run. The retry jitter is
    not an RNG of the call (capture_rng would have saved it with every checkpoint)."""
    from resumable import _rng

    arch = Archipelago(tmp_path, "exp", 2, every=1, timeout=0.05)
    before = _body.run_id(arch, 0)
    with pytest.raises(MigrationError):
        arch.receive(1, 1, reader=0)  # waits (and draws from the jitter), then times out
    assert _body.run_id(arch, 0) == before
    assert _body.run_id(Archipelago(tmp_path, "exp", 2, every=1), 0) == before
    assert _body.run_id(Archipelago(tmp_path, "exp", 2, every=1, signing_key=KEY), 0) == before
    monkeypatch.setenv("RESUMABLE_SIGNING_KEY", KEY)
    assert _body.run_id(Archipelago(str(tmp_path), "exp", 2, every=1, timeout=9), 0) == before
    for other in (Archipelago(tmp_path, "exp-2", 2, every=1),
                  Archipelago(tmp_path / "elsewhere", "exp", 2, every=1),
                  Archipelago(tmp_path, "exp", 3, every=1),
                  Archipelago(tmp_path, "exp", 2, every=2),
                  Archipelago(tmp_path, "exp", 2, "full", every=1, generations=5),
                  Archipelago(tmp_path, "exp", 2, every=1, serializer="cloudpickle")):
        assert _body.run_id(other, 0) != before, other.plan()
    assert _rng.find({"archipelago": arch}) == []


# --- 2. an island without the key of a signed experiment (and the converse) -------------------

def test_an_island_without_the_key_is_refused_in_a_signed_experiment(
    any_store_url: str,
) -> None:
    """Before: it passed the plan check and published unsigned create-only migrants that
    its signed neighbours refused and that nobody could replace (the experiment was broken
    for good). Now it is refused before it writes anything, with what to do."""
    signed0 = Archipelago(any_store_url, "exp", 2, every=1, signing_key=KEY, timeout=30)
    signed0.publish(0, 1, ["island-0 emigrant"])
    store = open_store(any_store_url)
    before = sorted(store.list("exp/"))
    unsigned1 = Archipelago(any_store_url, "exp", 2, every=1, timeout=30)
    for call in (lambda: unsigned1.migrate(1, 1, ["island-1 emigrant"]),
                 lambda: unsigned1.publish(1, 1, ["island-1 emigrant"]),
                 lambda: unsigned1.finish(1, 1)):
        with pytest.raises(ConfigurationError) as info:
            call()
        message = str(info.value)
        for part in ("experiment 'exp'", any_store_url.rstrip("/"), "exp/plan", "signed",
                     "$RESUMABLE_SIGNING_KEY", "signing_key="):
            assert part in message, (part, message)
        assert info.value.exit_code == 78
    assert sorted(store.list("exp/")) == before
    # The island restarted with the key joins as if nothing had happened.
    keyed1 = Archipelago(any_store_url, "exp", 2, every=1, signing_key=KEY, timeout=30)
    assert keyed1.migrate(1, 1, ["island-1 emigrant"]) == [["island-0 emigrant"]]
    assert signed0.receive(1, 1) == ["island-1 emigrant"]


def test_a_keyed_island_joining_an_unsigned_experiment_is_refused(tmp_path: Path) -> None:
    """The converse: the experiment was started without a key (its plan is unsigned). A
    keyed island is refused before it writes anything, and told why (not only that a
    signature is missing)."""
    Archipelago(tmp_path, "exp", 2, every=1).publish(0, 1, ["plain"])
    before = sorted(open_store(tmp_path).list("exp/"))
    keyed = Archipelago(tmp_path, "exp", 2, every=1, signing_key=KEY, timeout=30)
    with pytest.raises(CheckpointTamperedError) as info:
        keyed.migrate(1, 1, ["signed"])
    message = str(info.value)
    for part in ("experiment 'exp'", "exp/plan", "unsigned", "without a signing key",
                 "new experiment name"):
        assert part in message, (part, message)
    assert sorted(open_store(tmp_path).list("exp/")) == before
    # An unkeyed island of that experiment still migrates.
    assert Archipelago(tmp_path, "exp", 2, every=1).migrate(1, 1, ["plain 1"]) == [["plain"]]


# --- 3. experiment names the stores cannot hold -------------------------------------------------

_LONGEST = "e" * (255 - len("/migrants/0/9"))  # its keys reach 255 bytes at generation 9


@pytest.mark.parametrize(("experiment", "kwargs", "match"), [
    ("exp\x00one", {}, r"control characters"),
    ("exp/\tone", {}, r"control characters"),
    ("exp\udc80", {}, r"UTF-8"),
    ("x" * 250, {}, r"255 bytes"),
    (_LONGEST, {"generations": 20}, r"255 bytes"),
    (_LONGEST, {}, r"255 bytes"),  # (no generations=: room for 9-digit generations)
    ("é" * 122, {"generations": 9}, r"255 bytes"),  # bytes, not characters
])
def test_an_experiment_name_the_store_cannot_hold_is_refused_at_construction(
    tmp_path: Path, experiment: str, kwargs: dict[str, Any], match: str
) -> None:
    """Before: accepted, then a bare ValueError (exit 1) at the first migration, or only
    at generation 10 after 9 generations of work, naming neither experiment nor key."""
    with pytest.raises(ConfigurationError, match=match) as info:
        Archipelago(tmp_path, experiment, 1, every=1, **kwargs)
    assert "experiment" in str(info.value)
    assert not list(tmp_path.iterdir())


def test_the_longest_experiment_name_works_to_its_last_generation(tmp_path: Path) -> None:
    arch = Archipelago(tmp_path, _LONGEST, 1, every=1, generations=9)
    for generation in range(1, 10):
        assert arch.migrate(0, generation, [generation]) == []
    arch.finish(0, 9)
    assert len(arch.key(0, 9).encode()) == 255


# --- 4. a sender named twice ----------------------------------------------------------------------

def test_a_topology_naming_a_sender_twice_is_refused() -> None:
    """Before: accepted; island 1 received island 0's migrants twice."""
    with pytest.raises(ConfigurationError, match=r"island 1 receives from 0 twice"):
        Archipelago("memory://review105-dup", "exp", 2, {1: [0, 0]}, every=1)
    with pytest.raises(ConfigurationError, match=r"island 2 receives from 1 twice"):
        Archipelago("memory://review105-dup", "exp", 3, {2: [1, 0, 1]}, every=1)


# --- 5. the signing key in a pickled Archipelago --------------------------------------------------

def test_an_archipelago_with_signing_key_refuses_to_be_pickled(tmp_path: Path) -> None:
    """As a @checkpointed function with signing_key= does: the key would travel in clear
    (a Dask task, a process pool's pickle). Before: pickled, key and all."""
    arch = Archipelago(tmp_path, "exp", 1, every=1, signing_key=KEY)

    def island(index: int) -> list[Any]:  # (a local function: cloudpickle takes it by value)
        return arch.migrate(index, 1, [1])

    for dumps, target in ((pickle.dumps, arch), (cloudpickle.dumps, arch),
                          (cloudpickle.dumps, island)):
        with pytest.raises(pickle.PicklingError) as info:
            dumps(target)
        message = str(info.value)
        assert "in clear" in message and "$RESUMABLE_SIGNING_KEY" in message, message
        assert "experiment 'exp'" in message and KEY not in message


def test_an_archipelago_with_signing_key_copies_in_process(tmp_path: Path) -> None:
    """copy.copy and copy.deepcopy (f.audit copies a call's arguments) travel nowhere:
    they keep the key, where pickling refuses (review 108: PicklingError, and f.audit
    warned that its runs shared the arguments)."""
    import copy

    arch = Archipelago(tmp_path, "exp", 1, every=1, signing_key=KEY)
    for clone in (copy.copy(arch), copy.deepcopy(arch), copy.deepcopy({"a": arch})["a"]):
        assert clone is not arch and clone._key == arch._key
        assert clone.plan() == arch.plan()
    with pytest.raises(pickle.PicklingError):
        pickle.dumps(arch)


_WORKER = r'''
import pickle, sys
arch = pickle.loads(sys.stdin.buffer.read())
arch.publish(0, 1, ["from the worker"])
print("KEYED", arch._key is not None, flush=True)
'''


def test_an_archipelago_keyed_from_the_environment_reads_it_where_it_is_loaded(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With the key from $RESUMABLE_SIGNING_KEY, an Archipelago pickles without it and the
    worker reads its own environment (as a @checkpointed function without signing_key=
    does)."""
    monkeypatch.setenv("RESUMABLE_SIGNING_KEY", KEY)
    arch = Archipelago(tmp_path, "exp", 1, every=1)
    for blob in (pickle.dumps(arch), cloudpickle.dumps(arch)):
        assert KEY.encode() not in blob
        assert pickle.loads(blob)._key == KEY.encode()
    worker = subprocess.run([sys.executable, "-c", _WORKER], input=pickle.dumps(arch),
                            capture_output=True, env=_env(RESUMABLE_SIGNING_KEY=KEY),
                            timeout=300, check=False)
    assert worker.returncode == 0, worker.stderr.decode()[-3000:]
    assert b"KEYED True" in worker.stdout
    data = open_store(tmp_path).get("exp/migrants/0/1")
    assert data is not None and decode(data).header.signed
    assert arch.receive(0, 1) == ["from the worker"]
