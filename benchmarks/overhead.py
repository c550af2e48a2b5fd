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
its ratio to ``none`` (per repeat, against the ``none`` block run beside it; the median of
the repeats, with their min and max, and the pooled ratio of all generations), the
end-of-run cost (final flush), the child's peak RSS, and the S3 server's CPU time per
generation (it runs on the same 2 cores: what it spends receiving uploads is taken from
the loop's machine, which a real S3 endpoint on another host would not). Beside the ratio, the same
ratio from the fourth generation on: the second and third generations pay one-time costs
(the first snapshot buffers are fresh memory, 50 ms per 64 MiB of page faults here; the
first upload starts), which weigh 2 of the 11 measured generations of a block and little in
a long run. The target is checked on the ratio with them.
The size ``tiny`` is a 4 KiB population: what the decorator costs when the state costs
nothing to copy.

A second table has an object-heavy state, as a DEAP GA keeps it: DEAP individuals
(``creator.Individual``, a list of 100 floats with a fitness) in ~100 ms generations.
Issue 13 sets the row at 10,000 individuals that take 36 ms to pickle; DEAP's own classes
take 2-4 times that here, and what the loop pays at ``every=10`` is the pickle's share of
a generation, so by default the population is sized to the issue's 36 ms pickle
(``--deap-pickle-ms``; about 4,000 individuals on the 2-core VM) and
``--deap-individuals 10000`` gives the issue's count. ``--deap-individual plain``
replaces DEAP's classes with a list subclass holding its fitness values: 10,000 of those
pickle in ~40 ms here, the issue's state in both count and pickle time. On a local
folder, with ``every=10`` and ``every="generation"`` beside ``none``, each also with
``RESUMABLE_SNAPSHOT_FORK=1`` (``every=10 fork``, ``every=generation fork``: a forked
child pickles the population).
For ``every="generation"`` the loop cannot pay less than its own snapshot (a pickle on
its thread, unless forked), hence the bound ``1 + pickle / generation + 0.03``. Lag: at
each yield, how many generations the newest durable checkpoint is behind (from the
checkpoint files' modification times; these rows use ``keep=None`` so that every
checkpoint stays to be timed).

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
TARGETS_RCLONE = {1: 1.05, 16: 1.10, 64: 1.30}  # MiB -> max ratio to none (64: issue 13)
TINY_MIB = 4096 / (1024 * 1024)  # --sizes tiny: 4 rows of GENES float64
# "fork": with RESUMABLE_SNAPSHOT_FORK=1 (a forked child pickles the population)
DEAP_MODES = ("none", "every=10", "every=generation", "every=10 fork",
              "every=generation fork")
DEAP_TARGET_EVERY10 = 1.06  # ratio to none; for every=generation: 1 + pickle/gen + 0.03
DEAP_PICKLE_MS = 36.0  # issue 13's DEAP-like state pickles in 36 ms (10,000 individuals there)
DEAP_SLACK = 0.03
WARMUP = 2  # measured intervals holding one-time costs (reported apart, not dropped)


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


def deap_classes() -> tuple[Any, Any]:
    """DEAP's own creator classes (what a DEAP GA pickles), made once per process."""
    from deap import base, creator

    if not hasattr(creator, "BenchFitness"):
        creator.create("BenchFitness", base.Fitness, weights=(-1.0,))
        creator.create("BenchIndividual", list, fitness=creator.BenchFitness)
    return creator.BenchIndividual, creator.BenchFitness


class PlainIndividual(list):  # type: ignore[type-arg]
    """DEAP-like without DEAP (``--deap-individual plain``): a list of floats and its
    fitness values, as the issue's "10,000 individuals x 100 floats, 36 ms to pickle"
    (DEAP's own classes take 3-4 times that for 10,000). ``fitness`` is the individual
    itself, so that ``ind.fitness.values`` reads and writes as with DEAP."""

    values: tuple[float, ...] = ()

    @property
    def fitness(self) -> PlainIndividual:
        return self


def individual_class(kind: str) -> Any:
    return PlainIndividual if kind == "plain" else deap_classes()[0]


def make_deap_state(individuals: int, genes: int, seed: int,
                    kind: str = "deap") -> dict[str, Any]:
    import random

    individual = individual_class(kind)
    r = random.Random(seed)
    pop = []
    for _ in range(individuals):
        ind = individual(r.uniform(-5.12, 5.12) for _ in range(genes))
        ind.fitness.values = (sum(x * x for x in ind),)
        pop.append(ind)
    return {"generation": 0, "population": pop, "best": float("inf"), "seed": seed}


class DeapWork:
    """One DEAP-style generation: a tenth of the population replaced by mutated
    offspring (new Individual objects, evaluated), then a calibrated numpy filler."""

    def __init__(self, fill_units: int, kind: str = "deap") -> None:
        import random

        self.filler = Work(fill_units)
        self.rng = random.Random(7)
        self.kind = kind

    def population_step(self, state: dict[str, Any]) -> None:
        individual = individual_class(self.kind)
        r = self.rng
        pop = list(state["population"])
        n = len(pop)
        for _ in range(max(1, n // 10)):
            a, b = pop[r.randrange(n)], pop[r.randrange(n)]
            parent = a if a.fitness.values[0] < b.fitness.values[0] else b
            child = individual(x + r.gauss(0.0, 0.1) if r.random() < 0.1 else x
                               for x in parent)
            child.fitness.values = (sum(x * x for x in child),)
            pop[r.randrange(n)] = child
        state["population"] = pop
        state["best"] = min(state["best"], min(i.fitness.values[0] for i in pop))
        state["generation"] += 1

    def __call__(self, state: dict[str, Any]) -> None:
        self.population_step(state)
        self.filler.fill()


def calibrate_deap(individuals: int, genes: int, work_ms: float,
                   kind: str = "deap") -> dict[str, Any]:
    w = DeapWork(0, kind)
    state = make_deap_state(individuals, genes, 1, kind)
    samples = []
    for _ in range(4):
        t = time.thread_time()
        w.population_step(state)
        samples.append(time.thread_time() - t)
    pop_ms = statistics.median(samples[1:]) * 1000
    pickles = []
    for _ in range(3):
        t = time.thread_time()
        pickle.dumps(state, protocol=5)
        pickles.append(time.thread_time() - t)
    unit = Work(20)
    unit.fill()
    t = time.thread_time()
    unit.fill()
    unit_ms = (time.thread_time() - t) * 1000 / 20
    units = max(0, round((work_ms - pop_ms) / unit_ms))
    return {"population_ms": pop_ms, "unit_ms": unit_ms, "fill_units": units,
            "pickle_ms": 1000 * statistics.median(pickles)}


def deap_size_for(pickle_ms: float, genes: int, most: int = 10_000,
                  kind: str = "deap") -> dict[str, Any]:
    """How many DEAP individuals take ``pickle_ms`` to pickle on this machine (<= most).

    Pickling time grows linearly with the population: measured at ``most`` individuals
    (median of 5, CPU time of this thread), scaled down.
    """
    state = make_deap_state(most, genes, 1, kind)
    pickle.dumps(state, protocol=5)  # warm: first-use costs of the classes
    times = []
    for _ in range(5):
        t = time.thread_time()
        pickle.dumps(state, protocol=5)
        times.append(time.thread_time() - t)
    full_ms = 1000 * statistics.median(times)
    n = max(100, min(most, round(most * pickle_ms / full_ms)))
    return {"individuals": n, "pickle_ms_at_most": full_ms, "most": most}


def calibrate(size_bytes: int, work_ms: float) -> dict[str, Any]:
    """How many filler units make one generation take ~work_ms of CPU at this size.

    CPU time of this thread, not wall time: on a loaded machine wall time would make
    the generation lighter than intended (and every ratio larger)."""
    w = Work(0)
    state = make_state(size_bytes, 1)
    for _ in range(2):
        w.population_step(state)
    samples = []
    for _ in range(5):
        t = time.thread_time()
        w.population_step(state)
        samples.append(time.thread_time() - t)
    pop_ms = statistics.median(samples) * 1000
    w.fill_units = 20
    w.fill()
    t = time.thread_time()
    w.fill()
    unit_ms = (time.thread_time() - t) * 1000 / 20
    units = max(0, round((work_ms - pop_ms) / unit_ms))
    return {"population_ms": pop_ms, "unit_ms": unit_ms, "fill_units": units}


def child(spec: dict[str, Any]) -> dict[str, Any]:
    import logging

    logging.getLogger("resumable").setLevel(logging.ERROR)
    mode, store, size, gens = spec["mode"], spec["store"], spec["size_bytes"], spec["gens"]
    deap = spec.get("kind") == "deap"
    work: Any = (DeapWork(spec["fill_units"], spec.get("individual", "deap")) if deap
                 else Work(spec["fill_units"]))
    stamps: list[float] = []
    cpu_stamps: list[tuple[float, float]] = []  # (loop thread, whole process) CPU seconds
    # The S3 server's CPU seconds at each generation's start (rclone's process; moto runs
    # in the benchmark's own process, idle but for it): on loopback it shares the 2 cores
    server_pid = spec.get("server_pid")
    server_stamps: list[float | None] = []
    walls: list[tuple[int, float]] = []  # (generation yielded, time.time()) for the lag
    rss_before = _common.current_rss_bytes()
    if deap:
        state0 = make_deap_state(spec["individuals"], spec["genes"], spec["seed"],
                                 spec.get("individual", "deap"))
    else:
        state0 = make_state(size, spec["seed"])
    rss_state = _common.current_rss_bytes()
    ended: float

    def body(*, state: Any = None):  # type: ignore[no-untyped-def]
        if state is None:
            state = state0
        while state["generation"] < gens:
            stamps.append(time.perf_counter())
            cpu_stamps.append((time.thread_time(), time.process_time()))
            if server_pid:
                server_stamps.append(_common.process_cpu_seconds(server_pid))
            work(state)
            if deap:
                walls.append((state["generation"], time.time()))
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
    elif mode == "checkpointed" or mode.startswith("every="):
        from resumable import checkpointed

        every: Any = (mode.removeprefix("every=").removesuffix(" fork")
                      if mode != "checkpointed" else "generation")
        every = int(every) if every.isdigit() else every
        f = checkpointed(every=every, store=store, run_id=spec["key"],
                         keep=None if deap else 3)(body)
        f()
        ended = time.perf_counter()
    else:
        raise ValueError(mode)
    intervals = [b - a for a, b in itertools.pairwise(stamps)]
    # per generation, from the second generation's start to the last one's (as intervals[1:])
    n_cpu = max(1, len(cpu_stamps) - 2)
    loop_cpu = (cpu_stamps[-1][0] - cpu_stamps[1][0]) / n_cpu if len(cpu_stamps) > 2 else 0.0
    proc_cpu = (cpu_stamps[-1][1] - cpu_stamps[1][1]) / n_cpu if len(cpu_stamps) > 2 else 0.0
    server_cpu = None
    if len(server_stamps) > 2 and None not in (server_stamps[1], server_stamps[-1]):
        server_cpu = (server_stamps[-1] - server_stamps[1]) / n_cpu  # type: ignore[operator]
    lag = durable_lag(Path(store) / spec["key"], walls) if deap and mode != "none" else None
    pickle_seconds = None
    if deap:  # CPU seconds, in every block, after the timing
        times = []
        for _ in range(3):
            t = time.thread_time()
            pickle.dumps(state0, protocol=5)
            times.append(time.thread_time() - t)
        pickle_seconds = statistics.median(times)
    return {
        "loop_cpu_seconds": loop_cpu,
        "process_cpu_seconds": proc_cpu,
        "server_cpu_seconds": server_cpu,
        "lag": lag,
        "pickle_seconds": pickle_seconds,
        "intervals": intervals[1:],  # the first generation has no checkpoint before it
        "end_seconds": ended - stamps[-1],  # after the last generation: final save, flush
        "start_seconds": stamps[0] - started,
        "total_seconds": ended - started,
        "peak_rss": _common.peak_rss_bytes(),
        "rss_before_state": rss_before,
        "rss_with_state": rss_state,
        "state_bytes": (len(pickle.dumps(state0, protocol=5)) if deap
                        else int(state0["population"].nbytes)),
    }


def durable_lag(run_dir: Path, walls: list[tuple[int, float]]) -> list[int]:
    """At each yield: generations between it and the newest checkpoint durable by then.

    A checkpoint's file is written to a temporary name and renamed; its modification
    time is when its last byte was written, so this errs by the fsync and rename only.
    """
    durable = sorted((p.stat().st_mtime, int(p.name.rsplit("-", 1)[1]))
                     for p in run_dir.glob("ckpt-*"))
    lags = []
    newest, i = 0, 0
    for gen, t in walls:
        while i < len(durable) and durable[i][0] <= t:
            newest = max(newest, durable[i][1])
            i += 1
        lags.append(gen - newest)
    return lags


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
                    help="blocks per mode and case, interleaved (default 8; --quick 1)")
    ap.add_argument("--work-ms", type=float, default=None,
                    help="numpy work per generation (default 100; --quick 20)")
    ap.add_argument("--calibrate-deap", help=argparse_hidden())
    ap.add_argument("--deap-individuals", type=int, default=None,
                    help="DEAP rows: individuals (default: as many as pickle in "
                         "--deap-pickle-ms; --quick 500; 0: no DEAP rows)")
    ap.add_argument("--deap-pickle-ms", type=float, default=DEAP_PICKLE_MS,
                    help=f"DEAP rows: size the population to pickle in this many ms of CPU "
                         f"(default {DEAP_PICKLE_MS:g}, issue 13's state; at most 10000 "
                         "individuals)")
    ap.add_argument("--calibrate-deap-size", help=argparse_hidden())
    ap.add_argument("--deap-individual", choices=("deap", "plain"), default="deap",
                    help="DEAP rows: DEAP's own creator classes (default), or plain: a "
                         "list subclass with its fitness values, as the issue's "
                         "DEAP-like state")
    ap.add_argument("--deap-generations", type=int, default=None,
                    help="DEAP rows: generations per block (default 30; --quick 12)")
    args = ap.parse_args(argv)
    if args.child:
        print(json.dumps(child(json.loads(args.child))))
        return 0
    if args.calibrate:
        size, work_ms = json.loads(args.calibrate)
        print(json.dumps(calibrate(size, work_ms)))
        return 0
    if args.calibrate_deap:
        print(json.dumps(calibrate_deap(*json.loads(args.calibrate_deap))))
        return 0
    if args.calibrate_deap_size:
        print(json.dumps(deap_size_for(*json.loads(args.calibrate_deap_size))))
        return 0

    sizes = [TINY_MIB if s == "tiny" else float(s)
             for s in (args.sizes or ("tiny,1" if args.quick else "tiny,1,16,64")).split(",")]
    deap_sizing: dict[str, Any] | None = None
    if args.deap_individuals is not None:
        deap_n = args.deap_individuals
    elif args.quick:
        deap_n = 500
    else:  # in a fresh process, as the blocks run
        deap_sizing = json.loads(subprocess.run(
            [sys.executable, __file__, "--calibrate-deap-size",
             json.dumps([args.deap_pickle_ms, 100, 10_000, args.deap_individual])],
            capture_output=True, text=True, env=_common.child_env(), check=True).stdout)
        deap_n = deap_sizing["individuals"]
    deap_gens = args.deap_generations or (12 if args.quick else 30)
    stores = [s for s in args.stores.split(",") if s]
    gens = args.generations or (4 if args.quick else 12)
    # 8: on this shared 2-core VM one block in eight or so runs 30-50 % slow (the host), and
    # the median of 3 moved by 0.1 between runs of the same code (rclone 16 MiB: 1.176 with
    # 3 repeats, 1.065 with 8, 5 December)
    repeats = args.repeats or (1 if args.quick else 8)
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
    load_start = _common.load_average()
    with ExitStack() as stack, tempfile.TemporaryDirectory(prefix="bench-overhead-") as tmp:
        where: dict[str, tuple[str, dict[str, str], int | None]] = {}
        for s in stores:
            if s == "local":
                where[s] = (str(Path(tmp) / "local"), {}, None)
            else:
                srv = stack.enter_context(_servers.server(s))
                where[s] = (srv.new_store_url("overhead"), srv.env, srv.pid)
        for rep in range(repeats):
            for s in stores:
                url, env, server_pid = where[s]
                for mib in sizes:
                    order = MODES[rep % 3:] + MODES[: rep % 3]  # rotate who goes first
                    for mode in order:
                        spec = {"mode": mode, "store": url, "size_bytes": int(mib * _common.MiB),
                                "gens": gens, "seed": rep, "key": f"b-{uuid.uuid4().hex[:12]}",
                                "fill_units": calib[mib]["fill_units"],
                                "server_pid": server_pid}
                        r = run_child(spec, env)
                        r.update({"store": s, "size_mib": mib, "mode": mode, "repeat": rep})
                        blocks.append(r)
                        print(f"  {s:6} {size_label(mib):>8} {mode:12} "
                              f"{statistics.mean(r['intervals']) * 1000:7.1f} ms/gen",
                              file=sys.stderr, flush=True)
        deap_blocks, deap_calib = run_deap(tmp, deap_n, deap_gens, repeats, work_ms,
                                           args.deap_individual)
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
                by_repeat = {b["repeat"]: statistics.mean(b["intervals"]) for b in bs}
                # From the fourth generation on: the first two measured intervals hold
                # one-time costs (fresh snapshot buffers, the first upload's start).
                steady = {b["repeat"]: statistics.mean(b["intervals"][WARMUP:])
                          for b in bs if len(b["intervals"]) > WARMUP}
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
                row["loop_cpu_ms"] = 1000 * statistics.median(b["loop_cpu_seconds"] for b in bs)
                row["process_cpu_ms"] = 1000 * statistics.median(
                    b["process_cpu_seconds"] for b in bs)
                server = [b["server_cpu_seconds"] for b in bs
                          if b.get("server_cpu_seconds") is not None]
                row["server_cpu_ms"] = 1000 * statistics.median(server) if server else None
                row["_by_repeat"] = by_repeat
                row["_steady"] = steady
                if mode == "none":
                    base = row
                assert base is not None
                # The ratio per repeat, each block against the baseline block of the same
                # repeat (run next to it), and their median: one slow block cannot move
                # it. The pooled ratio (all generations' mean over none's) is kept beside.
                ratios = [by_repeat[k] / base["_by_repeat"][k] for k in sorted(by_repeat)]
                row["ratios"] = ratios
                row["ratio"] = statistics.median(ratios)
                row["ratio_min"], row["ratio_max"] = min(ratios), max(ratios)
                row["ratio_pooled"] = row["ms_per_generation"] / base["ms_per_generation"]
                steady_ratios = [steady[k] / base["_steady"][k] for k in sorted(steady)
                                 if k in base["_steady"]]
                if steady_ratios:
                    row["ratios_after_warmup"] = steady_ratios
                    row["ratio_after_warmup"] = statistics.median(steady_ratios)
                row["loop_cpu_ratio"] = row["loop_cpu_ms"] / base["loop_cpu_ms"]
                row["process_cpu_ratio"] = row["process_cpu_ms"] / base["process_cpu_ms"]
                row["extra_rss_mib"] = row["peak_rss_mib"] - base["peak_rss_mib"]
                target = TARGETS_RCLONE.get(int(mib)) if s == "rclone" and mib >= 1 else None
                if mode == "checkpointed" and target is not None:
                    row["target_ratio"] = target
                    row["meets_target"] = row["ratio"] <= target
                cases.append(row)
        for row in cases:
            row.pop("_by_repeat", None)
            row.pop("_steady", None)

    deap_cases = deap_rows(deap_blocks, deap_calib, work_ms)
    payload = {
        "config": {"sizes_mib": sizes, "stores": stores, "generations_per_block": gens,
                   "repeats": repeats, "work_ms": work_ms, "calibration": calib,
                   "quick": args.quick,
                   "loadavg_at_start": load_start, "targets_rclone": TARGETS_RCLONE,
                   "deap": {"individuals": deap_n, "genes": 100, "store": "local",
                            "individual": args.deap_individual,
                            "sized_to_pickle_ms": (args.deap_pickle_ms if deap_sizing
                                                   else None),
                            "sizing": deap_sizing,
                            "generations_per_block": deap_gens, "keep": None,
                            "calibration": deap_calib}},
        "cases": cases,
        "deap_cases": deap_cases,
        "blocks": blocks,
        "deap_blocks": deap_blocks,
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
        table.append([r["store"], size_label(r["size_mib"]), r["mode"],
                      f"{r['ms_per_generation']:.1f}",
                      f"{r['ratio']:.3f} ({r['ratio_min']:.3f}-{r['ratio_max']:.3f})",
                      f"{r['ratio_pooled']:.3f}",
                      (f"{r['ratio_after_warmup']:.3f} ({min(r['ratios_after_warmup']):.3f}-"
                       f"{max(r['ratios_after_warmup']):.3f})"
                       if "ratio_after_warmup" in r else "-"), target,
                      f"{r['loop_cpu_ratio']:.3f} / {r['process_cpu_ratio']:.3f}",
                      (f"{r['server_cpu_ms']:.0f}" if r.get("server_cpu_ms") is not None
                       else "-"),
                      f"{r['end_ms']:.0f}", f"{r['peak_rss_mib']:.0f}",
                      f"{r['extra_rss_mib']:+.0f}"])
    print(_common.markdown_table(
        ["store", "state", "mode", "ms / generation", "ratio to none: median of repeats "
         "(min-max)", "pooled ratio", f"ratio from generation {WARMUP + 2} on", "target",
         "CPU ratio: loop thread / process", "server CPU (ms / generation)",
         "end of run (ms)", "peak RSS (MiB)",
         "RSS vs none (MiB)"], table))
    print("\nms / generation: mean time from one generation's start to the next one's, "
          "so each holds one generation and one checkpoint; ratio: per repeat, the block's "
          "mean over the none block of the same repeat, median (min-max) of the repeats; "
          f"pooled: every generation's mean over none's; from generation {WARMUP + 2} on: "
          "the same ratio without the first two checkpointed generations, which pay "
          "one-time costs (fresh snapshot buffers, the first upload); end of run: from the last "
          "generation to the call's return (final save, flush). CPU ratio: CPU time per "
          "generation over none's, of the loop's thread and of the whole process (uploads "
          "included); a loaded machine inflates wall time, much less CPU time. Server "
          "CPU: the S3 server's CPU time per generation (rclone's process; for moto, the "
          "benchmark's own process, in which it runs and which does nothing else meanwhile), "
          "on the same cores as the loop.")
    if deap_cases:
        print_deap(deap_cases, deap_n, deap_gens, repeats,
                   args.deap_pickle_ms if deap_sizing else None, args.deap_individual)
    print(f"load average (1/5/15 min) at start {load_start}, at end {_common.load_average()} "
          f"on {os.cpu_count()} cores")
    print(f"results: {path}")
    if not args.no_plot:
        plot(cases, stores, sizes, args.out / f"{NAME}.png", work_ms, deap_cases)
    return 0


def size_label(mib: float) -> str:
    return "tiny (4 KiB)" if mib == TINY_MIB else f"{mib:g} MiB"


def run_deap(tmp: str, individuals: int, gens: int, repeats: int, work_ms: float,
             kind: str = "deap") -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """The DEAP rows: none, every=10, every="generation", interleaved, on a local folder."""
    if individuals <= 0:
        return [], {}
    proc = subprocess.run(
        [sys.executable, __file__, "--calibrate-deap",
         json.dumps([individuals, 100, work_ms, kind])],
        capture_output=True, text=True, env=_common.child_env(), check=True)
    calib = json.loads(proc.stdout)
    blocks = []
    store = str(Path(tmp) / "deap")
    for rep in range(repeats):
        k = rep % len(DEAP_MODES)
        for mode in DEAP_MODES[k:] + DEAP_MODES[:k]:
            spec = {"kind": "deap", "mode": mode, "store": store, "size_bytes": 0,
                    "individuals": individuals, "genes": 100, "gens": gens, "seed": rep,
                    "key": f"d-{uuid.uuid4().hex[:12]}", "fill_units": calib["fill_units"],
                    "individual": kind}
            r = run_child(spec, {"RESUMABLE_SNAPSHOT_FORK": "1"} if mode.endswith(" fork")
                          else {})
            r.update({"store": "local", "mode": mode, "repeat": rep})
            blocks.append(r)
            print(f"  deap   {individuals:>8} {mode:16} "
                  f"{statistics.mean(r['intervals']) * 1000:7.1f} ms/gen",
                  file=sys.stderr, flush=True)
    return blocks, calib


def deap_rows(blocks: list[dict[str, Any]], calib: dict[str, Any],
              work_ms: float) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    if not blocks:
        return rows
    base_blocks = {b["repeat"]: statistics.mean(b["intervals"]) for b in blocks
                   if b["mode"] == "none"}
    # pickle / generation per repeat, both in CPU time of the loop's thread and both
    # measured in that repeat's baseline block (wall time would count other processes)
    bounds = {b["repeat"]: 1 + b["pickle_seconds"] / b["loop_cpu_seconds"] + DEAP_SLACK
              for b in blocks if b["mode"] == "none"}
    pickle_ms = 1000 * statistics.median(b["pickle_seconds"] for b in blocks)
    base_cpu = {b["repeat"]: b["loop_cpu_seconds"] for b in blocks if b["mode"] == "none"}
    for mode in DEAP_MODES:
        bs = [b for b in blocks if b["mode"] == mode]
        # ratio per repeat against the baseline block of the same repeat: the spread
        ratios = [statistics.mean(b["intervals"]) / base_blocks[b["repeat"]] for b in bs]
        cpu_ratios = [b["loop_cpu_seconds"] / base_cpu[b["repeat"]] for b in bs]
        row: dict[str, Any] = {
            "kind": "deap", "store": "local", "mode": mode,
            "loop_cpu_ratio": statistics.median(cpu_ratios), "loop_cpu_ratios": cpu_ratios,
            "ms_per_generation": 1000 * statistics.median(
                statistics.mean(b["intervals"]) for b in bs),
            "ratio": statistics.median(ratios),
            "ratio_min": min(ratios), "ratio_max": max(ratios), "ratios": ratios,
            "pickle_ms": pickle_ms,
            "pickle_ms_calibration": calib["pickle_ms"],
            "end_ms": 1000 * statistics.median(b["end_seconds"] for b in bs),
            "peak_rss_mib": max(b["peak_rss"] for b in bs) / _common.MiB,
            "state_mib": bs[0]["state_bytes"] / _common.MiB,
        }
        if mode != "none":
            lags = [x for b in bs for x in (b["lag"] or [])]
            row["lag_median"] = statistics.median(lags) if lags else None
            row["lag_max"] = max(lags) if lags else None
        if mode.startswith("every=10"):
            row["target_ratio"] = DEAP_TARGET_EVERY10
        elif mode.startswith("every=generation"):
            row["target_ratio"] = statistics.median(bounds.values())
            row["target_ratio_repeats"] = [bounds[b["repeat"]] for b in bs]
            # met in how many repeats, each against its own bound
            row["repeats_within_bound"] = sum(
                statistics.mean(b["intervals"]) / base_blocks[b["repeat"]] <= bounds[b["repeat"]]
                for b in bs)
        if "target_ratio" in row:
            row["meets_target"] = row["ratio"] <= row["target_ratio"]
        rows.append(row)
    base_rss = rows[0]["peak_rss_mib"]
    for row in rows:
        row["extra_rss_mib"] = row["peak_rss_mib"] - base_rss
    return rows


def print_deap(rows: list[dict[str, Any]], individuals: int, gens: int, repeats: int,
               sized_to_ms: float | None = None, kind: str = "deap") -> None:
    r0 = rows[0]
    sized = (f"; sized to pickle in {sized_to_ms:g} ms as issue 13's state" if sized_to_ms
             else "")
    what = "plain DEAP-like individuals" if kind == "plain" else "DEAP individuals"
    print(f"\n## Object-heavy state: {individuals:,} {what} x 100 floats "
          f"({r0['state_mib']:.1f} MiB pickled, {r0['pickle_ms']:.0f} ms to pickle, "
          f"{r0['pickle_ms'] / r0['ms_per_generation']:.0%} of a generation{sized}), local "
          f"folder ({repeats} x {gens - 1} generations per row, interleaved)\n")
    table = []
    for r in rows:
        target = ""
        if "target_ratio" in r:
            target = f"<= {r['target_ratio']:.2f} " + ("met" if r["meets_target"] else
                                                       "**missed**")
            if "repeats_within_bound" in r:
                target += f" ({r['repeats_within_bound']} of {len(r['ratios'])} repeats)"
        lag = "" if r["mode"] == "none" else f"{r['lag_median']:g} (max {r['lag_max']})"
        table.append([r["mode"], f"{r['ms_per_generation']:.1f}",
                      f"{r['ratio']:.3f} ({r['ratio_min']:.3f} to {r['ratio_max']:.3f})",
                      target, f"{r['loop_cpu_ratio']:.3f}", lag, f"{r['end_ms']:.0f}",
                      f"{r['extra_rss_mib']:+.0f}"])
    print(_common.markdown_table(
        ["mode", "ms / generation", "ratio to none (min to max)", "target",
         "loop-thread CPU ratio", "durable lag, generations (median)", "end of run (ms)",
         "RSS vs none (MiB)"], table))
    print("\nevery=generation's target is 1 + pickle / generation + 0.03: the loop pays its "
          "own snapshot and nothing else. Lag: at each yield, generations since the newest "
          "durable checkpoint.")


def argparse_hidden() -> str:
    import argparse

    return argparse.SUPPRESS


def plot(cases: list[dict[str, Any]], stores: list[str], sizes: list[float], path: Path,
         work_ms: float, deap_cases: list[dict[str, Any]]) -> None:
    plt = _common.pyplot()
    if plt is None:
        return
    panels = len(stores) + (1 if deap_cases else 0)
    fig, axes = plt.subplots(1, panels, figsize=(3.6 * panels, 4.0), sharey=True,
                             squeeze=False)
    colors = {"snippet": "#c44e52", "checkpointed": "#55a868"}
    width = 0.38
    for ax, s in zip(axes[0][:len(stores)], stores, strict=True):
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
        ax.set_xticks(range(len(sizes)), [size_label(m).split(" (")[0] for m in sizes])
        ax.set_title({"local": "local folder", "moto": "moto server",
                      "rclone": "rclone serve s3"}.get(s, s), fontsize=10)
    if deap_cases:
        ax = axes[0][-1]
        rows = [c for c in deap_cases if c["mode"] != "none"]
        for j, c in enumerate(rows):
            err = [[c["ratio"] - c["ratio_min"]], [c["ratio_max"] - c["ratio"]]]
            ax.bar(j, c["ratio"], width=0.6, color="#55a868", yerr=err, capsize=4)
            ax.annotate(f"{c['ratio']:.2f}", (j, c["ratio"]), textcoords="offset points",
                        xytext=(12, 2), ha="center", fontsize=7)
            ax.hlines(c["target_ratio"], j - 0.4, j + 0.4, colors="black",
                      linestyles="dashed", linewidth=1)
        ax.axhline(1.0, color="grey", linewidth=0.8)
        ax.set_xticks(range(len(rows)), [c["mode"] for c in rows], fontsize=8)
        ax.set_title("DEAP population, local folder", fontsize=10)
    top = max(c["ratio"] for c in cases + deap_cases if c["mode"] != "none")
    axes[0][0].set_ylim(0.8, max(1.5, top * 1.1))
    axes[0][0].set_ylabel(f"time per generation / no checkpoint\n(~{work_ms:.0f} ms of work)")
    axes[0][len(stores) - 1].legend(fontsize=8, loc="upper left")
    _common.save_figure(plt, fig, path)


if __name__ == "__main__":
    os.environ.setdefault("PYTHONHASHSEED", "0")
    sys.exit(main())
