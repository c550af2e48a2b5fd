"""SIGTERM at awkward moments still ends in a saved state and exit status 143."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

from resumable._errors import EXIT_SIGTERM
from resumable._run import Run
from resumable.stores import open_store

ROOT = Path(__file__).resolve().parents[1]

_DURING_FINAL_SAVE = """
import os, signal, time
from resumable import checkpointed
from resumable.stores._local import LocalStore

class SignallingStore(LocalStore):
    def put(self, key, data):
        if key.endswith("-000000000003"):
            os.kill(os.getpid(), signal.SIGTERM)  # arrives while the last state is saved
            time.sleep(0.2)
        super().put(key, data)

@checkpointed(store=SignallingStore({store!r}), run_id="r", every=1)
def f(n, *, state=None):
    state = state or 0
    while state < n:
        state += 1
        yield state
    return state

print("result", f(3), flush=True)
time.sleep(0.5)
print("still running after SIGTERM", flush=True)
"""

_DURING_CONSUMER = """
import os, signal, time
from resumable import checkpointed

@checkpointed(store={store!r}, run_id="r", every=1000)
def f(n, *, state=None):
    state = state or 0
    while state < n:
        state += 1
        yield state

for s in f.iter(100):
    if s == 3:
        os.kill(os.getpid(), signal.SIGTERM)  # the consumer is working on state 3
        time.sleep(0.5)
        break
print("still running after SIGTERM", flush=True)
"""


def run_script(tmp_path: Path, source: str) -> subprocess.CompletedProcess[str]:
    script = tmp_path / "script.py"
    script.write_text(textwrap.dedent(source.format(store=str(tmp_path / "store"))))
    return subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                          timeout=60, cwd=ROOT)


def test_sigterm_during_the_final_save_still_exits_143(tmp_path: Path) -> None:
    """A SIGTERM that lands while the last state is being saved is not swallowed."""
    proc = run_script(tmp_path, _DURING_FINAL_SAVE)
    assert proc.returncode == EXIT_SIGTERM, proc.stderr
    assert "still running" not in proc.stdout
    run = Run(open_store(str(tmp_path / "store")), "r")
    assert run.load_result() == (True, 3)


def test_sigterm_while_an_iter_consumer_works_saves_and_exits(tmp_path: Path) -> None:
    """With f.iter, SIGTERM during the consumer's work saves the state it holds and exits."""
    proc = run_script(tmp_path, _DURING_CONSUMER)
    assert proc.returncode == EXIT_SIGTERM, proc.stderr
    assert "still running" not in proc.stdout
    latest = Run(open_store(str(tmp_path / "store")), "r").load_latest()
    assert latest is not None and latest.step == 3 and latest.state == 3


_WHILE_HOLDING_A_LOG_LOCK = """
import logging, os, signal, sys, time
from resumable import checkpointed
from resumable.stores._local import LocalStore

logging.basicConfig(level=logging.INFO, stream=sys.stderr)
handler = logging.getLogger().handlers[0]

class LoggingStore(LocalStore):
    def put(self, key, data):
        if "/ckpt-" in key:  # the upload thread logs, as retries do
            logging.getLogger("resumable").warning("put %s", key)
        super().put(key, data)

@checkpointed(store=LoggingStore({store!r}), run_id="r")
def f(n, *, state=None):
    s = state or 0
    while s < n:
        s += 1
        yield s

for s in f.iter(100):
    if s == 3:
        with handler.lock:  # the consumer is inside a log call when SIGTERM comes
            os.kill(os.getpid(), signal.SIGTERM)
            for _ in range(10):
                pass
print("still running after SIGTERM", flush=True)
"""

_CLEANUP_RAISES = """
import os, signal, time
from resumable import checkpointed

@checkpointed(store={store!r}, run_id="r")
def f(n, *, state=None):
    s = state or 0
    try:
        while s < n:
            s += 1
            yield s
    finally:
        raise ValueError("cleanup failed")

try:
    for s in f.iter(10):
        if s == 2:
            break
except ValueError:
    pass
os.kill(os.getpid(), signal.SIGTERM)  # no run is active: the default action applies
time.sleep(2)
print("still running after SIGTERM", flush=True)
"""


def test_sigterm_while_the_consumer_holds_a_lock_does_not_hang(tmp_path: Path) -> None:
    """The handler does no blocking work, so a lock the consumer holds cannot deadlock it."""
    proc = run_script(tmp_path, _WHILE_HOLDING_A_LOG_LOCK)
    assert proc.returncode == EXIT_SIGTERM, proc.stderr[-2000:]
    latest = Run(open_store(str(tmp_path / "store")), "r").load_latest()
    assert latest is not None and latest.step == 3


def test_handler_is_restored_even_when_the_body_cleanup_raises(tmp_path: Path) -> None:
    """A body whose finally raises still leaves the process's SIGTERM handling as it was."""
    proc = run_script(tmp_path, _CLEANUP_RAISES)
    assert proc.returncode == -15, (proc.returncode, proc.stderr[-2000:])
    assert "still running" not in proc.stdout
