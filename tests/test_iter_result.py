"""f.iter(...): the run's return value is reachable as .result once the iterator is done."""

from __future__ import annotations

import pytest

from tests.toy import Crash, Faults, make_evolve


def test_result_once_exhausted(memory_url: str) -> None:
    evolve = make_evolve(Faults(), store=memory_url)
    it = evolve.iter(5)
    assert not it.done
    with pytest.raises(AttributeError, match="not finished"):
        _ = it.result
    assert [s["generation"] for s in it] == [1, 2, 3, 4, 5]
    assert it.done and it.result == evolve(5)


def test_result_at_once_for_a_completed_run(memory_url: str) -> None:
    evolve = make_evolve(Faults(), store=memory_url)
    expected = evolve(4)
    it = evolve.iter(4)
    assert it.done and it.result == expected
    assert list(it) == []


def test_result_after_a_resume_and_stop_value(memory_url: str) -> None:
    """After a crash, a new iterator yields the rest; StopIteration still carries the value."""
    evolve = make_evolve(Faults(crash_at={3}), store=memory_url)
    with pytest.raises(Crash):
        for _ in evolve.iter(6):
            pass
    it = evolve.iter(6)
    states = []
    while True:
        try:
            states.append(next(it)["generation"])
        except StopIteration as stop:
            assert stop.value == it.result
            break
    assert states == [3, 4, 5, 6]


def test_close_stops_early_and_keeps_what_it_saw(memory_url: str) -> None:
    evolve = make_evolve(Faults(), store=memory_url, every=100)
    it = evolve.iter(10)
    for s in it:
        if s["generation"] == 2:
            break
    it.close()
    assert not it.done
    latest = evolve.latest(10)
    assert latest is not None and latest.step == 2
