"""S3 servers for benchmarks: moto's ThreadedMotoServer and ``rclone serve s3`` on loopback.

Reuses the test suite's helpers (``tests/s3servers.py``) so benchmarks and tests start
the servers the same way. ``server(kind)`` is a context manager yielding an object with
``endpoint``, ``env`` (AWS_* variables for boto3's standard chain), ``client()`` and
``new_store_url()``. ``kind`` is ``"moto"`` or ``"rclone"``.
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

_TESTS = Path(__file__).resolve().parent.parent / "tests"
if str(_TESTS) not in sys.path:
    sys.path.insert(0, str(_TESTS))

from s3servers import MotoServer, RcloneServer, S3Server  # noqa: E402

KINDS = ("moto", "rclone")


@contextlib.contextmanager
def server(kind: str, **kwargs: Any) -> Iterator[S3Server]:
    cls = {"moto": MotoServer, "rclone": RcloneServer}[kind]
    with cls(**kwargs) as srv:
        yield srv


__all__ = ["KINDS", "MotoServer", "RcloneServer", "S3Server", "server"]
