"""Review 157: the end-of-run RNG record and the result are two objects; an attempt that
wrote the one and not the other left them out of step."""

from __future__ import annotations

import logging
import random
import threading
from pathlib import Path

import pytest

from resumable import SerializationError, checkpointed


def test_a_stored_result_is_not_given_the_rng_of_an_attempt_that_died_before_its_own(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """A finished run is extended; the extension writes its end RNG record, then fails to
    store its result (here its return value cannot be pickled; a SIGKILL there does the
    same). The finished run's stored result was then returned with the extension's end
    RNG restored, so what the caller drew next matched neither run."""

    @checkpointed(store=str(tmp_path / "s"), ignore=["generations"])
    def walk(generations, *, state=None):
        state = state or {"g": 0, "x": 0.0}
        while state["g"] < generations:
            state["x"] += random.gauss(0, 1)
            state["g"] += 1
            yield state
        return threading.Lock() if generations == 20 else state["x"]

    random.seed(1)
    first = walk(10)
    with pytest.raises(SerializationError):
        walk(20)  # its end RNG is written, its result is not
    random.seed(4)
    before = random.getstate()
    with caplog.at_level(logging.WARNING, logger="resumable"):
        assert walk(10) == first
    assert random.getstate() == before, "another attempt's end RNG was restored"
    text = caplog.text
    assert "rng-end" in text and "attempt 2" in text and "attempt 1" in text, text
