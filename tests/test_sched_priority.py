"""The two-priority-class simulation of ``make bench-sched`` (bench/sched/priority.py) on a
trace small enough to work out by hand: a low-priority job holds the whole cluster when a
high-priority one arrives. Without preemption the high job waits for the low one to end; kill
and restart starts it at once and the low job loses everything it had done; ours waits the
victim's grace and the low job loses only what it did since its last checkpoint."""

from __future__ import annotations

import pytest

from bench.sched import priority
from bench.sched.cluster import make_cluster
from bench.sched.trace import Job, Trace, generate

LOW = Job("low", 0.0, 16, 8, 3600.0)  # both agents' 16 GPUs, an hour
HIGH = Job("high", 1000.0, 8, 8, 600.0)
TRACE = Trace("crafted", (LOW, HIGH), 7200.0)
PRIORITIES = {"low": 0, "high": 1}
K = 600.0  # a checkpoint every 10 minutes
G = priority.GRACE_S


def run(mode: str) -> dict[str, float | int | None]:
    return priority.simulate(TRACE, make_cluster(2), PRIORITIES, mode, K)


def test_without_preemption_the_high_job_waits_for_the_low_one_to_end() -> None:
    m = run("no-preemption")
    assert m["high_mean_wait_s"] == 3600.0 - 1000.0
    assert (m["preemptions"], m["lost_gpu_hours"]) == (0, 0.0)
    assert m["mean_jct_s"] == (3600.0 + (4200.0 - 1000.0)) / 2


def test_kill_and_restart_starts_the_high_job_at_once_and_loses_all_the_low_one_did() -> None:
    m = run("kill-restart")
    assert m["high_mean_wait_s"] == 0.0 and m["preemptions"] == 1
    assert m["lost_gpu_hours"] == pytest.approx(16 * 1000.0 / 3600, abs=0.05)
    # The low job starts again from scratch once the high one is done (1600 s).
    assert m["low_mean_jct_s"] == 1600.0 + 3600.0


def test_ours_waits_the_grace_and_loses_only_the_work_since_the_last_checkpoint() -> None:
    m = run("tfdeclare")
    assert m["high_mean_wait_s"] == G and m["preemptions"] == 1
    stop = 1000.0 + G
    saved = (stop // K) * K
    assert m["lost_gpu_hours"] == pytest.approx(16 * (stop - saved) / 3600, abs=0.05)
    # It resumes from the checkpoint when the high job ends, with the rest of its work.
    assert m["low_mean_jct_s"] == stop + 600.0 + (3600.0 - saved)
    assert m["lost_share"] < run("kill-restart")["lost_share"]


def test_a_job_that_ends_within_the_grace_is_not_counted_as_preempted() -> None:
    short = Trace("short", (Job("low", 0.0, 16, 8, 1050.0), HIGH), 7200.0)
    m = priority.simulate(short, make_cluster(2), PRIORITIES, "tfdeclare", K)
    assert (m["preemptions"], m["lost_gpu_hours"]) == (0, 0.0)
    assert m["high_mean_wait_s"] == 50.0


def test_on_a_generated_trace_every_mode_ends_every_job_and_the_targets_are_judged() -> None:
    cluster = make_cluster(4, seed=5)
    trace = generate("p", 5, cluster.capacity_gpus, 6 * 3600.0, 0.9)
    results = priority.run_all(trace, lambda: make_cluster(4, seed=5), 5)
    assert set(results) >= set(priority.MODES)
    for m in results.values():
        assert m["high_jobs"] + m["low_jobs"] == len(trace.jobs)  # type: ignore[operator]
        assert {"gpu_allocation", "mean_jct_s", "p95_jct_s", "partial_gangs", "deadlocked"} <= set(m)
    assert results["no-preemption"]["preemptions"] == 0
    verdicts = priority.targets(results)
    assert len(verdicts) == 2 and all(("met" in v) or ("MISSED" in v) for v in verdicts)
    results["fifo"] = {"gpu_allocation": 0.5}  # a policy of sched.json that knows no priorities
    shown = priority.table(results, "p", verdicts)
    assert "| tfdeclare |" in shown and "| fifo | - |" in shown


def test_ours_frees_one_agent_when_enough_is_free_in_all_but_spread() -> None:
    """Two agents of 8 GPUs, each running a low job of 5 (3 free on each, 6 in all); a high job
    of one 6-GPU task. By totals nothing is short and no one is preempted: it waits for a low
    job to end. By agent, the newer low job is preempted and the task runs on its agent after
    the grace."""
    spread = Trace(
        "spread",
        (Job("old", 0.0, 5, 5, 7200.0), Job("new", 10.0, 5, 5, 7200.0), Job("high", 1000.0, 6, 6, 600.0)),
        10_000.0,
    )
    priorities = {"old": 0, "new": 0, "high": 1}
    totals = priority.simulate(spread, make_cluster(2), priorities, "tfdeclare-by-totals", K)
    assert totals["preemptions"] == 0 and totals["high_mean_wait_s"] == 7200.0 - 1000.0
    ours = priority.simulate(spread, make_cluster(2), priorities, "tfdeclare", K)
    assert ours["preemptions"] == 1 and ours["high_mean_wait_s"] == G
