"""Gang placement over resource offers: pure, deterministic, table-tested.

This module owns three decisions a cluster backend makes for a gang (all the tasks of one job
attempt), each a pure function of its inputs:

- ``place_gang``: every slot gets an agent and one port from that agent's offered ranges, or
  the whole gang is refused with a typed reason (all or nothing). A slot's previous
  ``host:port`` is reused when an agent with that hostname offers that port; a *pinned* slot
  (a task restarting alone, whose address the others' TF_CONFIG names) gets it or the gang
  waits (``WAITING_FOR_ADDRESS``). GPUs are whole;
  tasks without GPUs stay off agents that have GPUs unless ``cpu_tasks_on_gpu_agents``.
  ``pack`` fills few agents (the tightest agent that can take every remaining slot, else the
  largest), ``spread`` uses as many agents as possible (the least used, then the emptiest).
- ``never_fits``: a cheap necessary check against what each agent has in all (not what is free
  now: other frameworks may hold the rest), so a gang that can never be placed is reported
  as such instead of waiting forever, and one that fits an agent waits for it.
- ``backfill`` (``backfill_views`` over a sequence): the FIFO-with-backfill policy. A gang
  behind the head of the queue may use what the head cannot; once the head has waited longer
  than a bound, the fewest agents that would hold the head when empty (the freest now first)
  are given to no one else: they drain for it, and the rest of the cluster keeps backfilling
  (``drain_set``). Without known agent capacities, every agent the head could use drains.

The same input always gives the same answer: agents are ordered by id, slots by key, and
every tie is broken by agent id.

It also owns ``AgentIndex``, the offered agents as these decisions read them: bucketed by free
GPUs and sorted by free cpus and mem, kept current between decisions (``put``/``drop``) by the
backend's offer pool and the scheduling simulator, so a decision looks only at the agents that
could take a slot (a bisection and a short scan per bucket) instead of sorting every agent and
making an object per agent. Own code over the standard library's ``bisect`` on plain lists
(at 10,000 agents an insert is a move of at most 80 KB; ``sortedcontainers`` pays off only far
beyond that), because the order is placement's own (pack: the tightest agent; spread and
"the largest": the freest, the lowest agent id among equals). Measured alongside the
straightforward version (``make bench-placement``, docs/benchmarks.md, issue 23): at 10,000
agents the median decision went from 22 ms to 0.021 ms, the p99 from 657 ms to 5.7 ms, and the
young collections in 300 decisions from 18,700 to 0. ``tests/test_placement_index.py`` checks
that the answers are the same.
"""

from __future__ import annotations

import bisect
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from tfdeclare.core.enums import ConstraintOperator, PlacementStrategy
from tfdeclare.core.run.tasks import GangRequest, SlotRequest, UnplacedReason
from tfdeclare.core.spec.keys import AttributeConstraint, TaskKey
from tfdeclare.core.spec.resources import Resources

_EPS = 1e-6

PortRanges = tuple[tuple[int, int], ...]


@dataclass(frozen=True, slots=True)
class AgentOffer:
    """What one agent offers now (every held offer of that agent and role combined)."""

    agent_id: str
    hostname: str
    cpus: float
    mem_mib: float
    gpus: int
    ports: PortRanges
    attributes: Mapping[str, str] = field(default_factory=dict)
    role: str = "*"
    gpu_agent: bool = False  # the agent has GPUs, even if none are offered now
    # A maintenance window scheduled for the agent (its offers' ``unavailability``): (start,
    # end) in unix seconds, end None when open-ended; None: none scheduled.
    window: tuple[float, float | None] | None = None

    @property
    def port_count(self) -> int:
        return sum(end - begin + 1 for begin, end in self.ports)


@dataclass(frozen=True, slots=True)
class PlacementOptions:
    cpu_tasks_on_gpu_agents: bool = False


@dataclass(frozen=True, slots=True)
class SlotAssignment:
    key: TaskKey
    agent_id: str
    hostname: str
    role: str
    port: int
    resources: Resources


@dataclass(frozen=True, slots=True)
class GangFit:
    assignments: tuple[SlotAssignment, ...]


@dataclass(frozen=True, slots=True)
class NoFit:
    reason: UnplacedReason
    message: str


# ---- constraints and eligibility -----------------------------------------------------------


def matches(attributes: Mapping[str, str], constraints: Sequence[AttributeConstraint]) -> bool:
    """Every constraint holds for these agent attributes."""
    for constraint in constraints:
        value = attributes.get(constraint.attribute)
        operator = constraint.operator
        if operator is ConstraintOperator.EXISTS:
            ok = value is not None
        elif operator is ConstraintOperator.DOES_NOT_EXIST:
            ok = value is None
        elif operator is ConstraintOperator.IN:
            ok = value is not None and value in constraint.values
        else:  # NOT_IN: an agent without the attribute is not in the list
            ok = value is None or value not in constraint.values
        if not ok:
            return False
    return True


def allowed(view: AgentOffer, resources: Resources, options: PlacementOptions) -> bool:
    """May a task with ``resources`` go to this agent at all (GPU rules only)?"""
    if resources.gpus > 0:
        return view.gpu_agent or view.gpus > 0
    return options.cpu_tasks_on_gpu_agents or not (view.gpu_agent or view.gpus > 0)


def eligible_for(request: GangRequest, view: AgentOffer, options: PlacementOptions) -> bool:
    """Could any slot of ``request`` ever use this agent (constraints and GPU rules)?"""
    if not matches(view.attributes, request.constraints):
        return False
    return any(allowed(view, slot.resources, options) for slot in request.slots)


# ---- the offered agents, indexed -------------------------------------------------------------

AgentKey = tuple[str, str]  # (agent id, role): one view per key

# One agent in a bucket of the index: (cpus, mem, agent id, role, view). Keys are unique, so
# comparisons never reach the view; a bucket sorted by these tuples is sorted by
# (cpus, mem, agent id, role), and ``bisect`` compares them in C.
_Entry = tuple[float, float, str, str, AgentOffer]
_Bucket = tuple[bool, int]  # (a GPU agent, free GPUs)


def _gpu_flag(view: AgentOffer) -> bool:
    return view.gpu_agent or view.gpus > 0


def _entry(view: AgentOffer) -> _Entry:
    return (view.cpus, view.mem_mib, view.agent_id, view.role, view)


class _Tables:
    """What an ``AgentIndex`` and the indexes amended from it share."""

    __slots__ = ("buckets", "by_host", "order", "version", "views", "windowed")

    def __init__(self) -> None:
        self.views: dict[AgentKey, AgentOffer] = {}
        self.buckets: dict[_Bucket, list[_Entry]] = {}  # each sorted
        self.order: list[AgentKey] | None = None  # the keys sorted (made when first needed)
        self.by_host: dict[str, list[AgentKey]] | None = None  # sorted keys per hostname (likewise)
        self.version = 0  # changes with every put and drop
        self.windowed: set[AgentKey] = set()  # the keys whose view has a maintenance window


class AgentIndex:
    """The offered agents, one ``AgentOffer`` per (agent id, role), indexed for ``place_gang``.

    The agents are kept in buckets by (GPU agent or not, free GPUs), each sorted by (free cpus,
    free mem, agent id, role), so a decision looks only at the agents that could take a slot:
    a bisection to the first with enough cpus for ``pack``, the last (the freest) for
    ``spread`` and for "the largest", in the few buckets with enough GPUs. ``put`` and
    ``drop`` keep it current as offers come and go (the Mesos backend's offer pool keeps
    one between decisions; the scheduling simulator likewise), so a decision costs the agents
    it looks at, not every agent offering (issue 23: building a bin per agent per decision
    made 21 young collections a decision at 10,000 agents, and the collector's passes over
    the backend's long-lived heap decided the p99).

    ``amended`` gives a copy with some views replaced or removed (what a reservation or the
    head of the queue takes) in the cost of the changes: it shares the tables and is valid
    until the index it came from changes.
    """

    __slots__ = ("_at", "_changes", "_t")

    def __init__(self, views: Iterable[AgentOffer] = ()) -> None:
        self._t = _Tables()
        self._changes: dict[AgentKey, AgentOffer | None] = {}
        self._at = -1  # the version amended at; -1: the index itself (it may change)
        views_by_key, buckets = self._t.views, self._t.buckets
        for view in views:
            key = (view.agent_id, view.role)
            if key in views_by_key:
                raise ValueError(f"two views of agent {view.agent_id} for role {view.role}")
            views_by_key[key] = view
            if view.window is not None:
                self._t.windowed.add(key)
            buckets.setdefault((_gpu_flag(view), view.gpus), []).append(_entry(view))
        for entries in buckets.values():
            entries.sort()

    # -- changing it (the index itself only)

    def put(self, view: AgentOffer) -> None:
        """Add the view of (agent id, role), or replace the one there."""
        t = self._mutable()
        key = (view.agent_id, view.role)
        old = t.views.get(key)
        if old is not None:
            self._unfile(old)
            if t.by_host is not None and old.hostname != view.hostname:
                _remove_key(t.by_host, old.hostname, key)
        elif t.order is not None:
            bisect.insort(t.order, key)
        t.views[key] = view
        if view.window is not None:
            t.windowed.add(key)
        else:
            t.windowed.discard(key)
        bisect.insort(t.buckets.setdefault((_gpu_flag(view), view.gpus), []), _entry(view))
        if t.by_host is not None and (old is None or old.hostname != view.hostname):
            bisect.insort(t.by_host.setdefault(view.hostname, []), key)
        t.version += 1

    def drop(self, agent_id: str, role: str) -> None:
        """Remove the view of (agent id, role), if there is one."""
        t = self._mutable()
        key = (agent_id, role)
        old = t.views.pop(key, None)
        if old is None:
            return
        self._unfile(old)
        t.windowed.discard(key)
        if t.order is not None:
            del t.order[bisect.bisect_left(t.order, key)]
        if t.by_host is not None:
            _remove_key(t.by_host, old.hostname, key)
        t.version += 1

    def _unfile(self, old: AgentOffer) -> None:
        """Take ``old`` out of its bucket."""
        t = self._t
        bucket = (_gpu_flag(old), old.gpus)
        entries = t.buckets[bucket]
        del entries[bisect.bisect_left(entries, (old.cpus, old.mem_mib, old.agent_id, old.role))]
        if not entries:
            del t.buckets[bucket]

    def _mutable(self) -> _Tables:
        if self._at != -1:
            raise TypeError("an amended AgentIndex cannot change: change the index it came from")
        return self._t

    def amended(self, changes: Mapping[AgentKey, AgentOffer | None]) -> AgentIndex:
        """This index with the views of ``changes``' keys replaced (None: removed); each key
        must be one it holds, and a replacement keeps its agent, role and hostname."""
        t = self._tables()
        for key, view in changes.items():
            old = t.views[key]  # KeyError: not one it holds
            if view is not None and (view.agent_id, view.role, view.hostname) != (*key, old.hostname):
                raise ValueError(f"a change of {key} must keep its agent, role and hostname")
        out = AgentIndex.__new__(AgentIndex)
        out._t, out._changes, out._at = t, {**self._changes, **changes}, t.version
        return out

    # -- reading it

    def _tables(self) -> _Tables:
        if self._at not in (-1, self._t.version):
            raise RuntimeError("the AgentIndex this was amended from has changed since")
        return self._t

    def get(self, agent_id: str, role: str) -> AgentOffer | None:
        key = (agent_id, role)
        if key in self._changes:
            return self._changes[key]
        return self._tables().views.get(key)

    def _order(self) -> list[AgentKey]:
        t = self._tables()
        if t.order is None:
            t.order = sorted(t.views)
        return t.order

    def keys_on_host(self, hostname: str) -> list[AgentKey]:
        """The keys of the views of ``hostname``, sorted (amended views included)."""
        t = self._tables()
        if t.by_host is None:
            t.by_host = {}
            for key in self._order():
                t.by_host.setdefault(t.views[key].hostname, []).append(key)
        return t.by_host.get(hostname, [])

    def keys_of(self, agent_id: str) -> list[AgentKey]:
        """The keys of ``agent_id`` (one per role it offers for; amended views included)."""
        order = self._order()
        out = []
        for i in range(bisect.bisect_left(order, (agent_id,)), len(order)):
            if order[i][0] != agent_id:
                break
            out.append(order[i])
        return out

    def __iter__(self) -> Iterator[AgentOffer]:
        """Every view, in (agent id, role) order."""
        views, changes = self._tables().views, self._changes
        if not changes:
            return map(views.__getitem__, self._order())
        current = (changes.get(key, views[key]) for key in self._order())
        return (view for view in current if view is not None)

    def windowed(self) -> list[AgentOffer]:
        """The views with a maintenance window, in (agent id, role) order: the cost of those
        alone (a replacement keeps its agent, so amended views are looked up by key)."""
        t = self._tables()
        keys = t.windowed | {key for key, view in self._changes.items() if view is not None and view.window}
        views = (self.get(*key) for key in sorted(keys))
        return [view for view in views if view is not None and view.window is not None]

    def __len__(self) -> int:
        removed = sum(1 for view in self._changes.values() if view is None)
        return len(self._tables().views) - removed


def _remove_key(lists: dict[str, list[AgentKey]], name: str, key: AgentKey) -> None:
    keys = lists[name]
    del keys[bisect.bisect_left(keys, key)]
    if not keys:
        del lists[name]


def as_index(offers: AgentIndex | Iterable[AgentOffer]) -> AgentIndex:
    """``offers`` indexed (an index as it is)."""
    return offers if isinstance(offers, AgentIndex) else AgentIndex(offers)


# ---- placing one gang ------------------------------------------------------------------------


@dataclass(slots=True)
class _Bin:
    """An agent this decision changed (took a slot on) or was given amended: its state now."""

    view: AgentOffer
    key: AgentKey  # ties are broken by it
    gpu_agent: bool
    cpus: float
    mem: float
    gpus: int
    free_ports: list[tuple[int, int]]
    used: int = 0  # slots of this gang placed here

    @classmethod
    def of(cls, view: AgentOffer) -> _Bin:
        key = (view.agent_id, view.role)
        return cls(view, key, _gpu_flag(view), view.cpus, view.mem_mib, view.gpus, list(view.ports))

    def fits(self, resources: Resources) -> bool:
        return (
            resources.cpus <= self.cpus + _EPS
            and resources.mem_mib <= self.mem + _EPS
            and resources.gpus <= self.gpus
            and bool(self.free_ports)
        )

    def allows(self, resources: Resources, options: PlacementOptions) -> bool:
        return _allows(self.gpu_agent, resources, options)

    def has_port(self, port: int) -> bool:
        return any(begin <= port <= end for begin, end in self.free_ports)

    def lowest_port(self, avoid: set[int]) -> int | None:
        for begin, end in self.free_ports:
            for port in range(begin, end + 1):
                if port not in avoid:
                    return port
        return None

    def take(self, resources: Resources, port: int) -> None:
        self.cpus -= resources.cpus
        self.mem -= resources.mem_mib
        self.gpus -= resources.gpus
        self.used += 1
        remaining: list[tuple[int, int]] = []
        for begin, end in self.free_ports:
            if begin <= port <= end:
                if begin < port:
                    remaining.append((begin, port - 1))
                if port < end:
                    remaining.append((port + 1, end))
            else:
                remaining.append((begin, end))
        self.free_ports = remaining

    def holds_all(self, rest: _Rest, options: PlacementOptions) -> bool:
        return _holds_all(self.gpu_agent, self.cpus, self.mem, self.gpus, self.free_ports, rest, options)


def _allows(gpu_agent: bool, resources: Resources, options: PlacementOptions) -> bool:
    """The GPU rules: GPU tasks on GPU agents only, others off them unless allowed."""
    if resources.gpus > 0:
        return gpu_agent
    return options.cpu_tasks_on_gpu_agents or not gpu_agent


def _view_fits(view: AgentOffer, resources: Resources) -> bool:
    return (
        resources.cpus <= view.cpus + _EPS
        and resources.mem_mib <= view.mem_mib + _EPS
        and resources.gpus <= view.gpus
        and bool(view.ports)
    )


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
        # ``Resources.__add__``'s arithmetic (cpus rounded at each step, in slot order, so
        # the sums are the same to the last bit) without a ``Resources`` per step.
        cpus, mem, gpus = 0.0, 0, 0
        gpu = cpu_only = False
        for slot in slots:
            r = slot.resources
            cpus = round(cpus + r.cpus, 3)
            mem += r.mem_mib
            gpus += r.gpus
            if r.gpus > 0:
                gpu = True
            else:
                cpu_only = True
        return cls(Resources(cpus, mem, gpus), len(slots), gpu, cpu_only)


def _holds_all(
    gpu_agent: bool,
    cpus: float,
    mem: float,
    gpus: int,
    ports: Sequence[tuple[int, int]],
    rest: _Rest,
    options: PlacementOptions,
) -> bool:
    """Can this agent take every slot still to place (summed), GPU rules included?"""
    if rest.any_gpu and not gpu_agent:
        return False
    if rest.any_cpu_only and gpu_agent and not options.cpu_tasks_on_gpu_agents:
        return False
    need = rest.need
    return (
        need.cpus <= cpus + _EPS
        and need.mem_mib <= mem + _EPS
        and need.gpus <= gpus
        and rest.count <= sum(end - begin + 1 for begin, end in ports)
    )


class _Decision:
    """One ``place_gang``: the index as given, and bins for the agents the decision changed.

    An agent without a bin is as the index has it (unused by this gang), so the strategies
    ask the index's buckets for the best such agent and compare it with the bins:

    - ``pack`` keeps filling the agents the gang uses (the fullest first); a new agent is the
      tightest unused one that takes every slot still to place (by free cpus, mem, GPUs, key),
      else the largest unused one that takes this slot;
    - ``spread`` takes the agent with the fewest slots of the gang, then the most free cpus,
      then mem, then key.

    These are the answers the straightforward placement gave (a bin per agent, sorted or in a
    heap each decision: ``tests/placement_reference.py``); ``tests/test_placement_index.py``
    checks they are the same on random clusters and gangs.
    """

    __slots__ = ("agents", "bins", "changes", "constraints", "options", "tables")

    def __init__(
        self, agents: AgentIndex, constraints: Sequence[AttributeConstraint], options: PlacementOptions
    ) -> None:
        self.agents = agents
        self.tables = agents._tables()
        self.changes = agents._changes
        self.constraints = constraints
        self.options = options
        self.bins: dict[AgentKey, _Bin] = {}
        for key, view in self.changes.items():
            if view is not None and (not constraints or matches(view.attributes, constraints)):
                self.bins[key] = _Bin.of(view)

    def _as_indexed(self, key: AgentKey, view: AgentOffer) -> bool:
        """Is this agent of the index usable as the index has it (no bin, not amended away,
        matching the constraints)?"""
        if key in self.bins or key in self.changes:
            return False
        return not self.constraints or matches(view.attributes, self.constraints)

    def bin_of(self, key: AgentKey) -> _Bin:
        b = self.bins.get(key)
        if b is None:
            b = self.bins[key] = _Bin.of(self.tables.views[key])
        return b

    def at_address(self, host: str, port: int, resources: Resources) -> _Bin | None:
        """The first agent (by key) of ``host`` that offers ``port`` and takes ``resources``."""
        for key in self.agents.keys_on_host(host):
            b = self.bins.get(key)
            if b is None:
                view = self.tables.views[key]
                if not self._as_indexed(key, view):
                    continue
                b = _Bin.of(view)  # kept only if chosen
            if b.has_port(port) and b.allows(resources, self.options) and b.fits(resources):
                return self.bins.setdefault(key, b)
        return None

    def pack_fill(self, resources: Resources) -> _Bin | None:
        """The fullest agent the gang uses already that takes ``resources``."""
        filling = [
            b
            for b in self.bins.values()
            if b.used and b.allows(resources, self.options) and b.fits(resources)
        ]
        if not filling:
            return None
        return min(filling, key=lambda b: (-b.used, b.cpus, b.mem, b.key))

    def pack_open(self, resources: Resources, rest: _Rest) -> _Bin | None:
        """A new agent for ``pack``: the tightest that takes the whole rest, else the largest."""
        options = self.options
        best: tuple[float, float, int, AgentKey] | None = None
        for b in self.bins.values():
            if (
                not b.used
                and b.allows(resources, options)
                and b.fits(resources)
                and b.holds_all(rest, options)
            ):
                candidate = (b.cpus, b.mem, b.gpus, b.key)
                if best is None or candidate < best:
                    best = candidate
        low = rest.need.cpus - _EPS
        least_gpus = max(resources.gpus, rest.need.gpus)
        for (gpu_agent, gpus), entries in self.tables.buckets.items():
            if gpus < least_gpus or not _allows(gpu_agent, resources, options):
                continue
            for i in range(bisect.bisect_left(entries, (low,)), len(entries)):
                cpus, mem, agent_id, role, view = entries[i]
                if best is not None and (cpus, mem, gpus) > best[:3]:
                    break  # the rest of this bucket is larger than the best so far
                key = (agent_id, role)
                if not self._as_indexed(key, view) or not _view_fits(view, resources):
                    continue
                if _holds_all(gpu_agent, cpus, mem, gpus, view.ports, rest, options):
                    candidate = (cpus, mem, gpus, key)
                    if best is None or candidate < best:
                        best = candidate
                    break  # the first in a bucket is its tightest
        if best is not None:
            return self.bin_of(best[3])
        return self._freest(resources, spread=False)

    def spread_pick(self, resources: Resources) -> _Bin | None:
        """The agent with the fewest slots of the gang, then the most free cpus, mem, key."""
        return self._freest(resources, spread=True)

    def _freest(self, resources: Resources, spread: bool) -> _Bin | None:
        """``spread``: the least by (slots of the gang, -cpus, -mem, key) of the agents that
        take ``resources``; else the largest unused one, by (-cpus, -mem, -GPUs, key). Among
        the bins, and from each bucket with enough GPUs its freest agent (most cpus, then mem,
        then the lowest key), unused: both orders rank a bucket's agents that way."""
        options = self.options
        best: tuple[Any, ...] | None = None
        chosen: _Bin | None = None
        for b in self.bins.values():
            if (b.used and not spread) or not b.allows(resources, options) or not b.fits(resources):
                continue
            rank = (b.used, -b.cpus, -b.mem, b.key) if spread else (-b.cpus, -b.mem, -b.gpus, b.key)
            if best is None or rank < best:
                best, chosen = rank, b
        indexed: AgentKey | None = None  # the best is an agent as the index has it
        for (gpu_agent, gpus), entries in self.tables.buckets.items():
            if gpus < resources.gpus or not _allows(gpu_agent, resources, options):
                continue
            found: _Entry | None = None
            end = len(entries)
            while end > 0 and found is None:
                cpus, mem = entries[end - 1][:2]
                if resources.cpus > cpus + _EPS:
                    break  # every agent before it has fewer cpus
                # The agents with these free cpus and mem (many, on a cluster of one kind of
                # machine), from the lowest key: the first usable one that fits is the freest.
                start = bisect.bisect_left(entries, (cpus, mem))
                for i in range(start, end):
                    entry = entries[i]
                    if self._as_indexed((entry[2], entry[3]), entry[4]) and _view_fits(entry[4], resources):
                        found = entry
                        break
                end = start
            if found is None:
                continue
            key = (found[2], found[3])
            rank = (0, -found[0], -found[1], key) if spread else (-found[0], -found[1], -gpus, key)
            if best is None or rank < best:
                best, chosen, indexed = rank, None, key
        if indexed is not None and chosen is None:
            return self.bin_of(indexed)
        return chosen


def place_gang(
    request: GangRequest,
    offers: AgentIndex | Sequence[AgentOffer],
    options: PlacementOptions = PlacementOptions(),
) -> GangFit | NoFit:
    """Place every slot of ``request`` on the offered agents, or none (see the module doc).

    ``offers``: an ``AgentIndex`` kept between decisions costs only the agents looked at; a
    sequence is indexed first (its cost in the number of agents)."""
    agents = as_index(offers)
    decision = _Decision(agents, request.constraints, options)
    spread = request.strategy is PlacementStrategy.SPREAD
    slots = sorted(request.slots, key=_slot_order)
    wanted = {(s.previous.host, s.previous.port) for s in slots if s.previous is not None}
    assignments: list[SlotAssignment] = []
    for position, slot in enumerate(slots):
        resources = slot.resources
        chosen: _Bin | None = None
        port: int | None = None
        if slot.previous is not None:
            previous = slot.previous
            chosen = decision.at_address(previous.host, previous.port, resources)
            if chosen is not None:
                port = previous.port
            elif slot.pinned:  # restarting alone: its address or nothing
                return NoFit(
                    UnplacedReason.WAITING_FOR_ADDRESS,
                    f"{slot.key.name} restarts alone at {previous}: waiting for an offer of that agent "
                    f"that holds port {previous.port} and {resources.describe()}",
                )
        if chosen is None:
            if spread:
                chosen = decision.spread_pick(resources)
            else:
                # Keep filling the agents this gang already uses, the fullest first.
                chosen = decision.pack_fill(resources) or decision.pack_open(
                    resources, _Rest.of(slots[position:])
                )
            if chosen is None:
                constraints = request.constraints
                views = (
                    [v for v in agents if matches(v.attributes, constraints)] if constraints else list(agents)
                )
                return _no_fit(request, slot, views, options)
        if port is None:
            host = chosen.view.hostname
            avoid = {p for h, p in wanted if h == host}
            port = chosen.lowest_port(avoid)
            if port is None:  # only ports other slots want back: take one anyway
                port = chosen.lowest_port(set())
            assert port is not None  # fits() checked there is a free port
        wanted.discard((chosen.view.hostname, port))
        chosen.take(resources, port)
        v = chosen.view
        assignments.append(SlotAssignment(slot.key, v.agent_id, v.hostname, v.role, port, resources))
    return GangFit(tuple(sorted(assignments, key=lambda a: a.key)))


def outside_windows(agents: AgentIndex, now: float) -> AgentIndex | None:
    """The offered agents less those inside a maintenance window that has not ended (a gang
    placed there would be cut off by it); None when no agent is inside one."""
    inside: dict[AgentKey, AgentOffer | None] = {
        (view.agent_id, view.role): None
        for view in agents.windowed()
        if view.window is not None and (view.window[1] is None or view.window[1] > now)
    }
    return agents.amended(inside) if inside else None


def place_avoiding_windows(
    request: GangRequest, agents: AgentIndex, now: float, options: PlacementOptions = PlacementOptions()
) -> tuple[GangFit | NoFit, bool]:
    """``place_gang`` on the agents outside every maintenance window when the gang fits there,
    else on all of them; and whether the answer uses an agent inside a window."""
    outside = outside_windows(agents, now)
    if outside is not None:
        fit = place_gang(request, outside, options)
        if isinstance(fit, GangFit):
            return fit, False
    fit = place_gang(request, agents, options)
    inside = outside is not None and isinstance(fit, GangFit)
    if inside:
        assert isinstance(fit, GangFit)
        windowed = {v.agent_id for v in agents.windowed()}
        inside = any(a.agent_id in windowed for a in fit.assignments)
    return fit, inside


def _no_fit(
    request: GangRequest, slot: SlotRequest, views: Iterable[AgentOffer], options: PlacementOptions
) -> NoFit:
    # ``eligible_for`` for every view, its parts inlined: a refusal reads every agent offering.
    flags = {
        flag for flag in (False, True) if any(_allows(flag, s.resources, options) for s in request.slots)
    }
    constraints = request.constraints
    usable = [
        v
        for v in views
        if (v.gpu_agent or v.gpus > 0) in flags and (not constraints or matches(v.attributes, constraints))
    ]
    need = request.total
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
            f"{describe_agent(largest)}"
        )
    return NoFit(
        reason,
        f"needs {need.describe()} for {len(request.slots)} task(s) ({slot.key.name} needs "
        f"{slot.resources.describe()}); {where}",
    )


def describe_agent(view: AgentOffer) -> str:
    text = f"cpus {view.cpus:g}, mem {view.mem_mib:g} MiB"
    return f"{text}, gpus {view.gpus}" if view.gpus else text


# ---- can it ever fit? ------------------------------------------------------------------------


def never_fits(
    request: GangRequest, capacities: Sequence[AgentOffer], options: PlacementOptions = PlacementOptions()
) -> str | None:
    """Why ``request`` can never be placed on agents of these capacities (what each has in
    all), or None when it might be. Necessary conditions only (no bin packing); unknown when
    no agent is known."""
    if not capacities:
        return None
    matching = [c for c in capacities if matches(c.attributes, request.constraints)]
    if not matching:
        described = ", ".join(
            f"{c.attribute} {c.operator.value}" + (f" {list(c.values)}" if c.values else "")
            for c in request.constraints
        )
        return f"no agent matches the placement constraints ({described})"
    gpu_hosts = [c for c in matching if c.gpu_agent or c.gpus > 0]
    cpu_hosts = (
        matching
        if options.cpu_tasks_on_gpu_agents
        else [c for c in matching if not (c.gpu_agent or c.gpus > 0)]
    )
    checked: set[Resources] = set()
    for slot in sorted(request.slots, key=lambda s: s.key):
        if slot.resources in checked:
            continue  # slots of one role share their resources: check each shape once
        checked.add(slot.resources)
        hosts = gpu_hosts if slot.resources.gpus > 0 else cpu_hosts
        if not hosts:
            what = "GPUs" if slot.resources.gpus else "no GPUs (cpuTasksOnGpuAgents is off)"
            return f"{slot.key.name} needs an agent with {what}, and the cluster has no such agent"
        if not any(agent_holds(c, slot.resources) for c in hosts):
            largest = largest_agent(hosts)
            return (
                f"{slot.key.name} needs {slot.resources.describe()} but the largest agent has "
                f"{describe_agent(largest)}"
            )
    gpu_slots = [s for s in request.slots if s.resources.gpus > 0]
    cpu_slots = [s for s in request.slots if s.resources.gpus == 0]
    for group, label in ((gpu_slots, "GPU tasks"), (cpu_slots, "tasks")):
        if not group:
            continue
        hosts = gpu_hosts if group is gpu_slots else cpu_hosts
        need = Resources(0.0, 0, 0)
        for slot in group:
            need = need + slot.resources
        have = Resources(
            round(sum(c.cpus for c in hosts), 3),
            int(sum(c.mem_mib for c in hosts) + _EPS),
            sum(c.gpus for c in hosts),
        )
        ports = sum(c.port_count for c in hosts)
        if not need.fits_in(have):
            return (
                f"its {label} need {need.describe()} together, more than all usable agents "
                f"have ({have.describe()})"
            )
        if len(group) > ports:
            return f"its {len(group)} {label} need a port each; usable agents offer {ports} in all"
    return None


def _as_resources(view: AgentOffer) -> Resources:
    return Resources(view.cpus, int(view.mem_mib + _EPS), view.gpus)


def agent_holds(agent: AgentOffer, resources: Resources) -> bool:
    """Could this agent, with ``agent`` saying what it has in all, ever run one task of
    ``resources`` (and give it a port)?"""
    return resources.fits_in(_as_resources(agent)) and agent.port_count > 0


def largest_agent(agents: Iterable[AgentOffer]) -> AgentOffer:
    """The largest of ``agents`` (not empty): most cpus, then mem, then GPUs, then agent id."""
    return max(agents, key=lambda c: (c.cpus, c.mem_mib, c.gpus, c.agent_id))


# ---- FIFO with backfill -----------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Backfill:
    """What a gang that is not the head of the queue may use now, and why."""

    views: tuple[AgentOffer, ...]
    note: str = ""  # set when something was withheld for the head


def backfill(
    head: GangRequest | None,
    head_waited_s: float,
    agents: AgentIndex,
    drain_after_s: float,
    options: PlacementOptions = PlacementOptions(),
    capacities: Sequence[AgentOffer] = (),
) -> tuple[AgentIndex, str]:
    """The agents a gang behind ``head`` may use, and a note when something was withheld.

    - No head: everything.
    - The head fits what is offered now: everything except what the head's placement takes.
    - The head does not fit and has waited less than ``drain_after_s``: everything (backfill).
    - Otherwise everything but ``drain_set``: the agents kept for the head drain until it fits.
    """
    if head is None:
        return agents, ""
    fit = place_gang(head, agents, options)
    if isinstance(fit, GangFit):
        return agents.amended(_taken(agents, fit)), f"held for {head.job}, first in line"
    if head_waited_s < drain_after_s:
        return agents, ""
    drained = drain_set(head, agents, capacities, options)
    removed: dict[AgentKey, AgentOffer | None] = {
        key: None for agent_id in drained for key in agents.keys_of(agent_id)
    }
    return (
        agents.amended(removed),
        f"{head.job} has waited {head_waited_s:.0f} s for resources; {len(drained)} agent(s) are kept for it",
    )


def backfill_views(
    head: GangRequest | None,
    head_waited_s: float,
    offers: Sequence[AgentOffer],
    drain_after_s: float,
    options: PlacementOptions = PlacementOptions(),
    capacities: Sequence[AgentOffer] = (),
) -> Backfill:
    """``backfill`` over a sequence of offers: what is left of them, in their order."""
    agents, note = backfill(head, head_waited_s, AgentIndex(offers), drain_after_s, options, capacities)
    kept = (agents.get(view.agent_id, view.role) for view in offers)
    return Backfill(tuple(view for view in kept if view is not None), note)


def drain_set(
    head: GangRequest,
    offers: Iterable[AgentOffer],
    capacities: Sequence[AgentOffer],
    options: PlacementOptions = PlacementOptions(),
) -> set[str]:
    """The agents kept for a head of line that waited too long: of the agents offering now
    that it can use, the freest first (GPUs, cpus, mem, then id), the fewest whose whole
    capacities (``capacities``: the largest seen per agent) would hold it. Nothing is placed
    on them, so they only get freer: they stay the freest and the head is not starved. When
    the capacities are unknown or cannot hold it, every agent it can use."""
    usable = [v for v in offers if eligible_for(head, v, options)]
    everything = {v.agent_id for v in usable}
    size = {c.agent_id: c for c in capacities}
    order: list[AgentOffer] = []  # the capacities of the usable agents, the freest now first
    seen: set[str] = set()
    for view in sorted(usable, key=lambda v: (-v.gpus, -v.cpus, -v.mem_mib, v.agent_id, v.role)):
        whole = size.get(view.agent_id)
        if whole is not None and view.agent_id not in seen:
            seen.add(view.agent_id)
            order.append(whole)

    def holds(count: int) -> bool:
        return isinstance(place_gang(head, order[:count], options), GangFit)

    need = head.total
    low, gpus, cpus = len(order), 0, 0.0
    for count, whole in enumerate(order):  # fewer agents than the sums need cannot hold it
        gpus, cpus = gpus + whole.gpus, cpus + whole.cpus
        if gpus >= need.gpus and cpus + _EPS >= need.cpus:
            low = count
            break
    # The fewest that hold it: a galloping search up from ``low`` (the answer is usually near),
    # then a binary search (a longer prefix holds what a shorter one does). ``low`` never holds.
    step, high = 1, low + 1
    while not (high <= len(order) and holds(high)):
        if high >= len(order):
            return everything
        low, step = high, step * 2
        high = min(len(order), low + step)
    while high - low > 1:
        middle = (low + high) // 2
        if holds(middle):
            high = middle
        else:
            low = middle
    return {whole.agent_id for whole in order[:high]}


def _taken(agents: AgentIndex, fit: GangFit) -> dict[AgentKey, AgentOffer | None]:
    """The views of the agents ``fit`` uses, less what it takes there."""
    by_agent: dict[AgentKey, list[SlotAssignment]] = {}
    for assignment in fit.assignments:
        by_agent.setdefault((assignment.agent_id, assignment.role), []).append(assignment)
    out: dict[AgentKey, AgentOffer | None] = {}
    for (agent_id, role), taken in by_agent.items():
        view = agents.get(agent_id, role)
        assert view is not None  # the fit was made on these agents
        cpus = view.cpus - sum(a.resources.cpus for a in taken)
        mem = view.mem_mib - sum(a.resources.mem_mib for a in taken)
        gpus = view.gpus - sum(a.resources.gpus for a in taken)
        ports = remove_ports(view.ports, {a.port for a in taken})
        out[agent_id, role] = replace(
            view, cpus=max(0.0, cpus), mem_mib=max(0.0, mem), gpus=max(0, gpus), ports=ports
        )
    return out


def remove_ports(ranges: PortRanges, ports: set[int]) -> PortRanges:
    """``ranges`` without ``ports`` (inclusive ranges, order kept)."""
    out: list[tuple[int, int]] = []
    for begin, end in ranges:
        start = begin
        for port in sorted(p for p in ports if begin <= p <= end):
            if start < port:
                out.append((start, port - 1))
            start = port + 1
        if start <= end:
            out.append((start, end))
    return tuple(out)
