"""The byte-level store contract, run against every store: local, memory, moto, rclone."""

from __future__ import annotations

import contextlib
import itertools
import tempfile
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from resumable import _format
from resumable.stores import Store, SupportsHead, SupportsListInfo, open_store
from resumable.stores._local import TMP_PREFIX, LocalStore
from resumable.stores._memory import MemoryStore

STORES = ["local", "memory", "moto", "rclone"]


def _blob(data: object) -> bytes | None:
    return None if data is None else bytes(memoryview(data).cast("B"))  # type: ignore[arg-type]


@pytest.fixture(params=STORES)
def store(
    request: pytest.FixtureRequest,
    tmp_path: Path,
    memory_url: str,
    s3_env: Callable[..., Any],
) -> Store:
    """A fresh, empty store of each kind."""
    kind = request.param
    if kind == "local":
        return open_store(tmp_path / "store")
    if kind == "memory":
        return open_store(memory_url)
    server = request.getfixturevalue(f"{kind}_server")
    s3_env(server)
    return open_store(server.new_store_url())


class TestStoreContract:
    """What every store promises (resumable/stores/_base.py), one test per promise."""

    def test_get_missing_is_none(self, store: Store) -> None:
        """A key that was never written reads as None, also a 'folder' of other keys."""
        assert store.get("run/ckpt-1") is None
        store.put("run/ckpt-1", [b"x"])
        assert store.get("run") is None
        assert store.get("run/ckpt-") is None
        assert store.get("other/ckpt-1") is None

    def test_put_get_round_trip_bytes(self, store: Store) -> None:
        """One bytes buffer comes back exactly."""
        data = bytes(range(256)) * 40
        store.put("run/ckpt-00000001-000000000001", [data])
        assert _blob(store.get("run/ckpt-00000001-000000000001")) == data

    def test_multi_buffer_payload_is_concatenated(self, store: Store) -> None:
        """bytes, bytearray, memoryview and numpy memoryviews are written back to back."""
        floats = np.arange(1000, dtype=np.float64) / 7
        matrix = np.arange(60, dtype=np.int32).reshape(6, 10)
        payload = [b"head", bytearray(b"-mid-"), memoryview(b"view"), memoryview(floats),
                   memoryview(matrix), b""]
        expected = b"head-mid-view" + floats.tobytes() + matrix.tobytes()
        store.put("run/ckpt-multi", payload)
        got = store.get("run/ckpt-multi")
        assert _blob(got) == expected
        restored = np.frombuffer(_blob(got)[13 : 13 + floats.nbytes])  # type: ignore[index]
        assert np.array_equal(restored, floats)

    @pytest.mark.parametrize("payload", [[], [b""], [b"", memoryview(b"")]], ids=repr)
    def test_empty_payload(self, store: Store, payload: list[Any]) -> None:
        """An empty payload is a 0-byte object, which exists (not None) and is listed."""
        store.put("run/empty", payload)
        got = store.get("run/empty")
        assert got is not None and len(got) == 0
        assert store.list("run/") == ["run/empty"]

    def test_one_byte_object(self, store: Store) -> None:
        """A 1-byte object round-trips, beside a 0-byte one."""
        store.put("run/zero", [b""])
        store.put("run/one", [b"\x00"])
        assert _blob(store.get("run/one")) == b"\x00"
        assert _blob(store.get("run/zero")) == b""
        assert store.list("run/") == ["run/one", "run/zero"]

    def test_overwrite_replaces_whole_object(self, store: Store) -> None:
        """A put over an existing key replaces it, also with a shorter payload."""
        store.put("run/result", [b"a" * 5000])
        store.put("run/result", [b"bb"])
        assert _blob(store.get("run/result")) == b"bb"
        assert store.list("run/") == ["run/result"]

    def test_overwrite_is_atomic_for_readers(
        self, store: Store, request: pytest.FixtureRequest
    ) -> None:
        """Readers racing overwrites see the old content or the new one, never a mix."""
        if "rclone" in request.node.callspec.id:
            # rclone serve s3 on a local folder rewrites an existing object in place: a
            # racing GET can return a mix of versions (seen in 2 of 15 runs). resumable
            # never overwrites a checkpoint (every name is new), so it is not affected;
            # the README says so. Non-strict: the race is timing-dependent.
            request.applymarker(pytest.mark.xfail(
                reason="rclone serve s3 does not replace objects atomically", strict=False))
        versions = [bytes([i]) * (64 * 1024 + i) for i in range(4)]
        store.put("run/ckpt-x", [versions[0]])
        stop = threading.Event()
        seen: set[bytes] = set()
        errors: list[BaseException] = []

        def read() -> None:
            try:
                while not stop.is_set():
                    got = _blob(store.get("run/ckpt-x"))
                    assert got in versions, (None if got is None else (len(got), got[:1]))
                    seen.add(got)  # type: ignore[arg-type]
            except BaseException as err:
                errors.append(err)

        readers = [threading.Thread(target=read) for _ in range(2)]
        for t in readers:
            t.start()
        try:
            for i in range(12):
                store.put("run/ckpt-x", [versions[i % len(versions)]])
        finally:
            stop.set()
            for t in readers:
                t.join(timeout=30)
        assert not errors, errors[0]
        assert seen

    def test_put_if_absent(self, store: Store) -> None:
        """Creates a missing key (True); refuses an existing one (False) and keeps it."""
        assert store.put_if_absent("run/epoch-00000001", [b"first"]) is True
        assert store.put_if_absent("run/epoch-00000001", [b"second"]) is False
        assert _blob(store.get("run/epoch-00000001")) == b"first"
        store.put("run/epoch-00000002", [b"plain put"])
        assert store.put_if_absent("run/epoch-00000002", [b"late"]) is False
        assert store.list("run/") == ["run/epoch-00000001", "run/epoch-00000002"]

    def test_put_if_absent_race(self, store: Store) -> None:
        """Concurrent creates: exactly one wins where conditional_writes() holds.

        rclone serve s3 ignores If-None-Match; its store checks then writes, so racing
        writers may all 'win' (documented weaker fencing). Whatever happens, the object
        is one writer's whole payload.
        """
        payloads = [bytes([65 + i]) * 1000 for i in range(6)]
        results: list[bool] = [False] * len(payloads)
        barrier = threading.Barrier(len(payloads))

        def claim(i: int) -> None:
            barrier.wait(timeout=30)
            results[i] = store.put_if_absent("run/epoch-00000007", [payloads[i]])

        threads = [threading.Thread(target=claim, args=(i,)) for i in range(len(payloads))]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=60)
        final = _blob(store.get("run/epoch-00000007"))
        assert final in payloads
        if store.conditional_writes():
            assert sum(results) == 1
            assert payloads[results.index(True)] == final
        else:
            assert sum(results) >= 1

    def test_conditional_writes_is_stable(
        self, store: Store, request: pytest.FixtureRequest
    ) -> None:
        """conditional_writes() answers the same each time; only rclone says False."""
        first = store.conditional_writes()
        assert store.conditional_writes() is first
        assert first is (request.node.callspec.params["store"] != "rclone")
        assert store.list("") == []  # a capability probe leaves nothing behind

    def test_list_prefix_and_order(self, store: Store) -> None:
        """list() gives keys with the prefix, ascending, across similar and nested names."""
        keys = [
            "run/ckpt-00000001-000000000010",
            "run/ckpt-00000001-000000000002",
            "run/ckpt-00000002-000000000001",
            "run/epoch-00000001",
            "run/result",
            "run-2/ckpt-00000001-000000000001",
            "run.v2/ckpt-00000001-000000000001",
            "run_b/ckpt-00000001-000000000001",
            "run:c/ckpt-00000001-000000000001",
            "runs/deep/er/ckpt-00000001-000000000001",
            "ru/ckpt-1",
        ]
        for i, key in enumerate(keys):
            store.put(key, [str(i).encode()])
        assert store.list("") == sorted(keys)
        assert store.list("run/") == sorted(k for k in keys if k.startswith("run/"))
        assert store.list("run/ckpt-") == [
            "run/ckpt-00000001-000000000002",
            "run/ckpt-00000001-000000000010",
            "run/ckpt-00000002-000000000001",
        ]
        assert store.list("run") == sorted(k for k in keys if k.startswith("run"))
        assert store.list("runs/deep/") == ["runs/deep/er/ckpt-00000001-000000000001"]
        assert store.list("runs/deep/er/ckpt-") == ["runs/deep/er/ckpt-00000001-000000000001"]
        assert store.list("run/ckpt-00000003") == []
        assert store.list("nothing/") == []
        for i, key in enumerate(keys):
            assert _blob(store.get(key)) == str(i).encode()

    def test_list_start_after(self, store: Store) -> None:
        """start_after drops keys up to and including it, present or not."""
        names = [f"run/ckpt-00000001-{s:012d}" for s in (1, 2, 3, 10, 11)]
        for name in names:
            store.put(name, [b"x"])
        store.put("run/result", [b"r"])
        assert store.list("run/ckpt-", start_after=names[1]) == names[2:]
        assert store.list("run/ckpt-", start_after="run/ckpt-00000001-000000000004") == names[3:]
        assert store.list("run/ckpt-", start_after=names[-1]) == []
        assert store.list("run/", start_after="run/ckpt-") == [*names, "run/result"]
        assert store.list("run/", start_after="run/ckpt-00000002") == ["run/result"]
        assert store.list("run/ckpt-", start_after="a") == names

    def test_list_keys_that_url_encoding_changes(self, store: Store) -> None:
        """Keys with characters a listing URL-encodes ('+', '%', space, '&', '<', non-ASCII)
        come back exactly, with their sizes, from list() and list_info(). S3 stores ask
        for URL-encoded listings and decode them only when the server did encode them."""
        keys = ["run/a+b", "run/a b", "run/100%", "run/a%2Bb", "run/x&y<z>'\"", "run/ünï-ß"]
        for i, key in enumerate(keys):
            store.put(key, [b"x" * (i + 1)])
        assert store.list("run/") == sorted(keys)
        if isinstance(store, SupportsListInfo):
            listed = store.list_info("run/")
            assert [item.key for item in listed] == sorted(keys)
            sizes = {item.key: item.size for item in listed}
            assert sizes == {key: i + 1 for i, key in enumerate(keys)}
            assert all(item.modified > 1.7e9 for item in listed)

    def test_delete_is_idempotent(self, store: Store) -> None:
        """Deleting removes the object; deleting a missing key is not an error."""
        store.put("run/ckpt-1", [b"1"])
        store.put("run/ckpt-2", [b"2"])
        store.delete("run/ckpt-1")
        store.delete("run/ckpt-1")
        store.delete("run/never-written")
        store.delete("no-such-run/ckpt-1")
        assert store.get("run/ckpt-1") is None
        assert store.list("run/") == ["run/ckpt-2"]
        store.delete("run/ckpt-2")
        assert store.list("") == []
        store.put("run/ckpt-3", [b"3"])  # the run's folder can be used again
        assert store.list("run/") == ["run/ckpt-3"]

    def test_head_prefix_and_size(self, store: Store) -> None:
        """head(key, n): the first n bytes (fewer when shorter) and the total size."""
        frames = [bytes(range(256)) * 300, b"", np.arange(5000, dtype=np.float64).tobytes()]
        payload = _format.encode(frames, kind="ckpt", serializer="pickle", step=3, epoch=1,
                                 created=1.0, name="run/ckpt-00000001-000000000003")
        whole = b"".join(bytes(memoryview(b)) for b in payload)
        store.put("run/ckpt-00000001-000000000003", payload)
        assert isinstance(store, SupportsHead)
        for n in (1, 100, 64 * 1024, len(whole) - 1, len(whole)):
            got = store.head("run/ckpt-00000001-000000000003", n)
            assert got is not None
            assert _blob(got[0]) == whole[:n] and got[1] == len(whole), n
        prefix, size = store.head("run/ckpt-00000001-000000000003", 64 * 1024)  # type: ignore[misc]
        header = _format.read_header(prefix, size)
        assert header.step == 3 and header.frame_lengths == tuple(len(f) for f in frames)
        # n beyond the end: the whole object; n = 0: just the size
        got = store.head("run/ckpt-00000001-000000000003", len(whole) + 10**6)
        assert got is not None and (_blob(got[0]), got[1]) == (whole, len(whole))
        got = store.head("run/ckpt-00000001-000000000003", 0)
        assert got is not None and _blob(got[0]) == b"" and got[1] == len(whole)

    def test_head_small_empty_and_missing(self, store: Store) -> None:
        """head() on a 1-byte object, a 0-byte object, and a missing key (None)."""
        assert isinstance(store, SupportsHead)
        store.put("run/one", [b"\x07"])
        store.put("run/zero", [b""])
        got = store.head("run/one", 64 * 1024)
        assert got is not None and (_blob(got[0]), got[1]) == (b"\x07", 1)
        for n in (0, 1, 64 * 1024):
            got = store.head("run/zero", n)
            assert got is not None and (_blob(got[0]), got[1]) == (b"", 0), n
        assert store.head("run/missing", 10) is None
        assert store.head("run", 10) is None  # a 'folder' of other keys is no object
        assert store.head("other/one", 10) is None

    @pytest.mark.parametrize(
        "key",
        ["a.b/c.d", "a-b/c-d", "a_b/c_d", "a:b/c:d", "GA.evolve-0123456789ab/ckpt-1",
         "x/y/z/w", "r/.hidden", "r/trailing.", "r/" + "n" * 180],
    )
    def test_key_characters(self, store: Store, key: str) -> None:
        """Keys with dots, dashes, underscores, colons and nesting are stored verbatim."""
        store.put(key, [key.encode()])
        assert _blob(store.get(key)) == key.encode()
        assert store.list(key.rsplit("/", 1)[0] + "/") == [key]
        store.delete(key)
        assert store.get(key) is None


def test_local_temp_files_are_never_listed(tmp_path: Path) -> None:
    """Half-written temp files of the local store are invisible to list() and get().
    (Named as the store names them, `.tmp-<object>-<32 hex>`: a user's `.tmp-notes.txt`
    is listed, tests/test_cli_review100.py.)"""
    store = LocalStore(tmp_path)
    store.put("run/ckpt-1", [b"done"])
    (tmp_path / "run" / f"{TMP_PREFIX}ckpt-2-{'0123abcd' * 4}").write_bytes(b"half")
    (tmp_path / f"{TMP_PREFIX}top-{'f' * 32}").write_bytes(b"half")
    assert store.list("") == ["run/ckpt-1"]
    assert store.list("run/") == ["run/ckpt-1"]
    assert store.list("run/ckpt-") == ["run/ckpt-1"]
    assert store.list("run/", start_after="run/ckpt-1") == []
    # A successful put and a refused put_if_absent leave no temp file behind.
    assert store.put_if_absent("run/ckpt-1", [b"again"]) is False
    store.put("run/ckpt-3", [b"three"])
    leftovers = sorted(p.name for p in (tmp_path / "run").iterdir())
    assert leftovers == [f"{TMP_PREFIX}ckpt-2-{'0123abcd' * 4}", "ckpt-1", "ckpt-3"]


# -- model-based: random put/delete sequences against a dict -------------------------

_names = st.sampled_from(["ckpt-1", "ckpt-10", "ckpt-2", "epoch-1", "result", "r.x", "a:b"])
_runs = st.sampled_from(["run", "run-2", "run.b", "run_c"])
_keys = st.builds(lambda r, n: f"{r}/{n}", _runs, _names)
_ops = st.lists(
    st.one_of(
        st.tuples(st.just("put"), _keys, st.binary(max_size=64)),
        st.tuples(st.just("put_if_absent"), _keys, st.binary(max_size=64)),
        st.tuples(st.just("delete"), _keys, st.just(b"")),
    ),
    max_size=25,
)


@contextlib.contextmanager
def _fresh(kind: str) -> Iterator[Store]:
    """An empty store of one kind (Hypothesis needs a new one per example)."""
    if kind == "memory":
        store = MemoryStore(f"hypothesis-{next(_serial)}")
        try:
            yield store
        finally:
            store.clear()
    else:
        with tempfile.TemporaryDirectory(prefix="resumable-contract-") as folder:
            yield LocalStore(folder)


_serial = itertools.count()


@pytest.mark.parametrize("kind", ["memory", "local"])
@given(ops=_ops)
def test_random_sequences_match_a_dict(kind: str, ops: list[tuple[str, str, bytes]]) -> None:
    """After any sequence of put/put_if_absent/delete, get and list agree with a dict."""
    with _fresh(kind) as store:
        _check_against_model(store, ops)


def _check_against_model(store: Store, ops: list[tuple[str, str, bytes]]) -> None:
    model: dict[str, bytes] = {}
    for op, key, data in ops:
        if op == "put":
            store.put(key, [data[:5], memoryview(data[5:])])
            model[key] = data
        elif op == "put_if_absent":
            assert store.put_if_absent(key, [data]) is (key not in model)
            model.setdefault(key, data)
        else:
            store.delete(key)
            model.pop(key, None)
        assert _blob(store.get(key)) == model.get(key)
    assert store.list("") == sorted(model)
    for run in ("run", "run-2", "run.b", "run_c"):
        assert store.list(f"{run}/") == sorted(k for k in model if k.startswith(f"{run}/"))
    for key, data in model.items():
        assert _blob(store.get(key)) == data
    if model:
        pivot = sorted(model)[len(model) // 2]
        assert store.list("", start_after=pivot) == [k for k in sorted(model) if k > pivot]


@pytest.mark.parametrize("server_name", ["moto", "rclone"])
def test_s3_list_info_pages_through_more_than_a_thousand_objects(
        server_name: str, request: pytest.FixtureRequest, s3_env: Callable[..., Any]) -> None:
    """S3 lists 1,000 keys per request: 1,005 objects take two pages, read by the store's
    own listing parser, with every key, size and time."""
    from concurrent.futures import ThreadPoolExecutor

    server = request.getfixturevalue(f"{server_name}_server")
    s3_env(server)
    store = open_store(server.new_store_url())
    keys = [f"r{i % 7}/ckpt-{i:05d}" for i in range(1005)]
    with ThreadPoolExecutor(16) as pool:
        list(pool.map(lambda k: store.put(k, [k.encode()]), keys))
    assert isinstance(store, SupportsListInfo)
    listed = store.list_info("")
    assert [item.key for item in listed] == sorted(keys)
    assert all(item.size == len(item.key) and item.modified > 1.7e9 for item in listed)
    assert store.list("r3/") == sorted(k for k in keys if k.startswith("r3/"))
