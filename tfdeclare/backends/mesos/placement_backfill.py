"""FIFO with backfill: what a gang behind the head of the queue may use, and what drains.

This module owns the queue's placement policy, pure: a gang behind the head of the queue may
use what the head cannot (``backfill``; ``backfill_views`` over a sequence of offers); once the
head has waited longer than a bound, the fewest agents that would hold the head when empty (the
freest now first) are given to no one else: they drain for it, and the rest of the cluster keeps
backfilling (``drain_set``). Without known agent capacities, every agent the head could use
drains.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace

from tfdeclare.backends.mesos.placement import place_gang
from tfdeclare.backends.mesos.placement_index import AgentIndex, AgentKey
from tfdeclare.backends.mesos.placement_rules import eligible_for
from tfdeclare.backends.mesos.placement_values import (
    EPS,
    AgentOffer,
    GangFit,
    PlacementOptions,
    SlotAssignment,
    remove_ports,
)
from tfdeclare.core.run.tasks import GangRequest


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
        if gpus >= need.gpus and cpus + EPS >= need.cpus:
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
