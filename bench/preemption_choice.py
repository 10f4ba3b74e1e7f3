"""What one choice of victims by agent costs (``core.run.preemption.choose`` with a ``Gang``,
issue 34): a waiting gang of one-GPU tasks, clusters of 64 to 10,000 agents mostly full, and
running jobs of lower priority spread over them (1-4 tasks each). No target: the controller
makes one such choice per pass while a job of higher priority waits for room.

    python -m bench.preemption_choice [--runs 5]
"""

from __future__ import annotations

import argparse
import random
import statistics
import time

from bench.common import machine
from tfdeclare.core.run.preemption import Candidate, Gang, choose
from tfdeclare.core.spec.resources import Resources

TASK = Resources(4.0, 16384, 1)
SIZES = ((64, 8, 40), (1000, 100, 200), (10000, 1000, 1000))  # agents, gang tasks, candidates


def case(agents: int, slots: int, candidates: int, seed: int) -> tuple[Resources, list[Candidate], Gang]:
    rng = random.Random(seed)
    rooms = tuple(
        (f"a{i}", Resources(rng.choice([0, 0, 0, 4.0]), rng.choice([0, 16384]), rng.choice([0, 0, 1])))
        for i in range(agents)
    )
    pool = []
    for j in range(candidates):
        held = tuple((f"a{rng.randrange(agents)}", TASK) for _ in range(rng.randint(1, 4)))
        pool.append(
            Candidate(f"j{j}", 0, TASK.scaled(len(held)), len(held), rng.uniform(0, 1000), None, held)
        )
    short = Resources(0, 0, max(0, slots - sum(r.gpus for _, r in rooms)))
    return short, pool, Gang((TASK,) * slots, rooms)


def main() -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.preemption_choice")
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()
    print(f"{machine()}; {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}")
    for agents, slots, candidates in SIZES:
        samples, victims = [], 0
        for seed in range(args.runs):
            short, pool, gang = case(agents, slots, candidates, seed)
            started = time.perf_counter()
            victims = len(choose(short, 5, pool, 2000.0, gang=gang).victims)
            samples.append(time.perf_counter() - started)
        print(
            f"{agents:>6} agents, a gang of {slots:>5} tasks, {candidates:>5} candidates: "
            f"median {statistics.median(samples) * 1000:.1f} ms "
            f"({min(samples) * 1000:.1f}-{max(samples) * 1000:.1f}), {victims} victims (last run)",
            flush=True,
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
