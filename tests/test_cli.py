"""The `resumable` console script, run as a user runs it: a subprocess on a real store."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Generator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from resumable import _format, checkpointed
from resumable import cli as resumable_cli
from resumable._decorator import _signing_key as library_signing_key
from resumable._errors import EXIT_CONFIG, EXIT_CORRUPT, EXIT_TAMPERED, ConfigurationError
from resumable.stores import Store, open_store
from resumable.stores import _registry as stores_registry
from resumable.stores._local import LocalStore
from resumable.stores._memory import MemoryStore
from tests.wrappers import DelegatingStore

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


def populate(store: Path | str, run_id: str, *, n: int = 5, fail_after: int | None = None,
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


def flip_last_byte(path: Path) -> None:
    """Damage one byte of an object's payload (its checksum no longer matches)."""
    data = bytearray(path.read_bytes())
    data[-1] ^= 0x01
    path.write_bytes(bytes(data))


def assert_one_line_error(proc: subprocess.CompletedProcess[str]) -> None:
    assert proc.returncode != 0
    assert "Traceback" not in proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    assert lines[0].startswith("resumable: error: ")


def test_console_script_is_installed() -> None:
    """The console script declared in pyproject sits next to the interpreter."""
    assert SCRIPT.exists()


def test_python_dash_m_resumable_is_the_same_cli(tmp_path: Path) -> None:
    """`python -m resumable` (review 28: there was no __main__)."""
    proc = subprocess.run([sys.executable, "-m", "resumable", "ls", str(tmp_path / "none")],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 66 and proc.stderr.startswith("resumable: error: "), proc.stderr


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


def test_ls_above_the_runs_ignores_folders_without_run_objects(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A stray folder (notes/readme.txt) next to a folder of runs is not a run: ls one
    level above still says there are no runs here and which folder holds them."""
    populate(tmp_path / "exp", "r1", n=2)
    (tmp_path / "notes").mkdir()
    (tmp_path / "notes" / "readme.txt").write_text("x")
    assert resumable_cli.main(["ls", str(tmp_path)]) == EXIT_CONFIG
    err = capsys.readouterr().err
    assert "did you mean" in err and "/exp" in err, err


def test_show_lists_objects_with_headers(store: Path) -> None:
    """show --json gives each object's kind, step and serializer; verified is null
    (only headers were read) unless --verify downloads and verifies every object."""
    proc = cli("show", str(store), "done", "--json")
    assert proc.returncode == 0, proc.stderr
    objects = {o["name"]: o for o in json.loads(proc.stdout)["objects"]}
    ckpts = [o for o in objects.values() if o["kind"] == "ckpt"]
    steps = [o["step"] for o in ckpts]
    assert steps == sorted(steps) and steps[-1] == 5
    assert all(o["serializer"] == "pickle" and not o["signed"] for o in ckpts)
    assert all(o["verified"] is None and o["problem"] is None for o in objects.values())
    assert objects["result"]["kind"] == "result"
    verified = json.loads(cli("show", str(store), "done", "--json", "--verify").stdout)
    assert all(o["verified"] is True for o in verified["objects"])
    assert [o["bytes"] for o in verified["objects"]] == [o["bytes"] for o in objects.values()]


def test_show_table_names_what_it_checked(store: Path) -> None:
    """The last column is HEADER without --verify and VERIFIED with it."""
    table = cli("show", str(store), "done")
    assert table.returncode == 0, table.stderr
    header, *rows = table.stdout.split("\n\n")[0].splitlines()[1:]  # then the attempts
    assert header.split()[-1] == "HEADER" and "VERIFIED" not in header
    assert "ckpt-00000001-000000000005" in table.stdout
    assert rows and all(row.split()[-1] == "ok" for row in rows)
    full = cli("show", str(store), "done", "--verify")
    assert full.returncode == 0, full.stderr
    header, *rows = full.stdout.split("\n\n")[0].splitlines()[1:]
    assert header.split()[-1] == "VERIFIED" and "HEADER" not in header
    assert rows and all(row.split()[-1] == "yes" for row in rows)


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
    flip_last_byte(victim)
    proc = cli("verify", str(store), "done")
    assert proc.returncode == EXIT_CORRUPT
    failed = [line for line in proc.stdout.splitlines() if line.startswith("FAIL")]
    assert len(failed) == 1 and victim.name in failed[0] and "checksum" in failed[0]
    assert victim.name in proc.stderr and "Traceback" not in proc.stderr
    shown = json.loads(cli("show", str(store), "done", "--json", "--verify").stdout)["objects"]
    assert [o["name"] for o in shown if not o["verified"]] == [victim.name]
    # Without --verify only headers are read: payload damage is not seen, and not claimed.
    headers = json.loads(cli("show", str(store), "done", "--json").stdout)["objects"]
    assert all(o["verified"] is None and o["problem"] is None for o in headers)


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


def test_rm_with_one_argument_takes_it_as_the_run_id_as_show_and_verify_do(
        store: Path) -> None:
    """`resumable rm [STORE] RUN_ID` (DESIGN.md, README): with STORE left out, the one
    argument is the run, in $RESUMABLE_STORE. It was read as the STORE (both optional
    since --completed), so the documented `resumable rm RUN_ID --yes` failed with
    "RUN_ID is missing"."""
    shown = cli("show", "half", store=store)
    assert shown.returncode == 0, shown.stderr
    refused = cli("rm", "half", store=store)  # no terminal, no --yes: asks, refuses
    assert_one_line_error(refused)
    assert "--yes" in refused.stderr, refused.stderr
    assert (store / "half").exists()
    proc = cli("rm", "half", "--yes", store=store)
    assert proc.returncode == 0, proc.stderr
    assert not (store / "half").exists() and (store / "done").exists()
    # A lone STORE with the run forgotten is still told so, and deletes nothing.
    forgot = cli("rm", str(store), "--yes", store=store)
    assert_one_line_error(forgot)
    assert "RUN_ID is missing" in forgot.stderr and "done" in forgot.stderr, forgot.stderr
    assert (store / "done").exists()


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


# -- ls and show read headers, not whole objects ------------------------------------

MiB = 1024 * 1024


class CountingStore(DelegatingStore):
    """A local store that counts the bytes handed out by get() and head()."""

    def __init__(self, inner: Store) -> None:
        super().__init__(inner)
        self.got = 0
        self.headed = 0
        self.head_calls = 0

    def get(self, key: str) -> bytes | bytearray | memoryview | None:
        data = self.inner.get(key)
        self.got += 0 if data is None else memoryview(data).nbytes
        return data

    def head(self, key: str, n: int) -> tuple[bytes, int] | None:
        found = self.inner.head(key, n)  # type: ignore[attr-defined]
        self.head_calls += 1
        self.headed += 0 if found is None else len(found[0])
        return found  # type: ignore[no-any-return]


class GetOnlyStore(CountingStore):
    """A third-party store without the optional head(): the CLI falls back to get()."""

    head = None  # type: ignore[assignment]


def big_states(n: int, *, state: np.ndarray | None = None) -> Generator[np.ndarray, None, int]:
    """Each state is 4 MiB of float64, so each checkpoint is a multi-MiB object."""
    step = 0 if state is None else int(state[0])
    while step < n:
        step += 1
        yield np.full(512 * 1024, step, dtype=np.float64)
    return step


@pytest.fixture
def counted(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> list[CountingStore]:
    """counting://x and getonly://x open the local store at tmp_path/store, counted.

    The run 'big' there has checkpoints of 4 MiB each (one to three: uploads coalesce).
    The list collects the stores the CLI opened, so a test can read their counters.
    """
    root = tmp_path / "store"
    checkpointed(store=str(root), run_id="big", keep=None, every=1)(big_states)(3)
    opened: list[CountingStore] = []
    for scheme, cls in (("counting", CountingStore), ("getonly", GetOnlyStore)):
        def open_(url: str, cls: type[CountingStore] = cls) -> CountingStore:
            store = cls(LocalStore(root))
            opened.append(store)
            return store

        monkeypatch.setitem(stores_registry, scheme, open_)  # removed again at teardown
    return opened


def run_main(capsys: pytest.CaptureFixture[str], *argv: str) -> str:
    code = resumable_cli.main(list(argv))
    out = capsys.readouterr()
    assert code == 0, out.err
    return out.out


def test_ls_and_show_read_only_headers(
    counted: list[CountingStore], capsys: pytest.CaptureFixture[str]
) -> None:
    """ls and show read a 64 KiB head of each object, not the 4 MiB checkpoints;
    show --verify and verify download every object in full."""
    out = run_main(capsys, "ls", "counting://x")
    ls_store = counted[-1]
    assert "big" in out and "4.0 MiB" in out
    # The newest checkpoint's head, and the result's (is it the newest attempt's?).
    assert ls_store.got == 0 and 0 < ls_store.headed <= 2 * resumable_cli.HEAD_BYTES

    out = run_main(capsys, "show", "counting://x", "big")
    show_store = counted[-1]
    names = show_store.list("big/")
    assert show_store.got == 0 and show_store.head_calls == len(names)
    assert show_store.headed <= len(names) * resumable_cli.HEAD_BYTES
    assert out.splitlines()[1].split()[-1] == "HEADER"

    everything = sum(len(show_store.inner.get(k) or b"") for k in names)
    assert everything > 4 * MiB > 16 * show_store.headed
    for argv in (["show", "counting://x", "big", "--verify"], ["verify", "counting://x", "big"]):
        run_main(capsys, *argv)
        full = counted[-1]
        assert full.got == everything and full.head_calls == 0, argv


def test_ls_and_show_fall_back_to_get_without_head(
    counted: list[CountingStore], capsys: pytest.CaptureFixture[str]
) -> None:
    """A store without head() gives the same output, through whole gets."""
    expected_ls = run_main(capsys, "ls", "counting://x", "--json")
    expected_show = run_main(capsys, "show", "counting://x", "big", "--json")
    assert run_main(capsys, "ls", "getonly://x", "--json") == expected_ls.replace(
        "counting://x", "getonly://x")
    assert counted[-1].got >= 4 * MiB  # the newest checkpoint, in full
    assert run_main(capsys, "show", "getonly://x", "big", "--json") == expected_show.replace(
        "counting://x", "getonly://x")


def test_a_header_longer_than_the_first_read_is_read_in_full(memory_url: str) -> None:
    """An object with more frames than fit in HEAD_BYTES: a second head() reads the rest."""
    name = "run/ckpt-00000001-000000000001"
    frames = [b"x"] * 9000  # 8 bytes per frame in the header: ~72 KiB
    payload = _format.encode(frames, kind="ckpt", serializer="pickle", step=1, epoch=1,
                             created=1.0, name=name)
    assert memoryview(payload[0]).nbytes > resumable_cli.HEAD_BYTES
    store = CountingStore(MemoryStore(memory_url.split("://")[1]))
    store.put(name, payload)
    info = resumable_cli._inspect(store, "run", name.split("/")[1], None, full=False)
    assert info.problem is None and info.step == 1 and info.verified is None
    assert info.bytes == memoryview(payload[0]).nbytes + 9000 * 64  # frames padded to 64
    assert store.got == 0 and store.head_calls == 2


def test_show_reports_a_damaged_header_without_verify(store: Path) -> None:
    """A truncated object fails the header check (its lengths no longer add up)."""
    victim = store / "done" / "ckpt-00000001-000000000005"
    victim.write_bytes(victim.read_bytes()[:-1])
    objects = json.loads(cli("show", str(store), "done", "--json").stdout)["objects"]
    bad = [o for o in objects if o["problem"]]
    assert [o["name"] for o in bad] == [victim.name] and bad[0]["verified"] is False
    assert "truncated" in bad[0]["problem"]
    row = [line for line in cli("show", str(store), "done").stdout.splitlines()
           if line.startswith(victim.name)]
    assert "NO: truncated" in row[0]


# -- the signing key: exactly the library's rules -----------------------------------


@pytest.mark.parametrize("value", ["k" * 16, "k" * 64, "ключ" * 4, "k" * 15, "short", "é" * 7])
def test_cli_accepts_exactly_the_keys_the_library_accepts(
    value: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The CLI parses $NAME with the decorator's function: same keys, same error."""
    monkeypatch.setenv("SOME_KEY", value)
    try:
        expected: bytes | None = library_signing_key(value)
    except ConfigurationError as err:
        with pytest.raises(ConfigurationError) as info:
            resumable_cli._signing_key("SOME_KEY")
        assert str(info.value) == str(err)
    else:
        assert resumable_cli._signing_key("SOME_KEY") == expected


def test_cli_signing_key_unset_or_empty_is_no_key(monkeypatch: pytest.MonkeyPatch) -> None:
    """An unset or empty variable is no key; another variable is never consulted."""
    monkeypatch.setenv("RESUMABLE_SIGNING_KEY", KEY)
    monkeypatch.delenv("OLD_KEY", raising=False)
    assert resumable_cli._signing_key("OLD_KEY") is None
    monkeypatch.setenv("OLD_KEY", "")
    assert resumable_cli._signing_key("OLD_KEY") is None
    assert resumable_cli._signing_key("RESUMABLE_SIGNING_KEY") == KEY.encode()


def test_verify_refuses_a_short_key_in_one_line(store: Path) -> None:
    """A key under 16 bytes is a configuration error (exit 78), not a silent check."""
    proc = cli("verify", str(store), "done", key="k" * 15)
    assert_one_line_error(proc)
    assert proc.returncode == EXIT_CONFIG and "at least 16 bytes" in proc.stderr


@pytest.mark.parametrize("started", [1e30, float("inf"), -1e20])
def test_show_marks_a_call_record_with_an_impossible_start_time_unreadable(
    tmp_path: Path, started: float, capsys: pytest.CaptureFixture[str]
) -> None:
    """A checksum-valid call record (anyone can write one in an unsigned run) with a
    start time no datetime holds is one unreadable row, not a failed `show`."""
    populate(tmp_path, "r1", n=2)
    record = {"epoch": 9, "started": started, "resumed_from_step": 0, "shown": {}, "code": ""}
    frames = _format.encode([json.dumps(record).encode()], kind="call", serializer="raw",
                            created=1.0, name="r1/call-00000009")
    (tmp_path / "r1" / "call-00000009").write_bytes(b"".join(bytes(f) for f in frames))
    assert resumable_cli.main(["show", str(tmp_path), "r1"]) == 0
    assert "call-00000009" in capsys.readouterr().out
    assert resumable_cli.main(["show", "--json", str(tmp_path), "r1"]) == 0
    history = json.loads(capsys.readouterr().out)["history"]
    assert [h["object"] for h in history if h.get("problem")] == ["call-00000009"]


def test_rm_show_and_verify_take_only_a_run_never_a_folder_of_runs_or_foreign_data(
    any_store_url: str
) -> None:
    """`rm STORE exp` where exp is a folder of runs (the folder `ls STORE` itself suggests)
    or a folder of someone else's files is not a run: rm refuses (exit 66) naming the
    folder and what to do, and deletes nothing; show and verify refuse the same way."""
    store = open_store(any_store_url)
    populate(f"{any_store_url}/exp", "r1", n=2)
    populate(f"{any_store_url}/exp", "r2", n=2)
    store.put("datasets/train.csv", [b"a,b\n1,2\n"])
    before = sorted(store.list(""))
    assert len(before) > 10
    for name, hint in (("exp", f"resumable ls {any_store_url}/exp"),
                       ("datasets", "not written by resumable")):
        for args in (["rm", any_store_url, name, "--yes"], ["show", any_store_url, name],
                     ["verify", any_store_url, name]):
            proc = cli(*args)
            assert_one_line_error(proc)
            assert proc.returncode == resumable_cli.EXIT_NOT_FOUND, proc.stderr
            assert f"{name!r}" in proc.stderr and any_store_url in proc.stderr, proc.stderr
            assert hint in proc.stderr, proc.stderr
            assert sorted(store.list("")) == before, args
    # A real run one level down is still removed, its folder's neighbours untouched.
    proc = cli("rm", f"{any_store_url}/exp", "r1", "--yes")
    assert proc.returncode == 0, proc.stderr
    assert not store.list("exp/r1/") and store.list("exp/r2/") and store.list("datasets/")


def test_rm_of_a_run_leaves_keys_in_folders_below_it(tmp_path: Path) -> None:
    """A run's objects are the ones directly in its folder: rm (and rm --completed) never
    reach into a folder below it, which holds no object of the run."""
    for i, args in enumerate((["rm", "{store}", "done", "--yes"],
                              ["rm", "--completed", "{store}", "--yes"])):
        root = tmp_path / str(i)
        populate(root, "done", n=2)
        populate(root / "done" / "nested", "inner", n=2)
        folder = root / "done" / "nested" / "inner"
        inner = sorted(p.name for p in folder.iterdir())
        assert "result" in inner
        proc = cli(*[a.format(store=root) for a in args])
        assert proc.returncode == 0, proc.stderr
        assert not (root / "done" / "result").exists()
        left = sorted(p.name for p in folder.iterdir()) if folder.exists() else []
        assert left == inner, args


@pytest.mark.parametrize("command", ["show", "verify", "rm"])
def test_a_run_folder_given_as_the_store_names_the_store_and_run(
    store: Path, command: str
) -> None:
    """`resumable show STORE/done` (the run's folder, no RUN_ID): the hint is the command
    with the store and the run id split, not `ls` of the run folder, which lists no runs."""
    proc = cli(command, str(store / "done"))
    assert_one_line_error(proc)
    assert proc.returncode == EXIT_CONFIG
    assert f"`resumable {command} {store} done`" in proc.stderr, proc.stderr
    assert (store / "done" / "result").exists()


def test_show_verify_fails_as_verify_does_when_a_checkpoint_fails(store: Path) -> None:
    """`show --verify` verifies "as `verify` does" (its help): a checkpoint that fails
    makes it exit as `verify` exits, after the table, with the failing object named on
    stderr; a script that runs it learns of the damage. Without --verify nothing is
    downloaded, so nothing is claimed and it exits 0."""
    victim = store / "done" / "ckpt-00000001-000000000005"
    flip_last_byte(victim)
    for extra in ([], ["--json"]):
        proc = cli("show", str(store), "done", "--verify", *extra)
        assert proc.returncode == EXIT_CORRUPT, (extra, proc.stdout, proc.stderr)
        assert victim.name in proc.stderr and "Traceback" not in proc.stderr
        assert victim.name in proc.stdout  # the table (or JSON) is still printed
    assert cli("show", str(store), "done").returncode == 0
    assert cli("show", str(store), "half", "--verify").returncode == 0


def test_verify_reports_a_foreign_file_in_a_run_without_failing(store: Path) -> None:
    """`verify` fails when an object of the run fails verification (the contract: any
    checkpoint). A file someone dropped into the run's folder is no object of the run:
    the library never reads it. It is named (skipped), and verify still exits 0; a
    damaged checkpoint beside it still fails the run."""
    (store / "done" / "notes.txt").write_text("what I changed in this run\n")
    proc = cli("verify", str(store), "done")
    assert proc.returncode == 0, (proc.stdout, proc.stderr)
    skipped = [line for line in proc.stdout.splitlines() if "notes.txt" in line]
    assert len(skipped) == 1 and skipped[0].startswith("skip") and "not" in skipped[0]
    victim = store / "done" / "ckpt-00000001-000000000005"
    flip_last_byte(victim)
    proc = cli("verify", str(store), "done")
    assert proc.returncode == EXIT_CORRUPT
    assert victim.name in proc.stderr and "notes.txt" not in proc.stderr


def test_files_named_like_attempt_records_do_not_make_a_folder_a_run(store: Path) -> None:
    """The library names its attempt and call records ``epoch-<8 digits>`` and
    ``call-<8 digits>``; a folder of someone's model snapshots (``epoch-10.pt``) or logs
    (``call-graph.txt``) is no run: `ls` does not list it, `rm` refuses it (exit 66) and
    deletes nothing, and in a real run's folder such a file is skipped by `verify`."""
    models = store / "models"
    models.mkdir()
    for name in ("epoch-10.pt", "epoch-20.pt", "call-graph.txt", "config.yaml"):
        (models / name).write_bytes(b"not resumable's\n")
    proc = cli("ls", str(store), "--json")
    assert proc.returncode == 0, proc.stderr
    assert "models" not in proc.stdout, proc.stdout
    proc = cli("rm", str(store), "models", "--yes")
    assert proc.returncode == resumable_cli.EXIT_NOT_FOUND, (proc.stdout, proc.stderr)
    assert sorted(p.name for p in models.iterdir()) == [
        "call-graph.txt", "config.yaml", "epoch-10.pt", "epoch-20.pt"]
    (store / "done" / "epoch-notes.txt").write_bytes(b"when I restarted it\n")
    proc = cli("verify", str(store), "done")
    assert proc.returncode == 0, (proc.stdout, proc.stderr)
    assert "skip  epoch-notes.txt" in proc.stdout, proc.stdout
