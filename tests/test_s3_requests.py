"""Resume lookup on S3 costs a constant number of requests, however long the history."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from tests.s3servers import S3Server
from tests.toy import Crash, Faults, make_evolve


@pytest.mark.parametrize("history", [4, 40])
def test_resume_lookup_requests_do_not_grow_with_history(
    s3_server: S3Server,
    s3_env: Callable[..., Any],
    fault_proxy: Callable[..., Any],
    history: int,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Finding the checkpoint to resume from takes the same requests after 4 or 40 steps."""
    monkeypatch.setenv("RESUMABLE_SYNC", "1")  # every generation written: a long history
    proxy = fault_proxy(s3_server, rate=0.0)
    s3_env(s3_server, endpoint=proxy.endpoint)
    url = s3_server.new_store_url()
    evolve = make_evolve(Faults(crash_at={history + 1}), store=url)
    with pytest.raises(Crash):
        evolve(history + 5)
    before = proxy.requests
    latest = evolve.latest(history + 5)
    assert latest is not None and latest.step == history
    # list checkpoints, list epochs, get the newest: three requests
    assert proxy.requests - before == 3


def test_botocore_credential_refresh_does_not_draw_from_global_random() -> None:
    """botocore's instance-metadata refresh jitter uses a private RNG once the S3 store loads."""
    import random

    import botocore.utils

    import resumable.stores._s3  # noqa: F401  (installs the private generator)

    random.seed(1)
    before = random.getstate()
    fetcher = botocore.utils.InstanceMetadataFetcher()
    fetcher._evaluate_expiration({"expiry_time": "2000-01-01T00:00:00Z"})
    assert random.getstate() == before
