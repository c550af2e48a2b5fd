"""@checkpointed end to end on real S3 servers (moto, rclone), through a faulty network."""

from __future__ import annotations

import hashlib
import random
from collections.abc import Callable, Generator
from typing import Any

import numpy as np
import pytest

from resumable import StoreError, checkpointed
from resumable.stores import open_store
from tests.faultproxy import FaultProxy
from tests.s3servers import BAD_CREDENTIALS, S3Server
from tests.toy import Crash, Faults, make_evolve, reference

pytestmark = pytest.mark.s3

MiB = 1024 * 1024
FAULT_KINDS = ("slowdown", "internal", "drop", "drop_mid", "slow")


def _through_proxy(
    server: S3Server,
    s3_env: Callable[..., Any],
    fault_proxy: Callable[..., FaultProxy],
    monkeypatch: pytest.MonkeyPatch,
    *,
    seed: int,
    rate: float = 0.25,
) -> tuple[str, FaultProxy]:
    url = server.new_store_url()
    proxy = fault_proxy(server, rate=rate, seed=seed, kinds=FAULT_KINDS, delay=0.1)
    s3_env(server, endpoint=proxy.endpoint)
    monkeypatch.setenv("RESUMABLE_RETRY_DEADLINE", "30")
    return url, proxy


def _scramble_globals(seed: int) -> None:
    """What a new process would have: unrelated global RNG state."""
    random.seed(seed)
    np.random.seed(seed)


def test_crash_and_resume_through_faults_gives_the_uninterrupted_result(
    s3_server: S3Server,
    s3_env: Callable[..., Any],
    fault_proxy: Callable[..., FaultProxy],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Two crashes, three calls, a quarter of the requests failing: bit-identical result."""
    url, proxy = _through_proxy(s3_server, s3_env, fault_proxy, monkeypatch, seed=5)
    faults = Faults(crash_at={4, 9})
    evolve = make_evolve(faults, store=url)
    _scramble_globals(0)  # the reference's seed, as the first process would
    for attempt in range(2):
        with pytest.raises(Crash):
            evolve(12)
        _scramble_globals(1000 + attempt)  # the "next pod" starts with other RNG state
    result = evolve(12)
    assert result == reference(12)  # bit for bit: no retry drew from the global RNGs
    assert faults.entered == [0, 3, 8]
    assert faults.generations_run == 12 + 2  # only the crashed generations ran twice
    assert proxy.fault_count > 0, proxy.faults
    with proxy.paused():
        _scramble_globals(7)
        assert evolve(12) == result  # completed: the stored result, the body not run
        assert faults.generations_run == 14


def test_in_process_restarts_through_faults(
    s3_server: S3Server,
    s3_env: Callable[..., Any],
    fault_proxy: Callable[..., FaultProxy],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """restarts=: the body crashes thrice within one call and still ends with the reference."""
    url, proxy = _through_proxy(s3_server, s3_env, fault_proxy, monkeypatch, seed=9)
    faults = Faults(crash_at={1, 5, 6})
    evolve = make_evolve(faults, store=url, restarts=1)
    _scramble_globals(0)
    before = proxy.fault_count
    assert evolve(10) == reference(10)
    assert faults.entered == [0, 0, 4, 5]
    assert proxy.fault_count > before, proxy.faults


def test_global_random_state_is_untouched_by_retries(
    s3_server: S3Server,
    s3_env: Callable[..., Any],
    fault_proxy: Callable[..., FaultProxy],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A body that never draws leaves random and numpy's RNG exactly where they were."""
    url, proxy = _through_proxy(s3_server, s3_env, fault_proxy, monkeypatch, seed=13, rate=0.4)

    @checkpointed(store=url)
    def count(n: int, *, state: int | None = None) -> Generator[int, None, int]:
        state = state or 0
        while state < n:
            state += 1
            yield state
        return state

    _scramble_globals(42)
    expected_random, expected_numpy = random.getstate(), np.random.get_state()
    assert count(8) == 8
    assert proxy.fault_count > 0, proxy.faults
    assert random.getstate() == expected_random
    got_numpy = np.random.get_state()
    assert got_numpy[0] == expected_numpy[0]
    assert np.array_equal(got_numpy[1], expected_numpy[1])
    assert got_numpy[2:] == expected_numpy[2:]


def test_missing_key_read_through_cut_error_body_is_none(
    moto_server: S3Server,
    s3_env: Callable[..., Any],
    fault_proxy: Callable[..., FaultProxy],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A 404 whose body is cut off is retried, not reported as a missing bucket."""
    url = moto_server.new_store_url()
    proxy = fault_proxy(moto_server, rate=0.6, seed=3, kinds=["drop_mid"])
    s3_env(moto_server, endpoint=proxy.endpoint)
    monkeypatch.setenv("RESUMABLE_RETRY_DEADLINE", "30")
    store = open_store(url)
    assert [store.get(f"run/missing-{i}") for i in range(10)] == [None] * 10
    assert proxy.faults["drop_mid"] > 0


def test_bare_404_from_a_gateway_means_missing_after_one_head(
    moto_server: S3Server,
    s3_env: Callable[..., Any],
    fault_proxy: Callable[..., FaultProxy],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Every GET answered by a body-less 404: a missing key is None at once (one HEAD),
    while an existing one is not mistaken for missing."""
    url = moto_server.new_store_url()
    s3_env(moto_server)
    open_store(url).put("run/there", [b"content"])
    proxy = fault_proxy(moto_server, rate=1.0, seed=1, kinds=["bare_404"], match=b"GET ")
    s3_env(moto_server, endpoint=proxy.endpoint)
    monkeypatch.setenv("RESUMABLE_RETRY_DEADLINE", "2")
    store = open_store(url)
    assert [store.get(f"run/missing-{i}") for i in range(5)] == [None] * 5
    assert proxy.faults["bare_404"] == 5  # one GET each: no retries until the deadline
    with pytest.raises(StoreError, match="run/there"):
        store.get("run/there")  # it exists (HEAD says so): retried, never reported missing


def _big_state(size: int) -> np.ndarray:
    return np.random.default_rng(2024).standard_normal(size // 8)


def test_64mib_numpy_state_resumes_bit_exactly(
    s3_server: S3Server, s3_env: Callable[..., Any]
) -> None:
    """A ≥64 MiB array saved through the decorator comes back identical after a crash."""
    s3_env(s3_server)
    url = s3_server.new_store_url()
    size = 64 * MiB + 4096
    crash = {"armed": True}
    seen: list[str] = []

    @checkpointed(store=url, keep=1)
    def train(steps: int, *, state: dict[str, Any] | None = None
              ) -> Generator[dict[str, Any], None, str]:
        if state is None:
            state = {"step": 0, "weights": _big_state(size)}
        else:
            seen.append(hashlib.sha256(state["weights"].tobytes()).hexdigest())
        while state["step"] < steps:
            state["step"] += 1
            state["weights"][state["step"] * 1000] += state["step"]  # changes in place
            yield state
            if crash["armed"] and state["step"] == 2:
                crash["armed"] = False
                raise Crash("after step 2")
        return hashlib.sha256(state["weights"].tobytes()).hexdigest()

    expected = _big_state(size)
    expected[1000] += 1
    expected[2000] += 2
    with pytest.raises(Crash):
        train(3)
    latest = train.latest(3)
    assert latest is not None and latest.step == 2
    assert latest.state["weights"].nbytes >= 64 * MiB
    assert latest.state["weights"].tobytes() == expected.tobytes()
    del latest
    digest = train(3)
    assert seen == [hashlib.sha256(expected.tobytes()).hexdigest()]
    expected[3000] += 3
    assert digest == hashlib.sha256(expected.tobytes()).hexdigest()


def _fails_fast_in_one_line(fn: Callable[[], object], *needles: str) -> str:
    # "Fast" is a behaviour, not a speed: never retried (test_s3_store's check).
    from tests.test_s3_store import _assert_fast_one_line_error

    return _assert_fast_one_line_error(fn, *needles)


def test_missing_bucket_through_the_decorator(
    s3_server: S3Server, s3_env: Callable[..., Any]
) -> None:
    """A store URL naming a bucket that does not exist fails at once, naming the bucket."""
    s3_env(s3_server)
    faults = Faults()
    evolve = make_evolve(faults, store="s3://resumable-no-such-bucket/runs")
    _fails_fast_in_one_line(lambda: evolve(3), "resumable-no-such-bucket", "NoSuchBucket")
    assert faults.entered == []  # the body never ran


@pytest.mark.parametrize(("variable", "value", "code"), BAD_CREDENTIALS)
def test_bad_credentials_through_the_decorator(
    rclone_server: S3Server,
    s3_env: Callable[..., Any],
    monkeypatch: pytest.MonkeyPatch,
    variable: str,
    value: str,
    code: str,
) -> None:
    """Wrong keys fail at once with the S3 code, the bucket and the variable to fix.

    Only rclone checks signatures; moto accepts any credentials.
    """
    url = rclone_server.new_store_url()
    s3_env(rclone_server)
    monkeypatch.setenv(variable, value)
    faults = Faults()
    evolve = make_evolve(faults, store=url)
    _fails_fast_in_one_line(lambda: evolve(3), url.split("/")[2], code, variable)
    assert faults.entered == []


def test_a_signed_run_resumes_from_multipart_checkpoints_through_part_faults(
    moto_server: S3Server,
    s3_env: Callable[..., Any],
    fault_proxy: Callable[..., FaultProxy],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Signed checkpoints (HMAC, SHA-256 digest: no per-block CRC32Cs, so parts are
    joined) go up in parts, some of them failing once; a crash, then a resume that
    verifies the signature and the state bit for bit."""
    monkeypatch.setenv("RESUMABLE_RETRY_DEADLINE", "30")
    url = moto_server.new_store_url() + "?part_size=5242880&multipart_threshold=5242880"
    proxy = fault_proxy(moto_server, rate=0.5, seed=2, kinds=["drop", "drop_mid", "internal"],
                        match=b"partNumber=")
    s3_env(moto_server, endpoint=proxy.endpoint)
    crash, ran = [True], []

    @checkpointed(store=url, run_id="signed", signing_key=b"k" * 32)
    def f(*, state: Any = None) -> Generator[Any, None, Any]:
        state = state or {"i": 0, "a": np.arange(12 * MiB // 8, dtype=np.float64)}
        while state["i"] < 3:
            state["i"] += 1
            ran.append(state["i"])
            state["a"] = state["a"] * 1.5 + state["i"]
            if state["i"] == 3 and crash[0]:
                crash[0] = False
                raise Crash("crash")
            yield state
        return hashlib.sha256(state["a"].tobytes()).hexdigest()

    expected = np.arange(12 * MiB // 8, dtype=np.float64)
    for i in (1, 2, 3):
        expected = expected * 1.5 + i
    with pytest.raises(Crash):
        f()
    assert f() == hashlib.sha256(expected.tobytes()).hexdigest()
    assert ran == [1, 2, 3, 3]  # resumed from the signed checkpoint of step 2
    assert proxy.fault_count > 0, proxy.faults
