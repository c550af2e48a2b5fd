"""An f.iter run a body consumes, kept open across that body's yields (review 57).

The two runs save their checkpoints apart: the inner one saves the state it hands over
(and the one its consumer held when it is closed), the outer one its own yields. A
restart after an error, a Ctrl-C or a resume between the two left the inner run ahead,
and the redone generations got the wrong inner states: [1, 2, 4, 5, 6, 7] where an
uninterrupted run gives [1, 2, 3, 4, 5, 6]. It is refused at the outer body's first
yield with the inner run open, before anything of that generation is saved.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from resumable import ConfigurationError, checkpointed


def _inner(store: str) -> Any:
    @checkpointed(store=store, run_id="inner")
    def inner(*, state: Any = None) -> Any:
        k = state or 0
        while k < 100:
            k += 1
            yield k
        return k

    return inner


def test_an_inner_iterator_open_across_the_outer_yields_is_refused(tmp_path: Path) -> None:
    store = f"file://{tmp_path}/store"
    inner = _inner(store)
    failed: list[int] = []

    @checkpointed(store=store, run_id="outer", restarts=1)
    def outer(*, state: Any = None) -> Any:
        st = state or {"i": 0, "seen": []}
        it = inner.iter()
        while st["i"] < 6:
            st = {"i": st["i"] + 1, "seen": [*st["seen"], next(it)]}
            if st["i"] == 3 and not failed:
                failed.append(1)
                raise ValueError("transient")  # restarts=1 redoes generation 3
            yield st
        return st["seen"]

    with pytest.raises(ConfigurationError, match=r"outer: its body yielded \(step 1\) "
                       r"while the f\.iter run .*/inner it consumes is still open") as info:
        outer()
    assert "Consume the inner run within one generation" in str(info.value)
    assert outer.latest() is None  # nothing of the generation was saved
    assert not failed  # refused at the first yield, not after the damage


def test_iterators_the_caller_consumes_side_by_side_are_not_nested(tmp_path: Path) -> None:
    """Both consumed by the script (not one by the other's body): allowed, and right."""
    store = f"file://{tmp_path}/store"
    inner = _inner(store)

    @checkpointed(store=store, run_id="outer")
    def outer(*, state: Any = None) -> Any:
        i = state or 0
        while i < 5:
            i += 1
            yield i

    it = inner.iter()
    pairs = [(i, next(it)) for i in outer.iter()]
    it.close()
    assert pairs == [(i, i) for i in range(1, 6)]


def test_an_inner_run_consumed_within_each_generation_is_allowed(tmp_path: Path) -> None:
    store = f"file://{tmp_path}/store"

    @checkpointed(store=store)
    def inner(n: int, *, state: Any = None) -> Any:
        k = state or 0
        while k < n:
            k += 1
            yield k
        return k

    @checkpointed(store=store, run_id="outer")
    def outer(*, state: Any = None) -> Any:
        total = state or 0
        for n in range(1, 5):
            total += sum(inner.iter(n)) + inner(n)  # an iterator and a call, both finished
            yield total
        return total

    assert outer() == sum(n * (n + 1) // 2 + n for n in range(1, 5))
