"""An f.iter run a body consumes, kept open across that body's yields (review 57).

The two runs save their checkpoints apart: the inner one saves the state it hands over
(and the one its consumer held when it is closed), the outer one its own yields. A
restart after an error, a Ctrl-C or a resume between the two left the inner run ahead,
and the redone generations got the wrong inner states: [1, 2, 4, 5, 6, 7] where an
uninterrupted run gives [1, 2, 3, 4, 5, 6]. It is refused at the outer body's first
yield with the inner run open, before anything of that generation is saved.
"""

from __future__ import annotations

import contextlib
import threading
from pathlib import Path
from typing import Any

import pytest

from resumable import ConfigurationError, FencedError, checkpointed


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


# -- review 58 ------------------------------------------------------------------------------


def test_an_iterator_started_outside_and_consumed_by_a_body_is_refused(
    tmp_path: Path
) -> None:
    """Primed by the script (its first state taken there), then handed to the body: the
    check looked only at runs a body had started, and the restart gave the wrong list."""
    store = f"file://{tmp_path}/store"
    inner = _inner(store)
    failed: list[int] = []

    @checkpointed(store=store, run_id="outer", restarts=1, ignore=["feed"])
    def outer(feed: Any, *, state: Any = None) -> Any:
        st = state or {"i": 0, "seen": []}
        while st["i"] < 6:
            st = {"i": st["i"] + 1, "seen": [*st["seen"], next(feed)]}
            if st["i"] == 3 and not failed:
                failed.append(1)
                raise ValueError("transient")
            yield st
        return st["seen"]

    it = inner.iter()
    assert next(it) == 1
    with pytest.raises(ConfigurationError, match=r"outer: its body yielded \(step 1\) while "
                       r"the f\.iter run .*/inner it consumes is still open"):
        outer(it)
    it.close()


def test_an_iterator_handed_to_another_thread_is_not_taken_for_nested(
    tmp_path: Path
) -> None:
    """Started here and driven to its end by a worker thread while this thread runs runs
    of its own: the run's thread was the one that started it, so this thread looked as
    if it ran that body, and its own runs were taken for ones it consumed."""
    store = f"file://{tmp_path}/store"
    took = threading.Event()
    go_on = threading.Event()

    @checkpointed(store=store, run_id="slow")
    def slow(*, state: Any = None) -> Any:
        k = state or 0
        while k < 5:
            k += 1
            if k == 2:
                took.set()  # the worker runs the body now
                assert go_on.wait(60)
            yield k

    @checkpointed(store=store, run_id="other")
    def other(*, state: Any = None) -> Any:
        k = state or 0
        while k < 3:
            k += 1
            yield k
        return k

    it = slow.iter()
    assert next(it) == 1
    got: list[Any] = []
    errors: list[BaseException] = []

    def drive() -> None:
        try:
            got.extend(it)
        except BaseException as err:
            errors.append(err)

    worker = threading.Thread(target=drive)
    worker.start()
    assert took.wait(60)
    mine = other.iter()  # started while slow's body runs in the worker, and left open
    first = next(mine)
    go_on.set()  # slow's body yields while `other` is open here
    worker.join(60)
    assert not errors, errors
    assert [first, *mine] == [1, 2, 3]
    assert got == [2, 3, 4, 5]


def test_a_failed_generations_iterator_kept_by_a_cycle_does_not_refuse_the_restart(
    tmp_path: Path
) -> None:
    """The failed generation's iterator, kept open by a reference cycle (an exception
    held in a local), still counted as the restarted body's."""
    store = f"file://{tmp_path}/store"
    failed: list[int] = []
    kept: list[Any] = []

    @checkpointed(store=store)
    def inner(n: int, *, state: Any = None) -> Any:
        k = state or 0
        while k < 3:
            k += 1
            yield k
        return 10 * n + k

    @checkpointed(store=store, run_id="outer", restarts=1)
    def outer(*, state: Any = None) -> Any:
        seen = state or []
        for n in range(len(seen) + 1, 4):
            it = inner.iter(n)
            try:
                for k in it:
                    if n == 2 and k == 2 and not failed:
                        failed.append(1)
                        raise ConnectionError("transient")
            except ConnectionError as err:
                kept.append(err)  # the traceback keeps the frame, and the iterator, alive
                raise
            seen = [*seen, it.result]  # (the inner run's result: the same on a redo)
            yield seen
        return seen

    assert outer() == [13, 23, 33]
    # The stale iterator, fenced by the restart's run of the same inner run, may not save
    # its state when closed (whether its save meets the fence first depends on timing):
    # closed here, not by the collector in some later test.
    tb = kept[0].__traceback__
    while tb.tb_frame.f_code.co_name != "outer":
        tb = tb.tb_next
    stale = tb.tb_frame.f_locals["it"]
    with contextlib.suppress(FencedError):
        stale.close()
    kept.clear()
