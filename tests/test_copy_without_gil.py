"""Large frames are copied by numpy without the GIL (``serializers._unlocked_copy``), but
only with the numpy this process has fully imported: not one half imported by another
thread (nor waited for: a forked process never sees that import finish), not a
stand-in in ``sys.modules``. The first three failed on bdfa786; the module of mocks,
the half import not waited for and the fork failed on 214ae89."""

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


class _ModuleOfMocks(types.ModuleType):
    """What documentation builds put in sys.modules (sphinx's autodoc_mock_imports)."""

    def __getattr__(self, name: str) -> mock.MagicMock:
        return mock.MagicMock()


@pytest.mark.parametrize("stand_in", ["mock", "stub", "module of mocks"])
def test_a_stand_in_for_numpy_is_not_used_to_copy(monkeypatch: pytest.MonkeyPatch,
                                                  stand_in: str) -> None:
    """A MagicMock or a module of them (as documentation builds mock imports) copied
    nothing: a checkpoint of buffers never filled, silently. A module without copyto
    raised AttributeError."""
    fake = {"mock": mock.MagicMock(), "stub": types.ModuleType("numpy"),
            "module of mocks": _ModuleOfMocks("numpy")}[stand_in]
    monkeypatch.setitem(sys.modules, "numpy", fake)
    raw = bytes(range(256)) * (SIZE // 256)
    assert _copy(raw) == raw


# A numpy of our own whose import blocks until told: the moment another thread's first
# import is under way (~0.2 s for the real one) lasts as long as a test needs.
_HELD_NUMPY = """
import builtins
builtins.importing.set()
assert builtins.finish.wait(120)
uint8 = "B"
copies = []

class ndarray:
    pass

def frombuffer(buffer, dtype):
    return memoryview(buffer).cast(dtype)

def copyto(dst, src):
    copies.append(len(src))
    dst[:] = src
"""

_HOLD_THE_IMPORT = """
import builtins, sys, threading
sys.path.insert(0, {where!r})
builtins.importing, builtins.finish = threading.Event(), threading.Event()
importer = threading.Thread(target=lambda: __import__("numpy"))
importer.start()
assert builtins.importing.wait(60)
"""


def _held_numpy(tmp_path: Path) -> str:
    (tmp_path / "numpy").mkdir()
    (tmp_path / "numpy" / "__init__.py").write_text(_HELD_NUMPY)
    return _HOLD_THE_IMPORT.format(where=str(tmp_path))


def test_numpy_half_imported_by_another_thread_is_neither_used_nor_waited_for(
        tmp_path: Path) -> None:
    """Used, a numpy half imported raised AttributeError (partially initialized
    module); waited for, it hangs a process forked meanwhile (next test). The copy is
    made without it, while the import is still held."""
    script = _held_numpy(tmp_path) + textwrap.dedent(f"""
        from resumable.serializers import copy_frames

        raw = bytes(range(256)) * ({SIZE} // 256)
        result = []

        def copy():
            try:
                out = copy_frames([b"", memoryview(raw)], lambda n: bytearray(n))
                result.append(bytes(out[1]) == raw)
            except BaseException as err:
                result.append(repr(err))

        copier = threading.Thread(target=copy, daemon=True)
        copier.start()
        copier.join(60)  # the import is still held: a copy that waits for it never ends
        done = not copier.is_alive()
        builtins.finish.set()
        importer.join(60)
        print(done, result, sys.modules["numpy"].copies)
    """)
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "True [True] []", proc.stdout


def test_a_process_forked_while_numpy_is_half_imported_runs_its_checkpointed_call(
        tmp_path: Path) -> None:
    """multiprocessing's default start on Linux forks; a thread of the parent that was
    importing numpy does not exist in the child, so that import never finishes there.
    A pure-Python checkpointed loop in the child waited for it forever (RNG capture
    and large copies asked for numpy at every call)."""
    script = _held_numpy(tmp_path) + textwrap.dedent(f"""
        import os, signal
        from resumable import checkpointed

        @checkpointed(store={str(tmp_path / "store")!r}, run_id="worker")
        def loop(n, *, state=None):
            state = state or {{"i": 0, "blob": bytearray({SIZE})}}
            while state["i"] < n:
                state["i"] += 1
                state["blob"][state["i"]] = 1
                yield state
            return state["i"], sum(state["blob"])

        pid = os.fork()
        if pid == 0:
            signal.alarm(60)  # a child that waits for the import is killed, not hung
            os.write(1, repr(loop(5)).encode())
            os._exit(0)
        _, status = os.waitpid(pid, 0)
        builtins.finish.set()
        importer.join(60)
        print("", os.waitstatus_to_exitcode(status))
    """)
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["(5,", "5)", "0"], (proc.stdout, proc.stderr)
