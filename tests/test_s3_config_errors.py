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
