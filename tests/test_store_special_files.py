"""What is at an object's name in a local store when it is not a file the library wrote:
a folder, a FIFO, a symbolic link loop, someone else's large file (review 37). Each is
named as damage where it is read; none hangs a command, none is read whole for nothing,
and none makes a whole listing fail."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from resumable import checkpointed
from resumable._errors import StoreError
from resumable.stores import open_store

ROOT = Path(__file__).resolve().parents[1]


def _gen(n: int, *, state: Any = None) -> Any:
    state = state or {"g": 0}
    while state["g"] < n:
        state["g"] += 1
        yield state
    return state["g"]


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "resumable", *args], capture_output=True,
                          text=True, cwd=ROOT, timeout=60)


def test_a_folder_at_an_objects_name_cannot_be_written_nor_taken_for_an_object(
        tmp_path: Path) -> None:
    """put_if_absent() took a folder at the name for an object someone else had written
    (False): a plan never enforced, a "zombie pod" blamed. Reading it finds no object,
    as on S3, where a "folder" is other keys."""
    store = open_store(str(tmp_path))
    (tmp_path / "exp" / "plan").mkdir(parents=True)
    for write in (lambda: store.put_if_absent("exp/plan", [b"x"]),
                  lambda: store.put("exp/plan", [b"x"])):
        with pytest.raises(StoreError, match=r"'exp/plan'.*folder.*move it away") as err:
            write()
        assert str(tmp_path) in str(err.value)
    assert store.get("exp/plan") is None and store.head("exp/plan", 10) is None


def test_a_fifo_at_an_objects_name_is_damage_and_never_waited_on(tmp_path: Path) -> None:
    store = open_store(str(tmp_path))
    (tmp_path / "r").mkdir()
    os.mkfifo(tmp_path / "r" / "result")
    with pytest.raises(StoreError, match=r"'r/result'.*not a regular file.*move it away"):
        store.get("r/result")
    with pytest.raises(StoreError, match="not a regular file"):
        store.head("r/result", 10)


def test_someone_elses_files_in_a_run_are_never_read(tmp_path: Path) -> None:
    """verify read a 400 MB model.pt whole to print "skip ... never read", and a FIFO of
    someone's hung verify and show for ever."""
    f = checkpointed(store=str(tmp_path), run_id="r")(_gen)
    f(3)
    os.mkfifo(tmp_path / "r" / "notes.fifo")
    (tmp_path / "r" / "model.pt").write_bytes(b"\0" * 1024)
    for command in (("verify",), ("show",), ("show", "--verify"), ("ls", "--check")):
        done = _cli(*command, str(tmp_path), *(("r",) if command[0] != "ls" else ()))
        assert done.returncode == 0, (command, done.stdout, done.stderr)
    assert "skip  notes.fifo" in _cli("verify", str(tmp_path), "r").stdout


def test_a_symlink_loop_in_one_run_does_not_fail_the_listing(tmp_path: Path) -> None:
    for run in ("r1", "r2"):
        checkpointed(store=str(tmp_path), run_id=run)(_gen)(2)
    os.symlink("loop-b", tmp_path / "r1" / "loop-a")
    os.symlink("loop-a", tmp_path / "r1" / "loop-b")
    done = _cli("ls", str(tmp_path))
    assert done.returncode == 0, done.stderr
    assert "r1" in done.stdout and "r2" in done.stdout
    assert _cli("verify", str(tmp_path), "r2").returncode == 0
