"""Review 118 (of the RNG key spelling of review 117): enum members whose value prints in
hash order, big ints, attribute names that look like the search's key marks."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from resumable import checkpointed
from resumable.integrations._common import _held_rngs

from .rng_keys_child import resumed_in_another_order


def test_enum_keys_whose_value_prints_in_hash_order_are_restored(tmp_path: Path) -> None:
    """An enum member was spelled by its repr, which holds its value's: a frozenset's, in
    hash order; in the next process its generator was not restored (review 118)."""

    resumed_in_another_order(tmp_path, "enum", seeds=("1", "2"))


def test_a_big_int_argument_and_key_are_taken(tmp_path: Path) -> None:
    """An int past Python's 4,300-digit str limit raised ValueError deriving the run id
    (with run_id= too) and spelling a key (review 118)."""
    big = 7**6000

    def body(n: Any, rngs: Any, *, state: Any = None) -> Any:
        state = state or {"g": 0}
        state["g"] += 1
        yield state
        return state["g"]

    rngs = {big: np.random.default_rng(1)}
    assert checkpointed(store=str(tmp_path / "a"))(body)(big, rngs) == 1
    assert checkpointed(store=str(tmp_path / "b"), run_id="fixed")(body)(big, rngs) == 1
    assert checkpointed(store=str(tmp_path / "a"))(body).run_id(big, rngs) != \
        checkpointed(store=str(tmp_path / "a"))(body).run_id(big + 1, rngs)


def test_an_attribute_named_like_a_key_mark_fails_nothing() -> None:
    """The integrations' search must never fail a call (review 118: KeyError)."""

    class Holder:
        pass

    holder = Holder()
    rng = np.random.default_rng(1)
    setattr(holder, "\x00123:0\x00", rng)
    holder.table = {"k": np.random.default_rng(2)}  # type: ignore[attr-defined]
    found = dict((p, r) for p, r in _held_rngs({"problem": holder}))
    assert found["problem.table['k']"] is holder.table["k"]  # type: ignore[attr-defined]
    assert rng in found.values()
