"""Per-generation cost of checkpointing every generation of a GA-like loop.

The loop's state is a population of 1, 16 or 64 MiB of float64 plus a numpy Generator;
each generation does ~100 ms of real numpy work (fitness over the whole population,
selection into a new population array, mutation, and a calibrated fitness function).
Three rows per case, run interleaved (one child process per block, modes in turn):

  none:         no checkpoint at all (the baseline);
  snippet:      the article's code: ``pickle.dumps`` + boto3 ``put_object``, synchronous
                (for the local store: ``pickle.dumps`` + write a file);
  checkpointed: ``@checkpointed(every="generation")`` on the same generator.

Stores: a local folder, moto's server and ``rclone serve s3`` (both on loopback, on the
same 2 cores as the loop). Reported per generation: mean time between the starts of
consecutive generations (each interval holds one generation's work and one checkpoint),
its ratio to ``none``, the end-of-run cost (final flush), and the child's peak RSS.

    python benchmarks/overhead.py
    python benchmarks/overhead.py --quick
"""

from __future__ import annotations

import itertools
import json
import os
import pickle
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import _common

NAME = "overhead"
MODES = ("none", "snippet", "checkpointed")
GENES = 128  # columns of the population; rows follow from the size
TARGETS_RCLONE = {1: 1.05, 16: 1.10, 64: 1.40}  # MiB -> max ratio to none


# ---------------------------------------------------------------------------------------
# child: one block of generations in one mode
# ---------------------------------------------------------------------------------------


def make_state(size_bytes: int, seed: int) -> dict[str, Any]:
    import numpy as np

    rng = np.random.default_rng(seed)
    rows = max(4, size_bytes // (8 * GENES))
    pop = rng.uniform(-5.12, 5.12, size=(rows, GENES))
    return {"generation": 0, "population": pop, "best": float("inf"), "rng": rng}


class Work:
    """One generation of numpy work: the population part, then a calibrated filler."""

    def __init__(self, fill_units: int) -> None:
        import numpy as np

        self.fill_units = fill_units
        self.filler = np.linspace(0.0, 1.0, 65536)

    def population_step(self, state: dict[str, Any]) -> None:
        import numpy as np

        pop = state["population"]
        rng = state["rng"]
        fitness = np.einsum("ij,ij->i", pop, pop)  # one pass over the whole population
        n = pop.shape[0]
        a, b = rng.integers(0, n, size=n), rng.integers(0, n, size=n)
        winners = np.where(fitness[a] < fitness[b], a, b)
        new = pop[winners]  # a new population array, as a GA builds each generation
        rows = rng.integers(0, n, size=max(1, n // 16))
        new[rows] += rng.normal(0.0, 0.1, size=(rows.size, pop.shape[1]))
        state["population"] = new
        state["best"] = min(state["best"], float(fitness.min()))
        state["generation"] += 1

    def fill(self) -> float:
        import numpy as np

        acc = 0.0
        x = self.filler
        for _ in range(self.fill_units):
            acc += float(np.sin(x).sum())
        return acc

    def __call__(self, state: dict[str, Any]) -> None:
        self.population_step(state)
        self.fill()


def calibrate(size_bytes: int, work_ms: float) -> dict[str, Any]:
    """How many filler units make one generation last ~work_ms at this population size."""
    w = Work(0)
    state = make_state(size_bytes, 1)
    for _ in range(2):
        w.population_step(state)
    samples = []
    for _ in range(5):
        t = time.perf_counter()
        w.population_step(state)
        samples.append(time.perf_counter() - t)
    pop_ms = statistics.median(samples) * 1000
    w.fill_units = 20
    w.fill()
    t = time.perf_counter()
    w.fill()
    unit_ms = (time.perf_counter() - t) * 1000 / 20
    units = max(0, round((work_ms - pop_ms) / unit_ms))
    return {"population_ms": pop_ms, "unit_ms": unit_ms, "fill_units": units}


def child(spec: dict[str, Any]) -> dict[str, Any]:
    import logging

    logging.getLogger("resumable").setLevel(logging.ERROR)
    mode, store, size, gens = spec["mode"], spec["store"], spec["size_bytes"], spec["gens"]
    work = Work(spec["fill_units"])
    stamps: list[float] = []
    rss_before = _common.current_rss_bytes()
    state0 = make_state(size, spec["seed"])
    rss_state = _common.current_rss_bytes()
    ended: float

    def body(*, state: Any = None):  # type: ignore[no-untyped-def]
        if state is None:
            state = state0
        while state["generation"] < gens:
            stamps.append(time.perf_counter())
            work(state)
            yield state
        stamps.append(time.perf_counter())
        return {"best": state["best"], "generation": state["generation"]}

    started = time.perf_counter()
    if mode == "none":
        for _ in body():
            pass
        ended = time.perf_counter()
    elif mode == "snippet":
        save = snippet_saver(store, spec["key"])
        for st in body():
            save(st)
        ended = time.perf_counter()
    elif mode == "checkpointed":
        from resumable import checkpointed

        f = checkpointed(every="generation", store=store, run_id=spec["key"])(body)
        f()
        ended = time.perf_counter()
    else:
        raise ValueError(mode)
    intervals = [b - a for a, b in itertools.pairwise(stamps)]
    return {
        "intervals": intervals[1:],  # the first generation has no checkpoint before it
        "end_seconds": ended - stamps[-1],  # after the last generation: final save, flush
        "start_seconds": stamps[0] - started,
        "total_seconds": ended - started,
        "peak_rss": _common.peak_rss_bytes(),
        "rss_before_state": rss_before,
        "rss_with_state": rss_state,
        "state_bytes": int(state0["population"].nbytes),
    }


def snippet_saver(store: str, key: str) -> Any:
    """The article's save_checkpoint: pickle.dumps, then one synchronous write."""
    if store.startswith("s3://"):
        import boto3

        bucket, _, prefix = store[5:].partition("/")
        s3 = boto3.client("s3")
        object_key = f"{prefix}/{key}/ga_generation.pkl"

        def save(data: Any) -> None:
            s3.put_object(Bucket=bucket, Key=object_key, Body=pickle.dumps(data))

        return save
    folder = Path(store) / key
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "ga_generation.pkl"

    def save_local(data: Any) -> None:
        with open(path, "wb") as f:
            f.write(pickle.dumps(data))

    return save_local


# ---------------------------------------------------------------------------------------
# parent
# ---------------------------------------------------------------------------------------


def run_child(spec: dict[str, Any], env: dict[str, str]) -> dict[str, Any]:
    proc = subprocess.run(
        [sys.executable, __file__, "--child", json.dumps(spec)],
        capture_output=True, text=True, env=_common.child_env(env), timeout=900,
    )
    if proc.returncode != 0:
        raise RuntimeError(f"child {spec} failed ({proc.returncode}):\n{proc.stderr[-3000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def main(argv: list[str] | None = None) -> int:
    ap = _common.parser(__doc__.splitlines()[0])
    ap.add_argument("--child", help=argparse_hidden())
    ap.add_argument("--calibrate", help=argparse_hidden())
    ap.add_argument("--sizes", default=None, help="MiB, comma-separated (default 1,16,64)")
    ap.add_argument("--stores", default="local,moto,rclone")
    ap.add_argument("--generations", type=int, default=None,
                    help="generations per block (default 12; --quick 4)")
    ap.add_argument("--repeats", type=int, default=None,
                    help="blocks per mode and case, interleaved (default 3; --quick 1)")
    ap.add_argument("--work-ms", type=float, default=None,
                    help="numpy work per generation (default 100; --quick 20)")
    args = ap.parse_args(argv)
    if args.child:
        print(json.dumps(child(json.loads(args.child))))
        return 0
    if args.calibrate:
        size, work_ms = json.loads(args.calibrate)
        print(json.dumps(calibrate(size, work_ms)))
        return 0

    sizes = [float(s) for s in (args.sizes or ("0.25,1" if args.quick else "1,16,64")).split(",")]
    stores = [s for s in args.stores.split(",") if s]
    gens = args.generations or (4 if args.quick else 12)
    repeats = args.repeats or (1 if args.quick else 3)
    work_ms = args.work_ms or (20.0 if args.quick else 100.0)

    calib = {}
    for mib in sizes:
        proc = subprocess.run(
            [sys.executable, __file__, "--calibrate", json.dumps([int(mib * _common.MiB),
                                                                  work_ms])],
            capture_output=True, text=True, env=_common.child_env(), check=True)
        calib[mib] = json.loads(proc.stdout)

    from contextlib import ExitStack

    import _servers

    blocks: list[dict[str, Any]] = []
    t_start = time.perf_counter()
    with ExitStack() as stack, tempfile.TemporaryDirectory(prefix="bench-overhead-") as tmp:
        where: dict[str, tuple[str, dict[str, str]]] = {}
        for s in stores:
            if s == "local":
                where[s] = (str(Path(tmp) / "local"), {})
            else:
                srv = stack.enter_context(_servers.server(s))
                where[s] = (srv.new_store_url("overhead"), srv.env)
        for rep in range(repeats):
            for s in stores:
                url, env = where[s]
                for mib in sizes:
                    order = MODES[rep % 3:] + MODES[: rep % 3]  # rotate who goes first
                    for mode in order:
                        spec = {"mode": mode, "store": url, "size_bytes": int(mib * _common.MiB),
                                "gens": gens, "seed": rep, "key": f"b-{uuid.uuid4().hex[:12]}",
                                "fill_units": calib[mib]["fill_units"]}
                        r = run_child(spec, env)
                        r.update({"store": s, "size_mib": mib, "mode": mode, "repeat": rep})
                        blocks.append(r)
                        print(f"  {s:6} {mib:5g} MiB {mode:12} "
                              f"{statistics.mean(r['intervals']) * 1000:7.1f} ms/gen",
                              file=sys.stderr, flush=True)
    wall = time.perf_counter() - t_start

    cases = []
    for s in stores:
        for mib in sizes:
            base = None
            for mode in MODES:
                bs = [b for b in blocks if b["store"] == s and b["size_mib"] == mib
                      and b["mode"] == mode]
                intervals = [x for b in bs for x in b["intervals"]]
                per_block = [statistics.mean(b["intervals"]) for b in bs]
                row = {
                    "store": s, "size_mib": mib, "mode": mode,
                    "generations_measured": len(intervals),
                    "ms_per_generation": 1000 * statistics.mean(intervals),
                    "ms_per_generation_median": 1000 * statistics.median(intervals),
                    "ms_per_generation_blocks": [1000 * x for x in per_block],
                    "end_ms": 1000 * statistics.median(b["end_seconds"] for b in bs),
                    "peak_rss_mib": max(b["peak_rss"] for b in bs) / _common.MiB,
                    "state_mib": bs[0]["state_bytes"] / _common.MiB,
                }
                if mode == "none":
                    base = row
                assert base is not None
                row["ratio"] = row["ms_per_generation"] / base["ms_per_generation"]
                row["extra_rss_mib"] = row["peak_rss_mib"] - base["peak_rss_mib"]
                target = TARGETS_RCLONE.get(int(mib)) if s == "rclone" and mib >= 1 else None
                if mode == "checkpointed" and target is not None:
                    row["target_ratio"] = target
                    row["meets_target"] = row["ratio"] <= target
                cases.append(row)

    payload = {
        "config": {"sizes_mib": sizes, "stores": stores, "generations_per_block": gens,
                   "repeats": repeats, "work_ms": work_ms, "calibration": calib,
                   "quick": args.quick, "targets_rclone": TARGETS_RCLONE},
        "cases": cases,
        "blocks": blocks,
        "wall_seconds": wall,
    }
    path = _common.write_json(args.out, NAME, payload)

    print(f"## Checkpoint overhead per generation (~{work_ms:.0f} ms of numpy work; "
          f"{repeats} x {gens - 1} generations per row, interleaved)\n")
    table = []
    for r in cases:
        target = ""
        if "target_ratio" in r:
            target = f"<= {r['target_ratio']:.2f} " + ("met" if r["meets_target"] else
                                                       "**missed**")
        table.append([r["store"], f"{r['size_mib']:g} MiB", r["mode"],
                      f"{r['ms_per_generation']:.1f}", f"{r['ratio']:.3f}", target,
                      f"{r['end_ms']:.0f}", f"{r['peak_rss_mib']:.0f}",
                      f"{r['extra_rss_mib']:+.0f}"])
    print(_common.markdown_table(
        ["store", "state", "mode", "ms / generation", "ratio to none", "target",
         "end of run (ms)", "peak RSS (MiB)", "RSS vs none (MiB)"], table))
    print("\nms / generation: mean time from one generation's start to the next one's, "
          "so each holds one generation and one checkpoint; end of run: from the last "
          "generation to the call's return (final save, flush).")
    print(f"results: {path}")
    if not args.no_plot:
        plot(cases, stores, sizes, args.out / f"{NAME}.png", work_ms)
    return 0


def argparse_hidden() -> str:
    import argparse

    return argparse.SUPPRESS


def plot(cases: list[dict[str, Any]], stores: list[str], sizes: list[float], path: Path,
         work_ms: float) -> None:
    plt = _common.pyplot()
    if plt is None:
        return
    fig, axes = plt.subplots(1, len(stores), figsize=(3.6 * len(stores), 4.0), sharey=True,
                             squeeze=False)
    colors = {"snippet": "#c44e52", "checkpointed": "#55a868"}
    width = 0.38
    for ax, s in zip(axes[0], stores, strict=True):
        for i, mode in enumerate(("snippet", "checkpointed")):
            ys = [next(c["ratio"] for c in cases if c["store"] == s and c["size_mib"] == m
                       and c["mode"] == mode) for m in sizes]
            xs = [j + (i - 0.5) * width for j in range(len(sizes))]
            ax.bar(xs, ys, width=width, color=colors[mode],
                   label="article snippet" if mode == "snippet" else "@checkpointed")
            for x, y in zip(xs, ys, strict=True):
                ax.annotate(f"{y:.2f}", (x, y), textcoords="offset points", xytext=(0, 2),
                            ha="center", fontsize=7)
        if s == "rclone":
            for j, m in enumerate(sizes):
                t = TARGETS_RCLONE.get(int(m))
                if t and m >= 1:
                    ax.hlines(t, j - 0.45, j + 0.45, colors="black", linestyles="dashed",
                              linewidth=1, label="target" if j == 0 else None)
        ax.axhline(1.0, color="grey", linewidth=0.8)
        ax.set_xticks(range(len(sizes)), [f"{m:g} MiB" for m in sizes])
        ax.set_title({"local": "local folder", "moto": "moto server",
                      "rclone": "rclone serve s3"}.get(s, s), fontsize=10)
    top = max(c["ratio"] for c in cases if c["mode"] != "none")
    axes[0][0].set_ylim(0.8, max(1.5, top * 1.1))
    axes[0][0].set_ylabel(f"time per generation / no checkpoint\n(~{work_ms:.0f} ms of work)")
    axes[0][-1].legend(fontsize=8, loc="upper left")
    _common.save_figure(plt, fig, path)


if __name__ == "__main__":
    os.environ.setdefault("PYTHONHASHSEED", "0")
    sys.exit(main())
