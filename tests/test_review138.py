"""Review 138 (of b8afff9): damaged and foreign objects, bad configuration.

- A '#' in a store URL (or a '?' in a file:// or memory:// one) was dropped: two stores
  were one folder, and a second experiment returned the first one's stored result.
- A damaged result record's error advised `resumable rm`, which deletes every
  checkpoint of the run: all its generations were computed again.
- A run with checkpoints but no identity record (deleted, as a damaged record's error
  advises, or lost) was taken over by a call with other arguments, without a word.
- RESUMABLE_UPLOAD_DUTY=1e-15 was accepted; the upload thread's paced wait overflowed,
  the thread died, and the process hung at its final flush, SIGTERM or not.
- RESUMABLE_TERM_TIMEOUT=inf (allowed: "no limit") made the SIGTERM watchdog's waits
  overflow: tracebacks in three library threads, and the watchdog gone.
- `ls --check` and `show` called a checkpoint copied in from another run "ok" (its
  header names the other run); `verify` and a resume refused it.
- A custom serializer's name over 255 bytes passed decoration and failed at the first
  save, after the first generation ran; a dumps() returning str failed with a bare
  TypeError naming neither the serializer nor the run.
- A percent-encoded NUL in a file:// URL gave a bare ValueError (`ls`: exit 1, not 78).
"""

from __future__ import annotations

import logging
import pickle
import shutil
import signal
import subprocess
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from resumable import (
    CheckpointCorruptError,
    ConfigurationError,
    SerializationError,
    checkpointed,
)
from resumable.stores import open_store

from .signal_children import ENV, finish, wait_for
from .test_cli import cli, count_up

if TYPE_CHECKING:
    from .s3servers import S3Server


def _counter(store: str, label: str, starts: list[Any] | None = None) -> Any:
    @checkpointed(store=store, run_id="job")
    def work(n: int, *, state: Any = None) -> Any:
        if starts is not None:
            starts.append(state)
        state = state or {"who": label, "i": 0}
        while state["i"] < n:
            state = {**state, "i": state["i"] + 1}
            yield state
        return state["who"]

    return work


@pytest.mark.parametrize("url", [
    "file:///data/exp#1", "file:///data/exp#", "file:///data/exp?3", "memory://exp#1",
    "memory://exp?x=1", "s3://my-bucket/exp#1",
])
def test_a_url_part_that_names_no_store_is_refused(url: str) -> None:
    with pytest.raises(ConfigurationError, match="names no store") as err:
        open_store(url)
    assert url in str(err.value)
    # (review 139: %23 and a plain path are advice for a folder only; an s3 prefix or a
    # memory store's name is not percent-decoded)
    assert ("%23" in str(err.value)) == url.startswith("file:")


def test_folders_whose_names_hold_a_hash_are_two_stores(tmp_path: Path) -> None:
    first = _counter(str(tmp_path / "exp#1"), "experiment-1")
    second = _counter(str(tmp_path / "exp#2"), "experiment-2")
    assert (first(3), second(3)) == ("experiment-1", "experiment-2")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["exp#1", "exp#2"]
    # the URL of such a folder, as the store reports it, opens that folder
    assert open_store(open_store(str(tmp_path / "exp#1")).url).url.endswith("exp%231")


def test_the_advice_for_a_damaged_result_keeps_the_checkpoints(tmp_path: Path) -> None:
    starts: list[Any] = []
    work = _counter(str(tmp_path), "done", starts)
    assert work(50) == "done"
    result = tmp_path / "job" / "result"
    data = bytearray(result.read_bytes())
    data[-1] ^= 1
    result.write_bytes(bytes(data))
    with pytest.raises(CheckpointCorruptError) as err:
        work(50)
    message = str(err.value)
    # the one object to delete, by its path, and that the last checkpoint gives the result
    assert str(result) in message and "recomputes" in message, message
    result.unlink()  # as advised
    starts.clear()
    assert work(50) == "done"
    assert starts == [{"who": "done", "i": 50}]  # from the last checkpoint: nothing redone


def test_a_run_without_its_identity_record_is_resumed_with_a_warning(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    def make(version: int) -> Any:
        @checkpointed(store=str(tmp_path), run_id="job-1", version=version)
        def f(n: int, *, state: Any = None) -> Any:
            state = state or {"v": version, "i": 0}
            while state["i"] < n:
                state = {**state, "i": state["i"] + 1}
                yield state
                if state["i"] == 2 and version == 1:
                    raise KeyboardInterrupt
            return state

        return f

    with pytest.raises(KeyboardInterrupt):
        make(1)(4)
    (tmp_path / "job-1" / "identity").unlink()
    with caplog.at_level(logging.WARNING, logger="resumable"):
        make(2)(4)
    warned = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    assert any("identity record" in m and "job-1" in m and "unchecked" in m
               for m in warned), warned


_DUTY_CHILD = """
import sys
from resumable import checkpointed

@checkpointed(store=sys.argv[1], run_id="duty")
def f(n, *, state=None):
    state = state or 0
    while state < n:
        state += 1
        yield state
    return state

print("result", f(20), flush=True)
"""


def test_an_upload_duty_too_small_to_pace_by_is_refused(tmp_path: Path) -> None:
    proc = subprocess.run([sys.executable, "-c", _DUTY_CHILD, str(tmp_path)],
                          env=dict(ENV, RESUMABLE_UPLOAD_DUTY="1e-15"),
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 78, proc.stderr
    last = proc.stderr.strip().splitlines()[-1]  # (the ConfigurationError, as a script's)
    assert "RESUMABLE_UPLOAD_DUTY" in last and "1e-6 to 1" in last, proc.stderr


_TERM_CHILD = """
import sys, threading
from resumable import _signals, checkpointed

@checkpointed(store=sys.argv[1], run_id="t")
def f(n, *, state=None):
    state = state or 0
    while state < n:
        state += 1
        if state == 2:
            open(sys.argv[2], "w").close()  # the test sends SIGTERM now
            while _signals._term_at is None:  # until ours took it
                threading.Event().wait(0.01)
        yield state
    return state

print("result", f(5), flush=True)
"""


def test_a_term_timeout_of_inf_stops_a_run_without_tracebacks(tmp_path: Path) -> None:
    flag = tmp_path / "ready"
    script = tmp_path / "child.py"
    script.write_text(_TERM_CHILD)
    proc = subprocess.Popen([sys.executable, str(script), str(tmp_path / "store"), str(flag)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=dict(ENV, RESUMABLE_TERM_TIMEOUT="inf"))
    wait_for(flag, proc)
    proc.send_signal(signal.SIGTERM)
    out, err = finish(proc)
    assert proc.returncode == 143, err
    assert "Traceback" not in err and "OverflowError" not in err, err
    assert "result" not in out and "saved at step 2" in err, (out, err)


def test_a_checkpoint_of_another_run_is_not_called_ok(tmp_path: Path) -> None:
    store = tmp_path / "store"
    for run_id in ("r1", "r2"):
        checkpointed(store=str(store), run_id=run_id, keep=None)(count_up)(3)
    newest = sorted((store / "r2").glob("ckpt-*"))[-1]
    copied = newest.with_name(newest.name[:-3] + "009")
    shutil.copy(sorted((store / "r1").glob("ckpt-*"))[-1], copied)
    listed = cli("ls", "--check", str(store))
    assert listed.returncode == 0, listed.stderr
    row = next(line for line in listed.stdout.splitlines() if line.startswith("r2 "))
    assert "(damaged)" in row, listed.stdout
    shown = cli("show", str(store), "r2")
    line = next(line for line in shown.stdout.splitlines() if line.startswith(copied.name))
    assert "copied or renamed" in line and not line.rstrip().endswith(" ok"), shown.stdout


class _LongName:
    name = "my-serializer-" * 20  # 280 bytes
    dumps = staticmethod(pickle.dumps)
    loads = staticmethod(pickle.loads)


class _TextDumps:
    name = "text"
    dumps = staticmethod(repr)
    loads = staticmethod(eval)


def test_a_serializer_name_too_long_to_record_is_refused_before_any_generation(
    tmp_path: Path,
) -> None:
    ran: list[int] = []
    with pytest.raises(ConfigurationError, match="255 bytes"):
        @checkpointed(store=str(tmp_path), serializer=_LongName())
        def f(*, state: Any = None) -> Any:
            ran.append(1)
            yield 1

        f()
    assert ran == []


def test_a_serializer_whose_dumps_returns_no_bytes_is_named(tmp_path: Path) -> None:
    @checkpointed(store=str(tmp_path), run_id="text", serializer=_TextDumps())
    def f(*, state: Any = None) -> Any:
        yield 1
        return 1

    with pytest.raises(SerializationError) as err:
        f()
    message = str(err.value)
    assert "'text'" in message and "dumps" in message and "str" in message, message


def test_an_encoded_nul_in_a_file_url_is_a_configuration_error(tmp_path: Path) -> None:
    url = f"file://{tmp_path}/d%00x"
    with pytest.raises(ConfigurationError, match="NUL"):
        open_store(url)
    listed = cli("ls", url)
    assert listed.returncode == 78, listed.stderr
    assert "Traceback" not in listed.stderr


# Review 139 (of eb92e8b, the fixes above)


def test_a_stored_result_without_identity_record_is_returned_with_a_warning(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    f = checkpointed(store=str(tmp_path), run_id="job")(count_up)
    assert f(3) == 3
    (tmp_path / "job" / "identity").unlink()
    with caplog.at_level(logging.WARNING, logger="resumable"):
        assert f(5) == 3  # (the run's own result: its arguments are unknown)
    warned = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    assert any("identity record" in m and "unchecked" in m for m in warned), warned


def test_the_delete_command_for_a_damaged_result_on_s3_names_the_endpoint(
    moto_server: S3Server, s3_env: Any
) -> None:
    s3_env(moto_server)
    bucket = moto_server.new_store_url().split("/")[2]
    url = f"s3://{bucket}/exp?endpoint_url={moto_server.endpoint}&addressing_style=path"
    work = _counter(url, "s3")
    assert work(3) == "s3"
    store = open_store(url)
    data = bytearray(store.get("job/result") or b"")
    data[-1] ^= 1
    store.put("job/result", [bytes(data)])
    with pytest.raises(CheckpointCorruptError) as err:
        work(3)
    message = str(err.value)
    assert f"aws s3 rm s3://{bucket}/exp/job/result --endpoint-url {moto_server.endpoint}" \
        in message, message
    assert f"`resumable rm '{url}' job`" in message, message  # (quoted: its & options)


def test_a_small_upload_duty_that_worked_still_works(tmp_path: Path) -> None:
    proc = subprocess.run([sys.executable, "-c", _DUTY_CHILD, str(tmp_path)],
                          env=dict(ENV, RESUMABLE_UPLOAD_DUTY="0.005"),
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0 and "result 20" in proc.stdout, proc.stderr


def test_the_folder_url_ls_suggests_opens_that_folder(tmp_path: Path) -> None:
    root = tmp_path / "root"
    _counter(str(root / "exp#1"), "in a folder")(2)
    listed = cli("ls", str(root))
    suggested = listed.stderr.split("`resumable ls ")[1].split("`")[0]
    assert suggested.endswith("exp%231"), listed.stderr
    again = cli("ls", suggested)
    assert again.returncode == 0 and "job" in again.stdout, again.stderr


def test_a_folder_url_with_a_tab_still_opens(tmp_path: Path) -> None:
    folder = tmp_path / "exp\t2"
    _counter(folder.as_uri(), "tab")(2)  # (a plain path with a tab is refused)
    listed = cli("ls", folder.as_uri())
    assert listed.returncode == 0 and "job" in listed.stdout, listed.stderr


# Review 140 (of b6d581e)


def test_a_registered_store_gets_its_url_options(memory_url: str) -> None:
    from resumable import register_store
    from resumable.stores import _registry

    opened: list[str] = []

    def factory(url: str) -> Any:
        opened.append(url)
        return open_store(memory_url)

    register_store("review140", factory)
    try:
        open_store("review140://bucket/prefix?project=p&timeout=30#part")
    finally:
        del _registry["review140"]
    assert opened == ["review140://bucket/prefix?project=p&timeout=30#part"]


def test_the_rm_advice_of_a_run_mismatch_is_quoted_for_a_shell(
    moto_server: S3Server, s3_env: Any
) -> None:
    s3_env(moto_server)
    bucket = moto_server.new_store_url().split("/")[2]
    url = f"s3://{bucket}/exp?endpoint_url={moto_server.endpoint}&region=us-east-1"
    assert _counter(url, "first")(2) == "first"
    with pytest.raises(ConfigurationError) as err:
        _counter(url, "first")(3)
    assert f"`resumable rm '{url}' job`" in str(err.value), str(err.value)


class _Unnamed:
    name = ""
    dumps = staticmethod(pickle.dumps)
    loads = staticmethod(pickle.loads)


def test_a_serializer_with_an_empty_name_still_works(tmp_path: Path) -> None:
    f = checkpointed(store=str(tmp_path), run_id="e", serializer=_Unnamed())(count_up)
    assert f(3) == 3
    assert f(3) == 3  # (its stored result, read back)
