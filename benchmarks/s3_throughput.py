"""Save and load a large numpy state through resumable vs raw boto3, on ``rclone serve s3``.

Rows (each measured in its own child process, so its peak RSS is its own; repeats are
interleaved and the median is reported):

  framework save:  a ``@checkpointed`` generator that yields the state once and returns
                   a small token; the timed call is everything the user pays: resume
                   lookup, attempt claim, snapshot, multipart upload, final flush,
                   result record. Default settings: a state above
                   $RESUMABLE_SNAPSHOT_LIMIT (256 MiB) is saved in place, from views of
                   the live array, with no copy.
  framework save, background copy:  the same with RESUMABLE_SNAPSHOT_LIMIT=inf: the
                   state is copied at the yield and uploaded in the background (what
                   the default does below the limit).
  framework load:  ``f.latest()``: list, download, verify the checksum, unpickle.
  raw upload:      boto3 ``upload_fileobj`` of the array's bytes (zero-copy reader over
                   the array) with TransferConfig(16 MiB parts, 10 threads).
  raw download:    boto3 ``download_fileobj`` into a preallocated buffer, same config.
  snippet save:    the article's ``put_object(Body=pickle.dumps(state))``.
  snippet load:    the article's ``pickle.loads(get_object(...)['Body'].read())``.

Background path, memory: a loop of generations that each build a new 64 MiB array
(``np.sin`` of the last one), once without checkpointing (``loop_none``) and once with
``@checkpointed(every="generation")`` at default settings, so each state is copied at
the yield and uploaded in the background (``loop_background``). Reported: the extra
peak RSS of the checkpointed loop over the plain one, as a multiple of the state
(target <= 1.2x: one copy, and a little), and the loop's time over the plain one's.
Two more rows show what one copy costs instead: ``RESUMABLE_SNAPSHOT_COPIES=1``
(``loop_copies1``: the yield waits for the save in flight, so the newest state and the
one uploading are never both copies) and ``every="1ms"`` (``loop_asap``: every yield is
due, but one that comes while a large state uploads is not snapshotted; an exception
then restarts from the last saved state, not the last yielded one). ``every=1`` is
``every="generation"``.

Memory: ``peak / state`` = (peak RSS of the child during the operation - RSS before
the state existed) / state size. A save cannot go below 1.0 (the state itself is in
memory); 1.3 means the save needed at most 0.3 x the state on top of it. For loads the
state is what the operation produces, so 1.0 is again the floor.

    python benchmarks/s3_throughput.py            # 512 MiB
    python benchmarks/s3_throughput.py --quick    # 32 MiB
"""

from __future__ import annotations

import io
import json
import os
import pickle
import statistics
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import _common

NAME = "s3_throughput"
OPS = ("framework_save", "framework_save_copy", "raw_upload", "snippet_save",
       "framework_load", "raw_download", "snippet_load")
SAVES = ("framework_save", "framework_save_copy", "raw_upload", "snippet_save")
OP_ENV = {"framework_save_copy": {"RESUMABLE_SNAPSHOT_LIMIT": "inf"}}
PART = 16 * _common.MiB
THREADS = 10
TARGET_RATIO = 0.9
TARGET_SAVE_RSS = 1.3
LOOP_OPS = ("loop_none", "loop_background", "loop_in_memory", "loop_copies1", "loop_asap")
# How each loop row is checkpointed: (every, environment). loop_background is the default
# and the one the target is for; loop_in_memory the default before the spill file (the
# newest state as a second copy in memory); the other two hold one copy by waiting.
LOOP_SETUP: dict[str, tuple[Any, dict[str, str]]] = {
    "loop_background": ("generation", {}),
    "loop_in_memory": ("generation", {"RESUMABLE_SPILL_DIR": "off"}),
    "loop_copies1": ("generation", {"RESUMABLE_SNAPSHOT_COPIES": "1"}),
    "loop_asap": ("1ms", {}),
}
LOOP_LABELS = {
    "loop_background": '`every="generation"` (default: the newest state in a spill file)',
    "loop_in_memory": '`every="generation"`, `RESUMABLE_SPILL_DIR=off` (2 copies in memory)',
    "loop_copies1": '`every="generation"`, `RESUMABLE_SNAPSHOT_COPIES=1`',
    "loop_asap": '`every="1ms"` (as often as uploads allow)',
}
TARGET_BACKGROUND_EXTRA = 1.2  # extra peak RSS over no checkpointing / state
SNAPSHOT_LIMIT = 256 * _common.MiB  # resumable's default $RESUMABLE_SNAPSHOT_LIMIT


# ---------------------------------------------------------------------------------------
# child
# ---------------------------------------------------------------------------------------


class MemReader(io.RawIOBase):
    """A seekable read-only file over a buffer, without copying it first."""

    def __init__(self, buf: memoryview) -> None:
        self._buf = buf.cast("B")
        self._pos = 0

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def tell(self) -> int:
        return self._pos

    def seek(self, offset: int, whence: int = 0) -> int:
        base = {0: 0, 1: self._pos, 2: len(self._buf)}[whence]
        self._pos = max(0, min(len(self._buf), base + offset))
        return self._pos

    def readinto(self, b: Any) -> int:
        n = min(len(b), len(self._buf) - self._pos)
        memoryview(b).cast("B")[:n] = self._buf[self._pos:self._pos + n]
        self._pos += n
        return n


class MemWriter(io.RawIOBase):
    """A seekable file writing into a preallocated bytearray (downloads land in place)."""

    def __init__(self, size: int) -> None:
        self.buf = bytearray(size)
        self._view = memoryview(self.buf)
        self._pos = 0

    def writable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def tell(self) -> int:
        return self._pos

    def seek(self, offset: int, whence: int = 0) -> int:
        base = {0: 0, 1: self._pos, 2: len(self.buf)}[whence]
        self._pos = base + offset
        return self._pos

    def write(self, b: Any) -> int:
        data = memoryview(b).cast("B")
        self._view[self._pos:self._pos + len(data)] = data
        self._pos += len(data)
        return len(data)


def make_state(size: int, seed: int) -> Any:
    import numpy as np

    return np.random.default_rng(seed).random(size // 8)


def transfer_config() -> Any:
    from boto3.s3.transfer import TransferConfig

    return TransferConfig(multipart_threshold=PART, multipart_chunksize=PART,
                          max_concurrency=THREADS, use_threads=True)


def child(spec: dict[str, Any]) -> dict[str, Any]:
    import logging

    import boto3
    import numpy as np

    logging.getLogger("resumable").setLevel(logging.ERROR)
    op, url, key, size, seed = spec["op"], spec["url"], spec["key"], spec["size"], spec["seed"]
    bucket, _, prefix = url[5:].partition("/")
    s3 = boto3.client("s3")
    s3.list_objects_v2(Bucket=bucket, MaxKeys=1)  # connection and credentials warmed up

    from resumable import checkpointed

    def body(*, state: Any = None):  # type: ignore[no-untyped-def]
        if state is None:
            yield {"array": spec_state}
        return "saved"

    if op in LOOP_OPS:
        return loop_child(op, url, key, spec["loop_size"], spec["loop_gens"], seed)

    f = checkpointed(store=url, run_id=key)(body)
    f_copy = checkpointed(store=url, run_id=f"{key}-copy")(body)
    raw_key = f"{prefix}/raw/{key}"
    snip_key = f"{prefix}/snippet/{key}/ga_generation.pkl"

    rss0 = _common.current_rss_bytes()
    spec_state = make_state(size, seed) if op in SAVES else None
    rss_state = _common.current_rss_bytes()
    peak_before = _common.peak_rss_bytes()
    t = time.perf_counter()
    loaded: Any = None
    if op == "framework_save":
        assert f() == "saved"
    elif op == "framework_save_copy":
        assert f_copy() == "saved"
    elif op == "framework_load":
        ckpt = f.latest()
        assert ckpt is not None
        loaded = ckpt.state["array"]
    elif op == "raw_upload":
        s3.upload_fileobj(MemReader(memoryview(spec_state)), bucket, raw_key,
                          Config=transfer_config())
    elif op == "raw_download":
        n = s3.head_object(Bucket=bucket, Key=raw_key)["ContentLength"]
        w = MemWriter(n)
        s3.download_fileobj(bucket, raw_key, w, Config=transfer_config())
        loaded = np.frombuffer(w.buf, dtype=np.float64)
    elif op == "snippet_save":
        s3.put_object(Bucket=bucket, Key=snip_key, Body=pickle.dumps({"array": spec_state}))
    elif op == "snippet_load":
        obj = s3.get_object(Bucket=bucket, Key=snip_key)
        loaded = pickle.loads(obj["Body"].read())["array"]
    else:
        raise ValueError(op)
    seconds = time.perf_counter() - t
    peak = _common.peak_rss_bytes()
    ok = True
    if op in ("framework_save", "framework_save_copy"):  # after timing and peak: read back
        saved = (f if op == "framework_save" else f_copy).latest()
        ok = saved is not None and bool(np.array_equal(saved.state["array"], spec_state))
    elif loaded is not None:  # after timing: the bytes must be the ones saved
        expected = make_state(size, seed)
        ok = bool(np.array_equal(loaded, expected))
    return {"op": op, "seconds": seconds, "bytes": size, "peak_rss": peak,
            "peak_rss_before_op": peak_before, "rss_before_state": rss0,
            "rss_with_state": rss_state, "verified": ok}


def loop_child(op: str, url: str, key: str, size: int, gens: int, seed: int) -> dict[str, Any]:
    """A loop making a new array each generation, with or without background saves."""
    import numpy as np

    from resumable import checkpointed

    def body(*, state: Any = None):  # type: ignore[no-untyped-def]
        if state is None:
            state = {"generation": 0, "array": make_state(size, seed)}
        while state["generation"] < gens:
            state = {"generation": state["generation"] + 1, "array": np.sin(state["array"])}
            yield state
        return float(state["array"][0])

    def warm(*, state: Any = None):  # type: ignore[no-untyped-def]
        yield 1

    # Both rows first make a tiny checkpointed run: the S3 client, threads and imports are
    # then in the baseline of both, and the difference is what the state's saves need.
    checkpointed(store=url, run_id=f"{key}-warm-{op}")(warm)()
    rss0 = _common.current_rss_bytes()
    t = time.perf_counter()
    if op == "loop_none":
        for _ in body():
            pass
    else:
        every, env = LOOP_SETUP[op]
        os.environ.update(env)  # read at the call
        checkpointed(every=every, store=url, run_id=f"{key}-{op}")(body)()
    seconds = time.perf_counter() - t
    return {"op": op, "seconds": seconds, "bytes": size, "generations": gens,
            "peak_rss": _common.peak_rss_bytes(), "rss_before_state": rss0,
            "verified": True}


# ---------------------------------------------------------------------------------------
# parent
# ---------------------------------------------------------------------------------------


def run_child(spec: dict[str, Any], env: dict[str, str]) -> dict[str, Any]:
    proc = subprocess.run([sys.executable, __file__, "--child", json.dumps(spec)],
                          capture_output=True, text=True, env=_common.child_env(env),
                          timeout=900)
    if proc.returncode != 0:
        raise RuntimeError(f"child {spec['op']} failed ({proc.returncode}):\n"
                           f"{proc.stderr[-3000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def main(argv: list[str] | None = None) -> int:
    import argparse

    ap = _common.parser(__doc__.splitlines()[0])
    ap.add_argument("--child", help=argparse.SUPPRESS)
    ap.add_argument("--size-mib", type=int, default=None, help="default 512 (--quick: 32)")
    ap.add_argument("--repeats", type=int, default=None, help="default 3 (--quick: 1)")
    ap.add_argument("--server", choices=("rclone", "moto"), default="rclone")
    ap.add_argument("--loop-mib", type=int, default=None,
                    help="background-path memory: state size (default 64; --quick 8)")
    ap.add_argument("--loop-generations", type=int, default=None,
                    help="background-path memory: generations (default 12; --quick 4)")
    args = ap.parse_args(argv)
    if args.child:
        print(json.dumps(child(json.loads(args.child))))
        return 0
    size = (args.size_mib or (32 if args.quick else 512)) * _common.MiB
    repeats = args.repeats or (1 if args.quick else 3)
    loop_size = (args.loop_mib or (8 if args.quick else 64)) * _common.MiB
    loop_gens = args.loop_generations or (4 if args.quick else 12)

    import _servers

    runs: list[dict[str, Any]] = []
    t0 = time.perf_counter()
    load_start = _common.load_average()
    with _servers.server(args.server) as srv:
        url = srv.new_store_url("throughput")
        for rep in range(repeats):
            key = f"t-{uuid.uuid4().hex[:12]}"
            for op in OPS:  # saves first: the loads read what this repeat saved
                r = run_child({"op": op, "url": url, "key": key, "size": size, "seed": rep},
                              {**srv.env, **OP_ENV.get(op, {})})
                r["repeat"] = rep
                runs.append(r)
                print(f"  {op:15} {size / 1e6 / r['seconds']:8.1f} MB/s", file=sys.stderr,
                      flush=True)
            turn = rep % len(LOOP_OPS)
            for op in LOOP_OPS[turn:] + LOOP_OPS[:turn]:
                r = run_child({"op": op, "url": url, "key": key, "size": size, "seed": rep,
                               "loop_size": loop_size, "loop_gens": loop_gens}, srv.env)
                r["repeat"] = rep
                runs.append(r)
                print(f"  {op:15} peak {(r['peak_rss'] - r['rss_before_state']) / loop_size:.2f}"
                      " x state", file=sys.stderr, flush=True)
            clean(srv, url, key)
    wall = time.perf_counter() - t0

    rows: dict[str, dict[str, Any]] = {}
    for op in OPS:
        rs = [r for r in runs if r["op"] == op]
        secs = statistics.median(r["seconds"] for r in rs)
        peaks = [(r["peak_rss"] - r["rss_before_state"]) / size for r in rs]
        rows[op] = {"op": op, "seconds_median": secs, "seconds": [r["seconds"] for r in rs],
                    "mb_per_s": size / 1e6 / secs,
                    "peak_over_state": max(peaks),
                    "extra_over_state": max((r["peak_rss"] - r["rss_with_state"]) / size
                                            for r in rs),
                    "verified": all(r["verified"] for r in rs)}
    loops = {}
    for op in LOOP_OPS[1:]:
        extras, times = [], []
        for rep in range(repeats):
            mine = {r["op"]: r for r in runs if r["repeat"] == rep and r["op"] in LOOP_OPS}
            peak = {o: r["peak_rss"] - r["rss_before_state"] for o, r in mine.items()}
            extras.append((peak[op] - peak["loop_none"]) / loop_size)
            times.append(mine[op]["seconds"] / mine["loop_none"]["seconds"])
        loops[op] = {
            "case": op, "every": LOOP_SETUP[op][0], "env": LOOP_SETUP[op][1],
            "state_bytes": loop_size, "generations": loop_gens,
            "extra_over_state_median": statistics.median(extras),
            "extra_over_state_min": min(extras), "extra_over_state_max": max(extras),
            "extra_over_state": extras,
            "extra_mib_median": statistics.median(extras) * loop_size / _common.MiB,
            "time_ratio_median": statistics.median(times), "time_ratios": times,
        }
    background = {**loops["loop_background"], "target": TARGET_BACKGROUND_EXTRA,
                  "meets_target": loops["loop_background"]["extra_over_state_median"]
                  <= TARGET_BACKGROUND_EXTRA}
    save_ratio = rows["framework_save"]["mb_per_s"] / rows["raw_upload"]["mb_per_s"]
    load_ratio = rows["framework_load"]["mb_per_s"] / rows["raw_download"]["mb_per_s"]
    summary = {
        "save_ratio_to_raw": save_ratio,
        "load_ratio_to_raw": load_ratio,
        "save_peak_over_state": rows["framework_save"]["peak_over_state"],
        "save_in_place": size > SNAPSHOT_LIMIT,
        "copy_save_ratio_to_raw": rows["framework_save_copy"]["mb_per_s"]
        / rows["raw_upload"]["mb_per_s"],
        "copy_save_peak_over_state": rows["framework_save_copy"]["peak_over_state"],
        "snippet_save_peak_over_state": rows["snippet_save"]["peak_over_state"],
        "targets": {"ratio": TARGET_RATIO, "save_peak_over_state": TARGET_SAVE_RSS},
        "meets": {"save_ratio": save_ratio >= TARGET_RATIO,
                  "load_ratio": load_ratio >= TARGET_RATIO,
                  "save_rss": rows["framework_save"]["peak_over_state"] <= TARGET_SAVE_RSS},
    }
    payload = {"config": {"size_bytes": size, "repeats": repeats, "server": args.server,
                          "part_size": PART, "threads": THREADS, "quick": args.quick,
                          "loadavg_at_start": load_start,
                          "loop_size_bytes": loop_size, "loop_generations": loop_gens},
               "cases": list(rows.values()), "summary": summary,
               "background_memory": background, "background_memory_options": list(loops.values()),
               "runs": runs,
               "wall_seconds": wall}
    path = _common.write_json(args.out, NAME, payload)

    mode = "in place" if size > SNAPSHOT_LIMIT else "background copy"
    labels = {"framework_save": f"resumable save (default: {mode})",
              "framework_save_copy": "resumable save, background copy (LIMIT=inf)",
              "raw_upload": "raw boto3 upload_fileobj",
              "snippet_save": "article snippet save (pickle.dumps + put_object)",
              "framework_load": "resumable load (f.latest)",
              "raw_download": "raw boto3 download_fileobj",
              "snippet_load": "article snippet load (get_object + pickle.loads)"}
    print(f"## Throughput: {size // _common.MiB} MiB numpy state, {args.server} serve s3 on "
          f"loopback (median of {repeats})\n")
    table = []
    for op, r in rows.items():
        ratio = ""
        if op == "framework_save":
            ratio = f"{save_ratio:.2f}"
        elif op == "framework_save_copy":
            ratio = f"{summary['copy_save_ratio_to_raw']:.2f}"
        elif op == "framework_load":
            ratio = f"{load_ratio:.2f}"
        table.append([labels[op], f"{r['seconds_median']:.2f} s", f"{r['mb_per_s']:.0f}", ratio,
                      f"{r['peak_over_state']:.2f}x", "yes" if r["verified"] else "**NO**"])
    print(_common.markdown_table(["operation", "time", "MB/s", "vs raw", "peak RSS / state",
                                  "bytes verified"], table))
    print(f"\nTargets: save and load >= {TARGET_RATIO} x raw "
          f"({'met' if summary['meets']['save_ratio'] else 'missed'} / "
          f"{'met' if summary['meets']['load_ratio'] else 'missed'}); save peak RSS <= "
          f"{TARGET_SAVE_RSS} x state ({'met' if summary['meets']['save_rss'] else 'missed'}).")
    print("peak RSS / state = (child's peak RSS - its RSS before the state existed) / state "
          "size; 1.00 is the state alone.")
    b = background
    print(f"\n## Background path, memory: {loop_size // _common.MiB} MiB numpy state, "
          f"{loop_gens} generations, every generation saved (median of {repeats})\n")
    print(_common.markdown_table(
        ["case", "extra peak RSS over no checkpointing", "/ state (min to max)",
         "loop time / no checkpointing", "target"],
        [[LOOP_LABELS[op], f"+{x['extra_mib_median']:.0f} MiB",
          f"{x['extra_over_state_median']:.2f}x ({x['extra_over_state_min']:.2f} to "
          f"{x['extra_over_state_max']:.2f})", f"{x['time_ratio_median']:.2f}",
          (f"<= {TARGET_BACKGROUND_EXTRA}x " + ("met" if b["meets_target"] else "**missed**"))
          if op == "loop_background" else ""] for op, x in loops.items()]))
    print(f"load average (1/5/15 min) at start {load_start}, at end {_common.load_average()} "
          f"on {os.cpu_count()} cores")
    print(f"results: {path}")
    if not args.no_plot:
        plot(rows, labels, size, args.out / f"{NAME}.png", background)
    return 0 if all(r["verified"] for r in rows.values()) else 1


def clean(srv: Any, url: str, key: str) -> None:
    bucket, _, prefix = url[5:].partition("/")
    client = srv.client()
    for sub in (f"{prefix}/{key}/", f"{prefix}/{key}-copy/", f"{prefix}/{key}-loop/",
                *(f"{prefix}/{key}-{op}/" for op in LOOP_OPS),
                *(f"{prefix}/{key}-warm-{op}/" for op in LOOP_OPS),
                f"{prefix}/raw/{key}",
                f"{prefix}/snippet/{key}/"):
        for page in client.get_paginator("list_objects_v2").paginate(Bucket=bucket,
                                                                     Prefix=sub):
            for obj in page.get("Contents", []):
                client.delete_object(Bucket=bucket, Key=obj["Key"])


def plot(rows: dict[str, dict[str, Any]], labels: dict[str, str], size: int, path: Path,
         background: dict[str, Any]) -> None:
    plt = _common.pyplot()
    if plt is None:
        return
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(10, 4.0))
    groups = [("save", ["framework_save", "framework_save_copy", "raw_upload", "snippet_save"]),
              ("load", ["framework_load", None, "raw_download", "snippet_load"])]
    colors = ["#55a868", "#8fd19e", "#4c72b0", "#c44e52"]
    mode = "in place" if size > SNAPSHOT_LIMIT else "background copy"
    names = [f"resumable (default: {mode})", "resumable, background copy",
             "raw boto3 (tuned)", "article snippet"]
    width = 0.2
    for g, (_, ops) in enumerate(groups):
        for i, op in enumerate(ops):
            if op is None:
                continue
            x = g + (i - 1.5) * width
            label = names[i] if g == 0 else None
            ax1.bar(x, rows[op]["mb_per_s"], width=width, color=colors[i], label=label)
            ax1.annotate(f"{rows[op]['mb_per_s']:.0f}", (x, rows[op]["mb_per_s"]),
                         textcoords="offset points", xytext=(0, 2), ha="center", fontsize=7)
            ax2.bar(x, rows[op]["peak_over_state"], width=width, color=colors[i], label=label)
            ax2.annotate(f"{rows[op]['peak_over_state']:.2f}x",
                         (x, rows[op]["peak_over_state"]), textcoords="offset points",
                         xytext=(0, 2), ha="center", fontsize=7)
    b = background
    ax2.bar(2, b["extra_over_state_median"], width=width, color=colors[1],
            yerr=[[b["extra_over_state_median"] - b["extra_over_state_min"]],
                  [b["extra_over_state_max"] - b["extra_over_state_median"]]], capsize=3)
    ax2.annotate(f"+{b['extra_over_state_median']:.2f}x", (2, b["extra_over_state_median"]),
                 textcoords="offset points", xytext=(0, 2), ha="center", fontsize=7)
    ax2.hlines(b["target"], 1.7, 2.3, colors="grey", linestyles="dotted", linewidth=1,
               label=f"loop target +{b['target']}x")
    ax1.set_xticks([0, 1], ["save", "load"])
    ax2.set_xticks([0, 1, 2], ["save", "load",
                               f"loop, {b['state_bytes'] // _common.MiB} MiB:\nextra over none"])
    ax1.set_ylabel("MB/s")
    ax1.set_title(f"{size // _common.MiB} MiB state, rclone serve s3", fontsize=10)
    ax2.axhline(TARGET_SAVE_RSS, color="black", linestyle="dashed", linewidth=1,
                label=f"save target {TARGET_SAVE_RSS}x")
    ax2.set_ylabel("peak RSS / state size")
    ax2.set_title("memory (1.0 = the state alone)", fontsize=10)
    top = max([r["peak_over_state"] for r in rows.values()] + [b["extra_over_state_max"]])
    ax2.set_ylim(0, top * 1.6)  # room for the legend above the bars
    ax1.set_ylim(0, max(r["mb_per_s"] for r in rows.values()) * 1.4)
    ax1.legend(fontsize=8)
    ax2.legend(fontsize=7, ncol=2)
    _common.save_figure(plt, fig, path)


if __name__ == "__main__":
    sys.exit(main())
