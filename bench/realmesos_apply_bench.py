"""The framework's own cost on a real Apache Mesos 1.11.0 cluster (issue 33): ``tfdeclare
apply`` of one job of N real tasks (default 200; each a ``sleep`` under the tier's command
executor), one fresh cluster per run (a used cluster is slower for every framework).

Measured per run: the seconds from starting ``apply`` until the master's ``/master/state``
shows every task TASK_RUNNING, the seconds until ``apply`` exits, and the CPU (user + system)
of the ``apply`` process, which is the framework, start-up and imports included. Given several
checkouts (``--checkout DIR``, default this one), runs alternate between them on fresh
clusters, so a before/after comparison sees the same machine load; each runs with the
interpreter of this process and its own tree first on ``PYTHONPATH``.

    python -m bench.realmesos_apply_bench [--tasks 200] [--runs 2] [--checkout DIR]...

Needs ``make real-mesos``; prints one JSON line per run and a summary per checkout.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path
from typing import Any

from bench.common import REPO, TFDECLARE, cleaned_up

AGENTS = 4
AGENT = "cpus:8;mem:16384;disk:4096;ports:[31000-31999]"


def running_count(url: str) -> int:
    with urllib.request.urlopen(url + "/master/state", timeout=60) as response:
        state = json.loads(response.read())
    return sum(
        1 for f in state.get("frameworks", []) for t in f.get("tasks", []) if t.get("state") == "TASK_RUNNING"
    )


def project(folder: Path, url: str, tasks: int) -> Path:
    name = f"wide-{os.getpid()}-{folder.parent.name}"  # one job name per run: each is a new job
    (folder / "specs").mkdir(parents=True)
    (folder / "tfdeclare.yaml").write_text(
        f"backend: mesos\nmesos: {{master: {url}, subscribeTimeoutSeconds: 60, failoverTimeoutSeconds: 600}}\n"
    )
    (folder / "specs" / "wide.yaml").write_text(
        f"apiVersion: tfdeclare/v1\nkind: TFJob\nmetadata: {{name: {name}}}\nspec:\n"
        "  command: [sleep, '600']\n"
        f"  replicas: {{worker: {{count: {tasks}, resources: {{cpus: 0.01, mem: 16}}}}}}\n"
    )
    return folder


def one_run(checkout: Path, workdir: Path, tasks: int) -> dict[str, Any]:
    from tests.real_mesos import RealMesos

    (workdir / "cluster").mkdir(parents=True)
    with RealMesos(workdir / "cluster", agents=AGENTS, resources=AGENT) as cluster:
        folder = project(workdir / "project", cluster.url, tasks)
        env = {**os.environ, "PYTHONPATH": str(checkout), "TFDECLARE_BACKGROUND_CONTROLLER": ""}
        # the job deleted and its background controller gone while the cluster is up, failed or not
        with cleaned_up(folder, TFDECLARE, env=env):
            all_running: list[float] = []
            done = threading.Event()

            def watch(started: float) -> None:
                while not done.is_set():
                    if running_count(cluster.url) >= tasks:
                        all_running.append(time.perf_counter() - started)
                        return
                    time.sleep(0.1)

            started = time.perf_counter()
            process = subprocess.Popen(
                [sys.executable, "-m", "tfdeclare", "apply", "specs"],
                cwd=folder,
                env=env,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.PIPE,
            )
            watcher = threading.Thread(target=watch, args=(started,), daemon=True)
            watcher.start()
            _, status, usage = os.wait4(process.pid, 0)
            process.returncode = os.waitstatus_to_exitcode(status)
            exited = time.perf_counter() - started
            watcher.join(120)
            done.set()
        stderr = process.stderr.read().decode() if process.stderr else ""
        return {
            "checkout": str(checkout),
            "tasks": tasks,
            "exit": process.returncode,
            "all_running_s": round(all_running[0], 2) if all_running else None,
            "apply_exited_s": round(exited, 2),
            "apply_cpu_s": round(usage.ru_utime + usage.ru_stime, 3),
            "stderr_tail": stderr[-300:],
        }


def main() -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.realmesos_apply_bench")
    parser.add_argument("--tasks", type=int, default=200)
    parser.add_argument("--runs", type=int, default=2)
    parser.add_argument("--checkout", action="append", type=Path)
    args = parser.parse_args()
    checkouts = [c.resolve() for c in args.checkout or [REPO]]
    rows: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory() as tmp:
        for run in range(args.runs):
            for number, checkout in enumerate(checkouts):
                row = one_run(checkout, Path(tmp) / f"run{run}-{number}", args.tasks)
                print(json.dumps(row), flush=True)
                rows.append(row)
    for checkout in checkouts:
        mine = [r for r in rows if r["checkout"] == str(checkout)]
        summary = {
            key: statistics.median(r[key] for r in mine if r[key] is not None)
            for key in ("all_running_s", "apply_exited_s", "apply_cpu_s")
            if any(r[key] is not None for r in mine)
        }
        print(json.dumps({"checkout": str(checkout), "runs": len(mine), "median": summary}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
