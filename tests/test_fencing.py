"""Fencing: a newer attempt of a run stops the older one, whose late writes never win."""

from __future__ import annotations

import json
import logging
import os
import random
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from resumable import FencedError
from resumable._errors import EXIT_FENCED
from resumable._run import Run, ckpt_name, parse_ckpt_name
from resumable.stores import open_store
from resumable.stores._base import Payload
from resumable.stores._memory import MemoryStore
from tests.s3servers import S3Server
from tests.toy import Faults, make_evolve
from tests.toy import reference as toy_reference
from tests.workers.chaos_worker import reference
from tests.wrappers import DelegatingStore

WORKER = Path(__file__).resolve().parent / "workers" / "chaos_worker.py"


# -- unit level: the zombie-exclusion rule on the memory store ------------------------


class RacingStore(DelegatingStore):
    """A memory store that runs a hook just before the next put: the race window.

    ``write_checkpoint`` checks for a newer epoch, then puts. A hook that claims a new
    epoch in between reproduces an attempt that passed its fence check just before a
    newer attempt took over.
    """

    def __init__(self, inner: MemoryStore) -> None:
        super().__init__(inner)
        self.before_put: Callable[[], None] | None = None

    def put(self, key: str, data: Payload) -> None:
        hook, self.before_put = self.before_put, None
        if hook is not None:
            hook()
        self.inner.put(key, data)


@pytest.fixture
def racing(memory_url: str) -> Iterator[RacingStore]:
    """An empty racing memory store."""
    yield RacingStore(MemoryStore(memory_url.removeprefix("memory://")))


def _write(run: Run, step: int) -> str:
    return run.write_checkpoint(run.snapshot({"step": step, "epoch": run.epoch}, step, None))


def _attempt(store: Any, keep: int | None = None) -> Run:
    """A new attempt: find the newest checkpoint, claim an epoch based on it."""
    run = Run(store, "r", keep=keep)
    latest = run.load_latest()
    run.claim_epoch(latest.key.rsplit("/", 1)[1] if latest else None)
    return run


def test_checkpoints_written_after_a_takeover_are_skipped(
    racing: RacingStore, caplog: pytest.LogCaptureFixture
) -> None:
    """Epoch 1 writes after epoch 2 claimed base X: readers skip everything after X."""
    a = _attempt(racing)
    for step in (1, 2, 3):
        _write(a, step)
    taken_over: list[Run] = []
    racing.before_put = lambda: taken_over.append(_attempt(racing))
    # passed its fence check, then B took over, then it wrote; the check after the write
    # stops it before retention could delete anything
    with pytest.raises(FencedError):
        _write(a, 4)
    zombie = ckpt_name(1, 4)
    b = taken_over[0]
    assert (a.epoch, b.epoch) == (1, 2)
    assert b._epoch_base(2) == ckpt_name(1, 3)
    assert racing.get(f"r/{zombie}") is not None
    with caplog.at_level(logging.WARNING, logger="resumable"):
        latest = Run(racing, "r").load_latest()
    assert latest is not None and latest.key == f"r/{ckpt_name(1, 3)}"
    assert latest.state == {"step": 3, "epoch": 1}
    assert any("newer one took over" in r.getMessage() and zombie in r.getMessage()
               for r in caplog.records)
    with pytest.raises(FencedError):  # its next save stops it, writing nothing
        _write(a, 5)
    assert racing.get(f"r/{ckpt_name(1, 5)}") is None
    _write(b, 4)
    latest = Run(racing, "r").load_latest()
    assert latest is not None and latest.key == f"r/{ckpt_name(2, 4)}"
    assert latest.state == {"step": 4, "epoch": 2}


def test_a_fresh_takeover_prefers_nothing_of_the_older_epoch(
    racing: RacingStore,
) -> None:
    """A takeover that started fresh (base '') outranks the older epoch's later writes.

    They are a last resort only: with nothing else left, a resume may use them.
    """
    a = _attempt(racing)
    racing.before_put = lambda: _attempt(racing)
    with pytest.raises(FencedError):
        _write(a, 1)
    assert Run(racing, "r").epochs() == [1, 2]
    assert Run(racing, "r").checkpoint_names() == [ckpt_name(1, 1)]
    b = Run(racing, "r")
    b.epoch = 2
    _write(b, 1)  # the newer attempt's own first checkpoint wins over the zombie's
    latest = Run(racing, "r").load_latest()
    assert latest is not None and latest.key == f"r/{ckpt_name(2, 1)}"


def test_the_rule_only_excludes_names_after_the_base(memory_url: str) -> None:
    """Checkpoints up to the base stay readable fallbacks; the newest epoch is never skipped."""
    store = open_store(memory_url)
    a = _attempt(store, keep=None)
    for step in (1, 2):
        _write(a, step)
    b = _attempt(store, keep=None)
    assert b.epoch == 2 and b._epoch_base(2) == ckpt_name(1, 2)
    _write(b, 3)
    run = Run(store, "r")
    # B's checkpoint is damaged: readers fall back to A's checkpoint at the base.
    store.put(f"r/{ckpt_name(2, 3)}", [b"garbage"])
    latest = run.load_latest()
    assert latest is not None and latest.key == f"r/{ckpt_name(1, 2)}"
    store.delete(f"r/{ckpt_name(2, 3)}")
    c = _attempt(store, keep=None)  # resumes from A's step 2, claims epoch 3
    assert c.epoch == 3 and c._epoch_base(3) == ckpt_name(1, 2)
    _write(c, 3)
    _write(c, 4)
    latest = run.load_latest()
    assert latest is not None and latest.key == f"r/{ckpt_name(3, 4)}"


def test_a_fenced_attempt_writes_no_checkpoint_and_no_result(memory_url: str) -> None:
    """After a newer claim, the older attempt's saves and its result raise FencedError."""
    store = open_store(memory_url)
    a = _attempt(store)
    _write(a, 1)
    _attempt(store)
    before = store.list("r/")
    with pytest.raises(FencedError, match="epoch 2"):
        _write(a, 2)
    with pytest.raises(FencedError):
        a.write_result(42)
    assert store.list("r/") == before


def test_concurrent_claims_get_distinct_epochs(memory_url: str) -> None:
    """Attempts claiming at the same moment each get their own epoch (create-only)."""
    store = open_store(memory_url)
    barrier = threading.Barrier(8)
    epochs: list[int] = []

    def claim() -> None:
        run = Run(store, "r")
        barrier.wait(timeout=10)
        epochs.append(run.claim_epoch(None))

    threads = [threading.Thread(target=claim) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=30)
    assert sorted(epochs) == list(range(1, 9))


# -- end to end: two worker processes on moto's server ---------------------------------


def _events(path: Path) -> list[dict[str, Any]]:
    out = []
    for line in path.read_text().splitlines():
        try:
            out.append(json.loads(line))
        except ValueError:
            continue
    return out


def _worker_env(server: S3Server) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items()
           if k not in ("AWS_ENDPOINT_URL_S3", "AWS_PROFILE", "AWS_SESSION_TOKEN")}
    env.update(server.env)
    env["AWS_CONFIG_FILE"] = env["AWS_SHARED_CREDENTIALS_FILE"] = "/nonexistent/resumable-tests"
    env["PYTHONUNBUFFERED"] = "1"
    return env


def _wait(predicate: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(0.02)


@pytest.mark.s3
def test_older_attempt_is_fenced_by_newer_one_on_moto(
    moto_server: S3Server, s3_env: Callable[..., Any], tmp_path: Path
) -> None:
    """A (slow) is fenced at its next save with EXIT_FENCED; B ends with the reference."""
    s3_env(moto_server)
    url = moto_server.new_store_url()
    generations = 40
    env = _worker_env(moto_server)
    # keep everything, so the checks below see every checkpoint either attempt wrote
    common = [sys.executable, str(WORKER), url, "fenced-run", "--generations",
              str(generations), "--keep", "1000"]
    out_a, err_a = tmp_path / "a.out", tmp_path / "a.err"
    out_b, err_b = tmp_path / "b.out", tmp_path / "b.err"
    procs: list[subprocess.Popen[bytes]] = []
    with open(out_a, "wb") as o, open(err_a, "wb") as e:
        a = subprocess.Popen([*common, "--delay", "0.05", "--slow-after", "3",
                              "--slow-delay", "0.3"], stdout=o, stderr=e, env=env)
    procs.append(a)
    try:
        run = Run(open_store(url), "fenced-run")

        def a_saved_three() -> bool:
            assert a.poll() is None, err_a.read_text()
            latest = run.load_latest(with_state=False)
            return latest is not None and latest.step >= 3

        _wait(a_saved_three, 30, "attempt A to save 3 checkpoints")
        with open(out_b, "wb") as o, open(err_b, "wb") as e:
            b = subprocess.Popen([*common, "--delay", "0"], stdout=o, stderr=e, env=env)
        procs.append(b)
        b.wait(timeout=60)
        a.wait(timeout=60)
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    assert b.returncode == 0, err_b.read_text()
    assert a.returncode == EXIT_FENCED, (a.returncode, err_a.read_text()[-3000:])
    assert "FencedError" in err_a.read_text()
    events_a, events_b = _events(out_a), _events(out_b)
    assert not any(e["event"] == "result" for e in events_a)
    results = [e["result"] for e in events_b if e["event"] == "result"]
    assert results == [reference(generations)]
    start_b = next(e["start"] for e in events_b if e["event"] == "start")
    assert start_b >= 3  # B resumed from A's work

    run = Run(open_store(url), "fenced-run")
    assert run.epochs() == [1, 2]
    base = run._epoch_base(2)
    assert base and parse_ckpt_name(base) == (1, start_b)
    latest = run.load_latest()
    assert latest is not None and (latest.epoch, latest.step) == (2, generations)
    # Whatever A wrote after B took over (if it got anything through) is excluded even
    # when B's checkpoints are gone.
    late = [n for n in run.checkpoint_names() if n.startswith("ckpt-00000001-") and n > base]
    for name in run.checkpoint_names():
        if name.startswith("ckpt-00000002-"):
            run.store.delete(run.key(name))
    fallback = run.load_latest(with_state=False)
    assert fallback is not None  # B's base (nothing was pruned) outranks A's late writes
    assert fallback.key.rsplit("/", 1)[1] == base
    assert fallback.key.rsplit("/", 1)[1] not in late


# -- rclone: no conditional writes ----------------------------------------------------


@pytest.mark.s3
def test_rclone_logs_weaker_fencing(
    rclone_server: S3Server, s3_env: Callable[..., Any], caplog: pytest.LogCaptureFixture
) -> None:
    """On a server that ignores If-None-Match a run still works and warns once per start."""
    s3_env(rclone_server)
    evolve = make_evolve(Faults(), store=rclone_server.new_store_url())
    random.seed(0)
    np.random.seed(0)
    with caplog.at_level(logging.WARNING, logger="resumable"):
        assert evolve(5) == toy_reference(5)
    warnings = [r.getMessage() for r in caplog.records if "weaker" in r.getMessage()]
    assert warnings and all("conditional writes" in w for w in warnings)
    assert any(rclone_server.endpoint in w or "s3://" in w for w in warnings)


@pytest.mark.s3
def test_moto_gives_full_fencing_without_warning(
    moto_server: S3Server, s3_env: Callable[..., Any], caplog: pytest.LogCaptureFixture
) -> None:
    """moto enforces If-None-Match: no weaker-fencing warning."""
    s3_env(moto_server)
    evolve = make_evolve(Faults(), store=moto_server.new_store_url())
    random.seed(0)
    np.random.seed(0)
    with caplog.at_level(logging.WARNING, logger="resumable"):
        assert evolve(3) == toy_reference(3)
    assert not [r for r in caplog.records if "weaker fencing" in r.getMessage()]


def test_zombie_never_prunes_the_checkpoint_a_newer_attempt_resumed_from() -> None:
    """keep=1: a zombie that writes after a takeover stops before retention deletes the base."""
    racing = RacingStore(MemoryStore("zombie-keep1"))
    a = _attempt(racing, keep=1)
    for s in (1, 2, 3):
        _write(a, s)
    racing.before_put = lambda: _attempt(racing, keep=1)  # B takes over from ckpt-1-3, dies
    with pytest.raises(FencedError):
        _write(a, 4)
    assert "r/ckpt-00000001-000000000003" in racing.inner.list("r/")
    latest = Run(racing, "r").load_latest()
    assert latest is not None and latest.step == 3


def test_lost_base_falls_back_to_the_superseded_attempt(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """If only a zombie's checkpoints survive, resuming uses them (with a warning)."""
    store = MemoryStore("lost-base")
    racing = RacingStore(store)
    a = _attempt(racing, keep=None)
    for s in (1, 2, 3):
        _write(a, s)
    racing.before_put = lambda: _attempt(racing, keep=None)  # B resumes from ckpt-1-3
    with pytest.raises(FencedError):
        _write(a, 4)
    for step in (1, 2, 3):  # the base and everything before it disappear
        store.delete(f"r/{ckpt_name(1, step)}")
    with caplog.at_level(logging.WARNING, logger="resumable"):
        latest = Run(store, "r").load_latest()
    assert latest is not None and latest.key == f"r/{ckpt_name(1, 4)}"
    assert any("only because no other checkpoint verifies" in r.getMessage()
               for r in caplog.records)


def test_a_forged_attempt_record_does_not_fence_a_signed_run() -> None:
    """With a signing key, an epoch record written without it is ignored, not obeyed."""
    from resumable._format import encode

    store = MemoryStore("forged-epoch")
    key = b"k" * 32
    run = Run(store, "r", signing_key=key)
    run.claim_epoch(None)
    forged = encode([b"{}"], kind="epoch", serializer="raw", epoch=2, created=0.0,
                    name="r/epoch-00000002")
    store.put("r/epoch-00000002", forged)
    run.check_fenced()  # no FencedError: the forged record fails verification
    _write(run, 1)
    genuine = Run(store, "r", signing_key=key)
    genuine.epoch = 1
    store.delete("r/epoch-00000002")
    genuine.claim_epoch(None)  # a real newer attempt, signed with the key
    with pytest.raises(FencedError):
        run.check_fenced()


def test_a_signed_run_called_with_the_wrong_key_writes_nothing(tmp_path: Path) -> None:
    """The wrong key is refused (CheckpointTamperedError) before the claim is written."""
    from resumable import CheckpointTamperedError, checkpointed

    def evolve(n: int, *, state: Any = None) -> Any:
        s = state or 0
        while s < n:
            s += 1
            yield s
            if s == 2:
                raise KeyboardInterrupt  # stopped half-way, checkpoint at step 2

    with pytest.raises(KeyboardInterrupt):
        checkpointed(store=str(tmp_path), run_id="r", signing_key="a" * 64)(evolve)(5)
    before = sorted(p.name for p in (tmp_path / "r").iterdir())
    with pytest.raises(CheckpointTamperedError):
        checkpointed(store=str(tmp_path), run_id="r", signing_key="b" * 64)(evolve)(5)
    assert sorted(p.name for p in (tmp_path / "r").iterdir()) == before


# -- a run deleted while an attempt of it runs ------------------------------------------


def _claimed(store: Any) -> Run:
    run = Run(store, "r", keep=None)
    run.claim_and_load()
    return run


def test_a_run_deleted_while_an_attempt_runs_stops_it_and_stays_deleted(
    memory_url: str,
) -> None:
    """`resumable rm` (or f.reset) elsewhere: the attempt's next save raises FencedError
    and removes what the attempt wrote, instead of bringing the run back."""
    store = MemoryStore(memory_url.removeprefix("memory://"))
    a = _claimed(store)
    _write(a, 1)
    _write(a, 2)
    Run(store, "r").reset()
    with pytest.raises(FencedError, match=r"deleted while this attempt \(epoch 1\) ran"):
        _write(a, 3)
    assert store.list("r/") == []
    with pytest.raises(FencedError, match="deleted"):
        a.write_result("done")
    assert store.list("r/") == []


def test_an_attempt_of_a_deleted_run_stays_out_of_the_run_that_started_over(
    memory_url: str,
) -> None:
    """Deleted, then started over: the new attempt claims the old one's number again.
    The old attempt must not put its state into the new run."""
    store = MemoryStore(memory_url.removeprefix("memory://"))
    a = _claimed(store)
    for step in (1, 2, 3):
        _write(a, step)
    Run(store, "r").reset()
    b = _claimed(store)
    assert b.epoch == a.epoch == 1
    _write(b, 1)
    with pytest.raises(FencedError, match="written again by another attempt, which owns"):
        _write(a, 4)
    assert Run(store, "r").checkpoint_names() == [ckpt_name(1, 1)]
    latest = Run(store, "r").load_latest()
    assert latest is not None and latest.state == {"step": 1, "epoch": 1}


_LIVE_WRITER = """
import sys
from resumable import checkpointed

@checkpointed(store=sys.argv[1], run_id="live", keep=2)
def count(n, *, state=None):
    state = state or 0
    while state < n:
        state += 1
        yield state
        print("GEN", state, flush=True)
        sys.stdin.readline()
    return state

print("RESULT", count(6), flush=True)
"""


@pytest.mark.parametrize("where", ["folder", pytest.param("moto", marks=pytest.mark.s3)])
def test_resumable_rm_of_a_live_run_stops_its_writer(
    where: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    """A real process runs; `resumable rm STORE RUN --yes` deletes the run under it. The
    writer exits EXIT_FENCED at its next save and the run stays deleted (before: it
    finished, and `ls` showed it complete with 0 attempts)."""
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    if where == "moto":
        server = request.getfixturevalue("moto_server")
        request.getfixturevalue("s3_env")(server)
        env = _worker_env(server)
        url = server.new_store_url()
    else:
        url = str(tmp_path / "store")
    script = tmp_path / "writer.py"
    script.write_text(_LIVE_WRITER)
    writer = subprocess.Popen([sys.executable, str(script), url], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)
    assert writer.stdin is not None and writer.stdout is not None
    try:
        run = Run(open_store(url), "live")

        def saved_two() -> bool:
            assert writer.poll() is None, writer.stderr.read() if writer.stderr else ""
            latest = run.load_latest(with_state=False)
            return latest is not None and latest.step >= 2

        for _ in range(2):
            assert writer.stdout.readline().startswith(b"GEN")
            writer.stdin.write(b"\n")
            writer.stdin.flush()
        _wait(saved_two, 60, "the writer to save step 2")
        rm = subprocess.run([sys.executable, "-m", "resumable.cli", "rm", url, "live", "--yes"],
                            capture_output=True, text=True, env=env, timeout=60)
        assert rm.returncode == 0, rm.stderr
        out, err = writer.communicate(b"\n" * 6, timeout=60)
    finally:
        if writer.poll() is None:
            writer.kill()
            writer.wait()
    assert writer.returncode == EXIT_FENCED, (writer.returncode, err.decode()[-2000:])
    assert b"RESULT" not in out
    assert b"was deleted while this attempt" in err
    assert open_store(url).list("live/") == []


def test_a_forged_own_record_does_not_stop_a_signed_run() -> None:
    """Someone without the key overwrites our attempt record: not a deletion, not a
    takeover; the run saves on. A genuine deletion still stops it."""
    from resumable._format import encode

    store = MemoryStore("forged-own-epoch")
    run = Run(store, "r", signing_key=b"k" * 32, keep=None)
    run.claim_and_load()
    store.put("r/epoch-00000001", encode([b"{}"], kind="epoch", serializer="raw", epoch=1,
                                          created=0.0, name="r/epoch-00000001"))
    _write(run, 1)
    assert run.checkpoint_names() == [ckpt_name(1, 1)]
    store.delete("r/epoch-00000001")
    with pytest.raises(FencedError, match="is gone"):
        _write(run, 2)


_WRITER_HELD_BEFORE_RENAME = """
import sys, time
from pathlib import Path
from resumable import checkpointed
from resumable.stores._local import LocalStore

GO = Path(sys.argv[2])

class HeldStore(LocalStore):
    def _write_temp(self, key, data):
        tmp = super()._write_temp(key, data)
        if "/ckpt-" in key:
            print("WRITING", key, flush=True)  # the temp file is written; the rename follows
            while not GO.exists():
                time.sleep(0.01)
        return tmp

@checkpointed(store=HeldStore(sys.argv[1]), run_id="live")
def once(*, state=None):
    yield 1  # one yield: its save is the final one, waited for before the result

print("RESULT", once(), flush=True)
"""


def test_resumable_rm_during_a_local_write_stops_the_writer_as_fenced(tmp_path: Path) -> None:
    """`resumable rm` lands while the writer's checkpoint sits in its temp file: rm removes
    the temp file with the run's folder (the leftovers of killed saves), so the rename
    fails. That is the deletion, not a storage fault: FencedError (exit 73), not
    StoreError (exit 74, retried by a Job, "check that the folder exists and is
    writable"). Before: exit 74 with that StoreError."""
    store, go = tmp_path / "store", tmp_path / "go"
    script = tmp_path / "writer.py"
    script.write_text(_WRITER_HELD_BEFORE_RENAME)
    writer = subprocess.Popen([sys.executable, str(script), str(store), str(go)],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              env={**os.environ, "PYTHONUNBUFFERED": "1"})
    assert writer.stdout is not None
    try:
        assert writer.stdout.readline().startswith(b"WRITING")
        rm = subprocess.run([sys.executable, "-m", "resumable.cli", "rm", str(store), "live",
                             "--yes"], capture_output=True, text=True, timeout=60)
        assert rm.returncode == 0, rm.stderr
        go.touch()
        out, err = writer.communicate(timeout=60)
    finally:
        if writer.poll() is None:
            writer.kill()
            writer.wait()
    assert writer.returncode == EXIT_FENCED, (writer.returncode, err.decode()[-2000:])
    assert b"was deleted while this attempt" in err
    assert b"RESULT" not in out
    assert open_store(str(store)).list("live/") == []


class HookStore(DelegatingStore):
    """Runs ``hook`` once, right after the next ``on`` call ("list" or "get") whose key
    starts with ``of``: what another process does at that point of this one."""

    def __init__(self, inner: MemoryStore) -> None:
        super().__init__(inner)
        self.hook: Callable[[], None] | None = None
        self.on, self.of = "list", ""

    def _after(self, op: str, key: str) -> None:
        if op == self.on and key.startswith(self.of):
            hook, self.hook = self.hook, None
            if hook is not None:
                hook()

    def list(self, prefix: str, start_after: str | None = None) -> list[str]:
        listed = self.inner.list(prefix, start_after)
        self._after("list", prefix)
        return listed

    def get(self, key: str) -> bytes | bytearray | memoryview | None:
        found = self.inner.get(key)
        self._after("get", key)
        return found


@pytest.mark.parametrize("how", ["reset", "cli"])
def test_a_writer_that_finishes_between_rms_listing_and_its_deletions_leaves_nothing(
    how: str, memory_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`rm` lists the run, then deletes: epoch records first. A writer whose last check
    passed before its record went has written after the listing (its last checkpoints,
    rng-end, the result) and never looks again. Those must go too, or the deleted run
    comes back as complete with no attempt (f() returns the deleted run's result).
    Before: left ['ckpt-00000001-000000000003', 'result', 'rng-end']."""
    from resumable import checkpointed
    from resumable import cli as cli_module

    monkeypatch.setenv("RESUMABLE_SYNC", "1")  # each save done before the next yield
    store = HookStore(MemoryStore(memory_url.removeprefix("memory://")))

    @checkpointed(store=store, run_id="r", keep=1)
    def count(n: int, *, state: int | None = None) -> Iterator[int]:
        s = state or 0
        while s < n:
            s += 1
            yield s
        return s

    it = count.iter(3)
    assert next(it) == 1  # a live writer, between two generations
    store.hook = lambda: list(it)  # it finishes: saves, rng-end, the result
    if how == "reset":
        Run(store, "r").reset()
    else:
        monkeypatch.setattr(cli_module, "open_store", lambda url: store)
        assert cli_module.main(["rm", memory_url, "r", "--yes"]) == 0
    assert it.result == 3  # it did finish, with its checks passed
    assert store.inner.list("r/") == []


def test_a_run_deleted_while_an_attempt_loads_it_stays_deleted(memory_url: str) -> None:
    """`rm` lands between a new attempt's claim and the rewrite of its record with the
    checkpoint it resumes from (the download of a large checkpoint takes a while). The
    rewrite must not bring the deleted record back, or the attempt runs on into the
    deleted run and it reappears. Before: claim_and_load returned the deleted run's
    checkpoint and the attempt's record was back (DID NOT RAISE FencedError)."""
    store = HookStore(MemoryStore(memory_url.removeprefix("memory://")))
    a = _claimed(store)
    _write(a, 1)
    _write(a, 2)
    b = Run(store, "r", keep=None)
    # b has read the checkpoint it resumes from: rm comes before b records it
    store.on, store.of = "get", "r/ckpt-"
    store.hook = lambda: Run(store.inner, "r").reset()
    with pytest.raises(FencedError, match="is gone"):
        b.claim_and_load()
    assert store.inner.list("r/") == []
