"""Overhead of this tree against an older commit's, interleaved, on the same server.

A ratio of ``@checkpointed`` to a plain loop moves with the machine's day: on the 2-core
VM the same code measured 1.33 one day and 1.66 another at 64 MiB against
``rclone serve s3``, more than the margins issue 13 asks to keep. Whether a change made
the loop slower is therefore measured here as an A/B: the child of ``overhead.py`` (one
block of generations with a numpy state, yielded every generation) runs once with a
plain loop and once under each tree's ``resumable``, in alternating order, against one
server, repeat after repeat; each ratio is over the plain block of its own repeat.

The baseline tree is ``git archive <rev>`` of this checkout (default 4e2f920, the code
issue 13 measured its "today" on); its own ``benchmarks/overhead.py --child`` runs it, so
each tree is timed by the loop it shipped with (the two loops are the same numpy work).

    python benchmarks/compare.py                      # 16 and 64 MiB against rclone
    python benchmarks/compare.py --baseline HEAD~5 --sizes 64 --store moto
    python benchmarks/compare.py --quick
"""

from __future__ import annotations

import io
import json
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

import _common

NAME = "compare"
BASELINE = "4e2f920"  # main when issue 13 was filed: the code its "today" column measured
WARMUP = 2  # as overhead.py: the first measured intervals hold one-time costs


def baseline_tree(rev: str, into: Path) -> str:
    """Extract ``git archive rev`` of this checkout into ``into``; its full commit id."""
    try:
        full = subprocess.run(["git", "-C", str(_common.ROOT), "rev-parse", "--verify",
                               f"{rev}^{{commit}}"], capture_output=True, text=True,
                              check=True).stdout.strip()
        data = subprocess.run(["git", "-C", str(_common.ROOT), "archive", full],
                              capture_output=True, check=True).stdout
    except (OSError, subprocess.CalledProcessError) as err:
        detail = getattr(err, "stderr", b"") or b""
        if isinstance(detail, bytes):
            detail = detail.decode(errors="replace")
        raise SystemExit(f"compare.py: cannot take the baseline {rev!r} from the git checkout "
                         f"at {_common.ROOT} ({detail.strip() or err}); run it in a clone "
                         "with history, or pass --baseline <commit>") from None
    with tarfile.open(fileobj=io.BytesIO(data)) as tar:
        tar.extractall(into, filter="data")
    return full


def run_block(tree: Path, spec: dict[str, Any], env: dict[str, str]) -> list[float]:
    """One block of the tree's own overhead.py child; its per-generation intervals."""
    child_env = _common.child_env(env)
    child_env["PYTHONPATH"] = str(tree)  # that tree's resumable, nothing else
    proc = subprocess.run(
        [sys.executable, str(tree / "benchmarks" / "overhead.py"), "--child", json.dumps(spec)],
        capture_output=True, text=True, env=child_env, timeout=900, cwd=tree)
    if proc.returncode != 0:
        raise RuntimeError(f"{tree}: child {spec} failed ({proc.returncode}):\n"
                           f"{proc.stderr[-3000:]}")
    intervals: list[float] = json.loads(proc.stdout.strip().splitlines()[-1])["intervals"]
    return intervals


def main() -> int:
    ap = _common.parser(__doc__.splitlines()[0])
    ap.add_argument("--baseline", default=BASELINE,
                    help=f"the commit to compare with (default {BASELINE})")
    ap.add_argument("--sizes", default=None, help="MiB, comma-separated (default 16,64)")
    ap.add_argument("--store", default="rclone", choices=("rclone", "moto", "local"))
    ap.add_argument("--generations", type=int, default=None,
                    help="generations per block (default 40; --quick 4)")
    ap.add_argument("--repeats", type=int, default=None, help="default 8; --quick 1")
    ap.add_argument("--work-ms", type=float, default=None,
                    help="numpy work per generation (default 100; --quick 20)")
    args = ap.parse_args()
    sizes = [float(s) for s in (args.sizes or ("0.25" if args.quick else "16,64")).split(",")]
    gens = args.generations or (4 if args.quick else 40)
    repeats = args.repeats or (1 if args.quick else 8)
    work_ms = args.work_ms or (20.0 if args.quick else 100.0)

    import _servers

    t0 = time.perf_counter()
    load_start = _common.load_average()
    blocks: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="bench-compare-") as tmp:
        trees = {"this tree": _common.ROOT, "baseline": Path(tmp) / "baseline"}
        baseline_commit = baseline_tree(args.baseline, trees["baseline"])
        calib = {}
        for mib in sizes:
            proc = subprocess.run(
                [sys.executable, str(_common.HERE / "overhead.py"), "--calibrate",
                 json.dumps([int(mib * _common.MiB), work_ms])],
                capture_output=True, text=True, env=_common.child_env(), check=True)
            calib[mib] = json.loads(proc.stdout)["fill_units"]
        if args.store == "local":
            server = None
            url, env = str(Path(tmp) / "store"), {}
        else:
            server = _servers.server(args.store)
            srv = server.__enter__()
            url, env = srv.new_store_url("compare"), srv.env
        try:
            for rep in range(repeats):
                for mib in sizes:
                    order = ["this tree", "baseline"][::1 if rep % 2 == 0 else -1]
                    for who in ["plain", *order]:
                        spec = {"mode": "none" if who == "plain" else "checkpointed",
                                "store": url, "size_bytes": int(mib * _common.MiB),
                                "gens": gens, "seed": rep, "key": f"c-{uuid.uuid4().hex[:12]}",
                                "fill_units": calib[mib]}
                        tree = trees["this tree" if who == "plain" else who]
                        intervals = run_block(tree, spec, env)
                        blocks.append({"tree": who, "size_mib": mib, "repeat": rep,
                                       "intervals": intervals})
                        print(f"  {mib:6g} MiB  repeat {rep}  {who:9}  "
                              f"{statistics.mean(intervals) * 1000:7.1f} ms/gen",
                              file=sys.stderr, flush=True)
        finally:
            if server is not None:
                server.__exit__(None, None, None)

    cases = []
    for mib in sizes:
        plain = {b["repeat"]: b["intervals"] for b in blocks
                 if b["size_mib"] == mib and b["tree"] == "plain"}
        for who in ("this tree", "baseline"):
            bs = [b for b in blocks if b["size_mib"] == mib and b["tree"] == who]
            ratios = [statistics.mean(b["intervals"]) / statistics.mean(plain[b["repeat"]])
                      for b in bs]
            steady = [statistics.mean(b["intervals"][WARMUP:])
                      / statistics.mean(plain[b["repeat"]][WARMUP:])
                      for b in bs if len(b["intervals"]) > WARMUP]
            cases.append({"size_mib": mib, "tree": who,
                          "commit": baseline_commit if who == "baseline" else _common.commit(),
                          "ratio": statistics.median(ratios), "ratios": ratios,
                          "ratio_min": min(ratios), "ratio_max": max(ratios),
                          "ratio_after_warmup": statistics.median(steady) if steady else None,
                          "ratios_after_warmup": steady})
        this, base = cases[-2], cases[-1]
        # per repeat: this tree's ratio minus the baseline's, both over the same plain block
        diffs = [a - b for a, b in zip(this["ratios"], base["ratios"], strict=True)]
        this["minus_baseline_median"] = statistics.median(diffs)
        this["faster_in_repeats"] = sum(d < 0 for d in diffs)

    payload = {
        "benchmark": NAME,
        "config": {"quick": args.quick, "baseline": args.baseline,
                   "baseline_commit": baseline_commit, "store": args.store,
                   "sizes_mib": sizes, "generations_per_block": gens, "repeats": repeats,
                   "work_ms": work_ms, "loadavg_at_start": load_start,
                   "wall_seconds": time.perf_counter() - t0},
        "machine": _common.machine(),
        "cases": cases,
        "blocks": blocks,
    }
    path = _common.write_json(args.out, NAME, payload)
    rows = []
    for c in cases:
        versus = ""
        if "minus_baseline_median" in c:
            versus = (f"{c['minus_baseline_median']:+.3f} (lower in {c['faster_in_repeats']} "
                      f"of {len(c['ratios'])})")
        rows.append([f"{c['size_mib']:g} MiB", c["tree"],
                     (c["commit"] or "?")[:9] if c["tree"] == "baseline" else c["commit"],
                     f"{c['ratio']:.3f} ({c['ratio_min']:.3f}-{c['ratio_max']:.3f})",
                     "-" if c["ratio_after_warmup"] is None else f"{c['ratio_after_warmup']:.3f}",
                     versus])
    print(f"## @checkpointed against a plain loop, this tree and {args.baseline}, "
          f"{args.store}, every generation ({repeats} x {gens - 1} generations, interleaved)\n")
    print(_common.markdown_table(
        ["state", "tree", "commit", "ratio to plain: median (min-max)",
         "from generation 4 on", "this tree minus baseline, per repeat: median"], rows))
    print(f"\nload average at start {load_start}, at end {_common.load_average()}; "
          f"results: {path}")
    if not args.no_plot:
        plot(cases, sizes, args.out / f"{NAME}.png", args.baseline)
    return 0


def plot(cases: list[dict[str, Any]], sizes: list[float], path: Path, baseline: str) -> None:
    plt = _common.pyplot()
    if plt is None:
        return
    fig, ax = plt.subplots(figsize=(5.0, 3.6))
    for i, (who, color) in enumerate((("this tree", "#55a868"), ("baseline", "#8172b2"))):
        for j, mib in enumerate(sizes):
            c = next(c for c in cases if c["size_mib"] == mib and c["tree"] == who)
            x = j + (i - 0.5) * 0.38
            ax.scatter([x] * len(c["ratios"]), c["ratios"], color=color, s=12, alpha=0.6)
            ax.bar(x, c["ratio"], width=0.38, color=color, alpha=0.5,
                   label=(who if who == "this tree" else f"baseline {baseline}") if j == 0
                   else None)
    ax.set_xticks(range(len(sizes)), [f"{m:g} MiB" for m in sizes])
    ax.set_ylabel("ratio to a plain loop (dots: repeats)")
    ax.axhline(1.0, color="gray", lw=0.8)
    ax.legend(fontsize=8)
    _common.save_figure(plt, fig, path)


if __name__ == "__main__":
    sys.exit(main())
