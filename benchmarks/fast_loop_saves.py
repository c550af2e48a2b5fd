"""How many saves a fast loop of a large state gets while it runs.

A loop whose generations are pure Python holds the GIL from one yield to the next; the
upload thread needs the GIL back after each of its writes, and a newer state replaces
the save still waiting at every yield. Until a062382/bdfa786 such a loop started no save
at all while it ran (1 in 1,500 yields of a 32 MiB state): a SIGKILL then lost the whole
run. Each case runs ``--yields`` yields of a ``every="generation"`` loop with no work in
its generations, into a local folder, in its own process, and counts the checkpoints
written before the body returned (the final save excluded):

  spill file:          the default (``RESUMABLE_SPILL_DIR`` on disk);
  spill off:           ``RESUMABLE_SPILL_DIR=off`` (so also tmpfs, or a spill that failed);
  one copy:            ``RESUMABLE_SNAPSHOT_COPIES=1``.

    python benchmarks/fast_loop_saves.py           # 4 and 32 MiB, 1,500 yields
    python benchmarks/fast_loop_saves.py --quick   # 2 MiB, 100 yields
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import _common

NAME = "fast_loop_saves"
MODES = {
    "spill file": {},
    "spill off": {"RESUMABLE_SPILL_DIR": "off"},
    "one copy": {"RESUMABLE_SNAPSHOT_COPIES": "1"},
}


def child(size: int, yields: int, folder: str) -> None:
    """One loop, in this process; prints its figures as one JSON line."""
    import threading
    import time

    import numpy as np
    from wrappers import DelegatingStore

    from resumable import checkpointed
    from resumable.stores import open_store

    class Counting(DelegatingStore):
        def __init__(self, inner: Any) -> None:
            super().__init__(inner)
            self.steps: list[int] = []
            self.lock = threading.Lock()

        def put(self, key: str, data: Any) -> None:
            super().put(key, data)
            if "/ckpt-" in key:
                with self.lock:
                    self.steps.append(int(key[-12:]))

    store = Counting(open_store(os.path.join(folder, "store")))
    during: list[Any] = []

    @checkpointed(store=store, run_id="fast", every="generation", keep=2)
    def body(*, state: Any = None) -> Any:
        state = {"i": 0, "a": np.zeros(size // 8)}
        started = time.perf_counter()
        for i in range(1, yields + 1):
            state["i"] = i
            state["a"][0] = i
            yield state
        with store.lock:
            during.append((list(store.steps), time.perf_counter() - started))

    body()
    steps, seconds = during[0]
    print(json.dumps({"saves_during": len(steps), "steps": steps, "seconds": seconds}))


def run_case(mode: str, size: int, yields: int) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as folder:
        extra = {"RESUMABLE_SPILL_DIR": folder, **MODES[mode]}
        proc = subprocess.run(
            [sys.executable, __file__, "--child", str(size), str(yields), folder],
            capture_output=True, text=True, env=_common.child_env(extra), timeout=600,
        )
    if proc.returncode != 0:
        raise SystemExit(f"{mode}, {_common.fmt_mib(size)}: the loop exited "
                         f"{proc.returncode}:\n{proc.stderr[-3000:]}")
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    out["between_saves_s"] = (out["seconds"] / (out["saves_during"] - 1)
                              if out["saves_during"] > 1 else None)
    return {"mode": mode, "size_bytes": size, "yields": yields, **out}


def main() -> None:
    if len(sys.argv) == 5 and sys.argv[1] == "--child":
        child(int(sys.argv[2]), int(sys.argv[3]), sys.argv[4])
        return
    ap = _common.parser(__doc__.splitlines()[0])
    ap.add_argument("--sizes", default=None, help="MiB, comma-separated (default 4,32)")
    ap.add_argument("--yields", type=int, default=None, help="per loop (default 1500)")
    args = ap.parse_args()
    sizes = [int(float(s) * _common.MiB) // 8 * 8
             for s in (args.sizes or ("2" if args.quick else "4,32")).split(",")]
    yields = args.yields or (100 if args.quick else 1500)
    cases = [run_case(mode, size, yields) for size in sizes for mode in MODES]
    print(f"## Saves started while a loop of {yields} pure-Python yields runs "
          "(every=\"generation\", local folder)\n")
    print(_common.markdown_table(
        ["state", "mode", "loop s", "saves during the loop", "s between saves"],
        [[_common.fmt_mib(c["size_bytes"]), c["mode"], f"{c['seconds']:.2f}",
          c["saves_during"],
          "-" if c["between_saves_s"] is None else f"{c['between_saves_s']:.3f}"]
         for c in cases],
    ))
    _common.write_json(args.out, NAME, {
        "config": {"quick": args.quick, "sizes_bytes": sizes, "yields": yields,
                   "modes": MODES},
        "cases": cases,
    })
    if args.no_plot:
        return
    plt = _common.pyplot()
    if plt is None:
        return
    fig, ax = plt.subplots(figsize=(7, 3.5))
    labels = [f"{_common.fmt_mib(c['size_bytes'])}, {c['mode']}" for c in cases]
    ax.barh(labels, [c["saves_during"] for c in cases], color="#4477aa")
    ax.invert_yaxis()
    ax.set_xlabel(f"saves written during {yields} pure-Python yields")
    ax.set_title("saves a fast loop of a large state gets")
    fig.tight_layout()
    _common.save_figure(plt, fig, args.out / f"{NAME}.png")


if __name__ == "__main__":
    main()
