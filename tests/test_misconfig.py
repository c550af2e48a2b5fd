"""Misconfiguration is not a transient fault: one line naming problem and fix, exit 78.

Each case was seen on main: a bad bucket name exited 74 with botocore's regex dump, an
https endpoint on an http server was retried for the whole deadline, a regular file as
the store died with NotADirectoryError (and `ls` said "no runs"), a forgotten run id
was "a path separator", and `ls` one level above the runs listed prefixes as runs.
"""

from __future__ import annotations

import contextlib
import io
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from resumable import ConfigurationError, checkpointed, cli
from resumable._run import Run
from resumable.stores import _registry as stores_registry
from resumable.stores import open_store
from resumable.stores._local import LocalStore
from tests.s3servers import MotoServer

EXIT_CONFIG = 78


def _cli(*argv: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = cli.main(list(argv))
    return code, out.getvalue(), err.getvalue()


def _one_config_line(code: int, err: str, *needles: str) -> None:
    assert code == EXIT_CONFIG, err
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    for needle in needles:
        assert needle in lines[0], (needle, lines[0])


def _a_run(url: str, run_id: str) -> None:
    run = Run(open_store(url), run_id)
    run.claim_epoch(None)
    run.write_checkpoint(run.snapshot({"i": 1}, 1, None))


@pytest.mark.s3
def test_a_bad_bucket_name_is_a_configuration_error(
    moto_server: MotoServer, s3_env: Callable[..., Any]
) -> None:
    s3_env(moto_server)
    code, _, err = _cli("ls", "s3://Bad_Bucket!/runs")
    _one_config_line(code, err, "Bad_Bucket!", "bucket name")
    assert "regex" not in err and "^[" not in err
    with pytest.raises(ConfigurationError, match="bucket name"):
        open_store("s3://Bad_Bucket!/runs")


@pytest.mark.parametrize("bucket", ["ab", "-bucket", "bucket-", "bucket..x", "UPPER",
                                    "Bad_Bucket", "192.168.1.1", "a" * 64])
def test_bucket_names_s3_never_accepts_are_refused_before_any_request(bucket: str) -> None:
    """S3's rules: 3-63 lowercase letters, digits, dots, hyphens; a letter or digit at
    both ends; no '..'; not an IP address. No server runs here: nothing is sent."""
    code, _, err = _cli("ls", f"s3://{bucket}/runs")
    _one_config_line(code, err, bucket, "bucket name")
    with pytest.raises(ConfigurationError, match="bucket name"):
        open_store(f"s3://{bucket}/runs")


@pytest.mark.parametrize("bucket", ["abc", "my.ga-runs.2", "rt-4242-7-0123abcd", "a" * 63])
def test_valid_bucket_names_are_accepted(bucket: str) -> None:
    assert open_store(f"s3://{bucket}/runs").url == f"s3://{bucket}/runs"


@pytest.mark.s3
def test_an_https_endpoint_on_an_http_server_is_not_retried(
    moto_server: MotoServer, s3_env: Callable[..., Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    """SSL 'wrong version number' is permanent; before, it was retried to the deadline."""
    https = moto_server.endpoint.replace("http://", "https://")
    s3_env(moto_server, endpoint=https)
    # Short, so the old behaviour (retry, then exit 74) fails this test quickly.
    monkeypatch.setenv("RESUMABLE_RETRY_DEADLINE", "3")
    url = moto_server.new_store_url()
    code, _, err = _cli("ls", url)
    _one_config_line(code, err, https, "http://")


def test_a_regular_file_as_the_store(tmp_path: Path) -> None:
    plain = tmp_path / "notes.txt"
    plain.write_text("not a folder")
    code, _, err = _cli("ls", str(plain))
    _one_config_line(code, err, str(plain), "not a folder")
    code, _, err = _cli("ls", str(plain / "below"))
    _one_config_line(code, err, str(plain), "not a folder")

    @checkpointed(store=str(plain / "runs"))
    def f(*, state: Any = None) -> Any:
        yield 1

    with pytest.raises(ConfigurationError, match="not a folder"):
        f()


def test_show_without_a_run_id_names_the_missing_argument(tmp_path: Path) -> None:
    store = str(tmp_path / "exp")
    _a_run(store, "run-a")
    _a_run(store, "run-b")
    for command in ("show", "verify", "rm"):
        code, _, err = _cli(command, store)
        _one_config_line(code, err, "RUN_ID", "run-a", "run-b")
        assert "path separator" not in err


@pytest.mark.s3
def test_show_of_an_s3_store_without_a_run_id(
    moto_server: MotoServer, s3_env: Callable[..., Any]
) -> None:
    s3_env(moto_server)
    url = moto_server.new_store_url("exp")
    _a_run(url, "run-a")
    code, _, err = _cli("show", url)
    _one_config_line(code, err, "RUN_ID", "run-a", f"resumable show {url} run-a")


def test_ls_one_level_above_the_runs_points_down(tmp_path: Path) -> None:
    _a_run(str(tmp_path / "exp"), "run-a")
    _a_run(str(tmp_path / "other"), "run-b")
    code, out, err = _cli("ls", str(tmp_path))
    _one_config_line(code, err, "no runs", f"{tmp_path.as_uri()}/exp",
                     f"{tmp_path.as_uri()}/other")
    assert out == ""
    code, out, err = _cli("ls", str(tmp_path / "exp"))
    assert code == 0 and "run-a" in out


def test_ls_of_an_empty_store_is_not_an_error(tmp_path: Path) -> None:
    """An existing empty folder has no runs; one that does not exist is no input (exit 66,
    tests/test_cli_edges.py): "no runs" there hid a mistyped path."""
    (tmp_path / "nothing-yet").mkdir()
    code, _, err = _cli("ls", str(tmp_path / "nothing-yet"))
    assert code == 0 and "no runs" in err
    code, _, err = _cli("ls", str(tmp_path / "not-there"))
    assert code == 66 and "does not exist" in err


# -- ls at scale: one listing, headers only with --check ---------------------------------


class _CountingLocal(LocalStore):
    """The local store, counting the reads `ls` makes besides its listing."""

    reads = 0

    def get(self, key: str) -> bytearray | None:
        type(self).reads += 1
        return super().get(key)

    def head(self, key: str, n: int) -> tuple[bytes, int] | None:
        type(self).reads += 1
        return super().head(key, n)


def test_ls_reads_no_object_and_ls_check_marks_damage(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Before, ls read one header per run, one after another (2.3 s for 1,000 runs on S3)."""
    for i in range(12):
        _a_run(str(tmp_path), f"run-{i:02d}")
    newest = tmp_path / "run-03" / "ckpt-00000001-000000000001"
    damaged = bytearray(newest.read_bytes())
    damaged[39] ^= 0x20  # the created time's exponent
    newest.write_bytes(damaged)
    monkeypatch.setitem(stores_registry, "counted",
                        lambda url: _CountingLocal(url.split("://", 1)[1]))
    _CountingLocal.reads = 0
    code, out, err = _cli("ls", f"counted://{tmp_path}", "--json")
    assert code == 0, err
    runs = json.loads(out)["runs"]
    assert _CountingLocal.reads == 0
    assert len(runs) == 12 and all(r["newest_bytes"] and r["newest_created"] for r in runs)
    assert not any(r["header_checked"] for r in runs)
    code, out, err = _cli("ls", f"counted://{tmp_path}", "--check")
    assert code == 0, err
    assert _CountingLocal.reads == 12
    assert [line.split()[0] for line in out.splitlines() if "(damaged)" in line] == ["run-03"]


def test_a_valid_run_id_is_never_read_as_a_store(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Even when a folder of that name is in the working directory."""
    _a_run(str(tmp_path / "store"), "run-a")
    monkeypatch.setenv("RESUMABLE_STORE", str(tmp_path / "store"))
    monkeypatch.chdir(tmp_path / "store")  # ./run-a is a folder here
    code, out, err = _cli("show", "run-a")
    assert code == 0 and "ckpt-" in out, err


def test_a_regular_file_where_the_run_folder_goes(tmp_path: Path) -> None:
    """<store>/<run id> is a file: a StoreError naming the store, the key and what to do.
    Before, removing the temp file after the failed write raised NotADirectoryError over
    it (no URL, not a ResumableError, the generic exit status)."""
    from resumable import StoreError

    (tmp_path / "rf").write_text("I am a file")

    @checkpointed(store=str(tmp_path), run_id="rf")
    def body(n: int, *, state: Any = None) -> Any:
        yield 1
        return n

    with pytest.raises(StoreError) as info:
        body(3)
    message = str(info.value)
    assert str(tmp_path) in message and "rf/" in message and "not a folder" in message
    assert (tmp_path / "rf").read_text() == "I am a file"
