"""Review 100 (the CLI and the local store, hostile pass): `rm --completed` must never take
a run under extension or with a damaged result for completed; `verify` of a live run is
not damage when retention deletes what it listed; a user's `.tmp-*` file is theirs; a
folder that cannot be read is an error or a named warning, never silently left out."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from resumable import checkpointed
from resumable import cli as cli_module
from resumable.cli import main
from resumable.stores import open_store
from tests.wrappers import DelegatingStore

ROOT = Path(__file__).resolve().parents[1]
KEY_A = "a1" * 32
KEY_B = "b2" * 32


class Stop(Exception):
    """The pod dies mid-run (the body raises after a saved generation)."""


def _walked(store: Path | str, run_id: str, signing_key: str | None = None, steps: int = 4,
            stop: int = 0) -> None:
    """Run ``run_id`` (a counter) for ``steps`` generations, every checkpoint kept; with
    ``stop``, the body raises ``Stop`` after that generation (the pod dies there)."""
    @checkpointed(every="generation", store=str(store), run_id=run_id, keep=None,
                  signing_key=signing_key)
    def walk(steps: int, *, state: dict[str, Any] | None = None) -> Iterator[Any]:
        state = state or {"step": 0}
        while state["step"] < steps:
            state["step"] += 1
            yield state
            if state["step"] == stop:
                raise Stop
        return state["step"]

    if stop:
        with pytest.raises(Stop):
            walk(steps)
    else:
        assert walk(steps) == steps


def _extended(store: Path, signing_key: str | None) -> None:
    """Run "exp" completes at 10 generations, then is called with 100 (``ignore=``) and
    stops after 60: the newer attempt is extending the completed run."""
    stop_at = [0]

    @checkpointed(every="generation", store=str(store), run_id="exp",
                  ignore=["generations"], signing_key=signing_key)
    def evolve(generations: int, *, state: dict[str, Any] | None = None) -> Iterator[Any]:
        if state is None:
            state = {"generation": 0, "x": 0.0}
        while state["generation"] < generations:
            state["x"] += 0.5
            state["generation"] += 1
            yield state
            if state["generation"] == stop_at[0]:
                raise Stop
        return state["x"]

    assert evolve(10) == 5.0
    stop_at[0] = 60
    with pytest.raises(Stop):
        evolve(100)


@pytest.mark.parametrize("signed_with, shell_key", [
    (None, KEY_B),  # an unsigned run, another project's key in the shell
    (KEY_A, KEY_B),  # key rotation: signed with the old key, the shell holds the new one
])
def test_rm_completed_keeps_a_run_under_extension_whatever_the_key(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
        signed_with: str | None, shell_key: str) -> None:
    store = tmp_path / "store"
    monkeypatch.delenv("RESUMABLE_SIGNING_KEY", raising=False)
    _extended(store, signed_with)
    newest = max(p.name for p in (store / "exp").iterdir() if p.name.startswith("ckpt-"))
    monkeypatch.setenv("RESUMABLE_SIGNING_KEY", shell_key)
    capsys.readouterr()
    assert main(["rm", "--completed", str(store), "--yes"]) == 0
    assert "no completed runs" in capsys.readouterr().out
    assert (store / "exp" / newest).exists(), "generation 60 of the extension was deleted"
    assert main(["ls", str(store)]) == 0
    row = next(line for line in capsys.readouterr().out.splitlines() if line.startswith("exp"))
    assert " no " in f" {row} ", row
    main(["show", str(store), "exp"])
    out = capsys.readouterr().out
    assert "complete: no: attempt 2 started after the result" in out, out


def test_rm_completed_skips_a_run_whose_result_fails_verification(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.delenv("RESUMABLE_SIGNING_KEY", raising=False)
    store = tmp_path / "store"
    _walked(store, "walk", steps=6)
    result = store / "walk" / "result"
    data = bytearray(result.read_bytes())
    data[-1] ^= 1  # one bit of the payload: the header still reads
    result.write_bytes(bytes(data))
    before = sorted(p.name for p in (store / "walk").iterdir())
    assert main(["rm", "--completed", str(store), "--yes"]) == 0
    captured = capsys.readouterr()
    assert "skipping walk: its result record cannot be read" in captured.err, captured.err
    assert "checksum mismatch" in captured.err
    assert sorted(p.name for p in (store / "walk").iterdir()) == before


def test_a_users_tmp_file_is_kept_and_listed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                              capsys: pytest.CaptureFixture[str]) -> None:
    """Only the store's own temp names (`.tmp-<object>-<32 hex>`) are leftovers."""
    monkeypatch.delenv("RESUMABLE_SIGNING_KEY", raising=False)
    store = tmp_path / "store"
    _walked(store, "t", steps=8, stop=3)
    notes = store / "t" / ".tmp-notes.txt"
    notes.write_text("my notes")
    os.utime(notes, (1, 1))  # old, as a leftover of a killed save would be
    leftover = store / "t" / (".tmp-ckpt-00000001-000000000004-" + "0" * 32)
    leftover.write_bytes(b"half a checkpoint")
    os.utime(leftover, (1, 1))
    assert main(["show", str(store), "t"]) == 0
    assert ".tmp-notes.txt" in capsys.readouterr().out
    _walked(store, "t", steps=8)  # the next attempt claims the run, and clears leftovers
    assert notes.read_text() == "my notes"
    assert not leftover.exists()
    assert main(["rm", str(store), "t", "--yes"]) == 0
    assert ".tmp-notes.txt" in capsys.readouterr().out  # named as kept
    assert notes.read_text() == "my notes"


class _RetentionAfterListing(DelegatingStore):
    """Deletes the run's oldest checkpoint right after a listing returns it, as the
    retention of the live run does between `verify`'s listing and its reads."""

    done = False

    def list(self, prefix: str, start_after: str | None = None) -> list[str]:
        names = self.inner.list(prefix, start_after)
        ckpts = sorted(n for n in names if "/ckpt-" in n)
        if ckpts and not self.done:  # (once per command: its second listing sees it gone)
            self.done = True
            self.inner.delete(ckpts[0])
        return names


def test_verify_of_a_live_run_is_not_failed_by_retention(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.delenv("RESUMABLE_SIGNING_KEY", raising=False)
    store = tmp_path / "store"
    _walked(store, "live", steps=5, stop=2)  # (two calls: two checkpoints at least, each
    _walked(store, "live", steps=5)  # call's last state saved as it ends)
    ckpts = sum(1 for p in (store / "live").iterdir() if p.name.startswith("ckpt-"))
    assert ckpts >= 2
    real_open = cli_module.open_store
    monkeypatch.setattr(cli_module, "open_store",
                        lambda url: _RetentionAfterListing(real_open(url)))
    assert main(["verify", str(store), "live"]) == 0
    out = capsys.readouterr().out
    assert "gone  ckpt-" in out and "FAIL" not in out, out
    assert f"{ckpts - 1} checkpoint(s) (1 more deleted while verifying)" in out, out
    assert main(["show", "--verify", str(store), "live"]) == 0
    assert "gone: deleted after the listing" in capsys.readouterr().out


def _unprivileged() -> list[str] | None:
    """A command prefix under which permission bits apply: none for a normal user; for
    root, setpriv without the capabilities that override them; None if neither."""
    if os.geteuid() != 0:
        return []
    setpriv = shutil.which("setpriv")
    if setpriv is None:
        return None
    probe = subprocess.run([setpriv, "--bounding-set", "-dac_override,-dac_read_search",
                            "true"], capture_output=True)
    return None if probe.returncode else [
        setpriv, "--bounding-set", "-dac_override,-dac_read_search,-fowner"]


def test_an_unreadable_folder_is_named_not_left_out(tmp_path: Path,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    prefix = _unprivileged()
    if prefix is None:
        pytest.skip("running as root without setpriv: permission bits cannot be tested")
    monkeypatch.delenv("RESUMABLE_SIGNING_KEY", raising=False)
    store = tmp_path / "store"
    for run_id in ("runA", "runB"):
        _walked(store, run_id, steps=3)
    env = dict(os.environ, PYTHONPATH=str(ROOT))

    def cli(*argv: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([*prefix, sys.executable, "-m", "resumable.cli", *argv],
                              capture_output=True, text=True, env=env, timeout=120)

    os.chmod(store / "runB", 0)
    try:
        listed = cli("ls", str(store))
        assert listed.returncode == 0, listed.stderr
        assert "runA" in listed.stdout
        assert "could not list the folder 'runB'" in listed.stderr, listed.stderr
        shown = cli("show", str(store), "runB")
        assert shown.returncode == 74, (shown.returncode, shown.stdout, shown.stderr)
        assert "Permission denied" in shown.stderr and "runB" in shown.stderr
        os.chmod(store / "runB", 0o755)
        os.chmod(store, 0o311)  # the store's own folder: searchable, not readable
        listed = cli("ls", str(store))
        assert listed.returncode == 74, (listed.returncode, listed.stdout, listed.stderr)
        assert "Permission denied" in listed.stderr
        assert "check the folder's owner and mode" in listed.stderr
        assert open_store(str(store)).list("runA/")  # (the store itself is intact)
    finally:
        os.chmod(store, 0o755)
        os.chmod(store / "runB", 0o755)


# -- review 101 (of the fixes above) ------------------------------------------------------


def test_verify_fails_a_result_that_is_listed_but_cannot_be_read(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    """A dangling symbolic link is listed and reads as missing: not retention (which
    never deletes a result), so `verify` fails, as before review 100's fix."""
    monkeypatch.delenv("RESUMABLE_SIGNING_KEY", raising=False)
    store = tmp_path / "store"
    _walked(store, "exp")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (store / "exp" / "result").rename(elsewhere / "result")
    (store / "exp" / "result").symlink_to(elsewhere / "result")
    (elsewhere / "result").unlink()
    assert main(["verify", str(store), "exp"]) == 65
    out = capsys.readouterr().out
    assert "FAIL  result: listed, but cannot be read" in out, out
    assert main(["show", "--verify", str(store), "exp"]) == 65


@pytest.mark.parametrize("stray", ["unsigned, same run id", "signed, another run's"])
def test_a_stray_newer_attempt_record_does_not_keep_a_run_from_completed(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
        stray: str) -> None:
    """A signed run completed by attempt 1, the right key in the shell, and an epoch-2
    record that is no record of this run's (unsigned in a signed run, or copied from
    another run signed with the same key): it fences nothing, as for the library."""
    monkeypatch.delenv("RESUMABLE_SIGNING_KEY", raising=False)
    store, source = tmp_path / "store", tmp_path / "source"
    _walked(store, "exp", KEY_A)
    if stray.startswith("unsigned"):
        _walked(source, "exp", None, steps=4, stop=2)
        _walked(source, "exp", None, steps=4, stop=3)
        copied = source / "exp" / "epoch-00000002"
    else:
        _walked(source, "other", KEY_A, steps=4, stop=2)
        _walked(source, "other", KEY_A, steps=4, stop=3)
        copied = source / "other" / "epoch-00000002"
    shutil.copy(copied, store / "exp" / "epoch-00000002")
    monkeypatch.setenv("RESUMABLE_SIGNING_KEY", KEY_A)
    assert main(["ls", str(store)]) == 0
    row = next(line for line in capsys.readouterr().out.splitlines() if line.startswith("exp"))
    assert " yes " in f" {row} ", row
    assert main(["rm", "--completed", str(store), "--yes"]) == 0
    assert "deleted 1 completed run(s)" in capsys.readouterr().out
    assert not (store / "exp" / "result").exists()


class _WithHead(DelegatingStore):
    """A DelegatingStore whose header reads (``head``) go to the local store's, so that
    only whole reads pass through ``get``."""

    def head(self, key: str, n: int) -> tuple[bytes, int] | None:
        return self.inner.head(key, n)  # type: ignore[attr-defined, no-any-return]


class _CountResultReads(_WithHead):
    """Counts whole reads of results."""

    reads = 0

    def get(self, key: str) -> bytes | bytearray | memoryview | None:
        if key.endswith("/result"):
            type(self).reads += 1
        return self.inner.get(key)


def test_rm_completed_reads_no_result_whole_before_it_is_confirmed(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The whole-result check runs just before a run is deleted: a refused command (no
    --yes, no terminal) reads none (review 101: a 200 MiB result was held for nothing)."""
    monkeypatch.delenv("RESUMABLE_SIGNING_KEY", raising=False)
    store = tmp_path / "store"
    _walked(store, "a")
    _walked(store, "b")
    real_open = cli_module.open_store
    monkeypatch.setattr(cli_module, "open_store",
                        lambda url: _CountResultReads(real_open(url)))
    with open(os.devnull) as devnull:
        monkeypatch.setattr(sys, "stdin", devnull)
        assert main(["rm", "--completed", str(store)]) != 0
    assert _CountResultReads.reads == 0
    assert main(["rm", "--completed", str(store), "--yes"]) == 0
    assert _CountResultReads.reads == 2
    assert sorted(p.name for p in store.iterdir()) == []


def test_an_s3_folder_marker_is_no_object_of_the_run(
        moto_server: Any, s3_env: Any, capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    """`<run_id>/`, the empty object the AWS console makes for a folder, was a blank row
    in `show`, a 'skip  :' line in `verify` and a nameless kept file in `rm` (review 100)."""
    monkeypatch.delenv("RESUMABLE_SIGNING_KEY", raising=False)
    s3_env(moto_server)
    url = moto_server.new_store_url()
    _walked(url, "run", steps=3)
    open_store(url).put("run/", [b""])
    assert main(["show", url, "run"]) == 0
    out = capsys.readouterr().out
    assert not [line for line in out.splitlines() if line.startswith(" ")], out
    assert main(["verify", url, "run"]) == 0
    assert "skip" not in capsys.readouterr().out
    assert main(["rm", url, "run", "--yes"]) == 0
    assert "keeping" not in capsys.readouterr().out


def test_a_run_folder_linked_from_another_disk_is_listed_and_removed(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A run folder moved to another disk and linked back (the library resumes it) is in
    `ls` and is taken by `rm --completed`, which deletes its files, not the disk's other
    files; a dataset linked into the store is looked at one level deep only, and a link
    loop ends (review 100's "left")."""
    store, disk = tmp_path / "store", tmp_path / "disk"
    _walked(store, "moved")
    _walked(store, "here")
    shutil.move(str(store / "moved"), disk / "moved")  # (makes disk/)
    (store / "moved").symlink_to(disk / "moved", target_is_directory=True)
    (disk / "keep.txt").write_text("someone else's")
    dataset = tmp_path / "dataset" / "deep" / "deeper"
    dataset.mkdir(parents=True)
    (dataset / "x.bin").write_bytes(b"0")
    (store / "data").symlink_to(tmp_path / "dataset", target_is_directory=True)
    (store / "loop").symlink_to(store, target_is_directory=True)
    capsys.readouterr()
    assert main(["ls", str(store)]) == 0
    out = capsys.readouterr().out
    assert "moved" in out and "here" in out and "deeper" not in out
    assert main(["rm", "--completed", str(store), "--yes"]) == 0
    assert sorted(p.name for p in disk.iterdir()) == ["keep.txt", "moved"]
    assert list((disk / "moved").iterdir()) == []  # its files went, the folder stays
    assert (dataset / "x.bin").exists()
    assert not (store / "here").exists()


class _ResultGoesBeforeItsWholeRead(_WithHead):
    """Another `rm` (or f.reset) deletes run "a"'s result between the header read and
    the whole read."""

    def get(self, key: str) -> bytes | bytearray | memoryview | None:
        if key == "a/result":
            self.inner.delete(key)
        return self.inner.get(key)


def test_rm_completed_says_a_result_deleted_meanwhile_was_deleted(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    """Review 101's "left": the skip line said "cannot be read", which is true but not
    why; it now says the result was deleted since the listing, and that nothing of the
    run was deleted by this command."""
    monkeypatch.delenv("RESUMABLE_SIGNING_KEY", raising=False)
    store = tmp_path / "store"
    _walked(store, "a")
    _walked(store, "b")
    real_open = cli_module.open_store
    monkeypatch.setattr(cli_module, "open_store",
                        lambda url: _ResultGoesBeforeItsWholeRead(real_open(url)))
    capsys.readouterr()
    assert main(["rm", "--completed", str(store), "--yes"]) == 0
    err = capsys.readouterr().err
    assert "skipping a: its result was deleted since the listing" in err, err
    assert "left as it is" in err, err
    assert sorted(p.name for p in store.iterdir()) == ["a"]
