"""Fitness on a real Dask cluster (LocalCluster, worker processes): handles never reach a
checkpoint, and killed drivers or workers leave the result bit-identical."""

from __future__ import annotations

import functools
import json
import os
import pickle
import random
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import cloudpickle
import pytest

from resumable import SerializationError, checkpointed

distributed = pytest.importorskip("distributed")

pytestmark = [pytest.mark.slow, pytest.mark.timeout(240)]


@pytest.fixture(scope="module")
def client() -> Iterator[Any]:
    """One LocalCluster per module: 2 worker processes with 1 thread each."""
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                                  dashboard_address=":0") as cluster, \
            distributed.Client(cluster) as c:
        yield c


def yield_once(store: str, value: Callable[[], Any], serializer: str = "pickle") -> None:
    @checkpointed(store=store, serializer=serializer)
    def body(*, state: Any = None) -> Any:
        yield {"generation": 1, "pending": value()}

    body()


def test_a_future_in_the_state_fails_at_the_yield(client: Any, memory_url: str) -> None:
    """A Dask Future pickles (as a key) but would resume pointing at nothing: refused."""
    with pytest.raises(SerializationError, match=r"gather") as info:
        yield_once(memory_url, lambda: client.submit(sum, [1, 2]))
    message = str(info.value)
    assert "state['pending']" in message and "distributed" in message and "Future" in message


def test_a_list_of_futures_names_the_first_one(client: Any, memory_url: str) -> None:
    """The path points at the Future inside the list, whatever the serializer."""
    for serializer in ("pickle", "cloudpickle"):
        with pytest.raises(SerializationError, match=r"state\['pending'\]\[0\].*gather"):
            yield_once(memory_url, lambda: client.map(abs, [-1, -2]), serializer)


@pytest.mark.parametrize("protocol", [2, 5])
def test_a_future_is_found_behind_memoized_names(client: Any, protocol: int) -> None:
    """The module name pickled once before the Future (a memo reference) still counts."""
    from resumable.serializers import PickleSerializer, dumps_views

    class OldPickle(PickleSerializer):
        def dumps_views(self, obj: Any) -> list[Any]:
            return [pickle.dumps(obj, protocol=protocol)]

    future = client.submit(sum, [3, 4])
    state = {"where": type(future).__module__, "later": [future]}
    with pytest.raises(SerializationError, match=r"state\['later'\]\[0\] is a "
                                                 r"distributed.client.Future"):
        dumps_views(OldPickle(), state, "the state")
    assert dumps_views(PickleSerializer(), {"where": type(future).__module__}, "the state")


def test_a_client_in_the_state_says_to_gather(client: Any, memory_url: str) -> None:
    """The client itself cannot be pickled; the message says what to do instead."""
    with pytest.raises(SerializationError, match=r"gather results before yielding"):
        yield_once(memory_url, lambda: client)


def _socket() -> socket.socket:
    s = socket.socket()
    s.close()
    return s


HANDLES = {"lock": threading.Lock, "socket": _socket, "generator": lambda: (x for x in [1]),
           "open-file": lambda: open(os.devnull)}  # noqa: SIM115


# cloudpickle saves a file opened for reading as its contents (a StringIO after a resume),
# so only pickle refuses an open file.
@pytest.mark.parametrize(("handle", "serializer"), [
    *((name, "pickle") for name in HANDLES),
    *((name, "cloudpickle") for name in HANDLES if name != "open-file"),
])
def test_live_handles_fail_with_the_gather_hint(handle: str, serializer: str,
                                                memory_url: str) -> None:
    """Locks, sockets, generators and open files: the same advice as for a Dask handle."""
    with pytest.raises(SerializationError, match=r"state\['pending'\].*gather results before "
                                                 r"yielding"):
        yield_once(memory_url, HANDLES[handle], serializer)


def test_gathered_results_are_saved(client: Any, memory_url: str) -> None:
    """What the rule asks for works: gather, then yield plain values."""
    @checkpointed(store=memory_url)
    def body(*, state: Any = None) -> Any:
        yield {"values": client.gather(client.map(abs, [-1, -2]))}

    assert body() == {"values": [1, 2]}


# --- examples/ga_dask.py on the shared cluster -------------------------------------------

ROOT = Path(__file__).resolve().parent.parent
GA_DASK = ROOT / "examples" / "ga_dask.py"
SMALL = ("--generations", "12", "--population", "40", "--dims", "8", "--chunks", "4")


def ga_dask(client: Any, store: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("RESUMABLE_")}
    env["PYTHONPATH"] = str(ROOT)
    return subprocess.run(
        [sys.executable, str(GA_DASK), "--scheduler", client.scheduler.address, "--store",
         str(store), "--json-summary", "-q", *SMALL, *args],
        capture_output=True, text=True, env=env, timeout=120,
    )


def summary(proc: subprocess.CompletedProcess[str]) -> dict[str, Any]:
    assert proc.returncode == 0, proc.stderr[-3000:]
    result: dict[str, Any] = json.loads(proc.stdout.strip().splitlines()[-1])
    return result


@pytest.fixture(scope="module")
def uninterrupted(client: Any, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    return summary(ga_dask(client, tmp_path_factory.mktemp("reference")))


def test_the_cluster_result_equals_a_local_evaluation(uninterrupted: dict[str, Any],
                                                      memory_url: str) -> None:
    """Chunks on workers give the same bits as evaluating the whole population here."""
    module = load_ga_dask()

    class Local:
        def map(self, f: Any, *iterables: Any, pure: bool = True) -> list[Any]:
            return [f(*args) for args in zip(*iterables, strict=True)]

        def gather(self, values: list[Any]) -> list[Any]:
            return values

    module.CLUSTER.client = Local()
    local = checkpointed(store=memory_url)(module.evolve)(12, 40, 42, 8, 4)
    assert local["population_sha256"] == uninterrupted["population_sha256"]
    assert float(local["best_fitness"]).hex() == uninterrupted["best_fitness"]


def test_killed_driver_resumes_bit_identical(client: Any, tmp_path: Path,
                                            uninterrupted: dict[str, Any]) -> None:
    """SIGKILL the driver after random generations; restarts end as the uninterrupted run."""
    rng = random.Random(int(os.environ.get("RESUMABLE_DASK_SEED", "14")))
    kills = sorted(rng.sample(range(1, 12), 2))
    for generation in kills:
        crashed = ga_dask(client, tmp_path, "--crash-at", str(generation))
        assert crashed.returncode == -signal.SIGKILL, crashed.stderr[-3000:]
        assert f"driver failure at generation {generation}" in crashed.stdout
    final = summary(ga_dask(client, tmp_path))
    # Uploads run in the background, so a SIGKILL may cost the newest checkpoints.
    assert final["resumed_from"] <= kills[-1]
    assert {k: final[k] for k in uninterrupted if k != "resumed_from"} == {
        k: v for k, v in uninterrupted.items() if k != "resumed_from"}


def load_ga_dask() -> Any:
    """examples/ga_dask.py as a module; its directory goes on the path the workers inherit."""
    sys.path.insert(0, str(GA_DASK.parent))
    import ga_dask

    return ga_dask


def gated_evaluate(rows: Any, seed: int, noise: float, *, gate: str, inner: bytes) -> Any:
    """``inner`` (pickled, so workers need not import the example), except that the first
    task after the gate is armed writes its worker's pid and waits until the test has
    killed that worker and released the gate."""
    armed, started = Path(gate, "armed"), Path(gate, "started")
    if armed.exists():
        try:
            fd = os.open(started, os.O_CREAT | os.O_EXCL | os.O_WRONLY)
        except FileExistsError:
            pass  # another task holds the gate, or this is the task run again after the kill
        else:
            os.write(fd, str(os.getpid()).encode())
            os.close(fd)
            release = Path(gate, "release")
            deadline = time.monotonic() + 60
            while not release.exists() and time.monotonic() < deadline:
                time.sleep(0.01)
    return cloudpickle.loads(inner)(rows, seed, noise)


def wait_for(path: Path, timeout: float = 60) -> str:
    deadline = time.monotonic() + timeout
    while not path.exists() or not path.read_text():
        assert time.monotonic() < deadline, f"no {path} after {timeout} s"
        time.sleep(0.01)
    return path.read_text()


def test_killed_worker_mid_generation_gives_the_same_result(
    client: Any, tmp_path: Path, uninterrupted: dict[str, Any]
) -> None:
    """SIGKILL the worker running a task of a random generation: Dask reruns the task."""
    module = load_ga_dask()
    gate = tmp_path / "gate"
    gate.mkdir()
    module.CLUSTER.client = client
    module.CLUSTER.evaluate = functools.partial(gated_evaluate, gate=str(gate),
                                                inner=cloudpickle.dumps(module.evaluate))
    at = random.Random(int(os.environ.get("RESUMABLE_DASK_SEED", "14"))).randrange(1, 11)
    workers_before = set(client.run(os.getpid).values())
    killed: list[int] = []

    def killer() -> None:
        pid = int(wait_for(gate / "started"))
        assert pid in workers_before, "the gated task did not run in a worker process"
        os.kill(pid, signal.SIGKILL)
        killed.append(pid)
        (gate / "release").touch()

    thread = threading.Thread(target=killer, daemon=True)
    try:
        ga = checkpointed(store=str(tmp_path / "store"))(module.evolve)
        for state in ga.iter(12, 40, 42, 8, 4):
            if state["generation"] == at:
                (gate / "armed").touch()  # a task of the next generation holds the gate
                thread.start()
        thread.join(timeout=60)
        result = ga(12, 40, 42, 8, 4)
    finally:
        module.CLUSTER.evaluate = module.evaluate
        (gate / "release").touch()
    assert killed, "no worker was killed"
    client.wait_for_workers(2, timeout=60)
    assert killed[0] not in set(client.run(os.getpid).values())
    assert result["population_sha256"] == uninterrupted["population_sha256"]
    assert float(result["best_fitness"]).hex() == uninterrupted["best_fitness"]
