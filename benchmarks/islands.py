"""Islands: wall time, and generations redone per kill, as the archipelago grows.

Each case runs ``examples/islands.py`` with 1, 2, 4 and 8 islands as real processes on a
local folder store (ring migration every 4 generations), once with no failure and once
with random SIGKILLs of random islands (each killed island is started again at once,
as a Job controller would). It reports:

- wall time without and with the kills (the archipelago waits for a killed island: its
  neighbours block at the next migration until it has caught up);
- generations redone per kill: generations an island yielded again after a restart,
  i.e. what the kill cost that island (checkpoints are written in the background, so
  a SIGKILL can lose the newest one);
- whether every island's final population equals the no-kill run (it must).

The generation time is a sleep (--gen-time, default 50 ms) standing in for fitness work.

    python benchmarks/islands.py
    python benchmarks/islands.py --quick
"""

from __future__ import annotations

import json
import queue
import random
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import _common

NAME = "islands"
EXAMPLE = _common.ROOT / "examples" / "islands.py"


def run_archipelago(store: str, islands: int, generations: int, gen_time: float,
                    kills: int, seed: int) -> dict[str, Any]:
    """All islands as processes; ``kills`` islands SIGKILLed at random generations."""
    rng = random.Random(seed)
    plan: dict[tuple[int, int], bool] = {}
    while len(plan) < kills:
        plan[(rng.randrange(islands), rng.randrange(1, generations))] = True
    args = ["--islands", str(islands), "--generations", str(generations), "--every", "4",
            "--population", "60", "--dims", "10", "--gen-time", str(gen_time),
            "--experiment", "bench", "--store", store, "-q", "--progress"]
    lines: queue.Queue[tuple[subprocess.Popen[str], str | None]] = queue.Queue()
    env = _common.child_env({"RESUMABLE_MIGRATION_TIMEOUT": "300"})

    def start(island: int) -> subprocess.Popen[str]:
        proc = subprocess.Popen([sys.executable, str(EXAMPLE), *args, "--island", str(island)],
                                stdout=subprocess.PIPE, text=True, env=env)

        def read() -> None:
            assert proc.stdout is not None
            for line in proc.stdout:
                lines.put((proc, line))
            lines.put((proc, None))

        threading.Thread(target=read, daemon=True).start()
        return proc

    t0 = time.perf_counter()
    island_of = {start(i): i for i in range(islands)}
    yielded, results, killed = 0, {}, set()
    last: dict[int, str] = {}  # island -> its last line, for a report on a long wait
    waited = 0.0
    while len(results) < islands:
        try:
            proc, line = lines.get(timeout=30)
        except queue.Empty:
            # No island wrote for 30 s: say who is still running and what each said
            # last, so that a hang (a test's timeout) leaves something to go on.
            waited += 30
            alive = {i: p.pid for p, i in island_of.items() if p.poll() is None}
            print(f"islands: no line for {waited:.0f} s; running {alive}; results "
                  f"{sorted(results)}; last lines {last}", file=sys.stderr, flush=True)
            if waited >= 600:
                raise RuntimeError(f"no island wrote a line for {waited:.0f} s") from None
            continue
        waited = 0.0
        island = island_of[proc]
        if line is not None:
            last[island] = line.strip()
        if line is None:
            code = proc.wait()
            if proc in killed:
                island_of[start(island)] = island
            elif code != 0:
                raise RuntimeError(f"island {island} exited {code}")
        elif proc in killed:
            continue
        elif line.startswith("GEN "):
            yielded += 1
            if plan.pop((island, int(line.split()[2])), False):
                proc.kill()
                killed.add(proc)
        elif line.startswith("RESULT "):
            results[island] = json.loads(line.split(" ", 1)[1])
    wall = time.perf_counter() - t0
    return {"wall_seconds": wall, "kills": len(killed),
            "redone_generations": yielded - islands * generations,
            "populations": [results[i]["population_sha256"] for i in range(islands)]}


def main() -> int:
    p = _common.parser(__doc__.split("\n\n")[0])
    p.add_argument("--generations", type=int, default=40)
    p.add_argument("--gen-time", type=float, default=0.05)
    p.add_argument("--kills", type=int, default=3, help="kills per run (default: 3)")
    p.add_argument("--repeats", type=int, default=3)
    args = p.parse_args()
    if args.quick:
        args.generations, args.gen_time, args.kills, args.repeats = 12, 0.01, 1, 1
    cases = []
    with tempfile.TemporaryDirectory(prefix="resumable-bench-islands-") as tmp:
        for islands in (1, 2, 4, 8):
            clean, failed = [], []
            for r in range(args.repeats):
                clean.append(run_archipelago(f"{tmp}/clean-{islands}-{r}", islands,
                                             args.generations, args.gen_time, 0, r))
                failed.append(run_archipelago(f"{tmp}/kill-{islands}-{r}", islands,
                                              args.generations, args.gen_time, args.kills,
                                              1000 + r))
            kills = sum(f["kills"] for f in failed)
            cases.append({
                "islands": islands,
                "wall_seconds_no_kill": statistics.median(c["wall_seconds"] for c in clean),
                "wall_seconds_with_kills": statistics.median(f["wall_seconds"] for f in failed),
                "kills": kills,
                "redone_generations_per_kill": sum(f["redone_generations"] for f in failed)
                / max(kills, 1),
                "same_result": all(f["populations"] == clean[0]["populations"]
                                   for f in failed + clean),
            })
            print(f"{islands} islands done", file=sys.stderr)
    config = {"quick": args.quick, "generations": args.generations, "gen_time": args.gen_time,
              "kills_per_run": args.kills, "repeats": args.repeats, "every": 4,
              "store": "local folder"}
    path = _common.write_json(args.out, NAME, {"config": config, "cases": cases})
    print(_common.markdown_table(
        ["islands", "wall, no kill (s)", f"wall, {args.kills} kills (s)",
         "redone generations per kill", "same result"],
        [[c["islands"], f"{c['wall_seconds_no_kill']:.2f}",
          f"{c['wall_seconds_with_kills']:.2f}", f"{c['redone_generations_per_kill']:.2f}",
          "yes" if c["same_result"] else "NO"] for c in cases]))
    print(f"results: {path}")
    plt = None if args.no_plot else _common.pyplot()
    if plt is not None:
        fig, (left, right) = plt.subplots(1, 2, figsize=(9, 3.5))
        xs = [c["islands"] for c in cases]
        left.plot(xs, [c["wall_seconds_no_kill"] for c in cases], "o-", label="no kill")
        left.plot(xs, [c["wall_seconds_with_kills"] for c in cases], "s-",
                  label=f"{args.kills} kills")
        left.set(xlabel="islands", ylabel="wall time (s)", xticks=xs)
        left.legend()
        right.bar([str(x) for x in xs], [c["redone_generations_per_kill"] for c in cases])
        right.set(xlabel="islands", ylabel="generations redone per kill")
        _common.save_figure(plt, fig, args.out / f"{NAME}.png")
    return 0 if all(c["same_result"] for c in cases) else 1


if __name__ == "__main__":
    sys.exit(main())
