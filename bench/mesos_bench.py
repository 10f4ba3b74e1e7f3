"""The Mesos backend at scale, against the master emulator in its own process (simulated
executor): 10,000 tasks in gangs of 1-64 on 1,000 agents end to end, the scheduler's decision
for one offer round, and how a decision's cost grows with agents and with waiting jobs.

    python -m bench --only mesos [--quick]
"""

from __future__ import annotations

import contextlib
import os
import random
import re
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

from bench.common import REPO, Result, quick_run
from tfdeclare.backends.mesos.backend import MesosBackend
from tfdeclare.backends.mesos.config import MesosConfig
from tfdeclare.backends.mesos.events import Offer
from tfdeclare.backends.mesos.offers import HeldOffer
from tfdeclare.backends.mesos.placement import place_gang
from tfdeclare.backends.mesos.placement_capacity import never_fits
from tfdeclare.backends.mesos.placement_values import PlacementOptions
from tfdeclare.backends.mesos.queueing import Waiting
from tfdeclare.core.enums import PlacementStrategy, Role, TaskState
from tfdeclare.core.run.tasks import GangRequest, Placement, SlotRequest, TaskKey, TaskLaunch
from tfdeclare.core.spec.resources import Resources

AGENT = "cpus:16;mem:65536;ports:[31000-31999]"
TASK = Resources(0.1, 64, 0)


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of a process so far (Linux)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


@contextlib.contextmanager
def emulator(agents: int) -> Iterator[tuple[str, int]]:
    """The emulator CLI in its own process (its own interpreter lock), simulated tasks."""
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "tests.mesos_emulator",
            "--port",
            "0",
            "--agents",
            str(agents),
            "--executor",
            "simulated",
            "--agent-resources",
            AGENT,
            "--heartbeat-interval",
            "5",
            "--allocation-interval",
            "0.1",
            "--update-retry-interval",
            "5",
            "--log-level",
            "WARNING",
        ],
        cwd=REPO,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert process.stdout is not None
        line = process.stdout.readline()
        match = re.search(r"(http://\S+)", line)
        if match is None:
            raise RuntimeError(f"the emulator did not start: {line!r}")
        yield match.group(1), process.pid
    finally:
        process.terminate()
        process.wait(timeout=30)


def gangs(total: int, seed: int = 7) -> list[int]:
    rng = random.Random(seed)
    sizes = []
    while sum(sizes) < total:
        sizes.append(min(rng.randint(1, 64), total - sum(sizes)))
    return sizes


def request(job: str, n: int, strategy: PlacementStrategy = PlacementStrategy.PACK) -> GangRequest:
    slots = tuple(SlotRequest(TaskKey(Role.WORKER, i), TASK) for i in range(n))
    return GangRequest(job, 0, slots, strategy)


def task_launches(placement: Placement, uid: str) -> list[TaskLaunch]:
    return [
        TaskLaunch(
            task_id=f"{placement.job}.{uid}.{slot.key.name}.1",
            job=placement.job,
            key=slot.key,
            attempt=0,
            spec_hash="s" * 64,
            config_hash="c" * 16,
            argv=("sleep", "3600"),
            env=(("TF_CONFIG", "{}"),),
            resources=TASK,
            slot=slot,
        )
        for slot in placement.slots
    ]


def bench_backend(workdir: Path, url: str, subscribe_timeout_s: float) -> MesosBackend:
    """The Mesos backend as the benches run it on ``url``'s master (framework ``bench``)."""
    config = MesosConfig(
        master=url,
        offer_hold_s=30,
        refuse_s=5,
        place_wait_s=5,
        subscribe_timeout_s=subscribe_timeout_s,
        framework_name="bench",
    )
    return MesosBackend(workdir / "state", config)


def place_and_launch_gangs(backend: MesosBackend, tasks: int) -> list[float]:
    """Places and launches ``tasks`` tasks in gangs of 1-64 like the controller does (place,
    then launch, one gang after the other; a place that finds no room is asked again 50 ms
    later, as on the next pass). Returns every place() decision's time."""
    decisions: list[float] = []
    for number, size in enumerate(gangs(tasks)):
        job = f"job{number:04d}"
        while True:
            before = time.perf_counter()
            placement = backend.place(request(job, size))
            decisions.append(time.perf_counter() - before)
            if isinstance(placement, Placement):
                break
            time.sleep(0.05)  # the controller would come back on the next pass
        backend.launch(placement, task_launches(placement, "bench"))
    return decisions


def end_to_end(workdir: Path, agents: int, tasks: int) -> tuple[dict[str, float], list[float]]:
    """Place and launch ``tasks`` tasks in gangs of 1-64 like the controller does (place, then
    launch, one gang after the other); return phase times and every place() decision time."""
    with emulator(agents) as (url, pid):
        backend = bench_backend(workdir, url, subscribe_timeout_s=30)
        try:
            started = time.perf_counter()
            backend.observe()  # subscribe
            subscribed = time.perf_counter()
            cpu_before = time.process_time(), cpu_seconds(pid)
            decisions = place_and_launch_gangs(backend, tasks)
            decided = time.perf_counter()

            def count(*states: str) -> int:
                # The journal's latest Mesos state per task, read cheaply on the backend's loop
                # (a full observe() of 10,000 tasks in a tight loop would steal the interpreter).
                return backend._loop.ask(lambda: sum(1 for e in backend._table if e.state in states))

            while count("TASK_STARTING", "TASK_RUNNING") < tasks:  # launched by the master
                time.sleep(0.1)
            launched = time.perf_counter()
            while count("TASK_RUNNING") < tasks:
                time.sleep(0.1)
            running = time.perf_counter()
            assert sum(1 for t in backend.observe() if t.state is TaskState.RUNNING) == tasks
            cpu = time.process_time() - cpu_before[0], cpu_seconds(pid) - cpu_before[1]
        finally:
            backend.close()
    return (
        {
            "subscribe": subscribed - started,
            "decided": decided - subscribed,
            "launched": launched - subscribed,
            "running": running - subscribed,
            "first_decision": decisions[0],  # includes the wait for the first offer round
            "our_cpu": cpu[0],
            "emulator_cpu": cpu[1],
        },
        decisions[1:],
    )


# ---- decisions without the emulator: the pool and queue filled directly ------------------------


def _offer(agent: int) -> Offer:
    return Offer.from_json(
        {
            "id": {"value": f"O{agent}"},
            "agent_id": {"value": f"S{agent:05d}"},
            "hostname": f"node{agent}.example",
            "allocation_info": {"role": "*"},
            "resources": [
                {"name": "cpus", "type": "SCALAR", "scalar": {"value": 16.0}, "role": "*"},
                {"name": "mem", "type": "SCALAR", "scalar": {"value": 65536.0}, "role": "*"},
                {
                    "name": "ports",
                    "type": "RANGES",
                    "ranges": {"range": [{"begin": 31000, "end": 31999}]},
                    "role": "*",
                },
            ],
            "attributes": [{"name": "rack", "type": "TEXT", "text": {"value": f"r{agent % 20}"}}],
        }
    )


def decision_backend(workdir: Path, agents: int, waiting: int) -> MesosBackend:
    """A backend (never connected) holding one offer round of ``agents`` agents, with
    ``waiting`` jobs queued ahead that cannot be placed now."""
    backend = MesosBackend(workdir / f"state-{agents}-{waiting}", MesosConfig(master="http://127.0.0.1:9"))
    backend._policies.policy.connected = True  # as if subscribed
    now = time.time()
    pool = backend._policies.pool
    for agent in range(agents):
        pool.add(HeldOffer.parse(_offer(agent), now, 3600))
    pool.set_agents(pool.views())  # what each agent has: here, all of it is free
    big = GangRequest(
        "big", 0, tuple(SlotRequest(TaskKey(Role.WORKER, i), Resources(32, 1024)) for i in range(4))
    )
    for n in range(waiting):  # needs 32-cpu agents: fits nothing held now
        backend._policies.queue[f"wait{n:04d}"] = Waiting(big, now - 10 + n * 1e-6, now)
    return backend


def decision_time(backend: MesosBackend, size: int, strategy: PlacementStrategy, runs: int) -> list[float]:
    gang = request("newcomer", size, strategy)
    entry = Waiting(gang, time.time(), time.time())
    samples = []
    for _ in range(runs):
        before = time.perf_counter()
        answer, _, _ = backend._scheduler.placer.try_place(gang, entry)  # never connected: no loop runs
        samples.append(time.perf_counter() - before)
        assert isinstance(answer, Placement), answer
    return samples


def core_decision(agents: int, size: int, strategy: PlacementStrategy, runs: int) -> list[float]:
    backend = decision_backend(Path(tempfile.mkdtemp()), agents, 0)
    views = backend._policies.pool.views()
    capacities = backend._policies.pool.capacities()
    gang = request("g", size, strategy)
    samples = []
    for _ in range(runs):
        before = time.perf_counter()
        never_fits(gang, capacities, PlacementOptions())
        place_gang(gang, views, PlacementOptions())
        samples.append(time.perf_counter() - before)
    return samples


def main(results: list[Result], quick: bool) -> None:
    runs = 1 if quick else 3
    with tempfile.TemporaryDirectory() as tmp:
        workdir = Path(tmp)
        phases: list[dict[str, float]] = []
        decisions: list[float] = []
        for run in range(runs):
            phase, decided = end_to_end(workdir / f"e2e{run}", 1000, 10_000)
            phases.append(phase)
            decisions.extend(decided)

        def med(key: str) -> float:
            return statistics.median(p[key] for p in phases)

        results.append(
            Result(
                "mesos: 10,000 tasks in gangs of 1-64 on 1,000 agents, placed and launched "
                "(every task launched by the master)",
                "≤ 10 s",
                [p["launched"] for p in phases],
                limit=10.0,
                note=(
                    f"all placements decided and queued after {med('decided'):.2f} s; CPU: tfdeclare "
                    f"{med('our_cpu'):.1f} s, emulator {med('emulator_cpu'):.1f} s (2 cores); subscribe "
                    f"{med('subscribe'):.2f} s not included; the first place() waits for the first offer "
                    f"round ({med('first_decision'):.2f} s)"
                ),
            )
        )
        results.append(
            Result(
                "mesos: same, until the backend observes all 10,000 running "
                "(20,000 updates journaled and acknowledged)",
                "-",
                [p["running"] for p in phases],
            )
        )
        results.append(
            Result(
                "mesos: one place() decision over a held offer round of 1,000 agents (gangs of 1-64, pack)",
                "≤ 50 ms",
                [d * 1000 for d in decisions],
                "ms",
                limit=50,
                note=f"max {max(decisions) * 1000:.1f} ms over {len(decisions)} decisions",
            )
        )
        samples = 5 if quick else 15
        for strategy in (PlacementStrategy.PACK, PlacementStrategy.SPREAD):
            backend = decision_backend(workdir, 1000, 0)
            results.append(
                Result(
                    f"mesos: decision for a 64-task gang, {strategy.value}, 1,000 agents held",
                    "≤ 50 ms",
                    [s * 1000 for s in decision_time(backend, 64, strategy, samples)],
                    "ms",
                    limit=50,
                )
            )
        for agents in (100, 300, 1000, 3000):
            results.append(
                Result(
                    f"mesos: decision cost vs agents: {agents} agents, 16-task gang, spread",
                    "-",
                    [
                        s * 1000
                        for s in decision_time(
                            decision_backend(workdir, agents, 0), 16, PlacementStrategy.SPREAD, samples
                        )
                    ],
                    "ms",
                )
            )
        for waiting in (0, 10, 100, 1000):
            results.append(
                Result(
                    f"mesos: decision cost vs waiting jobs: {waiting} queued ahead, 1,000 agents, 16-task gang",
                    "-",
                    [
                        s * 1000
                        for s in decision_time(
                            decision_backend(workdir, 1000, waiting), 16, PlacementStrategy.PACK, samples
                        )
                    ],
                    "ms",
                    note="only the head of the queue is placed tentatively",
                )
            )
        results.append(
            Result(
                "mesos: pure placement (never-fits check + place_gang), 64 tasks, spread, 1,000 agents",
                "-",
                [s * 1000 for s in core_decision(1000, 64, PlacementStrategy.SPREAD, samples)],
                "ms",
            )
        )


if __name__ == "__main__":
    collected: list[Result] = []
    main(collected, quick=quick_run("python -m bench.mesos_bench", __doc__))
    for result in collected:
        print(result.row())
