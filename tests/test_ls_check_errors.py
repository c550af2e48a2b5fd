"""`resumable ls` when the store fails for good on one run's object (review 151).

A persistent HTTP 500 on the newest checkpoint of one run (or on its result) made
`ls --check` (or plain `ls`, which reads result headers) exit 74 with no table at all:
one `StoreError` in the thread pool aborted every row. Now that run's row is marked
unreadable, with the key and the reason, every other run is listed as before, in the
same order, and the command still exits 74 with one line on stderr.

Run as a user runs it: the console script in a subprocess, boto3 going through a real
fault-injecting HTTP proxy (tests/faultproxy.py) in front of moto's server. The faults
are deterministic (every request whose request line names the key fails); the only
wait is the store's retry deadline, set short with $RESUMABLE_RETRY_DEADLINE.
"""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Callable
from typing import Any

import pytest

from resumable._errors import EXIT_STORE
from tests.faultproxy import FaultProxy
from tests.s3servers import S3Server
from tests.test_cli import SCRIPT, populate

N_RUNS = 12
RUN_IDS = [f"run-{i:02d}" for i in range(N_RUNS)]
DEADLINE = "0.3"  # seconds of retries before the StoreError


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    """The console script with the test's environment (the S3 endpoint set by s3_env)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("RESUMABLE_")}
    env["RESUMABLE_RETRY_DEADLINE"] = DEADLINE
    return subprocess.run([str(SCRIPT), *args], capture_output=True, text=True, env=env,
                          stdin=subprocess.DEVNULL, timeout=120)


@pytest.fixture
def s3_runs(moto_server: S3Server, s3_env: Callable[..., Any]) -> str:
    """A store on moto with N_RUNS runs: the even ones complete, the odd ones interrupted
    after two of five steps; its URL."""
    s3_env(moto_server)
    url = moto_server.new_store_url()
    for i, run_id in enumerate(RUN_IDS):
        populate(url, run_id, n=3 if i % 2 == 0 else 5, fail_after=None if i % 2 == 0 else 2)
    return url


def _rows(stdout: str) -> dict[str, list[str]]:
    """The table's rows by run id (the columns as split on runs of spaces), in order."""
    lines = stdout.splitlines()
    assert lines and lines[0].split()[:2] == ["RUN", "ID"], stdout
    rows: dict[str, list[str]] = {}
    for line in lines[1:]:
        if not line.strip():
            break  # the blank line before the summary
        cells = line.split()
        rows[cells[0]] = cells[1:]
    return rows


def _through_failing_proxy(server: S3Server, s3_env: Callable[..., Any],
                           fault_proxy: Callable[..., FaultProxy], match: str) -> FaultProxy:
    """Point boto3 at a proxy that answers every request naming ``match`` with a 500."""
    proxy = fault_proxy(server, rate=1.0, kinds=["internal"], match=match.encode())
    s3_env(server, endpoint=proxy.endpoint)
    return proxy


def _assert_store_error_line(proc: subprocess.CompletedProcess[str], url: str) -> str:
    assert proc.returncode == EXIT_STORE, (proc.returncode, proc.stderr)
    assert "Traceback" not in proc.stderr
    # One error line, last; before it only the store's log of its retries.
    lines = proc.stderr.strip().splitlines()
    assert all(ln.startswith("retrying ") for ln in lines[:-1]), proc.stderr
    line = lines[-1]
    assert line.startswith("resumable: error: 1 of 12 run(s) ")
    assert url in line and "could not be read" in line
    assert "retry" in line or "again" in line  # what to do
    return line


def test_ls_check_lists_every_run_when_one_newest_checkpoint_cannot_be_read(
    moto_server: S3Server, s3_env: Callable[..., Any],
    fault_proxy: Callable[..., FaultProxy], s3_runs: str,
) -> None:
    healthy = _cli("ls", "--check", s3_runs)
    assert healthy.returncode == 0, healthy.stderr
    before = _rows(healthy.stdout)
    assert list(before) == RUN_IDS

    bad = "run-05"
    proxy = _through_failing_proxy(moto_server, s3_env, fault_proxy, f"/runs/{bad}/ckpt-")
    proc = _cli("ls", "--check", s3_runs)
    assert proxy.faults["internal"] >= 1  # the fault was served, not dodged

    rows = _rows(proc.stdout)
    assert list(rows) == RUN_IDS, proc.stdout  # every run, in the same order
    for run_id in RUN_IDS:
        if run_id != bad:  # RUN ID .. COMPLETE as before (AGE moves on with the clock)
            assert rows[run_id][:4] == before[run_id][:4], (run_id, proc.stdout)
    assert rows[bad][:4] == before[bad][:4]  # the listing still gives CKPTS and STEP
    assert "(unreadable)" in " ".join(rows[bad]), proc.stdout
    assert sum("unreadable" in " ".join(r) for r in rows.values()) == 1
    # The reason names the key that failed and why.
    reason = [ln for ln in proc.stdout.splitlines() if "could not be read" in ln]
    assert len(reason) == 1, proc.stdout
    assert f"{bad}/ckpt-" in reason[0] and "500" in reason[0], reason[0]
    _assert_store_error_line(proc, s3_runs)


def test_ls_lists_every_run_when_one_result_cannot_be_read(
    moto_server: S3Server, s3_env: Callable[..., Any],
    fault_proxy: Callable[..., FaultProxy], s3_runs: str,
) -> None:
    """Plain `ls` reads the header of every result (COMPLETE): one that keeps failing is
    that run's COMPLETE "unreadable", not the end of the listing."""
    healthy = _cli("ls", s3_runs)
    assert healthy.returncode == 0, healthy.stderr
    before = _rows(healthy.stdout)

    bad = "run-04"  # a completed run
    assert before[bad][3] == "yes"
    proxy = _through_failing_proxy(moto_server, s3_env, fault_proxy, f"/runs/{bad}/result")
    proc = _cli("ls", s3_runs)
    assert proxy.faults["internal"] >= 1

    rows = _rows(proc.stdout)
    assert list(rows) == RUN_IDS, proc.stdout
    for run_id in RUN_IDS:
        if run_id != bad:
            assert rows[run_id][:4] == before[run_id][:4], (run_id, proc.stdout)
    assert rows[bad][:3] == before[bad][:3]
    assert rows[bad][3] == "unreadable", proc.stdout
    reason = [ln for ln in proc.stdout.splitlines() if "could not be read" in ln]
    assert len(reason) == 1 and f"{bad}/result" in reason[0] and "500" in reason[0], reason
    _assert_store_error_line(proc, s3_runs)


def test_ls_check_json_lists_every_run_with_the_read_error(
    moto_server: S3Server, s3_env: Callable[..., Any],
    fault_proxy: Callable[..., FaultProxy], s3_runs: str,
) -> None:
    """--json: every run, the unreadable one with ``read_error`` naming the key (null for
    the others), and the same exit 74 and stderr line for scripts."""
    bad = "run-07"
    _through_failing_proxy(moto_server, s3_env, fault_proxy, f"/runs/{bad}/ckpt-")
    proc = _cli("ls", "--check", "--json", s3_runs)
    doc = json.loads(proc.stdout)
    assert doc["store"] == s3_runs
    assert [r["run_id"] for r in doc["runs"]] == RUN_IDS
    by_id = {r["run_id"]: r for r in doc["runs"]}
    assert all(by_id[r]["read_error"] is None for r in RUN_IDS if r != bad)
    error = by_id[bad]["read_error"]
    assert isinstance(error, str) and f"{bad}/ckpt-" in error and "500" in error, error
    assert by_id[bad]["newest_problem"] is None  # unread is not damaged
    assert by_id[bad]["checkpoints"] >= 1 and by_id[bad]["newest_step"] is not None
    assert by_id[bad]["header_checked"] is False
    _assert_store_error_line(proc, s3_runs)
