"""Run a test's program as a Python script of its own (a fork, a signal or a hang then
happens there, not in pytest's process with its servers and threads)."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def run_script(tmp_path: Path, source: str, timeout: float = 120, **env: str
               ) -> subprocess.CompletedProcess[str]:
    """``source`` (dedented) written to ``tmp_path/script.py`` and run with this checkout
    on its path and ``env`` added to the environment; what it printed and its status."""
    script = tmp_path / "script.py"
    script.write_text(textwrap.dedent(source))
    return subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                          timeout=timeout, cwd=ROOT,
                          env=dict(os.environ, PYTHONPATH=str(ROOT), **env))
