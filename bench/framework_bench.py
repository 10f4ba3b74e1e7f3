"""The framework's own cost beside a minimal framework's, on fresh real Apache Mesos 1.11.0
clusters, in one run (issue 33; ``make bench``, or ``python -m bench --only framework``).

Two frameworks launch the same N tasks (``sleep 600``, cpus 0.01, mem 16 MiB, one port each)
on 4 agents: ``tfdeclare apply`` of one job of N workers, and ``bench/minimal_framework.py``
(raw v1 HTTP, standard library only). Runs alternate between them, each on a fresh cluster (a
used cluster is slower for every framework, so reusing one would measure the order). Measured
per run, from starting the framework's process:

- at 200 real tasks (the tier's command executor, one Python executor per task): the seconds
  until the master's ``/master/state`` shows every task TASK_RUNNING, the seconds until every
  task's process exists on the machine, and the CPU (user + system) of the framework's process
  until it exits (tfdeclare's start-up, imports, planning and state files included);
- at 1,000 tasks, where real executors would not fit on this machine's cores (see
  ``bench/realmesos_bench.py``), the agents fork a stand-in for ``mesos-containerizer`` that
  only sleeps: the seconds until the agents have started every task's process, and the CPU of
  the framework's process until it exits or, at the latest, until then (it is then stopped: no
  task ever reports running).

The ratios (tfdeclare over minimal) are taken per alternation, each pair measured back to back
under the same machine load; the load average is in the notes. Both frameworks' modules are
compiled to bytecode before the first run (``compiled``), as an installed package has them: an
environment with ``PYTHONDONTWRITEBYTECODE`` set otherwise made every tfdeclare run compile its
~180 modules afresh (about 0.2 s of CPU on the machine of docs/benchmarks.md), which is not
the framework's cost.

    python -m bench.framework_bench [--runs 2] [--tasks 200,1000] [--also-env-bytes N] [--also-fetch]

``--also-env-bytes N`` adds a third framework to the alternation, the minimal one with N bytes
of environment in every task (``minimal+N``; JSON lines only): what a TaskInfo the size of
tfdeclare's costs the agents. ``--also-fetch`` adds ``tfdeclare-fetch``: tfdeclare with
``mesos.clusterServer`` set (defaults), so a job above 2 KB of cluster per task fetches it at
start instead of carrying it in every TaskInfo (issue 33, item 2; JSON lines only).

Needs ``make real-mesos``; prints one JSON line per run.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench.common import REPO, TFDECLARE, Result, cleaned_up, stop_keepers
from bench.realmesos_apply_bench import AGENT, AGENTS, project
from bench.realmesos_bench import stand_in_launcher_dir

FRAMEWORKS = ("tfdeclare", "minimal")
REAL_UP_TO = 200  # above this many tasks the agents fork stand-ins
TIMEOUT_S = 240.0


def running_count(url: str) -> int:
    with urllib.request.urlopen(url + "/master/state", timeout=60) as response:
        state = json.loads(response.read())
    return sum(
        1 for f in state.get("frameworks", []) for t in f.get("tasks", []) if t.get("state") == "TASK_RUNNING"
    )


def task_processes(root: int) -> int:
    """How many ``sleep`` processes run below ``root`` (the cluster's process): the tasks, or
    the stand-ins the agents forked for them."""
    parents: dict[int, int] = {}
    sleeping: list[int] = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as stat:
                text = stat.read()
        except OSError:
            continue
        head, _, rest = text.rpartition(")")
        parents[int(entry)] = int(rest.split()[1])
        if head.endswith("(sleep"):
            sleeping.append(int(entry))

    def below(pid: int) -> bool:
        seen = 0
        while pid > 1 and seen < 64:
            if pid == root:
                return True
            pid, seen = parents.get(pid, 0), seen + 1
        return False

    return sum(1 for pid in sleeping if below(pid))


def command(framework: str, folder: Path, url: str, tasks: int) -> list[str]:
    """``tfdeclare``, ``minimal``, or ``minimal+N`` (the minimal framework with N bytes of
    environment in every task)."""
    if framework in ("tfdeclare", "tfdeclare-fetch"):
        project(folder, url, tasks)
        if framework == "tfdeclare-fetch":
            config = folder / "tfdeclare.yaml"
            config.write_text(config.read_text().replace("}\n", ", clusterServer: {}}\n", 1))
        return [sys.executable, "-m", "tfdeclare", "apply", "specs"]
    folder.mkdir(parents=True)
    padding = framework.partition("+")[2] or "0"
    argv = ["--tasks", str(tasks), "--env-bytes", padding, url, "sleep", "600"]
    return [sys.executable, "-m", "bench.minimal_framework", *argv]


@dataclass
class Watch:
    """What the watcher saw, in seconds from the framework's start."""

    all_running: float | None = None
    all_processes: float | None = None
    errors: list[str] = field(default_factory=list)


def watch(
    cluster: Any,
    process: subprocess.Popen[bytes],
    tasks: int,
    real: bool,
    started: float,
    failed: threading.Event,
) -> Watch:
    seen = Watch()
    assert cluster.process is not None
    root = cluster.process.pid
    while time.perf_counter() - started < TIMEOUT_S and not failed.is_set():
        now = time.perf_counter() - started
        if seen.all_processes is None and task_processes(root) >= tasks:
            seen.all_processes = now
            if not real:  # the stand-ins never report running: stop the framework (if still there)
                process.send_signal(signal.SIGKILL)
                return seen
        if real and seen.all_running is None:
            try:
                if running_count(cluster.url) >= tasks:
                    seen.all_running = time.perf_counter() - started
            except OSError as error:
                seen.errors.append(str(error))
        if seen.all_processes is not None and (seen.all_running is not None or not real):
            return seen
        time.sleep(0.2)
    if not failed.is_set():
        process.send_signal(signal.SIGKILL)
    return seen


@contextlib.contextmanager
def keepers_stopped(folder: Path) -> Iterator[Path]:
    """``folder``; on the way out, its background controllers stopped without waiting for them
    to finish (their job of stand-ins never does)."""
    try:
        yield folder
    finally:
        stop_keepers(folder, grace_s=0.0)


def one_run(framework: str, workdir: Path, tasks: int) -> dict[str, Any]:
    from tests.real_mesos import RealMesos

    real = tasks <= REAL_UP_TO
    flags = {} if real else {"LAUNCHER_DIR": str(stand_in_launcher_dir(workdir / "stand-in"))}
    (workdir / "cluster").mkdir(parents=True)
    with RealMesos(workdir / "cluster", agents=AGENTS, resources=AGENT, flags=flags) as cluster:
        folder = workdir / "framework"
        argv = command(framework, folder, cluster.url, tasks)
        env = {**os.environ, "PYTHONPATH": str(REPO), "TFDECLARE_BACKGROUND_CONTROLLER": ""}
        # tfdeclare's job deleted and its background controller gone while the cluster is up,
        # failed or not; with stand-ins, an apply that returned before the watcher stopped it
        # left a background controller: stopped at once (it kept reconnecting to the cluster
        # gone, beside the runs that followed)
        guard: contextlib.AbstractContextManager[Any] = contextlib.nullcontext(folder)
        if framework.startswith("tfdeclare"):
            guard = cleaned_up(folder, TFDECLARE, env=env) if real else keepers_stopped(folder)
        with guard:
            load = os.getloadavg()[0]
            started = time.perf_counter()
            process = subprocess.Popen(
                argv, cwd=folder, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
            )
            result: list[Watch] = []
            failed = threading.Event()
            watcher = threading.Thread(
                target=lambda: result.append(watch(cluster, process, tasks, real, started, failed))
            )
            watcher.start()
            _, status, usage = os.wait4(process.pid, 0)
            exited = time.perf_counter() - started
            process.returncode = os.waitstatus_to_exitcode(status)  # reaped: the watcher signals it no more
            if real and os.waitstatus_to_exitcode(status) != 0:
                failed.set()
            watcher.join()
            seen = result[0]
        stderr = process.stderr.read().decode(errors="replace") if process.stderr else ""
        return {
            "framework": framework,
            "tasks": tasks,
            "stand_in": not real,
            "load_1min": round(load, 2),
            "exit": os.waitstatus_to_exitcode(status),
            "all_running_s": None if seen.all_running is None else round(seen.all_running, 2),
            "all_processes_s": None if seen.all_processes is None else round(seen.all_processes, 2),
            "exited_s": round(exited, 2),
            "cpu_s": round(usage.ru_utime + usage.ru_stime, 3),
            "errors": seen.errors[-3:],
            "stderr_tail": stderr[-300:] if real else "",
        }


def compiled() -> None:
    """Both frameworks' modules compiled to bytecode (``__pycache__``, ignored by git) before
    the runs, as pip compiles an installed package; the interpreter's own and the installed
    packages' modules have theirs already."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    sources = [str(REPO / "tfdeclare"), str(REPO / "bench" / "minimal_framework.py")]
    subprocess.run([sys.executable, "-m", "compileall", "-q", *sources], env=env, check=True)


def measure(runs: int, sizes: list[int], frameworks: tuple[str, ...] = FRAMEWORKS) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    compiled()
    with tempfile.TemporaryDirectory() as tmp:
        for tasks in sizes:
            for run in range(runs):
                for framework in frameworks if run % 2 == 0 else reversed(frameworks):
                    workdir = Path(tmp) / f"{tasks}-{run}-{framework}"
                    row = one_run(framework, workdir, tasks)
                    shutil.rmtree(workdir, ignore_errors=True)  # now, not under the next run
                    row["run"] = run
                    print(json.dumps(row), flush=True)
                    rows.append(row)
    return rows


GOALS = {"cpu_s": 2.0, "all_running_s": 1.2, "all_processes_s": 1.2}
WHAT = {
    "cpu_s": "CPU of the framework's process",
    "all_running_s": "until the master shows all TASK_RUNNING",
    "all_processes_s": "until every task's process exists",
}


def results(rows: list[dict[str, Any]]) -> list[Result]:
    out: list[Result] = []
    for tasks in sorted({r["tasks"] for r in rows}):
        mine = [r for r in rows if r["tasks"] == tasks]
        kind = "real tasks" if tasks <= REAL_UP_TO else "tasks (stand-in executors)"
        loads = ", ".join(f"{r['load_1min']:.1f}" for r in mine)
        for key in ("cpu_s", "all_running_s", "all_processes_s"):
            pairs = []
            for run in sorted({r["run"] for r in mine}):
                by = {r["framework"]: r[key] for r in mine if r["run"] == run}
                if by.get("tfdeclare") is not None and by.get("minimal"):
                    pairs.append((by["tfdeclare"], by["minimal"]))
            if not pairs:
                continue
            ours = statistics.median(p[0] for p in pairs)
            base = statistics.median(p[1] for p in pairs)
            out.append(
                Result(
                    f"framework cost: {tasks:,} {kind} on a fresh real Mesos 1.11.0 cluster (4 agents), "
                    f"{WHAT[key]}: tfdeclare / minimal framework",
                    f"≤ {GOALS[key]}×",
                    [a / b for a, b in pairs],
                    "x",
                    limit=GOALS[key],
                    note=f"medians {ours:.2f} s against {base:.2f} s; one ratio per alternation; "
                    f"load average at each start {loads}",
                )
            )
    return out


def main(out: list[Result], quick: bool) -> None:
    from tools.realmesos import build as builder

    try:
        builder.build()
    except (builder.BuildError, OSError) as error:
        out.append(Result("framework cost: not run, no real Mesos", "-", [0.0], note=str(error)[:200]))
        return
    out.extend(results(measure(1 if quick else 2, [200, 1000])))


def cli() -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.framework_bench")
    parser.add_argument("--runs", type=int, default=2)
    parser.add_argument("--tasks", default="200,1000", help="comma-separated sizes")
    parser.add_argument(
        "--also-env-bytes",
        type=int,
        default=0,
        help="also run the minimal framework with this many bytes of environment per task (minimal+N)",
    )
    parser.add_argument(
        "--also-fetch",
        action="store_true",
        help="also run tfdeclare with mesos.clusterServer (tfdeclare-fetch)",
    )
    args = parser.parse_args()
    frameworks = FRAMEWORKS + ((f"minimal+{args.also_env_bytes}",) if args.also_env_bytes else ())
    frameworks += ("tfdeclare-fetch",) if args.also_fetch else ()
    for result in results(measure(args.runs, [int(n) for n in args.tasks.split(",")], frameworks)):
        print(result.row(), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(cli())
