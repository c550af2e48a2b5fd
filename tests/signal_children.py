"""Child processes for the signal tests: start one from a script's source, wait for a
file it makes (an event, not a sleep), and collect it without leaving it behind."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import threading
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[1]
ENV = dict(os.environ, PYTHONPATH=str(ROOT), RESUMABLE_TERM_TIMEOUT="20")


def spawn(tmp_path: Path, source: str, *args: str, **popen: Any) -> subprocess.Popen[str]:
    script = tmp_path / "child.py"
    script.write_text(textwrap.dedent(source))
    return subprocess.Popen([sys.executable, str(script), *args], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=ENV, **popen)


def wait_for(path: Path, proc: subprocess.Popen[str], inside: bool = False) -> None:
    """Until ``path`` exists (``inside``: until a file is in that folder), which the child
    makes, or the child ends (a failure, with its stderr)."""
    done = threading.Event()
    threading.Thread(target=lambda: (proc.wait(), done.set()), daemon=True).start()
    while not (any(path.iterdir()) if inside else path.exists()):
        if done.wait(0.01):
            _, err = proc.communicate()
            pytest.fail(f"the child ended first: {err[-3000:]}")


def finish(proc: subprocess.Popen[str], group: bool = False) -> tuple[str, str]:
    """Its output once it ends; killed (its process group too) if it has not in 120 s."""
    try:
        return proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            if group:
                os.killpg(proc.pid, 9)
            else:
                proc.kill()
            proc.communicate()
