"""An object whose first bytes show that it is not one of ours at its size is skipped as
damage without being read whole (review 138, left then): a 1 TiB sparse file at a
checkpoint's name was allocated and read before its header was looked at, and the resume
stopped with ENOMEM (a StoreError, exit 74) instead of going on from the checkpoint
before it."""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from resumable import checkpointed
from resumable.stores import open_store

from .test_cli import cli

if TYPE_CHECKING:
    from .s3servers import S3Server

TiB = 1 << 40


class Boom(Exception):
    pass


@pytest.fixture(autouse=True)
def _every_generation_written(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RESUMABLE_SYNC", "1")  # (checkpoints 2, 3 and 4 kept at the crash)


def _work(store: str, starts: list[Any], crash_at: int | None = None) -> Any:
    @checkpointed(store=store, run_id="job")
    def work(n: int, *, state: int | None = None) -> Any:
        starts.append(state)
        s = state or 0
        while s < n:
            s += 1
            if s == crash_at:
                raise Boom
            yield s
        return s

    return work


def _newest_checkpoint(store: str) -> str:
    names = sorted(k for k in open_store(store).list("job/") if "/ckpt-" in k)
    assert len(names) >= 2, names  # (an older one to go on from)
    return names[-1]


def _crashed_at_5(store: str) -> str:
    with pytest.raises(Boom):
        _work(store, [], crash_at=5)(10)
    return _newest_checkpoint(store)


@pytest.mark.parametrize("kind", ["foreign", "padded"])
def test_a_huge_object_at_a_checkpoints_name_is_skipped_unread(
        tmp_path: Path, kind: str, caplog: pytest.LogCaptureFixture) -> None:
    store = str(tmp_path / "s")
    key = _crashed_at_5(store)
    path = tmp_path / "s" / key
    if kind == "foreign":  # someone else's file: zeros, 1 TiB (sparse: no disk used)
        path.write_bytes(b"")
    os.truncate(path, TiB)  # ("padded": our checkpoint, 1 TiB long)
    starts: list[Any] = []
    with caplog.at_level(logging.ERROR, logger="resumable"):
        assert _work(store, starts)(10) == 10
    assert starts == [3], starts  # from the checkpoint before it
    reason = "bad magic" if kind == "foreign" else "truncated or padded"
    assert any(key in r.getMessage() and reason in r.getMessage() for r in caplog.records), \
        [r.getMessage() for r in caplog.records]


def test_verify_reports_a_huge_object_as_damage_without_reading_it(tmp_path: Path) -> None:
    store = str(tmp_path / "s")
    key = _crashed_at_5(store)
    os.truncate(tmp_path / "s" / key, TiB)
    checked = cli("verify", store, "job")
    assert checked.returncode == 65, checked.stderr  # damaged, not a store failure (74)
    assert "truncated or padded" in checked.stdout + checked.stderr, checked.stdout


def test_s3_reads_only_the_first_bytes_of_a_padded_checkpoint(
        moto_server: S3Server, s3_env: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    s3_env(moto_server)
    url = moto_server.new_store_url()
    key = _crashed_at_5(url)
    store = open_store(url)
    data = bytes(store.get(key) or b"")
    padded = len(data) + (1 << 20)
    store.put(key, [data, bytes(padded - len(data))])
    from resumable.stores import _s3

    allocated: list[int] = []
    real = _s3.aligned_buffer

    def recording(n: int) -> Any:
        allocated.append(n)
        return real(n)

    monkeypatch.setattr(_s3, "aligned_buffer", recording)
    starts: list[Any] = []
    assert _work(url, starts)(10) == 10
    assert starts == [3], starts
    assert padded not in allocated, allocated
