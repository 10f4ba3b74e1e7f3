"""The history of revisions' costs (issue 31): what the recorder adds to every pass of a daemon
of 10,000 jobs when nothing changed (the common pass: it must stay a small part of the told
re-plan's 5 ms), appending one entry (a write and an fsync, once per revision), and
``tfdeclare history -o json`` as users run it on a full log (1,000 entries).

    python -m bench --only history [--quick]
    python -m bench.history_bench          (prints the rows)
"""

from __future__ import annotations

import statistics
import subprocess
import tempfile
import time
from pathlib import Path

from bench.common import CLI_SCRIPT, Result, machine
from tfdeclare.core.plan.history import (
    HistoryEntry,
    JobEntry,
    Outcome,
    PassFacts,
    RecorderState,
    SourceKind,
    observe,
)
from tfdeclare.core.plan.planner import Action, JobPlan, Plan, PlanOptions, PlanReason
from tfdeclare.core.run.record import Revision
from tfdeclare.core.spec.loader import SourceRef
from tfdeclare.shell.history import MAX_ENTRIES, HistoryLog

JOBS = 10_000


def _unchanged_plan(jobs: int) -> Plan:
    plans = tuple(
        JobPlan(
            f"job-{i:05}",
            Action.NOOP,
            (PlanReason.UNCHANGED,),
            "unchanged",
            source=SourceRef(f"jobs/job-{i:05}.yaml", 1),
        )
        for i in range(jobs)
    )
    return Plan(
        jobs=plans, options=PlanOptions(), observed={}, sources={p.name: p.source for p in plans if p.source}
    )


def recorder_pass(runs: int) -> Result:
    plan = _unchanged_plan(JOBS)
    revision = Revision("a" * 40, "Ada <ada@example.com>", 0.0, "a commit")
    state, _ = observe(RecorderState(), PassFacts(0.0, plan, revision))
    samples = []
    for _ in range(runs):
        started = time.process_time()
        state, made = observe(state, PassFacts(1.0, plan, revision))
        samples.append((time.process_time() - started) * 1000)
        assert not made
    return Result(
        f"history recorder, one pass of {JOBS:,} unchanged jobs (CPU)",
        "≤ 1 ms",
        samples,
        unit="ms",
        limit=1.0,
        note="a fifth of the told re-plan's 5 ms budget",
    )


def _entry(n: int) -> HistoryEntry:
    jobs = tuple(
        JobEntry(f"job-{i}", Action.RESTART, "spec.command changed: every task restarts", 3) for i in range(3)
    )
    return HistoryEntry(
        float(n),
        SourceKind.GIT,
        Outcome.APPLIED,
        Revision(f"{n:040x}", "Ada <ada@example.com>", float(n), f"commit number {n}"),
        changes=3,
        summary="Plan: 0 to create, 0 to resize, 3 to restart, 0 to delete.",
        jobs=jobs,
    )


def append(runs: int, folder: Path) -> Result:
    log = HistoryLog(folder / "append")
    samples = []
    for n in range(runs):
        started = time.perf_counter()
        log.append(_entry(n))
        samples.append((time.perf_counter() - started) * 1000)
    return Result(
        "history: append one entry (write + fsync)", "-", samples, unit="ms", note="once per revision"
    )


def read_full_log(runs: int, folder: Path) -> Result:
    state = folder / "full"
    log = HistoryLog(state, max_entries=MAX_ENTRIES + 10)
    for n in range(MAX_ENTRIES):
        log.append(_entry(n))
    samples, baseline = [], []
    for _ in range(runs):  # alternating with `status` of no jobs: the same start-up, nothing read
        started = time.perf_counter()
        done = subprocess.run(
            [CLI_SCRIPT, "history", "-o", "json", "--state-dir", str(state)], capture_output=True, check=True
        )
        samples.append(time.perf_counter() - started)
        assert done.stdout.count(b'"version": 1') == MAX_ENTRIES
        started = time.perf_counter()
        subprocess.run(
            [CLI_SCRIPT, "status", "--state-dir", str(state), "--status-dir", str(folder / "none")],
            capture_output=True,
            check=True,
        )
        baseline.append(time.perf_counter() - started)
    ratio = statistics.median(samples) / statistics.median(baseline)
    return Result(
        f"`tfdeclare history -o json` of a full log ({MAX_ENTRIES:,} entries), a new process",
        "-",
        samples,
        note=f"{(state / 'history.jsonl').stat().st_size // 1024} KiB; `status` of no jobs "
        f"{statistics.median(baseline):.3g} s, ratio {ratio:.2f}",
    )


def main(results: list[Result], quick: bool) -> None:
    runs = 10 if quick else 30
    results.append(recorder_pass(runs))
    with tempfile.TemporaryDirectory(prefix="tfdeclare-history-bench-") as tmp:
        results.append(append(runs, Path(tmp)))
        results.append(read_full_log(5 if quick else 10, Path(tmp)))


if __name__ == "__main__":
    rows: list[Result] = []
    main(rows, quick=False)
    print(f"Machine: {machine()}. Date: {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}.")
    for row in rows:
        print(row.row())
