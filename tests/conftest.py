from __future__ import annotations

import itertools
import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings

pytest_plugins = ["tests.conftest_s3"]

# CI runs a bounded number of examples; HYPOTHESIS_PROFILE=full runs many more.
settings.register_profile(
    "ci", max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)
settings.register_profile(
    "full", max_examples=1000, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))

_counter = itertools.count()


@pytest.fixture(autouse=True)
def _isolated_env(
    monkeypatch: pytest.MonkeyPatch, tmp_path_factory: pytest.TempPathFactory
) -> None:
    """No test sees the developer's RESUMABLE_* settings or writes to ./.resumable."""
    for name in ("RESUMABLE_STORE", "RESUMABLE_RUN_ID", "RESUMABLE_SIGNING_KEY",
                 "RESUMABLE_SNAPSHOT_LIMIT", "RESUMABLE_SYNC", "RESUMABLE_UPLOAD_DUTY"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.chdir(tmp_path_factory.mktemp("cwd"))


@pytest.fixture
def memory_url() -> Iterator[str]:
    """A fresh, empty memory:// store."""
    from resumable.stores._memory import MemoryStore

    name = f"test-{next(_counter)}"
    yield f"memory://{name}"
    MemoryStore(name).clear()


@pytest.fixture(params=["local", "moto"])
def any_store_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """A fresh store: a folder, or a prefix of a new bucket on moto's server."""
    if request.param == "local":
        return (tmp_path / "store").as_uri()
    server = request.getfixturevalue("moto_server")
    request.getfixturevalue("s3_env")(server)
    url: str = server.new_store_url()
    return url
