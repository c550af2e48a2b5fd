"""The article's time table: restart from zero vs resume, with real processes.

A Kubernetes Job runs the GA example (``examples/ga.py``, 50 generations); its pod
dies after 30 completed generations, the replacement dies after 25 more, the third
one finishes. Each pod is a real ``python examples/ga.py`` process that the failure
kills (``--crash-at N``: the child kills itself right after generation N, so the
failure lands exactly on the article's boundary), and the next one is started like the
Job controller would start a new pod:

  no checkpoint: every pod starts over (``--fresh``: the run's checkpoints are deleted
                 first, so nothing is resumed);
  checkpoint:    every pod resumes from the newest checkpoint in the store.

Two failure modes, one row each:

  kill: SIGKILL (OOM kill, lost node): no chance to save; the checkpoint of the last
        generation may still have been uploading in the background, and is then lost.
  term: SIGTERM (preemption, eviction): resumable saves the last generation, exit 143.

The generation time is scaled down from the article's 10 s (default 50 ms, --gen-time).

    python benchmarks/resume_vs_restart.py
    python benchmarks/resume_vs_restart.py --quick
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import _common

NAME = "resume_vs_restart"
GA = _common.ROOT / "examples" / "ga.py"
ARTICLE = {"no_checkpoint": {"generations": 105, "seconds": 1050},
           "checkpoint": {"generations": 51, "seconds": 510}, "generation_seconds": 10}


def completed_generation(store: str, run_id: str) -> int:
    """The generation the next pod resumes from: the newest verified checkpoint's step."""
    from resumable._run import Run
    from resumable.stores import open_store

    latest = Run(open_store(store), run_id).load_latest(with_state=False)
    return 0 if latest is None else latest.step


def run_pod(args: list[str]) -> dict[str, Any]:
    """One pod: the GA in a child process; its wall time, output and peak RSS (wait4)."""
    t0 = time.perf_counter()
    child = subprocess.Popen([sys.executable, str(GA), *args], stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True, env=_common.child_env())
    streams: dict[str, str] = {}
    readers = [threading.Thread(target=lambda n=n, f=f: streams.__setitem__(n, f.read()))
               for n, f in (("out", child.stdout), ("err", child.stderr))]
    for r in readers:
        r.start()
    # wait4 rather than wait: it also returns the child's own resource usage.
    _, status, usage = os.wait4(child.pid, 0)
    child.returncode = os.waitstatus_to_exitcode(status)
    for r in readers:
        r.join(timeout=600)
    wall = time.perf_counter() - t0
    proc = subprocess.CompletedProcess(child.args, child.returncode, streams.get("out", ""),
                                       streams.get("err", ""))
    peak_rss = usage.ru_maxrss * 1024  # Linux reports KiB
    summary = None
    run_id = None
    for line in proc.stdout.splitlines():
        if line.startswith("{"):
            summary = json.loads(line)
        elif line.startswith("run ") and " in " in line:
            run_id = line.split()[1]
    return {"returncode": proc.returncode, "wall": wall, "summary": summary, "run_id": run_id,
            "stdout": proc.stdout, "stderr": proc.stderr[-2000:], "peak_rss": peak_rss}


def scenario(mode: str, checkpoint: bool, failures: list[int], generations: int,
             gen_time: float, population: int, store: str) -> dict[str, Any]:
    """Run pods until the GA completes; the i-th pod fails after failures[i] generations."""
    base = ["--store", store, "--generations", str(generations), "--population",
            str(population), "--gen-time", str(gen_time), "--json-summary", "-q"]
    pods: list[dict[str, Any]] = []
    run_id: str | None = None
    for attempt in range(len(failures) + 1):
        start = 0
        if checkpoint and run_id is not None:
            start = completed_generation(store, run_id)
        extra: list[str] = []
        if not checkpoint:
            extra.append("--fresh")
        crash_at = None
        if attempt < len(failures) and start + failures[attempt] < generations:
            crash_at = start + failures[attempt]
            extra += ["--crash-at", str(crash_at), "--crash-mode", mode]
        pod = run_pod(base + extra)
        run_id = run_id or pod["run_id"]
        expected_rc = 0 if crash_at is None else (-9 if mode == "kill" else 143)
        if pod["returncode"] != expected_rc:
            raise RuntimeError(f"pod {attempt + 1} exited {pod['returncode']}, expected "
                               f"{expected_rc}:\n{pod['stdout']}\n{pod['stderr']}")
        ran = (crash_at - start) if crash_at is not None else pod["summary"]["ran"]
        if crash_at is None:
            assert pod["summary"]["resumed_from"] == start, (pod["summary"], start)
        pods.append({"attempt": attempt + 1, "started_at": start, "failed_at": crash_at,
                     "generations_run": ran, "wall_seconds": pod["wall"],
                     "returncode": pod["returncode"], "peak_rss": pod["peak_rss"],
                     "best_fitness": pod["summary"]["best_fitness"] if pod["summary"] else None})
        if crash_at is None:
            break
    total_gens = sum(p["generations_run"] for p in pods)
    wall = sum(p["wall_seconds"] for p in pods)
    return {
        "case": "checkpoint" if checkpoint else "no_checkpoint",
        "failure": mode,
        "pods": pods,
        "generations_run": total_gens,
        "wall_seconds": wall,
        "generation_seconds": total_gens * gen_time,
        "startup_seconds_per_pod": (wall - total_gens * gen_time) / len(pods),
        "article_scale_seconds": total_gens * ARTICLE["generation_seconds"],
        "best_fitness": pods[-1]["best_fitness"],
        "peak_rss_mib": max(p["peak_rss"] for p in pods) / 2**20,
        "schedule": " + ".join(
            f"{p['started_at'] + 1}..{p['failed_at'] or generations}"
            f"({p['generations_run']})" for p in pods),
    }


def main(argv: list[str] | None = None) -> int:
    ap = _common.parser(__doc__.splitlines()[0])
    ap.add_argument("--gen-time", type=float, default=None,
                    help="seconds per generation (default 0.05; --quick: 0.005)")
    ap.add_argument("--generations", type=int, default=None, help="default 50 (--quick: 10)")
    ap.add_argument("--failures", default=None,
                    help="generations each failing pod completes, comma-separated "
                         "(default 30,25; --quick: 6,5)")
    ap.add_argument("--population", type=int, default=200)
    ap.add_argument("--modes", default="kill,term", help="failure modes: kill,term")
    ap.add_argument("--repeats", type=int, default=None,
                    help="repeat each scenario, report the median wall time (default 3; quick 1)")
    args = ap.parse_args(argv)
    gen_time = args.gen_time if args.gen_time is not None else (0.005 if args.quick else 0.05)
    generations = args.generations or (10 if args.quick else 50)
    failures = [int(x) for x in (args.failures or ("6,5" if args.quick else "30,25")).split(",")]
    repeats = args.repeats or (1 if args.quick else 3)
    modes = [m for m in args.modes.split(",") if m]

    results: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="bench-rvr-") as tmp:
        for rep in range(repeats):
            for mode in modes:
                for checkpoint in (False, True):  # interleaved
                    store = str(Path(tmp) / f"{mode}-{checkpoint}-{rep}")
                    r = scenario(mode, checkpoint, failures, generations, gen_time,
                                 args.population, store)
                    r["repeat"] = rep
                    results.append(r)

    def median(xs: list[float]) -> float:
        xs = sorted(xs)
        n = len(xs)
        return xs[n // 2] if n % 2 else (xs[n // 2 - 1] + xs[n // 2]) / 2

    rows_out = []
    for mode in modes:
        per = {}
        for case in ("no_checkpoint", "checkpoint"):
            runs = [r for r in results if r["failure"] == mode and r["case"] == case]
            per[case] = {
                "case": case, "failure": mode,
                "generations_run": [r["generations_run"] for r in runs],
                "wall_seconds_median": median([r["wall_seconds"] for r in runs]),
                "wall_seconds": [r["wall_seconds"] for r in runs],
                "pods": len(runs[0]["pods"]),
                "schedule": runs[0]["schedule"],
                "startup_seconds_per_pod": median([r["startup_seconds_per_pod"] for r in runs]),
                "best_fitness": sorted({r["best_fitness"] for r in runs}),
                "peak_rss_mib": max(r["peak_rss_mib"] for r in runs),
            }
        nc, ck = per["no_checkpoint"], per["checkpoint"]
        for row in (nc, ck):
            row["generations_median"] = median([float(g) for g in row["generations_run"]])
            row["article_scale_seconds"] = row["generations_median"] * ARTICLE[
                "generation_seconds"]
        ck["wall_ratio_to_no_checkpoint"] = ck["wall_seconds_median"] / nc["wall_seconds_median"]
        ck["generation_ratio_to_no_checkpoint"] = (ck["generations_median"]
                                                   / nc["generations_median"])
        ck["same_result_as_no_checkpoint"] = ck["best_fitness"] == nc["best_fitness"]
        rows_out += [nc, ck]

    payload = {
        "config": {"generations": generations, "failures_after": failures,
                   "gen_time": gen_time, "population": args.population, "repeats": repeats,
                   "modes": modes, "quick": args.quick},
        "article": ARTICLE,
        "cases": rows_out,
        "runs": results,
    }
    path = _common.write_json(args.out, NAME, payload)

    print(f"## Restart vs resume: {generations} generations of {gen_time * 1000:.0f} ms, pods "
          f"fail after {' and '.join(map(str, failures))} generations "
          f"(median of {repeats})\n")
    table = []
    for r in rows_out:
        label = ("no checkpoint (start over)" if r["case"] == "no_checkpoint"
                 else "checkpoint (resume)")
        ratio = (f"{r['wall_ratio_to_no_checkpoint']:.2f}" if "wall_ratio_to_no_checkpoint" in r
                 else "1.00")
        article = ARTICLE[r["case"]]
        table.append([f"{label}, {r['failure']}", r["pods"], r["schedule"],
                      f"{r['generations_median']:.0f}", f"{r['wall_seconds_median']:.2f} s",
                      ratio, f"{r['startup_seconds_per_pod']:.2f} s",
                      f"{r['article_scale_seconds']:,.0f} s",
                      f"{article['generations']} ({article['seconds']:,} s)",
                      f"{r['peak_rss_mib']:.0f} MiB"])
    print(_common.markdown_table(
        ["case, failure", "pods", "generations per pod (from..to)", "generations run",
         "wall time", "time vs no checkpoint", "start-up per pod", "at 10 s / generation",
         "article", "peak RSS per pod"], table))
    print("\nStart-up per pod = (wall time - generations x generation time) / pods: "
          "interpreter, numpy and store start-up, which the article's count leaves out.")
    print(f"results: {path}")
    if not args.no_plot:
        plot(rows_out, args.out / f"{NAME}.png", gen_time,
             f"{generations}-generation GA, pods fail after "
             f"{' and '.join(map(str, failures))} generations")
    return 0


def plot(rows: list[dict[str, Any]], path: Path, gen_time: float, title: str) -> None:
    plt = _common.pyplot()
    if plt is None:
        return
    fig, ax = plt.subplots(figsize=(7.5, 4.2))
    labels, walls, gens, colors = [], [], [], []
    for r in rows:
        labels.append(("no checkpoint" if r["case"] == "no_checkpoint" else "checkpoint")
                      + f"\n({r['failure']})")
        walls.append(r["wall_seconds_median"])
        gens.append(r["generations_median"])
        colors.append("#c44e52" if r["case"] == "no_checkpoint" else "#55a868")
    xs = range(len(rows))
    ax.bar(xs, walls, color=colors, width=0.6, label="measured wall time (all pods)")
    ax.bar(xs, [g * gen_time for g in gens], color="none", edgecolor="black", hatch="//",
           width=0.6, label="generations x generation time")
    for x, w, g in zip(xs, walls, gens, strict=True):
        ax.annotate(f"{w:.2f} s\n{g:.0f} gens", (x, w), textcoords="offset points",
                    xytext=(0, 4), ha="center", fontsize=8)
    ax.set_xticks(list(xs), labels)
    ax.set_ylabel("seconds")
    ax.set_ylim(0, max(walls) * 1.25)
    ax.set_title(f"{title} ({gen_time * 1000:.0f} ms/generation)", fontsize=10)
    ax.legend(fontsize=8, loc="upper right")
    _common.save_figure(plt, fig, path)


if __name__ == "__main__":
    sys.exit(main())
