"""Chaos harness: run tests/workers/chaos_worker.py, kill it at random moments, restart it.

Each attempt is a real process. It is stopped the way Kubernetes stops pods:

- SIGKILL (OOM kill, lost node): at a random moment, sometimes before the worker has
  even resumed (import, listing, epoch claim), mostly a random time into its loop;
- SIGTERM (eviction, preemption) once the worker is in its loop, then a grace period;
  a worker still alive after it gets SIGKILL, as the kubelet does.

Attempts are restarted until one prints the result. The kill schedule comes from a
private ``random.Random(seed)``, so a failing schedule can be replayed.

From the workers' JSON stdout lines and their stderr logs the harness counts kills,
resumes, generations redone per kill (the highest generation any attempt had reached
minus the step the next attempt resumed from), checkpoints skipped ("fails
verification" and zombie "skipping" log lines) and retries.
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

WORKER = Path(__file__).resolve().parent / "workers" / "chaos_worker.py"
EARLY_KILL_SHARE = 0.15  # share of SIGKILLs sent without waiting for the worker's loop


def full_run() -> bool:
    return os.environ.get("RESUMABLE_CHAOS", "").lower() == "full"


@dataclass
class Attempt:
    """One worker process and how it ended."""

    signal: str  # "SIGKILL", "SIGTERM" or "none"
    returncode: int | None
    start: int | None  # step the body was entered at; None if it never got there
    last_gen: int | None  # highest generation it reported
    seconds: float
    begun: int | None = None  # highest generation it began (finished or not)
    grace_exceeded: bool = False
    result: dict[str, Any] | None = None
    verification_failures: int = 0
    zombie_skips: int = 0
    retries: int = 0
    stderr_tail: str = ""


@dataclass
class ChaosStats:
    """What a chaos run did; ``summary()`` is what the report shows."""

    store: str
    planned_kills: int
    planned_terms: int
    attempts: list[Attempt] = field(default_factory=list)
    redone_after_kill: list[int] = field(default_factory=list)
    redone_after_term: list[int] = field(default_factory=list)
    lost_after_term: list[int] = field(default_factory=list)  # begun, not saved
    term_flush_violations: list[str] = field(default_factory=list)
    faults: dict[str, int] = field(default_factory=dict)
    result: dict[str, Any] | None = None
    seconds: float = 0.0

    @property
    def kills(self) -> int:
        return sum(a.signal == "SIGKILL" for a in self.attempts)

    @property
    def terms(self) -> int:
        return sum(a.signal == "SIGTERM" for a in self.attempts)

    @property
    def resumes(self) -> int:
        return sum(bool(a.start) for a in self.attempts)

    def summary(self) -> dict[str, Any]:
        kills = self.redone_after_kill
        return {
            "store": self.store,
            "attempts": len(self.attempts),
            "sigkills": self.kills,
            "sigterms": self.terms,
            "sigterm_exit_143": sum(a.signal == "SIGTERM" and a.returncode == 143
                                    for a in self.attempts),
            "sigterm_grace_exceeded": sum(a.grace_exceeded for a in self.attempts),
            "resumes": self.resumes,
            "redone_generations_total_after_sigkill": sum(kills),
            "redone_generations_per_sigkill": round(sum(kills) / max(1, self.kills), 3),
            "redone_generations_max_after_sigkill": max(kills, default=0),
            "redone_generations_after_sigterm": sum(self.redone_after_term),
            "generations_lost_per_sigterm": round(
                sum(self.lost_after_term) / max(1, len(self.lost_after_term)), 3),
            "checkpoints_failing_verification": sum(a.verification_failures
                                                    for a in self.attempts),
            "zombie_checkpoints_skipped": sum(a.zombie_skips for a in self.attempts),
            "store_retries_logged": sum(a.retries for a in self.attempts),
            "faults_injected": dict(self.faults),
            "faults_injected_total": sum(self.faults.values()),
            "seconds": round(self.seconds, 1),
        }


def _events(path: Path) -> list[dict[str, Any]]:
    out = []
    for line in path.read_text(errors="replace").splitlines():
        try:
            out.append(json.loads(line))
        except ValueError:
            continue  # a line cut by SIGKILL
    return out


def _wait_for_start(out: Path, proc: subprocess.Popen[bytes], timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            return False
        if b'"start"' in out.read_bytes():
            return True
        time.sleep(0.01)
    return False


def run_chaos(
    store_url: str,
    run_id: str,
    *,
    kills: int,
    terms: int,
    generations: int,
    seed: int,
    env: dict[str, str | None] | None = None,
    delay: float = 0.03,
    pop: int = 32,
    max_after_start: float = 0.5,
    grace: float = 10.0,
    attempt_timeout: float = 120.0,
    workdir: Path | None = None,
) -> ChaosStats:
    """Run the worker until it prints a result, interrupting it ``kills + terms`` times."""
    rng = random.Random(seed)  # private: the schedule never touches the global RNG
    plan = ["SIGKILL"] * kills + ["SIGTERM"] * terms
    rng.shuffle(plan)
    stats = ChaosStats(store=store_url, planned_kills=kills, planned_terms=terms)
    workdir = Path(workdir or tempfile.mkdtemp(prefix="resumable-chaos-"))
    child_env = dict(os.environ, PYTHONUNBUFFERED="1")
    for name, value in (env or {}).items():  # None unsets a variable
        if value is None:
            child_env.pop(name, None)
        else:
            child_env[name] = value
    cmd = [sys.executable, str(WORKER), store_url, run_id, "--generations", str(generations),
           "--delay", str(delay), "--pop", str(pop), "--seed", "0"]
    high_water = 0  # the highest generation any attempt reported
    pending_kind: str | None = None  # how the previous attempt ended, until one resumes
    pending_term_floor: int | None = None
    pending_term_begun: int | None = None
    started = time.monotonic()
    max_attempts = len(plan) + 5
    for number in range(max_attempts):
        kind = plan[number] if number < len(plan) else "none"
        out, err = workdir / f"attempt-{number:03d}.out", workdir / f"attempt-{number:03d}.err"
        t0 = time.monotonic()
        with open(out, "wb") as fout, open(err, "wb") as ferr:
            proc = subprocess.Popen(cmd, stdout=fout, stderr=ferr, env=child_env)
        grace_exceeded = False
        sent: str | None = None
        try:
            if kind == "SIGKILL" and rng.random() < EARLY_KILL_SHARE:
                time.sleep(rng.uniform(0.0, 0.6))  # during start-up or resume
                if proc.poll() is None:
                    proc.send_signal(signal.SIGKILL)
                    sent = kind
            elif kind != "none":
                if _wait_for_start(out, proc, attempt_timeout):
                    time.sleep(rng.uniform(0.0, max_after_start))
                if proc.poll() is None:
                    proc.send_signal(getattr(signal, kind))
                    sent = kind
            try:
                proc.wait(timeout=grace if kind == "SIGTERM" else attempt_timeout)
            except subprocess.TimeoutExpired:
                grace_exceeded = kind == "SIGTERM"
                proc.kill()
                proc.wait()
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
        events = _events(out)
        log = err.read_text(errors="replace")
        starts = [e["start"] for e in events if e.get("event") == "start"]
        gens = [e["g"] for e in events if e.get("event") == "gen"]
        begun = [e["g"] for e in events if e.get("event") == "begin"]
        results = [e["result"] for e in events if e.get("event") == "result"]
        finished = bool(results) and proc.returncode == 0
        attempt = Attempt(
            signal="none" if finished or sent is None else sent,
            returncode=proc.returncode,
            start=starts[0] if starts else None,
            last_gen=max(gens) if gens else None,
            begun=max(begun) if begun else None,
            seconds=time.monotonic() - t0,
            grace_exceeded=grace_exceeded,
            result=results[0] if results else None,
            verification_failures=log.count("fails verification"),
            zombie_skips=log.count("newer one took over"),
            retries=log.count("retrying "),
            stderr_tail=log[-3000:],
        )
        stats.attempts.append(attempt)
        if attempt.start is not None:
            if pending_kind == "SIGTERM":
                # What SIGTERM must not lose: the terminated attempt's own generations.
                # Generations lost to an earlier SIGKILL that it had not caught up on yet
                # stay with the kills.
                floor = pending_term_floor or attempt.start
                stats.redone_after_term.append(max(0, floor - attempt.start))
                # Work lost to the SIGTERM: generations it had begun that the next
                # attempt runs again (the one it interrupted, before the body was let
                # finish its generation).
                stats.lost_after_term.append(max(0, (pending_term_begun or 0) - attempt.start))
                stats.redone_after_kill.append(max(0, high_water - max(floor, attempt.start)))
            elif pending_kind is not None:
                stats.redone_after_kill.append(max(0, high_water - attempt.start))
            if pending_term_floor is not None and attempt.start < pending_term_floor:
                stats.term_flush_violations.append(
                    f"attempt {number} resumed from {attempt.start} although the previous "
                    f"one exited 143 after generation {pending_term_floor}")
            pending_kind, pending_term_floor, pending_term_begun = None, None, None
        if attempt.last_gen is not None:
            high_water = max(high_water, attempt.last_gen)
        if finished:
            stats.result = attempt.result
            break
        if attempt.signal in ("SIGKILL", "SIGTERM"):
            # A SIGKILL after a SIGTERM with no resume in between makes the pair a kill.
            pending_kind = "SIGKILL" if pending_kind == "SIGKILL" or grace_exceeded else (
                attempt.signal)
            if attempt.signal == "SIGTERM" and attempt.returncode == 143 and attempt.last_gen:
                pending_term_floor = max(pending_term_floor or 0, attempt.last_gen)
            if attempt.signal == "SIGTERM" and attempt.returncode == 143 and attempt.begun:
                pending_term_begun = max(pending_term_begun or 0, attempt.begun)
        else:
            raise AssertionError(
                f"attempt {number} failed on its own (exit {proc.returncode}):\n"
                f"{attempt.stderr_tail}")
    stats.seconds = time.monotonic() - started
    return stats


def write_report(sections: dict[str, Any], default_dir: Path) -> Path:
    """Print the report and write it as JSON to $RESUMABLE_CHAOS_REPORT (else a temp dir)."""
    path = Path(os.environ.get("RESUMABLE_CHAOS_REPORT") or default_dir / "chaos-report.json")
    runs = list(sections.values())
    total = {
        "mode": "full" if full_run() else "short",
        "sigkills": sum(r["sigkills"] for r in runs),
        "sigterms": sum(r["sigterms"] for r in runs),
        "resumes": sum(r["resumes"] for r in runs),
        "redone_generations_per_sigkill": round(
            sum(r["redone_generations_total_after_sigkill"] for r in runs)
            / max(1, sum(r["sigkills"] for r in runs)), 3),
        "generations_lost_per_sigterm": round(
            sum(r["generations_lost_per_sigterm"] * r["sigterm_exit_143"] for r in runs)
            / max(1, sum(r["sigterm_exit_143"] for r in runs)), 3),
        "checkpoints_failing_verification": sum(r["checkpoints_failing_verification"]
                                                for r in runs),
        "zombie_checkpoints_skipped": sum(r["zombie_checkpoints_skipped"] for r in runs),
        "faults_injected_total": sum(r["faults_injected_total"] for r in runs),
    }
    report = {"total": total, "runs": sections}
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(report, indent=2) + "\n")
    print(f"\nchaos report ({path}):\n{json.dumps(report, indent=2)}")
    return path


__all__ = ["Attempt", "ChaosStats", "full_run", "run_chaos", "write_report"]
