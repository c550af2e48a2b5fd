"""A spilled state carries the CRC32C of its frames, taken as they were written: damage
to the spill file between the yield and the upload's read-back (a bad disk or page, a
process of the same user writing through /proc/<pid>/fd) is found at the read-back,
and that state is lost like one that could not be read (a StoreError naming the spill
folder, the step and the frame), never saved as a checkpoint that verifies."""

from __future__ import annotations

import os
import shutil
import tempfile
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from resumable import StoreError, checkpointed
from resumable._run import Run
from resumable._spill import _MEMORY_FS, SpillFile, _fs_type
from resumable.stores import open_store
from resumable.stores._local import LocalStore
from tests.procfiles import open_fds_in

N = 1 << 19  # 4 MiB of float64: above the 1 MiB below which a state is copied anyway
WAIT = 60.0  # seconds an event is waited for before the test fails (never slept)


@pytest.fixture
def spill_dir() -> Iterator[Path]:
    """A folder under /tmp (a disk here, as $RESUMABLE_SPILL_DIR would be); skipped where
    _spill would not use it (a folder in memory, no pwrite/preadv, no /proc)."""
    if not (hasattr(os, "pwrite") and hasattr(os, "preadv") and os.path.isdir("/proc/self/fd")):
        pytest.skip("no spill files on this platform (pwrite/preadv, /proc/self/fd)")
    folder = Path(tempfile.mkdtemp(prefix="spill-crc-", dir="/tmp"))
    try:
        kind = _fs_type(str(folder))
        if kind in _MEMORY_FS:
            pytest.skip(f"/tmp is in memory ({kind}): states are not spilled there")
        yield folder
    finally:
        shutil.rmtree(folder, ignore_errors=True)


_fds_in = open_fds_in


def _flip(fd: int, at: int) -> None:
    """Rewrite one byte of an open file through /proc (another file description)."""
    with open(f"/proc/self/fd/{fd}", "r+b") as f:
        f.seek(at)
        b = f.read(1)
        assert len(b) == 1, f"the file is shorter than {at + 1} bytes"
        f.seek(at)
        f.write(bytes([b[0] ^ 0x10]))


def _verified_checkpoints(store_dir: Path, run_id: str) -> dict[int, Any]:
    """Every checkpoint of the run that decodes and verifies (its CRC32C), by step."""
    run = Run(open_store(store_dir), run_id)
    out = {}
    for name in run.checkpoint_names():
        data = run.store.get(run.key(name))
        assert data is not None
        out[int(name[-12:])] = run._to_checkpoint(name, run._decode(name, data, "ckpt"),
                                                  True).state
    return out


class SlowFirstCheckpoint(LocalStore):
    """A local store whose first checkpoint's put waits until ``release`` is set, so
    that the next due yield comes while a save runs, and is spilled."""

    def __init__(self, root: Path) -> None:
        super().__init__(root)
        self.entered = threading.Event()
        self.release = threading.Event()

    def put(self, key: str, data: Any) -> None:
        if "/ckpt-" in key and not self.entered.is_set():
            self.entered.set()
            assert self.release.wait(WAIT), "the body never let the first checkpoint go"
        super().put(key, data)


def test_a_spilled_state_damaged_before_its_upload_is_not_saved_as_a_checkpoint(
    spill_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The reproducer of review 151: step 2 waits in the spill file while step 1
    uploads; one byte of the file is rewritten. Step 2 must not become a checkpoint that
    verifies (it did: its CRC was computed from the bytes read back); the call fails with
    a StoreError naming the folder, the step and the frame, step 1 is untouched, and the
    next attempt resumes from it and ends with the state the body computes."""
    monkeypatch.setenv("RESUMABLE_SPILL_DIR", str(spill_dir))
    store = SlowFirstCheckpoint(tmp_path / "store")
    damage = {"on": True, "done": False}

    @checkpointed(store=store, every="generation", run_id="spill-crc", capture_rng=False)
    def body(*, state: Any = None) -> Any:
        state = state if state is not None else {"gen": 0, "x": np.zeros(N)}
        while state["gen"] < 2:
            state["gen"] += 1
            state["x"] = np.full(N, float(state["gen"]))
            yield state
            if damage["on"] and state["gen"] == 1:
                assert store.entered.wait(WAIT), "the first checkpoint's put never began"
            elif damage["on"] and state["gen"] == 2:  # spilled: a save runs
                fds = _fds_in(spill_dir)
                assert fds, f"step 2 was not spilled to {spill_dir}"
                for fd in fds:  # one byte of the array (past its first 8 KiB)
                    _flip(fd, 8 * 1000 + 7)
                damage["done"] = True
                store.release.set()
        return state["gen"]

    error: StoreError | None = None
    try:
        body()
    except StoreError as err:
        error = err
    store.release.set()  # (whatever happened: no put may wait any more)
    assert damage["done"]

    saved = _verified_checkpoints(tmp_path / "store", "spill-crc")
    for step, state in saved.items():
        assert np.array_equal(state["x"], np.full(N, float(state["gen"]))), (
            f"checkpoint {step} verifies but holds other bits than the body yielded "
            f"(gen {state['gen']}): the spill file's damage was saved as good")
    gens = sorted(state["gen"] for state in saved.values())
    assert gens == [1], f"only step 1 may be saved, found the states of gens {gens}"

    assert error is not None, "the damaged spilled state was not reported"
    text = str(error)
    assert str(spill_dir) in text, text
    assert "step 2" in text and "damaged" in text and "frame 1" in text, text
    assert "not saved" in text and "untouched" in text, text
    # not only the disk: the body waits at its yield, other threads of the application do
    # not, and one changing the arrays while they were written is reported the same way
    assert "another thread" in text, text

    latest = body.latest()
    assert latest is not None and latest.state["gen"] == 1
    assert np.array_equal(latest.state["x"], np.full(N, 1.0))

    damage["on"] = False  # the next attempt (a new pod) resumes from step 1
    assert body() == 2
    latest = body.latest()
    assert latest is not None and latest.state["gen"] == 2
    assert np.array_equal(latest.state["x"], np.full(N, 2.0))


def _frames(stream: bytes, arrays: list[np.ndarray]) -> list[Any]:
    return [stream, *(a.data.cast("B") for a in arrays)]


def test_damage_to_a_large_spilled_frame_is_a_store_error_naming_it(spill_dir: Path) -> None:
    """SpillFile directly: small frames then a large one; one byte of the large one
    rewritten. The read-back raises the read error's StoreError, naming the step, the
    frame, the folder; newer states then wait in memory (the disk is suspect), and the
    file is free again."""
    spill = SpillFile(str(spill_dir), "test")
    try:
        small = [np.full(100, float(i)) for i in range(3)]  # 800 bytes each
        large = np.arange(N, dtype="<f8")
        spilled = spill.spill(7, _frames(b"stream", [*small, large]), N * 8 + 2400)
        assert spilled is not None and spilled.slot.fd is not None
        _flip(spilled.slot.fd, 3 * 800 + 12345)  # frame 4 (the first out-of-band is 1)
        with pytest.raises(StoreError) as info:
            spilled.collect(None)
        text = str(info.value)
        assert "step 7" in text and "frame 4" in text and str(spill_dir) in text, text
        assert "damaged" in text and "not saved" in text, text
        assert spill.failed and not spill.usable
        assert all(slot.owner is None and not slot.busy for slot in spill._slots)
    finally:
        spill.close()


def test_damage_to_a_batch_of_small_spilled_frames_is_found(spill_dir: Path) -> None:
    """Small frames are written in batches; a byte rewritten in one of them is found."""
    spill = SpillFile(str(spill_dir), "test")
    try:
        arrays = [np.full(32, float(i)) for i in range(5000)]  # 256 bytes each, 1.2 MiB
        spilled = spill.spill(3, _frames(b"s", arrays), 5000 * 256)
        assert spilled is not None and spilled.slot.fd is not None
        _flip(spilled.slot.fd, 4321 * 256 + 100)  # in frame 4322
        with pytest.raises(StoreError) as info:
            spilled.collect(None)
        text = str(info.value)
        assert "step 3" in text and "damaged" in text and str(spill_dir) in text, text
    finally:
        spill.close()


def test_an_undamaged_spill_reads_back_exactly(spill_dir: Path) -> None:
    """The CRCs kept with a spilled state do not change what is read back (mixed frames,
    a file reused for a second state), and take no second file."""
    spill = SpillFile(str(spill_dir), "test")
    try:
        for round_ in range(2):
            arrays = [np.full(32, float(i + round_)) for i in range(3000)]
            arrays.insert(1000, np.arange(N, dtype="<f8") + round_)
            arrays.append(np.full(70000, 5.0 + round_, dtype="<f4"))
            spilled = spill.spill(round_, _frames(b"stream", arrays),
                                  sum(a.nbytes for a in arrays))
            assert spilled is not None
            back = spilled.collect(None)
            assert back[0] == b"stream" and len(back) == len(arrays) + 1
            for a, b in zip(arrays, back[1:], strict=True):
                assert bytes(b) == a.tobytes()
        assert len(_fds_in(spill_dir)) == 1
    finally:
        spill.close()
