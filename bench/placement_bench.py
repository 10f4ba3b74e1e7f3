"""Mesos placement at scale (issue 23): one ``place_gang`` decision over the offers of 1,000 to
10,000 agents, with the garbage collector on and a long-lived heap beside it, as in the backend
(its task table, journal and queue: here 200 objects per agent). Per decision: wall time and
its cost per agent; the target is p99 ≤ 50 ms at 10,000 agents, the per-agent cost flat.

Placement is handed what the backend's offer pool hands it: an ``AgentIndex`` kept current
between decisions where the code has one (issue 23), else a list of the views. Between
decisions the offers change as in the backend: a placed gang's agents offer less until the gang
ends 20 decisions later (the pool's update is timed apart, ``pool_update_p50_us``).

`python -m bench.placement_bench [--agents 1000,3000,10000] [--decisions 300] [--against DIR]`:
each size is measured in a child process whose ``tfdeclare`` is this checkout's, and with
`--against` the same decisions are timed for the code in DIR (another checkout) alongside,
size by size, and reported as ratios (``make bench-placement AGAINST=DIR``). The child runs
this file with ``python -P`` and the measured tree alone on ``PYTHONPATH`` (before issue 23's
fix the working folder came first, so both sides measured this checkout).
"""

from __future__ import annotations

import argparse
import gc
import hashlib
import json
import os
import random
import statistics
import subprocess
import sys
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any


def _child(agents: int, decisions: int, seed: int) -> dict[str, Any]:
    """Run in a child process: the module under test is whichever ``tfdeclare`` it imports."""
    from dataclasses import replace

    from tfdeclare.backends.mesos import placement
    from tfdeclare.backends.mesos.placement import place_gang

    try:  # issue 30 split placement.py into modules; a tree from before has these names there
        from tfdeclare.backends.mesos import placement_index as index_home
        from tfdeclare.backends.mesos import placement_values as values
    except ImportError:
        index_home = values = placement
    AgentOffer, GangFit, PlacementOptions = values.AgentOffer, values.GangFit, values.PlacementOptions
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
    # What the backend's offer pool hands placement: since issue 23 an index it keeps current
    # (``put`` as an agent's offers change), before that a list of its views.
    index_type = getattr(index_home, "AgentIndex", None)
    index = index_type(views) if index_type is not None else None
    position = {v.agent_id: i for i, v in enumerate(views)}

    def offer(view: Any) -> None:  # an agent's offers changed
        views[position[view.agent_id]] = view
        if index is not None:
            index.put(view)

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
    times, updates, refusals = [], [], []
    answers = hashlib.sha256()  # every answer, to check both trees decided the same
    ends: dict[int, list[tuple[str, Resources]]] = {}  # decision number -> what a gang gives back then
    before = [g["collections"] for g in gc.get_stats()]
    for n, gang in enumerate(gangs):
        offers = index if index is not None else views
        started = time.perf_counter()
        fit = place_gang(gang, offers, options)
        times.append(time.perf_counter() - started)
        answers.update(repr(fit).encode())
        if not isinstance(fit, GangFit):
            refusals.append(times[-1])
        # The pool changes between decisions: a placed gang's agents offer less until it ends
        # 20 decisions later (the same changes for both trees: their placements are the same).
        started = time.perf_counter()
        if isinstance(fit, GangFit):
            for a in fit.assignments:
                offer(_less(views[position[a.agent_id]], a.resources, 1, replace))
            ends.setdefault(n + 20, []).extend((a.agent_id, a.resources) for a in fit.assignments)
        for agent_id, resources in ends.pop(n, ()):
            offer(_less(views[position[agent_id]], resources, -1, replace))
        updates.append(time.perf_counter() - started)
    full = gc.get_stats()[2]["collections"] - before[2]  # collections that scanned the whole heap
    young = gc.get_stats()[0]["collections"] - before[0]
    # What one full collection over this heap costs, and with the heap frozen out of the
    # collector (``gc.freeze``): the pause a decision would take if one landed in it.
    started = time.perf_counter()
    gc.collect()
    collect_ms = (time.perf_counter() - started) * 1000
    gc.freeze()
    started = time.perf_counter()
    gc.collect()
    frozen_collect_ms = (time.perf_counter() - started) * 1000
    gc.unfreeze()
    del heap
    ms = sorted(t * 1000 for t in times)
    p99 = ms[min(len(ms) - 1, int(0.99 * len(ms)))]
    median = statistics.median(ms)
    return {
        "tfdeclare": str(Path(placement.__file__).parent),  # which code was measured
        "answers": answers.hexdigest()[:16],
        "p50_ms": median,
        "p99_ms": p99,
        "max_ms": ms[-1],
        "per_agent_us": median * 1000 / agents,
        "refusal_p50_ms": statistics.median(refusals) * 1000 if refusals else 0.0,  # reads every agent
        "pool_update_p50_us": statistics.median(updates) * 1e6,
        "full_collections": full,
        "young_collections": young,
        "full_collection_ms": collect_ms,
        "full_collection_frozen_ms": frozen_collect_ms,
    }


def _less(view: Any, resources: Any, sign: int, replace: Any) -> Any:
    """``view`` with ``resources`` taken (``sign`` 1) or given back (-1)."""
    return replace(
        view,
        cpus=view.cpus - sign * resources.cpus,
        mem_mib=view.mem_mib - sign * resources.mem_mib,
        gpus=view.gpus - sign * resources.gpus,
    )


def measure(code: Path, agents: int, decisions: int, seed: int = 7) -> dict[str, Any]:
    """This file's ``_child`` in a child process whose ``tfdeclare`` is the one in ``code``
    (``-P``: neither the working folder nor this script's folder comes first on the path)."""
    command = [sys.executable, "-P", __file__, "--child", str(agents), str(decisions), str(seed)]
    env = {**os.environ, "PYTHONPATH": str(code)}
    out = subprocess.run(command, capture_output=True, text=True, check=True, env=env, cwd=code)
    result = json.loads(out.stdout)
    assert Path(result.pop("tfdeclare")).resolve().is_relative_to(code.resolve()), result
    return dict(result)


def main() -> int:
    if len(sys.argv) == 5 and sys.argv[1] == "--child":
        print(json.dumps(_child(*(int(a) for a in sys.argv[2:]))))
        return 0
    from bench.common import REPO, machine  # not in the child: its bench/ may be another tree's

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
            answers = set()
            for name, code in codes.items():
                result = measure(code, n, args.decisions, seed=7 + run)
                answers.add(result.pop("answers"))
                samples[name][n].append(result)
                print(f"run {run + 1} {name} {n}: {result}", file=sys.stderr, flush=True)
            assert len(answers) == 1, "the two trees placed differently: their times are not comparable"
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
    for name in codes:
        first = report[f"{name}/{sizes[0]}"]
        for n in sizes[1:]:
            growth = report[f"{name}/{n}"]["per_agent_us"] / first["per_agent_us"]  # type: ignore[index]
            report[f"growth/{name}/{n}"] = growth
            lines.append(f"{name}: per-agent p50 at {n} agents / at {sizes[0]}: {growth:.2f}")
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
