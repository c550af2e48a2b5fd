"""The RESUMABLE_* variables: one table in resumable/_settings.py, the same table in the README."""

from __future__ import annotations

import math
import re
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from resumable import ConfigurationError, _settings, checkpointed
from resumable._settings import SETTINGS, Setting

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "resumable"
NAMES = {s.name for s in SETTINGS}
REGENERATE = "python -c 'import resumable._settings as s; print(s.markdown_table())'"

# Values each variable must reject. Every variable that can be wrong has an entry, so a
# variable added to the table without a case here fails test_every_setting_has_bad_cases.
BAD = {
    "RESUMABLE_RUN_ID": ["a/b", "../up", "has space", "x" * 201],
    "RESUMABLE_SIGNING_KEY": ["short", "k" * 15],
    "RESUMABLE_UPLOAD_DUTY": ["0", "1.5", "-0.2", "fast", "nan", "1/3"],
    "RESUMABLE_SYNC": ["maybe", "2", "yes please"],
    "RESUMABLE_SNAPSHOT_LIMIT": ["lots", "-1", "5 parsecs", "MiB", "nan"],
    "RESUMABLE_SNAPSHOT_COPIES": ["0", "3", "one", "1.0"],
    "RESUMABLE_SPILL_DIR": ["/no/such/folder", "/etc/hostname", "of"],
    "RESUMABLE_SNAPSHOT_FORK": ["fork", "2", "maybe"],
    "RESUMABLE_FORK_TIMEOUT": ["-1", "soon", "nan"],
    "RESUMABLE_RESTART_BACKOFF": ["soon", "-1", "nan", "1s"],
    "RESUMABLE_RETRY_DEADLINE": ["forever", "-5", "nan", "60s"],
    "RESUMABLE_TERM_TIMEOUT": ["never", "-1", "nan", "20s"],
    "RESUMABLE_MIGRATION_TIMEOUT": ["soon", "-5", "nan"],
    "RESUMABLE_EXIT_CODES": ["maybe", "2"],
}
ANY_STRING = {"RESUMABLE_STORE",  # every string is a store URL or path until it is opened
              "RESUMABLE_AUDIT_CHILD"}  # a function's name, set by f.audit itself


def readme_rows() -> list[str]:
    lines = (ROOT / "README.md").read_text().splitlines()
    start = lines.index("| variable | default | meaning |")
    rows = []
    for line in lines[start:]:
        if not line.startswith("|"):
            break
        rows.append(line)
    return rows


def cells(row: str) -> list[str]:
    return [c.strip() for c in row.strip().strip("|").split("|")]


def test_readme_documents_every_variable_with_its_default() -> None:
    """Each variable in the table has a README row with the same default, and no other."""
    documented = {cells(r)[0].strip("`"): cells(r)[1] for r in readme_rows()[2:]}
    expected = {cells(r)[0].strip("`"): cells(r)[1]
                for r in _settings.markdown_table().splitlines()[2:]}
    assert set(documented) == set(expected), (
        "README's environment table and resumable/_settings.py name different variables; "
        f"paste the output of `{REGENERATE}` into the README")
    assert documented == expected


def test_readme_table_is_the_settings_table() -> None:
    """The README's rows are exactly what _settings.markdown_table() prints."""
    assert "\n".join(readme_rows()) == _settings.markdown_table(), (
        f"regenerate the README's environment table with `{REGENERATE}`")


def test_every_resumable_name_in_the_package_is_in_the_table() -> None:
    """No RESUMABLE_* variable is mentioned in the package without a row in the table."""
    used = set()
    for path in PACKAGE.rglob("*.py"):
        used.update(re.findall(r"RESUMABLE_[A-Z0-9_]*[A-Z0-9]", path.read_text()))
    assert used <= NAMES, f"not in resumable/_settings.py: {sorted(used - NAMES)}"


def test_only_the_settings_module_reads_resumable_variables() -> None:
    """os.environ is never read for a RESUMABLE_* name outside _settings.py."""
    pattern = re.compile(r"""(environ\s*(\.get\s*\(|\[)|getenv\s*\()\s*["']RESUMABLE_""")
    offenders = [str(p.relative_to(ROOT)) for p in PACKAGE.rglob("*.py")
                 if p.name != "_settings.py" and pattern.search(p.read_text())]
    assert offenders == []


def test_every_setting_has_bad_cases() -> None:
    """Each variable that can hold a wrong value has cases in BAD below."""
    assert set(BAD) == NAMES - ANY_STRING


def test_names_are_unique_and_prefixed() -> None:
    """One row per variable, each named RESUMABLE_*."""
    names = [s.name for s in SETTINGS]
    assert len(names) == len(set(names))
    assert all(n.startswith("RESUMABLE_") for n in names)


@pytest.mark.parametrize("setting", SETTINGS, ids=lambda s: s.name)
def test_unset_or_empty_gives_the_default(setting: Setting[object],
                                          monkeypatch: pytest.MonkeyPatch) -> None:
    """An unset or empty variable means its default."""
    monkeypatch.delenv(setting.name, raising=False)
    assert setting.read() == setting.default
    monkeypatch.setenv(setting.name, "")
    assert setting.read() == setting.default


@pytest.mark.parametrize("setting", [s for s in SETTINGS if s.shown not in ("none", "derived")],
                         ids=lambda s: s.name)
def test_the_default_shown_is_the_default_used(setting: Setting[object]) -> None:
    """The default the README shows parses to the default the code uses (0.33 ~ 1/3)."""
    value = setting.parse_value(setting.shown.strip("`"))
    if isinstance(value, float) and isinstance(setting.default, float):
        assert math.isclose(value, setting.default, rel_tol=0.02)
    else:
        assert value == setting.default


@pytest.mark.parametrize(("name", "bad"),
                         [(n, b) for n, values in BAD.items() for b in values])
def test_bad_values_raise_configuration_error_naming_the_variable(
    name: str, bad: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A wrong value is a ConfigurationError that names the variable, never a default."""
    setting = next(s for s in SETTINGS if s.name == name)
    monkeypatch.setenv(name, bad)
    with pytest.raises(ConfigurationError, match=f"\\${name}") as info:
        setting.read()
    if setting.secret:
        assert bad not in str(info.value)


@pytest.mark.parametrize(("name", "good", "expected"), [
    ("RESUMABLE_UPLOAD_DUTY", "1", 1.0),
    ("RESUMABLE_UPLOAD_DUTY", " 0.5 ", 0.5),
    ("RESUMABLE_SYNC", "1", True),
    ("RESUMABLE_SYNC", "false", False),
    ("RESUMABLE_SYNC", "On", True),
    ("RESUMABLE_SNAPSHOT_FORK", "1", True),
    ("RESUMABLE_SNAPSHOT_FORK", "off", False),
    ("RESUMABLE_SNAPSHOT_LIMIT", "64KiB", 64 * 1024),
    ("RESUMABLE_SNAPSHOT_LIMIT", "inf", math.inf),
    ("RESUMABLE_SNAPSHOT_LIMIT", "0", 0),
    ("RESUMABLE_RETRY_DEADLINE", "inf", 1e8),  # (no limit, as a number every wait takes)
    ("RESUMABLE_TERM_TIMEOUT", "2.5", 2.5),
    ("RESUMABLE_MIGRATION_TIMEOUT", "30", 30.0),
    ("RESUMABLE_EXIT_CODES", "0", False),
    ("RESUMABLE_EXIT_CODES", "no", False),
    ("RESUMABLE_RUN_ID", "job-7", "job-7"),
    ("RESUMABLE_SIGNING_KEY", " sixteen bytes!! ", b" sixteen bytes!! "),
    ("RESUMABLE_STORE", "s3://bucket/prefix", "s3://bucket/prefix"),
])
def test_good_values(name: str, good: str, expected: object,
                     monkeypatch: pytest.MonkeyPatch) -> None:
    """Values are parsed as documented; keys and names are used byte for byte."""
    monkeypatch.setenv(name, good)
    assert next(s for s in SETTINGS if s.name == name).read() == expected


@given(raw=st.text(alphabet=st.characters(blacklist_categories=("Cs",),
                                          blacklist_characters="\x00"), max_size=30),
       index=st.integers(0, len(SETTINGS) - 1))
def test_any_value_parses_or_names_the_variable(raw: str, index: int) -> None:
    """Whatever the text, a setting gives a value or a ConfigurationError naming it."""
    setting = SETTINGS[index]
    try:
        setting.parse_value(raw)
    except ConfigurationError as err:
        assert f"${setting.name}" in str(err)


# -- through the public API -----------------------------------------------------------


def _one_generation(*, state: object = None):  # type: ignore[no-untyped-def]
    yield 1


def test_bad_sync_value_fails_the_call(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """RESUMABLE_SYNC=maybe is an error at the call, not a silent 'on'."""
    monkeypatch.setenv("RESUMABLE_SYNC", "maybe")
    f = checkpointed(store=str(tmp_path), run_id="sync")(_one_generation)
    with pytest.raises(ConfigurationError, match=r"\$RESUMABLE_SYNC"):
        f()


def test_short_signing_key_in_the_environment_is_named_not_shown(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """A too-short $RESUMABLE_SIGNING_KEY names the variable and does not echo the key."""
    monkeypatch.setenv("RESUMABLE_SIGNING_KEY", "hunter2")
    f = checkpointed(store=str(tmp_path), run_id="key")(_one_generation)
    with pytest.raises(ConfigurationError, match=r"\$RESUMABLE_SIGNING_KEY") as info:
        f()
    assert "hunter2" not in str(info.value)


def test_exit_codes_false_means_plain_exit_status(tmp_path: Path) -> None:
    """RESUMABLE_EXIT_CODES=false turns the exit codes off, like 0 does."""
    script = ("import resumable\n"
              "raise resumable.ConfigurationError('configured wrongly on purpose')\n")
    env = {"PATH": "/usr/bin:/bin", "RESUMABLE_EXIT_CODES": "false",
           "PYTHONPATH": str(ROOT)}
    proc = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True,
                          text=True, cwd=tmp_path)
    assert "configured wrongly on purpose" in proc.stderr
    assert proc.returncode == 1


# Every variable a call may use, checked when the call starts (before the body runs or
# anything is written): a bad value found only when first used failed at a SIGTERM (the
# timeout watchdog died with a traceback), or at a store's first retry (exit 78 for what
# should have been a retried fault), or never (a run without either went on silently).
_AT_CALL = sorted(set(BAD) - {"RESUMABLE_RUN_ID", "RESUMABLE_SIGNING_KEY"})


@pytest.mark.parametrize("name", _AT_CALL)
def test_a_bad_value_fails_the_call_before_the_body_runs(
    name: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    entered = []

    def body(*, state: object = None):  # type: ignore[no-untyped-def]
        entered.append(1)
        yield 1

    monkeypatch.setenv(name, BAD[name][0])
    f = checkpointed(store=str(tmp_path / "store"), run_id="early")(body)
    with pytest.raises(ConfigurationError, match=re.escape("$" + name)):
        f()
    with pytest.raises(ConfigurationError, match=re.escape("$" + name)):
        f.iter()
    assert entered == []
    assert not (tmp_path / "store").exists() or not any((tmp_path / "store").rglob("*.*"))


@pytest.mark.parametrize("name, code", [("RESUMABLE_RETRY_DEADLINE", 78),
                                        ("RESUMABLE_TERM_TIMEOUT", 0)])
def test_the_cli_checks_the_setting_it_uses_at_once(name: str, code: int,
                                                    tmp_path: Path) -> None:
    """The CLI retries storage operations too: a bad deadline is a configuration fault at
    once (78). A library setting it does not use does not stop it (review 55)."""
    env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": str(ROOT), name: BAD[name][0]}
    proc = subprocess.run([sys.executable, "-m", "resumable", "ls", str(tmp_path)],
                          env=env, capture_output=True, text=True, cwd=tmp_path)
    assert proc.returncode == code, proc.stderr
    assert ("$" + name in proc.stderr) == (code == 78), proc.stderr
