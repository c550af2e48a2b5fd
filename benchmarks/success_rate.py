"""The article's success-rate table, by Monte Carlo with the real ``@checkpointed``.

Each generation fails (an exception raised in the middle of it) with probability p;
a run needs G generations; there are 3 tries. Three cases:

  (a) no checkpoint: a plain loop; a failure restarts it from generation 0; up to 3
      pod attempts.
  (b) checkpoint, 3 pod attempts in total: the decorated function is called up to 3
      times (each call is a pod); each call resumes from the last saved generation.
  (c) checkpoint with ``restarts=2``: one pod; the decorator retries a failed
      generation in-process, so every generation gets 3 tries.

Every trial is a real run on a ``memory://`` store (unique run id per trial,
``keep=1``, ``capture_rng=True``: the default, and what a user gets). The body draws
from the global ``random`` module like a GA would; fault injection uses a private
``random.Random`` so that restoring the global RNG on resume does not replay the fault.

    python benchmarks/success_rate.py            # 20,000 trials per case
    python benchmarks/success_rate.py --quick    # 500 trials per case
"""

from __future__ import annotations

import logging
import math
import multiprocessing as mp
import os
import random
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import _common

from resumable import checkpointed
from resumable.stores._memory import MemoryStore

NAME = "success_rate"
STORE = "memory://bench-success-rate"

# Private fault RNG: re-seeded per chunk of trials; never the global `random`.
FAULTS = random.Random(0)
GENERATIONS_RUN = 0  # generations started in this process (the last one may have failed)


class InjectedFault(RuntimeError):
    """A simulated pod failure in the middle of a generation."""


def ga_body(trial: int, generations: int, p: float, *, state: Any = None):  # type: ignore[no-untyped-def]
    """A stand-in GA: some work drawn from the global RNG, then maybe a failure."""
    global GENERATIONS_RUN
    if state is None:
        state = {"generation": 0, "best": 0.0}
    while state["generation"] < generations:
        GENERATIONS_RUN += 1
        candidate = random.random()  # the "work": global RNG, as real GA code uses
        if FAULTS.random() < p:  # private RNG: independent of what capture_rng restores
            raise InjectedFault(f"trial {trial}: failure in generation {state['generation'] + 1}")
        state = {"generation": state["generation"] + 1, "best": max(state["best"], candidate)}
        yield state
    return state


pods = checkpointed(store=STORE, keep=1)(ga_body)
in_process = checkpointed(store=STORE, keep=1, restarts=2)(ga_body)

CASES: dict[str, str] = {
    "a": "no checkpoint, 3 pod attempts (restart from 0)",
    "b": "checkpoint, 3 pod attempts in total (resume)",
    "c": "checkpoint, restarts=2 (3 tries per generation, 1 pod)",
}


def trial_plain(trial: int, generations: int, p: float, tries: int) -> bool:
    for _ in range(tries):
        try:
            for _state in ga_body(trial, generations, p):
                pass
            return True
        except InjectedFault:
            continue
    return False


def trial_pods(trial: int, generations: int, p: float, tries: int) -> bool:
    for _ in range(tries):
        try:
            pods(trial, generations, p)
            return True
        except InjectedFault:
            continue
    return False


def trial_restarts(trial: int, generations: int, p: float, tries: int) -> bool:
    assert tries == 3, "case (c) is decorated with restarts=2"
    try:
        in_process(trial, generations, p)
        return True
    except InjectedFault:
        return False


RUNNERS = {"a": trial_plain, "b": trial_pods, "c": trial_restarts}


def _chunk(
    args: tuple[str, int, int, int, float, int, int],
) -> tuple[str, int, int, int, float, int]:
    """Run trials [start, start+count) of one case: case, successes, trials, generations,
    seconds, and the worker's peak RSS so far."""
    global GENERATIONS_RUN
    case, start, count, generations, p, tries, seed = args
    logging.getLogger("resumable").setLevel(logging.CRITICAL)  # restarts log warnings
    FAULTS.seed(f"{seed}/{case}/{start}")
    random.seed(f"work/{seed}/{case}/{start}")
    store = MemoryStore.from_url(STORE)
    runner = RUNNERS[case]
    GENERATIONS_RUN = 0
    ok = 0
    t0 = time.perf_counter()
    for i in range(start, start + count):
        ok += runner(i, generations, p, tries)
        store.clear()  # keep memory flat; run ids are unique per trial anyway
    return case, ok, count, GENERATIONS_RUN, time.perf_counter() - t0, _common.peak_rss_bytes()


# -- exact values -------------------------------------------------------------------


def exact_no_checkpoint(g: int, p: float, tries: int) -> float:
    return 1 - (1 - (1 - p) ** g) ** tries


def exact_pod_attempts(g: int, p: float, tries: int) -> float:
    """P(g successes before the tries-th failure): negative binomial, in closed form."""
    q = 1 - p
    return sum(math.comb(g - 1 + k, k) * q**g * p**k for k in range(tries))


def exact_pod_attempts_dp(g: int, p: float, tries: int) -> float:
    """The same by dynamic programming over (generations done, failures so far)."""
    # prob[f] = probability of being at the current generation count with f failures
    prob = [1.0] + [0.0] * (tries - 1)
    for _ in range(g):
        nxt = [0.0] * tries
        for f, pr in enumerate(prob):
            # at this generation: k more failures then a success, staying under `tries`
            for k in range(tries - f):
                nxt[f + k] += pr * p**k * (1 - p)
        prob = nxt
    return sum(prob)


def exact_per_generation(g: int, p: float, tries: int) -> float:
    return (1 - p**tries) ** g


EXACT = {"a": exact_no_checkpoint, "b": exact_pod_attempts, "c": exact_per_generation}


# -- main -------------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    ap = _common.parser(__doc__.splitlines()[0])
    ap.add_argument("--trials", type=int, default=None,
                    help="trials per case (default 20000; --quick: 500)")
    ap.add_argument("--generations", type=int, default=50)
    ap.add_argument("--p", type=float, default=0.02, help="failure probability per generation")
    ap.add_argument("--tries", type=int, default=3)
    ap.add_argument("--workers", type=int, default=min(2, os.cpu_count() or 1))
    ap.add_argument("--seed", type=int, default=20240601)
    args = ap.parse_args(argv)
    trials = args.trials or (500 if args.quick else 20_000)
    if args.tries != 3:
        ap.error("--tries must be 3 (case (c) is restarts=2)")

    g, p, tries = args.generations, args.p, args.tries
    assert abs(exact_pod_attempts(g, p, tries) - exact_pod_attempts_dp(g, p, tries)) < 1e-12

    chunk = max(1, min(1000, trials // (4 * args.workers) or 1))
    jobs = []
    # Interleave cases across chunks so drift (other load, thermal) hits them alike.
    starts = list(range(0, trials, chunk))
    for start in starts:
        for case in CASES:
            jobs.append((case, start, min(chunk, trials - start), g, p, tries, args.seed))

    t0 = time.perf_counter()
    totals = {c: {"successes": 0, "trials": 0, "generations": 0, "seconds": 0.0, "rss": 0}
              for c in CASES}
    ctx = mp.get_context("fork")
    with ctx.Pool(args.workers) as pool:
        for case, ok, n, gens, secs, rss in pool.imap_unordered(_chunk, jobs):
            t = totals[case]
            t["rss"] = max(t["rss"], rss)
            t["successes"] += ok
            t["trials"] += n
            t["generations"] += gens
            t["seconds"] += secs
    wall = time.perf_counter() - t0

    plain_us = totals["a"]["seconds"] / max(1, totals["a"]["generations"]) * 1e6
    cases = []
    for case, label in CASES.items():
        t = totals[case]
        lo, hi = _common.wilson(t["successes"], t["trials"])
        rate = t["successes"] / t["trials"]
        exact = EXACT[case](g, p, tries)
        per_gen_us = t["seconds"] / max(1, t["generations"]) * 1e6
        cases.append({
            "case": case,
            "label": label,
            "trials": t["trials"],
            "successes": t["successes"],
            "rate": rate,
            "ci95": [lo, hi],
            "exact": exact,
            "exact_inside_ci": lo <= exact <= hi,
            "generations_run": t["generations"],
            "generations_per_trial": t["generations"] / t["trials"],
            "cpu_seconds": t["seconds"],
            "us_per_generation": per_gen_us,
            "framework_us_per_generation": None if case == "a" else per_gen_us - plain_us,
            # workers run chunks of every case, so this is the worker's high-water mark
            # by the time it finished a chunk of this case
            "worker_peak_rss_mib": t["rss"] / 2**20,
        })

    result = {
        "config": {"trials": trials, "generations": g, "p": p, "tries": tries,
                   "workers": args.workers, "seed": args.seed, "store": STORE, "keep": 1,
                   "capture_rng": True, "quick": args.quick},
        "article": {"a": 0.7456259765625, "c": 0.9996000399986667},
        "cases": cases,
        "wall_seconds": wall,
    }
    path = _common.write_json(args.out, NAME, result)

    rows = []
    for c in cases:
        lo, hi = c["ci95"]
        rows.append([
            f"({c['case']}) {c['label']}", f"{c['trials']:,}",
            _common.fmt_pct(c["rate"]), f"{100 * lo:.2f} - {100 * hi:.2f} %",
            _common.fmt_pct(c["exact"]), "yes" if c["exact_inside_ci"] else "**no**",
            f"{c['generations_per_trial']:.1f}", f"{c['us_per_generation']:.1f}",
            f"{c['worker_peak_rss_mib']:.0f} MiB",
        ])
    print(f"## Success rate: {g} generations, p = {p} per generation, {tries} tries\n")
    print(_common.markdown_table(
        ["case", "trials", "measured", "95 % CI (Wilson)", "exact", "exact in CI",
         "generations run / trial", "µs / generation", "worker peak RSS"], rows))
    print(f"\n{trials:,} trials per case on {args.workers} worker(s) in {wall:.1f} s; "
          f"the decorator costs ~{cases[1]['framework_us_per_generation']:.0f} µs per "
          f"generation on memory:// (case b) over a plain loop.")
    print(f"results: {path}")

    if not args.no_plot:
        plot(cases, args.out / f"{NAME}.png", g, p, trials)
    # A 95 % interval misses the exact value now and then by chance: report, never fail.
    return 0


def plot(cases: list[dict[str, Any]], path: Path, g: int, p: float, trials: int) -> None:
    plt = _common.pyplot()
    if plt is None:
        return
    fig, ax = plt.subplots(figsize=(7.5, 4.2))
    xs = range(len(cases))
    rates = [100 * c["rate"] for c in cases]
    err = [[100 * (c["rate"] - c["ci95"][0]) for c in cases],
           [100 * (c["ci95"][1] - c["rate"]) for c in cases]]
    colors = ["#c44e52", "#dd8452", "#55a868"]
    ax.bar(xs, rates, color=colors, width=0.6, yerr=err, capsize=6, label="measured (95 % CI)")
    ax.scatter(xs, [100 * c["exact"] for c in cases], marker="_", s=900, color="black",
               zorder=3, label="exact")
    for x, c in zip(xs, cases, strict=True):
        ax.annotate(f"{100 * c['rate']:.2f} %\n(exact {100 * c['exact']:.2f} %)",
                    (x, 100 * c["rate"]), textcoords="offset points", xytext=(0, 8),
                    ha="center", fontsize=8)
    ax.set_xticks(list(xs), ["(a) no checkpoint\n3 pods", "(b) checkpoint\n3 pods",
                              "(c) checkpoint\nrestarts=2"])
    ax.set_ylim(50, 108)
    ax.set_ylabel("runs that complete (%)")
    ax.set_title(f"{g} generations, p={p} failure per generation, 3 tries "
                 f"({trials:,} trials/case)", fontsize=10)
    ax.legend(loc="lower right", fontsize=8)
    _common.save_figure(plt, fig, path)


if __name__ == "__main__":
    sys.exit(main())
