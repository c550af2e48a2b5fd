"""What ``@checkpointed`` costs per generation, for every ``every=`` policy, on a tiny state.

The body does almost nothing (a tiny dict state, a counter), so the time between two of
its generations is the decorator's own work at a yield: deciding whether a save is due,
snapshotting, capturing the RNG, handing the snapshot to the upload thread. The store is
``memory://`` so that no storage speed enters. numpy is imported (as in any GA), so RNG
capture includes numpy's global generator.

Method: blocks of N generations, one block per mode in turn, the order rotated every
repeat (interleaved); in each block the cost per generation is the mean interval between
the body's generations, leaving out the first (start-up) and what follows the last
(final save, result). The decorator's cost is a block's mean minus the plain generator's
mean in the same repeat; reported as the median over repeats with the interquartile
range and min-max.

    python benchmarks/per_generation.py
    python benchmarks/per_generation.py --quick
"""

from __future__ import annotations

import logging
import os
import statistics
import sys
import time
import uuid
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import _common

NAME = "per_generation"
# (mode, every, capture_rng); "plain" is the same generator without the decorator.
MODES: tuple[tuple[str, Any, bool], ...] = (
    ("plain", None, True),
    ('every="generation"', "generation", True),
    ("every=10", 10, True),
    ("every=100", 100, True),
    ('every="30s"', "30s", True),
    ("every=100, capture_rng=False", 100, False),
)
TARGETS_US = {'every="generation"': 30.0, "every=100": 10.0}


def body_factory(stamps: list[tuple[int, int]], gens: int) -> Any:
    clock, cpu = time.perf_counter_ns, time.thread_time_ns

    def body(*, state: Any = None):  # type: ignore[no-untyped-def]
        if state is None:
            state = {"generation": 0, "best": 0.0}
        while state["generation"] < gens:
            stamps.append((clock(), cpu()))
            state = {"generation": state["generation"] + 1,
                     "best": state["best"] + 1.0}  # a new tiny state, as a GA would make
            yield state
        return state["best"]

    return body


def block(mode: str, every: Any, capture_rng: bool, gens: int) -> tuple[float, float]:
    """Mean nanoseconds between consecutive generations in one block: wall time, and CPU
    time of the loop's thread (which other processes on the machine do not inflate)."""
    from resumable import checkpointed

    stamps: list[tuple[int, int]] = []
    body = body_factory(stamps, gens)
    if mode == "plain":
        for _ in body():
            pass
    else:
        f = checkpointed(every=every, store=f"memory://pergen-{uuid.uuid4().hex[:8]}",
                         run_id="r", capture_rng=capture_rng)(body)
        f()
        f.reset()
    # stamps[1:] : generation 1 onwards, so the start-up before the first is left out.
    n = len(stamps) - 2
    return ((stamps[-1][0] - stamps[1][0]) / n, (stamps[-1][1] - stamps[1][1]) / n)


def quartiles(xs: list[float]) -> tuple[float, float]:
    if len(xs) < 2:
        return (xs[0], xs[0])
    q = statistics.quantiles(xs, n=4, method="inclusive")
    return (q[0], q[2])


def main(argv: list[str] | None = None) -> int:
    ap = _common.parser(__doc__.splitlines()[0])
    ap.add_argument("--generations", type=int, default=None,
                    help="generations per block (default 3000; --quick 200)")
    ap.add_argument("--repeats", type=int, default=None,
                    help="blocks per mode, interleaved (default 15; --quick 3)")
    args = ap.parse_args(argv)
    gens = args.generations or (200 if args.quick else 3000)
    repeats = args.repeats or (3 if args.quick else 15)

    import numpy  # noqa: F401  (a GA imports it: RNG capture then includes numpy's)

    logging.getLogger("resumable").setLevel(logging.ERROR)
    for mode, every, rng in MODES:  # warm up imports, caches and the upload thread's code
        block(mode, every, rng, 50)

    per_mode: dict[str, list[float]] = {m[0]: [] for m in MODES}
    cpu_mode: dict[str, list[float]] = {m[0]: [] for m in MODES}
    t0 = time.perf_counter()
    load_start = _common.load_average()
    for rep in range(repeats):
        k = rep % len(MODES)
        for mode, every, rng in MODES[k:] + MODES[:k]:
            wall_ns, cpu_ns = block(mode, every, rng, gens)
            per_mode[mode].append(wall_ns)
            cpu_mode[mode].append(cpu_ns)
        print(f"  repeat {rep + 1}/{repeats}: " + ", ".join(
            f"{m} {v[-1] / 1000:.1f}" for m, v in per_mode.items()) + " µs",
            file=sys.stderr, flush=True)
    wall = time.perf_counter() - t0

    plain = per_mode["plain"]
    cases = []
    for mode, every, rng in MODES:
        raw_us = [x / 1000 for x in per_mode[mode]]
        cost = [(x - p) / 1000 for x, p in zip(per_mode[mode], plain, strict=True)]
        lo, hi = quartiles(cost)
        cpu_cost = [(x - p) / 1000 for x, p in zip(cpu_mode[mode], cpu_mode["plain"],
                                                   strict=True)]
        row: dict[str, Any] = {
            "case": mode, "every": every, "capture_rng": rng,
            "us_per_generation_median": statistics.median(raw_us),
            "cost_us_median": statistics.median(cost),
            "cost_us_iqr": [lo, hi], "cost_us_min": min(cost), "cost_us_max": max(cost),
            "cost_us_repeats": cost,
            "cpu_cost_us_median": statistics.median(cpu_cost),
            "cpu_cost_us_iqr": list(quartiles(cpu_cost)),
            "cpu_cost_us_repeats": cpu_cost,
        }
        if mode in TARGETS_US:
            row["target_us"] = TARGETS_US[mode]
            row["meets_target"] = row["cost_us_median"] <= TARGETS_US[mode]
        cases.append(row)

    payload = {"config": {"generations_per_block": gens, "repeats": repeats,
                          "store": "memory://", "numpy_imported": True,
                          "quick": args.quick,
                          "loadavg_at_start": load_start, "targets_us": TARGETS_US},
               "cases": cases, "wall_seconds": wall}
    path = _common.write_json(args.out, NAME, payload)

    print(f"## Decorator cost per generation, tiny state, memory:// ({repeats} interleaved "
          f"blocks of {gens} generations)\n")
    table = []
    for r in cases:
        target = ""
        if "target_us" in r:
            target = f"<= {r['target_us']:.0f} " + ("met" if r["meets_target"] else "**missed**")
        spread = (f"{r['cost_us_iqr'][0]:.1f} to {r['cost_us_iqr'][1]:.1f}"
                  f" (min-max {r['cost_us_min']:.1f} to {r['cost_us_max']:.1f})")
        plain = r["case"] == "plain"
        cost = "-" if plain else f"{r['cost_us_median']:.1f}"
        cpu = "-" if plain else (f"{r['cpu_cost_us_median']:.1f} ({r['cpu_cost_us_iqr'][0]:.1f}"
                                 f" to {r['cpu_cost_us_iqr'][1]:.1f})")
        table.append([r["case"], f"{r['us_per_generation_median']:.2f}", cost,
                      "-" if plain else spread, cpu, target])
    print(_common.markdown_table(
        ["policy", "µs / generation", "decorator cost (µs, median)", "IQR (µs)",
         "loop-thread CPU cost (µs, IQR)", "target"], table))
    print("\ndecorator cost = a block's mean interval between generations minus the plain "
          "generator's in the same repeat (wall time); loop-thread CPU cost = the same in CPU "
          "time of the loop's thread, which a loaded machine does not inflate.")
    print(f"load average (1/5/15 min) at start {load_start}, at end {_common.load_average()} "
          f"on {os.cpu_count()} cores")
    print(f"results: {path}")
    if not args.no_plot:
        plot(cases, args.out / f"{NAME}.png")
    return 0


def plot(cases: list[dict[str, Any]], path: Path) -> None:
    plt = _common.pyplot()
    if plt is None:
        return
    rows = [c for c in cases if c["case"] != "plain"]
    fig, ax = plt.subplots(figsize=(8, 4.0))
    xs = range(len(rows))
    meds = [c["cost_us_median"] for c in rows]
    err = [[max(0.0, m - c["cost_us_iqr"][0]) for m, c in zip(meds, rows, strict=True)],
           [max(0.0, c["cost_us_iqr"][1] - m) for m, c in zip(meds, rows, strict=True)]]
    ax.bar(xs, meds, yerr=err, capsize=4, color="#55a868")
    for x, c in zip(xs, rows, strict=True):
        ax.annotate(f"{c['cost_us_median']:.0f} µs", (x, c["cost_us_median"]),
                    textcoords="offset points", xytext=(8, 2), fontsize=8)
        if "target_us" in c:
            ax.hlines(c["target_us"], x - 0.4, x + 0.4, colors="black", linestyles="dashed",
                      linewidth=1)
    ax.set_xticks(list(xs), [c["case"].replace(", ", ",\n") for c in rows], fontsize=8)
    ax.set_ylabel("µs per generation over a plain generator")
    ax.set_title("decorator cost per generation (tiny state, memory://); dashed: target",
                 fontsize=10)
    _common.save_figure(plt, fig, path)


if __name__ == "__main__":
    sys.exit(main())
