"""Large frames are copied by numpy without the GIL (``serializers._unlocked_copy``), but
only with the numpy this process has fully imported: not one half imported by another
thread, not a stand-in in ``sys.modules``. Each of these failed on bdfa786."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import types
from pathlib import Path
from unittest import mock

import pytest

from resumable.serializers import copy_frames

SIZE = 2 * 2**20  # over the 1 MiB from which numpy copies


def _copy(raw: bytes) -> bytes:
    out = copy_frames([b"stream", memoryview(raw)], lambda n: bytearray(n))
    return bytes(out[1])


@pytest.mark.parametrize("stand_in", ["mock", "stub"])
def test_a_stand_in_for_numpy_is_not_used_to_copy(monkeypatch: pytest.MonkeyPatch,
                                                  stand_in: str) -> None:
    """A MagicMock (as documentation builds mock imports) copied nothing: a checkpoint of
    buffers never filled, silently. A module without copyto raised AttributeError."""
    fake = mock.MagicMock() if stand_in == "mock" else types.ModuleType("numpy")
    monkeypatch.setitem(sys.modules, "numpy", fake)
    raw = bytes(range(256)) * (SIZE // 256)
    assert _copy(raw) == raw


def test_numpy_half_imported_by_another_thread_is_waited_for(tmp_path: Path) -> None:
    """Another thread's first ``import numpy`` takes ~0.2 s, during which sys.modules
    holds a module without most of its names: the copy raised AttributeError
    (partially initialized module). It now waits for that import to finish. A numpy
    of our own whose import blocks until told makes the moment last."""
    pkg = tmp_path / "numpy"
    pkg.mkdir()
    (pkg / "__init__.py").write_text(textwrap.dedent("""
        import builtins
        builtins.importing.set()
        assert builtins.finish.wait(60)
        uint8 = "B"
        copies = []

        def frombuffer(buffer, dtype):
            return memoryview(buffer).cast(dtype)

        def copyto(dst, src):
            copies.append(len(src))
            dst[:] = src
    """))
    script = textwrap.dedent(f"""
        import builtins, sys, threading
        sys.path.insert(0, {str(tmp_path)!r})
        builtins.importing, builtins.finish = threading.Event(), threading.Event()
        from resumable.serializers import copy_frames

        importer = threading.Thread(target=lambda: __import__("numpy"))
        importer.start()
        assert builtins.importing.wait(60)
        raw = bytes(range(256)) * ({SIZE} // 256)
        result = []

        def copy():
            try:
                out = copy_frames([b"", memoryview(raw)], lambda n: bytearray(n))
                result.append(bytes(out[1]) == raw)
            except BaseException as err:
                result.append(repr(err))

        copier = threading.Thread(target=copy)
        copier.start()
        copier.join(2)  # time for the old code to fail; the new one waits for `finish`
        builtins.finish.set()
        copier.join(60)
        importer.join(60)
        print(result, sys.modules["numpy"].copies)
    """)
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == f"[True] [{SIZE}]", proc.stdout
