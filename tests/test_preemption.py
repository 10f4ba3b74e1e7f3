"""Victim selection (``core.run.preemption.choose``), table by table: the set of lower-priority
jobs that frees what is missing while losing the least work (tasks x time since their last
checkpoint, or since they started), ties to fewer jobs and then the newest; never the same or
a higher priority; what is already on its way back counts first."""

from __future__ import annotations

import itertools
import random

import pytest

from tfdeclare.core.run.preemption import EXACT_UP_TO, Candidate, Choice, choose
from tfdeclare.core.spec.resources import Resources

NOW = 10_000.0


def job(
    name: str,
    cpus: float,
    *,
    priority: int = 0,
    tasks: int = 1,
    age: float = 100.0,
    gpus: int = 0,
    checkpoint_age: float | None = None,
) -> Candidate:
    return Candidate(
        name,
        priority,
        Resources(cpus, 0, gpus),
        tasks,
        NOW - age,
        None if checkpoint_age is None else NOW - checkpoint_age,
    )


def victims(choice: Choice) -> list[str]:
    return [v.job for v in choice.victims]


@pytest.mark.parametrize(
    ("short", "candidates", "expected"),
    [
        # the one job that frees enough and loses least
        (2, [job("old", 4, age=1000), job("young", 4, age=10)], ["young"]),
        # two small ones lose less than one big one
        (4, [job("big", 4, tasks=4, age=100), job("a", 2, age=50), job("b", 2, age=50)], ["a", "b"]),
        # the work at risk is tasks x time: many tasks of a young job can cost more
        (2, [job("wide", 2, tasks=8, age=100), job("narrow", 2, tasks=1, age=500)], ["narrow"]),
        # a recent checkpoint makes an old job cheap to stop
        (2, [job("young", 2, age=60), job("saved", 2, age=5000, checkpoint_age=10)], ["saved"]),
        # never the same or a higher priority
        (2, [job("peer", 8, priority=5), job("boss", 8, priority=9)], []),
        # a job that frees nothing of what is missing is not a victim
        (2, [job("cpu", 2, age=1), job("other", 0, gpus=1, age=0)], ["cpu"]),
    ],
)
def test_choice(short: float, candidates: list[Candidate], expected: list[str]) -> None:
    assert victims(choose(Resources(short, 0), 5, candidates, NOW)) == expected


def test_ties_go_to_the_newest_job() -> None:
    # the same work at risk (tasks x age): 2 x 100 and 1 x 200
    older = job("older", 2, tasks=1, age=200)
    newer = job("newer", 2, tasks=2, age=100)
    assert victims(choose(Resources(2, 0), 5, [older, newer], NOW)) == ["newer"]
    assert victims(choose(Resources(2, 0), 5, [newer, older], NOW)) == ["newer"]


def test_a_tie_of_work_goes_to_fewer_jobs() -> None:
    one = job("one", 4, tasks=2, age=100)
    a, b = job("a", 2, age=100), job("b", 2, age=100)
    assert victims(choose(Resources(4, 0), 5, [a, b, one], NOW)) == ["one"]


def test_nothing_when_even_every_lower_job_is_not_enough() -> None:
    choice = choose(Resources(10, 0), 5, [job("a", 2), job("b", 2), job("peer", 20, priority=5)], NOW)
    assert not choice.helps and choice.victims == ()


def test_what_is_on_its_way_back_counts_first() -> None:
    candidates = [job("a", 2), job("b", 2)]
    covered = choose(Resources(2, 0), 5, candidates, NOW, coming=Resources(2, 0))
    assert covered.covered and covered.victims == ()
    partly = choose(Resources(4, 0), 5, candidates, NOW, coming=Resources(2, 0))
    assert len(partly.victims) == 1


def test_gpus_and_memory_count_too() -> None:
    candidates = [
        Candidate("cpu-only", 0, Resources(8, 8192, 0), 1, NOW - 1),
        Candidate("gpu", 0, Resources(1, 1024, 2), 4, NOW - 3000),
    ]
    assert victims(choose(Resources(0, 0, 1), 5, candidates, NOW)) == ["gpu"]
    assert victims(choose(Resources(0, 4096, 0), 5, candidates, NOW)) == ["cpu-only"]


def _brute(short: Resources, candidates: list[Candidate]) -> float:
    best = float("inf")
    for n in range(len(candidates) + 1):
        for subset in itertools.combinations(candidates, n):
            total = Resources(0, 0, 0)
            for c in subset:
                total = total + c.resources
            if short.fits_in(total):
                best = min(best, sum(c.work_at_risk(NOW) for c in subset))
    return best


@pytest.mark.parametrize("seed", range(30))
def test_the_exact_search_loses_no_more_work_than_any_other_set(seed: int) -> None:
    rng = random.Random(seed)
    candidates = [
        job(
            f"j{i}",
            rng.choice([0.5, 1, 2, 4]),
            tasks=rng.randint(1, 8),
            age=rng.uniform(0, 5000),
            gpus=rng.choice([0, 0, 1, 2]),
        )
        for i in range(rng.randint(1, 9))
    ]
    short = Resources(rng.choice([0.5, 1, 3, 6]), 0, rng.choice([0, 0, 1, 3]))
    choice = choose(short, 5, candidates, NOW)
    best = _brute(short, candidates)
    if best == float("inf"):
        assert not choice.helps
    else:
        assert choice.work_at_risk == pytest.approx(best)
        total = Resources(0, 0, 0)
        for v in choice.victims:
            total = total + v.resources
        assert short.fits_in(total)


def test_many_candidates_are_chosen_greedily_and_still_cover_the_need() -> None:
    candidates = [job(f"j{i:03}", 1, tasks=1, age=float(i)) for i in range(200)]
    assert len(candidates) > EXACT_UP_TO
    choice = choose(Resources(3, 0), 5, candidates, NOW)
    assert victims(choice) == ["j000", "j001", "j002"]  # the three youngest
