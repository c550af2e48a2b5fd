"""What the memory work of a large snapshot costs on this machine, per MiB.

The overhead of checkpointing a large numpy state every generation is mostly memory
work on the loop's thread, and this machine prices some of it unlike a typical server.
Each row times one operation on a float64 buffer (the median of several runs, with
min and max; ms and ms per MiB):

  first touch, fresh memory:   writing one byte per 4 KiB page of anonymous memory the
                               process has not used before (huge pages advised, as
                               ``_aligned`` does). Several regions are held at once, so
                               each comes from memory nobody just freed. On a virtual
                               machine whose host takes back free guest memory, this is
                               where the host supplies the pages again;
  first touch, memory just freed: the same after the previous region was unmapped;
  copy into a reused buffer:   a snapshot into the buffers of the save before it;
  spill, file written before:  ``_spill``'s write of the state into its file, reused;
  spill, new file:             the same into a new unnamed file (a call's first spill);
  spill read back:             ``_spill``'s read of the state into a reused buffer.

A run of ``@checkpointed`` that needs memory the plain loop does not (a snapshot
buffer, a spill file's page cache) pays "fresh memory" once for it, in whichever
thread happens to touch it first; ``overhead.py`` measures 11 generations per block,
so a one-time cost weighs there as much as 1/11 of it per generation.

    python benchmarks/memory_costs.py            # 64 MiB, fresh regions of 512 MiB, 9 runs
    python benchmarks/memory_costs.py --quick    # 8 MiB, fresh regions of 16 MiB, 3 runs
"""

from __future__ import annotations

import contextlib
import mmap
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import _common

NAME = "memory_costs"
PAGE = 4096


def fresh_region(n: int) -> mmap.mmap:
    region = mmap.mmap(-1, n, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS,
                       prot=mmap.PROT_READ | mmap.PROT_WRITE)
    if hasattr(mmap, "MADV_HUGEPAGE"):
        with contextlib.suppress(OSError):
            region.madvise(mmap.MADV_HUGEPAGE)
    return region


def touch(region: mmap.mmap) -> float:
    import numpy as np

    pages = np.frombuffer(region, dtype=np.uint8)[::PAGE]  # one byte per page, in C
    t = time.perf_counter()
    pages[:] = 1
    return time.perf_counter() - t


def timed(fn: Callable[[], Any]) -> float:
    t = time.perf_counter()
    fn()
    return time.perf_counter() - t


def measure(size: int, fresh_size: int, runs: int, folder: str) -> list[dict[str, Any]]:
    import numpy as np

    from resumable import _spill

    times: dict[str, list[float]] = {}

    def add(case: str, seconds: float) -> None:
        times.setdefault(case, []).append(seconds)

    # Fresh memory first, before this process has freed anything large.
    held = [fresh_region(fresh_size) for _ in range(runs)]
    for region in held:
        add("first touch, fresh memory", touch(region) * size / fresh_size)
    for region in held:
        region.close()
    del held
    for _ in range(runs):
        region = fresh_region(fresh_size)
        add("first touch, memory just freed", touch(region) * size / fresh_size)
        region.close()

    state = np.random.default_rng(0).random(size // 8)
    frames = [state.data.cast("B")]
    target = np.empty_like(state)
    target[:] = 0.0
    fd = _spill._open_unnamed(folder)
    try:
        sizes, pieces = _spill._write_frames(fd, frames)  # the file is written before
        back = np.empty_like(state).data.cast("B")
        _spill._read_frames(fd, sizes, lambda n: back, pieces)  # (touches the buffer)
        for _ in range(runs):  # interleaved
            add("copy into a reused buffer", timed(lambda: np.copyto(target, state)))
            add("spill, file written before", timed(lambda: _spill._write_frames(fd, frames)))
            add("spill read back",
                timed(lambda: _spill._read_frames(fd, sizes, lambda n: back, pieces)))
            new = _spill._open_unnamed(folder)
            try:
                add("spill, new file",
                    timed(lambda fd=new: _spill._write_frames(fd, frames)))  # type: ignore[misc]
            finally:
                os.close(new)
    finally:
        os.close(fd)
    mib = size / _common.MiB
    return [{"case": case, "size_bytes": size, "runs": len(v),
             "ms_median": 1000 * statistics.median(v), "ms_min": 1000 * min(v),
             "ms_max": 1000 * max(v), "ms_per_mib": 1000 * statistics.median(v) / mib,
             "ms": [1000 * x for x in v]}
            for case, v in times.items()]


def main() -> None:
    ap = _common.parser(__doc__.splitlines()[0])
    ap.add_argument("--size-mib", type=float, default=None,
                    help="the state (default 64; --quick 8)")
    ap.add_argument("--fresh-mib", type=float, default=None,
                    help="each fresh region touched (default 512; --quick 16)")
    ap.add_argument("--runs", type=int, default=None, help="runs per row (default 9; --quick 3)")
    args = ap.parse_args()
    size = int((args.size_mib or (8 if args.quick else 64)) * _common.MiB) // 8 * 8
    fresh = int((args.fresh_mib or (16 if args.quick else 512)) * _common.MiB) // PAGE * PAGE
    runs = args.runs or (3 if args.quick else 9)
    folder = tempfile.gettempdir()  # where spill files go by default
    cases = measure(size, fresh, runs, folder)
    print(f"## Memory work for a {_common.fmt_mib(size)} state (median of {runs}; spill "
          f"files in {folder})\n")
    print(_common.markdown_table(
        ["operation", "ms (min-max)", "ms per MiB"],
        [[c["case"], f"{c['ms_median']:.1f} ({c['ms_min']:.1f}-{c['ms_max']:.1f})",
          f"{c['ms_per_mib']:.3f}"] for c in cases],
    ))
    print(f"\nfirst touch: regions of {_common.fmt_mib(fresh)}, scaled to the state's size")
    _common.write_json(args.out, NAME, {
        "config": {"quick": args.quick, "size_bytes": size, "fresh_region_bytes": fresh,
                   "runs": runs, "spill_folder": folder},
        "cases": cases,
    })
    if args.no_plot:
        return
    plt = _common.pyplot()
    if plt is None:
        return
    fig, ax = plt.subplots(figsize=(7, 3.5))
    labels = [c["case"] for c in cases]
    ax.barh(labels, [c["ms_median"] for c in cases], color="#4477aa")
    ax.errorbar([c["ms_median"] for c in cases], labels,
                xerr=[[c["ms_median"] - c["ms_min"] for c in cases],
                      [c["ms_max"] - c["ms_median"] for c in cases]],
                fmt="none", ecolor="black", capsize=3)
    ax.invert_yaxis()
    ax.set_xlabel(f"ms for {_common.fmt_mib(size)}")
    ax.set_title("memory work of a snapshot on this machine")
    fig.tight_layout()
    _common.save_figure(plt, fig, args.out / f"{NAME}.png")


if __name__ == "__main__":
    main()
