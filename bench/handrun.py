"""A small stand-in job runner for the example specs: runs one TFJob on this machine.

It implements only what the examples need, the way tfdeclare's local backend is meant to:
free 127.0.0.1 ports, per-task ``TF_CONFIG`` (the evaluator left out of the training tasks'
cluster) or legacy ``{ps_hosts}``-style flags, ``TFDECLARE_*`` variables, one process group per
task, the completion rule (the chief's exit code, else every worker's), and the stop sequence
(SIGTERM to the group, a grace period, SIGKILL) for tasks still running at the end.
There are no restarts: any failure ends the run. The spec is trusted (no validation).

Also a command line for timing runs::

    python -m tests.tf_runner specs/mnist-mwms.yaml --runs 3
    python -m tests.tf_runner specs/*.yaml --concurrent
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

ROLES: tuple[str, ...] = ("chief", "ps", "worker", "evaluator")
LEGACY_PLACEHOLDERS: tuple[str, ...] = ("{ps_hosts}", "{worker_hosts}", "{job_name}", "{task_index}")
POLL_S = 0.05  # how often the runner looks at its tasks
MEMORY_SAMPLE_S = 0.25  # how often it sums their memory (reading /proc costs CPU)


@dataclass(frozen=True)
class TaskSpec:
    """One task to start: its place in the cluster and how to launch it."""

    role: str
    index: int
    argv: tuple[str, ...]
    env: Mapping[str, str]
    cwd: Path

    @property
    def name(self) -> str:
        return f"{self.role}-{self.index}"


@dataclass(frozen=True)
class TaskResult:
    role: str
    index: int
    exit_code: int  # negative: killed by that signal (e.g. -15 after the runner's SIGTERM)
    stopped_by_runner: bool
    output: str  # stdout and stderr, interleaved
    exited_s: float | None  # seconds from the job's launch to the runner seeing it exit

    @property
    def name(self) -> str:
        return f"{self.role}-{self.index}"

    def lines_starting(self, prefix: str) -> list[str]:
        return [line for line in self.output.splitlines() if line.startswith(prefix)]


@dataclass(frozen=True)
class JobResult:
    name: str
    succeeded: bool
    reason: str
    wall_s: float  # launch of the first task -> completion rule decided
    total_s: float  # launch -> every task gone
    peak_rss_mib: float | None  # peak of the concurrent sum over the tasks' process groups
    peak_pss_mib: float | None
    tasks: dict[str, TaskResult] = field(default_factory=dict)

    def task(self, role: str, index: int) -> TaskResult:
        return self.tasks[f"{role}-{index}"]

    def of_role(self, role: str) -> list[TaskResult]:
        return sorted((t for t in self.tasks.values() if t.role == role), key=lambda t: t.index)

    def summary(self) -> str:
        codes = " ".join(
            f"{n}={t.exit_code}{'*' if t.stopped_by_runner else ''}"
            + (f"@{t.exited_s:.1f}s" if t.exited_s is not None else "")
            for n, t in self.tasks.items()
        )
        mem = f" peak_rss={self.peak_rss_mib:.0f}MiB" if self.peak_rss_mib is not None else ""
        if self.peak_pss_mib is not None:
            mem += f" peak_pss={self.peak_pss_mib:.0f}MiB"
        state = "Succeeded" if self.succeeded else f"Failed ({self.reason})"
        return f"{self.name}: {state} in {self.wall_s:.2f}s (all gone {self.total_s:.2f}s){mem} [{codes}]"


def free_ports(count: int, host: str = "127.0.0.1") -> list[int]:
    """Ports the kernel picks as free; all sockets stay bound until every port is chosen."""
    with contextlib.ExitStack() as stack:
        ports = []
        for _ in range(count):
            sock = stack.enter_context(socket.socket(socket.AF_INET, socket.SOCK_STREAM))
            sock.bind((host, 0))
            ports.append(int(sock.getsockname()[1]))
        return ports


def replica_counts(spec: Mapping[str, Any]) -> dict[str, int]:
    replicas: Mapping[str, Any] = spec["spec"]["replicas"]
    return {role: int(replicas[role].get("count", 1)) for role in ROLES if role in replicas}


def build_cluster(counts: Mapping[str, int], host: str = "127.0.0.1") -> dict[str, list[str]]:
    ports = iter(free_ports(sum(counts.values()), host))
    return {role: [f"{host}:{next(ports)}" for _ in range(n)] for role, n in counts.items() if n > 0}


def tf_config(cluster: Mapping[str, list[str]], role: str, index: int) -> str:
    """The evaluator is left out of the cluster given to chief, ps and workers."""
    visible = {r: list(a) for r, a in cluster.items() if role == "evaluator" or r != "evaluator"}
    return json.dumps({"cluster": visible, "task": {"type": role, "index": index}})


def substitute_legacy_flags(
    argv: Sequence[str], cluster: Mapping[str, list[str]], role: str, index: int
) -> list[str]:
    values = {
        "{ps_hosts}": ",".join(cluster.get("ps", [])),
        "{worker_hosts}": ",".join(cluster.get("worker", [])),
        "{job_name}": role,
        "{task_index}": str(index),
    }
    out = []
    for arg in argv:
        for placeholder in LEGACY_PLACEHOLDERS:
            arg = arg.replace(placeholder, values[placeholder])
        out.append(arg)
    return out


def plan_tasks(
    spec: Mapping[str, Any],
    spec_dir: Path,
    cluster: Mapping[str, list[str]],
    python_bin: Path,
    attempt: int = 0,
) -> list[TaskSpec]:
    """Every task's argv, environment and working directory, as tfdeclare builds them."""
    name: str = spec["metadata"]["name"]
    body: Mapping[str, Any] = spec["spec"]
    style: str = body.get("clusterSpec", "tf_config")
    working_dir = spec_dir / body.get("workingDir", ".")  # an absolute workingDir wins
    base_env = {**os.environ, **{str(k): str(v) for k, v in body.get("env", {}).items()}}
    base_env.pop("TF_CONFIG", None)  # never inherit a cluster from the caller
    base_env["PATH"] = os.pathsep.join([str(python_bin), base_env.get("PATH", "")])
    tasks = []
    for role, addresses in cluster.items():
        replica: Mapping[str, Any] = body["replicas"][role]
        for index in range(len(addresses)):
            env = {**base_env, **{str(k): str(v) for k, v in replica.get("env", {}).items()}}
            env.update(
                TFDECLARE_JOB=name,
                TFDECLARE_ROLE=role,
                TFDECLARE_INDEX=str(index),
                TFDECLARE_ATTEMPT=str(attempt),
            )
            argv = [str(a) for a in replica.get("command", body.get("command", []))]
            if style in ("tf_config", "both"):
                env["TF_CONFIG"] = tf_config(cluster, role, index)
            if style in ("legacy_flags", "both"):
                argv = substitute_legacy_flags(argv, cluster, role, index)
            if not argv:
                raise ValueError(f"{name}: no command for {role}")
            executable = shutil.which(argv[0], path=env["PATH"])
            if executable is None:
                raise FileNotFoundError(f"{name}: {argv[0]!r} not found on PATH")
            argv[0] = executable
            tasks.append(TaskSpec(role, index, tuple(argv), env, working_dir))
    return tasks


def _memory_by_group_kib(pgids: set[int]) -> dict[int, tuple[int, int]]:
    """(RSS, PSS) in KiB summed over the processes of each of these process groups (Linux)."""
    totals = dict.fromkeys(pgids, (0, 0))
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            pgid = int(fields[2])  # the fields after "(comm)": state ppid pgrp ...
            if pgid not in totals:
                continue
            rss, pss = totals[pgid]
            for line in (entry / "smaps_rollup").read_text().splitlines():
                if line.startswith("Rss:"):
                    rss += int(line.split()[1])
                elif line.startswith("Pss:"):
                    pss += int(line.split()[1])
            totals[pgid] = (rss, pss)
        except (OSError, IndexError, ValueError):
            continue  # the process exited meanwhile, or this is not Linux's /proc
    return totals


class _Task:
    """A started task: its process (group leader) and its log file."""

    def __init__(self, spec: TaskSpec, log_dir: Path, launched: float) -> None:
        self.spec = spec
        self.launched = launched
        self.exited_at: float | None = None
        self.log_path = log_dir / f"{spec.name}.log"
        with self.log_path.open("wb") as log:
            self.proc = subprocess.Popen(
                spec.argv,
                env=dict(spec.env),
                cwd=spec.cwd,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                process_group=0,  # its own group: the stop signals reach its children too
            )
        self.stopped_by_runner = False

    def poll(self) -> int | None:
        code = self.proc.poll()
        if code is not None and self.exited_at is None:
            self.exited_at = time.monotonic()
        return code

    def signal_group(self, sig: signal.Signals) -> None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.proc.pid, sig)

    def result(self) -> TaskResult:
        code = self.proc.wait()
        self.poll()
        output = self.log_path.read_text(errors="replace")
        exited_s = None if self.exited_at is None else self.exited_at - self.launched
        return TaskResult(self.spec.role, self.spec.index, code, self.stopped_by_runner, output, exited_s)


def stop_tasks(tasks: Sequence[_Task], grace_s: float) -> None:
    """SIGTERM every running task's group, wait up to grace_s, then SIGKILL what is left."""
    running = [t for t in tasks if t.poll() is None]
    for task in running:
        task.stopped_by_runner = True
        task.signal_group(signal.SIGTERM)
    deadline = time.monotonic() + grace_s
    while any(t.poll() is None for t in running) and time.monotonic() < deadline:
        time.sleep(POLL_S)
    for task in tasks:  # also groups whose leader exited but left children behind
        task.signal_group(signal.SIGKILL)
    for task in tasks:
        task.proc.wait()
        task.poll()  # records the exit time


def _decide(tasks: Sequence[_Task]) -> tuple[bool, str] | None:
    """Apply the completion rule: (succeeded, reason) once decided, None while running."""
    codes = {t.spec.name: t.poll() for t in tasks}
    by_role: dict[str, list[_Task]] = {}
    for task in tasks:
        by_role.setdefault(task.spec.role, []).append(task)
    for task in tasks:  # fail fast: a training task failed, or a ps server stopped serving
        code, role = codes[task.spec.name], task.spec.role
        if code is None:
            continue
        if role == "ps":
            return False, f"{task.spec.name} exited {code} while the job was running"
        if role in ("chief", "worker") and code != 0:
            return False, f"{task.spec.name} exited {code}"
    if "chief" in by_role:
        chief = by_role["chief"][0]
        return (True, "chief exited 0") if codes[chief.spec.name] == 0 else None
    if all(codes[t.spec.name] == 0 for t in by_role.get("worker", [])):
        return True, "every worker exited 0"
    return None


def run_job(
    spec: Mapping[str, Any],
    spec_dir: Path,
    *,
    timeout_s: float = 120.0,
    grace_s: float = 10.0,
    log_dir: Path | None = None,
    python_bin: Path | None = None,
) -> JobResult:
    """Run one parsed TFJob spec to completion (or failure, or timeout) and clean up after it.

    ``python_bin`` is the ``bin`` folder put first on PATH (default: this interpreter's).
    Logs go to ``log_dir`` (default: a temporary folder, deleted afterwards).
    """
    name: str = spec["metadata"]["name"]
    cluster = build_cluster(replica_counts(spec))
    python_bin = python_bin or Path(sys.executable).parent
    plans = plan_tasks(spec, spec_dir, cluster, python_bin)
    with contextlib.ExitStack() as stack:
        if log_dir is None:
            log_dir = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix=f"tfrun-{name}-")))
        log_dir.mkdir(parents=True, exist_ok=True)
        started = time.monotonic()
        tasks: list[_Task] = []
        peak_rss = peak_pss = 0
        decision: tuple[bool, str] | None = None
        try:
            for plan in plans:  # every address is known before the first task starts
                tasks.append(_Task(plan, log_dir, started))
            next_sample = started
            while decision is None:
                if time.monotonic() >= next_sample:
                    next_sample += MEMORY_SAMPLE_S
                    usage = _memory_by_group_kib({t.proc.pid for t in tasks if t.poll() is None})
                    peak_rss = max(peak_rss, sum(r for r, _ in usage.values()))
                    peak_pss = max(peak_pss, sum(p for _, p in usage.values()))
                decision = _decide(tasks)
                if decision is None and time.monotonic() - started > timeout_s:
                    decision = (False, f"timed out after {timeout_s:.0f}s")
                if decision is None:
                    time.sleep(POLL_S)
            wall_s = time.monotonic() - started
        finally:  # never leave a TF process behind, whatever happened
            stop_tasks(tasks, grace_s if decision is not None else 0.0)
        total_s = time.monotonic() - started
        assert decision is not None  # the loop above only ends once decided
        succeeded, reason = decision
        return JobResult(
            name=name,
            succeeded=succeeded,
            reason=reason,
            wall_s=wall_s,
            total_s=total_s,
            peak_rss_mib=peak_rss / 1024 if peak_rss else None,
            peak_pss_mib=peak_pss / 1024 if peak_pss else None,
            tasks={t.spec.name: t.result() for t in tasks},
        )


def load_specs(path: Path) -> Iterator[dict[str, Any]]:
    """Every document of a spec file (PyYAML's safe loader; tfdeclare has its own)."""
    with path.open(encoding="utf-8") as f:
        for doc in yaml.safe_load_all(f):
            if doc is not None:
                yield doc


def _run_file(path: Path, results: list[JobResult], timeout_s: float) -> None:
    for spec in load_specs(path):
        results.append(run_job(spec, path.parent, timeout_s=timeout_s))


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Run example TFJob specs locally and time them.")
    parser.add_argument("specs", nargs="+", type=Path)
    parser.add_argument("--runs", type=int, default=1, help="repetitions (default 1)")
    parser.add_argument("--concurrent", action="store_true", help="run all files at once, like `make demo`")
    parser.add_argument("--timeout", type=float, default=120.0)
    parser.add_argument("--show-output", action="store_true", help="print every task's output")
    args = parser.parse_args(argv)

    ok = True
    walls: dict[str, list[float]] = {}
    for run in range(1, args.runs + 1):
        results: list[JobResult] = []
        started = time.monotonic()
        if args.concurrent:
            threads = [
                threading.Thread(target=_run_file, args=(p, results, args.timeout)) for p in args.specs
            ]
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join()
        else:
            for path in args.specs:
                _run_file(path, results, args.timeout)
        for result in results:
            print(f"run {run}: {result.summary()}", flush=True)
            walls.setdefault(result.name, []).append(result.wall_s)
            ok = ok and result.succeeded
            if args.show_output or not result.succeeded:
                for task in result.tasks.values():
                    print(f"----- {task.name} (exit {task.exit_code}) -----\n{task.output}", flush=True)
        if args.concurrent:
            print(f"run {run}: all done in {time.monotonic() - started:.2f}s", flush=True)
    if args.runs > 1:
        for job, values in walls.items():
            print(
                f"{job}: median {statistics.median(values):.2f}s over {len(values)} runs "
                f"(min {min(values):.2f}, max {max(values):.2f})"
            )
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
