"""The discrete-event simulation in virtual time, and its metrics.

Events: a job arrives (it asks to be placed, as the controller does when its spec appears), a
job ends (its tasks' resources are offered again), a policy's timer (``wake_at``: the head of
line starts draining). After the events of one instant, the policy decides; a job starts when
every task of its gang is placed and runs for its duration. Nothing sleeps: a day of cluster
time takes seconds.

Metrics over the measurement window [0, span) of the trace (T): ``gpu_allocation`` is the
time-averaged share of the GPUs we may use that run tasks of complete gangs (useful
allocation); ``gpu_held`` also counts the GPUs partial gangs hold while they wait.
``upper_bound_allocation`` is a clairvoyant fluid bound on the same window, ignoring packing:
for every s in [0, T], the work done by T is at most what the jobs that arrived could have
done by s had each started on arrival, plus C x (T - s); the bound is the least of these over
s (exact at the breakpoints), divided by C x T. Job completion times (JCT) run from arrival to
end; a job that never ends (a deadlock) is counted as ending at a horizon that any schedule
without deadlocks would be expected to beat: the later of the window's end and the last
arrival plus duration, plus the trace's GPU-time over the capacity (all the work back to back).
So greedy's JCT is a lower bound when it deadlocks.
"""

from __future__ import annotations

import heapq
import math
from dataclasses import dataclass, field

import numpy as np

from bench.sched.cluster import Cluster
from bench.sched.policies import Policy, SimJob, gang_request
from bench.sched.trace import Trace
from tfdeclare.backends.mesos.queueing import Waiting
from tfdeclare.core.spec.resources import Resources

ARRIVE, END, WAKE = 0, 1, 2
BUCKET_S = 3600.0


@dataclass(slots=True)
class Outcome:
    metrics: dict[str, float | int | None]
    allocation_series: list[float] = field(default_factory=list)  # per BUCKET_S of the window
    jcts: list[float] = field(default_factory=list)


def fluid_bound(trace: Trace, capacity: int) -> float:
    """The upper bound on ``gpu_allocation`` described in the module docstring."""
    if not trace.jobs:
        return 0.0
    span = trace.span_s
    a = np.array([j.arrival for j in trace.jobs])
    d = np.array([j.duration for j in trace.jobs])
    g = np.array([j.gpus for j in trace.jobs], dtype=float)
    points = np.unique(np.clip(np.concatenate([[0.0, span], a, a + d]), 0.0, span))
    best = capacity * span
    for chunk in np.array_split(points, max(1, len(points) // 256)):
        done = (g[None, :] * np.clip(chunk[:, None] - a[None, :], 0.0, d[None, :])).sum(axis=1)
        best = min(best, float(np.min(done + capacity * (span - chunk))))
    return best / (capacity * span)


def simulate(trace: Trace, cluster: Cluster, policy: Policy) -> Outcome:
    span = trace.span_s
    capacity = cluster.capacity_gpus
    events: list[tuple[float, int, int, SimJob | None]] = []
    seq = 0
    for job in trace.jobs:
        sim = SimJob(job, gang_request(job), Waiting(gang_request(job), job.arrival, job.arrival))
        events.append((job.arrival, ARRIVE, seq, sim))
        seq += 1
    heapq.heapify(events)
    pending: dict[str, SimJob] = {}
    done: list[SimJob] = []
    running_gpus = held_gpus = 0
    area_run = area_held = 0.0
    buckets = [0.0] * math.ceil(span / BUCKET_S)
    last = 0.0
    wake_pending: set[float] = set()

    def advance(to: float) -> None:
        nonlocal area_run, area_held, last
        lo, hi = min(last, span), min(to, span)
        if hi > lo:
            area_run += running_gpus * (hi - lo)
            area_held += held_gpus * (hi - lo)
            t = lo
            while t < hi:
                b = int(t // BUCKET_S)
                edge = min(hi, (b + 1) * BUCKET_S)
                buckets[b] += running_gpus * (edge - t)
                t = edge
        last = to

    def commit(sim: SimJob, agent_id: str, resources: Resources, port: int) -> None:
        nonlocal held_gpus
        cluster.by_id[agent_id].take(resources, port)
        sim.placed.append((agent_id, resources, port))
        held_gpus += resources.gpus

    def release(sim: SimJob) -> None:
        nonlocal held_gpus
        for agent_id, resources, port in sim.placed:
            cluster.by_id[agent_id].give(resources, port)
            held_gpus -= resources.gpus
        sim.placed.clear()

    # A guard far beyond any schedule that ends (greedy-timeout's gangs can take turns holding
    # parts of the cluster for ever, a livelock): jobs not ended by then never end.
    work = sum(j.gpus * j.duration for j in trace.jobs) / capacity
    guard = 10 * (max(max((j.arrival + j.duration for j in trace.jobs), default=span), span) + work)
    now = 0.0
    while events and events[0][0] <= guard:
        now = events[0][0]
        advance(now)
        while events and events[0][0] == now:
            _, kind, _, sim = heapq.heappop(events)
            if kind == ARRIVE and sim is not None:
                pending[sim.job.name] = sim
            elif kind == END and sim is not None:
                for agent_id, resources, port in sim.placed:
                    cluster.by_id[agent_id].give(resources, port)
                running_gpus -= sim.job.gpus
                held_gpus -= sim.job.gpus
                done.append(sim)
            else:
                wake_pending.discard(now)
        policy.schedule(now, list(pending.values()), cluster, commit, release)
        for name, sim in list(pending.items()):
            if sim.complete:
                del pending[name]
                sim.start, sim.end = now, now + sim.job.duration
                running_gpus += sim.job.gpus
                heapq.heappush(events, (sim.end, END, seq, sim))
                seq += 1
            elif sim.placed:
                sim.ever_partial = True
        wake = policy.wake_at(now, list(pending.values()))
        if wake is not None and wake not in wake_pending:
            wake_pending.add(wake)
            heapq.heappush(events, (wake, WAKE, seq, None))
            seq += 1
    advance(max(now, span))
    never = list(pending.values()) + [s for _, kind, _, s in events if kind == ARRIVE and s is not None]
    done += [s for _, kind, _, s in events if kind == END and s is not None]  # past the guard
    stop = max(now, max((j.arrival + j.duration for j in trace.jobs), default=span), span) + work
    jobs = done + never
    jct = np.array([(s.end if s.end is not None else stop) - s.job.arrival for s in jobs])
    queued = np.array([(s.start if s.start is not None else stop) - s.job.arrival for s in jobs])
    big = [q for s, q in zip(jobs, queued, strict=True) if s.job.gpus >= 32]
    multi = [s for s in done if s.job.gpus > 1]
    spanned = [len({agent for agent, _, _ in s.placed}) for s in multi]
    least = [math.ceil(s.job.gpus / 8) for s in multi]
    decisions = np.array(policy.decision_s) * 1000 if policy.decision_s else np.zeros(1)
    metrics: dict[str, float | int | None] = {
        "gpu_allocation": round(area_run / (capacity * span), 4),
        "gpu_held": round(area_held / (capacity * span), 4),
        "upper_bound_allocation": round(fluid_bound(trace, capacity), 4),
        "mean_jct_s": round(float(jct.mean()), 1),
        "p95_jct_s": round(float(np.percentile(jct, 95)), 1),
        "mean_queue_s": round(float(queued.mean()), 1),
        "p95_queue_s": round(float(np.percentile(queued, 95)), 1),
        "max_queue_s": round(float(queued.max()), 1),
        "big_gang_mean_queue_s": round(float(np.mean(big)), 1) if big else 0.0,  # 32+ GPUs
        "big_gang_max_queue_s": round(float(np.max(big)), 1) if big else 0.0,
        "makespan_s": None if never else round(max(s.end or 0.0 for s in done), 1),
        "partial_gangs": sum(1 for s in jobs if s.ever_partial),
        "deadlocked": sum(1 for s in never if s.placed),
        "unfinished": len(never),
        "jobs": len(jobs),
        "agents_spanned_mean": round(float(np.mean(spanned)), 3) if spanned else 0.0,
        "agents_spanned_least_mean": round(float(np.mean(least)), 3) if least else 0.0,
        "decisions": len(policy.decision_s),
        "decision_ms_mean": round(float(decisions.mean()), 3),
        "decision_ms_p99": round(float(np.percentile(decisions, 99)), 3),
        "capacity_gpus": capacity,
    }
    series = [b / (capacity * BUCKET_S) for b in buckets]
    return Outcome(metrics, series, sorted(float(x) for x in jct))
