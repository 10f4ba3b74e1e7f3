"""One big job (issue 23): `tfdeclare apply` of one job of N workers that can never be placed
(cpus: 1000 each, local backend), and then a resize of it by one worker. Per task: the wall
time and peak RSS of the process over those of a one-worker job, divided by N.

`python -m bench.bigjob_bench [--sizes 1000,10000] [--runs 3] [--against DIR]`: with
`--against`, the same measurements of the code in DIR (another checkout of tfdeclare, run with
this interpreter and DIR first on `PYTHONPATH`) are taken alongside, run for run, and reported
as ratios (``make bench-bigjob AGAINST=DIR``).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from datetime import UTC, datetime
from pathlib import Path

from bench.common import REPO, TFDECLARE, cleaned_up, machine

_MEASURE_CHILD = """
import resource, subprocess, sys, time
started = time.perf_counter()
done = subprocess.run(sys.argv[1:], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
elapsed = time.perf_counter() - started
assert done.returncode in (0, 1), done.stderr  # 1: the job cannot be scheduled, as meant
print(elapsed, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)
"""

_CONFIG = "policy:\n  maxTasksPerJob: 100000\n"


def _job(workers: int) -> str:
    return (
        "apiVersion: tfdeclare/v1\nkind: TFJob\nmetadata: {name: big}\n"
        "spec:\n  command: [python, train.py]\n"
        f"  replicas:\n    worker: {{count: {workers}, resources: {{cpus: 1000}}}}\n"
    )


def _apply(code: Path, workdir: Path) -> tuple[float, float]:
    """(seconds, peak RSS in MB) of one `tfdeclare apply job.yaml` run from ``code``."""
    env = {**os.environ, "PYTHONPATH": str(code)}
    command = [
        sys.executable,
        "-m",
        "tfdeclare",
        "apply",
        "job.yaml",
        "--state-dir",
        "s",
        "--status-dir",
        "st",
    ]
    out = subprocess.run(
        [sys.executable, "-c", _MEASURE_CHILD, *command],
        capture_output=True,
        text=True,
        check=True,
        cwd=workdir,
        env=env,
    )
    elapsed, maxrss_kib = out.stdout.split()
    return float(elapsed), int(maxrss_kib) / 1024


def measure(code: Path, workers: int) -> dict[str, float]:
    """Apply a job of ``workers`` workers from scratch, then resize it by one."""
    with tempfile.TemporaryDirectory(prefix="tfdeclare-bigjob-") as tmp:
        workdir = Path(tmp)
        env = {**os.environ, "PYTHONPATH": str(code)}
        with cleaned_up(workdir, TFDECLARE, "--state-dir", "s", "--status-dir", "st", env=env):
            (workdir / "tfdeclare.yaml").write_text(_CONFIG)
            (workdir / "job.yaml").write_text(_job(workers))
            apply_s, apply_mb = _apply(code, workdir)
            (workdir / "job.yaml").write_text(_job(workers + 1))
            resize_s, resize_mb = _apply(code, workdir)
    return {"apply_s": apply_s, "apply_mb": apply_mb, "resize_s": resize_s, "resize_mb": resize_mb}


_PASS_CHILD = """
import json, statistics, sys, time
from tfdeclare.core.enums import TaskState
from tfdeclare.core.run.lifecycle import Backoff, desired_configs, step
from tfdeclare.core.run.record import JobRecord
from tfdeclare.core.run.tasks import ObservedTask
from tfdeclare.core.spec.loader import load_file
from tfdeclare.core.spec.resources import Resources
n, runs = int(sys.argv[1]), int(sys.argv[2])
text = (
    "apiVersion: tfdeclare/v1\\nkind: TFJob\\nmetadata: {name: big}\\nspec:\\n  command: [python, train.py]\\n"
    f"  replicas:\\n    worker: {{count: {n}, resources: {{cpus: 1}}}}\\n"
)
job = load_file("big.yaml", text.encode()).jobs[0]
record = JobRecord(name="big", uid="u", canonical=job.canonical, spec_hash=job.spec_hash)
record = record.evolve(addresses={k.name: f"10.0.{i // 250}.{i % 250}:{2000 + i}" for i, k in enumerate(record.spec.task_keys())}, start_time=1.0, launches=1)
configs = desired_configs(record.spec, record)
tasks = [ObservedTask(f"big.{k.name}", "big", k, record.attempt, c.config_hash, TaskState.RUNNING, Resources(1, 64), started_at=1.0) for k, c in configs.items()]
backoff = Backoff(1.0, 8.0)
out = {}
for kept in (False, True):
    previous = step(record, tasks, 2.0, backoff).desired if kept else None
    samples = []
    for _ in range(runs):
        started = time.perf_counter()
        decided = step(record, tasks, 2.0, backoff, previous=previous)
        samples.append(time.perf_counter() - started)
        assert not decided.stop and not decided.launch
    out["kept" if kept else "fresh"] = statistics.median(samples)
print(json.dumps(out))
"""


def pass_over_running(code: Path, tasks: int, runs: int) -> dict[str, float]:
    """One controller step over a running job of ``tasks`` workers, every task current: its
    median time with every identity worked out afresh (as each pass did before issue 23) and
    with the last pass's configs given (``previous``), in the code of ``code``."""
    env = {**os.environ, "PYTHONPATH": str(code)}
    out = subprocess.run(
        [sys.executable, "-c", _PASS_CHILD, str(tasks), str(runs)],
        capture_output=True,
        text=True,
        check=True,
        env=env,
    )
    return dict(json.loads(out.stdout.strip().splitlines()[-1]))


def main() -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.bigjob_bench")
    parser.add_argument("--sizes", default="1000,10000")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--against", type=Path, help="another checkout, measured alongside")
    parser.add_argument("--out", type=Path, default=REPO / "bench" / "out" / "bigjob.json")
    args = parser.parse_args()
    sizes = [1, *(int(s) for s in args.sizes.split(","))]
    codes = {"this": REPO}
    if args.against is not None:
        codes["against"] = args.against.resolve()
    for code in codes.values():  # bytecode compiled first: the workplace may not write it
        subprocess.run([sys.executable, "-m", "compileall", "-q", str(code / "tfdeclare")], check=True)
    samples: dict[str, dict[int, list[dict[str, float]]]] = {c: {n: [] for n in sizes} for c in codes}
    for run in range(args.runs):  # interleaved: each version sees the same load, run for run
        for n in sizes:
            for name, code in codes.items():
                samples[name][n].append(measure(code, n))
                print(f"run {run + 1} {name} {n}: {samples[name][n][-1]}", file=sys.stderr, flush=True)

    def per_task(name: str, n: int, field: str, run: int) -> float:
        return (samples[name][n][run][field] - samples[name][1][run][field]) / n

    report: dict[str, object] = {
        "machine": machine(),
        "date": datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "load_average": os.getloadavg(),
        "runs": args.runs,
    }
    lines = []
    for name in codes:
        for n in sizes[1:]:
            row = {
                "per_task_ms": statistics.median(
                    1000 * per_task(name, n, "apply_s", r) for r in range(args.runs)
                ),
                "per_task_kb": statistics.median(
                    1024 * per_task(name, n, "apply_mb", r) for r in range(args.runs)
                ),
                "apply_s": statistics.median(s["apply_s"] for s in samples[name][n]),
                "apply_mb": statistics.median(s["apply_mb"] for s in samples[name][n]),
                "resize_s": statistics.median(s["resize_s"] for s in samples[name][n]),
                "resize_mb": statistics.median(s["resize_mb"] for s in samples[name][n]),
                "resize_over_one_s": statistics.median(
                    samples[name][n][r]["resize_s"] - samples[name][1][r]["resize_s"]
                    for r in range(args.runs)
                ),
            }
            report[f"{name}/{n}"] = row
            lines.append(f"{name} {n:>6}: " + ", ".join(f"{k} {v:.3g}" for k, v in row.items()))
        if len(sizes) > 2:
            big, small = sizes[-1], sizes[1]
            growth = [
                per_task(name, big, "apply_s", r) / per_task(name, small, "apply_s", r)
                for r in range(args.runs)
            ]
            report[f"{name}/per_task_time_{big}_over_{small}"] = statistics.median(growth)
            lines.append(f"{name}: per-task time at {big} / at {small}: {statistics.median(growth):.2f}")
    if "against" in codes:
        for n in sizes[1:]:
            for field in ("apply_s", "apply_mb", "resize_s", "resize_mb"):
                ratio = statistics.median(
                    samples["this"][n][r][field] / samples["against"][n][r][field] for r in range(args.runs)
                )
                report[f"ratio/{n}/{field}"] = ratio
                lines.append(f"this / against, {n} workers, {field}: {ratio:.3f}")
    for n in sizes[1:]:  # a pass over the running job: this code only (the option is new)
        row = pass_over_running(REPO, n, max(3, args.runs))
        report[f"pass/{n}"] = row
        lines.append(
            f"step over {n:>6} running tasks: identities afresh {row['fresh'] * 1000:.1f} ms, "
            f"last pass's configs kept {row['kept'] * 1000:.1f} ms"
        )
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=2) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
