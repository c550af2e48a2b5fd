"""After review 119's D4 one generator found under several paths is saved under the least
of them; a checkpoint of the version before holds its state under the first in dict order.
Such a checkpoint still restores that generator (from the other path), in the decorator,
in a state that holds the generator too, and in the integrations' search."""

from __future__ import annotations

import pickle
import random
from typing import Any

import numpy as np

from resumable import _rng
from resumable.integrations._common import HELD_RNGS, HeldRngs, SavedRngs


def shared_rngs() -> tuple[dict[str, Any], Any]:
    rng = np.random.default_rng(7)
    return {"mutate": rng, "crossover": rng}, rng  # (dict order: mutate first)


def test_the_decorator_restores_a_shared_generator_from_the_older_versions_path() -> None:
    streams, rng = shared_rngs()
    targets = _rng.find({"streams": streams})
    assert [p for p, _ in targets] == ["streams['crossover']"]
    rng.random(5)
    older = {"objects": {"streams['mutate']": (_rng._kind(rng), _rng._get(rng))}}
    expected = rng.random(3)
    _rng.restore(older, targets)
    assert (rng.random(3) == expected).all()


def test_a_state_holding_the_generator_too_is_restored_onto_the_argument() -> None:
    streams, rng = shared_rngs()
    targets = _rng.find({"streams": streams})
    rng.random(5)
    expected = np.random.default_rng(7)
    expected.random(5)
    # pickled as the version before did: the state's RNG named by the path it chose
    with _rng.aliasing([("streams['mutate']", rng)]):
        blob = _pickled({"rng": rng})
    rng.random(10)  # (moved on since)
    with _rng.aliasing(targets):
        state = pickle.loads(blob)
    assert state["rng"] is rng  # one generator, as in the call, not a copy beside it
    assert (rng.random(3) == expected.random(3)).all()


def test_the_integrations_restore_a_shared_generator_from_the_older_versions_path() -> None:
    streams, rng = shared_rngs()
    held = HeldRngs({"toolbox": streams})
    assert [p for p, _ in held.targets] == ["toolbox['crossover']"]
    rng.random(5)
    expected = np.random.default_rng(7)
    expected.random(5)
    saved = SavedRngs({"toolbox['mutate']": _rng._get(rng)})  # the version before's path
    rng.random(10)
    held.resume({HELD_RNGS: saved})
    assert (rng.random(3) == expected.random(3)).all()


def _pickled(obj: Any) -> bytes:
    import io

    buf = io.BytesIO()
    pickler = pickle.Pickler(buf, protocol=5)
    pickler.dispatch_table = {cls: _rng.reduce_rng for cls in _rng.rng_classes()}
    pickler.dump(obj)
    return buf.getvalue()


def test_random_random_under_two_keys_too() -> None:
    r = random.Random(3)
    targets = _rng.find({"ops": {"select": r, "cross": r}})
    assert [p for p, _ in targets] == ["ops['cross']"]
    r.random()
    older = {"objects": {"ops['select']": (_rng._kind(r), _rng._get(r))}}
    expected = r.random()
    _rng.restore(older, targets)
    assert r.random() == expected
