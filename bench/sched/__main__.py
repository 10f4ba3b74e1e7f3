"""``make bench-sched``: every trace under every policy, then the decision-time check.

    python -m bench.sched [--agents 64] [--quick] [--policies tfdeclare,greedy,fifo,...]

Writes ``bench/out/sched.json`` (``{trace: {policy: metrics}}``), ``bench/out/sched-meta.json``
(machine, date, set-up, the decision-time check), ``bench/out/sched.md`` (the table for docs/benchmarks.md) and the plots
``bench/out/sched-*.png``; prints the targets and whether they are met.
"""

from __future__ import annotations

import argparse
import json
import time
from dataclasses import dataclass

from bench.common import REPO, machine
from bench.sched import decision, priority, report
from bench.sched.cluster import Cluster, make_cluster
from bench.sched.policies import DEFAULT_POLICIES, POLICIES
from bench.sched.sim import Outcome, simulate
from bench.sched.trace import generate


@dataclass(frozen=True)
class Scenario:
    name: str
    load: float  # offered GPU-time / (GPUs we may use x window)
    seed: int
    foreign_share: float = 0.0  # of all GPUs, held by other frameworks
    reserved_share: float = 0.0  # of the agents, reserved to role "ml" (ours too)
    about: str = ""

    def cluster(self, agents: int) -> Cluster:
        """A fresh cluster of this scenario (the same for every policy)."""
        return make_cluster(
            agents, seed=self.seed, foreign_share=self.foreign_share, reserved_share=self.reserved_share
        )


SCENARIOS = (
    Scenario("medium", 0.7, 1, about="offered load 0.7"),
    Scenario("high", 1.2, 2, about="offered load 1.2: the queue grows through the day"),
    Scenario("shared", 1.2, 3, foreign_share=0.25, about="as high; other frameworks hold 25 % of the GPUs"),
    Scenario(
        "reserved", 1.2, 4, reserved_share=0.25, about="as high; a quarter of the agents reserved to role ml"
    ),
)
SPAN_S = 86400.0
# Issue 34: two priority classes (bench/sched/priority.py), a busy day on the same cluster.
PRIORITIES = Scenario(
    priority.TRACE, 0.9, 5, about=f"offered load 0.9, {priority.HIGH_SHARE:.0%} of the jobs of high priority"
)


def main() -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.sched")
    parser.add_argument("--agents", type=int, default=64, help="agents of 8 GPUs each")
    parser.add_argument("--quick", action="store_true", help="a quarter of the day, fewer agents")
    parser.add_argument(
        "--policies", default=",".join(DEFAULT_POLICIES), help="comma-separated: " + ", ".join(POLICIES)
    )
    args = parser.parse_args()
    agents = 16 if args.quick else args.agents
    span = SPAN_S / 4 if args.quick else SPAN_S
    results: dict[str, dict[str, dict[str, object]]] = {}
    outcomes: dict[str, dict[str, Outcome]] = {}
    for scenario in SCENARIOS:
        capacity = scenario.cluster(agents).capacity_gpus
        trace = generate(scenario.name, scenario.seed, capacity, span, scenario.load)
        for name in args.policies.split(","):
            started = time.monotonic()
            outcome = simulate(trace, scenario.cluster(agents), POLICIES[name]())
            outcomes.setdefault(scenario.name, {})[name] = outcome
            results.setdefault(scenario.name, {})[name] = dict(outcome.metrics)
            m = outcome.metrics
            print(
                f"{scenario.name:9} {name:10} allocation {m['gpu_allocation']:.3f} (bound "
                f"{m['upper_bound_allocation']:.3f}) mean JCT {m['mean_jct_s']:.0f} s, deadlocked "
                f"{m['deadlocked']}, {len(trace.jobs)} jobs, {time.monotonic() - started:.1f} s",
                flush=True,
            )
    started = time.monotonic()
    capacity = PRIORITIES.cluster(agents).capacity_gpus
    trace = generate(PRIORITIES.name, PRIORITIES.seed, capacity, span, PRIORITIES.load)
    ranked = priority.run_all(trace, lambda: PRIORITIES.cluster(agents), PRIORITIES.seed)
    for name in ("greedy", "fifo"):  # every trace has the three policies (they ignore priorities)
        if name in args.policies.split(","):
            ranked[name] = dict(simulate(trace, PRIORITIES.cluster(agents), POLICIES[name]()).metrics)
    print(f"{PRIORITIES.name}: {len(trace.jobs)} jobs, {time.monotonic() - started:.1f} s", flush=True)
    ranked_verdicts = priority.targets(ranked)
    decisions = decision.measure()
    print(
        f"decision time at {decisions['agents']:.0f} agents, {decisions['waiting']:.0f} waiting jobs: "
        f"p99 {decisions['draining_p99_ms']} ms (head draining), {decisions['backfill_p99_ms']} ms (not)"
    )
    out = REPO / "bench" / "out"
    out.mkdir(exist_ok=True)
    meta = {
        "machine": machine(),
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "agents": agents,
        "gpus_per_agent": 8,
        "window_s": span,
        "scenarios": {s.name: s.about for s in (*SCENARIOS, PRIORITIES)},
    }
    for trace_results in results.values():  # the scale check, beside each run of our policy
        if "tfdeclare" in trace_results:
            trace_results["tfdeclare"]["decision_ms_p99_1000_agents_1000_waiting"] = decisions[
                "draining_p99_ms"
            ]
    (out / "sched.json").write_text(json.dumps({**results, PRIORITIES.name: ranked}, indent=2) + "\n")
    (out / "sched-meta.json").write_text(json.dumps({"decision": decisions, **meta}, indent=2) + "\n")
    verdicts = report.targets(results, decisions)
    (out / "sched.md").write_text(
        report.table(results, meta, decisions, verdicts)
        + "\n"
        + priority.table(ranked, PRIORITIES.about, ranked_verdicts)
    )
    report.plots(outcomes, out)
    for line in verdicts + ranked_verdicts:
        print(line)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
