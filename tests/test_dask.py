"""Fitness on a real Dask cluster (LocalCluster, worker processes): handles never reach a
checkpoint, and killed drivers or workers leave the result bit-identical."""

from __future__ import annotations

import os
import socket
import threading
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from resumable import SerializationError, checkpointed

distributed = pytest.importorskip("distributed")

pytestmark = [pytest.mark.slow, pytest.mark.timeout(240)]


@pytest.fixture(scope="module")
def client() -> Iterator[Any]:
    """One LocalCluster per module: 2 worker processes with 1 thread each."""
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                                  dashboard_address=None) as cluster, \
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
