"""A fresh start in a store with no other run of the function does not derive the run
ids of the older encodings (each a walk of all the arguments again: most of a large
call's start); with another run of it there, they are, to point out a moved run."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from resumable import checkpointed


class Counted:
    """An argument that counts its encodings (the encoder reduces it once per walk)."""

    walks = 0

    def __init__(self, v: int) -> None:
        self.v = v

    def __reduce__(self) -> Any:
        Counted.walks += 1
        return (Counted, (self.v,))


def _walks(call: Any, *args: Any) -> int:
    Counted.walks = 0
    call(*args)
    return Counted.walks


def test_older_ids_are_derived_only_with_another_run_of_the_function(tmp_path: Path) -> None:
    @checkpointed(store=str(tmp_path / "store"))
    def f(x: Counted, n: int, *, state: Any = None) -> Any:
        s = state or 0
        while s < n:
            s += 1
            yield s
        return s

    @checkpointed(store=str(tmp_path / "store"))
    def g(x: Counted, n: int, *, state: Any = None) -> Any:  # another function's run
        yield 1
        return 1

    one = _walks(f.run_id, Counted(1), 2)
    assert _walks(g, Counted(1), 2) == one  # the store is empty
    assert _walks(f, Counted(1), 2) == one  # only g's run is there
    assert _walks(f, Counted(1), 2) == one  # complete: returned, not started
    assert _walks(f, Counted(2), 2) > one  # f's first run is there: its older ids are looked for


def test_a_local_listing_of_a_partial_name_finds_what_it_did(tmp_path: Path) -> None:
    """(The local store's walk now leaves out folders whose keys cannot match.)"""
    from resumable.stores import open_store

    store = open_store(str(tmp_path / "s"))
    keys = ["a-1/x", "a-1/sub/q", "a-2/y", "ab/z", "b/w", "a-", "a-1x/v", "c/a-1/u"]
    for key in keys:
        store.put(key, [b"1"])
    for prefix in ["", "a", "a-", "a-1", "a-1/", "a-1/s", "a-1/sub/", "ab/", "c/a", "zz"]:
        assert store.list(prefix) == sorted(k for k in keys if k.startswith(prefix)), prefix
