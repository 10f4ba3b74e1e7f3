"""The offers the Mesos backend holds, and the agents' sizes, as placement sees them.

This module owns turning an ``Offer`` into what placement needs (cpus, mem, whole GPUs and
port ranges, unreserved or reserved to the offer's role, with the offered entries kept to
launch from; text attributes; the agent's HTTP address; read by ``amounts``), the pool of held offers (per
(agent, role) views that combine every held offer of that agent, kept current in placement's
``AgentIndex`` as offers come and go, minus what placements reserved), and what each agent
*has* (for "can this ever fit?").

What an agent has is its total, as the master's operator API lists it (``GET_AGENTS``),
never what it offers: on a shared cluster other frameworks hold part of every agent, and an
offer shows only what is free now (issue 14: a 3-cpu job was "Unschedulable" on a 4-cpu
agent while another framework held 2). The totals come from the master rather than from the
sum of our offers and our tasks because the scheduler API never shows what *other*
frameworks hold. Until the totals are known (or when the master will not list its agents),
nothing is judged unschedulable: a gang waits.

The pool is not thread-safe: it belongs to the backend's loop thread.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from tfdeclare.backends.mesos.amounts import Amounts, agent_url, attributes_of, merge_ranges, usable
from tfdeclare.backends.mesos.events import Offer
from tfdeclare.backends.mesos.maintenance import window_of
from tfdeclare.backends.mesos.placement_index import AgentIndex
from tfdeclare.backends.mesos.placement_values import AgentOffer, PortRanges, SlotAssignment, remove_ports

AgentRole = tuple[str, str]


@dataclass(frozen=True, slots=True)
class HeldOffer:
    offer_id: str
    agent_id: str
    hostname: str
    role: str
    cpus: float
    mem_mib: float
    gpus: int
    ports: PortRanges
    attributes: dict[str, str]
    agent_url: str
    received_at: float
    hold_until: float
    # the usable resources as offered (with their reservations), to launch from
    resources: tuple[dict[str, Any], ...] = ()
    window: tuple[float, float | None] | None = None  # the offer's ``unavailability``

    @classmethod
    def parse(cls, offer: Offer, now: float, hold_s: float) -> HeldOffer:
        role = offer.role or "*"
        amounts = Amounts.of(offer.resources, (role,))
        return cls(
            offer_id=offer.id,
            agent_id=offer.agent_id,
            hostname=offer.hostname,
            role=role,
            cpus=amounts.cpus,
            mem_mib=amounts.mem_mib,
            gpus=amounts.gpus,
            ports=amounts.ports,
            attributes=attributes_of(offer.attributes),
            agent_url=agent_url(offer.raw),
            received_at=now,
            hold_until=now + hold_s,
            resources=tuple(r for r in offer.resources if usable(r, (role,))),
            window=_window(offer.raw.get("unavailability")),
        )


def _window(raw: Any) -> tuple[float, float | None] | None:
    window = window_of(raw)
    return None if window is None else (window.start, window.end)


@dataclass(slots=True)
class OfferPool:
    offers: dict[str, HeldOffer] = field(default_factory=dict)
    by_agent: dict[AgentRole, set[str]] = field(default_factory=dict)
    capacity: dict[str, AgentOffer] = field(default_factory=dict)  # what each agent has in all
    agents_known: bool = False  # ``capacity`` holds the master's list of agents
    gpu_agents: set[str] = field(default_factory=set)
    agent_urls: dict[str, str] = field(default_factory=dict)
    capacity_version: int = 0  # changes whenever ``capacity`` or ``quota`` does
    quota: dict[str, dict[str, float]] = field(default_factory=dict)  # role -> its quota limits

    # One view per (agent, role), kept current as offers come and go, indexed for placement.
    _index: AgentIndex = field(default_factory=AgentIndex)

    def add(self, held: HeldOffer) -> None:
        self.offers[held.offer_id] = held
        self.by_agent.setdefault((held.agent_id, held.role), set()).add(held.offer_id)
        if held.gpus > 0:
            self._mark_gpu_agent(held.agent_id)
        if held.agent_url:
            self.agent_urls[held.agent_id] = held.agent_url
        self._refresh((held.agent_id, held.role))

    def _mark_gpu_agent(self, agent_id: str) -> None:
        if agent_id in self.gpu_agents:
            return
        self.gpu_agents.add(agent_id)
        for agent, role in self._index.keys_of(agent_id):
            view = self._index.get(agent, role)
            if view is not None:
                self._index.put(replace(view, gpu_agent=True))

    def set_agents(self, capacities: Iterable[AgentOffer]) -> None:
        """The master's list of agents and what each has (``GET_AGENTS``)."""
        capacity = {c.agent_id: c for c in capacities}
        for c in capacity.values():
            if c.gpus > 0:
                self._mark_gpu_agent(c.agent_id)
        if capacity != self.capacity or not self.agents_known:
            self.capacity = capacity
            self.capacity_version += 1
        self.agents_known = True

    def set_quota(self, quota: dict[str, dict[str, float]]) -> None:
        """The roles' quota limits (``GET_QUOTA``)."""
        if quota != self.quota:
            self.quota = quota
            self.capacity_version += 1

    def forget_agents(self) -> None:
        """The list is out of date (a new subscription, maybe to another master)."""
        self.agents_known = False
        self.capacity_version += 1

    def _refresh(self, key: AgentRole) -> None:
        ids = self.by_agent.get(key)
        if not ids:
            self._index.drop(*key)
            return
        held = [self.offers[i] for i in ids]
        first = held[0]
        self._index.put(
            AgentOffer(
                key[0],
                first.hostname,
                round(sum(h.cpus for h in held), 3),
                sum(h.mem_mib for h in held),
                sum(h.gpus for h in held),
                first.ports if len(held) == 1 else merge_ranges(r for h in held for r in h.ports),
                first.attributes,
                key[1],
                gpu_agent=key[0] in self.gpu_agents,
                window=next((h.window for h in held if h.window is not None), None),
            )
        )

    def remove(self, offer_id: str) -> HeldOffer | None:
        held = self.offers.pop(offer_id, None)
        if held is not None:
            key = (held.agent_id, held.role)
            ids = self.by_agent.get(key)
            if ids is not None:
                ids.discard(offer_id)
                if not ids:
                    del self.by_agent[key]
            self._refresh(key)
        return held

    def clear(self) -> list[HeldOffer]:
        """Forget every held offer (void after a re-subscribe); returns them."""
        held = list(self.offers.values())
        self.offers.clear()
        self.by_agent.clear()
        self._index = AgentIndex()
        return held

    def of_agent(self, agent_id: str, role: str) -> list[HeldOffer]:
        return [self.offers[i] for i in sorted(self.by_agent.get((agent_id, role), ()))]

    def views(self, reserved: Sequence[SlotAssignment] = ()) -> list[AgentOffer]:
        """One view per (agent, role) with held offers, minus the ``reserved`` assignments."""
        return list(self.index(reserved))

    def index(self, reserved: Sequence[SlotAssignment] = ()) -> AgentIndex:
        """``views`` as placement takes them: the pool's index, amended by the ``reserved``
        assignments (valid until the pool changes)."""
        if not reserved:
            return self._index
        taken: dict[AgentRole, list[SlotAssignment]] = {}
        for assignment in reserved:
            taken.setdefault((assignment.agent_id, assignment.role), []).append(assignment)
        changes: dict[AgentRole, AgentOffer | None] = {}
        for key, assignments in taken.items():
            view = self._index.get(*key)
            if view is None:
                continue
            changes[key] = replace(
                view,
                cpus=max(0.0, round(view.cpus - sum(a.resources.cpus for a in assignments), 3)),
                mem_mib=max(0.0, view.mem_mib - sum(a.resources.mem_mib for a in assignments)),
                gpus=max(0, view.gpus - sum(a.resources.gpus for a in assignments)),
                ports=remove_ports(view.ports, {a.port for a in assignments}),
            )
        return self._index.amended(changes)

    def covers(
        self, agent_id: str, role: str, assignments: Sequence[SlotAssignment]
    ) -> list[HeldOffer] | None:
        """The held offers of (agent, role) when together they hold ``assignments`` (resources
        and each port); None otherwise."""
        held = self.of_agent(agent_id, role)
        if not held:
            return None
        cpus = sum(h.cpus for h in held)
        mem = sum(h.mem_mib for h in held)
        gpus = sum(h.gpus for h in held)
        need_cpus = sum(a.resources.cpus for a in assignments)
        need_mem = sum(a.resources.mem_mib for a in assignments)
        need_gpus = sum(a.resources.gpus for a in assignments)
        if need_cpus > cpus + 1e-6 or need_mem > mem + 1e-6 or need_gpus > gpus:
            return None
        for assignment in assignments:
            if not any(b <= assignment.port <= e for h in held for b, e in h.ports):
                return None
        return held

    def capacities(self) -> list[AgentOffer]:
        """What every agent has in all (empty until the master listed them)."""
        return list(self.capacity.values()) if self.agents_known else []
