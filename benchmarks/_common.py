"""Shared helpers for the benchmark scripts: arguments, results, tables, plots, memory.

Every benchmark writes ``<out>/<name>.json`` (machine-readable), prints a markdown
table on stdout and, when matplotlib is installed, draws ``<out>/<name>.png``.
"""

from __future__ import annotations

import argparse
import datetime as _dt
import json
import math
import os
import platform
import resource
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
DEFAULT_OUT = HERE / "results"
MiB = 1024 * 1024


class _Parser(argparse.ArgumentParser):
    """--out defaults to results/ for full runs and results/quick/ for --quick ones, so a
    quick try never overwrites the full runs' figures the README quotes."""

    def parse_args(self, *args: Any, **kwargs: Any) -> Any:  # type: ignore[override]
        ns = super().parse_args(*args, **kwargs)
        if getattr(ns, "out", None) is None:
            ns.out = DEFAULT_OUT / "quick" if ns.quick else DEFAULT_OUT
        return ns


def parser(description: str) -> argparse.ArgumentParser:
    p = _Parser(description=description)
    p.add_argument("--quick", action="store_true",
                   help="tiny configuration that finishes in seconds (CI runs this)")
    p.add_argument("--out", type=Path, default=None,
                   help=f"folder for <name>.json and <name>.png (default {DEFAULT_OUT}, "
                        "or its quick/ folder with --quick)")
    p.add_argument("--no-plot", action="store_true", help="skip the PNG")
    return p


def machine() -> dict[str, Any]:
    info: dict[str, Any] = {
        "python": platform.python_version(),
        "platform": platform.platform(),
        "cpus": os.cpu_count(),
        "loadavg_at_end": load_average(),
    }
    try:
        import numpy

        info["numpy"] = numpy.__version__
    except ImportError:
        pass
    try:
        import resumable

        info["resumable"] = resumable.__version__
    except ImportError:
        pass
    return info


def load_average() -> list[float] | None:
    """1, 5 and 15 minute load averages: other work on the machine moves timings."""
    try:
        return [round(x, 2) for x in os.getloadavg()]
    except OSError:
        return None


def commit() -> str | None:
    """The git commit measured (with -dirty when the tree has changes), if in a checkout."""
    import subprocess

    try:
        head = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"],
                              capture_output=True, text=True, check=True).stdout.strip()
        dirty = subprocess.run(["git", "-C", str(ROOT), "status", "--porcelain",
                                "--untracked-files=no"],
                               capture_output=True, text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return None
    return head + ("-dirty" if dirty else "")


def write_json(out: Path, name: str, payload: dict[str, Any]) -> Path:
    out.mkdir(parents=True, exist_ok=True)
    doc = {
        "benchmark": name,
        "created": _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds"),
        "machine": machine(),
        "commit": commit(),
        **payload,
    }
    path = out / f"{name}.json"
    path.write_text(json.dumps(doc, indent=2, sort_keys=False) + "\n")
    return path


def markdown_table(headers: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    def cell(v: Any) -> str:
        return str(v)

    lines = ["| " + " | ".join(headers) + " |",
             "| " + " | ".join("---" if i == 0 else "---:" for i in range(len(headers))) + " |"]
    lines += ["| " + " | ".join(cell(v) for v in r) + " |" for r in rows]
    return "\n".join(lines)


def pyplot() -> Any | None:
    """matplotlib.pyplot on the Agg backend, or None when matplotlib is missing."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("matplotlib is not installed: no PNG (pip install 'resumable[bench]')",
              file=sys.stderr)
        return None
    return plt


def save_figure(plt: Any, fig: Any, path: Path) -> None:
    """Lay out, write the PNG every benchmark embeds in the README, and say where."""
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    print(f"plot: {path}")


def wilson(successes: int, n: int, z: float = 1.959963984540054) -> tuple[float, float]:
    """The 95 % Wilson score interval for a binomial proportion."""
    if n == 0:
        return (0.0, 1.0)
    p = successes / n
    denom = 1 + z * z / n
    centre = (p + z * z / (2 * n)) / denom
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / denom
    return (max(0.0, centre - half), min(1.0, centre + half))


def peak_rss_bytes() -> int:
    """This process's peak resident set size so far.

    On Linux this is VmHWM, which starts afresh at exec; ``ru_maxrss`` does not: a
    child inherits its parent's high-water mark at fork, so it would report the parent.
    """
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return int(kib) * (1 if sys.platform == "darwin" else 1024)


def process_cpu_seconds(pid: int) -> float | None:
    """User plus system CPU time of process ``pid`` (Linux, 10 ms ticks), else None."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def current_rss_bytes() -> int:
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except OSError:
        import psutil

        return int(psutil.Process().memory_info().rss)


def child_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    """Environment for benchmark subprocesses: the repo importable, logging quiet."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(
        p for p in (str(ROOT), str(ROOT / "tests"), env.get("PYTHONPATH", "")) if p
    )
    if extra:
        env.update(extra)
    return env


def fmt_pct(x: float, digits: int = 2) -> str:
    return f"{100 * x:.{digits}f} %"


def fmt_mib(n: float) -> str:
    return f"{n / MiB:.0f} MiB" if n >= MiB else f"{n / 1024:.0f} KiB"
