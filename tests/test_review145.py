"""Review 145 (of this round's 619d76d..c24edd6): each case failed before its fix.

- A store subclass whose ``get`` decompresses was read raw by the screened reads.
- Encoding 7 refused a call whose RNG subclass or slotted dataclass holds a lock.
- The closure warning fired for an integration's own cell (None in one call, a function
  in another), stored a factory's string in clear, and its record's read failed a call.
- The RNG search took attribute names (``ind.rng``) for globals read, and read globals'
  attributes (a lazily imported module loaded at the call).
"""

from __future__ import annotations

import dataclasses
import logging
import random
import sys
import threading
import types
import zlib
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from resumable import StoreError, checkpointed
from resumable.stores import open_store
from resumable.stores._local import LocalStore


def _count(n: int, *, state: int | None = None) -> Any:
    s = state or 0
    while s < n:
        s += 1
        yield s
    return s * 10


class Zipped(LocalStore):
    """Every object compressed: put and get symmetric."""

    def put(self, key: str, data: Any) -> None:
        super().put(key, [zlib.compress(b"".join(bytes(d) for d in data))])

    def put_if_absent(self, key: str, data: Any) -> bool:
        return super().put_if_absent(key, [zlib.compress(b"".join(bytes(d) for d in data))])

    def get(self, key: str) -> Any:
        got = super().get(key)
        return None if got is None else bytearray(zlib.decompress(got))


def test_a_store_whose_get_decompresses_is_read_through_it(tmp_path: Path) -> None:
    class Stop(Exception):
        pass

    stop = [True]

    @checkpointed(store=Zipped(tmp_path), run_id="z")
    def f(n: int, *, state: int | None = None) -> Any:
        s = state or 0
        while s < n:
            s += 1
            if stop[0] and s == 3:
                raise Stop
            yield s
        return s

    with pytest.raises(Stop):
        f(5)
    stop[0] = False
    assert f(5) == 5


class LockedRandom(random.Random):
    def __init__(self, seed: int) -> None:
        super().__init__(seed)
        self.lock = threading.Lock()


@dataclasses.dataclass
class Params:
    size: int


class Locked(Params):
    __slots__ = ("lock",)

    def __init__(self, size: int) -> None:
        super().__init__(size)
        self.lock = threading.Lock()


@pytest.mark.parametrize("argument", [LockedRandom(1), Locked(3)], ids=["rng", "dataclass"])
def test_a_lock_in_what_encoding_7_added_does_not_refuse_the_call(
        tmp_path: Path, argument: Any) -> None:
    def f(x: Any, *, state: int | None = None) -> Any:
        yield 1
        return "ran"

    assert checkpointed(store=str(tmp_path))(f)(argument) == "ran"


def _warnings(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]


def test_a_cell_that_holds_no_fixed_value_in_one_call_is_no_change(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """(The integrations' inner function closes over on_fresh: None with run_id=, a
    function without.)"""
    def make(hook: Any) -> Any:
        def f(*, state: int | None = None) -> Any:
            if hook is not None:
                hook()
            yield 1
            return "done"
        return checkpointed(store=str(tmp_path), run_id="r")(f)

    assert make(None)() == "done"
    with caplog.at_level(logging.WARNING, logger="resumable"):
        assert make(lambda: None)() == "done"
    assert _warnings(caplog) == []


def test_a_closure_string_stays_out_of_the_store_and_the_log(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    def make(token: str) -> Any:
        def f(*, state: int | None = None) -> Any:
            yield len(token)
            return "done"
        return checkpointed(store=str(tmp_path), run_id="r")(f)

    assert make("sk-live-0123456789")() == "done"
    with caplog.at_level(logging.WARNING, logger="resumable"):
        assert make("sk-live-9876543210")() == "done"
    warned = _warnings(caplog)
    assert any("token: <str> -> <str>" in m for m in warned), warned
    assert not any("sk-live" in m for m in warned), warned
    stored = b"".join(p.read_bytes() for p in (tmp_path / "r").iterdir())
    assert b"sk-live" not in stored


class Flaky:
    """A file store whose attempt records cannot be read once armed."""

    armed = False

    def __init__(self, inner: Any) -> None:
        self.inner, self.url = inner, inner.url

    def put(self, k: str, d: Any) -> None:
        self.inner.put(k, d)

    def put_if_absent(self, k: str, d: Any) -> bool:
        return bool(self.inner.put_if_absent(k, d))

    def get(self, k: str) -> Any:
        if self.armed and "/call-" in k:
            raise StoreError("reading failed (the test's)", url=self.url, key=k)
        return self.inner.get(k)

    def list(self, p: str, start_after: str | None = None) -> list[str]:
        return list(self.inner.list(p, start_after))

    def delete(self, k: str) -> None:
        self.inner.delete(k)

    def conditional_writes(self) -> bool:
        return bool(self.inner.conditional_writes())


def test_a_record_read_for_a_warning_does_not_fail_the_stored_result(tmp_path: Path) -> None:
    store = Flaky(open_store(str(tmp_path)))
    f = checkpointed(store=store)(_count)
    assert f(3) == 30
    store.armed = True
    assert f(3) == 30


_SCRIPT = """
import sys, numpy as np
from resumable import checkpointed
rng = np.random.default_rng(1)  # the script's own generator

class Ind:
    def __init__(self):
        self.rng = np.random.default_rng(2)

def fitness(ind):  # draws from ind.rng, not from the global rng
    return ind.rng.random()

@checkpointed(store=sys.argv[1])
def run(fit, *, state=None):
    yield 1
    return 0

run(fitness)
a = rng.random()
run(fitness)  # (its stored result: the RNGs it holds are set as the run left them)
b = rng.random()
print("distinct" if a != b else "repeated")
"""


def test_an_attribute_name_is_not_a_global_read(tmp_path: Path) -> None:
    import subprocess

    from .signal_children import ENV

    script = tmp_path / "s.py"
    script.write_text(_SCRIPT)
    done = subprocess.run([sys.executable, str(script), str(tmp_path / "store")], env=ENV,
                          capture_output=True, text=True, timeout=120)
    assert done.stdout.strip() == "distinct", done.stderr[-2000:]


class _Lazy(types.ModuleType):
    """A module that loads at its first attribute (importlib.util.LazyLoader's kind)."""

    def __getattribute__(self, name: str) -> Any:
        if name in ("__dict__", "__name__", "__spec__"):
            return super().__getattribute__(name)
        raise ImportError("an optional module, not installed")


lazy_optional = _Lazy("lazy_optional")


def test_a_global_is_not_read_to_find_rngs(tmp_path: Path) -> None:
    def fitness(x: float) -> Any:
        return lazy_optional if x < 0 else x * 3

    def f(fit: Any, *, state: int | None = None) -> Any:
        yield 1
        return fit(3)

    assert checkpointed(store=str(tmp_path))(f)(fitness) == 9
    assert np  # (numpy loaded: the search looks for its generators too)


# -- review 146 (of 7e614b7) -----------------------------------------------------------


class Counting(LocalStore):
    """Overrides get_screened alone: its inherited get goes through it."""

    def get_screened(self, key: str, screen: Any, n: int) -> Any:
        return super().get_screened(key, screen, n)


def test_a_subclass_overriding_get_screened_alone_is_still_screened(tmp_path: Path) -> None:
    import os

    from resumable._format import screen
    from resumable.stores._base import get_screened

    store = Counting(tmp_path)
    store.put("job/ckpt-x", [b"\0" * 64])
    os.truncate(tmp_path / "job" / "ckpt-x", 1 << 40)  # (1 TiB, sparse: never allocated)
    from resumable._format import InvalidObject

    with pytest.raises(InvalidObject, match="bad magic"):
        get_screened(store, "job/ckpt-x", screen, 112)


def test_heads_are_read_through_a_subclass_get(tmp_path: Path) -> None:
    from resumable.stores._base import head_of

    store = Zipped(tmp_path)
    store.put("k", [b"0123456789" * 100])
    assert head_of(store, "k", 10) == (b"0123456789", 1000)


def test_a_get_set_on_the_instance_is_used(tmp_path: Path) -> None:
    from resumable._format import screen
    from resumable.stores._base import get_screened

    store = LocalStore(tmp_path)
    store.put("k", [b"x" * 200])
    asked: list[str] = []
    plain = store.get

    def watched(key: str) -> Any:
        asked.append(key)
        return plain(key)

    store.get = watched  # type: ignore[method-assign]
    assert bytes(get_screened(store, "k", screen, 112) or b"") == b"x" * 200
    assert asked == ["k"]


def test_a_closure_value_changed_to_another_kind_is_named(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    def make(n: Any) -> Any:
        def f(x: int, *, state: int | None = None) -> Any:
            yield 1
            return x * n
        return checkpointed(store=str(tmp_path))(f)

    assert make(3)(4) == 12
    with caplog.at_level(logging.WARNING, logger="resumable"):
        assert make(np.int64(5))(4) == 12
        assert make([5])(4) == 12
    warned = [m for m in _warnings(caplog) if "closure" in m]
    assert len(warned) == 2 and "n: <int> -> <int64>" in warned[0], warned
    assert "n: <int> -> <list>" in warned[1], warned
    assert not any("3" in m.split("closure")[1].split(")")[0] for m in warned), warned


def test_an_odd_call_record_does_not_fail_the_call(tmp_path: Path) -> None:
    from resumable._run import CALL, Run

    def make(n: int) -> Any:
        def f(x: int, *, state: int | None = None) -> Any:
            yield 1
            return x * n
        return checkpointed(store=str(tmp_path), run_id="r")(f)

    assert make(3)(4) == 12
    run = Run(open_store(str(tmp_path)), "r")
    name = next(k for k in run.store.list("r/") if f"/{CALL}" in k).split("/")[1]
    record = run.read_record(name, "call") or {}
    run.write_record(name, "call", {**record, "closure_shown": [1]})  # (not a dict)
    assert make(5)(4) == 12
