"""At the policy's own limits (issue 29): one job of 100,000 workers (``policy.maxTasksPerJob``
at its schema's maximum) and ``policy.maxJobs`` jobs in one folder (at its schema's maximum,
3,000: the most one state folder may hold), on the local backend, every task asking
for more than the machine has (they stay Pending, Unschedulable: nothing runs).

Measured, each as wall time of the whole command or request (and a command's CPU time, user
and system, which a machine shared with other work does not inflate): ``tfdeclare apply``, ``tfdeclare
status`` (the table), ``status NAME`` and ``status NAME --tasks-offset`` (a page past those its
status file lists), ``delete``; with ``tfdeclare daemon`` running on the same folder (after its
first pass): ``GET /``, ``/jobs``, ``/jobs/NAME`` and a page of tasks, also while a pass runs,
and the daemon's peak RSS. Targets: status, the page and /jobs within 1 s, the daemon within
2 GB, apply/status/delete of that many jobs within 5 s each. (10,000 jobs, which this bench
ran before ``policy.maxJobs`` existed, took 6.5-7.1 s to apply here: docs/benchmarks.md.)

``python -m bench.limits_bench [--runs N] [--tasks 100000] [--jobs 3000]`` (``0``: that
scenario left out; ``--tasks 0`` measures the many jobs alone) writes
bench/out/limits.md and limits.json (``make bench-limits``); ``make bench`` runs it too
(``--only limits``, one run each with ``--quick``).
"""

from __future__ import annotations

import argparse
import compileall
import json
import os
import re
import resource
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

from bench.common import (
    CLI_SCRIPT,
    MAX_JOBS,
    REPO,
    Result,
    cleaned_up,
    results_header,
    stop_process,
    wait_for,
)

UNPLACEABLE = "{cpus: 1000}"  # more than any machine here offers: Pending, Unschedulable


def _job(name: str, workers: int) -> str:
    return (
        f"apiVersion: tfdeclare/v1\nkind: TFJob\nmetadata: {{name: {name}}}\n"
        f"spec:\n  command: [python, train.py]\n"
        f"  replicas:\n    worker: {{count: {workers}, resources: {UNPLACEABLE}}}\n"
    )


def _timed(args: list[str], cwd: Path, ok: tuple[int, ...] = (0, 1)) -> tuple[float, float]:
    """Seconds of one CLI command, start to exit, in wall time and in CPU time (user and
    system: what a loaded machine does not inflate). Exit 1: the jobs cannot be scheduled."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    done = subprocess.run(args, cwd=cwd, capture_output=True, text=True, timeout=1800, check=False)
    elapsed = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode not in ok:
        raise RuntimeError(f"{' '.join(args)} failed ({done.returncode}): {done.stderr[-2000:]}")
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return elapsed, cpu


class _Daemon:
    def __init__(self, cwd: Path) -> None:
        self.log = cwd / "daemon.log"
        self.handle = open(self.log, "w")  # noqa: SIM115 - closed in stop()
        self.proc = subprocess.Popen(
            [CLI_SCRIPT, "daemon", "--specs", "specs", "--port", "0", "--interval", "5"],
            cwd=cwd,
            stdout=self.handle,
            stderr=subprocess.STDOUT,
        )
        try:
            wait_for(lambda: "listening on" in self.log.read_text(), timeout=120, poll=0.05)
        except BaseException:
            self.stop()
            raise
        found = re.search(r"listening on (http://\S+)", self.log.read_text())
        assert found is not None
        self.url = found.group(1)

    def get(self, path: str) -> tuple[int, int, float]:
        """(status, bytes, seconds) of one request."""
        started = time.perf_counter()
        try:
            with urllib.request.urlopen(self.url + path, timeout=120) as answer:
                size = len(answer.read())
                code = answer.status
        except urllib.error.HTTPError as err:
            size, code = len(err.read()), err.code
        return code, size, time.perf_counter() - started

    def passes(self) -> int:
        with urllib.request.urlopen(self.url + "/metrics", timeout=120) as answer:
            text = answer.read().decode()
        found = re.search(r"^tfdeclare_reconcile_passes_total (\d+)", text, re.M)
        return int(found.group(1)) if found else 0

    def peak_rss_mib(self) -> float:
        for line in Path(f"/proc/{self.proc.pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
        raise RuntimeError("no VmHWM")

    def stop(self) -> None:
        try:
            stop_process(self.proc, timeout=120)
        finally:
            self.handle.close()


def _requests(daemon: _Daemon, paths: dict[str, str], runs: int) -> dict[str, list[float]]:
    """Seconds per request, ``runs`` rounds of every path (each must answer 200)."""
    out: dict[str, list[float]] = {label: [] for label in paths}
    for _ in range(runs):
        for label, path in paths.items():
            code, _, seconds = daemon.get(path)
            if code != 200:
                raise RuntimeError(f"GET {path}: {code}")
            out[label].append(seconds)
    return out


def scenario(workdir: Path, name: str, jobs: dict[str, int], runs: int) -> dict[str, list[float]]:
    """apply, status, status NAME, the daemon's endpoints, delete: seconds per run (and the
    daemon's peak RSS in MiB, under ``daemon_peak_mib``)."""
    samples: dict[str, list[float]] = {}

    def add(key: str, value: float | tuple[float, float]) -> None:
        if isinstance(value, tuple):  # a command's (wall, CPU)
            samples.setdefault(key, []).append(value[0])
            samples.setdefault(f"{key} (CPU time)", []).append(value[1])
        else:
            samples.setdefault(key, []).append(value)

    cli = [CLI_SCRIPT]
    first = sorted(jobs)[0]
    biggest = max(jobs.values())
    for _ in range(runs):
        work = workdir / f"run-{len(samples.get('apply', []))}"
        (work / "specs").mkdir(parents=True)
        (work / "tfdeclare.yaml").write_text(f"policy:\n  maxTasksPerJob: {max(1000, biggest)}\n")
        with cleaned_up(work):  # its jobs deleted and no controller left, failed or not
            for job, workers in jobs.items():
                (work / "specs" / f"{job}.yaml").write_text(_job(job, workers))
            add("apply", _timed([*cli, "apply", "specs", "-o", "json"], work))
            add("status", _timed([*cli, "status"], work, ok=(0,)))
            add("status NAME", _timed([*cli, "status", first], work, ok=(0,)))
            offset = max(0, jobs[first] - 10)
            add(
                "status NAME --tasks-offset",
                _timed([*cli, "status", first, "--tasks-offset", str(offset)], work, (0,)),
            )
            daemon = _Daemon(work)
            try:
                wait_for(lambda: daemon.passes() >= 1, timeout=1800, poll=0.2)  # noqa: B023
                paths = {
                    "GET /": "/",
                    "GET /jobs": "/jobs",
                    "GET /jobs/NAME": f"/jobs/{first}",
                    "GET /jobs/NAME?tasksOffset=": f"/jobs/{first}?tasksOffset={offset}&tasksLimit=10",
                }
                for label, seconds in _requests(daemon, paths, 3).items():
                    samples.setdefault(label, []).extend(seconds)
                # while a pass runs: ask for one and answer at once
                urllib.request.urlopen(
                    urllib.request.Request(daemon.url + "/sync", method="POST"), timeout=60
                )
                for label, seconds in _requests(daemon, {"GET / during a pass": "/"}, 1).items():
                    samples.setdefault(label, []).extend(seconds)
                add("daemon_peak_mib", daemon.peak_rss_mib())
            finally:
                daemon.stop()
            add("delete", _timed([*cli, "delete", "--all", "-o", "json"], work, ok=(0,)))
        print(f"{name}: " + ", ".join(f"{k} {v[-1]:.3g}" for k, v in samples.items()), flush=True)
    return samples


TARGETS: dict[str, tuple[str, float]] = {
    "apply": ("≤ 5 s (at policy.maxJobs)", 5.0),
    "status": ("≤ 1 s", 1.0),
    "status NAME": ("≤ 1 s", 1.0),
    "status NAME --tasks-offset": ("≤ 1 s", 1.0),
    "GET /": ("≤ 1 s", 1.0),
    "GET /jobs": ("≤ 1 s", 1.0),
    "GET /jobs/NAME": ("≤ 1 s", 1.0),
    "GET /jobs/NAME?tasksOffset=": ("≤ 1 s", 1.0),
    "GET / during a pass": ("≤ 1 s", 1.0),
    "delete": ("≤ 5 s (at policy.maxJobs)", 5.0),
    "daemon_peak_mib": ("≤ 2048 MiB", 2048.0),
}


def results_of(name: str, samples: dict[str, list[float]], *, apply_target: bool) -> list[Result]:
    out = []
    for key, values in samples.items():
        target, limit = TARGETS[key.removesuffix(" (CPU time)")]
        if key.removesuffix(" (CPU time)") in ("apply", "delete") and not apply_target:
            target, limit = "-", None  # the 5 s targets are for many jobs
        unit = "MiB" if key == "daemon_peak_mib" else "s"
        label = "daemon peak RSS" if key == "daemon_peak_mib" else key
        out.append(Result(f"{name}: {label}", target, values, unit=unit, limit=limit))
    return out


def main(
    results: list[Result], quick: bool, *, tasks: int = 100_000, jobs: int = MAX_JOBS, runs: int | None = None
) -> None:
    runs = runs or (1 if quick else 3)
    if tasks:
        with tempfile.TemporaryDirectory(prefix="tfdeclare-limits-") as tmp:
            big = scenario(Path(tmp) / "big", f"one job of {tasks:,} tasks", {"big": tasks}, runs)
        results.extend(results_of(f"one job of {tasks:,} tasks", big, apply_target=False))
    if jobs:
        with tempfile.TemporaryDirectory(prefix="tfdeclare-limits-") as tmp:
            names = {f"job-{i:05d}": 1 for i in range(jobs)}
            many = scenario(Path(tmp) / "many", f"{jobs:,} jobs", names, runs)
        results.extend(results_of(f"{jobs:,} jobs", many, apply_target=True))


def _write(results: list[Result], out: Path) -> str:
    header = results_header()
    table = "\n".join(header + [r.row() for r in results]) + "\n"
    out.mkdir(exist_ok=True)
    (out / "limits.md").write_text(table)
    rows = [
        {
            "name": r.name,
            "target": r.target,
            "median": statistics.median(r.samples),
            "unit": r.unit,
            "samples": r.samples,
            "met": r.met,
        }
        for r in results
    ]
    (out / "limits.json").write_text(json.dumps(rows, indent=1))
    return table


def cli(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.limits_bench")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--tasks", type=int, default=100_000, help="workers of the one big job (0: none)")
    parser.add_argument(
        "--jobs", type=int, default=MAX_JOBS, help=f"jobs in the one folder (0: none; at most {MAX_JOBS})"
    )
    args = parser.parse_args(argv)
    if args.jobs > MAX_JOBS:
        parser.error(f"--jobs: at most {MAX_JOBS} (policy.maxJobs at its maximum)")
    compileall.compile_dir(REPO / "tfdeclare", quiet=1)  # as installed (bench/__main__.py says why)
    results: list[Result] = []
    with tempfile.TemporaryDirectory(prefix="tfdeclare-limits-registry-") as registry:
        # a registry of state folders of its own: another bench's 10,000 jobs of the same names
        # under a folder of this user would be "a second copy" (shell/statedirs.py), and its
        # folders' listings not this bench's cost
        os.environ.setdefault("TFDECLARE_REGISTRY_DIR", registry)
        main(results, False, tasks=args.tasks, jobs=args.jobs, runs=args.runs)
    print(_write(results, REPO / "bench" / "out"))
    return 0


if __name__ == "__main__":
    sys.exit(cli())
