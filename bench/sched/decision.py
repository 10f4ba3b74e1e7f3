"""Decision time at scale: ``place_in_line`` with 1,000 agents and 1,000 waiting jobs.

One decision is what the backend does when one job asks to be placed: the head of line's
share (its placement, or the agents it drains once it waited too long) and the job's own
all-or-nothing placement, over every agent's offer. Measured for every one of the 1,000
waiting jobs, with the head draining (the costlier case) and without. The times are the
thread's CPU time (``time.thread_time``): on a shared machine the wall time also counts the
moments the process waits for a core; it is reported beside (``wall_``).
"""

from __future__ import annotations

import gc
import random
import time

import numpy as np

from bench.sched.cluster import make_cluster, task_resources
from bench.sched.policies import gang_request
from bench.sched.trace import Job, Trace, generate
from tfdeclare.backends.mesos.placement_values import PlacementOptions
from tfdeclare.backends.mesos.queueing import Waiting, place_in_line


def measure(agents: int = 1000, waiting: int = 1000, seed: int = 7) -> dict[str, float]:
    rng = random.Random(seed)
    cluster = make_cluster(agents, seed=seed)
    for agent in cluster.agents:  # a busy cluster: 1-8 GPUs in use on each agent
        for _ in range(rng.randint(1, 8)):
            agent.take(task_resources(1), agent.free_port())
    trace: Trace = generate("decisions", seed, agents * 8, 86400.0, 3.0)
    jobs = list(trace.jobs[:waiting])
    # The head first: 64 GPUs as 8-GPU tasks, which no agent can take now (every agent has a
    # GPU in use), so it waits, and drains once it has waited.
    jobs = [Job("head", 0.0, 64, 8, 3600.0), *sorted(jobs[1:], key=lambda j: j.arrival)]
    queue = {j.name: Waiting(gang_request(j), float(i), float(i)) for i, j in enumerate(jobs)}
    views, capacities, options = cluster.views(), cluster.capacities(), PlacementOptions()
    out: dict[str, float] = {"agents": agents, "waiting": len(queue)}
    gc.collect()  # the garbage of making the trace is not the decision's
    gc.freeze()  # nor are collections scanning the 1,000 agents and jobs set up here
    now = 10_000.0  # the head asked at 0
    for label, drain_after in (("draining", 60.0), ("backfill", 1e9)):
        cpu, wall = [], []
        for entry in queue.values():
            started, started_cpu = time.perf_counter(), time.thread_time()
            place_in_line(entry, queue, views, now, drain_after, options, capacities)
            cpu.append(time.thread_time() - started_cpu)
            wall.append(time.perf_counter() - started)
        for kind, times in (("", cpu), ("wall_", wall)):
            ms = np.array(times) * 1000
            out[f"{label}_{kind}p50_ms"] = round(float(np.percentile(ms, 50)), 2)
            out[f"{label}_{kind}p99_ms"] = round(float(np.percentile(ms, 99)), 2)
            out[f"{label}_{kind}max_ms"] = round(float(ms.max()), 2)
    gc.unfreeze()
    return out
