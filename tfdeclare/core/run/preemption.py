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

Where each task must fit on one place (a Mesos agent: ``Gang``), covering the shortfall in
total is not enough: a victim set is chosen only if, with what it frees where its tasks run
(and what is free there now, and what is on its way back), every task of the waiting gang fits
on some place (``packs``: each slot on one place, all at once). So the chosen victims free room
where the gang can be placed, still losing the least work; a set that frees enough in total
but scattered over places the gang cannot use is never chosen, and when the room is there in
total but spread badly (nothing is short in total) victims are still chosen where they make
one place hold what the gang needs. Ports, attributes and the like are the backend's to judge:
it names only the places the gang may use.

The search is exact up to ``EXACT_UP_TO`` useful candidates (a depth-first search with
bounds) and greedy beyond (cheapest first, then the needless ones dropped again), so a pass
over a large state folder stays linear in practice. With a gang each set tried is a packing
(``assign``: slots of one size placed together, linear in the places); a choice took a median
of 80 ms at 1,000 agents, a 100-task gang and 200 candidates, 0.4 s at 10,000 agents, 1,000
tasks and 1,000 candidates (``bench/preemption_choice.py``, docs/benchmarks.md).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from tfdeclare.core.spec.resources import ZERO, Resources

EXACT_UP_TO = 12  # at worst ~12 ms a choice (2 shared cores); 16 candidates took up to 80 ms
PACK_BUDGET = 2000  # placements one ``packs`` tries beyond best fit decreasing
BACKTRACK_UP_TO = 32  # slots: a larger gang is packed by best fit decreasing alone
# Victims of a greedy choice for a gang tried for dropping by packing again (the most expensive
# first): as many as make this many places looked at in all, at least DROP_TRIES
DROP_PLACES = 200_000
DROP_TRIES = 8

Places = tuple[tuple[str, Resources], ...]  # (place, resources) pairs; a place may repeat


@dataclass(frozen=True, slots=True)
class Candidate:
    """A running job that might be preempted."""

    job: str
    priority: int
    resources: Resources  # what its alive tasks hold
    tasks: int  # how many tasks it would lose
    started_at: float  # when its current tasks started (the newest job has the largest)
    checkpoint_at: float | None = None  # its last checkpoint, when known
    # Where its alive tasks hold ``resources`` (place, resources), for a ``Gang``; () unknown
    held_on: Places = ()

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


@dataclass(frozen=True, slots=True)
class Gang:
    """The waiting job's tasks where each must fit on one place (a Mesos agent): what each
    slot needs, what each place it may use has free now (``rooms``: only those places count)
    and what is on its way back there (``coming``: tasks of suspended jobs still stopping)."""

    slots: tuple[Resources, ...]
    rooms: Places
    coming: Places = ()


def _by_place(
    *groups: Iterable[tuple[str, Resources]], only: Mapping[str, Resources]
) -> dict[str, Resources]:
    """Resources summed per place, for the places of ``only`` (the gang's rooms)."""
    out = dict(only)
    for group in groups:
        for place, held in group:
            if place in out:
                out[place] = out[place] + held
    return out


def _size(resources: Resources) -> tuple[int, float, int]:
    return resources.gpus, resources.cpus, resources.mem_mib


def packs(slots: Sequence[Resources], places: Mapping[str, Resources]) -> bool:
    """Whether every slot fits on one of ``places`` at once (a slot on one place, several on
    one where they fit together): ``assign``."""
    return assign(slots, places) is not None


def assign(slots: Sequence[Resources], places: Mapping[str, Resources]) -> dict[str, Resources] | None:
    """What the slots take of each place they are put on, or None when they do not all fit:
    best fit decreasing (the largest slots first, each onto the place it leaves least room on:
    slots of one size fill the tightest place that holds them first, as many as fit), then, for
    a gang of up to ``BACKTRACK_UP_TO`` slots where that fails, a search of the other ways, at
    most ``PACK_BUDGET`` placements (beyond it: None)."""
    if not slots:
        return {}
    order = sorted(slots, key=_size, reverse=True)
    least = Resources(min(s.cpus for s in slots), min(s.mem_mib for s in slots), min(s.gpus for s in slots))
    names = [name for name, room in sorted(places.items()) if least.fits_in(room)]  # others hold none
    free = [places[name] for name in names]
    taken = _best_fit(order, list(free))
    if taken is None and len(order) <= BACKTRACK_UP_TO:
        taken = _search(order, list(free))
    if taken is None:
        return None
    return {names[j]: used for j, used in taken.items()}


def _copies(slot: Resources, room: Resources) -> int:
    """How many of ``slot`` fit in ``room`` together."""
    counts = []
    if slot.cpus > 0:
        counts.append(int((room.cpus + 1e-9) // slot.cpus))
    if slot.mem_mib > 0:
        counts.append(room.mem_mib // slot.mem_mib)
    if slot.gpus > 0:
        counts.append(room.gpus // slot.gpus)
    return max(0, min(counts)) if counts else 1 << 30


def _best_fit(order: Sequence[Resources], free: list[Resources]) -> dict[int, Resources] | None:
    taken: dict[int, Resources] = {}
    i = 0
    while i < len(order):
        slot, left = order[i], 1
        while i + left < len(order) and order[i + left] == slot:
            left += 1
        i += left
        for j in sorted(range(len(free)), key=lambda k: _size(free[k])):  # the tightest first
            n = min(left, _copies(slot, free[j]))
            if n:
                free[j] = free[j] - slot.scaled(n)
                taken[j] = taken.get(j, ZERO) + slot.scaled(n)
                left -= n
                if not left:
                    break
        if left:
            return None
    return taken


def _search(order: Sequence[Resources], free: list[Resources]) -> dict[int, Resources] | None:
    budget = [PACK_BUDGET]
    taken: dict[int, Resources] = {}

    def place(i: int) -> bool:
        if i == len(order):
            return True
        slot, tried = order[i], set()
        for j in sorted((k for k in range(len(free)) if slot.fits_in(free[k])), key=lambda k: _size(free[k])):
            if free[j] in tried:  # the same room left as one tried: the same outcome
                continue
            tried.add(free[j])
            budget[0] -= 1
            if budget[0] < 0:
                return False
            before = free[j]
            free[j] = before - slot
            taken[j] = taken.get(j, ZERO) + slot
            if place(i + 1):
                return True
            free[j] = before
            taken[j] = taken[j] - slot
        return False

    return {j: used for j, used in taken.items() if used != ZERO} if place(0) else None


def remaining(short: Resources, coming: Resources) -> Resources:
    """What is still missing once ``coming`` is back (never below zero)."""
    return Resources(
        max(0.0, round(short.cpus - coming.cpus, 3)),
        max(0, short.mem_mib - coming.mem_mib),
        max(0, short.gpus - coming.gpus),
    )


def _useful(candidate: Candidate, need: Resources, rooms: frozenset[str] | None) -> bool:
    """Whether it holds any of what is needed (with a gang: of what its tasks need, on a place
    it may use; ``need`` is then what the whole gang needs, where nothing is short in total)."""
    held = candidate.resources
    if rooms is not None and not any(place in rooms for place, _ in candidate.held_on):
        return False
    return (
        (need.cpus > 0 and held.cpus > 0)
        or (need.mem_mib > 0 and held.mem_mib > 0)
        or (need.gpus > 0 and held.gpus > 0)
    )


class _Fits:
    """Whether a set of victims frees enough: in total, and (for a gang) where its tasks fit."""

    def __init__(self, need: Resources, gang: Gang | None) -> None:
        self.need, self.gang = need, gang
        self.base = {} if gang is None else _by_place(gang.coming, only=dict(_summed(gang.rooms)))

    def __call__(self, held: Resources, victims: Sequence[Candidate]) -> bool:
        if not self.need.fits_in(held):
            return False
        if self.gang is None:
            return True
        return packs(self.gang.slots, self.places(victims))

    def places(self, victims: Sequence[Candidate]) -> dict[str, Resources]:
        """What each place of the gang has once ``victims`` are gone (what is free there now,
        what is on its way back, what they hold there)."""
        return _by_place(*(v.held_on for v in victims), only=self.base)


def _summed(pairs: Iterable[tuple[str, Resources]]) -> dict[str, Resources]:
    out: dict[str, Resources] = {}
    for place, held in pairs:
        out[place] = out.get(place, ZERO) + held
    return out


def choose(
    short: Resources,
    priority: int,
    candidates: Sequence[Candidate],
    now: float,
    coming: Resources = ZERO,
    gang: Gang | None = None,
) -> Choice:
    """The victims that free ``short`` (beyond ``coming``) for a job of ``priority`` and, with
    a ``gang``, make room where its tasks fit (module doc)."""
    need = remaining(short, coming)
    fits = _Fits(need, gang)
    if fits(ZERO, ()):
        return Choice(covered=True)
    rooms, wanted = None, need
    if gang is not None:  # what it holds where the gang may go, of what the gang's tasks need
        rooms = frozenset(place for place, _ in gang.rooms)
        for slot in gang.slots:
            wanted = Resources(
                max(wanted.cpus, slot.cpus), max(wanted.mem_mib, slot.mem_mib), max(wanted.gpus, slot.gpus)
            )
    pool = sorted(
        (c for c in candidates if c.priority < priority and _useful(c, wanted, rooms)),
        key=lambda c: (c.work_at_risk(now), -c.started_at, c.job),
    )
    total = ZERO
    for candidate in pool:
        total = total + candidate.resources
    if not fits(total, pool):
        return Choice()
    victims = _exact(fits, pool, now) if len(pool) <= EXACT_UP_TO else _greedy(fits, pool, now)
    return Choice(victims=victims, work_at_risk=sum(v.work_at_risk(now) for v in victims))


def _key(victims: Sequence[Candidate], now: float) -> tuple[float, int, tuple[float, ...]]:
    """Least work at risk, then fewest jobs, then the newest (largest start times first)."""
    work = round(sum(v.work_at_risk(now) for v in victims), 6)
    return work, len(victims), tuple(sorted(-v.started_at for v in victims))


def _exact(fits: _Fits, pool: Sequence[Candidate], now: float) -> tuple[Candidate, ...]:
    need = fits.need
    suffix = [ZERO] * (len(pool) + 1)
    for i in range(len(pool) - 1, -1, -1):
        suffix[i] = suffix[i + 1] + pool[i].resources
    best: list[Candidate] | None = None
    best_key: tuple[float, int, tuple[float, ...]] | None = None
    chosen: list[Candidate] = []

    def search(i: int, held: Resources, work: float) -> None:
        nonlocal best, best_key
        if best_key is not None and round(work, 6) > best_key[0]:
            return
        if need.fits_in(held) and fits(held, chosen):
            key = _key(chosen, now)
            if best_key is None or key < best_key:
                best, best_key = list(chosen), key
            return  # one more victim only loses more
        if i == len(pool) or not need.fits_in(held + suffix[i]):
            return
        candidate = pool[i]
        chosen.append(candidate)
        search(i + 1, held + candidate.resources, work + candidate.work_at_risk(now))
        chosen.pop()
        search(i + 1, held, work)

    search(0, ZERO, 0.0)
    assert best is not None  # the whole pool fits
    return tuple(sorted(best, key=lambda c: c.job))


def _greedy(fits: _Fits, pool: Sequence[Candidate], now: float) -> tuple[Candidate, ...]:
    """The shortest prefix of the pool (cheapest first) that fits (a bisection: a longer prefix
    frees more), then the most expensive of it dropped again while it still fits: for a gang,
    first every victim the packing found does not need (what it frees where the gang's tasks
    go is not used, or more than they take is left without it: no packing again), then the
    rest, each tried by a packing, as many as ``DROP_PLACES`` places allow (``DROP_TRIES`` at
    least: all of them on a cluster of up to a few thousand agents)."""
    held = [ZERO]
    for candidate in pool:
        held.append(held[-1] + candidate.resources)
    low, high = 0, len(pool)  # the whole pool fits (``choose`` checked); the empty set does not
    while high - low > 1:
        middle = (low + high) // 2
        if fits(held[middle], pool[:middle]):
            high = middle
        else:
            low = middle
    chosen = list(pool[:high])
    total = held[high]
    ranked = sorted(chosen, key=lambda c: -c.work_at_risk(now))
    if fits.gang is not None:
        chosen, total = _drop_unused(fits, chosen, total, ranked)
        left = set(map(id, chosen))
        tries = max(DROP_TRIES, DROP_PLACES // max(1, len(fits.base)))
        ranked = [c for c in ranked if id(c) in left][:tries]
    for candidate in ranked:  # drop what is not needed
        rest = [c for c in chosen if c is not candidate]
        if fits(total - candidate.resources, rest):
            chosen = rest
            total = total - candidate.resources
    return tuple(sorted(chosen, key=lambda c: c.job))


def _drop_unused(
    fits: _Fits, chosen: list[Candidate], total: Resources, ranked: Sequence[Candidate]
) -> tuple[list[Candidate], Resources]:
    """``chosen`` less the victims one packing of the gang leaves room enough without (the
    most expensive first): that packing still holds, so the rest still fits."""
    assert fits.gang is not None
    places = fits.places(chosen)
    used = assign(fits.gang.slots, places)
    if used is None:  # (the prefix fitted: not reached)
        return chosen, total
    kept = set(map(id, chosen))
    for candidate in ranked:
        after: dict[str, Resources] = {}  # its places without it
        for place, held in candidate.held_on:
            if place in places:
                after[place] = after.get(place, places[place]) - held
        left_enough = all(used.get(place, ZERO).fits_in(room) for place, room in after.items())
        if left_enough and fits.need.fits_in(total - candidate.resources):
            places.update(after)
            total = total - candidate.resources
            kept.discard(id(candidate))
    return [c for c in chosen if id(c) in kept], total
