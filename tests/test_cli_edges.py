"""Edges of the `resumable` command line found by hostile reviews (round 11): a store
folder that does not exist, a missing bucket, run ids the library would not choose,
the ATTEMPTS count, a damaged result, and STORE and RUN_ID given the wrong way round.

Run as a user runs it (a subprocess on a real store), with the helpers of test_cli.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from resumable._errors import EXIT_CONFIG, StoreError
from resumable.cli import EXIT_NOT_FOUND
from resumable.stores import open_store
from tests.s3servers import S3Server
from tests.test_cli import assert_one_line_error, cli

# -- 1. a local store folder that does not exist -------------------------------------


def test_ls_of_a_folder_that_does_not_exist_fails_naming_it(tmp_path: Path) -> None:
    """`ls PATH` of a missing folder is no input (exit 66, as a missing run), with one line
    naming the folder and saying to check the path; it used to say "no runs" and exit 0.
    An existing empty folder is still an empty store (exit 0, "no runs")."""
    missing = tmp_path / "typo" / "store"
    for args in (["ls", str(missing)], ["ls", str(missing), "--json"],
                 ["rm", "--completed", str(missing), "--yes"]):
        proc = cli(*args)
        assert_one_line_error(proc)
        assert proc.returncode == EXIT_NOT_FOUND, (args, proc.stderr)
        assert str(missing) in proc.stderr and "does not exist" in proc.stderr, proc.stderr
        assert "check the path" in proc.stderr, proc.stderr
    assert not missing.exists()  # looking does not create it
    # A run asked for in a missing folder: the folder is the reason given.
    proc = cli("show", str(missing), "r1")
    assert_one_line_error(proc)
    assert proc.returncode == EXIT_NOT_FOUND and str(missing) in proc.stderr, proc.stderr
    assert "does not exist" in proc.stderr, proc.stderr
    # The default store (./.resumable, no $RESUMABLE_STORE) missing: say where it looked.
    proc = cli("ls")
    assert_one_line_error(proc)
    assert proc.returncode == EXIT_NOT_FOUND and ".resumable" in proc.stderr, proc.stderr
    assert "RESUMABLE_STORE" in proc.stderr, proc.stderr
    empty = tmp_path / "empty"
    empty.mkdir()
    proc = cli("ls", str(empty))
    assert proc.returncode == 0 and "no runs" in proc.stderr, proc.stderr


# -- 2. a missing bucket is a configuration error -----------------------------------


def test_a_missing_bucket_is_a_configuration_error(
    moto_server: S3Server, s3_env: Callable[..., Any]
) -> None:
    """A bucket that does not exist is a wrong setting no retry can fix: exit 78
    (ConfigurationError in the README's table), not 74 (StoreError, which job.yaml
    retries), from every command and from the library; the message names the bucket,
    the store URL and the fix, and the error is still a StoreError for `except`."""
    s3_env(moto_server)
    url = "s3://resumable-no-such-bucket-cli/runs"
    for args in (["ls", url], ["show", url, "r1"], ["verify", url, "r1"],
                 ["rm", url, "r1", "--yes"], ["rm", "--completed", url, "--yes"]):
        proc = cli(*args)
        assert_one_line_error(proc)
        assert proc.returncode == EXIT_CONFIG, (args, proc.returncode, proc.stderr)
        assert url in proc.stderr and "NoSuchBucket" in proc.stderr, proc.stderr
        assert "aws s3 mb s3://resumable-no-such-bucket-cli" in proc.stderr, proc.stderr
    with pytest.raises(StoreError) as info:
        open_store(url).list("r1/")
    assert info.value.exit_code == EXIT_CONFIG
