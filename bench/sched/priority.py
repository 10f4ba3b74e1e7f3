"""Two priority classes on the simulated cluster: no preemption, kill-and-restart, and ours.

A day's trace (``trace.generate``) in which a share of the jobs is of high priority (a
production or deadline run: ``spec.priority: 1``; the rest 0). Every mode places jobs with the
Mesos backend's own decision (``place_in_line`` through the ``tfdeclare`` policy, the queue in
``enqueue``'s order: higher priority first, then by first ask), and differs only in what a
high-priority job that does not fit may do:

- ``no-preemption``: it waits first in line for running jobs to end.
- ``kill-restart``: as a scheduler that knows no checkpoints does it (TFMesos, a plain
  Kubernetes/Kueue preemption of a job without resumable state): victims are killed at once and
  start again from scratch; chosen by ``core.run.preemption.choose`` with no checkpoint known
  (the least work since their start, then the newest).
- ``tfdeclare``: ours. The victims are chosen by the same function, knowing each job's last
  checkpoint (the least work since it) and, as the controller does on Mesos, where each task
  runs (``preemption.Gang``: a victim set counts only if the gang's tasks then fit on the
  agents freed, also when enough GPUs are free in all but spread), get SIGTERM and ``GRACE_S`` before the kill (their
  resources come back only then; what is on its way back counts first, so the same room is
  never preempted twice), wait in line again, and resume from their last checkpoint. Jobs
  checkpoint every ``k`` minutes from each (re)start; a victim is counted as losing everything
  since its last periodic checkpoint, plus its GPUs over the grace, as if it saved nothing on
  SIGTERM (with ``PreemptionCheckpointHandler`` it saves then, and loses about a step).
- ``tfdeclare-by-totals``: ours as it chose before, by totals only: a set that frees enough
  GPUs in all, wherever they are; nobody when enough is free in all.

Only the job first in line may preempt, and only jobs of lower priority (as the backend). Work
lost is GPU-seconds of training done again (and, for ours, the grace), over the GPU-seconds the
cluster ran tasks, from the first arrival until every job has ended. Wait: arrival to first
start. Nothing sleeps: virtual time.
"""

from __future__ import annotations

import heapq
import math
import random
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from bench.sched.cluster import Cluster
from bench.sched.policies import SimJob, Tfdeclare, gang_request
from bench.sched.sim import fluid_bound
from bench.sched.trace import Trace
from tfdeclare.backends.mesos.queueing import Waiting, shortfall
from tfdeclare.core.run.preemption import Candidate, Gang, choose
from tfdeclare.core.spec.resources import ZERO, Resources

MODES = ("no-preemption", "kill-restart", "tfdeclare", "tfdeclare-by-totals")
HIGH_SHARE = 0.2  # of the jobs
GRACE_S = 120.0  # terminationGracePeriodSeconds of every job
ARRIVE, FREE, END, WAKE = 0, 1, 2, 3


@dataclass(slots=True)
class Run:
    sim: SimJob
    priority: int
    remaining: float  # seconds of work left from where its current (or next) run starts
    run_start: float | None = None
    run_token: int = 0  # an END event of an earlier run is stale
    first_start: float | None = None
    end: float | None = None
    preemptions: int = 0
    stopping: bool = False  # preempted, its resources not back yet
    held: list[tuple[str, Resources, int]] = field(default_factory=list)

    @property
    def gpus(self) -> int:
        return self.sim.job.gpus


def with_priorities(trace: Trace, seed: int, share: float = HIGH_SHARE) -> dict[str, int]:
    rng = random.Random(seed)
    return {j.name: 1 if rng.random() < share else 0 for j in trace.jobs}


def simulate(  # noqa: C901 -- one discrete-event loop whose closures share its clock and queues; bench code, not the product
    trace: Trace, cluster: Cluster, priorities: dict[str, int], mode: str, checkpoint_s: float
) -> dict[str, float | int | None]:
    policy = Tfdeclare()
    runs: dict[str, Run] = {}
    events: list[tuple[float, int, int, str, int]] = []
    seq = 0
    for job in trace.jobs:
        request = replace(gang_request(job), priority=priorities[job.name])
        sim = SimJob(job, request, Waiting(request, job.arrival, job.arrival))
        runs[job.name] = Run(sim, priorities[job.name], job.duration)
        events.append((job.arrival, ARRIVE, seq, job.name, 0))
        seq += 1
    heapq.heapify(events)
    pending: dict[str, Run] = {}
    running: dict[str, Run] = {}  # started and not ended nor preempted
    coming = ZERO  # resources of victims still stopping
    busy_gpus = 0  # GPUs held by tasks (running or stopping)
    busy_area = window_area = lost = 0.0
    last = 0.0
    span = trace.span_s
    capacity = cluster.capacity_gpus
    wakes: set[float] = set()

    def advance(to: float) -> None:
        nonlocal busy_area, window_area, last
        busy_area += busy_gpus * (to - last)
        lo, hi = min(last, span), min(to, span)
        if hi > lo:
            window_area += busy_gpus * (hi - lo)
        last = to

    def commit(sim: SimJob, agent_id: str, resources: Resources, port: int) -> None:
        cluster.by_id[agent_id].take(resources, port)
        sim.placed.append((agent_id, resources, port))

    def release(sim: SimJob) -> None:
        for agent_id, resources, port in sim.placed:
            cluster.by_id[agent_id].give(resources, port)
        sim.placed.clear()

    def give_back(run: Run) -> None:
        nonlocal busy_gpus
        for agent_id, resources, port in run.held:
            cluster.by_id[agent_id].give(resources, port)
        busy_gpus -= run.gpus
        run.held.clear()

    def last_checkpoint(run: Run, now: float) -> float:
        assert run.run_start is not None
        return run.run_start + math.floor((now - run.run_start) / checkpoint_s) * checkpoint_s

    def preempt(now: float) -> None:
        nonlocal coming, seq, lost
        head = next(iter(sorted(pending.values(), key=order)), None)
        by_agent = mode == "tfdeclare"
        if head is None or head.priority == 0 or head.sim.placed:
            return
        if not by_agent and head.gpus <= cluster.free_gpus():
            return  # (GPUs are what is scarce here: cpus and mem come with them)
        short = shortfall(head.sim.request, [a.view() for a in cluster.agents if a.gpus > 0])
        if not by_agent and short == Resources(0.0, 0, 0):
            return  # only how the free GPUs are spread keeps it out: no one to preempt by totals
        aware = mode.startswith("tfdeclare")
        candidates = [
            Candidate(
                name,
                run.priority,
                run.sim.request.total,
                run.sim.job.tasks,
                run.run_start or 0.0,
                last_checkpoint(run, now) if aware else None,
                tuple((agent_id, resources) for agent_id, resources, _ in run.held),
            )
            for name, run in running.items()
            if not run.stopping
        ]
        gang = None
        if by_agent:  # every agent of ours with what it has free; what is on its way back, where
            rooms = tuple((a.agent_id, Resources(a.cpus, int(a.mem), a.gpus)) for a in cluster.agents)
            back = tuple((a, r) for run in runs.values() if run.stopping for a, r, _ in run.held)
            gang = Gang(tuple(slot.resources for slot in head.sim.request.slots), rooms, back)
        choice = choose(short, head.priority, candidates, now, coming, gang)
        for victim in choice.victims:
            run = runs[victim.job]
            assert run.run_start is not None
            done_now = run.sim.job.duration - run.remaining + (now - run.run_start)
            if aware and run.run_start + run.remaining <= now + GRACE_S:
                run.stopping = True  # it ends by itself within the grace: nothing is lost
                coming = coming + run.sim.request.total
                continue
            run.preemptions += 1
            run.run_token += 1  # its END is stale
            if aware:
                stop = now + GRACE_S
                saved = last_checkpoint(run, stop) - run.run_start
                lost += run.gpus * (stop - run.run_start - saved)
                run.remaining -= saved
                run.stopping = True
                coming = coming + run.sim.request.total
                heapq.heappush(events, (stop, FREE, seq, victim.job, 0))
                seq += 1
            else:
                lost += run.gpus * done_now
                run.remaining = run.sim.job.duration
                give_back(run)
            run.run_start = None
            del running[victim.job]
            run.sim.waiting = Waiting(run.sim.request, run.sim.job.arrival, now)
            pending[victim.job] = run

    def order(run: Run) -> tuple[int, float, str]:
        return (-run.priority, run.sim.waiting.first_asked, run.sim.job.name)

    now = 0.0
    while events:
        now = events[0][0]
        advance(now)
        while events and events[0][0] == now:
            _, kind, _, name, token = heapq.heappop(events)
            run = runs[name]
            if kind == ARRIVE:
                pending[name] = run
            elif kind == FREE:
                give_back(run)
                run.stopping = False
                coming = coming - run.sim.request.total
            elif kind == END and token == run.run_token:
                give_back(run)
                run.end = now
                del running[name]
                if run.stopping:  # asked to stop, it ended first
                    run.stopping = False
                    coming = coming - run.sim.request.total
            elif kind == WAKE:
                wakes.discard(now)
        for _ in range(2):  # a kill frees at once: place again after it
            line = sorted((r for r in pending.values() if not r.stopping), key=order)
            policy.schedule(now, [r.sim for r in line], cluster, commit, release)
            for run in line:
                if run.sim.complete:
                    del pending[run.sim.job.name]
                    run.held = list(run.sim.placed)
                    run.sim.placed.clear()
                    busy_gpus += run.gpus
                    run.run_start = now
                    running[run.sim.job.name] = run
                    if run.first_start is None:
                        run.first_start = now
                    heapq.heappush(events, (now + run.remaining, END, seq, run.sim.job.name, run.run_token))
                    seq += 1
            if mode == "no-preemption" or not pending:
                break
            preempt(now)
        line = sorted(pending.values(), key=order)
        wake = policy.wake_at(now, [r.sim for r in line])
        if wake is not None and wake not in wakes:
            wakes.add(wake)
            heapq.heappush(events, (wake, WAKE, seq, line[0].sim.job.name, 0))
            seq += 1
    assert not pending and all(r.end is not None for r in runs.values())
    return metrics(trace, runs, capacity, window_area, busy_area, lost)


def metrics(
    trace: Trace, runs: dict[str, Run], capacity: int, window_area: float, busy_area: float, lost: float
) -> dict[str, float | int | None]:
    def waits(priority: int) -> np.ndarray:
        return np.array(
            [r.first_start - r.sim.job.arrival for r in runs.values() if r.priority == priority],  # type: ignore[operator]
            dtype=float,
        )

    def jcts(priority: int | None) -> np.ndarray:
        return np.array(
            [r.end - r.sim.job.arrival for r in runs.values() if priority is None or r.priority == priority],  # type: ignore[operator]
            dtype=float,
        )

    high, low = waits(1), waits(0)
    every = jcts(None)
    return {
        # The keys every trace of sched.json has (partial gangs and deadlocks: none by design).
        "gpu_allocation": round(window_area / (capacity * trace.span_s), 4),
        "mean_jct_s": round(float(every.mean()), 1),
        "p95_jct_s": round(float(np.percentile(every, 95)), 1),
        "partial_gangs": 0,
        "deadlocked": 0,
        "upper_bound_allocation": round(fluid_bound(trace, capacity), 4),
        # What this comparison is about.
        "high_jobs": len(high),
        "low_jobs": len(low),
        "high_mean_wait_s": round(float(high.mean()), 1),
        "high_p95_wait_s": round(float(np.percentile(high, 95)), 1),
        "low_mean_wait_s": round(float(low.mean()), 1),
        "high_mean_jct_s": round(float(jcts(1).mean()), 1),
        "low_mean_jct_s": round(float(jcts(0).mean()), 1),
        "preemptions": sum(r.preemptions for r in runs.values()),
        "jobs_preempted": sum(1 for r in runs.values() if r.preemptions),
        "lost_gpu_hours": round(lost / 3600, 1),
        "gpu_hours_run": round(busy_area / 3600, 1),
        "lost_share": round(lost / busy_area, 5) if busy_area else 0.0,
    }


# The checkpoint interval of the comparison's headline (minutes), and the others reported.
HEADLINE_K_MIN = 10
OTHER_K_MIN = (30,)
TRACE = "priorities"


def run_all(
    trace: Trace, cluster_of: Callable[[], Cluster], seed: int
) -> dict[str, dict[str, float | int | None]]:
    """Every mode on ``trace``: ``tfdeclare`` with checkpoints every ``HEADLINE_K_MIN``
    minutes, ``tfdeclare-ckpt-<k>m`` for the other intervals (the baselines know none)."""
    priorities = with_priorities(trace, seed)
    results: dict[str, dict[str, float | int | None]] = {}
    for mode in MODES:
        results[mode] = simulate(trace, cluster_of(), priorities, mode, HEADLINE_K_MIN * 60)
        results[mode]["checkpoint_every_s"] = HEADLINE_K_MIN * 60 if mode.startswith("tfdeclare") else None
    for k in OTHER_K_MIN:
        results[f"tfdeclare-ckpt-{k}m"] = simulate(trace, cluster_of(), priorities, "tfdeclare", k * 60)
        results[f"tfdeclare-ckpt-{k}m"]["checkpoint_every_s"] = k * 60
    return results


def targets(results: Mapping[str, Mapping[str, Any]]) -> list[str]:
    """Issue 34's targets, each with its verdict."""
    ours, none, kill = results["tfdeclare"], results["no-preemption"], results["kill-restart"]
    cut = 1 - ours["high_mean_wait_s"] / none["high_mean_wait_s"] if none["high_mean_wait_s"] else 0.0
    lost = ours["lost_share"]
    return [
        f"high-priority mean wait vs no preemption: {-cut:+.0%} ({none['high_mean_wait_s']:,.0f} s -> "
        f"{ours['high_mean_wait_s']:,.0f} s; kill-and-restart {kill['high_mean_wait_s']:,.0f} s) "
        f"(target <= -50 %): {'met' if cut >= 0.5 else 'MISSED'}",
        f"work lost to preemption: {lost:.2%} of the GPU-hours run ({ours['lost_gpu_hours']:,.0f} GPU-h; "
        f"kill-and-restart {kill['lost_share']:.2%}, {kill['lost_gpu_hours']:,.0f} GPU-h) "
        f"(target <= 1 %): {'met' if lost <= 0.01 else 'MISSED'}",
    ]


COLUMNS = (
    ("checkpoint_every_s", "checkpoints every", "{:.0f} s"),
    ("high_mean_wait_s", "high: mean wait", "{:,.0f} s"),
    ("high_p95_wait_s", "high: p95 wait", "{:,.0f} s"),
    ("low_mean_wait_s", "low: mean wait", "{:,.0f} s"),
    ("high_mean_jct_s", "high: mean JCT", "{:,.0f} s"),
    ("low_mean_jct_s", "low: mean JCT", "{:,.0f} s"),
    ("preemptions", "preemptions (jobs)", "{}"),
    ("lost_gpu_hours", "work lost", "{:,.1f} GPU-h"),
    ("lost_share", "lost / GPU-h run", "{:.2%}"),
    ("gpu_allocation", "allocation", "{:.3f}"),
)


def table(results: Mapping[str, Mapping[str, Any]], about: str, verdicts: list[str]) -> str:
    lines = [
        f"Two priority classes ({about}):",
        "",
        "| mode | " + " | ".join(title for _, title, _ in COLUMNS) + " |",
        "|---|" + "---|" * len(COLUMNS),
    ]
    for mode, m in results.items():
        cells = []
        for key, _, fmt in COLUMNS:
            value = m.get(key)
            cell = "-" if value is None else fmt.format(value)
            if key == "preemptions" and value is not None:
                cell += f" ({m['jobs_preempted']})"
            cells.append(cell)
        lines.append(f"| {mode} | " + " | ".join(cells) + " |")
    lines += ["", "Targets (two priority classes):", ""] + [f"- {v}" for v in verdicts]
    return "\n".join(lines) + "\n"
