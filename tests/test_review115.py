"""Review 115: the save at the body's return with every=n, store URL timeouts that are
not finite, a signing key in the environment that is not UTF-8."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from resumable import CheckpointTamperedError, ConfigurationError, checkpointed
from resumable.stores import open_store

from .test_final_state import _evolve, _yielded_at  # (the body: sorts and draws at the end)


@pytest.mark.parametrize("every", ["generation", 5, "1h"])
def test_the_save_at_return_holds_a_yielded_state(tmp_path: Path, every: Any) -> None:
    """With every=n or a duration the last yield (not due) was saved at the body's
    return as the live object, changed by the code after the loop: a state never
    yielded, from which an extended run diverged (review 115). It is saved so, as the
    final state, marked: f.latest() says so, and the extension does not start from it
    (tests/test_final_state.py)."""
    extended = _evolve(tmp_path / "a", every)
    extended(12)
    latest = extended.latest(12)
    assert latest is not None
    if latest.final:
        assert every != "generation" and latest.state["pop"] == sorted(_yielded_at(12))
    else:
        assert latest.state["pop"] == _yielded_at(latest.step)
    assert extended(20) == _evolve(tmp_path / "b", every)(20)


@pytest.mark.parametrize("option", ["connect_timeout", "read_timeout"])
@pytest.mark.parametrize("value", ["nan", "inf", "1e400", "-inf", "1e10"])
def test_timeouts_that_are_not_finite_are_refused(option: str, value: str) -> None:
    """They were accepted, and every request then failed as a retriable StoreError
    (1e10 too, past what a socket takes: review 116)."""
    with pytest.raises(ConfigurationError, match=option):
        open_store(f"s3://bucket/prefix?{option}={value}")


def test_timeouts_as_numpy_numbers_are_taken_and_bools_refused() -> None:
    """numpy numbers worked before 24cff95 refused them (review 116); True is no number
    of seconds (it failed making the client, with advice about credentials)."""
    import numpy as np

    from resumable.stores._s3 import S3Store

    store = S3Store("s3://bucket/prefix", read_timeout=np.int64(10),
                    connect_timeout=np.float32(2.5))
    assert store is not None
    with pytest.raises(ConfigurationError, match="read_timeout=True"):
        S3Store("s3://bucket/prefix", read_timeout=True)
    from decimal import Decimal  # (and what float() takes; review 117)

    assert S3Store("s3://bucket/prefix", read_timeout=Decimal("30")) is not None
    with pytest.raises(ConfigurationError, match="read_timeout"):
        S3Store("s3://bucket/prefix", read_timeout=10**400)


@pytest.mark.parametrize("value", ["0", "-5"])
def test_a_multipart_threshold_below_one_is_refused(value: str) -> None:
    """It was made 1: every object, even a 200-byte record, went up in parts."""
    with pytest.raises(ConfigurationError, match="multipart_threshold"):
        open_store(f"s3://bucket/prefix?multipart_threshold={value}")


def test_a_signing_key_that_is_not_utf8_is_its_bytes(tmp_path: Path,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    """32 random bytes (a Secret from `openssl rand 32`) were refused as "at least 16
    bytes": the key is the environment's bytes, not UTF-8 text."""
    monkeypatch.setenv("RESUMABLE_SIGNING_KEY",
                       bytes(range(0x80, 0xA0)).decode("utf-8", "surrogateescape"))

    @checkpointed(store=str(tmp_path), run_id="signed")
    def f(*, state: Any = None) -> Any:
        state = state or {"x": 0}
        state["x"] += 1
        yield state
        return state["x"]

    assert f() == 1
    assert f() == 1  # the stored result, verified with the same key
    monkeypatch.setenv("RESUMABLE_SIGNING_KEY", "another key of enough bytes")
    with pytest.raises(CheckpointTamperedError):
        f()


def test_the_cli_reads_a_signing_key_that_is_not_utf8(tmp_path: Path) -> None:
    """`resumable verify` with such a key in the environment: its bytes (it raised
    UnicodeEncodeError, a traceback)."""
    import os
    import subprocess
    import sys

    key = bytes(range(0x80, 0xA0))
    env = {**os.environb, b"RESUMABLE_SIGNING_KEY": key}

    @checkpointed(store=str(tmp_path), run_id="signed",
                  signing_key=key.decode("utf-8", "surrogateescape"))
    def f(*, state: Any = None) -> Any:
        yield {"x": 1}
        return 1

    assert f() == 1
    done = subprocess.run([sys.executable, "-m", "resumable", "verify", str(tmp_path), "signed"],
                          env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "Traceback" not in done.stderr


def test_a_str_signing_key_is_utf8_in_every_locale(tmp_path: Path) -> None:
    """signing_key="clé..." in code: its UTF-8 bytes, also where the locale's codec is
    ASCII (it raised UnicodeEncodeError there, review 116)."""
    import os
    import subprocess
    import sys

    child = (
        "import sys\n"
        "from resumable import checkpointed\n"
        "@checkpointed(store=sys.argv[1], run_id='r',\n"
        "              signing_key='cl\\u00e9-secr\\u00e8te-longue')\n"
        "def f(*, state=None):\n"
        "    yield 1\n"
        "    return sys.getfilesystemencoding()\n"
        "print(f())\n")
    outputs = []
    for extra in ({}, {"LC_ALL": "C", "PYTHONUTF8": "0", "PYTHONCOERCECLOCALE": "0"}):
        done = subprocess.run([sys.executable, "-c", child, str(tmp_path)],
                              env={**os.environ, **extra}, capture_output=True, text=True,
                              timeout=120)
        assert done.returncode == 0, done.stderr
        outputs.append(done.stdout.strip())
    assert outputs == ["utf-8", "utf-8"]  # the second call: the first's result, verified
