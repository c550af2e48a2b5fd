"""CLI defects found by a user pass of `python -m resumable ...` (each test failed before)."""

from __future__ import annotations

from collections.abc import Generator
from pathlib import Path

import pytest

from resumable import checkpointed
from resumable.cli import main

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
