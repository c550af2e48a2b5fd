"""The `resumable` console script, run as a user runs it: a subprocess on a real store."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Generator
from pathlib import Path
from typing import Any

import pytest

from resumable import checkpointed
from resumable._errors import EXIT_CONFIG, EXIT_CORRUPT, EXIT_TAMPERED

SCRIPT = Path(sys.executable).with_name("resumable")
KEY = "k" * 32


def count_up(n: int, fail_after: int | None = None, *, state: int | None = None) -> Generator[
    int, None, int
]:
    """A tiny run: the state is the count; optionally dies after ``fail_after`` yields."""
    state = state or 0
    while state < n:
        state += 1
        yield state
        if state == fail_after:
            raise RuntimeError("simulated failure")
    return state


def populate(store: Path, run_id: str, *, n: int = 5, fail_after: int | None = None,
             signing_key: str | None = None) -> None:
    f = checkpointed(store=str(store), run_id=run_id, keep=None, signing_key=signing_key)(
        count_up
    )
    if fail_after is None:
        f(n)
    else:
        with pytest.raises(RuntimeError):
            f(n, fail_after)


def cli(*args: str, store: Path | None = None, key: str | None = None,
        stdin: Any = subprocess.DEVNULL) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("RESUMABLE_")}
    if store is not None:
        env["RESUMABLE_STORE"] = str(store)
    if key is not None:
        env["RESUMABLE_SIGNING_KEY"] = key
    return subprocess.run([str(SCRIPT), *args], capture_output=True, text=True, env=env,
                          stdin=stdin, timeout=60)


@pytest.fixture
def store(tmp_path: Path) -> Path:
    """A local store with one complete run ('done') and one interrupted run ('half')."""
    root = tmp_path / "store"
    populate(root, "done", n=5)
    populate(root, "half", n=5, fail_after=2)
    return root


def assert_one_line_error(proc: subprocess.CompletedProcess[str]) -> None:
    assert proc.returncode != 0
    assert "Traceback" not in proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    assert lines[0].startswith("resumable: error: ")


def test_console_script_is_installed() -> None:
    """The console script declared in pyproject sits next to the interpreter."""
    assert SCRIPT.exists()


@pytest.mark.parametrize("command", [[], ["ls"], ["show"], ["verify"], ["rm"]])
def test_help_works_for_every_command(command: list[str]) -> None:
    """`--help` prints usage and exits 0 for the program and every subcommand."""
    proc = cli(*command, "--help")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("usage: resumable")


def test_version() -> None:
    """`--version` names the program and the package version."""
    import resumable

    proc = cli("--version")
    assert proc.returncode == 0
    assert proc.stdout.strip() == f"resumable {resumable.__version__}"


def test_ls_table_lists_each_run(store: Path) -> None:
    """ls prints one row per run with its checkpoint count, step and completeness."""
    proc = cli("ls", str(store))
    assert proc.returncode == 0, proc.stderr
    rows = {line.split()[0]: line.split() for line in proc.stdout.splitlines()[1:] if line}
    # Uploads coalesce under a fast loop, so how many checkpoints exist varies; the
    # newest step, the attempt count and completeness do not.
    assert int(rows["done"][1]) >= 1 and rows["done"][2:5] == ["5", "1", "yes"]
    assert int(rows["half"][1]) >= 1 and rows["half"][2:5] == ["2", "1", "no"]


def test_ls_json_uses_the_default_store_from_the_environment(store: Path) -> None:
    """ls --json parses, and without STORE it reads $RESUMABLE_STORE."""
    proc = cli("ls", "--json", store=store)
    assert proc.returncode == 0, proc.stderr
    data = json.loads(proc.stdout)
    assert data["store"] == store.as_uri()
    runs = {r["run_id"]: r for r in data["runs"]}
    assert set(runs) == {"done", "half"}
    assert runs["done"]["complete"] is True and runs["half"]["complete"] is False
    assert runs["half"]["newest_step"] == 2 and runs["half"]["newest_problem"] is None


def test_ls_empty_store(tmp_path: Path) -> None:
    """An empty store is not an error: ls says so and --json gives no runs."""
    assert cli("ls", str(tmp_path)).returncode == 0
    assert json.loads(cli("ls", str(tmp_path), "--json").stdout)["runs"] == []


def test_show_lists_objects_with_headers(store: Path) -> None:
    """show --json gives each object's kind, step, serializer and verification."""
    proc = cli("show", str(store), "done", "--json")
    assert proc.returncode == 0, proc.stderr
    objects = {o["name"]: o for o in json.loads(proc.stdout)["objects"]}
    ckpts = [o for o in objects.values() if o["kind"] == "ckpt"]
    steps = [o["step"] for o in ckpts]
    assert steps == sorted(steps) and steps[-1] == 5
    assert all(o["serializer"] == "pickle" and o["verified"] and not o["signed"] for o in ckpts)
    assert objects["result"]["kind"] == "result"
    table = cli("show", str(store), "done")
    assert table.returncode == 0 and "ckpt-00000001-000000000005" in table.stdout


def test_show_with_one_positional_takes_it_as_the_run_id(store: Path) -> None:
    """`show RUN_ID` (no STORE) reads the run from $RESUMABLE_STORE."""
    proc = cli("show", "half", store=store)
    assert proc.returncode == 0, proc.stderr
    assert "ckpt-00000001-000000000002" in proc.stdout


def test_verify_passes_on_an_intact_run(store: Path) -> None:
    """verify exits 0 and reports every object as ok."""
    proc = cli("verify", str(store), "done")
    assert proc.returncode == 0, proc.stderr
    assert "FAIL" not in proc.stdout
    assert "checkpoint(s)" in proc.stdout and "ckpt-00000001-000000000005" in proc.stdout


def test_verify_fails_and_names_a_corrupted_checkpoint(store: Path) -> None:
    """Flipping one byte of one checkpoint makes verify exit EXIT_CORRUPT and name it."""
    victim = store / "done" / "ckpt-00000001-000000000005"
    data = bytearray(victim.read_bytes())
    data[-1] ^= 0x01
    victim.write_bytes(bytes(data))
    proc = cli("verify", str(store), "done")
    assert proc.returncode == EXIT_CORRUPT
    failed = [line for line in proc.stdout.splitlines() if line.startswith("FAIL")]
    assert len(failed) == 1 and victim.name in failed[0] and "checksum" in failed[0]
    assert victim.name in proc.stderr and "Traceback" not in proc.stderr
    shown = json.loads(cli("show", str(store), "done", "--json").stdout)["objects"]
    assert [o["name"] for o in shown if not o["verified"]] == [victim.name]


def test_verify_checks_signatures_with_the_key(tmp_path: Path) -> None:
    """A signed run verifies with its key, fails as tampered with another or when unsigned."""
    signed_store = tmp_path / "s"
    populate(signed_store, "signed", n=3, signing_key=KEY)
    assert cli("verify", str(signed_store), "signed", key=KEY).returncode == 0
    no_key = cli("verify", str(signed_store), "signed")
    assert no_key.returncode == 0 and "no key is set" in no_key.stderr
    assert cli("verify", str(signed_store), "signed", key="x" * 32).returncode == EXIT_TAMPERED
    populate(signed_store, "unsigned", n=2)
    assert cli("verify", str(signed_store), "unsigned", key=KEY).returncode == EXIT_TAMPERED


def test_signing_key_env_option_names_the_variable(tmp_path: Path) -> None:
    """--signing-key-env reads the key from another variable (e.g. the old key in rotation)."""
    populate(tmp_path, "signed", n=2, signing_key=KEY)
    env = {k: v for k, v in os.environ.items() if not k.startswith("RESUMABLE_")}
    env["OLD_KEY"] = KEY
    proc = subprocess.run(
        [str(SCRIPT), "verify", str(tmp_path), "signed", "--signing-key-env", "OLD_KEY"],
        capture_output=True, text=True, env=env, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert "no key is set" not in proc.stderr


def test_rm_refuses_without_a_terminal_and_deletes_with_yes(store: Path) -> None:
    """rm without --yes and without a terminal refuses; with --yes the run is gone."""
    refused = cli("rm", str(store), "half")
    assert_one_line_error(refused)
    assert "--yes" in refused.stderr
    assert (store / "half").exists()
    proc = cli("rm", str(store), "half", "--yes")
    assert proc.returncode == 0, proc.stderr
    assert not (store / "half").exists()
    assert [r["run_id"] for r in json.loads(cli("ls", str(store), "--json").stdout)["runs"]] == [
        "done"
    ]


@pytest.mark.parametrize(
    ("args", "code"),
    [
        (["show", "{store}", "no-such-run"], None),
        (["verify", "{store}", "../escape"], EXIT_CONFIG),
        (["ls", "s3:/missing-slash"], EXIT_CONFIG),
        (["ls", "gopher://x"], EXIT_CONFIG),
        (["rm", "{store}", "no-such-run", "--yes"], None),
    ],
)
def test_errors_are_one_line_without_traceback(store: Path, args: list[str],
                                               code: int | None) -> None:
    """Failures print `resumable: error: ...` on one line and exit non-zero."""
    proc = cli(*[a.format(store=store) for a in args])
    assert_one_line_error(proc)
    if code is not None:
        assert proc.returncode == code


def test_usage_errors_are_one_line() -> None:
    """A missing argument or unknown command is one line too, with a pointer to --help."""
    for args in (["show"], ["frobnicate"], []):
        proc = cli(*args)
        assert_one_line_error(proc)
        assert "--help" in proc.stderr
