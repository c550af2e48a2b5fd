"""Review 123 (of the RNG path fixes of review 119): a key spelled by its position chosen
over a stable one (two generators swapped), numpy-scalar keys saved by the version before
under another spelling, a __dict__ key that is not a str, and the integrations' cap on
the paths into one generator."""

from __future__ import annotations

import random
from typing import Any

import numpy as np

from resumable import _rng
from resumable.integrations._common import HeldRngs


class Tag:
    """Two of these are equal in value: spelled by their position in a dict."""


def test_a_key_spelled_by_position_is_never_chosen_over_a_stable_one() -> None:
    a, b = random.Random(1), random.Random(2)
    t1, t2 = Tag(), Tag()
    for streams in ({"a": a, "b": b, t1: a, t2: b}, {"a": a, "b": b, t2: b, t1: a}):
        paths = dict((id(obj), p) for p, obj in _rng.find({"streams": streams}))
        assert paths == {id(a): "streams['a']", id(b): "streams['b']"}
        held = dict((id(obj), p) for p, obj in HeldRngs({"tb": streams}).targets)
        assert held == {id(a): "tb['a']", id(b): "tb['b']"}


def test_numpy_scalar_keys_keep_the_spelling_the_version_before_saved_as_an_alias() -> None:
    """np.float64 keys were spelled by a digest of their value before 15c1243 (this one
    as 9edfaa7 spelled it); a checkpoint of that version is restored from there."""
    rng = np.random.default_rng(3)
    targets = _rng.find({"streams": {np.float64(0.5): rng}})
    assert [p for p, _ in targets] == ["streams[0.5]"]
    assert targets.aliases["streams[0.5]"] == ["streams[~af03ab6e0132c7a6]"]
    held = HeldRngs({"toolbox": {np.float64(0.5): rng}}).targets
    assert held.aliases["toolbox[0.5]"] == ["toolbox[~af03ab6e0132c7a6]"]
    rng.random(4)
    older = {"objects": {"streams[~af03ab6e0132c7a6]": (_rng._kind(rng), _rng._get(rng))}}
    expected = rng.random(2)
    _rng.restore(older, targets)
    assert (rng.random(2) == expected).all()


def test_an_attribute_dict_key_that_is_not_a_str_is_taken() -> None:
    class Holder:
        pass

    h, r, other = Holder(), random.Random(1), random.Random(2)
    h.rng = r
    h.__dict__[0] = other
    h.__dict__[1] = r
    paths = sorted(p for p, _ in _rng.find({"h": h}))
    assert paths == ["h.0", "h.rng"]


def test_one_generator_under_a_hundred_keys_is_found_under_one_path_in_any_order() -> None:
    rng = random.Random(5)
    names = [f"op{i:03d}" for i in range(100)]
    chosen = set()
    for order in (names, names[::-1], names[50:] + names[:50]):
        toolbox: dict[str, Any] = {name: rng for name in order}
        chosen.add(HeldRngs({"toolbox": toolbox}).targets[0][0])
    assert chosen == {"toolbox['op000']"}
