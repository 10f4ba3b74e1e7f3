"""Mesos placement at scale (issue 23): one ``place_gang`` decision over the offers of 1,000 to
10,000 agents, with the garbage collector on and a long-lived heap beside it, as in the backend
(its task table, journal and queue: here 200 objects per agent). Per decision: wall time and
its cost per agent; the target is p99 ≤ 50 ms at 10,000 agents, the per-agent cost flat.

`python -m bench.placement_bench [--agents 1000,3000,10000] [--decisions 300] [--against DIR]`:
with `--against`, the same decisions are timed for the code in DIR (another checkout, run in a
child process with DIR first on `PYTHONPATH`) alongside, size by size, and reported as ratios
(``make bench-placement AGAINST=DIR``).
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import random
import statistics
import subprocess
import sys
import time
from datetime import UTC, datetime
from pathlib import Path

from bench.common import REPO, machine


def _child(agents: int, decisions: int, seed: int) -> dict[str, float]:
    """Run in a child process: the module under test is whichever ``tfdeclare`` it imports."""
    from tfdeclare.backends.mesos.placement import AgentOffer, PlacementOptions, place_gang
    from tfdeclare.core.enums import PlacementStrategy, Role
    from tfdeclare.core.run.tasks import GangRequest, SlotRequest
    from tfdeclare.core.spec.keys import TaskKey
    from tfdeclare.core.spec.resources import Resources

    rng = random.Random(seed)
    views = []
    for i in range(agents):
        used = rng.randint(1, 8)  # a busy cluster: 1-8 of 8 GPUs in use
        views.append(
            AgentOffer(
                f"agent-{i:05d}",
                f"host-{i:05d}",
                float(64 - 8 * used),
                float(512 * 1024 - 64 * 1024 * used),
                8 - used,
                ((31000, 31999),),
                {"rack": f"r{i % 40}"},
                gpu_agent=True,
            )
        )
    heap = [{"id": n, "state": "running", "ports": [n]} for n in range(200 * agents)]  # long-lived
    gc.collect()  # the heap is old now, as in a backend that has run a while; the GC stays on
    gangs = []
    for n in range(decisions):
        tasks = rng.choice((1, 1, 1, 2, 4, 8))
        gpus = rng.choice((1, 1, 2, 4, 8)) if tasks > 1 else rng.choice((1, 2, 4))
        strategy = PlacementStrategy.SPREAD if n % 4 == 0 else PlacementStrategy.PACK
        slots = tuple(SlotRequest(TaskKey(Role.WORKER, k), Resources(4.0, 8192, gpus)) for k in range(tasks))
        gangs.append(GangRequest(f"job-{n}", 0, slots, strategy))
    options = PlacementOptions()
    times = []
    before = [g["collections"] for g in gc.get_stats()]
    for gang in gangs:
        started = time.perf_counter()
        place_gang(gang, views, options)
        times.append(time.perf_counter() - started)
    full = gc.get_stats()[2]["collections"] - before[2]  # collections that scanned the whole heap
    young = gc.get_stats()[0]["collections"] - before[0]
    del heap
    ms = sorted(t * 1000 for t in times)
    p99 = ms[min(len(ms) - 1, int(0.99 * len(ms)))]
    median = statistics.median(ms)
    return {
        "p50_ms": median,
        "p99_ms": p99,
        "max_ms": ms[-1],
        "per_agent_us": median * 1000 / agents,
        "full_collections": full,
        "young_collections": young,
    }


def measure(code: Path, agents: int, decisions: int, seed: int = 7) -> dict[str, float]:
    script = f"import json, sys; from bench.placement_bench import _child; print(json.dumps(_child({agents}, {decisions}, {seed})))"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(code), str(REPO)])}
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True, env=env)
    return dict(json.loads(out.stdout))


def main() -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.placement_bench")
    parser.add_argument("--agents", default="1000,3000,10000")
    parser.add_argument("--decisions", type=int, default=300)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--against", type=Path, help="another checkout, measured alongside")
    parser.add_argument("--out", type=Path, default=REPO / "bench" / "out" / "placement.json")
    args = parser.parse_args()
    codes = {"this": REPO}
    if args.against is not None:
        codes["against"] = args.against.resolve()
    sizes = [int(a) for a in args.agents.split(",")]
    samples: dict[str, dict[int, list[dict[str, float]]]] = {c: {n: [] for n in sizes} for c in codes}
    for run in range(args.runs):  # interleaved, so both see the same load
        for n in sizes:
            for name, code in codes.items():
                samples[name][n].append(measure(code, n, args.decisions, seed=7 + run))
                print(f"run {run + 1} {name} {n}: {samples[name][n][-1]}", file=sys.stderr, flush=True)
    report: dict[str, object] = {
        "machine": machine(),
        "date": datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "load_average": os.getloadavg(),
        "runs": args.runs,
        "decisions": args.decisions,
    }
    lines = []
    for name in codes:
        for n in sizes:
            row = {k: statistics.median(s[k] for s in samples[name][n]) for k in samples[name][n][0]}
            report[f"{name}/{n}"] = row
            lines.append(f"{name} {n:>6} agents: " + ", ".join(f"{k} {v:.3g}" for k, v in row.items()))
    if "against" in codes:
        for n in sizes:
            for key in ("p50_ms", "p99_ms"):
                ratio = statistics.median(
                    a[key] / b[key] for a, b in zip(samples["this"][n], samples["against"][n], strict=True)
                )
                report[f"ratio/{n}/{key}"] = ratio
                lines.append(f"this / against, {n} agents, {key}: {ratio:.3f}")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=2) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
