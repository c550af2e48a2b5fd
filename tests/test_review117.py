"""Review 117 (of the RNG key spelling of review 116): keys whose repr follows the hash
seed, and the cost of spelling keys that hold no RNG."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from resumable import checkpointed
from resumable.integrations._common import _held_rngs

from .rng_keys_child import resumed_in_another_order


def test_rng_keys_whose_repr_follows_the_hash_seed_are_restored(tmp_path: Path) -> None:
    """A frozenset of str prints in hash order, another in the next process: its
    generator was not restored (a warning, fresh draws; review 117)."""

    resumed_in_another_order(tmp_path, "frozenset", seeds=("1", "2"))


class Node:
    """A graph's node: refers to the graph (a dict keyed by nodes), prints its address."""

    encoded = 0

    def __init__(self, graph: dict[Any, Any], i: int) -> None:
        self.graph, self.i = graph, i

    def __reduce_ex__(self, protocol: Any) -> Any:
        Node.encoded += 1
        return super().__reduce_ex__(protocol)


def test_keys_of_a_dict_holding_no_rng_are_not_encoded(tmp_path: Path) -> None:
    """Every key was encoded by value, each walking the whole graph: minutes for 1,000
    nodes before generation 0, in the decorator and in the integrations (review 117)."""
    n = 200
    graph: dict[Any, Any] = {}
    nodes = [Node(graph, i) for i in range(n)]
    for i, node in enumerate(nodes):
        graph[node] = [nodes[(i + 1) % n], nodes[(i * 7 + 3) % n]]

    @checkpointed(store=str(tmp_path))
    def search(graph: Any, gens: int, *, state: Any = None) -> Any:
        state = state or {"g": 0}
        while state["g"] < gens:
            state["g"] += 1
            yield state
        return state["g"]

    Node.encoded = 0
    search.run_id(graph, 2)
    by_id = Node.encoded
    search(graph, 2)
    # (the call encodes the arguments a few times: the run id, the record, the ids of
    # older encodings; spelling every key made it about n times the run id's)
    assert Node.encoded - by_id <= 10 * by_id
    Node.encoded = 0
    assert _held_rngs({"graph": graph}) == []
    assert Node.encoded == 0


def test_the_integrations_spell_keys_as_the_decorator_does() -> None:
    """The held-RNG search spells only the keys on the paths of RNGs found, the
    decorator's way (by value for a frozenset of str)."""
    from resumable import _rng

    rng = np.random.default_rng(3)
    holder = {"ops": {frozenset({"a", "b"}): rng, "plain": 1}}
    (path, found), = _held_rngs({"toolbox": holder})
    assert found is rng
    (text,) = _rng.key_texts([(0, frozenset({"a", "b"}))])
    assert path == f"toolbox['ops'][{text}]" and text.startswith("~")
