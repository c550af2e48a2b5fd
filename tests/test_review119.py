"""Review 119 (of the RNG key spelling and the run-id encoding): enum keys in spawn
workers, numpy scalar keys, ints past str()'s digit limit, NaN's bits, one generator
under several keys."""

from __future__ import annotations

import enum
from pathlib import Path
from typing import Any

from resumable import _rng

from .rng_keys_child import resumed_in_another_order

# -- D1: an enum key in a multiprocessing spawn worker ------------------------------------

def test_an_enum_key_is_spelled_alike_in_a_spawn_worker(tmp_path: Path) -> None:
    """A spawn worker imports the script as ``__mp_main__``: its enum keys were spelled
    ``<__mp_main__.Region.EU>`` there, ``<__main__.Region.EU>`` in the script's process,
    under one run id; the worker's resume found no state for the generators."""
    resumed_in_another_order(tmp_path, "enum", spawn=True)


def test_an_enum_of_the_script_is_spelled_as_the_run_id_names_it() -> None:
    def member(module: str) -> Any:
        cls = enum.Enum("Op", {"MUTATE": 1})
        cls.__module__ = module
        return cls.MUTATE

    main, worker = member("__main__"), member("__mp_main__")
    assert _rng.key_texts([(0, worker)]) == _rng.key_texts([(0, main)]) == [
        "<__main__.Op.MUTATE>"]
