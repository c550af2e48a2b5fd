"""The verified format, and what the reader does with damaged, foreign or tampered objects."""

from __future__ import annotations

import logging
import os
import pickle
import shutil
import struct
import time
from pathlib import Path
from typing import Any

import crc32c
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from resumable import CheckpointCorruptError, CheckpointTamperedError, checkpointed
from resumable._aligned import address, aligned_copy
from resumable._format import InvalidObject, decode, encode, read_header
from resumable._run import Run
from resumable.stores import open_store
from tests.toy import Crash, Faults, make_evolve

KEY = b"k" * 32


def sample(key: bytes | None = None) -> bytes:
    frames = [b"rng", pickle.dumps({"a": list(range(20))}), bytes(range(256))]
    parts = encode(frames, kind="ckpt", serializer="pickle", step=7, epoch=2,
                   created=1_700_000_000.0, key=key)
    return b"".join(bytes(p) for p in parts)


def test_round_trip() -> None:
    """decode gives back the frames and header fields that encode wrote."""
    data = sample()
    d = decode(data, kind="ckpt")
    assert d.header.step == 7 and d.header.epoch == 2 and d.header.serializer == "pickle"
    assert [bytes(f) for f in d.frames][2] == bytes(range(256))


# The reader must never unpickle: decode only returns views, so "never unpickled" is
# checked by asserting that every damaged input fails *inside decode*.


@given(st.binary(max_size=4096))
def test_random_bytes_are_rejected(data: bytes) -> None:
    """Arbitrary bytes always fail verification with InvalidObject, nothing else."""
    with pytest.raises(InvalidObject):
        decode(data)


@given(st.data())
def test_any_bit_flip_is_detected(data: st.DataObject) -> None:
    """Flipping any single bit of an unsigned object is detected."""
    blob = bytearray(sample())
    bit = data.draw(st.integers(0, len(blob) * 8 - 1))
    blob[bit // 8] ^= 1 << (bit % 8)
    with pytest.raises(InvalidObject):
        decode(blob)


@given(st.data())
def test_any_bit_flip_of_signed_object_is_detected_with_key(data: st.DataObject) -> None:
    """With a key, any single flipped bit of a signed object is detected."""
    blob = bytearray(sample(KEY))
    bit = data.draw(st.integers(0, len(blob) * 8 - 1))
    blob[bit // 8] ^= 1 << (bit % 8)
    with pytest.raises(InvalidObject):
        decode(blob, key=KEY)


@given(st.data())
def test_any_truncation_or_extension_is_detected(data: st.DataObject) -> None:
    """Cutting the object anywhere, or appending bytes, is detected."""
    blob = sample()
    cut = data.draw(st.integers(0, len(blob) - 1))
    with pytest.raises(InvalidObject):
        decode(blob[:cut])
    extra = data.draw(st.binary(min_size=1, max_size=64))
    with pytest.raises(InvalidObject):
        decode(blob + extra)


def test_signatures() -> None:
    """Unsigned with a key, wrong key, and altered-and-rehashed objects are tampered."""
    with pytest.raises(InvalidObject) as missing:
        decode(sample(), key=KEY)
    assert missing.value.tampered
    with pytest.raises(InvalidObject) as wrong:
        decode(sample(b"x" * 32), key=KEY)
    assert wrong.value.tampered
    decode(sample(KEY))  # without a key, a signed object still verifies by checksum
    # an attacker who rewrites the payload and recomputes the digest still lacks the key
    forged = encode([b"rng", pickle.dumps("evil"), b""], kind="ckpt", serializer="pickle",
                    step=7, epoch=2, created=1.0, key=b"attacker-key-123456")
    with pytest.raises(InvalidObject) as forged_info:
        decode(b"".join(bytes(p) for p in forged), key=KEY)
    assert forged_info.value.tampered


@given(st.lists(st.integers(0, 3000), max_size=24), st.booleans())
def test_frames_start_on_64_byte_boundaries(sizes: list[int], signed: bool) -> None:
    """Any frames: each starts at a multiple of 64, in the object and in aligned memory."""
    frames = [bytes([i % 251 + 1]) * n for i, n in enumerate(sizes)]
    key = KEY if signed else None
    parts = encode(frames, kind="ckpt", serializer="pickle", step=1, created=1.0, key=key)
    blob = b"".join(bytes(p) for p in parts)
    assert len(blob) % 64 == 0
    # the checksum S3 gets is the whole object's, computed in the same pass
    assert parts.crc32c == (None if signed else crc32c.crc32c(blob))
    decoded = decode(aligned_copy(blob), key=key)
    assert [bytes(f) for f in decoded.frames] == frames
    assert all(offset % 64 == 0 for offset in decoded.header.frame_offsets())
    assert all(address(f) % 64 == 0 for f in decoded.frames if f.nbytes)


@given(st.binary(max_size=300), st.binary(max_size=300))
def test_crc_combination_equals_hashing_the_concatenation(a: bytes, b: bytes) -> None:
    """combine(crc(a), crc(b), len(b)) is crc(a + b): the one-pass checksums rely on it."""
    from resumable import _crc

    assert _crc.combine(crc32c.crc32c(a), crc32c.crc32c(b), len(b)) == crc32c.crc32c(a + b)


def test_large_buffers_are_hashed_in_parallel_pieces_to_the_same_crc() -> None:
    """The multi-core CRC of a large buffer equals the one-pass CRC."""
    from resumable import _crc

    data = np.random.default_rng(3).bytes((32 << 20) + 7)
    assert _crc.of(data) == crc32c.crc32c(data)


def _newer(blob: bytearray) -> bytearray:
    """``blob`` as a newer version would write it: another version number, and a digest
    no version of this library computes (a version field changed alone is a flipped bit:
    the object verifies with it put back)."""
    from resumable._format import _DIGEST_AT

    struct.pack_into("<H", blob, 8, 4)
    blob[_DIGEST_AT] ^= 0xFF
    return blob


def test_a_newer_format_version_fails_clearly() -> None:
    """An object of a version this library does not know says to upgrade."""
    blob = _newer(bytearray(sample()))
    with pytest.raises(InvalidObject, match=r"version 4 .*upgrade resumable"):
        decode(blob)


V1_STORE = Path(__file__).parent / "data" / "v1-store"  # see data/make_v1_store.py


def v1_expected(generation: int) -> tuple[np.ndarray, np.ndarray]:
    x = np.arange(1001) * 0.25 * generation
    return x, np.asfortranarray(np.ones((7, 5), dtype=np.int32) * 2**generation)


def test_version_1_objects_still_load(tmp_path: Path) -> None:
    """A run written in format version 1 resumes; its arrays come back aligned anyway."""
    shutil.copytree(V1_STORE, tmp_path / "store")
    store = str(tmp_path / "store")
    ckpt = tmp_path / "store" / "v1-run" / "ckpt-00000001-000000000002"
    assert read_header(ckpt.read_bytes()).version == 1
    seen = []

    @checkpointed(store=store, run_id="v1-run", keep=None, capture_rng=False)
    def grow(*, state: Any = None) -> Any:
        seen.append({"generation": state["generation"], "x": state["x"], "f": state["f"].copy("K"),
                     "x_at": state["x"].ctypes.data, "f_at": state["f"].ctypes.data})
        while state["generation"] < 4:
            state["generation"] += 1
            state["x"] = state["x"] + np.arange(1001) * 0.25
            state["f"] *= 2
            yield state
        return state["generation"]

    assert grow() == 4
    resumed = seen[0]
    x, f = v1_expected(2)
    assert resumed["generation"] == 2
    assert resumed["x_at"] % 64 == 0 and resumed["f_at"] % 64 == 0
    assert np.array_equal(resumed["x"], x) and resumed["x"].sum() == x.sum()
    assert resumed["f"].flags.f_contiguous and np.array_equal(resumed["f"], f)
    newest = Run(open_store(store), "v1-run").load_latest()
    assert newest is not None and newest.step == 4
    assert read_header((tmp_path / "store" / newest.key).read_bytes()).version == 2


def test_the_command_line_reads_both_versions(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """show and verify accept a run holding version-1 and version-2 objects."""
    from resumable import cli

    shutil.copytree(V1_STORE, tmp_path / "store")
    store = str(tmp_path / "store")
    run = Run(open_store(store), "v1-run", keep=None)
    run.epoch = 2
    run.write_checkpoint(run.snapshot({"x": np.arange(10.0)}, 3, None))
    assert cli.main(["show", store, "v1-run", "--verify"]) == 0
    shown = capsys.readouterr().out
    assert all(n in shown for n in ("ckpt-00000001-000000000002", "ckpt-00000002-000000000003"))
    assert cli.main(["verify", store, "v1-run"]) == 0
    assert "4 object(s) verified" in capsys.readouterr().out


@given(st.data())
def test_any_bit_flip_of_a_version_1_object_is_detected(data: st.DataObject) -> None:
    """Version-1 objects are still verified (CRC32) before anything is unpickled."""
    blob = bytearray((V1_STORE / "v1-run" / "ckpt-00000001-000000000002").read_bytes())
    bit = data.draw(st.integers(0, len(blob) * 8 - 1))
    blob[bit // 8] ^= 1 << (bit % 8)
    with pytest.raises(InvalidObject):
        decode(blob)


def test_kind_is_checked() -> None:
    """A checkpoint renamed to 'result' is not accepted as a result."""
    with pytest.raises(InvalidObject, match="'ckpt'"):
        decode(sample(), kind="result")


# -- damaged checkpoints in a store ---------------------------------------------------


@pytest.fixture(autouse=True)
def _every_save_completes(monkeypatch: pytest.MonkeyPatch) -> None:
    """These tests need every generation's checkpoint on disk, so no save is coalesced."""
    monkeypatch.setenv("RESUMABLE_SYNC", "1")


def crashed_run(tmp_path: Path, **options: Any) -> tuple[Any, Path, list[Path]]:
    """A run on a local store that crashed in generation 5, with every generation kept."""
    evolve = make_evolve(Faults(crash_at={5}), store=str(tmp_path), keep=None, **options)
    with pytest.raises(Crash):
        evolve(8)
    folder = tmp_path / evolve.run_id(8)
    ckpts = sorted(folder.glob("ckpt-*"))
    assert ckpts, "the crashed run left checkpoints"
    return evolve, folder, ckpts


def flip_byte(path: Path) -> None:
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0xFF
    path.write_bytes(bytes(data))


@pytest.mark.parametrize(
    "damage",
    [
        flip_byte,
        lambda p: p.write_bytes(p.read_bytes()[: len(p.read_bytes()) // 2]),
        lambda p: p.write_bytes(b""),
    ],
    ids=["flipped-byte", "truncated", "empty"],
)
def test_damaged_newest_falls_back_to_older(
    tmp_path: Path, damage: Any, caplog: pytest.LogCaptureFixture
) -> None:
    """A damaged newest checkpoint is skipped with an error log; the run resumes from older."""
    evolve, _, ckpts = crashed_run(tmp_path)
    newest_step = int(ckpts[-1].name.rsplit("-", 1)[1])
    damage(ckpts[-1])
    with caplog.at_level(logging.ERROR, logger="resumable"):
        latest = evolve.latest(8)
    assert latest is not None and latest.step == newest_step - 1
    assert any(ckpts[-1].name in r.getMessage() and r.levelno == logging.ERROR
               for r in caplog.records)


class _Bomb:
    """Unpickling this creates a marker file: proof that something was unpickled."""

    def __init__(self, marker: str) -> None:
        self.marker = marker

    def __reduce__(self) -> Any:
        return (Path(self.marker).touch, ())


def test_foreign_pickle_named_like_newest_is_never_unpickled(tmp_path: Path) -> None:
    """A raw pickle planted as the newest checkpoint is skipped without being unpickled."""
    evolve, folder, ckpts = crashed_run(tmp_path / "store")
    marker = tmp_path / "unpickled"
    planted = folder / "ckpt-99999999-999999999999"
    planted.write_bytes(pickle.dumps(_Bomb(str(marker))))
    latest = evolve.latest(8)
    assert latest is not None and latest.key.endswith(ckpts[-1].name)
    assert not marker.exists()


def test_leftover_temp_files_are_ignored(tmp_path: Path) -> None:
    """Temp files of an interrupted write are invisible to readers and listings."""
    evolve, folder, ckpts = crashed_run(tmp_path)
    (folder / f".tmp-{ckpts[-1].name}-{'deadbeef' * 4}").write_bytes(b"partial")
    (folder / f".tmp-ckpt-99999999-999999999999-{'0' * 32}").write_bytes(b"partial")
    assert evolve.latest(8).key.endswith(ckpts[-1].name)
    assert evolve(8) is not None


def test_all_corrupt_raises_and_never_starts_over(tmp_path: Path) -> None:
    """With every checkpoint damaged the call raises CheckpointCorruptError naming the run."""
    evolve, _, ckpts = crashed_run(tmp_path)
    for p in ckpts:
        flip_byte(p)
    with pytest.raises(CheckpointCorruptError) as info:
        evolve(8)
    assert not isinstance(info.value, CheckpointTamperedError)
    assert evolve.run_id(8) in str(info.value) and "resumable verify" in str(info.value)


def test_signed_run_rejects_unsigned_and_wrongly_signed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With a signing key, unsigned or foreign-key checkpoints are tampered, never loaded."""
    evolve, _, _ = crashed_run(tmp_path)  # written without a key
    monkeypatch.setenv("RESUMABLE_SIGNING_KEY", "correct horse battery staple")
    with pytest.raises(CheckpointTamperedError, match="signature missing"):
        evolve(8)
    # a run signed with another key
    crashed_run(tmp_path / "other", signing_key="another key of 16+ bytes")
    reader = make_evolve(Faults(), store=str(tmp_path / "other"), keep=None,
                         signing_key="correct horse battery staple")
    with pytest.raises(CheckpointTamperedError, match="signature wrong"):
        reader(8)


def test_signed_run_resumes_with_its_key(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The key from $RESUMABLE_SIGNING_KEY signs and verifies; a resume works."""
    monkeypatch.setenv("RESUMABLE_SIGNING_KEY", "correct horse battery staple")
    evolve, _, ckpts = crashed_run(tmp_path)
    assert decode(ckpts[-1].read_bytes(), key=b"correct horse battery staple").header.signed
    assert isinstance(evolve(8), float)


def test_full_disk_keeps_previous_checkpoints(tmp_path: Path) -> None:
    """A write that fails for lack of space leaves the existing checkpoints readable."""
    mount = tmp_path / "small"
    mount.mkdir()
    if os.system(f"mount -t tmpfs -o size=256k tmpfs {mount} 2>/dev/null") != 0:
        pytest.skip("cannot mount a small tmpfs here (needs root)")
    try:
        big = bytearray(100 * 1024)

        @checkpointed(store=str(mount), keep=None, run_id="disk")
        def grow(*, state: Any = None) -> Any:
            state = state or {"blobs": []}
            while True:
                state["blobs"].append(bytes(big))
                yield state

        from resumable import StoreError

        with pytest.raises(StoreError, match="disk is full"):
            grow()
        run = Run(open_store(str(mount)), "disk")
        latest = run.load_latest()
        assert latest is not None and latest.step >= 1
        assert not list((mount / "disk").glob(".tmp-*"))
    finally:
        time.sleep(0.05)
        os.system(f"umount {mount}")


def test_signed_checkpoint_copied_from_another_run_is_rejected(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A validly signed checkpoint of another run, planted as this run's newest, is tampered."""
    monkeypatch.setenv("RESUMABLE_SIGNING_KEY", "correct horse battery staple")
    evolve, folder, ckpts = crashed_run(tmp_path)
    other = make_evolve(Faults(crash_at={7}), store=str(tmp_path), keep=None)
    with pytest.raises(Crash):
        other(9)  # another run (other arguments), signed with the same key
    foreign = sorted((tmp_path / other.run_id(9)).glob("ckpt-*"))[-1]
    planted = folder / "ckpt-99999999-999999999999"
    planted.write_bytes(foreign.read_bytes())
    renamed = folder / "ckpt-99999999-999999999998"
    renamed.write_bytes(ckpts[0].read_bytes())  # this run's own oldest, replayed as newer
    latest = evolve.latest(8)
    assert latest is not None and latest.key.endswith(ckpts[-1].name)
    for p in (planted, renamed):
        with pytest.raises(InvalidObject) as info:
            decode(p.read_bytes(), key=b"correct horse battery staple",
                   name=f"{evolve.run_id(8)}/{p.name}")
        assert info.value.tampered and "copied or renamed" in info.value.reason


def test_state_changing_type_between_generations(tmp_path: Path) -> None:
    """A state may change type; one that becomes unserializable fails clearly, losing nothing."""
    import threading

    @checkpointed(store=str(tmp_path), keep=None, run_id="shifty")
    def shifty(*, state: Any = None) -> Any:
        state = state if state is not None else {"g": 0}
        while True:
            g = state["g"] if isinstance(state, dict) else state[0]
            if g == 2:
                state = (3, "now a tuple")  # a harmless change of type
            elif g == 4:
                state = {"g": 5, "lock": threading.Lock()}  # no serializer can take this
            else:
                state = {"g": g + 1}
            yield state

    from resumable import SerializationError

    with pytest.raises(SerializationError, match=r"state\['lock'\] is a _thread.lock"):
        shifty()
    run = Run(open_store(str(tmp_path)), "shifty")
    latest = run.load_latest()
    assert latest is not None and latest.state == {"g": 4}  # everything before is intact
    assert [int(n.rsplit("-", 1)[1]) for n in run.checkpoint_names()] == [1, 2, 3, 4]


def _as_newer(path: Path) -> None:
    path.write_bytes(bytes(_newer(bytearray(path.read_bytes()))))


def test_checkpoints_of_a_newer_resumable_say_upgrade_not_delete(tmp_path: Path) -> None:
    """Every checkpoint written by a newer resumable (a rollback of the pods' image): the
    error was CheckpointCorruptError with the advice to delete the run, valid work
    (review 106). It says to upgrade, and names no deletion; a ConfigurationError (exit
    78), since running again with this version cannot help."""
    from resumable import ConfigurationError

    evolve, _, ckpts = crashed_run(tmp_path)
    for p in ckpts:
        _as_newer(p)
    with pytest.raises(ConfigurationError) as info:
        evolve(8)
    text = str(info.value)
    assert "newer resumable" in text and "upgrade" in text, text
    assert "resumable rm" not in text and evolve.run_id(8) in text, text
    assert not isinstance(info.value, CheckpointCorruptError)


def test_a_result_of_a_newer_resumable_says_upgrade_not_delete(tmp_path: Path) -> None:
    from resumable import ConfigurationError

    evolve, folder, _ = crashed_run(tmp_path)
    evolve(8)
    _as_newer(folder / "result")
    with pytest.raises(ConfigurationError) as info:
        evolve(8)
    assert "upgrade" in str(info.value) and "resumable rm" not in str(info.value)


def test_a_run_all_written_by_a_newer_resumable_says_upgrade(tmp_path: Path) -> None:
    """Every object of the run (its identity and attempt records too, as a newer version
    would write them): the identity record, read first, said "fails verification" with
    the advice to delete the run (review 108)."""
    from resumable import ConfigurationError

    evolve, folder, _ = crashed_run(tmp_path)
    for p in folder.iterdir():
        _as_newer(p)
    with pytest.raises(ConfigurationError) as info:
        evolve(8)
    text = str(info.value)
    assert "newer resumable" in text and "upgrade" in text, text
    assert "resumable rm" not in text, text


def test_a_flipped_bit_in_the_version_field_is_damage_not_a_newer_version() -> None:
    """Version 2 with one bit flipped reads as 258 ("written by a newer resumable:
    upgrade", which cannot help); the object verifies with its version put back, so it is
    damage (review 109)."""
    blob = bytearray(sample())
    struct.pack_into("<H", blob, 8, struct.unpack_from("<H", blob, 8)[0] ^ 0x100)
    with pytest.raises(InvalidObject) as info:
        decode(blob)
    assert not info.value.newer and "damaged" in info.value.reason, info.value.reason
    newer = _newer(bytearray(sample()))  # (no readable version makes it verify)
    with pytest.raises(InvalidObject) as info:
        decode(newer)
    assert info.value.newer


def test_a_version_field_flipped_to_0_or_read_by_the_cli_is_damage(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Review 110: `resumable verify` read the header before the flip check (still
    "newer: upgrade"), and a flip to 0 said "newer" too."""
    from resumable.cli import main

    blob = bytearray(sample())
    struct.pack_into("<H", blob, 8, 0)
    with pytest.raises(InvalidObject) as info:
        decode(blob)
    assert not info.value.newer and "no resumable writes" in info.value.reason
    _, folder, ckpts = crashed_run(tmp_path)
    data = bytearray(ckpts[-1].read_bytes())
    struct.pack_into("<H", data, 8, struct.unpack_from("<H", data, 8)[0] ^ 0x100)
    ckpts[-1].write_bytes(bytes(data))
    capsys.readouterr()
    assert main(["verify", str(tmp_path), folder.name]) == 65
    out = capsys.readouterr().out
    assert "a flipped bit" in out and "upgrade" not in out, out
