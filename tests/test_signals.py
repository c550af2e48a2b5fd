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
