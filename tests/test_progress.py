"""The progress bar: generations, rate and checkpoint age on a terminal; nothing in a log."""

from __future__ import annotations

import os
import pty
import subprocess
import sys
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

SCRIPT = """
import time
from resumable import checkpointed

@checkpointed(store={store!r}, progress="generations")
def count(generations, *, state=None):
    state = state or 0
    while state < generations:
        time.sleep(0.02)
        state += 1
        yield state

count(20)
"""


def _script(tmp_path: Path) -> Path:
    path = tmp_path / "bar.py"
    path.write_text(textwrap.dedent(SCRIPT.format(store=str(tmp_path / "store"))))
    return path


def test_bar_on_a_terminal(tmp_path: Path) -> None:
    """Under a pseudo-terminal the bar shows the total, the step and the checkpoint age."""
    pid, fd = pty.fork()
    if pid == 0:  # child: stdout and stderr are the terminal
        os.chdir(ROOT)
        os.execv(sys.executable, [sys.executable, str(_script(tmp_path))])
    output = b""
    while True:
        try:
            chunk = os.read(fd, 4096)
        except OSError:  # the child closed the terminal
            break
        if not chunk:
            break
        output += chunk
    _, status = os.waitpid(pid, 0)
    text = output.decode(errors="replace")
    assert os.waitstatus_to_exitcode(status) == 0, text
    assert "20/20" in text and "gen" in text
    assert "step 20" in text and "checkpoint" in text


def test_no_bar_without_a_terminal(tmp_path: Path) -> None:
    """With output to a pipe (a pod's log) the bar stays quiet."""
    proc = subprocess.run([sys.executable, str(_script(tmp_path))], capture_output=True,
                          text=True, timeout=60, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == "" and "gen/s" not in proc.stderr and "20/20" not in proc.stderr
