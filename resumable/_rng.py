"""Capture and restore RNG state: the global RNGs and the RNG objects a call holds.

Global: the ``random`` module and numpy's legacy global RandomState.

RNG objects (``random.Random``, numpy ``Generator``, ``RandomState``, ``BitGenerator``)
are found among the call's arguments by one rule, applied once per call:

- an argument that is an RNG object (``rng``);
- the items of a list or tuple argument and the values of a dict argument
  (``rngs[0]``, ``streams['mutation']``);
- the attributes of any other argument, from its ``__dict__`` and ``__slots__``
  (``self.rng`` of a decorated method).

One level deep: ``self.ga.rng`` is not found (put it in the state, or pass it). Each is
saved under its path with every checkpoint and restored in place, in the same object,
on resume, at an in-process restart and from the fresh-start record.
"""

from __future__ import annotations

import contextlib
import logging
import random
import sys
import types
from collections.abc import Mapping, Sequence
from typing import Any

log = logging.getLogger("resumable")

RngState = dict[str, Any]
Targets = list[tuple[str, Any]]  # (path, RNG object)


def _kind(obj: Any) -> str | None:
    if isinstance(obj, random.Random):
        return None if isinstance(obj, random.SystemRandom) else "random.Random"
    np = sys.modules.get("numpy")
    if np is None:
        return None
    if isinstance(obj, np.random.Generator):
        return "numpy.Generator"
    if isinstance(obj, np.random.RandomState):
        return "numpy.RandomState"
    if isinstance(obj, np.random.BitGenerator):
        return "numpy.BitGenerator"
    return None


def _attributes(obj: Any) -> list[tuple[str, Any]]:
    if isinstance(obj, (types.ModuleType, type, types.FunctionType)):
        return []
    found: list[tuple[str, Any]] = []
    with contextlib.suppress(TypeError):  # no __dict__
        found.extend(vars(obj).items())
    for cls in type(obj).__mro__:
        slots = cls.__dict__.get("__slots__", ())
        for name in (slots,) if isinstance(slots, str) else slots:
            if name not in ("__dict__", "__weakref__"):
                try:
                    found.append((name, getattr(obj, name)))
                except AttributeError:  # an unset slot
                    continue
    return found


def find(arguments: Mapping[str, Any]) -> Targets:
    """The RNG objects of a call, by the rule in the module docstring, each once."""
    targets: Targets = []
    seen: set[int] = set()

    def add(path: str, obj: Any) -> None:
        if _kind(obj) is not None and id(obj) not in seen:
            seen.add(id(obj))
            targets.append((path, obj))

    for name, value in arguments.items():
        if _kind(value) is not None:
            add(name, value)
        elif isinstance(value, (list, tuple)):
            for i, item in enumerate(value):
                add(f"{name}[{i}]", item)
        elif isinstance(value, dict):
            for key, item in value.items():
                add(f"{name}[{key!r}]", item)
        else:
            for attr, item in _attributes(value):
                add(f"{name}.{attr}", item)
    return targets


def _get(obj: Any) -> Any:
    if isinstance(obj, random.Random):
        return obj.getstate()
    if _kind(obj) == "numpy.Generator":
        return obj.bit_generator.state
    if _kind(obj) == "numpy.RandomState":
        return obj.get_state(legacy=False)
    return obj.state


def _set(obj: Any, state: Any) -> None:
    if isinstance(obj, random.Random):
        obj.setstate(state)
    elif _kind(obj) == "numpy.Generator":
        obj.bit_generator.state = state
    elif _kind(obj) == "numpy.RandomState":
        obj.set_state(state)
    else:
        obj.state = state


def capture(targets: Sequence[tuple[str, Any]] = ()) -> RngState:
    state: RngState = {"random": random.getstate()}
    np = sys.modules.get("numpy")
    if np is not None:
        state["numpy"] = np.random.get_state()
    if targets:
        state["objects"] = {path: (_kind(obj), _get(obj)) for path, obj in targets}
    return state


def restore(state: RngState, targets: Sequence[tuple[str, Any]] = ()) -> None:
    if "random" in state:
        random.setstate(state["random"])
    if "numpy" in state:
        import numpy as np

        np.random.set_state(state["numpy"])
    saved = state.get("objects") or {}
    for path, obj in targets:
        if path not in saved:
            continue  # not there when the state was saved (older code): left as it is
        kind, value = saved[path]
        try:
            if kind != _kind(obj):
                raise TypeError(f"saved from a {kind}, now a {_kind(obj)}")
            _set(obj, value)
        except (TypeError, ValueError, KeyError) as err:
            log.warning("could not restore the RNG %s in place (%s); it continues from its "
                        "current state, so the run may not be bit-identical", path, err)
