"""pytest fixtures for real S3 servers; load with ``pytest_plugins = ["tests.conftest_s3"]``.

- ``moto_server`` / ``rclone_server``: session-scoped running servers (see s3servers.py):
  ``.endpoint``, ``.env``, ``.make_bucket()``, ``.new_store_url()``, ``.client()``.
- ``s3_server``: parametrized over both (tests using it run once per server).
- ``s3_env``: function-scoped; ``s3_env(server, endpoint=None)`` points boto3's standard
  chain (AWS_ENDPOINT_URL, keys, region) at a server, or at a proxy in front of it,
  for the rest of the test.
- ``s3_store_url``: a fresh ``s3://bucket/prefix`` on ``s3_server`` with the env set.
- ``fault_proxy``: ``fault_proxy(server, rate=..., seed=..., kinds=...)`` starts a
  FaultProxy in front of ``server`` for the rest of the test.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest

from tests.faultproxy import FaultProxy
from tests.s3servers import MotoServer, RcloneServer, S3Server

_ENV_CLEARED = ("AWS_ENDPOINT_URL_S3", "AWS_PROFILE", "AWS_SESSION_TOKEN", "AWS_REGION")


@pytest.fixture(scope="session")
def moto_server() -> Iterator[MotoServer]:
    with MotoServer() as server:
        yield server


@pytest.fixture(scope="session")
def rclone_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RcloneServer]:
    with RcloneServer(tmp_path_factory.mktemp("rclone-s3")) as server:
        yield server


@pytest.fixture(params=["moto", "rclone"])
def s3_server(request: pytest.FixtureRequest) -> S3Server:
    server: S3Server = request.getfixturevalue(f"{request.param}_server")
    return server


@pytest.fixture
def s3_env(monkeypatch: pytest.MonkeyPatch) -> Callable[..., dict[str, str]]:
    def point(server: S3Server, endpoint: str | None = None) -> dict[str, str]:
        env = dict(server.env)
        if endpoint is not None:
            env["AWS_ENDPOINT_URL"] = endpoint
        for name in _ENV_CLEARED:
            monkeypatch.delenv(name, raising=False)
        for name, value in env.items():
            monkeypatch.setenv(name, value)
        # Never pick up the developer's ~/.aws files.
        monkeypatch.setenv("AWS_CONFIG_FILE", "/nonexistent/resumable-tests")
        monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", "/nonexistent/resumable-tests")
        return env

    return point


@pytest.fixture
def s3_store_url(s3_server: S3Server, s3_env: Callable[..., Any]) -> str:
    s3_env(s3_server)
    return s3_server.new_store_url()


@pytest.fixture
def fault_proxy() -> Iterator[Callable[..., FaultProxy]]:
    started: list[FaultProxy] = []

    def start(server: S3Server, **options: Any) -> FaultProxy:
        proxy = FaultProxy(server.endpoint, **options).start()
        started.append(proxy)
        return proxy

    yield start
    for proxy in started:
        proxy.stop()
