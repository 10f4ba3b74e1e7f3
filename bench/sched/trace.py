"""Synthetic traces shaped like published GPU-cluster traces, generated from a seed.

Microsoft Philly (Jeon et al., ATC'19), SenseTime Helios (Hu et al., SC'21) and Alibaba PAI
(Weng et al., NSDI'22) agree on the shape reproduced here: most jobs ask for one GPU, a tail
asks for 2-64 GPUs as a gang; durations are heavy-tailed (median minutes, mean near an hour,
a tail of days); arrivals follow the working day and come in bursts (hyper-parameter sweeps
submitted at once, same size and similar length). The load is set by scaling the arrival rate
so that the offered GPU-time over the trace is about ``load`` times the capacity, and the
durations scaled to make it exact.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass

# GPUs per job and their share of jobs (Philly/Helios: about 70 % single-GPU jobs).
GPU_SIZES = (1, 2, 4, 8, 16, 32, 64)
GPU_WEIGHTS = (0.70, 0.08, 0.08, 0.07, 0.035, 0.02, 0.015)
MEDIAN_DURATION_S = 600.0
DURATION_SIGMA = 1.7  # lognormal: mean about 4x the median, p99 about 50x
MAX_DURATION_S = 3 * 86400.0
BURST_SHARE = 0.3  # of submissions that are a burst (a sweep) rather than one job


@dataclass(frozen=True, slots=True)
class Job:
    name: str
    arrival: float
    gpus: int
    task_gpus: int  # GPUs of each of its tasks (a gang of gpus // task_gpus tasks)
    duration: float

    @property
    def tasks(self) -> int:
        return self.gpus // self.task_gpus


@dataclass(frozen=True, slots=True)
class Trace:
    name: str
    jobs: tuple[Job, ...]
    span_s: float  # arrivals fall in [0, span_s): the measurement window


def _task_gpus(rng: random.Random, gpus: int) -> int:
    """How a job of ``gpus`` GPUs is split into tasks: one task per GPU, or per 4 or 8 GPUs
    (multi-GPU workers with MirroredStrategy), as TF users do."""
    choices = [k for k in (1, 2, 4, 8) if k <= gpus and gpus % k == 0]
    if gpus > 8:
        choices = [k for k in choices if gpus // k <= 16]  # at most 16 tasks per gang
    return rng.choice(choices)


def _duration(rng: random.Random, gpus: int) -> float:
    scale = 1.0 + math.log2(gpus) / 4  # bigger jobs run somewhat longer (Helios)
    return min(
        MAX_DURATION_S, max(30.0, rng.lognormvariate(math.log(MEDIAN_DURATION_S), DURATION_SIGMA) * scale)
    )


def _diurnal(t: float) -> float:
    """Relative submission rate at time t (peak mid-day, low at night), mean 1."""
    return 1.0 + 0.5 * math.sin(2 * math.pi * (t / 86400.0 - 0.25))


def generate(name: str, seed: int, capacity_gpus: int, span_s: float, load: float) -> Trace:
    """A trace whose offered GPU-time is about ``load`` x ``capacity_gpus`` x ``span_s``."""
    rng = random.Random(seed)
    # Expected GPU-seconds per submission, estimated from the same distributions.
    probe = random.Random(seed + 1)
    sizes = probe.choices(GPU_SIZES, GPU_WEIGHTS, k=20000)
    per_job = sum(g * _duration(probe, g) for g in sizes) / len(sizes)
    mean_burst = 1 + BURST_SHARE * 9.5  # bursts of 2-20 jobs
    rate = load * capacity_gpus / per_job / mean_burst  # submissions per second
    jobs: list[Job] = []
    t = 0.0
    while True:
        # Thinning for the diurnal rate (max 1.5).
        t += rng.expovariate(rate * 1.5)
        if t >= span_s:
            break
        if rng.random() > _diurnal(t) / 1.5:
            continue
        gpus = rng.choices(GPU_SIZES, GPU_WEIGHTS)[0]
        task_gpus = _task_gpus(rng, gpus)
        count = rng.randint(2, 20) if rng.random() < BURST_SHARE else 1
        base = _duration(rng, gpus)
        for i in range(count):
            arrival = min(span_s - 1e-3, t + i * rng.uniform(0.0, 2.0))
            duration = max(30.0, base * rng.uniform(0.7, 1.3))
            jobs.append(Job(f"j{len(jobs):05d}", arrival, gpus, task_gpus, duration))
    jobs.sort(key=lambda j: (j.arrival, j.name))
    # Heavy tails make the offered load of one sample far from its expectation: scale the
    # durations so that it is ``load`` exactly (the shape is kept).
    offered = sum(j.gpus * j.duration for j in jobs) / (capacity_gpus * span_s)
    factor = load / offered if offered else 1.0
    jobs = [Job(j.name, j.arrival, j.gpus, j.task_gpus, j.duration * factor) for j in jobs]
    return Trace(name, tuple(jobs), span_s)


def offered_load(trace: Trace, capacity_gpus: int) -> float:
    return sum(j.gpus * j.duration for j in trace.jobs) / (capacity_gpus * trace.span_s)
