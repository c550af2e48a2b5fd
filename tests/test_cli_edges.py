"""Edges of the `resumable` command line found by hostile reviews (round 11): a store
folder that does not exist, a missing bucket, run ids the library would not choose,
the ATTEMPTS count, a damaged result, and STORE and RUN_ID given the wrong way round.

Run as a user runs it (a subprocess on a real store), with the helpers of test_cli.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from resumable import _format
from resumable._errors import EXIT_CONFIG, EXIT_CORRUPT, StoreError
from resumable.cli import EXIT_NOT_FOUND
from resumable.stores import open_store
from tests.s3servers import S3Server
from tests.test_cli import assert_one_line_error, cli, flip_last_byte, populate


@pytest.fixture
def store(tmp_path: Path) -> Path:
    """A local store with one complete run ('done') and one interrupted run ('half'), as
    test_cli's store."""
    root = tmp_path / "store"
    populate(root, "done", n=5)
    populate(root, "half", n=5, fail_after=2)
    return root


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


# -- 3. every run ls lists can be named --------------------------------------------

WEIRD = "weird ☃ 100%"


def put_record(any_store_url: str, run_id: str, name: str, kind: str, *, step: int = 0,
               epoch: int = 1) -> None:
    """An object of the run as the library writes it (bound to its key by its header)."""
    frames = _format.encode([b"\x80\x05K\x01."], kind=kind, serializer="pickle", step=step,
                            epoch=epoch, created=1.7e9, name=f"{run_id}/{name}")
    open_store(any_store_url).put(f"{run_id}/{name}", frames)


def test_every_run_ls_lists_can_be_shown_verified_and_removed(any_store_url: str) -> None:
    """A folder of run objects under a name the library would not choose as a run id
    (spaces, a snowman, a percent sign: copied or renamed by hand, or written by another
    tool) is listed by `ls`; show, verify and rm take that name too, as the store holds
    such keys. Ids that could leave the store (`..`, separators) are still refused."""
    for name, kind, step in (("epoch-00000001", "epoch", 0),
                             ("ckpt-00000001-000000000001", "ckpt", 1)):
        put_record(any_store_url, WEIRD, name, kind, step=step)
    populate(any_store_url, "done", n=2)
    listed = cli("ls", any_store_url, "--json")
    assert listed.returncode == 0, listed.stderr
    assert {r["run_id"] for r in json.loads(listed.stdout)["runs"]} == {WEIRD, "done"}
    shown = cli("show", any_store_url, WEIRD)
    assert shown.returncode == 0, shown.stderr
    assert "ckpt-00000001-000000000001" in shown.stdout
    verified = cli("verify", any_store_url, WEIRD)
    assert verified.returncode == 0, (verified.stdout, verified.stderr)
    removed = cli("rm", any_store_url, WEIRD, "--yes")
    assert removed.returncode == 0, removed.stderr
    assert open_store(any_store_url).list(f"{WEIRD}/") == []
    assert [r["run_id"] for r in json.loads(cli("ls", any_store_url, "--json").stdout)[
        "runs"]] == ["done"]
    for bad in ("..", "../done", "done/..", "a\\b", "x\ny"):
        proc = cli("rm", any_store_url, bad, "--yes")
        assert_one_line_error(proc)
        assert proc.returncode == EXIT_CONFIG, (bad, proc.stderr)
    assert open_store(any_store_url).list("done/")


def test_ls_names_run_folders_no_command_can_take_in_a_note(tmp_path: Path) -> None:
    """A folder of run objects whose name has a control character (or is '..' on S3)
    cannot be given to show/verify/rm; ls does not list it as a run but says it is there."""
    url = (tmp_path / "store").as_uri()
    put_record(url, "tab\there", "epoch-00000001", "epoch")
    populate(url, "done", n=2)
    proc = cli("ls", url, "--json")
    assert proc.returncode == 0, proc.stderr
    assert [r["run_id"] for r in json.loads(proc.stdout)["runs"]] == ["done"]
    assert "'tab\\there' contains control characters" in proc.stderr, proc.stderr
    proc = cli("rm", url, "tab\there", "--yes")
    assert proc.returncode == EXIT_CONFIG and "control characters" in proc.stderr


@pytest.mark.s3
def test_rm_completed_leaves_run_folders_ls_does_not_list(
    moto_server: S3Server, s3_env: Callable[..., Any]
) -> None:
    """On S3 a completed run's objects may sit under a folder no command can name (the
    empty name of a doubled slash, '..'): ls leaves them out with a note, and so does
    `rm --completed`, which deletes the other completed runs. Before: it read
    '<prefix>//result' through the store, which refused the key, and stopped with exit 78
    having deleted nothing ("invalid key '/result'")."""
    s3_env(moto_server)
    url = moto_server.new_store_url()
    populate(url, "done", n=2)
    bucket, prefix = url.removeprefix("s3://").split("/", 1)
    client = moto_server.client()
    store = open_store(url)
    for name in store.list("done/"):
        body = bytes(store.get(name) or b"")
        for odd in ("", ".."):
            client.put_object(Bucket=bucket, Key=f"{prefix}/{odd}/{name.split('/', 1)[1]}",
                              Body=body)
    proc = cli("rm", "--completed", url, "--yes")
    assert proc.returncode == 0, proc.stderr
    assert "deleted 1 completed run(s)" in proc.stdout, proc.stdout
    assert "'' is not a folder name" in proc.stderr, proc.stderr
    assert store.list("done/") == []
    left = {o["Key"] for o in client.list_objects_v2(Bucket=bucket)["Contents"]}
    assert f"{prefix}//result" in left and f"{prefix}/../result" in left


# -- 4. ATTEMPTS --------------------------------------------------------------------


def test_show_counts_only_attempt_records_that_verify(store: Path) -> None:
    """`ls` counts attempt records by name (one listing, no GET per record: ls of 1,000
    runs stays one listing); `show` reads one run and counts only the records that
    verify, naming the ones that do not."""
    run = store / "done"
    (run / "epoch-00000007").write_bytes(b"not an attempt record\n")
    shutil.copy(run / "epoch-00000001", run / "epoch-00000008")  # bound to another key
    runs = {r["run_id"]: r for r in json.loads(cli("ls", str(store), "--json").stdout)["runs"]}
    assert runs["done"]["attempts"] == 3  # names, as documented
    proc = cli("show", str(store), "done", "--json")
    assert proc.returncode == 0, proc.stderr
    shown = json.loads(proc.stdout)
    assert shown["attempts"] == 1, shown
    assert shown["attempt_records_failing"] == ["epoch-00000007", "epoch-00000008"]
    table = cli("show", str(store), "done")
    assert table.returncode == 0, table.stderr
    line = [x for x in table.stdout.splitlines() if x.startswith("attempts:")]
    assert line and line[0].startswith("attempts: 1 ") and "epoch-00000007" in line[0], line


def test_ls_counts_only_names_of_attempt_records(store: Path) -> None:
    """ATTEMPTS counts `epoch-<8 digits>` names, as the library names its records (and
    as cf36db8 made a folder a run): someone's epoch-notes.txt in the run is no attempt."""
    (store / "done" / "epoch-notes.txt").write_bytes(b"restarted it after the outage\n")
    (store / "done" / "epoch-1").write_bytes(b"x")
    runs = {r["run_id"]: r for r in json.loads(cli("ls", str(store), "--json").stdout)["runs"]}
    assert runs["done"]["attempts"] == 1


# -- 5. a damaged result ------------------------------------------------------------


@pytest.mark.parametrize("damage", ["flip", "truncate"])
def test_show_says_the_result_exists_but_fails_verification(store: Path, damage: str) -> None:
    """A damaged result is not just "not complete": `show` says the result is there but
    fails verification, naming the key and suggesting `resumable verify`; `verify`
    fails the run (exit 65) naming it; `ls` marks the run's COMPLETE as damaged when
    the result's header is (ls reads headers only)."""
    result = store / "done" / "result"
    if damage == "flip":
        flip_last_byte(result)
    else:
        result.write_bytes(result.read_bytes()[:-1])
    proc = cli("show", str(store), "done")
    assert proc.returncode == 0, proc.stderr
    line = [x for x in proc.stdout.splitlines() if x.startswith("complete:")]
    assert line, proc.stdout
    assert "fails verification" in line[0] and "'done/result'" in line[0], line
    assert f"resumable verify {store.as_uri()} done" in line[0], line
    shown = json.loads(cli("show", str(store), "done", "--json").stdout)
    assert shown["complete"] is False and shown["result_problem"], shown
    proc = cli("verify", str(store), "done")
    assert proc.returncode == EXIT_CORRUPT and "result" in proc.stderr, proc.stderr
    if damage == "truncate":
        table = cli("ls", str(store)).stdout
        row = [x.split() for x in table.splitlines() if x.startswith("done ")]
        assert row and row[0][4] == "damaged", table
        runs = {r["run_id"]: r for r in json.loads(cli("ls", str(store), "--json").stdout)[
            "runs"]}
        assert runs["done"]["complete"] is False and runs["done"]["result_problem"]
    intact = json.loads(cli("show", str(store), "half", "--json").stdout)
    assert intact["result_problem"] is None


# -- 6. STORE and RUN_ID the wrong way round ---------------------------------------


@pytest.mark.parametrize("command", ["show", "verify", "rm"])
def test_swapped_arguments_get_the_command_the_right_way_round(
    store: Path, command: str, memory_url: str
) -> None:
    """`resumable show RUN STORE`: the second argument is a store (an existing folder,
    an s3:// or memory:// URL), the first is no store holding it: the one-line error
    suggests `resumable show STORE RUN`, and nothing is deleted."""
    for second in (str(store), store.as_uri(), memory_url, "s3://some-bucket/runs"):
        args = [command, "done", second] + (["--yes"] if command == "rm" else [])
        proc = cli(*args)
        assert_one_line_error(proc)
        assert f"STORE comes first, `resumable {command} {second} done`" in proc.stderr, (
            second, proc.stderr)
    assert (store / "done" / "result").exists()
    # Arguments the right way round, with the run missing: no swap is suggested.
    proc = cli(command, str(store), "nothing-here", *(["--yes"] if command == "rm" else []))
    assert proc.returncode == EXIT_NOT_FOUND and "comes first" not in proc.stderr, proc.stderr


@pytest.mark.parametrize("command", ["show", "verify", "rm"])
def test_a_run_id_that_starts_with_a_dash_gets_the_way_to_give_it(
    tmp_path: Path, command: str
) -> None:
    """`resumable show STORE -x`: argparse reads '-x' as an option. The error says how to
    give such a run id (after `--`), and that way works."""
    (tmp_path / "s" / "-x").mkdir(parents=True)
    proc = cli(command, str(tmp_path / "s"), "-x", *(["--yes"] if command == "rm" else []))
    assert proc.returncode == 2
    assert "if '-x' is a RUN_ID, give it after `--`" in proc.stderr, proc.stderr
    options = ["--yes"] if command == "rm" else []
    proc = cli(command, *options, str(tmp_path / "s"), "--", "-x")
    assert proc.returncode == EXIT_NOT_FOUND and "no run '-x'" in proc.stderr, proc.stderr


# -- 7. a memory:// store from a shell ----------------------------------------------------


def test_ls_of_an_empty_memory_store_says_the_command_cannot_see_one() -> None:
    """`resumable ls memory://x` in its own process: a memory store lives in the process
    that made it, so the command always finds it empty. "no runs" alone reads as if the
    runs were gone; the line says why and what to give instead."""
    proc = cli("ls", "memory://from-a-shell")
    assert proc.returncode == 0, proc.stderr
    assert "no runs in memory://from-a-shell" in proc.stderr, proc.stderr
    assert "lives in the process that made it" in proc.stderr, proc.stderr
    assert "folder or s3:// URL" in proc.stderr, proc.stderr
    # A folder with no runs: the plain line, nothing about memory stores.
    proc = cli("ls", "file:///nonexistent-resumable-store")
    assert "memory://" not in proc.stderr, proc.stderr


@pytest.mark.parametrize("command", ["show", "verify", "rm"])
def test_a_run_named_in_a_memory_store_from_a_shell_is_explained(command: str) -> None:
    """`resumable show/verify/rm memory://x RUN`: the store is empty in the command's own
    process, so suggesting `resumable ls memory://x` sends the user to a second empty
    listing. The error says why nothing is there and what to give instead."""
    options = ["--yes"] if command == "rm" else []
    proc = cli(command, *options, "memory://from-a-shell", "some-run")
    assert proc.returncode == EXIT_NOT_FOUND, proc.stderr
    assert "no run 'some-run' in memory://from-a-shell" in proc.stderr, proc.stderr
    assert "lives in the process that made it" in proc.stderr, proc.stderr
    assert "folder or s3:// URL" in proc.stderr, proc.stderr
    assert "ls memory://" not in proc.stderr, proc.stderr


@pytest.mark.parametrize("args", [["show"], ["verify"], ["rm", "--yes"],
                                  ["rm", "--completed"],
                                  ["rm", "--completed", "--older-than", "1d"]],
                         ids=["show", "verify", "rm", "rm-completed", "rm-completed-older"])
def test_every_command_on_a_memory_store_from_a_shell_says_why_it_is_empty(
        args: list[str]) -> None:
    """Without a RUN_ID, show/verify/rm still sent the user to `resumable ls memory://x`,
    and `rm --completed` said only "no completed runs" (review 45 of 13ceef9)."""
    proc = cli(*args, "MEMORY://from-a-shell" if args == ["show"] else "memory://from-a-shell")
    said = proc.stdout + proc.stderr
    assert "lives in the process that made it" in said, said
    assert "ls memory://" not in said, said


def test_a_file_resumable_never_writes_is_shown_as_not_its_own_not_as_damage(
        tmp_path: Path) -> None:
    """`show` listed someone's model.pt with BYTES 0 (never read, so unknown) and a HEADER
    of "NO: ...", which reads as a damaged object; `verify` said "not read" twice. Now
    BYTES is "-", the HEADER says whose it is, and `verify` says it once (review 38)."""
    populate(tmp_path, "r", n=2)
    (tmp_path / "r" / "model.pt").write_bytes(b"weights" * 100)
    shown = cli("show", str(tmp_path), "r")
    assert shown.returncode == 0, shown.stderr
    row = next(line for line in shown.stdout.splitlines() if line.startswith("model.pt"))
    cells = row.split()
    assert "NO:" not in row and " 0 " not in row, row
    assert cells[5] == "-" and row.endswith("not resumable's, not read"), row
    verified = cli("verify", str(tmp_path), "r")
    assert verified.returncode == 0, verified.stderr
    line = next(x for x in verified.stdout.splitlines() if "model.pt" in x)
    assert line == "skip  model.pt: a name resumable never writes: not read", line
    counted = verified.stdout.splitlines()[-1]
    objects = sum(1 for p in (tmp_path / "r").iterdir())
    assert f"{objects - 1} object(s) verified" in counted, counted  # not model.pt
    # --json (review 40): no problem (a consumer checking it flagged the run), no bytes
    # (never read, not 0), not verified either way, and marked as someone else's.
    for verify in ([], ["--verify"]):
        shown = cli("show", "--json", *verify, str(tmp_path), "r")
        assert shown.returncode == 0, shown.stderr
        entry = next(o for o in json.loads(shown.stdout)["objects"] if o["name"] == "model.pt")
        assert entry["foreign"] is True and entry["problem"] is None, entry
        assert entry["bytes"] is None and entry["verified"] is None, entry


def test_the_failure_line_counts_only_the_runs_own_objects(tmp_path: Path) -> None:
    """With files resumable never writes beside a damaged checkpoint, `verify` said "1 of
    11 object(s) fail verification" for a run of 7 (review 42): the success line already
    left them out, the failure line now does too."""
    populate(tmp_path, "r", n=2)
    run = tmp_path / "r"
    own = len(list(run.iterdir()))
    for name in ("a.txt", "b.txt", "model.pt"):
        (run / name).write_text("x")
    flip_last_byte(sorted(run.glob("ckpt-*"))[-1])
    for args in (["verify"], ["show", "--verify"]):
        done = cli(*args, str(tmp_path), "r")
        assert done.returncode == EXIT_CORRUPT, done.stderr
        assert f"1 of {own} object(s) of run 'r'" in done.stderr, done.stderr
