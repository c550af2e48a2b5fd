"""The final state at the body's return is always saved (DESIGN: `every`), also with every=n
or a duration when the last yield was not due. It is saved as the body left it, after its
code past that yield, so it is marked final: `f.latest()` gives it, and no resume or
extension starts from it (review 115: one that did differed from an uninterrupted run)."""

from __future__ import annotations

import json
import logging
import os
import random
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from resumable import SerializationError, _format, checkpointed
from resumable._run import Run
from resumable.stores import open_store


class _Unpicklable:
    def __reduce__(self) -> Any:
        raise TypeError("not today")


_BREAK_RESULT = {"on": False}


def _evolve(store: Path, every: Any, keep: int | None = 3, restarts: int = 0,
            fail_at: int | None = None) -> Any:
    failed: set[int] = set()

    @checkpointed(store=str(store), every=every, ignore=["gens"], run_id="ga", keep=keep,
                  restarts=restarts)
    def evolve(gens: int, *, state: Any = None) -> Any:
        if state is None:
            random.seed(1)
            state = {"gen": 0, "pop": [random.random() for _ in range(8)]}
        while state["gen"] < gens:
            if state["gen"] + 1 == fail_at and fail_at not in failed:
                failed.add(fail_at)
                raise RuntimeError("a generation that fails once")
            state["gen"] += 1
            state["pop"] = [x + random.gauss(0, 1) for x in state["pop"]]
            yield state
        # after the loop, as DEAP scripts do: sort to report, draw a tie-break
        state["pop"].sort()
        random.random()
        if _BREAK_RESULT["on"]:
            return _Unpicklable()
        return state["pop"][0]

    return evolve


def _yielded_at(step: int) -> list[float]:
    random.seed(1)
    pop = [random.random() for _ in range(8)]
    for _ in range(step):
        pop = [x + random.gauss(0, 1) for x in pop]
    return pop


def _names(store: Path) -> list[str]:
    return Run(open_store(str(store)), "ga").checkpoint_names()


@pytest.mark.parametrize("every", [5, "1h", 100])
def test_the_final_state_is_saved_when_the_body_returns(tmp_path: Path, every: Any) -> None:
    """With every=n or a duration a last yield that was not due was not saved at all at
    the return (since 036754e): f.latest() gave an older step, or None."""
    evolve = _evolve(tmp_path, every, keep=None)
    evolve(12)
    latest = evolve.latest(12)
    assert latest is not None and latest.step == 12 and latest.final
    assert latest.state["gen"] == 12
    assert latest.state["pop"] == sorted(_yielded_at(12))  # as the body left it
    steps = [int(n.rsplit("-", 1)[1]) for n in _names(tmp_path)]
    assert steps[-1] == 12 and set(steps) <= {5, 10, 12}


def test_a_final_state_that_was_yielded_is_no_final_checkpoint(tmp_path: Path) -> None:
    """every='generation' (and a last yield that was due) saves the yielded state itself,
    as before: an ordinary checkpoint, which a resume may start from."""
    for every, gens in (("generation", 12), (5, 10)):
        root = tmp_path / str(every)
        evolve = _evolve(root, every)
        evolve(gens)
        latest = evolve.latest(gens)
        assert latest is not None and latest.step == gens and not latest.final
        assert latest.state["pop"] == _yielded_at(gens)


@pytest.mark.parametrize("every", [5, "1h", 100])
@pytest.mark.parametrize("keep", [1, 2, None])
def test_an_extension_never_starts_from_the_final_state(tmp_path: Path, every: Any,
                                                        keep: int | None,
                                                        caplog: pytest.LogCaptureFixture) -> None:
    """It begins at the last yielded state that was saved (or afresh, with the RNG of the
    first start), and ends as an uninterrupted run does; keep=1 keeps that state too."""
    evolve = _evolve(tmp_path / "a", every, keep=keep)
    evolve(12)
    if keep is not None:
        kept = _names(tmp_path / "a")
        assert len(kept) == (2 if every == 5 else 1)  # (5 and 10 went with keep=1)
    with caplog.at_level(logging.INFO, logger="resumable"):
        extended = evolve(20)
    assert extended == _evolve(tmp_path / "b", every)(20)
    text = caplog.text
    if every == 5:
        assert "from ckpt-00000001-000000000010: step 10" in text
    else:
        assert "starting run" in text and "fresh" in text


@pytest.mark.parametrize("every", [5, 100])
def test_a_crash_between_the_final_state_and_the_result(tmp_path: Path, every: Any) -> None:
    """The final checkpoint is written, the result is not (it cannot be pickled here; a
    SIGKILL does the same): the next call redoes the generations since the last yielded
    state saved, and returns what an uninterrupted run does."""
    evolve = _evolve(tmp_path / "a", every)
    _BREAK_RESULT["on"] = True
    try:
        with pytest.raises(SerializationError):
            evolve(12)
    finally:
        _BREAK_RESULT["on"] = False
    latest = evolve.latest(12)
    assert latest is not None and latest.final and latest.step == 12
    assert evolve(12) == _evolve(tmp_path / "b", every)(12)


def test_a_restart_in_an_extension_does_not_start_from_the_final_state(tmp_path: Path) -> None:
    """The extension's first new generation fails before anything of it is saved: the
    in-process restart reloads the store's newest state it may resume from."""
    _evolve(tmp_path / "a", 5)(12)
    again = _evolve(tmp_path / "a", 5, restarts=1, fail_at=11)
    assert again(20) == _evolve(tmp_path / "b", 5)(20)


def test_the_final_flag_is_part_of_what_is_verified() -> None:
    """It is a header flag, covered by the checksum (and the signature): a flipped flag
    fails verification, it does not turn a final state into one resumed from."""
    for key in (None, b"k" * 32):
        encoded = _format.encode([b"", b"state"], kind="ckpt", serializer="pickle", step=3,
                                 epoch=1, created=0.0, name="r/ckpt", key=key, final=True)
        data = b"".join(bytes(memoryview(f).cast("B")) for f in encoded)
        decoded = _format.decode(data, name="r/ckpt", key=key)
        assert decoded.header.final and decoded.header.step == 3
        plain = _format.encode([b"", b"state"], kind="ckpt", serializer="pickle", step=3,
                               epoch=1, created=0.0, name="r/ckpt", key=key)
        data_plain = b"".join(bytes(memoryview(f).cast("B")) for f in plain)
        assert not _format.decode(data_plain, name="r/ckpt", key=key).header.final
        # flags: u16 after the magic (8) and the version (u16)
        flipped = bytearray(data)
        flipped[10] ^= _format.FLAG_FINAL
        with pytest.raises(_format.InvalidObject):
            _format.decode(bytes(flipped), name="r/ckpt", key=key)
        unknown = bytearray(data)
        unknown[11] ^= 0x80
        with pytest.raises(_format.InvalidObject):
            _format.decode(bytes(unknown), name="r/ckpt", key=key)


def test_the_cli_marks_the_final_checkpoint(tmp_path: Path) -> None:
    evolve = _evolve(tmp_path, 5, keep=None)
    evolve(12)
    env = {k: v for k, v in os.environ.items() if not k.startswith("RESUMABLE_")}

    def cli(*argv: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "resumable", *argv], capture_output=True,
                              text=True, env=env, timeout=60)

    shown = cli("show", str(tmp_path), "ga", "--json")
    assert shown.returncode == 0, shown.stderr
    objects = {o["name"]: o for o in json.loads(shown.stdout)["objects"]}
    assert objects["ckpt-00000001-000000000012"]["final"] is True, objects
    assert objects["ckpt-00000001-000000000010"]["final"] is False
    table = cli("show", str(tmp_path), "ga")
    row = next(line for line in table.stdout.splitlines()
               if line.startswith("ckpt-00000001-000000000012"))
    assert "12 final" in row
    verified = cli("verify", str(tmp_path), "ga")
    assert verified.returncode == 0, verified.stdout + verified.stderr
    listed = cli("ls", str(tmp_path), "--json")
    assert listed.returncode == 0, listed.stderr


# -- review 160 ---------------------------------------------------------------------------


@pytest.mark.parametrize("keep", [1, 2, None])
def test_extensions_in_a_row_keep_the_checkpoint_a_resume_starts_from(
        tmp_path: Path, keep: int | None, caplog: pytest.LogCaptureFixture) -> None:
    """Calls with 12, 13, 14, then 16 generations: each leaves a final state. The final of
    an older attempt sorted after the next attempt's base, so it was taken for a zombie's
    write (warned about, never read): retention then kept it as the checkpoint to resume
    from and deleted step 10, and the fourth call started over (review 160)."""
    for gens in (12, 13, 14):
        _evolve(tmp_path / "a", 5, keep=keep)(gens)
        assert "ckpt-00000001-000000000010" in _names(tmp_path / "a"), (gens, _names(
            tmp_path / "a"))
    with caplog.at_level(logging.INFO, logger="resumable"):
        assert _evolve(tmp_path / "a", 5, keep=keep)(16) == _evolve(tmp_path / "b", 5)(16)
    assert "from ckpt-00000001-000000000010: step 10" in caplog.text
    assert "took over" not in caplog.text  # (no attempt was superseded)


_UNPICKLED: list[int] = []
_UNPICKLING_FAILS = {"on": False}


def _report(value: int) -> Any:
    _UNPICKLED.append(value)
    if _UNPICKLING_FAILS["on"]:
        raise AttributeError("Can't get attribute 'Report' (its class was renamed)")
    return value


class _Report:
    """Put into the state only after the loop: never in a yielded state."""

    def __init__(self, value: int) -> None:
        self.value = value

    def __reduce__(self) -> Any:
        return (_report, (self.value,))


def test_a_resume_does_not_read_the_final_state(tmp_path: Path) -> None:
    """It was downloaded and unpickled whole, then passed over (twice the state in memory at
    a resume), and one that no longer unpickled (a class renamed since) stopped the resume
    with a SerializationError (review 160)."""
    @checkpointed(store=str(tmp_path), every=5, ignore=["gens"], run_id="r")
    def evolve(gens: int, *, state: Any = None) -> Any:
        state = state or {"gen": 0}
        while state["gen"] < gens:
            state["gen"] += 1
            yield state
        state["report"] = _Report(state["gen"])
        return state["gen"]

    evolve(12)
    del _UNPICKLED[:]
    _UNPICKLING_FAILS["on"] = True
    try:
        assert evolve(14) == 14
    finally:
        _UNPICKLING_FAILS["on"] = False
    assert _UNPICKLED == []


def test_a_final_state_is_newer_than_what_older_readers_read(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Its flag was unknown to a resumable from before it, which took the object for
    damage ("unknown flags 0x2"), and with no other checkpoint advised `resumable rm`
    (review 160). It is format version 3, which such a reader says was written by a newer
    resumable; every other object stays version 2."""
    evolve = _evolve(tmp_path, 5, keep=None)
    evolve(12)
    folder = tmp_path / "ga"
    final = (folder / "ckpt-00000001-000000000012").read_bytes()
    assert _format.read_header(final).version == 3
    assert _format.read_header((folder / "ckpt-00000001-000000000010").read_bytes()).version \
        == 2
    assert _format.read_header((folder / "result").read_bytes()).version == 2
    monkeypatch.setattr(_format, "READABLE_VERSIONS", (1, 2))
    with pytest.raises(_format.InvalidObject) as info:
        _format.decode(final)
    assert info.value.newer, info.value.reason


def test_a_damaged_final_state_alone_does_not_stop_an_extension(tmp_path: Path) -> None:
    """every=100: the final state is the run's only checkpoint. Damaged, it stopped the
    extension with CheckpointCorruptError and the advice to delete the run (its result
    and history), though a resume passes over it anyway (review 160): it starts afresh,
    with the RNG of the first start."""
    evolve = _evolve(tmp_path / "a", 100)
    evolve(12)
    path = tmp_path / "a" / "ga" / "ckpt-00000001-000000000012"
    data = bytearray(path.read_bytes())
    data[-1] ^= 0xFF
    path.write_bytes(bytes(data))
    assert evolve(20) == _evolve(tmp_path / "b", 100)(20)


def test_only_a_checkpoint_can_be_marked_final(tmp_path: Path) -> None:
    """The flag on a result record was accepted and ignored (review 160)."""
    with pytest.raises(ValueError, match="only a checkpoint"):
        _format.encode([b"x"], kind="result", serializer="pickle", created=0.0, final=True)
    encoded = _format.encode([b"x"], kind="ckpt", serializer="pickle", created=0.0,
                             final=True, name="r/result")
    data = bytearray(b"".join(bytes(memoryview(f).cast("B")) for f in encoded))
    kind_at = data.index(b"ckpt")
    data[kind_at:kind_at + 4] = b"rslt"  # (the same length; its checksum is set again)
    with pytest.raises(_format.InvalidObject, match="marked as a final checkpoint"):
        _format.read_header(bytes(data))


# -- review 161 ---------------------------------------------------------------------------


def _write(run: Run, step: int, final: bool = False, fenced: bool = True) -> None:
    """A save of ``run``; without ``fenced`` it passed its fence check before a newer
    attempt took over, and lands after (a zombie's write, as in test_fencing.py)."""
    snap = run.snapshot({"step": step, "epoch": run.epoch}, step, None)
    snap.final = final
    if not fenced:
        run.check_fenced = lambda: None  # type: ignore[method-assign]
    try:
        run.write_checkpoint(snap)
    finally:
        run.__dict__.pop("check_fenced", None)


@pytest.mark.parametrize("kind", ["a newer attempt's final", "a stray object",
                                  "another run's final"])
def test_a_zombie_write_is_still_superseded(kind: str) -> None:
    """An attempt's record noted the newest checkpoint name listed as seen: a newer
    attempt's final state, or a stray object named like a checkpoint, then made a zombie's
    later writes look legitimate, and the next resume started from one (review 161). So
    did, when only older finals were noted, a final of another run copied in under an
    older attempt's name, taken for one by its header alone (review 162)."""
    from resumable.stores._memory import MemoryStore

    store = MemoryStore(f"zombie-{kind.split()[1]}-{kind.split()[-1]}")
    zombie = Run(store, "r", keep=None)
    zombie.claim_and_load()
    _write(zombie, 10)
    _write(zombie, 20)
    b = Run(store, "r", keep=None)
    if kind == "a stray object":
        store.put("r/ckpt-00000099-000000000000", [b"not a checkpoint"])
    elif kind == "another run's final":
        other = Run(store, "other", keep=None)
        other.claim_and_load()
        _write(other, 99, final=True)
        blob = bytes(memoryview(store.get("other/ckpt-00000001-000000000099") or b""))
        store.put("r/ckpt-00000001-000000000099", [blob])
    else:
        load = b.load_latest

        def racing(**kwargs: Any) -> Any:  # C claims after B, before B lists
            c = Run(store, "r", keep=None)
            c.claim_and_load()
            _write(c, 25, final=True)
            return load(**kwargs)

        b.load_latest = racing  # type: ignore[method-assign]
    assert b.claim_and_load() is not None
    _write(zombie, 30, fenced=False)
    latest = Run(store, "r", keep=None).load_latest()
    assert latest is not None and latest.key == "r/ckpt-00000001-000000000020", latest


def test_an_attempt_record_without_seen_does_not_make_a_final_a_zombie_write(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """A resumable from before final states (a rollback of the image) extends the run and
    writes its record without 'seen': the final it passed over sorts after its base, and
    was warned about as a zombie's write at every later resume (review 161)."""
    _evolve(tmp_path / "a", 5)(12)
    older = Run(open_store(str(tmp_path / "a")), "ga")
    older.claim_epoch(pending=True)
    older.record_base("ckpt-00000001-000000000010")  # (its record, as it wrote it)
    with caplog.at_level(logging.INFO, logger="resumable"):
        assert _evolve(tmp_path / "a", 5)(14) == _evolve(tmp_path / "b", 5)(14)
    assert "took over" not in caplog.text
    assert "from ckpt-00000001-000000000010: step 10" in caplog.text


def test_a_final_state_that_cannot_be_pickled_is_named_so(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """The warning called it "the state yielded at step 12", which was never yielded."""
    import threading

    @checkpointed(store=str(tmp_path), every=5, run_id="r")
    def evolve(*, state: Any = None) -> Any:
        state = state or {"gen": 0}
        while state["gen"] < 12:
            state["gen"] += 1
            yield state
        state["lock"] = threading.Lock()
        return state["gen"]

    with caplog.at_level(logging.WARNING, logger="resumable"):
        assert evolve() == 12
    assert "the state the body left at its return (after step 12)" in caplog.text
    assert "yielded at step 12" not in caplog.text
    latest = evolve.latest()
    assert latest is not None and latest.step == 10 and not latest.final


def test_ls_marks_a_final_newest_checkpoint(tmp_path: Path) -> None:
    """`ls` showed the final state's step as the run's newest, unmarked, though a resume
    starts from an older one (review 161)."""
    _evolve(tmp_path, 5)(12)
    env = {k: v for k, v in os.environ.items() if not k.startswith("RESUMABLE_")}
    def ls(*argv: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "resumable", "ls", str(tmp_path), *argv],
                              capture_output=True, text=True, env=env, timeout=60)

    listed = ls("--check", "--json")
    assert listed.returncode == 0, listed.stderr
    row = json.loads(listed.stdout)["runs"][0]
    assert row["newest_step"] == 12 and row["newest_final"] is True, row
    assert "12 final" in ls("--check").stdout
    # (without --check ls reads no header, for its speed: not known)
    assert json.loads(ls("--json").stdout)["runs"][0]["newest_final"] is None


def test_a_sigterm_during_the_final_save_names_the_step_a_resume_starts_from(
        tmp_path: Path) -> None:
    """The line said "saved at step 12": the final state's, which no resume starts from
    (review 161); the run is complete, so it is an extension that starts older (review
    162)."""
    script = tmp_path / "term.py"
    script.write_text(f"""
import os, signal
from resumable import checkpointed

@checkpointed(store={str(tmp_path / "s")!r}, every=5, run_id="r")
def evolve(*, state=None):
    state = state or {{"gen": 0}}
    while state["gen"] < 12:
        state["gen"] += 1
        yield state
    os.kill(os.getpid(), signal.SIGTERM)  # (the body is not interrupted: it returns)
    return state["gen"]

evolve()
""")
    env = {k: v for k, v in os.environ.items() if not k.startswith("RESUMABLE_")}
    proc = subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                          env=env, timeout=60)
    assert proc.returncode == 143, proc.stderr[-3000:]
    assert ("saved at step 12 (its final state, and its result; an extension starts from "
            "step 10)" in proc.stderr), proc.stderr[-3000:]


def test_a_superseded_checkpoint_is_not_downloaded_to_see_whether_it_is_final() -> None:
    """On a store that cannot read the first bytes alone (a subclass with its own get:
    decompressing, checking), each zombie's checkpoint was read whole at every resume to
    look at its header, and dropped (review 162)."""
    from resumable.stores._memory import MemoryStore

    reads: list[str] = []

    class Counting(MemoryStore):
        def get(self, key: str) -> Any:
            reads.append(key.rsplit("/", 1)[1])
            return super().get(key)

    store = Counting("zombie-cost")
    zombie = Run(store, "r", keep=None)
    zombie.claim_and_load()
    _write(zombie, 10)
    _write(zombie, 20)
    Run(store, "r", keep=None).claim_and_load()
    _write(zombie, 30, fenced=False)
    del reads[:]
    latest = Run(store, "r", keep=None).load_latest()
    assert latest is not None and latest.key == "r/ckpt-00000001-000000000020"
    assert "ckpt-00000001-000000000030" not in reads, reads


def test_ls_says_not_known_for_a_header_it_cannot_read(tmp_path: Path) -> None:
    """`ls --check` reported newest_final false (known not final) for a damaged header
    (review 162): null."""
    _evolve(tmp_path, 5)(12)
    path = tmp_path / "ga" / "ckpt-00000001-000000000012"
    data = bytearray(path.read_bytes())
    data[12] ^= 0xFF  # (the header length)
    path.write_bytes(bytes(data))
    env = {k: v for k, v in os.environ.items() if not k.startswith("RESUMABLE_")}
    listed = subprocess.run([sys.executable, "-m", "resumable", "ls", str(tmp_path), "--check",
                             "--json"], capture_output=True, text=True, env=env, timeout=60)
    row = json.loads(listed.stdout)["runs"][0]
    assert row["newest_problem"] and row["newest_final"] is None, row


@pytest.mark.parametrize("every", [5, "1h"])
@pytest.mark.parametrize("then", ["an extension under way", "going back"])
def test_latest_gives_an_older_attempts_final_state_while_it_is_the_newest(
        tmp_path: Path, every: Any, then: str, caplog: pytest.LogCaptureFixture) -> None:
    """An extension that has saved nothing yet (watched from elsewhere, or killed before
    its first due save), or a call going back, wrote nothing after the final state: f.latest()
    took it for a zombie's write, warned so, and gave an older checkpoint (review 163)."""
    evolve = _evolve(tmp_path, every, keep=None)
    evolve(12)
    if then == "going back":
        evolve(10)
    else:
        it = evolve.iter(40)
        assert next(it)["gen"] == (11 if every == 5 else 1)  # (claimed; nothing saved)
    with caplog.at_level(logging.WARNING, logger="resumable"):
        latest = evolve.latest(12)
    # (going back with every="1h" starts afresh, nothing due to resume from: it leaves
    # a final state of its own, step 10)
    newest = 10 if then == "going back" and every == "1h" else 12
    assert latest is not None and latest.step == newest and latest.final, latest
    assert "took over" not in caplog.text, caplog.text
    if then != "going back":
        it.close()


def test_latest_tells_an_older_final_on_a_store_that_reads_whole_objects(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """On a store class with its own get (no head beside it) f.latest() still took an
    older attempt's final for a zombie's write after a call going back (review 164)."""
    from resumable.stores._local import LocalStore

    class Checking(LocalStore):
        def get(self, key: str) -> Any:
            return super().get(key)

    @checkpointed(store=Checking(str(tmp_path)), every=5, ignore=["gens"], run_id="ga")
    def evolve(gens: int, *, state: Any = None) -> Any:
        state = state or {"gen": 0}
        while state["gen"] < gens:
            state["gen"] += 1
            yield state
        return state["gen"]

    evolve(12)
    evolve(10)  # (going back: resumes from step 10, and writes nothing)
    with caplog.at_level(logging.WARNING, logger="resumable"):
        latest = evolve.latest(12)
    assert latest is not None and latest.step == 12 and latest.final, latest
    assert "took over" not in caplog.text, caplog.text


def test_a_zombies_final_is_shown_by_latest_and_never_resumed_from() -> None:
    """A final state written just after a newer attempt took over (the attempt was fenced
    as it ended) looks like one there before: f.latest() shows it, as README's Fencing says;
    a resume starts from the newer attempt's base all the same (review 164)."""
    from resumable.stores._memory import MemoryStore

    store = MemoryStore("zombie-final")
    zombie = Run(store, "r", keep=None)
    zombie.claim_and_load()
    _write(zombie, 5)
    _write(zombie, 10)
    newer = Run(store, "r", keep=None)
    assert newer.claim_and_load() is not None
    _write(zombie, 12, final=True, fenced=False)
    shown = Run(store, "r", keep=None).load_latest(finals=True)
    assert shown is not None and shown.final and shown.step == 12
    resumed = Run(store, "r", keep=None).load_latest()
    assert resumed is not None and resumed.key == "r/ckpt-00000001-000000000010"


def test_retention_forgets_the_names_it_deletes() -> None:
    """The names retention knows to be resumable (or final) grew by one at every save of
    a long run, deleted ones too."""
    from resumable.stores._memory import MemoryStore

    run = Run(MemoryStore("forgets"), "r", keep=2)
    run.claim_and_load()
    for step in range(1, 21):
        _write(run, step)
    assert run._resumable == set(run.checkpoint_names()) and len(run._resumable) == 2
