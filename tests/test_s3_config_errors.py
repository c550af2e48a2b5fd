"""AWS settings the S3 client cannot be made with (a profile that does not exist, an
endpoint that is no URL, a region that is no name) are a ConfigurationError naming the
store and what to check, in the library and the CLI (exit 78), not botocore's exception
with a traceback (review 37)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from resumable import ConfigurationError, checkpointed
from resumable._errors import EXIT_CONFIG

ROOT = Path(__file__).resolve().parents[1]
URL = "s3://my-ga-runs/prefix"
SETTINGS = [({"AWS_PROFILE": "no-such-profile-r37"}, r"ProfileNotFound.*\$AWS_PROFILE"),
            ({"AWS_ENDPOINT_URL_S3": "not-a-url"}, r"Invalid endpoint: not-a-url"),
            ({"AWS_DEFAULT_REGION": "bad region!"}, r"InvalidRegionError.*region")]


def _gen(n: int, *, state: Any = None) -> Any:
    state = state or 0
    while state < n:
        state += 1
        yield state
    return state


@pytest.mark.parametrize(("env", "says"), SETTINGS, ids=["profile", "endpoint", "region"])
def test_bad_aws_settings_are_a_configuration_error(
        monkeypatch: pytest.MonkeyPatch, env: dict[str, str], says: str) -> None:
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "k")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "s")
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    with pytest.raises(ConfigurationError, match=says) as err:
        checkpointed(store=URL, run_id="r")(_gen)(2)
    assert URL in str(err.value)
    done = subprocess.run([sys.executable, "-m", "resumable", "ls", URL], capture_output=True,
                          text=True, cwd=ROOT, timeout=60, env={**os.environ, **env})
    assert done.returncode == EXIT_CONFIG, done.stderr
    assert URL in done.stderr and "Traceback" not in done.stderr


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")
def test_a_forked_child_that_cannot_make_its_client_names_the_store(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A child the body forks makes its own client at its first request. Settings that
    changed since the store was opened (a profile set in the body) fail there: the error
    names the store, as it does at opening (review 38 left it without)."""
    from resumable.stores import open_store

    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "k")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "s")
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    store: Any = open_store(URL)
    monkeypatch.setenv("AWS_PROFILE", "no-such-profile-r38")
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: report what making its client raised, then leave at once
        try:
            os.close(read)
            try:
                store._client  # noqa: B018  (its first use in this process)
                message = "no error"
            except BaseException as err:
                message = f"{type(err).__name__}: {err}"
            os.write(write, message.encode())
        finally:
            os._exit(0)
    os.close(write)
    with os.fdopen(read, "rb") as pipe:
        message = pipe.read().decode()
    os.waitpid(pid, 0)
    assert message.startswith("ConfigurationError"), message
    assert URL in message and "AWS_PROFILE" in message, message
