"""Victim selection (``core.run.preemption.choose``), table by table: the set of lower-priority
jobs that frees what is missing while losing the least work (tasks x time since their last
checkpoint, or since they started), ties to fewer jobs and then the newest; never the same or
a higher priority; what is already on its way back counts first."""

from __future__ import annotations

import itertools
import random

import pytest

from tfdeclare.core.run.preemption import EXACT_UP_TO, Candidate, Choice, Gang, choose, packs
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


# ---- a gang whose tasks must each fit on one place (Mesos agents) -----------------------------


def on(name: str, *held: tuple[str, float], age: float = 100.0, tasks: int | None = None) -> Candidate:
    """A job holding cpus on places: ``on("a", ("agent1", 2))``."""
    total = Resources(0, 0)
    for _, cpus in held:
        total = total + Resources(cpus, 0)
    places = tuple((place, Resources(cpus, 0)) for place, cpus in held)
    return Candidate(name, 0, total, tasks or len(held), NOW - age, None, places)


def gang(*cpus: float, rooms: dict[str, float], coming: dict[str, float] | None = None) -> Gang:
    return Gang(
        tuple(Resources(c, 0) for c in cpus),
        tuple((p, Resources(c, 0)) for p, c in rooms.items()),
        tuple((p, Resources(c, 0)) for p, c in (coming or {}).items()),
    )


def short_of(g: Gang) -> Resources:
    need, free = Resources(0, 0), Resources(0, 0)
    for slot in g.slots:
        need = need + slot
    for _, room in g.rooms:
        free = free + room
    return Resources(max(0.0, round(need.cpus - free.cpus, 3)), 0)


@pytest.mark.parametrize(
    ("slots", "rooms", "candidates", "expected"),
    [
        # By totals the cheapest job ("cheap", 2 cpus on B) covers the 2 missing cpus, but B then
        # has 3 free and the task needs 4 on one agent: the victim must be on one agent, whole.
        (
            (4,),
            {"A": 1, "B": 1},
            [on("cheap", ("B", 2), age=10), on("b-rest", ("B", 1), age=50), on("a-all", ("A", 3), age=100)],
            ["b-rest", "cheap"],
        ),
        # ...and when those two together lose more than the one job on A, the one on A goes
        (
            (4,),
            {"A": 1, "B": 1},
            [on("cheap", ("B", 2), age=10), on("b-rest", ("B", 1), age=500), on("a-all", ("A", 3), age=100)],
            ["a-all"],
        ),
        # enough free in all (2 + 2) but spread: a 3-cpu task needs one agent freed further
        ((3,), {"A": 2, "B": 2}, [on("x", ("A", 2), age=300), on("y", ("B", 2), age=30)], ["y"]),
        # a job holding on an agent the gang may not use (not among its rooms) frees nothing
        ((3,), {"A": 2}, [on("elsewhere", ("C", 4), age=1), on("here", ("A", 1), age=900)], ["here"]),
        # a gang of two tasks of 2: one per agent, each agent freed just enough
        (
            (2, 2),
            {"A": 1, "B": 1},
            [on("a", ("A", 1), age=5), on("b", ("B", 1), age=5), on("big", ("A", 3), age=50)],
            ["a", "b"],
        ),
        # one job spread over both agents frees room on each
        (
            (2, 2),
            {"A": 1, "B": 1},
            [on("wide", ("A", 1), ("B", 1), age=5), on("a", ("A", 2), age=4)],
            ["wide"],
        ),
        # nothing frees a whole agent of 8: no victim at all (by totals 4 + 4 would do)
        ((8,), {"A": 0, "B": 0}, [on("a", ("A", 4)), on("b", ("B", 4))], []),
    ],
)
def test_victims_free_room_on_an_agent_the_gang_fits(
    slots: tuple[float, ...], rooms: dict[str, float], candidates: list[Candidate], expected: list[str]
) -> None:
    g = gang(*slots, rooms=rooms)
    choice = choose(short_of(g), 5, candidates, NOW, gang=g)
    assert victims(choice) == expected
    if expected:  # the gang really fits with what they free
        freed = dict(g.rooms)
        for victim in choice.victims:
            for place, held in victim.held_on:
                if place in freed:
                    freed[place] = freed[place] + held
        assert packs(g.slots, freed)


def test_a_gang_that_fits_what_is_on_its_way_back_waits_for_it() -> None:
    back = Resources(2, 0)
    g = gang(4, rooms={"A": 2, "B": 1}, coming={"A": 2})
    assert choose(short_of(g), 5, [on("b", ("B", 3), age=1)], NOW, back, g).covered
    # on its way back, but to the wrong agent: someone is preempted still
    g = gang(4, rooms={"A": 2, "B": 1}, coming={"B": 2})
    assert victims(choose(short_of(g), 5, [on("a", ("A", 2), age=1)], NOW, back, g)) == ["a"]


def test_a_gang_that_fits_the_room_there_is_preempts_no_one() -> None:
    # what keeps it out is something else (ports, a window): not ours to free by preempting
    g = gang(2, rooms={"A": 2})
    choice = choose(Resources(0, 0), 5, [on("a", ("A", 1), age=1)], NOW, gang=g)
    assert choice.covered and choice.victims == ()


@pytest.mark.parametrize(
    ("slots", "places", "fits"),
    [
        ((4,), {"A": 3, "B": 3}, False),
        ((3, 3), {"A": 3, "B": 3}, True),
        ((2, 2, 2), {"A": 4, "B": 2}, True),
        ((3, 2, 2, 1), {"A": 4, "B": 4}, True),  # best fit decreasing: 3+1 and 2+2
        (
            (3, 3, 2, 2, 2),
            {"A": 6, "B": 6},
            True,
        ),  # best fit decreasing fails (3+3, 2+2, 2): the search finds 3+3 / 2+2+2
        ((2.5, 2.5, 2.5), {"A": 5, "B": 2}, False),
        ((), {}, True),
    ],
)
def test_packs(slots: tuple[float, ...], places: dict[str, float], fits: bool) -> None:
    assert packs([Resources(c, 0) for c in slots], {p: Resources(c, 0) for p, c in places.items()}) is fits


def _brute_gang(g: Gang, candidates: list[Candidate]) -> float:
    best = float("inf")
    for n in range(len(candidates) + 1):
        for subset in itertools.combinations(candidates, n):
            freed = dict(g.rooms)
            for c in subset:
                for place, held in c.held_on:
                    if place in freed:
                        freed[place] = freed[place] + held
            if packs(g.slots, freed):
                best = min(best, sum(c.work_at_risk(NOW) for c in subset))
    return best


@pytest.mark.parametrize("seed", range(30))
def test_with_a_gang_the_search_still_loses_the_least_work(seed: int) -> None:
    rng = random.Random(seed)
    agents = [f"a{i}" for i in range(rng.randint(1, 4))]
    candidates = [
        on(
            f"j{i}",
            *((rng.choice(agents), rng.choice([0.5, 1, 2])) for _ in range(rng.randint(1, 3))),
            age=rng.uniform(1, 5000),
        )
        for i in range(rng.randint(1, 8))
    ]
    g = gang(
        *(rng.choice([1, 2, 3]) for _ in range(rng.randint(1, 3))),
        rooms={a: rng.choice([0, 0.5, 1]) for a in agents},
    )
    choice = choose(short_of(g), 5, candidates, NOW, gang=g)
    best = _brute_gang(g, candidates)
    if best == 0.0:
        assert choice.covered
    elif best == float("inf"):
        assert not choice.helps
    else:
        assert choice.work_at_risk == pytest.approx(best)


def test_with_many_candidates_the_greedy_choice_frees_room_where_the_gang_fits() -> None:
    # 30 one-cpu jobs over 10 agents of 3 cpus (all full); a gang of two 3-cpu tasks: two
    # whole agents must be freed. The youngest jobs go first, then what is not needed is dropped.
    candidates = [on(f"j{i:02}", (f"a{i % 10}", 1), age=float(100 + i)) for i in range(30)]
    assert len(candidates) > EXACT_UP_TO
    g = gang(3, 3, rooms={f"a{i}": 0 for i in range(10)})
    choice = choose(short_of(g), 5, candidates, NOW, gang=g)
    freed: dict[str, Resources] = dict(g.rooms)
    for victim in choice.victims:
        for place, held in victim.held_on:
            freed[place] = freed[place] + held
    assert packs(g.slots, freed)
    assert len(choice.victims) == 6, victims(choice)  # two agents' three jobs each, no more
    assert len({place for v in choice.victims for place, _ in v.held_on}) == 2


def test_packs_many_slots_of_one_size_onto_many_places() -> None:
    places = {f"a{i:04}": Resources(8, 65536, 8) for i in range(1000)}
    slots = [Resources(4, 16384, 1)] * 2000  # two per place (cpus bind)
    assert packs(slots, places)
    assert not packs([*slots, Resources(4, 16384, 1)], places)
