"""The scheduling simulator (``make bench-sched``) on tiny traces: its invariants, the upper
bound, and a crafted trace on which the TFMesos-style greedy baseline deadlocks and the
backend's own policy (``place_in_line``) does not."""

from __future__ import annotations

import pytest

from bench.sched.cluster import make_cluster
from bench.sched.policies import POLICIES, Fifo, Greedy, GreedyTimeout, Tfdeclare
from bench.sched.sim import fluid_bound, simulate
from bench.sched.trace import Job, Trace, generate, offered_load


def test_a_generated_trace_is_seeded_and_shaped_like_a_gpu_cluster() -> None:
    trace = generate("t", 5, 128, 6 * 3600.0, 1.0)
    assert trace == generate("t", 5, 128, 6 * 3600.0, 1.0)
    assert trace != generate("t", 6, 128, 6 * 3600.0, 1.0)
    assert offered_load(trace, 128) == pytest.approx(1.0)
    single = sum(1 for j in trace.jobs if j.gpus == 1) / len(trace.jobs)
    assert 0.5 < single < 0.9
    assert all(0 <= j.arrival < trace.span_s and j.gpus % j.task_gpus == 0 for j in trace.jobs)
    durations = sorted(j.duration for j in trace.jobs)
    mean = sum(durations) / len(durations)
    assert durations[len(durations) // 2] * 2 < mean < durations[-1]  # heavy-tailed


@pytest.mark.parametrize("name", list(POLICIES))
def test_every_policy_on_a_tiny_trace_keeps_the_invariants(name: str) -> None:
    trace = generate("tiny", 3, 8 * 8, 2 * 3600.0, 1.1)
    outcome = simulate(trace, make_cluster(8), POLICIES[name]())
    m = outcome.metrics
    assert m["jobs"] == len(trace.jobs)
    assert 0 < float(m["gpu_allocation"] or 0) <= float(m["upper_bound_allocation"] or 0) + 1e-9
    assert float(m["gpu_allocation"] or 0) <= float(m["gpu_held"] or 0) + 1e-9
    if name == "greedy-timeout":  # partial gangs, but none for ever: everything ends
        assert m["deadlocked"] == m["unfinished"] == 0
    if not name.startswith("greedy"):  # gangs placed whole: nothing partial, nothing stuck
        assert m["partial_gangs"] == m["deadlocked"] == m["unfinished"] == 0
        assert m["makespan_s"] is not None
        assert m["gpu_allocation"] == m["gpu_held"]


def _crafted() -> Trace:
    """Two agents of 8 GPUs; two jobs of 8 two-GPU tasks each want both agents at once."""
    jobs = (Job("a", 0.0, 16, 2, 100.0), Job("b", 0.0, 16, 2, 100.0), Job("c", 1.0, 1, 1, 10.0))
    return Trace("crafted", jobs, 50.0)


def test_greedy_deadlocks_on_two_gangs_that_each_want_the_whole_cluster() -> None:
    m = simulate(_crafted(), make_cluster(2), Greedy()).metrics
    assert m["deadlocked"] == 2 and m["partial_gangs"] == 2
    assert m["unfinished"] == 3  # c waits behind the GPUs a and b hold for ever
    assert m["gpu_allocation"] == 0 and m["gpu_held"] == 1
    assert m["makespan_s"] is None


def test_greedy_with_a_timeout_gives_up_the_partial_gangs_and_ends_everything() -> None:
    """The same deadlock, broken after ``GIVE_UP_S``: both gangs give back what they hold, c
    runs meanwhile, and the randomised resubmission lets one gang fit before the other."""
    outcome = simulate(_crafted(), make_cluster(2), GreedyTimeout())
    m = outcome.metrics
    assert m["partial_gangs"] == 2
    assert m["deadlocked"] == m["unfinished"] == 0
    assert m["makespan_s"] is not None and m["makespan_s"] > GreedyTimeout.GIVE_UP_S + 200.0
    assert float(m["gpu_allocation"] or 0) < float(m["gpu_held"] or 0)  # the wait held GPUs


@pytest.mark.parametrize("policy", [Tfdeclare, Fifo])
def test_gang_policies_run_the_crafted_trace_one_gang_after_the_other(policy: type[Tfdeclare | Fifo]) -> None:
    outcome = simulate(_crafted(), make_cluster(2), policy())
    m = outcome.metrics
    assert m["deadlocked"] == m["partial_gangs"] == m["unfinished"] == 0
    assert m["makespan_s"] == 210.0  # a, then b, then c (c needs a GPU: none is free before)
    assert m["gpu_allocation"] == 1.0


def test_the_fluid_bound_by_hand() -> None:
    """One 8-GPU job of 50 s in a 100 s window on 16 GPUs: at most 400 of 1,600 GPU-seconds."""
    trace = Trace("one", (Job("x", 0.0, 8, 8, 50.0),), 100.0)
    assert fluid_bound(trace, 16) == pytest.approx(0.25)
    # Arriving work beyond the capacity: the capacity bounds it.
    busy = Trace("busy", tuple(Job(f"j{i}", 0.0, 8, 8, 500.0) for i in range(4)), 100.0)
    assert fluid_bound(busy, 16) == pytest.approx(1.0)
