"""Resumed numpy arrays are 64-byte aligned, writeable and laid out as saved, on every path.

numpy computes differently on unaligned memory (a buffered loop instead of the pairwise
SIMD one), so an unaligned resumed array sums to other bits than the never-saved one:
a resumed run would drift away from the uninterrupted one. The arrays here are large
enough (2 Mi float64) for that difference to show.
"""

from __future__ import annotations

import base64
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from resumable import checkpointed
from resumable.stores import open_store
from tests.toy import Crash

N = 2 * 2**20  # float64 elements (16 MiB): more than one S3 part, so ranged GETs are used
MiB = 2**20
STORES = ["local", "memory", "moto", "rclone", "moto-multipart", "rclone-multipart"]


def reference() -> np.ndarray:
    return np.random.default_rng(7).random(N)


def fortran() -> np.ndarray:
    return np.asfortranarray(np.random.default_rng(8).random((300, 500)))


def reductions(a: np.ndarray) -> tuple[float, float, float]:
    return float(a.sum()), float(a.mean()), float(a @ a)


def describe(a: np.ndarray) -> dict[str, Any]:
    return {
        "offset_mod_64": a.ctypes.data % 64,
        "aligned": a.flags.aligned,
        "writeable": a.flags.writeable,
        "c_contiguous": a.flags.c_contiguous,
        "f_contiguous": a.flags.f_contiguous,
    }


def expected_layout(a: np.ndarray) -> dict[str, Any]:
    return {**describe(a), "offset_mod_64": 0}


@pytest.fixture(params=STORES)
def store_url(
    request: pytest.FixtureRequest, tmp_path: Path, memory_url: str, s3_env: Callable[..., Any]
) -> str:
    kind = request.param
    if kind == "local":
        return str(tmp_path / "store")
    if kind == "memory":
        return memory_url
    server = request.getfixturevalue(f"{kind.split('-')[0]}_server")
    s3_env(server)
    url = server.new_store_url()
    if kind.endswith("multipart"):  # 16 MiB in 5 MiB parts instead of one PutObject
        url += f"?multipart_threshold={8 * MiB}&part_size={5 * MiB}"
    return url


@pytest.fixture(params=["background", "in-place"])
def save_path(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    if request.param == "in-place":
        monkeypatch.setenv("RESUMABLE_SNAPSHOT_LIMIT", "0")
    return str(request.param)


@pytest.mark.parametrize("resume", ["new-call", "in-process-restart"])
def test_resumed_arrays_are_aligned_and_compute_the_same_bits(
    store_url: str, save_path: str, resume: str
) -> None:
    """On every store and save path, resumed arrays are aligned and reduce bit-identically."""
    seen: list[dict[str, Any]] = []
    crashed: list[int] = []

    @checkpointed(store=store_url, run_id="aligned", capture_rng=False,
                  restarts=1 if resume == "in-process-restart" else 0)
    def body(*, state: dict[str, Any] | None = None) -> Iterator[dict[str, Any]]:
        if state is None:
            state = {"step": 0, "x": reference(), "f": fortran(), "small": np.arange(5.0)}
        else:
            seen.append({
                name: (describe(state[name]), reductions(state[name].ravel(order="K")))
                for name in ("x", "f", "small")
            })
            assert np.array_equal(state["x"], reference())
            state["x"] += 1.0  # writeable: the body may change it in place
        while state["step"] < 2:
            state["step"] += 1
            yield state
            if not crashed:
                crashed.append(state["step"])
                raise Crash("after the first save")
        return state["step"]

    if resume == "new-call":
        with pytest.raises(Crash):
            body()
    assert body() == 2
    assert crashed == [1] and len(seen) == 1
    for name, fresh in (("x", reference()), ("f", fortran()), ("small", np.arange(5.0))):
        layout, sums = seen[0][name]
        assert sums == reductions(fresh.ravel(order="K")), name
        assert layout == expected_layout(fresh), name


@pytest.mark.parametrize("size", [0, 1, 63, 64, 65, 4096, 5 * MiB + 3, 17 * MiB + 1])
def test_every_store_gives_back_aligned_memory(store_url: str, size: int) -> None:
    """``get`` returns a buffer whose first byte is on a 64-byte boundary, writeable."""
    store = open_store(store_url)
    data = bytes(range(256)) * (size // 256) + bytes(size % 256)
    store.put("run/obj", [data])
    got = store.get("run/obj")
    assert got is not None and bytes(got) == data
    view = memoryview(got)
    assert not view.readonly
    if size:
        assert np.frombuffer(got, dtype=np.uint8).ctypes.data % 64 == 0


@pytest.mark.parametrize("server_name", ["moto", "rclone"])
def test_s3_put_carries_the_formats_crc32c_and_no_other_hash(
    server_name: str, request: pytest.FixtureRequest, s3_env: Callable[..., Any]
) -> None:
    """A single PUT sends the CRC32C computed at encoding; no SHA-256 or CRC32 of its own."""
    import crc32c

    from resumable._format import decode, encode

    server = request.getfixturevalue(f"{server_name}_server")
    s3_env(server)
    store = open_store(server.new_store_url())
    sent: list[dict[str, str]] = []

    def record(request: Any, **_: Any) -> None:
        if request.method == "PUT":
            sent.append({k.lower(): v.decode() if isinstance(v, bytes) else v
                         for k, v in request.headers.items()})

    events = store._client.meta.events  # type: ignore[attr-defined]
    events.register("before-send.s3.PutObject", record)
    try:
        payload = encode([b"rng", b"state", reference()[:1000]], kind="ckpt",
                         serializer="pickle", step=1, created=1.0, name="run/ckpt")
        store.put("run/ckpt", payload)
    finally:
        events.unregister("before-send.s3.PutObject", record)
    blob = b"".join(bytes(p) for p in payload)
    headers = sent[-1]
    assert payload.crc32c == crc32c.crc32c(blob)
    assert headers["x-amz-checksum-crc32c"] == base64.b64encode(
        crc32c.crc32c(blob).to_bytes(4, "big")).decode()
    assert headers["x-amz-content-sha256"] == "UNSIGNED-PAYLOAD"
    assert not [k for k in headers if k.startswith("x-amz-checksum-") and k.endswith("crc32")]
    got = store.get("run/ckpt")
    assert got is not None and decode(got, name="run/ckpt").header.step == 1


@pytest.mark.parametrize("signed", [False, True], ids=["unsigned", "signed"])
@pytest.mark.parametrize("server_name", ["moto", "rclone"])
def test_s3_multipart_parts_carry_crc32c_from_the_encoding(
    server_name: str, signed: bool, request: pytest.FixtureRequest,
    s3_env: Callable[..., Any]
) -> None:
    """Each part of a multipart upload carries its CRC32C, combined from the format's pass.

    Signed objects (SHA-256 digest, no CRC32C) get a CRC32 per part from botocore.
    """
    import crc32c

    from resumable._format import decode, encode

    server = request.getfixturevalue(f"{server_name}_server")
    s3_env(server)
    store = open_store(server.new_store_url() + f"?multipart_threshold={6 * MiB}"
                       f"&part_size={5 * MiB + 3}")
    parts: list[dict[str, str]] = []
    created: list[dict[str, str]] = []

    def record(request: Any, **_: Any) -> None:
        headers = {k.lower(): v.decode() if isinstance(v, bytes) else v
                   for k, v in request.headers.items()}
        if "uploadId=" in request.url and request.method == "PUT":
            parts.append(headers)
        elif request.url.endswith("?uploads"):
            created.append(headers)

    events = store._client.meta.events  # type: ignore[attr-defined]
    events.register("before-send.s3.*", record)
    key = b"k" * 32 if signed else None
    try:
        payload = encode([b"rng", b"state", reference()[: 2 * 2**20 + 5]], kind="ckpt",
                         serializer="pickle", step=1, created=1.0, name="run/ckpt", key=key)
        store.put("run/ckpt", payload)
    finally:
        events.unregister("before-send.s3.*", record)
    blob = b"".join(bytes(p) for p in payload)
    assert all(h["x-amz-content-sha256"] == "UNSIGNED-PAYLOAD" for h in parts)
    if signed:
        assert len(parts) == 4 and all("x-amz-checksum-crc32" in h for h in parts)
    else:
        # 16 MiB in parts of 6 MiB (5 MiB + 3, rounded up to whole CRC blocks); the
        # header joins the first part
        ends = [len(payload[0]) + 6 * MiB, len(payload[0]) + 12 * MiB, len(blob)]
        bodies = {e - s: blob[s:e] for s, e in zip([0, *ends], ends, strict=False)}
        assert sorted(int(h["content-length"]) for h in parts) == sorted(bodies)
        for headers in parts:
            body = bodies[int(headers["content-length"])]
            assert headers["x-amz-checksum-crc32c"] == base64.b64encode(
                crc32c.crc32c(body).to_bytes(4, "big")).decode()
            assert "x-amz-checksum-crc32" not in headers
    assert created[0]["x-amz-checksum-algorithm"] == ("CRC32" if signed else "CRC32C")
    got = store.get("run/ckpt")
    assert got is not None and bytes(got) == blob
    assert decode(got, name="run/ckpt", key=key).header.step == 1


class Wrapper:
    """A third-party store built on another one."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.url = inner.url

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


def test_a_store_returning_unaligned_read_only_bytes_still_gives_aligned_arrays(
    memory_url: str,
) -> None:
    """Buffers a store gives that are read-only or unaligned are copied into aligned memory."""
    from resumable._run import Run

    store = open_store(memory_url)
    run = Run(store, "third-party", keep=None)
    run.write_checkpoint(run.snapshot({"x": reference()}, 1, None))

    class Shifted(Wrapper):
        def get(self, key: str) -> memoryview | None:
            data = self.inner.get(key)
            # one byte in: every frame lands at an odd address, and it is read-only
            return None if data is None else memoryview(b"\0" + bytes(data))[1:]

    latest = Run(Shifted(store), "third-party").load_latest()  # type: ignore[arg-type]
    assert latest is not None
    x = latest.state["x"]
    assert describe(x) == expected_layout(reference())
    assert reductions(x) == reductions(reference())


# -- review 28: strides, and memory that arrays share -------------------------------------


def _shared_state() -> dict[str, Any]:
    pop = np.random.default_rng(11).random(600_003)
    grid = np.arange(24.0).reshape(4, 6)
    return {"g": 0, "pop": pop, "elite": pop[:1000],  # a view of pop
            "every3": pop[::3],  # strided, and a view of pop too
            "back": np.random.default_rng(12).random(9001)[::-2],  # strided, its base not
            "grid": grid, "cols": grid[:, 1:3], "gridT": grid.T,  # in the state
            "objects": np.array([1, "a", None], dtype=object)}


def _generation(state: dict[str, Any]) -> None:
    state["g"] += 1
    state["elite"] += state["g"]  # writes through to pop, and so to every3
    state["cols"] *= 1.5  # and to grid and gridT
    state["acc"] = (float(state["every3"] @ state["every3"]),
                    float(state["back"] @ state["back"]), float(state["pop"].sum()),
                    float(state["gridT"].sum(axis=0).sum()))


@pytest.mark.parametrize("mode", ["background", "in-place", "forked"])
@pytest.mark.parametrize("serializer", ["pickle", "cloudpickle"])
def test_views_and_strided_arrays_resume_as_they_were(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, mode: str, serializer: str) -> None:
    """A view of another array came back as a copy (writes through it no longer reached
    the other: 105 against 30 in review 28's reproducer), and a strided array came back
    C-contiguous (a dot product over it summed to other bits)."""
    if mode == "in-place":
        monkeypatch.setenv("RESUMABLE_SNAPSHOT_LIMIT", "0")
    if mode == "forked":
        monkeypatch.setenv("RESUMABLE_SNAPSHOT_FORK", "1")
    crashed: list[int] = []
    resumed: list[dict[str, Any]] = []
    saved: list[dict[str, int]] = []  # each array's address % 64 when it was saved

    def body(*, state: dict[str, Any] | None = None) -> Iterator[dict[str, Any]]:
        if state is None:
            state = _shared_state()
        elif not resumed:
            resumed.append({k: v for k, v in state.items() if isinstance(v, np.ndarray)})
        while state["g"] < 6:
            _generation(state)
            yield state
            if state["g"] == 3 and not crashed:
                crashed.append(3)
                saved.append({k: v.ctypes.data % 64 for k, v in state.items()
                              if isinstance(v, np.ndarray)})
                raise Crash("the pod died")
        return state["acc"]

    crashed.append(0)  # (the reference run does not crash)
    reference = checkpointed(store=str(tmp_path / "ref"), serializer=serializer)(body)()
    crashed.clear()
    resumed.clear()
    run = checkpointed(store=str(tmp_path / "run"), serializer=serializer)(body)
    with pytest.raises(Crash):
        run()
    assert run() == reference
    got = resumed[0]
    assert np.shares_memory(got["pop"], got["elite"]) and got["elite"].base is not None
    assert np.shares_memory(got["pop"], got["every3"])
    assert np.shares_memory(got["grid"], got["cols"]) and np.shares_memory(
        got["grid"], got["gridT"])
    fresh = _shared_state()
    for name in ("every3", "back", "cols", "gridT", "elite"):
        assert got[name].strides == fresh[name].strides, name
    assert got["back"].flags.writeable
    # where each array sat relative to a 64-byte boundary (a strided array, and arrays
    # that share memory, as saved; object arrays hold pointers, in numpy's memory)
    assert {k: v.ctypes.data % 64 for k, v in got.items() if k != "objects"} == {
        k: v for k, v in saved[0].items() if k != "objects"}
    assert list(got["objects"]) == [1, "a", None]


def _round_trip(obj: Any) -> Any:
    from resumable.serializers import dumps_frames, get_serializer, loads_frames

    serializer = get_serializer("pickle")
    frames = dumps_frames(serializer, obj, "state")
    return loads_frames(serializer, [memoryview(f) for f in frames])


def test_views_keep_their_alignment_within_what_they_share() -> None:
    """Review 30: the shared span was placed with its first byte on a 64-byte boundary,
    so a float64 view 8 bytes into an aligned buffer came back at address % 64 = 7,
    unaligned, and summed to other bits."""
    raw = np.frombuffer(bytearray(8 * 1001 + 64), np.uint8)
    start = -raw.ctypes.data % 64
    raw = raw[start:]  # on a 64-byte boundary
    state = {"b": raw[1:10], "f": raw[8:8 + 8 * 1000].view(np.float64)}
    state["f"][:] = np.random.default_rng(3).standard_normal(1000)
    got = _round_trip(state)
    assert np.shares_memory(got["b"], got["f"])
    assert got["f"].ctypes.data % 64 == state["f"].ctypes.data % 64
    assert got["f"].flags.aligned and got["f"].sum() == state["f"].sum()


def test_the_pickler_kept_per_thread_lets_go_of_the_state() -> None:
    """Review 30: the plan of shared arrays stayed on the thread's pickler, and with it
    the state's arrays, until the thread pickled again."""
    import gc
    import weakref

    from resumable.serializers import dumps_frames, get_serializer

    base = np.zeros(1000)
    gone = weakref.ref(base)
    dumps_frames(get_serializer("pickle"), {"a": base, "b": base[:10]}, "state")
    del base
    gc.collect()
    assert gone() is None


class _Registered:
    pass


def test_a_reducer_replaced_after_the_first_save_is_used() -> None:
    """Review 30: the kept pickler noticed copyreg registrations by their count only."""
    import copyreg

    copyreg.pickle(_Registered, lambda obj: (int, (1,)))
    try:
        assert _round_trip(_Registered()) == 1
        copyreg.pickle(_Registered, lambda obj: (int, (2,)))
        assert _round_trip(_Registered()) == 2
    finally:
        copyreg.dispatch_table.pop(_Registered, None)


@pytest.mark.parametrize("serializer", ["pickle", "cloudpickle"])
def test_a_users_reducer_for_ndarray_is_used_not_overridden(serializer: str) -> None:
    """A program that registers its own reducer for numpy arrays (copyreg.pickle) gets it
    used, as with plain pickle; the layout's reduction took its place in every snapshot
    (left alone in notes 19 and 20). Arrays are then pickled as that reducer says."""
    import copyreg

    from resumable.serializers import dumps_frames, get_serializer, loads_frames

    calls: list[tuple[int, ...]] = []

    def mine(arr: np.ndarray) -> Any:
        calls.append(arr.shape)
        return np.array, (arr.tolist(), arr.dtype.str)

    copyreg.pickle(np.ndarray, mine)
    try:
        state = {"a": np.arange(6.0).reshape(2, 3), "b": np.arange(3)}
        frames = dumps_frames(get_serializer(serializer), state, "state")
        assert sorted(calls) == [(2, 3), (3,)], calls
        back = loads_frames(get_serializer(serializer), [memoryview(f) for f in frames])
        assert back["a"].tolist() == state["a"].tolist() and back["b"].dtype == state["b"].dtype
    finally:
        copyreg.dispatch_table.pop(np.ndarray, None)
    calls.clear()
    dumps_frames(get_serializer(serializer), {"a": np.arange(3)}, "state")
    assert calls == []  # (unregistered: the layout's own again)
