"""Chaos: a GA worker killed (SIGKILL) and stopped (SIGTERM + grace) at random, restarted.

Short by default (about ten interruptions per store); ``RESUMABLE_CHAOS=full`` runs
at least 100 SIGKILLs in total plus SIGTERMs. Every run must end with the result of
an uninterrupted run. The report goes to stdout and to $RESUMABLE_CHAOS_REPORT.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from resumable._run import Run
from resumable.stores import open_store
from tests.chaos import ChaosStats, full_run, run_chaos, write_report
from tests.faultproxy import FaultProxy
from tests.workers.chaos_worker import reference

pytestmark = [pytest.mark.chaos, pytest.mark.timeout(900 if full_run() else 300)]

KILLS, TERMS = (40, 10) if full_run() else (8, 2)
GENERATIONS = 20 * (KILLS + TERMS) + 20  # more than the interruptions can get through
SEEDS = {"local": 101, "moto": 202, "rclone": 303}
_report: dict[str, Any] = {}


@pytest.fixture(scope="module", autouse=True)
def _chaos_report(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    yield
    if _report:
        write_report(_report, tmp_path_factory.getbasetemp())


def _check(stats: ChaosStats, store_url: str, run_id: str) -> None:
    _report[stats.store] = stats.summary()
    assert stats.result == reference(GENERATIONS), stats.summary()
    assert stats.kills == KILLS and stats.terms == TERMS, stats.summary()
    for attempt in stats.attempts:
        if attempt.signal == "SIGTERM":
            assert attempt.returncode == 143 and not attempt.grace_exceeded, attempt
        if attempt.signal == "SIGKILL":
            assert attempt.returncode == -9, attempt
    assert not stats.term_flush_violations, stats.term_flush_violations
    assert sum(stats.redone_after_term) == 0, "SIGTERM flushes the last generation"
    assert sum(stats.lost_after_term) == 0, "the generation under way at SIGTERM is saved"
    assert stats.resumes >= 1
    latest = Run(open_store(store_url), run_id).load_latest(with_state=False)
    assert latest is not None and latest.step == GENERATIONS


def _seed(kind: str) -> int:
    return int(os.environ.get("RESUMABLE_CHAOS_SEED", SEEDS[kind]))


def test_chaos_local_store(tmp_path: Path) -> None:
    """SIGKILL/SIGTERM at random on the local store: the run ends with the reference."""
    url = (tmp_path / "store").as_uri()
    stats = run_chaos(url, "chaos-local", kills=KILLS, terms=TERMS, generations=GENERATIONS,
                      seed=_seed("local"), workdir=tmp_path)
    stats.store = "local"
    _check(stats, url, "chaos-local")


@pytest.mark.s3
@pytest.mark.parametrize("server_name", ["moto", "rclone"])
def test_chaos_s3_through_fault_proxy(
    server_name: str,
    request: pytest.FixtureRequest,
    s3_env: Callable[..., Any],
    fault_proxy: Callable[..., FaultProxy],
    tmp_path: Path,
) -> None:
    """Same, on a real S3 server with the fault proxy failing a share of requests."""
    server = request.getfixturevalue(f"{server_name}_server")
    url = server.new_store_url()
    proxy = fault_proxy(server, rate=0.1, seed=_seed(server_name), delay=0.1)
    env: dict[str, str | None] = {
        **server.env,
        "AWS_ENDPOINT_URL": proxy.endpoint,
        "AWS_ENDPOINT_URL_S3": None,
        "AWS_PROFILE": None,
        "AWS_SESSION_TOKEN": None,
        "AWS_CONFIG_FILE": "/nonexistent/resumable-tests",
        "AWS_SHARED_CREDENTIALS_FILE": "/nonexistent/resumable-tests",
        "RESUMABLE_RETRY_DEADLINE": "30",
    }
    run_id = f"chaos-{server_name}"
    stats = run_chaos(url, run_id, kills=KILLS, terms=TERMS, generations=GENERATIONS,
                      seed=_seed(server_name), env=env, workdir=tmp_path)
    stats.store = server_name
    stats.faults = dict(proxy.faults)
    s3_env(server)
    _check(stats, url, run_id)
    assert proxy.fault_count > 0, proxy.faults
