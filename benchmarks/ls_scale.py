"""`resumable ls` of many runs on a loopback S3 server, the client in process.

Each run holds what a run with ``keep=3`` holds: three checkpoints, one attempt record
and the RNG record (5,000 objects for 1,000 runs). Three ways are timed, interleaved:

  listing: `resumable ls` as it is now: one listing with sizes and times, no GETs;
  check:   `resumable ls --check`: the same, plus each run's newest header, read in
           parallel (16 at a time);
  serial:  what `ls` did before: the listing, then one header GET per run, one at a time.

Each case reports the median wall time of ``--repeats`` runs and the spread (min, max).
The server is `rclone serve s3` (default: a separate process, as a real endpoint is) or,
with ``--server moto``, moto in threads of this process, whose own work then shares the
GIL with the client: an upper bound.

    python benchmarks/ls_scale.py              # 1,000 runs, 7 repeats
    python benchmarks/ls_scale.py --quick      # 100 runs, 3 repeats
"""

from __future__ import annotations

import contextlib
import io
import os
import statistics
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import _common
import _servers

NAME = "ls_scale"
OBJECTS = ("epoch-00000001", "rng-start", "ckpt-00000001-000000000008",
           "ckpt-00000001-000000000009", "ckpt-00000001-000000000010")


def populate(url: str, runs: int) -> None:
    """Write ``runs`` runs of real, verified objects (tiny states) in parallel."""
    from resumable import _format
    from resumable.stores import open_store

    store = open_store(url)

    def one(i: int) -> None:
        run_id = f"run-{i:05d}"
        for name in OBJECTS:
            kind = {"epoch": "epoch", "rng-st": "rng"}.get(name[:6], "ckpt")
            step = int(name.rsplit("-", 1)[1]) if kind == "ckpt" else 0
            store.put(f"{run_id}/{name}", _format.encode(
                [b"x" * 200], kind=kind, serializer="pickle", step=step, epoch=1,
                created=time.time(), name=f"{run_id}/{name}"))

    with ThreadPoolExecutor(16) as pool:
        list(pool.map(one, range(runs)))


def serial_ls(url: str) -> int:
    """The old `ls`: list, then the newest checkpoint's header of each run, one by one."""
    from resumable import cli
    from resumable._run import parse_ckpt_name
    from resumable.stores import open_store

    store = open_store(url)
    runs: dict[str, list[str]] = {}
    for key in store.list(""):
        run_id, _, name = key.partition("/")
        runs.setdefault(run_id, []).append(name)
    for run_id, names in runs.items():
        ckpts = sorted(n for n in names if parse_ckpt_name(n))
        cli._inspect(store, run_id, ckpts[-1], None, full=False)
    return len(runs)


def timed(case: str, url: str) -> float:
    from resumable import cli

    out = io.StringIO()
    started = time.perf_counter()
    if case == "serial":
        serial_ls(url)
    else:
        argv = ["ls", url] + (["--check"] if case == "check" else [])
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(out):
            code = cli.main(argv)
        if code != 0:
            raise RuntimeError(f"ls exited {code}: {out.getvalue()[-2000:]}")
    return time.perf_counter() - started


def main(argv: list[str] | None = None) -> int:
    ap = _common.parser(__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=None, help="default 1000 (--quick: 100)")
    ap.add_argument("--repeats", type=int, default=None, help="default 7 (--quick: 3)")
    ap.add_argument("--cases", default="listing,check,serial")
    ap.add_argument("--server", choices=("rclone", "moto"), default="rclone",
                    help="rclone serve s3 (its own process, as a real endpoint is), or moto "
                         "in threads of this process (its work shares the GIL with ls)")
    args = ap.parse_args(argv)
    runs = args.runs or (100 if args.quick else 1000)
    repeats = args.repeats or (3 if args.quick else 7)
    cases = [c for c in args.cases.split(",") if c]

    times: dict[str, list[float]] = {c: [] for c in cases}
    where = "rclone serve s3" if args.server == "rclone" else "moto (in process)"
    with _servers.server(args.server) as srv:
        os.environ.update(srv.env)
        url = srv.new_store_url()
        t0 = time.perf_counter()
        populate(url, runs)
        setup = time.perf_counter() - t0
        for case in cases:  # warm: imports, the client, moto's first listing
            timed(case, url)
        for _ in range(repeats):
            for case in cases:  # interleaved, so drifting load hits every case alike
                times[case].append(timed(case, url))

    rows = []
    for case in cases:
        xs = times[case]
        rows.append({"case": case, "runs": runs, "objects": runs * len(OBJECTS),
                     "median_s": statistics.median(xs), "min_s": min(xs), "max_s": max(xs),
                     "seconds": xs})
    payload = {"config": {"runs": runs, "repeats": repeats, "quick": args.quick,
                          "server": where, "setup_seconds": setup,
                          "load_average": os.getloadavg()},
               "cases": rows}
    path = _common.write_json(args.out, NAME, payload)
    print(f"## `resumable ls` of {runs:,} runs ({runs * len(OBJECTS):,} objects) on {where}, "
          f"client in process (median of {repeats}, interleaved)\n")
    label = {"listing": "ls (one listing, sizes and times)",
             "check": "ls --check (+ newest headers, 16 in parallel)",
             "serial": "before: listing + one header GET per run, serial"}
    print(_common.markdown_table(
        ["case", "median", "min", "max"],
        [[label.get(r["case"], r["case"]), f"{r['median_s']:.3f} s", f"{r['min_s']:.3f} s",
          f"{r['max_s']:.3f} s"] for r in rows]))
    print(f"\nload average during the run: {' '.join(f'{x:.1f}' for x in os.getloadavg())} "
          f"on {os.cpu_count()} CPUs")
    print(f"results: {path}")
    if not args.no_plot:
        plot(rows, args.out / f"{NAME}.png", runs, where)
    return 0


def plot(rows: list[dict[str, Any]], path: Path, runs: int, where: str) -> None:
    plt = _common.pyplot()
    if plt is None:
        return
    fig, ax = plt.subplots(figsize=(6.5, 3.6))
    xs = range(len(rows))
    med = [r["median_s"] for r in rows]
    err = [[r["median_s"] - r["min_s"] for r in rows], [r["max_s"] - r["median_s"] for r in rows]]
    ax.bar(xs, med, yerr=err, color="#55a868", width=0.6, capsize=4)
    ax.set_xticks(list(xs), [r["case"] for r in rows])
    ax.set_ylabel("seconds")
    ax.set_title(f"resumable ls of {runs:,} runs on {where} (median, min-max)", fontsize=10)
    _common.save_figure(plt, fig, path)


if __name__ == "__main__":
    sys.exit(main())
