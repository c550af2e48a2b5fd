"""CLI defects found by a user pass of `python -m resumable ...` (each test failed before)."""

from __future__ import annotations

import shlex
from collections.abc import Generator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from resumable import checkpointed
from resumable.cli import main

if TYPE_CHECKING:
    from .s3servers import S3Server

EXIT_USAGE = 2
EXIT_CONFIG = 78
KEY = "k" * 32


def _count(n: int, *, state: int | None = None) -> Generator[int, None, int]:
    state = state or 0
    while state < n:
        state += 1
        yield state
    return state


def _run(store: Path | str, run_id: str, *, signing_key: str | None = None) -> None:
    checkpointed(store=str(store), run_id=run_id, signing_key=signing_key)(_count)(2)


@pytest.fixture
def signed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A store with one signed run; no RESUMABLE_* variable set."""
    monkeypatch.delenv("RESUMABLE_SIGNING_KEY", raising=False)
    monkeypatch.delenv("RESUMABLE_STORE", raising=False)
    _run(tmp_path / "store", "signed", signing_key=KEY)
    return tmp_path / "store"


# -- 1. --signing-key-env naming a variable that is not set ------------------------------


@pytest.mark.parametrize("argv", [["verify"], ["show"], ["show", "--verify"],
                                  ["show", "--verify", "--json"]])
@pytest.mark.parametrize("value", [None, ""], ids=["unset", "empty"])
def test_signing_key_env_naming_an_unset_variable_is_a_configuration_error(
        argv: list[str], value: str | None, signed: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    """`verify --signing-key-env NOPE` with $NOPE unset passed (exit 0, "only checksums
    were checked"): the user asked for that key, so no key is an error naming it."""
    if value is None:
        monkeypatch.delenv("NOPE", raising=False)
    else:
        monkeypatch.setenv("NOPE", value)
    code = main([*argv, str(signed), "signed", "--signing-key-env", "NOPE"])
    err = capsys.readouterr().err
    assert code == EXIT_CONFIG, err
    assert len(err.strip().splitlines()) == 1, err
    assert "$NOPE" in err and "--signing-key-env" in err and "export NOPE=" in err, err


def test_the_default_signing_key_variable_unset_still_passes_with_a_note(
        signed: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Without --signing-key-env an unset $RESUMABLE_SIGNING_KEY is no error: checksums
    are checked and a note says how to check signatures."""
    assert main(["verify", str(signed), "signed"]) == 0
    assert "set $RESUMABLE_SIGNING_KEY" in capsys.readouterr().err
    assert main(["show", "--verify", str(signed), "signed"]) == 0


def test_signing_key_env_naming_a_set_variable_checks_signatures(
        signed: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("OLD_KEY", KEY)
    assert main(["verify", str(signed), "signed", "--signing-key-env", "OLD_KEY"]) == 0
    assert "no key is set" not in capsys.readouterr().err
    monkeypatch.setenv("RESUMABLE_SIGNING_KEY", "x" * 32)  # (the named one wins)
    assert main(["show", "--verify", str(signed), "signed", "--signing-key-env",
                 "OLD_KEY"]) == 0


# -- 2. `ls` above the runs suggests only folders that hold runs -------------------------


def _venv_like(root: Path) -> None:
    """Nested folders with files and no run: a virtualenv, a source tree."""
    deep = root / "venv" / "lib" / "python3.11" / "site-packages" / "pkg"
    deep.mkdir(parents=True)
    (deep / "__init__.py").write_text("")
    (root / "venv" / "pyvenv.cfg").write_text("home = /usr/bin\n")


def test_ls_of_a_folder_without_runs_suggests_no_folder(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """`ls /some/folder` with a venv in it said "did you mean file:///some/folder/venv?"
    (exit 78), and following it led down venv/lib/python3.11/site-packages/..."""
    _venv_like(tmp_path)
    code = main(["ls", str(tmp_path)])
    err = capsys.readouterr().err
    assert code == 0, err
    assert "did you mean" not in err and "venv" not in err, err
    assert "no runs" in err, err
    code = main(["ls", str(tmp_path / "venv")])
    err = capsys.readouterr().err
    assert code == 0 and "did you mean" not in err, err


def test_ls_suggests_the_folder_of_runs_and_not_its_neighbours(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    _venv_like(tmp_path)
    _run(tmp_path / "exp", "run-a")
    _run(tmp_path / "deeper" / "2024" / "june", "run-b")  # (runs three levels down)
    code = main(["ls", str(tmp_path)])
    err = capsys.readouterr().err
    assert code == EXIT_CONFIG, err
    assert f"{tmp_path.as_uri()}/exp" in err, err
    assert f"{tmp_path.as_uri()}/deeper/2024/june" in err, err
    assert "venv" not in err, err
    code = main(["ls", str(tmp_path / "exp")])
    assert code == 0 and "run-a" in capsys.readouterr().out


def test_runs_too_deep_are_not_searched_for(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The search for folders of runs goes a few levels down, not through a whole tree."""
    _run(tmp_path / "a" / "b" / "c" / "d" / "e", "run-a")
    code = main(["ls", str(tmp_path)])
    err = capsys.readouterr().err
    assert code == 0 and "did you mean" not in err, err


def test_show_of_a_folder_without_runs_does_not_call_it_a_folder_of_runs(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """`show /some/folder venv` said "'venv' is not a run but a folder of runs", and
    `show /some/folder` said "runs are one level down, e.g. ls .../venv"."""
    _venv_like(tmp_path)
    code = main(["show", str(tmp_path), "venv"])
    err = capsys.readouterr().err
    assert code == 66, err
    assert "folder of runs" not in err and "not a run" in err, err
    code = main(["show", str(tmp_path)])
    err = capsys.readouterr().err
    assert code == EXIT_CONFIG and "RUN_ID is missing" in err, err
    assert "one level down" not in err and "venv" not in err, err
    _run(tmp_path / "exp", "run-a")
    code = main(["show", str(tmp_path), "exp"])
    err = capsys.readouterr().err
    assert code == 66 and "folder of runs" in err and "/exp" in err, err


# -- 4. usage errors exit 2, in argparse's one-line form ---------------------------------


@pytest.fixture
def completed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.delenv("RESUMABLE_STORE", raising=False)
    _run(tmp_path / "store", "done")
    return tmp_path / "store"


@pytest.mark.parametrize("argv, needle", [
    (["rm", "--completed", "--older-than", "7x", "{store}", "--yes"], "not a duration"),
    (["rm", "--completed", "--older-than", "soon", "{store}", "--yes"], "not a duration"),
    (["rm", "--older-than", "7d", "{store}", "done", "--yes"], "goes with --completed"),
    (["rm", "--older-than", "7d", "done", "--yes"], "goes with --completed"),
    (["rm", "--completed", "{store}", "done", "--yes"], "give only the STORE"),
], ids=["bad-unit", "no-number", "older-than-without-completed",
        "older-than-without-completed-default-store", "completed-with-run-id"])
def test_usage_errors_exit_2_in_argparse_form(
        argv: list[str], needle: str, completed: Path,
        capsys: pytest.CaptureFixture[str]) -> None:
    """`rm --completed --older-than 7x` and `rm --older-than 7d STORE x` exited 1, where
    argparse's own usage errors exit 2; and nothing is deleted."""
    code = main([a.replace("{store}", str(completed)) for a in argv])
    err = capsys.readouterr().err
    assert code == EXIT_USAGE, err
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith("resumable: error: ") and needle in err, err
    assert lines[0].endswith("(see `resumable rm --help`)"), err
    assert (completed / "done" / "result").exists()


def test_older_than_zero_needs_no_unit(completed: Path) -> None:
    """0 is 0 in every unit: `--older-than 0` is every completed run (review 55)."""
    assert main(["rm", "--completed", "--older-than", "0", str(completed), "--yes"]) == 0
    assert not (completed / "done" / "result").exists()


@pytest.mark.parametrize("argv", [["ls", "--bogus"], ["show"], ["verify", "a", "b", "c"],
                                  ["rm", "--older-than"], ["nope"]])
def test_argparse_usage_errors_exit_2_in_one_line(
        argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    """(The errors argparse itself finds: the same status and form as the ones above.)"""
    with pytest.raises(SystemExit) as exited:
        main(argv)
    err = capsys.readouterr().err
    assert exited.value.code == EXIT_USAGE, err
    assert len(err.strip().splitlines()) == 1 and "--help`)" in err, err


# -- 3. --older-than without a unit is refused -------------------------------------------


@pytest.mark.parametrize("age", ["7", "1.5", " 30 "])
def test_older_than_without_a_unit_is_a_usage_error(
        age: str, completed: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """`rm --completed --older-than 7` meant 7 seconds (--help shows only 7d, 12h, 30m):
    on a command that deletes, a bare number is refused and the unit asked for."""
    code = main(["rm", "--completed", "--older-than", age, str(completed), "--yes"])
    err = capsys.readouterr().err
    assert code == EXIT_USAGE, err
    assert len(err.strip().splitlines()) == 1, err
    number = age.strip()
    assert "unit" in err and f"{number}d" in err and f"{number}s" in err, err
    assert (completed / "done" / "result").exists()


@pytest.mark.parametrize("age", ["0s", "0m", "0.0h", "0D", "0w"])
def test_older_than_with_a_unit_still_works(
        age: str, completed: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["rm", "--completed", "--older-than", age, str(completed), "--yes"]) == 0
    assert not (completed / "done").exists()


def test_older_than_help_names_the_units(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["rm", "--help"])
    out = " ".join(capsys.readouterr().out.split())
    assert "s, m, h, d or w" in out and "required" in out, out


# -- 5. S3 retry lines and the unreachable endpoint's variable ---------------------------

UNREACHABLE = "http://127.0.0.1:9"
# A deadline a refused connection's first attempt cannot outlast on a loaded machine
# (0.3 s left about 0.25 s for it: a stall that long, and nothing was retried or logged).
_RETRIED = "3"
_AWS_ENV = ("AWS_ENDPOINT_URL_S3", "AWS_ENDPOINT_URL", "AWS_PROFILE", "AWS_SESSION_TOKEN",
            "AWS_REGION", "AWS_IGNORE_CONFIGURED_ENDPOINT_URLS")


@pytest.fixture
def no_endpoint(monkeypatch: pytest.MonkeyPatch) -> pytest.MonkeyPatch:
    """Credentials and a region, no endpoint set, a short retry deadline."""
    pytest.importorskip("boto3")
    for name in _AWS_ENV:
        monkeypatch.delenv(name, raising=False)
    for name, value in {"AWS_ACCESS_KEY_ID": "test", "AWS_SECRET_ACCESS_KEY": "test",
                        "AWS_DEFAULT_REGION": "us-east-1",
                        "AWS_CONFIG_FILE": "/nonexistent/resumable-tests",
                        "AWS_SHARED_CREDENTIALS_FILE": "/nonexistent/resumable-tests",
                        "RESUMABLE_RETRY_DEADLINE": "0.3"}.items():
        monkeypatch.setenv(name, value)
    return monkeypatch


def test_a_retry_line_without_a_key_names_none(
        no_endpoint: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture,
        capsys: pytest.CaptureFixture[str]) -> None:
    """`ls s3://bkt/x` logged "retrying list s3://bkt/x key None (attempt 1 ...)"."""
    no_endpoint.setenv("AWS_ENDPOINT_URL", UNREACHABLE)
    no_endpoint.setenv("RESUMABLE_RETRY_DEADLINE", _RETRIED)
    with caplog.at_level("WARNING", logger="resumable"):
        assert main(["ls", "s3://bkt/x"]) == 74
    lines = [r.getMessage() for r in caplog.records if r.getMessage().startswith("retrying ")]
    assert lines, caplog.text
    assert all(line.startswith("retrying list s3://bkt/x (attempt ") for line in lines), lines
    assert "key None" not in caplog.text + capsys.readouterr().err


def test_a_retry_line_with_a_key_names_it(
        no_endpoint: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    from resumable import StoreError
    from resumable.stores import open_store

    no_endpoint.setenv("AWS_ENDPOINT_URL", UNREACHABLE)
    no_endpoint.setenv("RESUMABLE_RETRY_DEADLINE", _RETRIED)
    with caplog.at_level("WARNING", logger="resumable"), pytest.raises(StoreError):
        open_store("s3://bkt/x").get("run/result")
    assert "retrying get s3://bkt/x key 'run/result' (attempt " in caplog.text, caplog.text


@pytest.mark.parametrize("env, store, named, not_named", [
    ({"AWS_ENDPOINT_URL_S3": UNREACHABLE}, "s3://bkt/x", "AWS_ENDPOINT_URL_S3",
     "AWS_ENDPOINT_URL "),
    ({"AWS_ENDPOINT_URL": UNREACHABLE}, "s3://bkt/x", "AWS_ENDPOINT_URL ",
     "AWS_ENDPOINT_URL_S3"),
    # botocore honours AWS_ENDPOINT_URL_S3 over AWS_ENDPOINT_URL, and skips an empty one
    ({"AWS_ENDPOINT_URL_S3": UNREACHABLE, "AWS_ENDPOINT_URL": "http://127.0.0.1:7"},
     "s3://bkt/x", "AWS_ENDPOINT_URL_S3", "AWS_ENDPOINT_URL "),
    ({"AWS_ENDPOINT_URL_S3": "", "AWS_ENDPOINT_URL": UNREACHABLE}, "s3://bkt/x",
     "AWS_ENDPOINT_URL ", "AWS_ENDPOINT_URL_S3"),
    # the store URL's own endpoint_url= wins over both
    ({"AWS_ENDPOINT_URL_S3": "http://127.0.0.1:7"}, f"s3://bkt/x?endpoint_url={UNREACHABLE}",
     "endpoint_url= in the store URL", "AWS_ENDPOINT_URL"),
], ids=["s3-variable", "general-variable", "both", "empty-s3-variable", "url-option"])
def test_the_unreachable_endpoint_error_names_the_setting_in_use(
        env: dict[str, str], store: str, named: str, not_named: str,
        no_endpoint: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    """With AWS_ENDPOINT_URL_S3 set, the error said "check AWS_ENDPOINT_URL", which the
    user had not set (and which would change nothing: botocore prefers the _S3 one)."""
    for name, value in env.items():
        no_endpoint.setenv(name, value)
    assert main(["ls", store]) == 74
    err = capsys.readouterr().err.splitlines()[-1] + " "
    assert "unreachable" in err and UNREACHABLE in err, err
    assert named in err and not_named not in err, err


# -- review 55 of the fixes above ----------------------------------------------------------


def test_rm_completed_with_the_default_store_and_a_run_id_is_a_usage_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`rm --completed $RESUMABLE_STORE run1`: STORE equal to the default was taken for
    no STORE, so the folder ./run1 became the store and its completed run was deleted."""
    main_store = tmp_path / "main"
    monkeypatch.setenv("RESUMABLE_STORE", str(main_store))
    monkeypatch.chdir(tmp_path)
    _run(tmp_path / "run1", "inside")  # ./run1, a folder that is a store of its own
    assert main(["rm", "--completed", str(main_store), "run1", "--yes"]) == EXIT_USAGE
    assert (tmp_path / "run1" / "inside").is_dir()


def test_show_without_verify_lists_headers_under_a_broken_default_key(
    signed: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """`show` reads no signature without --verify: a short $RESUMABLE_SIGNING_KEY made
    it exit 78; with --verify the message says what is wrong with the variable."""
    monkeypatch.setenv("RESUMABLE_SIGNING_KEY", "short")
    assert main(["show", str(signed), "signed"]) == 0
    capsys.readouterr()
    assert main(["show", "--verify", str(signed), "signed"]) == EXIT_CONFIG
    err = capsys.readouterr().err
    assert "$RESUMABLE_SIGNING_KEY holds 5 bytes" in err and "short" not in err.replace(
        "holds", "")


def test_a_library_setting_the_cli_does_not_use_does_not_stop_it(
    signed: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The CLI checked every setting: a spill folder missing in a debugging shell made
    `ls` exit 78. It checks the one it uses, $RESUMABLE_RETRY_DEADLINE."""
    monkeypatch.setenv("RESUMABLE_SPILL_DIR", "/no/such/folder")
    monkeypatch.setenv("RESUMABLE_TERM_TIMEOUT", "20s")
    assert main(["ls", str(signed)]) == 0
    monkeypatch.setenv("RESUMABLE_RETRY_DEADLINE", "forever")
    assert main(["ls", str(signed)]) == EXIT_CONFIG


def test_the_folder_of_runs_hint_is_quoted_for_a_shell(
        moto_server: S3Server, s3_env: Any, capsys: pytest.CaptureFixture[str]) -> None:
    """`show STORE exp` on a folder of runs named the next command with the folder's URL
    unquoted: an s3 URL's ?a=1&b=2 options split the pasted command."""
    s3_env(moto_server)
    bucket = moto_server.new_store_url().split("/")[2]
    options = f"?endpoint_url={moto_server.endpoint}&addressing_style=path"
    _run(f"s3://{bucket}/root/exp{options}", "run-a")
    code = main(["show", f"s3://{bucket}/root{options}", "exp"])
    err = capsys.readouterr().err
    assert code == 66 and "folder of runs" in err, err
    below = err.split("then name one (`resumable {show,verify,rm} ", 1)[1].split(" RUN_ID`")[0]
    words = shlex.shlex(below, posix=True, punctuation_chars=True)  # (as a shell reads &)
    words.whitespace_split = True
    assert list(words) == [f"s3://{bucket}/root/exp{options}"], err
