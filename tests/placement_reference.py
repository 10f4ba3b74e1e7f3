"""The straightforward gang placement, as ``placement.place_gang`` was before it used an index
(issue 23), and the FIFO-with-backfill views made with it: every decision sorts the offers by
agent id and makes a bin per agent. Kept here, frozen, as the oracle the indexed placement is
compared with (tests/test_placement_index.py). What it would otherwise share with the code it
checks is written apart, more simply: a bin's free ports are kept one by one (not as ranges),
and the agents drained for a head of line are found by brute force.
"""

from __future__ import annotations

import bisect
import heapq
from collections.abc import Sequence
from dataclasses import dataclass, replace

from tfdeclare.backends.mesos.placement_backfill import Backfill
from tfdeclare.backends.mesos.placement_rules import eligible_for, matches
from tfdeclare.backends.mesos.placement_values import (
    AgentOffer,
    GangFit,
    NoFit,
    PlacementOptions,
    SlotAssignment,
)
from tfdeclare.core.enums import PlacementStrategy
from tfdeclare.core.run.tasks import GangRequest, SlotRequest, UnplacedReason
from tfdeclare.core.spec.keys import TaskKey
from tfdeclare.core.spec.resources import Resources

_EPS = 1e-6


@dataclass(slots=True)
class _Bin:
    view: AgentOffer
    index: int  # position in the sorted views (ties are broken by it: agent id, role)
    gpu_agent: bool
    cpus: float
    mem: float
    gpus: int
    free_ports: list[int]  # every free port, one by one, in the order the ranges give them
    used: int = 0  # slots of this gang placed here

    def fits(self, resources: Resources) -> bool:
        return (
            resources.cpus <= self.cpus + _EPS
            and resources.mem_mib <= self.mem + _EPS
            and resources.gpus <= self.gpus
            and len(self.free_ports) > 0
        )

    def allows(self, resources: Resources, options: PlacementOptions) -> bool:
        if resources.gpus > 0:
            return self.gpu_agent
        return options.cpu_tasks_on_gpu_agents or not self.gpu_agent

    def has_port(self, port: int) -> bool:
        return port in self.free_ports

    def lowest_port(self, avoid: set[int]) -> int | None:
        return next((port for port in self.free_ports if port not in avoid), None)

    def take(self, resources: Resources, port: int) -> None:
        self.cpus -= resources.cpus
        self.mem -= resources.mem_mib
        self.gpus -= resources.gpus
        self.used += 1
        self.free_ports.remove(port)

    def port_count(self) -> int:
        return len(self.free_ports)

    def spread_key(self) -> tuple[int, float, float, int]:
        return (self.used, -self.cpus, -self.mem, self.index)


def _slot_order(slot: SlotRequest) -> tuple[int, int, float, int, TaskKey]:
    r = slot.resources
    return (0 if slot.previous is not None else 1, -r.gpus, -r.cpus, -r.mem_mib, slot.key)


@dataclass(frozen=True, slots=True)
class _Rest:
    """The slots still to place, summed (for ``pack``'s "takes the whole rest" test)."""

    need: Resources
    count: int
    any_gpu: bool
    any_cpu_only: bool

    @classmethod
    def of(cls, slots: Sequence[SlotRequest]) -> _Rest:
        need = Resources(0.0, 0, 0)
        for slot in slots:
            need = need + slot.resources
        gpu = any(s.resources.gpus > 0 for s in slots)
        cpu_only = any(s.resources.gpus == 0 for s in slots)
        return cls(need, len(slots), gpu, cpu_only)


def _holds_all(b: _Bin, rest: _Rest, options: PlacementOptions) -> bool:
    """Can this agent take every slot still to place (summed), GPU rules included?"""
    if rest.any_gpu and not b.gpu_agent:
        return False
    if rest.any_cpu_only and b.gpu_agent and not options.cpu_tasks_on_gpu_agents:
        return False
    need = rest.need
    return (
        need.cpus <= b.cpus + _EPS
        and need.mem_mib <= b.mem + _EPS
        and need.gpus <= b.gpus
        and rest.count <= b.port_count()
    )


class _Shape:
    """The agents one shape of slot (cpus, mem, gpus) may use, indexed for the strategy.

    ``spread``: a heap on (slots of the gang there, most free cpus, most free mem, order),
    entries re-checked when popped (a placement changes a bin's key). ``pack``: the unused
    agents sorted by (cpus, mem, gpus, order), so the tightest agent that takes the rest of
    the gang is found by bisection.
    """

    def __init__(
        self, resources: Resources, bins: list[_Bin], options: PlacementOptions, spread: bool
    ) -> None:
        self.resources = resources
        self.eligible = [b for b in bins if b.allows(resources, options)]
        self.position = {b.index: i for i, b in enumerate(self.eligible)}
        self.heap: list[tuple[tuple[int, float, float, int], int]] = []
        self.by_size: list[_Bin] = []
        self.cpus_sorted: list[float] = []
        self.largest_first: list[_Bin] | None = None  # by_size, the largest first (made when needed)
        self.largest_at = 0  # the agents before this one in largest_first are used or do not fit
        if spread:
            self.heap = [(b.spread_key(), i) for i, b in enumerate(self.eligible) if b.fits(resources)]
            heapq.heapify(self.heap)
        else:
            self.by_size = sorted(
                (b for b in self.eligible if b.used == 0), key=lambda b: (b.cpus, b.mem, b.gpus, b.index)
            )
            self.cpus_sorted = [b.cpus for b in self.by_size]

    def spread_pick(self) -> _Bin | None:
        while self.heap:
            key, i = heapq.heappop(self.heap)
            b = self.eligible[i]
            if not b.fits(self.resources):
                continue
            current = b.spread_key()
            if current != key:  # changed since it was pushed: queue it again as it is now
                heapq.heappush(self.heap, (current, i))
                continue
            return b
        return None

    def spread_return(self, b: _Bin) -> None:
        """``b`` (picked from the heap) took a slot: queue it again with its new key."""
        i = self.position.get(b.index)
        if i is not None and b.fits(self.resources):
            heapq.heappush(self.heap, (b.spread_key(), i))

    def pack_open(self, rest: _Rest, options: PlacementOptions) -> _Bin | None:
        """A new agent for ``pack``: the tightest that takes the whole rest, else the largest."""
        by_size = self.by_size
        for i in range(bisect.bisect_left(self.cpus_sorted, rest.need.cpus - _EPS), len(by_size)):
            b = by_size[i]
            if b.used == 0 and b.fits(self.resources) and _holds_all(b, rest, options):
                return b
        # The largest unused agent that fits. An unused agent does not change while this shape
        # is placed (taking one makes it used), so those passed over stay passed over.
        if self.largest_first is None:
            self.largest_first = sorted(by_size, key=lambda b: (-b.cpus, -b.mem, -b.gpus, b.index))
        largest = self.largest_first
        while self.largest_at < len(largest):
            b = largest[self.largest_at]
            if b.used == 0 and b.fits(self.resources):
                return b
            self.largest_at += 1
        return None


def reference_place_gang(
    request: GangRequest, offers: Sequence[AgentOffer], options: PlacementOptions
) -> GangFit | NoFit:
    """Place every slot of ``request`` on the offered agents, or none."""
    constraints = request.constraints
    views = [v for v in offers if matches(v.attributes, constraints)] if constraints else list(offers)
    views.sort(key=lambda v: (v.agent_id, v.role))
    bins = [
        _Bin(
            v,
            i,
            v.gpu_agent or v.gpus > 0,
            v.cpus,
            v.mem_mib,
            v.gpus,
            [p for b, e in v.ports for p in range(b, e + 1)],
        )
        for i, v in enumerate(views)
    ]
    by_host: dict[str, list[_Bin]] = {}
    for b in bins:
        by_host.setdefault(b.view.hostname, []).append(b)
    spread = request.strategy is PlacementStrategy.SPREAD
    opened: list[_Bin] = []  # agents this gang uses so far
    slots = sorted(request.slots, key=_slot_order)
    wanted = {(s.previous.host, s.previous.port) for s in slots if s.previous is not None}
    shape: _Shape | None = None
    assignments: list[SlotAssignment] = []
    for position, slot in enumerate(slots):
        resources = slot.resources
        chosen: _Bin | None = None
        port: int | None = None
        from_heap = False
        if slot.previous is not None:
            previous = slot.previous
            for b in by_host.get(previous.host, ()):  # sorted by agent id: deterministic
                if b.has_port(previous.port) and b.allows(resources, options) and b.fits(resources):
                    chosen, port = b, previous.port
                    break
            if chosen is None and slot.pinned:  # restarting alone: its address or nothing
                return NoFit(
                    UnplacedReason.WAITING_FOR_ADDRESS,
                    f"{slot.key.name} restarts alone at {previous}: waiting for an offer of that agent "
                    f"that holds port {previous.port} and {resources.describe()}",
                )
        if chosen is None:
            if shape is None or shape.resources != resources:
                shape = _Shape(resources, bins, options, spread)
            if spread:
                chosen = shape.spread_pick()
                from_heap = True
            else:
                # Keep filling the agents this gang already uses, the fullest first.
                filling = [b for b in opened if b.allows(resources, options) and b.fits(resources)]
                if filling:
                    chosen = min(filling, key=lambda b: (-b.used, b.cpus, b.mem, b.index))
                else:
                    chosen = shape.pack_open(_Rest.of(slots[position:]), options)
            if chosen is None:
                return _no_fit(request, slot, views, options)
        if port is None:
            host = chosen.view.hostname
            avoid = {p for h, p in wanted if h == host}
            port = chosen.lowest_port(avoid)
            if port is None:  # only ports other slots want back: take one anyway
                port = chosen.lowest_port(set())
            assert port is not None  # fits() checked there is a free port
        wanted.discard((chosen.view.hostname, port))
        if chosen.used == 0:
            opened.append(chosen)
        chosen.take(resources, port)
        if from_heap and shape is not None:
            shape.spread_return(chosen)
        v = chosen.view
        assignments.append(SlotAssignment(slot.key, v.agent_id, v.hostname, v.role, port, resources))
    return GangFit(tuple(sorted(assignments, key=lambda a: a.key)))


def _no_fit(
    request: GangRequest, slot: SlotRequest, views: Sequence[AgentOffer], options: PlacementOptions
) -> NoFit:
    need = request.total
    usable = [v for v in views if eligible_for(request, v, options)]
    free_gpus = sum(v.gpus for v in usable)
    free = Resources(round(sum(v.cpus for v in usable), 3), int(sum(v.mem_mib for v in usable)), free_gpus)
    gpu_short = need.gpus > 0 and (slot.resources.gpus > 0 or free_gpus < need.gpus)
    reason = UnplacedReason.WAITING_FOR_GPUS if gpu_short else UnplacedReason.WAITING_FOR_OFFERS
    if not usable:
        where = "no offer held now is from an agent this job may use"
    else:
        largest = max(usable, key=lambda v: (v.cpus, v.mem_mib, v.gpus, v.agent_id))
        where = (
            f"offers held from {len(usable)} usable agent(s) total {free.describe()}; the largest has "
            f"{_describe_view(largest)}"
        )
    return NoFit(
        reason,
        f"needs {need.describe()} for {len(request.slots)} task(s) ({slot.key.name} needs "
        f"{slot.resources.describe()}); {where}",
    )


def _describe_view(view: AgentOffer) -> str:
    text = f"cpus {view.cpus:g}, mem {view.mem_mib:g} MiB"
    return f"{text}, gpus {view.gpus}" if view.gpus else text


def reference_backfill_views(
    head: GangRequest | None,
    head_waited_s: float,
    offers: Sequence[AgentOffer],
    drain_after_s: float,
    options: PlacementOptions,
    capacities: Sequence[AgentOffer] = (),
) -> Backfill:
    """The offers a gang behind ``head`` may use.

    - No head: everything.
    - The head fits what is offered now: everything except what the head's placement takes.
    - The head does not fit and has waited less than ``drain_after_s``: everything (backfill).
    - Otherwise everything but ``drain_set``: the agents kept for the head drain until it fits.
    """
    if head is None:
        return Backfill(tuple(offers))
    fit = reference_place_gang(head, offers, options)
    if isinstance(fit, GangFit):
        return Backfill(tuple(_subtract(offers, fit)), f"held for {head.job}, first in line")
    if head_waited_s < drain_after_s:
        return Backfill(tuple(offers))
    drained = reference_drain_set(head, offers, capacities, options)
    kept = tuple(v for v in offers if v.agent_id not in drained)
    return Backfill(
        kept,
        f"{head.job} has waited {head_waited_s:.0f} s for resources; {len(drained)} agent(s) are kept for it",
    )


def reference_drain_set(
    head: GangRequest,
    offers: Sequence[AgentOffer],
    capacities: Sequence[AgentOffer],
    options: PlacementOptions,
) -> set[str]:
    """The agents kept for a head of line that waited too long, by brute force (written apart
    from ``placement_backfill.drain_set``, which it checks): rank each agent the head can use by its
    freest view now (most GPUs, then cpus, mem, then id), keep those whose whole capacity is
    known, and try every count from one up: the first ranked prefix whose capacities hold the
    head is the answer. None holds it (or no capacity is known): every agent it can use."""
    usable = [v for v in offers if eligible_for(head, v, options)]
    rank: dict[str, tuple[float, float, float, str, str]] = {}
    for view in usable:
        key = (-view.gpus, -view.cpus, -view.mem_mib, view.agent_id, view.role)
        rank[view.agent_id] = min(key, rank.get(view.agent_id, key))
    whole = {c.agent_id: c for c in capacities}
    ranked = [whole[agent] for agent in sorted(rank, key=rank.__getitem__) if agent in whole]
    for count in range(1, len(ranked) + 1):
        if isinstance(reference_place_gang(head, ranked[:count], options), GangFit):
            return {c.agent_id for c in ranked[:count]}
    return set(rank)


def _without(ranges: Sequence[tuple[int, int]], taken: set[int]) -> tuple[tuple[int, int], ...]:
    """``ranges`` less the ``taken`` ports: each range's ports listed one by one, and every run
    of consecutive ones left made a range again (in the order given)."""
    runs: list[tuple[int, int]] = []
    for begin, end in ranges:
        run: list[int] = []
        for port in [*range(begin, end + 1), None]:  # None: the range's end closes the last run
            if port is not None and port not in taken:
                run.append(port)
            elif run:
                runs.append((run[0], run[-1]))
                run = []
    return tuple(runs)


def _subtract(offers: Sequence[AgentOffer], fit: GangFit) -> list[AgentOffer]:
    by_agent: dict[tuple[str, str], list[SlotAssignment]] = {}
    for assignment in fit.assignments:
        by_agent.setdefault((assignment.agent_id, assignment.role), []).append(assignment)
    out = []
    for view in offers:
        taken = by_agent.get((view.agent_id, view.role))
        if not taken:
            out.append(view)
            continue
        cpus = view.cpus - sum(a.resources.cpus for a in taken)
        mem = view.mem_mib - sum(a.resources.mem_mib for a in taken)
        gpus = view.gpus - sum(a.resources.gpus for a in taken)
        ports = _without(view.ports, {a.port for a in taken})
        out.append(replace(view, cpus=max(0.0, cpus), mem_mib=max(0.0, mem), gpus=max(0, gpus), ports=ports))
    return out
