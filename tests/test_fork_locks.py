"""Module locks another thread may hold when the process forks (the upload thread, while
a body forks a worker or a fork pool starts): the child gets its own, not a copy that
stays held for ever with no thread there to let go of it (review 39)."""

from __future__ import annotations

import os
import signal
import uuid
from typing import Any

import pytest

from resumable import _run, checkpointed
from resumable.stores import _memory
from tests.forking import in_child

pytestmark = pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")


def _count(n: int, *, state: Any = None) -> Any:
    state = state or 0
    while state < n:
        state += 1
        yield state
    return state


@pytest.mark.parametrize("lock", ["pool", "memory"])
def test_a_lock_held_by_another_thread_at_the_fork_is_free_in_the_child(lock: str) -> None:
    held = _run._pool_lock if lock == "pool" else _memory._lock

    def snapshot_and_save() -> bool:
        # A decorated call in the child: snapshots (the pool lock) and a memory store.
        url = f"memory://fork-{uuid.uuid4().hex[:8]}"
        return bool(checkpointed(store=url, run_id="child")(_count)(3) == 3)

    with held:  # as the upload thread would, at the moment of the fork
        status = in_child(snapshot_and_save)
    hung = -int(signal.SIGALRM)
    assert status == 0, f"the child exited {status} ({hung}: it hung on the {lock} lock)"
