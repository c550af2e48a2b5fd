"""Storage races and leftovers: racing attempts, forked clients, stray records, temp files.

Each test reproduces a defect seen on a real store (moto on loopback, a local folder,
real forked processes, a real SIGKILL): a new attempt that started over while valid
checkpoints existed, boto3 clients shared across fork, a stray ``epoch-99999999``, a
signed run resumed without its key, temp files left by a killed save, and a CLI that
crashed on one flipped bit.
"""

from __future__ import annotations

import contextlib
import io
import multiprocessing
import os
import signal
import subprocess
import sys
import tempfile
import textwrap
import threading
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from resumable import (
    CheckpointCorruptError,
    ConfigurationError,
    FencedError,
    StoreError,
    checkpointed,
    cli,
)
from resumable._run import EPOCH, Run, ckpt_name, parse_ckpt_name
from resumable.stores import Store, open_store
from resumable.stores._local import TMP_PREFIX, LocalStore
from tests.s3servers import MotoServer, S3Server
from tests.wrappers import DelegatingStore

ROOT = Path(__file__).resolve().parents[1]
KEY = b"k" * 32


def _write(run: Run, step: int) -> str:
    return run.write_checkpoint(run.snapshot({"i": step}, step, None))


class ListHook(DelegatingStore):
    """Runs ``hook`` once, right after the first listing of checkpoints returns.

    That is the window in which a new attempt has seen names that another writer (the
    older attempt's retention) may delete before the new attempt reads them.
    """

    def __init__(self, inner: Store, hook: Callable[[], None] | None = None) -> None:
        super().__init__(inner)
        self.hook = hook

    def list(self, prefix: str, start_after: str | None = None) -> list[str]:
        names = self.inner.list(prefix, start_after)
        if prefix.endswith("/ckpt-") and self.hook is not None:
            hook, self.hook = self.hook, None
            hook()
        return names


# -- a new attempt never starts over while valid checkpoints exist ---------------------


@pytest.mark.s3
def test_a_new_attempt_resumes_while_the_older_one_prunes(
    moto_server: MotoServer, s3_env: Callable[..., Any]
) -> None:
    """The older attempt (keep=1) saves and prunes between the new one's list and get.

    Before: the new attempt loaded before claiming, so the older one, not yet fenced,
    deleted the listed checkpoint and the new one "started fresh" with good steps in the
    store. Now the claim comes first: the older attempt is fenced and deletes nothing.
    """
    s3_env(moto_server)
    store = open_store(moto_server.new_store_url())
    old = Run(store, "r", keep=1)
    old.claim_epoch(None)
    for step in range(1, 6):
        _write(old, step)
    fenced: list[BaseException] = []

    def older_saves_again() -> None:
        try:
            _write(old, 6)
        except FencedError as err:
            fenced.append(err)

    entered: list[Any] = []

    @checkpointed(store=ListHook(store, older_saves_again), run_id="r", keep=1)
    def f(n: int, *, state: Any = None) -> Any:
        entered.append(state)
        s = state or {"i": 0}
        while s["i"] < n:
            s = {"i": s["i"] + 1}
            yield s
        return s["i"]

    assert f(8) == 8
    assert entered[0] is not None and entered[0]["i"] >= 5, entered
    assert fenced, "the older attempt was not fenced before the new one loaded"


def test_listed_checkpoints_that_vanish_are_listed_again(memory_url: str) -> None:
    """Retention elsewhere removes what was listed: the newer checkpoint is found instead."""
    store = open_store(memory_url)
    old = Run(store, "r", keep=None)
    old.claim_epoch(None)
    for step in (1, 2):
        _write(old, step)

    def retention_elsewhere() -> None:
        # The older attempt's save and prune that passed their fence checks before the
        # new claim land now, between the new attempt's listing and its reads.
        name = ckpt_name(1, 3)
        snap = old.snapshot({"i": 3}, 3, None)
        snap.rng_frame()
        store.put(f"r/{name}", old._encode(name, snap.frames, "ckpt", "pickle", 3))
        for step in (1, 2):
            store.delete(f"r/{ckpt_name(1, step)}")

    new = Run(ListHook(store, retention_elsewhere), "r")
    latest = new.claim_and_load()
    assert latest is not None and latest.step == 3
    assert new.epoch == 2 and new._epoch_base(2) == ckpt_name(1, 3)


def test_checkpoints_seen_then_gone_are_an_error_not_a_fresh_start(memory_url: str) -> None:
    """Everything listed disappears and nothing newer comes: raise, never start over."""
    store = open_store(memory_url)
    old = Run(store, "r", keep=None)
    old.claim_epoch(None)
    _write(old, 1)

    class Vanishing(DelegatingStore):
        def get(self, key: str) -> bytes | bytearray | memoryview | None:
            return None if "/ckpt-" in key else self.inner.get(key)

    with pytest.raises(StoreError, match="disappeared"):
        Run(Vanishing(store), "r").claim_and_load()


def test_the_claim_records_its_base_for_the_zombie_rule(memory_url: str) -> None:
    """Claim first, then load: the epoch record still names the checkpoint resumed from."""
    store = open_store(memory_url)
    a = Run(store, "r", keep=None)
    assert a.claim_and_load() is None
    assert a._epoch_base(1) == ""
    for step in (1, 2):
        _write(a, step)
    b = Run(store, "r", keep=None)
    latest = b.claim_and_load()
    assert latest is not None and latest.step == 2
    assert b._epoch_base(2) == ckpt_name(1, 2)
    with pytest.raises(FencedError):
        _write(a, 3)


# -- boto3 clients are per process ------------------------------------------------------

_FORK_STORE: Any = None
_FORK_BARRIER: Any = None
_FORK_PARENT_CLIENT: Any = None


def _child_round_trips(child: int) -> str | None:
    """Put, get and list on the store object inherited from the parent; a problem or None."""
    store = _FORK_STORE
    if store._client is _FORK_PARENT_CLIENT:
        return f"child {child} uses the parent's boto3 client and its connections"
    _FORK_BARRIER.wait(timeout=60)  # all children at once, on the inherited connections
    for j in range(15):
        key = f"c{child}/o{j}"
        body = os.urandom(64 + 97 * child + j)
        store.put(key, [body])
        got = store.get(key)
        if got is None or bytes(got) != body:
            return f"child {child}: {key} read back {None if got is None else len(got)} bytes"
        names = store.list(f"c{child}/")
        if names != sorted(f"c{child}/o{k}" for k in range(j + 1)):
            return f"child {child}: listing {names[:3]}..."
    return None


@pytest.mark.s3
def test_forked_children_use_their_own_s3_clients(
    s3_server: S3Server, s3_env: Callable[..., Any]
) -> None:
    """A fork pool whose children all use the parent's store object, forked mid-upload.

    The parent keeps saving on another thread (as the upload thread does while the body
    forks its fitness pool), so the fork may copy a connection pool's lock while held, and
    keep-alive sockets (rclone) that every child would then share.
    """
    global _FORK_STORE, _FORK_BARRIER, _FORK_PARENT_CLIENT
    s3_env(s3_server)
    store = open_store(s3_server.new_store_url())
    with ThreadPoolExecutor(8) as warm:  # keep-alive connections open in the parent's pool
        list(warm.map(lambda j: (store.put(f"warm/{j}", [b"x" * 100]), store.get(f"warm/{j}")),
                      range(8)))
    stop = threading.Event()

    def uploading() -> None:
        while not stop.is_set():
            store.put("busy", [os.urandom(1000)])
            store.get("busy")

    busy = threading.Thread(target=uploading)
    busy.start()
    ctx = multiprocessing.get_context("fork")
    _FORK_STORE, _FORK_BARRIER, _FORK_PARENT_CLIENT = store, ctx.Barrier(8), store._client
    try:
        with ctx.Pool(8) as pool:
            pending = pool.map_async(_child_round_trips, range(8), chunksize=1)
            problems = pending.get(timeout=120)
    finally:
        stop.set()
        busy.join()
        _FORK_STORE = _FORK_BARRIER = _FORK_PARENT_CLIENT = None
    assert [p for p in problems if p] == []
    assert store.get("warm/0") == b"x" * 100  # the parent's client still works


# -- a stray epoch record ---------------------------------------------------------------


@pytest.mark.parametrize("stray", ["99999999", "00000003"])
@pytest.mark.parametrize("key", [None, KEY], ids=["unsigned", "signed"])
def test_a_stray_epoch_record_is_not_counted(
    tmp_path: Path, key: bytes | None, stray: str
) -> None:
    """Garbage named epoch-<n> neither overflows the names, hides checkpoints, nor fences."""
    store = LocalStore(tmp_path)
    a = Run(store, "r", signing_key=key, keep=2)
    a.claim_epoch(None)
    _write(a, 1)
    store.put(f"r/{EPOCH}{stray}", [b"not a record"])
    b = Run(store, "r", signing_key=key, keep=2)
    latest = b.load_latest()
    b.claim_epoch(latest.key.rsplit("/", 1)[1] if latest else None)
    assert b.epoch == 2
    for step in (2, 3, 4):
        _write(b, step)
    names = Run(store, "r", signing_key=key).checkpoint_names()
    assert names == [ckpt_name(2, 3), ckpt_name(2, 4)]  # retention kept working
    newest = Run(store, "r", signing_key=key).load_latest()
    assert newest is not None and newest.step == 4
    # A real newer claim still fences b, even past a stray at the next number.
    assert Run(store, "r", signing_key=key).claim_epoch(None) == 3 + (stray == "00000003")
    with pytest.raises(FencedError):
        _write(b, 5)


def test_a_valid_record_at_the_last_epoch_stops_with_a_clear_error(tmp_path: Path) -> None:
    """An unsigned run lets anyone write a valid record; the field never overflows."""
    store = LocalStore(tmp_path)
    a = Run(store, "r")
    a.claim_epoch(None)
    forged = Run(store, "r")
    forged.epoch = 99999999
    name = f"{EPOCH}99999999"
    store.put(f"r/{name}", forged._encode(name, [b"{}"], "epoch", "raw"))
    with pytest.raises(CheckpointCorruptError, match="epoch-99999999"):
        Run(store, "r").claim_epoch(None)
    assert all(parse_ckpt_name(n) for n in Run(store, "r").checkpoint_names())


# -- signing downgrade ------------------------------------------------------------------


def test_a_signed_run_refuses_to_run_without_its_key(tmp_path: Path) -> None:
    """Before: it loaded, wrote unsigned checkpoints, and retention removed the signed ones."""
    calls: list[Any] = []

    def make(key: bytes | None) -> Any:
        @checkpointed(store=str(tmp_path), run_id="signed", signing_key=key, keep=2,
                      ignore=["fail_at"])
        def f(n: int, fail_at: int = 0, *, state: Any = None) -> Any:
            calls.append(state)
            s = state or 0
            while s < n:
                s += 1
                if s == fail_at:
                    raise RuntimeError("pod lost")
                yield s
            return s

        return f

    with pytest.raises(RuntimeError):
        make(KEY)(6, 4)
    before = sorted(p.name for p in (tmp_path / "signed").iterdir())
    with pytest.raises(ConfigurationError, match=r"signed.*RESUMABLE_SIGNING_KEY") as info:
        make(None)(6)
    assert info.value.exit_code == 78
    assert "\n" not in str(info.value)
    assert sorted(p.name for p in (tmp_path / "signed").iterdir()) == before
    assert make(KEY)(6) == 6  # with the key back, the run goes on from step 3


# -- temp files of a killed save --------------------------------------------------------

_KILLED_SAVER = textwrap.dedent("""
    import sys, time
    from resumable import checkpointed
    from resumable.stores._local import LocalStore

    class Stuck(LocalStore):
        def put(self, key, data):
            if key.endswith("-000000000003"):
                tmp = self._write_temp(key, data)  # the temp file of a save in progress
                print("TEMP", tmp, flush=True)
                time.sleep(600)
            super().put(key, data)

    @checkpointed(store=Stuck(sys.argv[1]), run_id="killed", every="generation")
    def f(*, state=None):
        s = state or 0
        while s < 10:
            s += 1
            yield s

    f()
""")


@pytest.fixture
def killed_mid_save(tmp_path: Path) -> Iterator[tuple[Path, Path]]:
    """A real process SIGKILLed while its save's temp file exists: (store, temp file)."""
    store = tmp_path / "store"
    proc = subprocess.Popen(
        [sys.executable, "-c", _KILLED_SAVER, str(store)], stdout=subprocess.PIPE, text=True,
        # Every save happens (none is coalesced away), so step 3's save surely starts.
        env=dict(os.environ, PYTHONPATH=str(ROOT), RESUMABLE_SYNC="1"),
    )
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        assert line.startswith("TEMP "), line
        proc.send_signal(signal.SIGKILL)
        assert proc.wait(timeout=30) == -signal.SIGKILL
        tmp = Path(line.split(" ", 1)[1].strip())
        assert tmp.exists() and tmp.name.startswith(TMP_PREFIX)
        yield store, tmp
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_the_next_attempt_removes_temp_files_of_a_killed_save(
    killed_mid_save: tuple[Path, Path],
) -> None:
    store, tmp = killed_mid_save

    @checkpointed(store=str(store), run_id="killed")
    def f(*, state: Any = None) -> Any:
        s = state or 0
        while s < 10:
            s += 1
            yield s

    assert f() == 10
    assert not tmp.exists()
    assert [p.name for p in (store / "killed").iterdir() if p.name.startswith(TMP_PREFIX)] == []


def test_rm_removes_temp_files_of_a_killed_save(killed_mid_save: tuple[Path, Path]) -> None:
    store, tmp = killed_mid_save
    out = io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(out):
        assert cli.main(["rm", str(store), "killed", "--yes"]) == 0, out.getvalue()
    assert not tmp.exists()
    assert not (store / "killed").exists()


# -- the CLI on damaged headers ---------------------------------------------------------

_DAMAGE = tempfile.TemporaryDirectory(prefix="resumable-flip-")


def _damage_fixture() -> tuple[Path, bytes, int]:
    """A store with one run; the newest checkpoint's bytes and its header length."""
    root = Path(_DAMAGE.name) / "store"
    if not root.exists():
        run = Run(LocalStore(root), "run")
        run.claim_epoch(None)
        _write(run, 1)
    from resumable import _format

    path = root / "run" / ckpt_name(1, 1)
    data = path.read_bytes()
    return path, data, _format.read_header(data).header_len


def _cli(*argv: str) -> tuple[int, str]:
    out = io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(out):
        code = cli.main(list(argv))
    return code, out.getvalue()


@given(byte=st.integers(0, 10_000), bit=st.integers(0, 7))
@example(byte=39, bit=5)  # the created time's exponent: out of any datetime's range
@example(byte=39, bit=7)  # its sign: before 1970
@example(byte=38, bit=7)  # the exponent's low bit: year 2090
@example(byte=15, bit=7)  # header length
@example(byte=55, bit=7)  # payload length
def test_any_flipped_header_bit_fails_verify_and_never_crashes_ls_or_show(
    byte: int, bit: int
) -> None:
    """Before: a flipped bit in the time field crashed ls, show and verify (OverflowError)."""
    path, original, header_len = _damage_fixture()
    byte %= header_len
    damaged = bytearray(original)
    damaged[byte] ^= 1 << bit
    path.write_bytes(damaged)
    try:
        store = str(path.parent.parent)
        code, text = _cli("verify", store, "run")
        assert code == 65, text
        assert "FAIL" in text and "Traceback" not in text
        for argv in (["ls", store], ["show", store, "run"], ["ls", store, "--check"],
                     ["ls", store, "--check", "--json"], ["show", store, "run", "--json"]):
            code, text = _cli(*argv)
            # (ls --json names a field read_error for every run: null when all was read)
            text = text.replace('"read_error": null', "")
            assert code == 0 and "error" not in text, (argv, text)
    finally:
        path.write_bytes(original)


def test_every_bit_of_the_created_time_is_survived() -> None:
    """The field that crashed the CLI, bit by bit (NaN, infinities, huge, negative)."""
    path, original, _ = _damage_fixture()
    store = str(path.parent.parent)
    try:
        for bit in range(64):
            damaged = bytearray(original)
            damaged[32 + bit // 8] ^= 1 << (bit % 8)
            path.write_bytes(damaged)
            assert _cli("verify", store, "run")[0] == 65, bit
            for argv in (["ls", store, "--check"], ["show", store, "run", "--json"]):
                code, text = _cli(*argv)
                assert code == 0 and "error" not in text, (bit, argv, text)
    finally:
        path.write_bytes(original)


@pytest.mark.s3
def test_the_next_attempt_aborts_leftover_multipart_uploads(
    moto_server: MotoServer, s3_env: Callable[..., Any]
) -> None:
    """A pod killed mid-way through a large save leaves an incomplete upload (billed)."""
    s3_env(moto_server)
    url = moto_server.new_store_url()
    bucket, prefix = url.removeprefix("s3://").split("/", 1)
    client = moto_server.client()
    client.create_multipart_upload(Bucket=bucket, Key=f"{prefix}/r/ckpt-00000001-000000000007")
    client.create_multipart_upload(Bucket=bucket, Key=f"{prefix}/other/ckpt-00000001-000000000001")
    store = open_store(url)

    def left() -> list[str]:
        return sorted(u["Key"] for u in
                      client.list_multipart_uploads(Bucket=bucket).get("Uploads", []))

    # Initiated (server's clock) within the clock-skew margin before a claim: maybe the
    # save of an attempt that claimed after us, so it stays.
    (initiated,) = {u["Initiated"].timestamp()
                    for u in client.list_multipart_uploads(Bucket=bucket)["Uploads"]}
    assert store.remove_temp_files("r/", older_than=initiated + 30) == 0  # type: ignore[attr-defined]
    assert len(left()) == 2
    Run(store, "r").claim_and_load()  # moto dates every upload 2010: stale for a claim now
    assert left() == [f"{prefix}/other/ckpt-00000001-000000000001"]  # other runs untouched


def test_a_claim_keeps_the_temp_file_of_a_newer_claimant(tmp_path: Path) -> None:
    """Attempt A's cleanup after its claim leaves alone the in-flight save of attempt B,
    which claimed after A: only temp files older than A's claim are stale."""
    local = LocalStore(str(tmp_path))
    newer = Run(local, "r")
    in_flight: list[Path] = []

    class ClaimThenNewerSaves(DelegatingStore):
        def put_if_absent(self, key: str, data: Any) -> bool:
            done = self.inner.put_if_absent(key, data)
            if done and not in_flight:  # B claims and starts a save before A cleans up
                newer.claim_epoch()
                in_flight.append(local._write_temp("r/" + ckpt_name(newer.epoch, 1), [b"x"]))
            return done

        def remove_temp_files(self, prefix: str, older_than: float | None = None) -> int:
            return local.remove_temp_files(prefix, *([] if older_than is None else [older_than]))

    stale = tmp_path / "r" / f"{TMP_PREFIX}ckpt-00000000-000000000001-{'dead' * 8}"
    stale.parent.mkdir()
    stale.write_bytes(b"killed mid-save")
    os.utime(stale, (1, 1))
    Run(ClaimThenNewerSaves(local), "r").claim_epoch()  # type: ignore[arg-type]
    assert in_flight[0].exists()  # B's save can still finish
    assert not stale.exists()  # a killed save's leftover is still removed
