"""resumable.islands: create-only migrants, and an archipelago whose result does not depend on
which islands were killed when."""

from __future__ import annotations

import json
import os
import queue
import random
import signal
import subprocess
import sys
import threading
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from resumable import (
    CheckpointCorruptError,
    CheckpointTamperedError,
    ConfigurationError,
    checkpointed,
)
from resumable._audit import first_difference
from resumable.islands import Archipelago, MigrantConflictError, MigrationError
from resumable.stores import open_store

ROOT = Path(__file__).resolve().parent.parent
EXAMPLE = ROOT / "examples" / "islands.py"
KEY = "k" * 32


# --- the object: topology, publish, receive ------------------------------------------------

def test_ring_full_and_custom_topologies() -> None:
    """Ring: i receives from i-1; full: from every other; a mapping as given."""
    assert Archipelago("memory://t", "e", 4).sources == {0: (3,), 1: (0,), 2: (1,), 3: (2,)}
    assert Archipelago("memory://t", "e", 1).sources == {0: ()}
    assert Archipelago("memory://t", "e", 3, "full").sources == {0: (1, 2), 1: (0, 2),
                                                                  2: (0, 1)}
    star = Archipelago("memory://t", "e", 3, {1: [0], 2: [0]})
    assert star.sources == {0: (), 1: (0,), 2: (0,)}


@pytest.mark.parametrize(("islands", "topology", "every", "match"), [
    (0, "ring", 1, "islands must be a positive int"),
    (3, "star", 1, "unknown topology 'star'"),
    (3, {0: [0]}, 1, "island 0 receives from 0"),
    (3, {0: [5]}, 1, "island 0 receives from 5"),
    (3, {7: [0]}, 1, r"outside 0..2"),
    (3, "ring", 0, "every must be a positive int"),
    # not a mapping, or a sender list that is not a list: before, a bare TypeError or
    # AttributeError (exit 1, not 78)
    (3, 5, 1, r"topology must be 'ring', 'full' or a mapping"),
    (3, [[1], [0]], 1, r"topology must be 'ring', 'full' or a mapping"),
    (3, {0: 1}, 1, r"topology: island 0 receives from 1, not a list of islands"),
    (3, {0: "12"}, 1, r"topology: island 0 receives from '12', not a list of islands"),
])
def test_bad_plans_are_configuration_errors(islands: int, topology: Any, every: int,
                                            match: str) -> None:
    with pytest.raises(ConfigurationError, match=match):
        Archipelago("memory://t", "e", islands, topology, every)


def test_migrate_publishes_and_receives_only_on_due_generations(memory_url: str) -> None:
    """Generation 3 with every=2 does nothing; generation 4 publishes, then reads the ring."""
    arch = [Archipelago(memory_url, "exp", 2, every=2) for _ in range(2)]
    assert arch[0].migrate(0, 3, "a3") == []
    assert open_store(memory_url).list("exp/") == []
    arch[1].publish(1, 4, {"from": 1})
    assert arch[0].migrate(0, 4, {"from": 0}) == [{"from": 1}]
    assert arch[1].migrate(1, 4, {"from": 1}) == [{"from": 0}]  # republish: identical
    assert open_store(memory_url).list("exp/") == ["exp/migrants/0/4", "exp/migrants/1/4",
                                                   "exp/plan"]


@given(emigrants=st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=3), inner,
                                                                 max_size=4),
    max_leaves=12))
def test_any_emigrants_round_trip_and_republish_identically(emigrants: Any) -> None:
    """What is published is what is received; publishing it again is not an error."""
    arch = Archipelago("memory://islands-hypothesis", f"e{uuid.uuid4().hex}", 2)
    arch.publish(0, 1, emigrants)
    arch.publish(0, 1, emigrants)
    assert arch.receive(0, 1) == emigrants


def test_a_numpy_population_round_trips_bit_for_bit(tmp_path: Path) -> None:
    pop = np.random.default_rng(1).normal(size=(7, 5))
    arch = Archipelago(tmp_path, "e", 2, signing_key=KEY)
    arch.publish(1, 5, pop)
    back = arch.receive(1, 5)
    assert back.tobytes() == pop.tobytes() and back.flags.writeable


@pytest.fixture(params=["folder", "moto"])
def store_url(request: pytest.FixtureRequest, tmp_path: Path,
              s3_env: Callable[..., Any]) -> str:
    if request.param == "folder":
        return str(tmp_path / "store")
    server = request.getfixturevalue("moto_server")
    s3_env(server)
    url: str = server.new_store_url()
    return url


def test_a_zombie_cannot_replace_published_migrants(store_url: str) -> None:
    """A second publish with other content raises and the first object stands."""
    live, zombie = (Archipelago(store_url, "exp", 4) for _ in range(2))
    live.publish(2, 10, [1.0, 2.0])
    with pytest.raises(MigrantConflictError, match=r"island 2 .*generation 10.*migrants/2/10"):
        zombie.publish(2, 10, [1.0, 2.5])
    assert live.receive(2, 10) == [1.0, 2.0]
    assert MigrantConflictError.exit_code == 65


def test_waiting_for_a_missing_neighbour_times_out_with_a_clear_error(
    store_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The message names the reader, the sender, the generation, the object and the knob."""
    monkeypatch.setenv("RESUMABLE_MIGRATION_TIMEOUT", "0")
    arch = Archipelago(store_url, "exp", 4)
    with pytest.raises(MigrationError) as info:
        arch.migrate(1, 3, "mine")
    message = str(info.value)
    assert "island 1 waited 0 s for the emigrants of island 0 at generation 3" in message
    assert "'exp'" in message and "exp/migrants/0/3" in message
    assert "RESUMABLE_MIGRATION_TIMEOUT" in message
    assert info.value.exit_code == 74  # retriable: a new pod resumes and waits again


@pytest.mark.parametrize(("kwargs", "match"), [
    ({"experiment": 5}, r"^experiment must be a non-empty name"),
    ({"experiment": b"exp"}, r"^experiment must be a non-empty name"),
    ({"experiment": "a/../b"}, r"^experiment must be a non-empty name"),
    ({"experiment": "."}, r"^experiment must be a non-empty name"),
    ({"timeout": "x"}, r"^migration timeout must be a number of seconds >= 0"),
    ({"timeout": True}, r"^migration timeout must be a number of seconds >= 0"),
    ({"timeout": float("nan")}, r"^migration timeout must be a number of seconds >= 0"),
])
def test_a_bad_experiment_or_timeout_is_a_configuration_error(
    tmp_path: Path, kwargs: dict[str, Any], match: str
) -> None:
    """Before: AttributeError ('int' object has no attribute 'strip'), TypeError ('>=' not
    supported), or, for '.' and 'a/../b', keys such as './migrants/0/1'."""
    args = {"experiment": "exp", "islands": 2, **kwargs}
    with pytest.raises(ConfigurationError, match=match):
        Archipelago(tmp_path, **args)
    assert not list(tmp_path.iterdir())


@pytest.mark.parametrize("value", ["soon", "-1"])
def test_a_bad_timeout_variable_is_a_configuration_error(
    value: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("RESUMABLE_MIGRATION_TIMEOUT", value)
    with pytest.raises(ConfigurationError, match=r"timeout|RESUMABLE_MIGRATION_TIMEOUT"):
        Archipelago("memory://t", "e", 2)


def test_signed_migrants_are_checked(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """$RESUMABLE_SIGNING_KEY signs migrants; another key or no signature is refused."""
    monkeypatch.setenv("RESUMABLE_SIGNING_KEY", KEY)
    Archipelago(tmp_path, "signed", 2).publish(0, 1, "hello")
    assert Archipelago(tmp_path, "signed", 2).receive(0, 1) == "hello"
    with pytest.raises(CheckpointTamperedError, match=r"signed/migrants/0/1.*signature wrong"):
        Archipelago(tmp_path, "signed", 2, signing_key="x" * 32).receive(0, 1)
    monkeypatch.delenv("RESUMABLE_SIGNING_KEY")
    Archipelago(tmp_path, "plain", 2).publish(0, 1, "hello")
    with pytest.raises(CheckpointTamperedError, match="signature missing"):
        Archipelago(tmp_path, "plain", 2, signing_key=KEY).receive(0, 1)


def test_a_damaged_migrant_is_never_unpickled(tmp_path: Path) -> None:
    arch = Archipelago(tmp_path, "e", 2)
    arch.publish(0, 1, "hello")
    path = tmp_path / "e" / "migrants" / "0" / "1"
    data = bytearray(path.read_bytes())
    data[-1] ^= 1
    path.write_bytes(bytes(data))
    with pytest.raises(CheckpointCorruptError, match="checksum mismatch"):
        arch.receive(0, 1)


def test_a_copied_migrant_is_refused(tmp_path: Path) -> None:
    """Signed migrants name their key: one copied to another generation does not verify."""
    arch = Archipelago(tmp_path, "e", 2, signing_key=KEY)
    arch.publish(0, 1, "hello")
    dst = tmp_path / "e" / "migrants" / "0" / "2"
    dst.write_bytes((tmp_path / "e" / "migrants" / "0" / "1").read_bytes())
    with pytest.raises(CheckpointTamperedError, match="copied or renamed"):
        arch.receive(0, 2)


# --- the example's islands as real processes, killed at random ------------------------------

ISLANDS = 4
PARAMS = ["--islands", str(ISLANDS), "--generations", "16", "--population", "30", "--dims",
          "8", "--every", "4", "--migrants", "2", "--experiment", "exp", "-q"]


def example_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("RESUMABLE_")}
    env.update(PYTHONPATH=str(ROOT), RESUMABLE_MIGRATION_TIMEOUT="120", **(extra or {}))
    return env


@pytest.fixture(scope="module")
def reference(tmp_path_factory: pytest.TempPathFactory) -> dict[int, dict[str, Any]]:
    """All islands, never killed, in the example's run-everything mode."""
    store = tmp_path_factory.mktemp("reference")
    proc = subprocess.run([sys.executable, str(EXAMPLE), *PARAMS, "--store", str(store)],
                          capture_output=True, text=True, env=example_env(), timeout=120)
    assert proc.returncode == 0, proc.stderr[-3000:]
    results = json.loads(proc.stdout.strip().splitlines()[-1].split(" ", 1)[1])
    return {r["island"]: r for r in results}


class Islands:
    """The islands as processes in lockstep: each reports every generation it yielded and
    waits for a line on stdin, so a kill lands at a chosen point, not after a sleep."""

    def __init__(self, store: str, env: dict[str, str], logs: Path) -> None:
        self.store, self.env, self.logs = store, env, logs
        self.lines: queue.Queue[tuple[subprocess.Popen[str], str | None]] = queue.Queue()
        self.procs: dict[int, subprocess.Popen[str]] = {}
        self.starts = 0

    def start(self, island: int) -> None:
        log = (self.logs / f"island-{island}-{self.starts}.log").open("w")
        self.starts += 1
        proc = subprocess.Popen(
            [sys.executable, str(EXAMPLE), *PARAMS, "--store", self.store, "--island",
             str(island), "--lockstep"], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
            stderr=log, text=True, env=self.env)
        log.close()
        self.procs[island] = proc

        def read() -> None:
            assert proc.stdout is not None
            for line in proc.stdout:
                self.lines.put((proc, line))
            self.lines.put((proc, None))

        threading.Thread(target=read, daemon=True).start()

    def run(self, kills: dict[tuple[int, int], str]) -> tuple[dict[int, dict[str, Any]], int]:
        """Run to the end, killing island i after it yields generation g as ``kills`` says:
        "at-yield" (before it goes on) or "mid-generation" (right after letting it go on)."""
        for island in range(ISLANDS):
            self.start(island)
        island_of = {proc: i for i, proc in self.procs.items()}
        results: dict[int, dict[str, Any]] = {}
        killed: set[subprocess.Popen[str]] = set()
        try:
            while len(results) < ISLANDS:
                proc, line = self.lines.get(timeout=150)
                island = island_of[proc]
                if line is None:  # the process ended
                    code = proc.wait(timeout=60)
                    if proc in killed:
                        assert code == -signal.SIGKILL
                        self.start(island)
                        island_of[self.procs[island]] = island
                    else:
                        assert code == 0 and island in results, self.log_tail(island)
                elif proc in killed:
                    continue
                elif line.startswith("RESULT "):
                    results[island] = json.loads(line.split(" ", 1)[1])
                elif line.startswith("GEN "):
                    how = kills.pop((island, int(line.split()[2])), None)
                    if how != "at-yield":
                        assert proc.stdin is not None
                        proc.stdin.write("\n")
                        proc.stdin.flush()
                    if how is not None:
                        proc.kill()
                        killed.add(proc)
        finally:
            for proc in self.procs.values():
                if proc.poll() is None:
                    proc.kill()
                    proc.wait()
        return results, len(killed)

    def log_tail(self, island: int) -> str:
        logs = sorted(self.logs.glob(f"island-{island}-*"))
        return "\n".join(p.read_text()[-2000:] for p in logs)


def kill_plan(seed: int, count: int) -> dict[tuple[int, int], str]:
    rng = random.Random(seed)
    plan: dict[tuple[int, int], str] = {}
    while len(plan) < count:
        plan[(rng.randrange(ISLANDS), rng.randrange(1, 16))] = rng.choice(
            ["at-yield", "mid-generation"])
    return plan


def chaos_runs() -> list[int]:
    runs = 5 if os.environ.get("RESUMABLE_CHAOS") == "full" else 1
    return list(range(runs))


@pytest.mark.slow
@pytest.mark.timeout(300)
@pytest.mark.parametrize("run", chaos_runs())
def test_killed_islands_end_as_if_nothing_died(
    run: int, store_url: str, tmp_path: Path, reference: dict[int, dict[str, Any]]
) -> None:
    """4 island processes (folder, and moto with signed objects), random islands SIGKILLed at
    random generations and restarted: every island's final population equals the no-kill run."""
    signed = {"RESUMABLE_SIGNING_KEY": KEY} if store_url.startswith("s3://") else {}
    env = example_env({**{k: v for k, v in os.environ.items() if k.startswith("AWS_")},
                       **signed})
    plan = kill_plan(1400 + run + (100 if signed else 0), count=4)
    logs = tmp_path / "logs"
    logs.mkdir()
    results, kills = Islands(store_url, env, logs).run(dict(plan))
    assert kills == len(plan)
    for island, expected in reference.items():
        got = results[island]
        assert got["population_sha256"] == expected["population_sha256"], (island, plan)
        assert got["best_fitness"] == expected["best_fitness"]


@pytest.mark.slow
@pytest.mark.timeout(900)  # a hang guard, as for the other --quick benchmarks: 120 s was
def test_islands_benchmark_quick(tmp_path: Path) -> None:  # exceeded under two CPU hogs
    """benchmarks/islands.py --quick: 1, 2, 4, 8 islands, kills, and the same result."""
    from tests.test_benchmarks_quick import finite, run_quick

    doc = run_quick("islands", tmp_path)
    assert [c["islands"] for c in doc["cases"]] == [1, 2, 4, 8]
    for c in doc["cases"]:
        assert c["same_result"] is True
        assert c["kills"] == doc["config"]["kills_per_run"] * doc["config"]["repeats"]
        assert c["redone_generations_per_kill"] >= 0
        assert finite(c["wall_seconds_no_kill"]) and finite(c["wall_seconds_with_kills"])


# --- argument types: operator.index, never bool or float ------------------------------------

@pytest.mark.parametrize("kwargs, name", [
    ({"islands": True}, "islands"), ({"islands": 2.0}, "islands"),
    ({"islands": 2, "every": True}, "every"), ({"islands": 2, "every": 2.0}, "every"),
])
def test_archipelago_refuses_bool_and_float_counts(tmp_path: Path, kwargs: dict[str, Any],
                                                   name: str) -> None:
    with pytest.raises(ConfigurationError, match=rf"^{name} must be"):
        Archipelago(str(tmp_path), "e", **kwargs)


@pytest.mark.parametrize("island, generation, name", [
    (True, 1, "island"), (0.0, 1, "island"), (0, -2, "generation"), (0, 1.0, "generation"),
    (0, "3", "generation"), (0, True, "generation"),
])
def test_migrate_refuses_bad_island_and_generation(tmp_path: Path, island: Any,
                                                   generation: Any, name: str) -> None:
    a = Archipelago(str(tmp_path), "e", islands=2, every=1, timeout=0.1)
    for call in (lambda: a.migrate(island, generation, [1]),
                 lambda: a.publish(island, generation, [1]),
                 lambda: a.receive(island, generation)):
        with pytest.raises(ConfigurationError, match=rf"^{name} "):
            call()
    assert not list(tmp_path.rglob("*.*")) and not [p for p in tmp_path.rglob("*")
                                                    if p.is_file()]


def test_numpy_integers_are_islands_and_generations(tmp_path: Path) -> None:
    a = Archipelago(str(tmp_path), "e", islands=np.int64(2), every=np.int32(1), timeout=5)
    a.publish(np.int64(0), np.int64(1), ["from 0"])
    assert a.migrate(np.int64(1), np.int32(1), ["from 1"]) == [["from 0"]]
    assert a.key(np.int64(1), np.int64(1)) == "e/migrants/1/1"


@pytest.mark.parametrize(("changed", "generation", "expect"), [
    ({"islands": 3}, 6, "silently reads island 2 where it read island 3"),
    ({"every": 3}, 3, "MigrationError: waits for island 3's generation 3, never published"),
    ({"topology": "full"}, 6, "silently reads islands 1 to 3 where it read island 3"),
])
def test_an_island_restarted_with_another_plan_is_refused(
    store_url: str, changed: dict[str, Any], generation: int, expect: str
) -> None:
    """A restarted island whose Archipelago has other islands, every or topology than the
    experiment's: ConfigurationError (exit 78) naming both plans, before it publishes or
    reads anything, instead of a different result or a wait until the timeout."""
    plan: dict[str, Any] = {"islands": 4, "topology": "ring", "every": 2, "timeout": 5}
    for island in range(4):
        Archipelago(store_url, "exp", **plan).publish(island, 2, f"i{island}g2")
    assert Archipelago(store_url, "exp", **plan).migrate(0, 2, "i0g2") == ["i3g2"]
    for island in (1, 2, 3):  # their next migration, before island 0 died and came back
        Archipelago(store_url, "exp", **plan).publish(island, 6, f"i{island}g6")
    before = sorted(open_store(store_url).list("exp/"))
    restarted = Archipelago(store_url, "exp", **{**plan, **changed, "timeout": 2})
    with pytest.raises(ConfigurationError) as info:  # old code: expect
        restarted.migrate(0, generation, "i0g6")
    message = str(info.value)
    assert "'exp'" in message and "exp/plan" in message and "new experiment" in message
    assert info.value.exit_code == 78
    assert sorted(open_store(store_url).list("exp/")) == before
    # The same plan, spelled as a mapping, in a new process: the restart goes on.
    same = {**plan, "topology": {i: [(i - 1) % 4] for i in range(4)}}
    assert Archipelago(store_url, "exp", **same).migrate(0, 6, "i0g6") == ["i3g6"]


# --- a resumed island republishes what it published before it died ------------------------
# Its emigrants have the same values, but some of the objects come from its checkpoint, and
# pickle's bytes depend on which objects are shared, not only on their values: a restored
# DEAP individual's "fitness" key is no longer the class's own string, restored dict keys
# are not the code's constants, a restored array's dtype is not numpy's canonical one.

def _as_resumed(store: Path, run_id: str, value: Any) -> Any:
    """``value`` as a resumed island holds it: saved by a real checkpointed call, read back."""
    @checkpointed(store=store, run_id=run_id)
    def body(*, state: Any = None) -> Any:
        yield {"value": value}

    body()
    latest = body.latest()
    assert latest is not None
    return latest.state["value"]


def _deap_individual(genes: list[int]) -> Any:
    from deap import base, creator

    if not hasattr(creator, "IslandsIndividual"):
        creator.create("IslandsFitness", base.Fitness, weights=(1.0,))
        creator.create("IslandsIndividual", list, fitness=creator.IslandsFitness)
    ind = creator.IslandsIndividual(genes)
    ind.fitness.values = (float(sum(genes)),)
    return ind


REPUBLISHED: dict[str, tuple[Callable[[], list[Any]], Callable[[], list[Any]]]] = {
    # (the elite the island kept in its state, the offspring it made this generation)
    "DEAP individuals": (lambda: [_deap_individual([1, 0, 1])],
                         lambda: [_deap_individual([1, 1, 1])]),
    "dicts": (lambda: [{"genes": [1, 0], "fit": 1.0}], lambda: [{"genes": [1, 1], "fit": 2.0}]),
    "numpy arrays": (lambda: [np.arange(3.0)], lambda: [np.ones(3)]),
}


@pytest.mark.parametrize("case", list(REPUBLISHED))
def test_a_resumed_island_republishes_equal_values_whatever_their_pickle(
    tmp_path: Path, case: str
) -> None:
    """The emigrants before the crash, then the same values as the resumed island holds
    them (its elite read back from its checkpoint): accepted, and the first object stands.
    Before: MigrantConflictError (exit 65, not retried), and every neighbour then timed out."""
    elite, offspring = REPUBLISHED[case]
    live = elite()
    resumed = _as_resumed(tmp_path / "runs", "island-0", live)
    first = live + offspring()
    arch = Archipelago(tmp_path / "store", "exp", islands=2, every=1)
    arch.publish(0, 3, first)
    stored = bytes(open_store(tmp_path / "store").get("exp/migrants/0/3") or b"")
    Archipelago(tmp_path / "store", "exp", islands=2, every=1).publish(0, 3, resumed + offspring())
    assert bytes(open_store(tmp_path / "store").get("exp/migrants/0/3") or b"") == stored
    assert first_difference(arch.receive(0, 3), first) is None


def test_a_republish_that_differs_in_one_bit_is_refused_and_says_where(tmp_path: Path) -> None:
    """0.0 and -0.0 are equal values to Python, not to a run that must resume bit for bit."""
    arch = Archipelago(tmp_path, "exp", islands=2, every=1)
    arch.publish(1, 4, [{"genes": [1, 0], "fit": 0.0}])
    with pytest.raises(MigrantConflictError) as info:
        arch.publish(1, 4, [{"genes": [1, 0], "fit": -0.0}])
    message = str(info.value)
    assert "emigrants[0]['fit']" in message and "migrants/1/4" in message
    assert arch.receive(1, 4)[0]["fit"].hex() == (0.0).hex()


def test_republishing_over_a_damaged_migrant_says_it_is_damaged(tmp_path: Path) -> None:
    """The existing object fails verification: that is what the error says (naming its key),
    not that a zombie or a non-deterministic body computed something else."""
    arch = Archipelago(tmp_path, "exp", islands=2, every=1)
    arch.publish(0, 2, [1.0, 2.0])
    path = tmp_path / "exp" / "migrants" / "0" / "2"
    data = path.read_bytes()
    path.write_bytes(data[: len(data) - 7])
    with pytest.raises(CheckpointCorruptError, match=r"migrants/0/2"):
        arch.publish(0, 2, [1.0, 2.0])
    assert path.read_bytes() == data[: len(data) - 7]  # never rewritten


_DEAP_ISLAND = r'''
import hashlib, json, random, sys
from deap import algorithms, base, creator, tools
from resumable import checkpointed
from resumable.islands import Archipelago

store, index, generations = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
lockstep = sys.argv[4] == "1"  # after publishing, wait for a line: the test may kill it there
creator.create("FitnessMax", base.Fitness, weights=(1.0,))
creator.create("Individual", list, fitness=creator.FitnessMax)
tb = base.Toolbox()
tb.register("attr", random.randint, 0, 1)
tb.register("individual", tools.initRepeat, creator.Individual, tb.attr, 30)
tb.register("population", tools.initRepeat, list, tb.individual)
tb.register("mate", tools.cxTwoPoint)
tb.register("mutate", tools.mutFlipBit, indpb=0.05)
tb.register("select", tools.selTournament, tournsize=3)
arch = Archipelago(store, "deap", islands=2, every=1)


def evaluate(pop):
    for ind in pop:
        if not ind.fitness.valid:
            ind.fitness.values = (sum(ind),)


@checkpointed(store=store, run_id=f"deap-island-{index}")
def island(index, generations, *, state=None):
    if state is None:
        pop = tb.population(n=20)
        evaluate(pop)
        state = {"gen": 0, "pop": pop}
    while state["gen"] < generations:
        g = state["gen"] + 1
        pop = algorithms.varAnd(tb.select(state["pop"], len(state["pop"])), tb, 0.5, 0.2)
        evaluate(pop)
        emigrants = [tb.clone(i) for i in tools.selBest(pop, 2)]
        immigrants = [m for sent in arch.migrate(index, g, emigrants) for m in sent]
        for m, w in zip(immigrants, tools.selWorst(pop, len(immigrants))):
            pop[pop.index(w)] = tb.clone(m)
        print("PUBLISHED", g, flush=True)
        if lockstep:
            sys.stdin.readline()
        state = {"gen": g, "pop": pop}
        yield state
    return hashlib.sha256(json.dumps(
        [[list(i), i.fitness.values] for i in state["pop"]]).encode()).hexdigest()


random.seed(1000 + index)
print("RESULT", island(index, generations), flush=True)
'''


def _deap_islands(store: Path, logs: Path, kills: set[int]) -> dict[int, str]:
    """Two DEAP islands as processes; island 0 is SIGKILLed after it publishes each
    generation in ``kills`` (before its checkpoint of that generation) and restarted."""
    env = example_env()
    started: list[subprocess.Popen[str]] = []

    def start(index: int, lockstep: bool) -> subprocess.Popen[str]:
        log = (logs / f"island-{index}-{len(started)}.log").open("w")
        proc = subprocess.Popen(
            [sys.executable, "-c", _DEAP_ISLAND, str(store), str(index), "6",
             "1" if lockstep else "0"],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=log, text=True, env=env)
        log.close()
        started.append(proc)
        return proc

    def result(proc: subprocess.Popen[str], out: str) -> str:
        lines = [x for x in out.splitlines() if x.startswith("RESULT ")]
        assert proc.returncode == 0 and lines, "\n".join(
            p.read_text()[-2000:] for p in sorted(logs.glob("island-*")))
        return lines[0].split()[1]

    kills = set(kills)
    results: dict[int, str] = {}
    try:
        other = start(1, lockstep=False)
        zero = start(0, lockstep=True)
        while 0 not in results:
            assert zero.stdout is not None and zero.stdin is not None
            line = zero.stdout.readline()
            if line.startswith("PUBLISHED "):
                generation = int(line.split()[1])
                if generation in kills:
                    kills.discard(generation)
                    zero.kill()
                    assert zero.wait(timeout=60) == -signal.SIGKILL
                    zero = start(0, lockstep=True)
                else:
                    zero.stdin.write("\n")
                    zero.stdin.flush()
            elif line.startswith("RESULT ") or not line:
                zero.wait(timeout=60)
                results[0] = result(zero, line)
        results[1] = result(other, other.communicate(timeout=120)[0])
    finally:
        for proc in started:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    assert not kills
    return results


@pytest.mark.slow
def test_a_deap_island_killed_between_publish_and_checkpoint_ends_as_if_it_never_died(
    tmp_path: Path
) -> None:
    """Island 0 is killed after publishing generations 2 and 4, before they are saved: it
    resumes from 1 and 3, recomputes the generation and publishes it again, with
    individuals partly restored from its checkpoint. Before: exit 65, MigrantConflictError."""
    reference = _deap_islands(tmp_path / "reference", tmp_path, set())
    (tmp_path / "killed-logs").mkdir()
    killed = _deap_islands(tmp_path / "killed", tmp_path / "killed-logs", {2, 4})
    assert killed == reference


def test_a_republish_too_deep_to_compare_is_accepted_with_a_warning(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Emigrants nested deeper than the comparison can walk (pickle can): which of the two
    objects stands changes nothing for the neighbours, who read the first; a conflict
    would end the restarted island for good. Before: MigrantConflictError."""
    import functools
    import pickle

    def chain(depth: int, shared: bool) -> Any:
        leaf = [1.0]
        x: Any = leaf
        for _ in range(depth):  # the walk spends about twice pickle's stack on each link
            x = functools.partial(max, x, leaf if shared else [1.0])
        return x

    def picklable(depth: int) -> bool:
        try:
            pickle.dumps(chain(depth, True), protocol=5)
        except RecursionError:
            return False
        return True

    low, high = 1, sys.getrecursionlimit()  # the deepest chain pickle takes, from here
    while low < high:
        mid = (low + high + 1) // 2
        low, high = (mid, high) if picklable(mid) else (low, mid - 1)
    depth = low * 4 // 5
    arch = Archipelago(tmp_path, "exp", islands=2, every=1)
    arch.publish(0, 1, chain(depth, shared=True))
    with caplog.at_level("WARNING", logger="resumable"):
        arch.publish(0, 1, chain(depth, shared=False))  # the same values, other bytes
    assert "could not be compared" in caplog.text and "migrants/0/1" in caplog.text


_CLOUDPICKLE_ISLAND = r'''
import enum
import sys
from dataclasses import dataclass

from resumable.islands import Archipelago


class Op(enum.Enum):  # defined in __main__: cloudpickle pickles these classes themselves
    CROSS = 1
    MUTATE = 2


class Tagged:
    kind = "migrant"


@dataclass
class Migrant:  # (not a subclass of another __main__ class: see the USER_GUIDE)
    genes: list
    fitness: float
    op: Op = Op.CROSS


arch = Archipelago(sys.argv[1], "cp", islands=2, every=1, serializer="cloudpickle")
arch.publish(0, 3, [Migrant([1, 0, 1], 2.0), Migrant([1, 1, 1], float(sys.argv[2]), Op.MUTATE),
                    Op.MUTATE, Tagged])
print(arch.receive(0, 3))
'''


def test_a_class_defined_in_main_republishes_with_cloudpickle(tmp_path: Path) -> None:
    """serializer="cloudpickle" pickles a __main__ class by value, with an id of its own
    in each process: the restarted island's class and the stored object's never pickled
    alike. Before: exit 65, 'types differ: __main__.Migrant / __main__.Migrant' (and,
    with only the outer class's id ignored, for an Enum field or member and a class as a
    value)."""
    def island(fitness: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-c", _CLOUDPICKLE_ISLAND, str(tmp_path),
                               fitness], capture_output=True, text=True, env=example_env(),
                              timeout=120)

    first = island("3.0")
    assert first.returncode == 0, first.stderr[-2000:]
    again = island("3.0")  # the restarted island: the same values
    assert again.returncode == 0, again.stderr[-2000:]
    assert again.stdout == first.stdout
    zombie = island("3.5")  # other values
    assert zombie.returncode == 65 and "emigrants[1]" in zombie.stderr, zombie.stderr[-2000:]
