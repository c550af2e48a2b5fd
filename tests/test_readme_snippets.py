"""README code blocks that are meant to run as written do run as written.

The islands snippet ("Scale out: Dask and islands") is a whole program: one island per
process, its index from $JOB_COMPLETION_INDEX. It is taken from README.md as it stands
(the first ```python block of that section that builds an ``Archipelago``), written to
a file and run as the pods of an Indexed Job would run it: every island at once, in its
own interpreter, on a temporary folder store. The README's other python blocks are
fragments (``init``, ``toolbox`` and the like are the reader's) and are not run.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
SECTION = "## Scale out: Dask and islands"
TIMEOUT = 60  # seconds per round of islands (a round takes about 2 s here)


def section(text: str, heading: str) -> str:
    """The text under ``heading`` up to the next heading of the same or a higher level."""
    lines = text.splitlines()
    level = len(heading) - len(heading.lstrip("#"))
    start = lines.index(heading) + 1
    end = len(lines)
    for i in range(start, len(lines)):
        m = re.match(r"(#+) ", lines[i])
        if m and len(m.group(1)) <= level:
            end = i
            break
    return "\n".join(lines[start:end])


def python_blocks(text: str) -> list[str]:
    return re.findall(r"^```python\n(.*?)^```$", text, flags=re.M | re.S)


def islands_snippet() -> str:
    blocks = [b for b in python_blocks(section(README.read_text(), SECTION))
              if "Archipelago(" in b]
    assert blocks, f"no ```python block building an Archipelago under {SECTION!r} in README.md"
    return blocks[0]


def write_snippet(folder: Path) -> Path:
    """The snippet as a script; a store URL written for S3 (``"s3://bucket/..."``) is
    replaced by $RESUMABLE_STORE, which the test points at a folder."""
    code = re.sub(r"""(["'])s3://[^"']*\1""", "os.environ['RESUMABLE_STORE']",
                  islands_snippet())
    script = folder / "islands_snippet.py"
    script.write_text("import os\n" + code)
    return script


def islands_of(script: Path) -> int:
    """The snippet's ``islands=``: every island must run, or its neighbours wait."""
    found = re.search(r"islands=(\d+)", script.read_text())
    assert found, "the islands snippet passes no islands=N to Archipelago"
    return int(found.group(1))


def run_islands(script: Path, store: Path) -> list[subprocess.CompletedProcess[str]]:
    """Every island as its own process, started together (they wait for each other's
    migrants), as an Indexed Job's pods run."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("RESUMABLE_")}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    env["RESUMABLE_STORE"] = str(store)
    env["RESUMABLE_MIGRATION_TIMEOUT"] = str(TIMEOUT)  # a broken snippet fails, not hangs
    procs = [subprocess.Popen([sys.executable, str(script)], cwd=script.parent,
                              env={**env, "JOB_COMPLETION_INDEX": str(i)}, text=True,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE)
             for i in range(islands_of(script))]
    done = []
    try:
        for proc in procs:
            out, err = proc.communicate(timeout=TIMEOUT)
            done.append(subprocess.CompletedProcess(proc.args, proc.returncode, out, err))
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    return done


def completed(store: Path) -> list[Path]:
    """The run folders in ``store`` that hold a result (the experiment's folder has none)."""
    return sorted(p for p in store.iterdir() if (p / "result").exists())


def test_islands_snippet_runs_as_written_and_a_second_run_returns_the_results(
        tmp_path: Path) -> None:
    script = write_snippet(tmp_path)
    store = tmp_path / "store"

    first = run_islands(script, store)
    for i, proc in enumerate(first):
        assert proc.returncode == 0, f"island {i} exited {proc.returncode}:\n{proc.stderr}"
    results = [proc.stdout for proc in first]
    assert all(out.strip() for out in results), results
    assert len(completed(store)) == len(first), sorted(store.iterdir())

    # Run again (a pod retried after the Job's work was done): every island's run is
    # complete, so each returns its stored result without running a generation.
    second = run_islands(script, store)
    for i, proc in enumerate(second):
        assert proc.returncode == 0, f"island {i} exited {proc.returncode}:\n{proc.stderr}"
    assert [proc.stdout for proc in second] == results


def test_islands_snippet_resumes_an_island_whose_result_was_lost(tmp_path: Path) -> None:
    """An island whose pod died after its last checkpoint but before its result is
    resumed from that checkpoint by a new attempt and returns what it returned before
    (it republishes nothing new: its migrants and its neighbours' are in the store)."""
    script = write_snippet(tmp_path)
    store = tmp_path / "store"
    first = run_islands(script, store)
    assert [p.returncode for p in first] == [0] * len(first), [p.stderr for p in first]

    runs = completed(store)
    lost = runs[len(runs) // 2]
    for name in ("result", "rng-end"):
        (lost / name).unlink(missing_ok=True)
    second = run_islands(script, store)
    assert [p.returncode for p in second] == [0] * len(second), [p.stderr for p in second]
    assert [p.stdout for p in second] == [p.stdout for p in first]
    assert (lost / "result").exists() and (lost / "epoch-00000002").exists()  # resumed
    others = [run for run in runs if run != lost]
    assert not any((run / "epoch-00000002").exists() for run in others)  # returned results
