"""The progress bar: generations, rate and checkpoint age on a terminal; nothing in a log."""

from __future__ import annotations

import fcntl
import os
import pty
import struct
import subprocess
import sys
import termios
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


def _on_terminal(tmp_path: Path, source: str) -> str:
    """Run ``source`` with stdout and stderr on a pseudo-terminal; its output."""
    path = tmp_path / "script.py"
    path.write_text(textwrap.dedent(source))
    pid, fd = pty.fork()
    if pid == 0:
        # 200 columns: a bare pty reports 0x0 and the bar falls back to 80, which can cut
        # the postfix items this test looks for.
        fcntl.ioctl(1, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 200, 0, 0))
        os.chdir(ROOT)
        os.execv(sys.executable, [sys.executable, "-W", "ignore", str(path)])
    output = b""
    while True:
        try:
            chunk = os.read(fd, 4096)
        except OSError:
            break
        if not chunk:
            break
        output += chunk
    _, status = os.waitpid(pid, 0)
    text = output.decode(errors="replace")
    assert os.waitstatus_to_exitcode(status) == 0, text
    return text


def test_callable_progress_shows_its_items(tmp_path: Path) -> None:
    """progress=state -> dict: its items show on the bar; one that raises is dropped, the
    run goes on."""
    text = _on_terminal(tmp_path, f"""
        from resumable import checkpointed

        @checkpointed(store={str(tmp_path / 's')!r},
                      progress=lambda s: {{"best": s / 8, "diversity": 3}})
        def count(n, *, state=None):
            state = state or 0
            while state < n:
                state += 1
                yield state

        @checkpointed(store={str(tmp_path / 's')!r}, progress=lambda s: 1 / 0)
        def broken(n, *, state=None):
            state = state or 0
            while state < n:
                state += 1
                yield state

        print("results", count(4), broken(3))
        """)
    assert "best=0.5" in text and "diversity=3" in text and "step 4" in text
    assert "results 4 3" in text and "ZeroDivisionError" in text


def test_integrations_show_generations_and_best_fitness(tmp_path: Path) -> None:
    """progress=True on an integration: the total of generations and the best fitness."""
    text = _on_terminal(tmp_path, f"""
        import random
        from tests.workers import integrations_worker as w
        from resumable.integrations.deap import ea_simple

        tb = w._deap_toolbox()
        random.seed(1)
        pop, log = ea_simple(tb.population(n=10), tb, 0.5, 0.2, 5, verbose=False,
                             store={str(tmp_path / 's')!r}, progress=True)
        print("best", max(ind.fitness.values[0] for ind in pop))
        """)
    assert "6/6" in text and "best=" in text


def test_progress_option_is_validated() -> None:
    import pytest

    from resumable import ConfigurationError, checkpointed

    for bad in (1.5, -1, object()):
        with pytest.raises(ConfigurationError, match="progress"):
            @checkpointed(progress=bad)
            def f(*, state: object = None) -> object:
                yield state


def test_progress_naming_no_argument_is_refused_at_decoration() -> None:
    """progress="generatoins" (a typo) showed a bar with no total, silently."""
    import pytest

    from resumable import ConfigurationError, checkpointed
    from resumable._progress import Bar

    def f(generations: int = 5, *, state: object = None) -> object:
        yield state

    for bad in ("generatoins", Bar(total="generatoins"), "state"):
        with pytest.raises(ConfigurationError, match=r"generatoins|state.*'generations'"):
            checkpointed(progress=bad)(f)
    checkpointed(progress="generations")(f)  # the right name is taken

    def g(*, state: object = None, **options: object) -> object:
        yield state

    checkpointed(progress="generations")(g)  # may come through **options
