"""The Mesos backend on a real Apache Mesos 1.11.0 master and on the master emulator, in one
run (issue 21): 1,000 tasks in gangs of 1-64 on 10 agents, placed and launched, as the
controller does it (place, then launch, gang after gang), with the same backend settings
and the same allocation interval (100 ms) on both.

"Launched" is when the master's own task list (``/master/state``) holds all 1,000 tasks:
every ACCEPT was processed and every task sent to its agent. On the real cluster the agents
are upstream's and run their launch path up to the fork, but the program they fork for each
task (``mesos-containerizer launch``, which would start the command executor) is a stand-in
that only sleeps. The real ones would not fit: each loads the 117 MB libmesos (tens of ms of
relocation on one core) and starts a Python executor (about 14 MB each with its launcher),
on the same 2 cores as the master, which then slows down several times over (measured: 1,000
tasks took 52-60 s so, against 1.7 s for 300). The emulator runs simulated tasks.
The cluster is stopped (its PID namespace killed) as soon as the count is reached.

    python -m bench --only realmesos
"""

from __future__ import annotations

import json
import os
import statistics
import tempfile
import time
import urllib.request
from pathlib import Path

from bench.common import Result
from bench.mesos_bench import AGENT, bench_backend, emulator, place_and_launch_gangs

AGENTS = 10
TASKS = 1000


def master_task_count(url: str) -> int:
    with urllib.request.urlopen(url + "/master/state", timeout=60) as response:
        state = json.loads(response.read())
    return sum(
        len(f.get("tasks", [])) + len(f.get("completed_tasks", [])) for f in state.get("frameworks", [])
    )


def place_and_launch(workdir: Path, url: str) -> dict[str, float]:
    backend = bench_backend(workdir, url, subscribe_timeout_s=60)
    try:
        started = time.perf_counter()
        backend.observe()  # subscribe
        subscribed = time.perf_counter()
        place_and_launch_gangs(backend, TASKS)
        decided = time.perf_counter()
        while master_task_count(url) < TASKS:
            time.sleep(0.1)
        launched = time.perf_counter()
    finally:
        backend.close()
    return {
        "subscribe": subscribed - started,
        "decided": decided - subscribed,
        "launched": launched - subscribed,
    }


def stand_in_launcher_dir(folder: Path) -> Path:
    """A launcher folder whose mesos-containerizer (what the agent forks for each task) only
    sleeps: the agent's launch path runs to the fork, and the container counts as running."""
    folder.mkdir(parents=True, exist_ok=True)
    for name in ("mesos-containerizer", "mesos-executor"):
        program = folder / name
        program.write_text("#!/bin/sh\nexec sleep 600\n")
        program.chmod(0o755)
    return folder


def on_real_master(workdir: Path, build: Path) -> dict[str, float]:
    from tests.real_mesos import RealMesos

    launcher_dir = stand_in_launcher_dir(workdir / "launcher")
    (workdir / "cluster").mkdir(parents=True)
    flags = {"LAUNCHER_DIR": str(launcher_dir)}
    cluster = RealMesos(workdir / "cluster", agents=AGENTS, resources=AGENT, flags=flags, build=build)
    with cluster:
        return place_and_launch(workdir / "real", cluster.url)


def on_emulator(workdir: Path) -> dict[str, float]:
    with emulator(AGENTS) as (url, _pid):
        return place_and_launch(workdir / "emulator", url)


def main(results: list[Result], quick: bool) -> None:
    from tools.realmesos import build as builder

    try:
        build = builder.build()
    except (builder.BuildError, OSError) as error:
        results.append(
            Result("mesos (real master): not run, no real Mesos", "-", [0.0], note=str(error)[:200])
        )
        return
    runs = 1 if quick else 3
    real: list[dict[str, float]] = []
    emulated: list[dict[str, float]] = []
    with tempfile.TemporaryDirectory() as tmp:
        for run in range(runs):
            workdir = Path(tmp) / f"run{run}"
            real.append(on_real_master(workdir, build))
            emulated.append(on_emulator(workdir))

    def med(rows: list[dict[str, float]], key: str) -> float:
        return statistics.median(r[key] for r in rows)

    def note(rows: list[dict[str, float]]) -> str:
        return (
            f"all placements decided after {med(rows, 'decided'):.2f} s; subscribe {med(rows, 'subscribe'):.2f} s "
            "not included"
        )

    load = f"load average {os.getloadavg()[0]:.1f} at the end"
    results.append(
        Result(
            f"mesos backend as a library (no apply), real Mesos 1.11.0 master, {AGENTS} agents, one process "
            f"on this machine's cores: {TASKS:,} tasks in gangs of 1-64 placed and launched (all in the "
            "master's task list)",
            "-",
            [r["launched"] for r in real],
            note=note(real) + "; the agents fork a stand-in for mesos-containerizer that sleeps; "
            "the pace is the cluster's offer cycle and forks under the machine's load; " + load,
        )
    )
    results.append(
        Result(
            f"mesos backend as a library, master emulator (Python, simulated tasks): same {TASKS:,} tasks, same run",
            "-",
            [e["launched"] for e in emulated],
            note=note(emulated) + "; the emulator is no model of a real master's speed: no ratio is drawn "
            "(the framework's own cost against a minimal framework: the framework suite)",
        )
    )
