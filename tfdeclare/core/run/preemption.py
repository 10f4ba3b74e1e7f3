"""Which running jobs a job that cannot be placed may preempt: a pure choice.

A job waiting for resources (``Unplaced`` with its ``short``: what it lacks beyond what is
free now) may take them from running jobs of *lower* priority of this tfdeclare (never the
same or a higher priority; other frameworks' tasks are never candidates, since the caller
only offers the jobs of its own records). Of the sets of candidates whose resources cover the
shortfall, the one that loses the least work is chosen: the *work at risk* of a victim is its
tasks times the time since its last checkpoint (since its tasks started when it has none).
Ties go to the smaller set, then to the newest jobs (the ones started last lose least of
what they were promised). Resources already on their way back (tasks of suspended or
preempted jobs that are still stopping) count first, so a job never preempts twice for the
same room.

The search is exact up to ``EXACT_UP_TO`` useful candidates (a depth-first search with
bounds) and greedy beyond (cheapest first, then the needless ones dropped again), so a pass
over a large state folder stays linear in practice.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from tfdeclare.core.spec.resources import ZERO, Resources

EXACT_UP_TO = 12  # at worst ~12 ms a choice (2 shared cores); 16 candidates took up to 80 ms


@dataclass(frozen=True, slots=True)
class Candidate:
    """A running job that might be preempted."""

    job: str
    priority: int
    resources: Resources  # what its alive tasks hold
    tasks: int  # how many tasks it would lose
    started_at: float  # when its current tasks started (the newest job has the largest)
    checkpoint_at: float | None = None  # its last checkpoint, when known

    def work_at_risk(self, now: float) -> float:
        """Task-seconds lost if it is stopped now."""
        since = self.checkpoint_at if self.checkpoint_at is not None else self.started_at
        return self.tasks * max(0.0, now - since)


@dataclass(frozen=True, slots=True)
class Choice:
    """What to do for a job short of ``short``: preempt ``victims``; or nothing, because
    what is on its way back covers it (``covered``); or nothing, because even every lower-
    priority job would not free enough (both empty and not covered)."""

    victims: tuple[Candidate, ...] = ()
    covered: bool = False
    work_at_risk: float = 0.0

    @property
    def helps(self) -> bool:
        return self.covered or bool(self.victims)


def remaining(short: Resources, coming: Resources) -> Resources:
    """What is still missing once ``coming`` is back (never below zero)."""
    return Resources(
        max(0.0, round(short.cpus - coming.cpus, 3)),
        max(0, short.mem_mib - coming.mem_mib),
        max(0, short.gpus - coming.gpus),
    )


def _useful(candidate: Candidate, need: Resources) -> bool:
    return (
        (need.cpus > 0 and candidate.resources.cpus > 0)
        or (need.mem_mib > 0 and candidate.resources.mem_mib > 0)
        or (need.gpus > 0 and candidate.resources.gpus > 0)
    )


def choose(
    short: Resources,
    priority: int,
    candidates: Sequence[Candidate],
    now: float,
    coming: Resources = ZERO,
) -> Choice:
    """The victims that free ``short`` (beyond ``coming``) for a job of ``priority``."""
    need = remaining(short, coming)
    if need.fits_in(ZERO):
        return Choice(covered=True)
    pool = sorted(
        (c for c in candidates if c.priority < priority and _useful(c, need)),
        key=lambda c: (c.work_at_risk(now), -c.started_at, c.job),
    )
    total = ZERO
    for candidate in pool:
        total = total + candidate.resources
    if not need.fits_in(total):
        return Choice()
    victims = _exact(need, pool, now) if len(pool) <= EXACT_UP_TO else _greedy(need, pool, now)
    return Choice(victims=victims, work_at_risk=sum(v.work_at_risk(now) for v in victims))


def _key(victims: Sequence[Candidate], now: float) -> tuple[float, int, tuple[float, ...]]:
    """Least work at risk, then fewest jobs, then the newest (largest start times first)."""
    work = round(sum(v.work_at_risk(now) for v in victims), 6)
    return work, len(victims), tuple(sorted(-v.started_at for v in victims))


def _exact(need: Resources, pool: Sequence[Candidate], now: float) -> tuple[Candidate, ...]:
    suffix = [ZERO] * (len(pool) + 1)
    for i in range(len(pool) - 1, -1, -1):
        suffix[i] = suffix[i + 1] + pool[i].resources
    best: list[Candidate] | None = None
    best_key: tuple[float, int, tuple[float, ...]] | None = None
    chosen: list[Candidate] = []

    def search(i: int, held: Resources, work: float) -> None:
        nonlocal best, best_key
        if need.fits_in(held):
            key = _key(chosen, now)
            if best_key is None or key < best_key:
                best, best_key = list(chosen), key
            return
        if i == len(pool) or not need.fits_in(held + suffix[i]):
            return
        if best_key is not None and round(work, 6) > best_key[0]:
            return
        candidate = pool[i]
        chosen.append(candidate)
        search(i + 1, held + candidate.resources, work + candidate.work_at_risk(now))
        chosen.pop()
        search(i + 1, held, work)

    search(0, ZERO, 0.0)
    assert best is not None  # the whole pool covers the need
    return tuple(sorted(best, key=lambda c: c.job))


def _greedy(need: Resources, pool: Sequence[Candidate], now: float) -> tuple[Candidate, ...]:
    chosen: list[Candidate] = []
    held = ZERO
    for candidate in pool:  # cheapest first
        if need.fits_in(held):
            break
        chosen.append(candidate)
        held = held + candidate.resources
    for candidate in sorted(chosen, key=lambda c: -c.work_at_risk(now)):  # drop what is not needed
        if need.fits_in(held - candidate.resources):
            chosen.remove(candidate)
            held = held - candidate.resources
    return tuple(sorted(chosen, key=lambda c: c.job))
