"""Review 59 of 158f7bb: iterators advanced by other threads, a closed iterator beside a
run in another thread, and a second SIGTERM as a finished call raises.

Real SIGTERMs to real child processes; the points are chosen by profile hooks or by the
children themselves, not by timing.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

from resumable._errors import EXIT_SIGTERM
from resumable._run import Run
from resumable.stores import open_store

ROOT = Path(__file__).resolve().parents[1]


def _run(tmp_path: Path, code: str, *args: str, interactive: bool = False,
         env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """``code`` as a child script, given its store folder (``tmp_path/store``) and
    ``args``; ``interactive``: under ``python -i`` (stdin is empty either way); ``env``:
    variables set for it."""
    script = tmp_path / "child.py"
    script.write_text(textwrap.dedent(code))
    return subprocess.run(
        [sys.executable, *(["-i"] if interactive else []), str(script),
         str(tmp_path / "store"), *args],
        capture_output=True, text=True, timeout=90, cwd=ROOT, stdin=subprocess.DEVNULL,
        env=dict(os.environ, PYTHONPATH=str(ROOT), **(env or {})))


_POOL = """
    import concurrent.futures, os, signal, sys, threading
    from resumable import checkpointed

    @checkpointed(store=sys.argv[1], run_id="r", every=1000)
    def f(n, *, state=None):
        s = state or 0
        while s < n:
            s += 1
            yield s

    it = f.iter(10)
    pool = concurrent.futures.ThreadPoolExecutor(1)
    assert next(it) == 1
    while True:
        s = pool.submit(next, it).result()  # a pool thread advances it; this one consumes
        if s == 3:
            if sys.argv[2] == "sigterm":
                os.kill(os.getpid(), signal.SIGTERM)  # the consumer works on 3
                threading.Event().wait(60)
            break
    print("ended with the iterator open", flush=True)
"""


def test_an_iterator_a_pool_thread_advances_is_saved_at_sigterm_and_at_exit(
    tmp_path: Path
) -> None:
    """158f7bb took the thread that last advanced the iterator for the run's: at a
    SIGTERM no consumer was stopped (the watchdog interrupted the idle pool thread after
    the timeout, 40 s, and nothing was saved), and at exit the state was not saved."""
    proc = _run(tmp_path, _POOL, "sigterm")
    assert proc.returncode == EXIT_SIGTERM, proc.stderr[-3000:]
    assert "reached no yield" not in proc.stderr, proc.stderr[-3000:]
    latest = Run(open_store(tmp_path / "store"), "r").load_latest()
    assert latest is not None and (latest.step, latest.state) == (3, 3)

    (tmp_path / "exit").mkdir()
    proc = _run(tmp_path / "exit", _POOL, "exit")
    assert proc.returncode == 0 and "ended with the iterator open" in proc.stdout, proc.stderr
    latest = Run(open_store(tmp_path / "exit" / "store"), "r").load_latest()
    assert latest is not None and (latest.step, latest.state) == (3, 3)


_CLOSE_BESIDE_A_THREAD = """
    import os, signal, sys, threading
    import resumable
    from resumable import checkpointed
    from resumable._decorator import _Execution
    resumable.install_signal_handlers()
    store = sys.argv[1]

    @checkpointed(store=store, run_id="a")
    def a(n, *, state=None):
        s = state or 0
        while s < n:
            s += 1
            yield s

    in_body = threading.Event()

    @checkpointed(store=store, run_id="b")
    def b(n, *, state=None):
        s = state or 0
        while s < n:
            s += 1
            in_body.set()
            threading.Event().wait(0.05)  # a generation's work
            yield s

    worker = threading.Thread(target=lambda: b(10**6), daemon=True)
    worker.start()
    assert in_body.wait(60)

    def hook(frame, event, arg):  # the SIGTERM as the closed iterator saves
        if event == "call" and frame.f_code is _Execution._flush_last.__code__:
            sys.setprofile(None)
            os.kill(os.getpid(), signal.SIGTERM)

    for s in a.iter(10):
        if s == 2:
            sys.setprofile(hook)
            break
    worker.join(60)
    print("went on after the SIGTERM", flush=True)
"""


def test_a_sigterm_as_an_iterator_closes_beside_a_run_in_a_thread_ends_the_program(
    tmp_path: Path
) -> None:
    """The closed iterator's SIGTERM was sent again while the other thread's run was
    still there: it only flagged that run, which saved and ended, and the program went
    on to exit 0. It is sent again once no run is left: both saved, then it ends us."""
    proc = _run(tmp_path, _CLOSE_BESIDE_A_THREAD)
    assert proc.returncode in (-15, EXIT_SIGTERM), (proc.returncode, proc.stderr[-3000:])
    assert "went on" not in proc.stdout
    store = open_store(tmp_path / "store")
    a, b = (Run(store, name).load_latest() for name in "ab")
    assert a is not None and a.state == 2
    assert b is not None and b.state >= 1


_SECOND_AS_IT_RAISES = """
    import os, signal, sys
    from resumable import checkpointed, _signals
    from resumable._uploader import Uploader

    @checkpointed(store=sys.argv[1], run_id="r")
    def f(n, *, state=None):
        s = state or 0
        while s < n:
            s += 1
            yield s
        return s

    targets = [Uploader.close.__code__, _signals.chain_once.__code__]
    def hook(frame, event, arg):  # one SIGTERM in the cleanup, one as it raises
        if event == "call" and targets and frame.f_code is targets[0]:
            targets.pop(0)
            if not targets:
                sys.setprofile(None)
            os.kill(os.getpid(), signal.SIGTERM)
    sys.setprofile(hook)
    print("result", f(3), flush=True)
"""


def test_a_second_sigterm_as_a_finished_call_raises_leaves_the_exit_143(
    tmp_path: Path
) -> None:
    """The second SIGTERM came after the run left and before the call raised
    Terminated: taken for one after an error the program caught, it was served afresh,
    and the default action ended the process by the signal (-15)."""
    proc = _run(tmp_path, _SECOND_AS_IT_RAISES)
    assert proc.returncode == EXIT_SIGTERM, (proc.returncode, proc.stderr[-3000:])
    assert "result" not in proc.stdout
