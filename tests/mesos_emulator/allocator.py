"""Offer generation: who gets which agent's free resources, with filters and suppression.

Owns the allocator side of the hierarchical allocator that frameworks can observe:

* each cycle, every schedulable agent's free pool is offered to (framework, role) pairs —
  each gets what is unreserved and what is reserved to its role, the first takes all of it
  that it may have, the rest goes on to the next — agents are visited in a shuffled order (seeded, so runs are reproducible), and for
  each agent the pairs are tried in DRF order as the hierarchical allocator's two sorters
  do: roles by their dominant share of the cluster (the largest of their allocated
  cpus/mem/gpus/disk over the cluster's total), then frameworks within a role by theirs,
  ties by name; what is granted counts at once for the next agent of the same cycle;
* a framework is skipped for a role that is suppressed, for an agent with ``gpus`` if it
  lacks ``GPU_RESOURCES`` (``--filter_gpu_resources``), and while a refuse filter for
  (framework, role, agent) holds resources that *contain* the candidate (so more free
  resources get through);
* ``refuse_seconds``: absent or negative or non-finite -> 5 s, above 365 days -> 365 days,
  exactly 0 -> no filter; a filter lasts at least one allocation interval (MESOS-4302);
* min allocatable resources: ``cpus >= 0.01`` or ``mem >= 32`` unless the framework's
  ``offer_filters`` for the role say otherwise.
"""

from __future__ import annotations

import math
import random
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any, Protocol

from .clock import Clock
from .resources import Resources, split_key, to_fixed

DEFAULT_REFUSE_SECONDS = 5.0
MAX_REFUSE_SECONDS = 365 * 24 * 3600.0
_DEFAULT_MIN_ALLOCATABLE = [{"cpus": to_fixed(0.01)}, {"mem": to_fixed(32)}]


class SchedulableAgent(Protocol):
    @property
    def id(self) -> str: ...

    @property
    def total(self) -> Resources: ...

    @property
    def available(self) -> Resources: ...

    @property
    def has_gpus(self) -> bool: ...

    @property
    def schedulable(self) -> bool: ...


@dataclass
class RefuseFilter:
    resources: Resources
    expires: float


@dataclass
class FrameworkAllocation:
    roles: list[str]
    suppressed: set[str]
    gpu_aware: bool
    active: bool = False
    min_allocatable: dict[str, list[dict[str, int]]] = field(default_factory=dict)
    filters: dict[tuple[str, str], list[RefuseFilter]] = field(default_factory=dict)


def refuse_timeout(refuse_seconds: float | None) -> float:
    """Apply the hierarchical allocator's rules to a ``Filters.refuse_seconds`` value."""
    if refuse_seconds is None:
        return DEFAULT_REFUSE_SECONDS
    if refuse_seconds > MAX_REFUSE_SECONDS:
        return MAX_REFUSE_SECONDS
    if refuse_seconds < 0 or not math.isfinite(refuse_seconds):
        return DEFAULT_REFUSE_SECONDS
    return refuse_seconds


def min_allocatable_from_info(info: dict[str, Any]) -> dict[str, list[dict[str, int]]]:
    out: dict[str, list[dict[str, int]]] = {}
    for role, filters in info.get("offer_filters", {}).items():
        groups = filters.get("min_allocatable_resources", {}).get("quantities", [])
        out[role] = [
            {name: to_fixed(value["value"]) for name, value in group.get("quantities", {}).items()}
            for group in groups
        ]
    return out


def _at_least(available: Resources, name: str, minimum: int) -> bool:
    return name in {split_key(k)[0] for k in available.items} and to_fixed(available.scalar(name)) >= minimum


class Allocator:
    def __init__(self, clock: Clock, interval: float, filter_gpu_resources: bool, seed: int) -> None:
        self.clock = clock
        self.interval = interval
        self.filter_gpu_resources = filter_gpu_resources
        self.frameworks: dict[str, FrameworkAllocation] = {}
        self._rng = random.Random(seed)

    # -- framework lifecycle ---------------------------------------------------------
    def add_framework(
        self,
        framework_id: str,
        roles: list[str],
        suppressed: Iterable[str],
        gpu_aware: bool,
        min_allocatable: dict[str, list[dict[str, int]]] | None = None,
    ) -> None:
        self.frameworks[framework_id] = FrameworkAllocation(
            list(roles), set(suppressed), gpu_aware, True, dict(min_allocatable or {})
        )

    def update_framework(
        self,
        framework_id: str,
        roles: list[str],
        suppressed: Iterable[str],
        gpu_aware: bool,
        min_allocatable: dict[str, list[dict[str, int]]] | None = None,
    ) -> None:
        entry = self.frameworks[framework_id]
        new_suppressed = set(suppressed)
        for role in entry.suppressed - new_suppressed:
            self._clear_filters(entry, role)
        for role in set(entry.roles) - set(roles):
            self._clear_filters(entry, role)
        entry.roles = list(roles)
        entry.suppressed = new_suppressed
        entry.gpu_aware = gpu_aware
        entry.min_allocatable = dict(min_allocatable or {})

    def remove_framework(self, framework_id: str) -> None:
        self.frameworks.pop(framework_id, None)

    def set_active(self, framework_id: str, active: bool) -> None:
        entry = self.frameworks.get(framework_id)
        if entry is not None:
            entry.active = active

    # -- calls ------------------------------------------------------------------------
    def suppress(self, framework_id: str, roles: Iterable[str]) -> None:
        entry = self.frameworks[framework_id]
        chosen = set(roles) or set(entry.roles)
        entry.suppressed |= chosen

    def revive(self, framework_id: str, roles: Iterable[str]) -> None:
        entry = self.frameworks[framework_id]
        chosen = set(roles) or set(entry.roles)
        entry.suppressed -= chosen
        for role in chosen:
            self._clear_filters(entry, role)

    def refuse(
        self,
        framework_id: str,
        role: str,
        agent_id: str,
        resources: Resources,
        refuse_seconds: float | None,
    ) -> None:
        entry = self.frameworks.get(framework_id)
        timeout = refuse_timeout(refuse_seconds)
        if entry is None or timeout == 0 or not resources:
            return
        expires = self.clock.now() + max(self.interval, timeout)
        entry.filters.setdefault((role, agent_id), []).append(RefuseFilter(resources, expires))

    def _clear_filters(self, entry: FrameworkAllocation, role: str) -> None:
        for key in [key for key in entry.filters if key[0] == role]:
            del entry.filters[key]

    def is_filtered(self, framework_id: str, role: str, agent_id: str, resources: Resources) -> bool:
        entry = self.frameworks.get(framework_id)
        if entry is None:
            return False
        filters = entry.filters.get((role, agent_id))
        if not filters:
            return False
        now = self.clock.now()
        live = [f for f in filters if f.expires > now]
        if len(live) != len(filters):
            if live:
                entry.filters[(role, agent_id)] = live
            else:
                del entry.filters[(role, agent_id)]
        return any(f.resources.contains(resources) for f in live)

    def filter_count(self, framework_id: str) -> int:
        entry = self.frameworks.get(framework_id)
        if entry is None:
            return 0
        now = self.clock.now()
        return sum(1 for fs in entry.filters.values() for f in fs if f.expires > now)

    # -- allocation -------------------------------------------------------------------
    def _allocatable(self, entry: FrameworkAllocation, role: str, available: Resources) -> bool:
        groups = entry.min_allocatable.get(role, _DEFAULT_MIN_ALLOCATABLE)
        if not groups:
            return bool(available)
        for group in groups:
            if all(_at_least(available, name, minimum) for name, minimum in group.items()):
                return True
        return False

    def allocate(
        self,
        agents: Iterable[SchedulableAgent],
        allocated: Iterable[tuple[str, str, Resources]] = (),
    ) -> list[tuple[str, str, str, Resources]]:
        """One allocation cycle: returns (framework, role, agent, resources) grants.

        ``allocated``: what frameworks hold now, as (framework, role, resources) of every
        outstanding offer and live task, for the DRF order."""
        candidates = {
            fid: entry
            for fid, entry in sorted(self.frameworks.items())
            if entry.active and set(entry.roles) - entry.suppressed
        }
        if not candidates:
            return []
        agents = list(agents)
        cluster = Resources()
        for agent in agents:
            cluster = cluster + agent.total
        shares = _Shares(cluster)
        for fid, role, resources in allocated:
            shares.add(fid, role, resources)
        pool = [agent for agent in agents if agent.schedulable and agent.available]
        self._rng.shuffle(pool)
        grants: list[tuple[str, str, str, Resources]] = []
        pairs = [(role, fid) for fid, entry in candidates.items() for role in entry.roles]
        for agent in pool:
            remaining = agent.available
            for role, fid in sorted(pairs, key=shares.order):
                entry = candidates[fid]
                if role in entry.suppressed:
                    continue
                if agent.has_gpus and self.filter_gpu_resources and not entry.gpu_aware:
                    continue
                offered = remaining.for_role(role)  # unreserved, and reserved to this role
                if not offered or not self._allocatable(entry, role, offered):
                    continue
                if self.is_filtered(fid, role, agent.id, offered):
                    continue
                grants.append((fid, role, agent.id, offered))
                shares.add(fid, role, offered)
                remaining = remaining - offered
                if not remaining:
                    break
        return grants


_SHARED_SCALARS = ("cpus", "mem", "gpus", "disk")


class _Shares:
    """Allocations per role and per (role, framework), and their dominant shares (DRF)."""

    def __init__(self, cluster: Resources) -> None:
        self.cluster = cluster
        self.roles: dict[str, Resources] = {}
        self.frameworks: dict[tuple[str, str], Resources] = {}

    def add(self, fid: str, role: str, resources: Resources) -> None:
        self.roles[role] = self.roles.get(role, Resources()) + resources
        self.frameworks[(role, fid)] = self.frameworks.get((role, fid), Resources()) + resources

    def dominant(self, allocation: Resources | None) -> float:
        if allocation is None:
            return 0.0
        share = 0.0
        for name in _SHARED_SCALARS:
            total = self.cluster.scalar(name)
            if total > 0:
                share = max(share, allocation.scalar(name) / total)
        return share

    def order(self, pair: tuple[str, str]) -> tuple[float, float, str, str]:
        role, fid = pair
        return (self.dominant(self.roles.get(role)), self.dominant(self.frameworks.get(pair)), role, fid)
