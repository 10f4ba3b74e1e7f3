"""The master's records: frameworks, agents (as the master sees them), offers, tasks.

Owns plain data and the per-agent resource ledger (``AgentRecord``): every resource of
an agent is either available, offered, or used by a task, and
``available + offered + used == total`` always holds — ``ledger_error`` says when not.
The ``Registry`` is the only state that survives ``restart_master()``.
"""

from __future__ import annotations

import collections
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from .resources import Resources, ranges_size

if TYPE_CHECKING:
    from .agent import Agent
    from .clock import Handle
    from .wire import EventStream


@dataclass
class Offer:
    id: str
    framework_id: str
    agent_id: str
    role: str
    resources: Resources
    timer: Handle | None = None


@dataclass
class Task:
    task_id: str
    framework_id: str
    agent_id: str
    name: str
    role: str
    resources: Resources
    info: dict[str, Any]
    state: str = "TASK_STAGING"
    status_update_state: str | None = None
    status_update_uuid: bytes | None = None
    executor_id: str | None = None
    unreachable_time: float | None = None


@dataclass
class Subscription:
    stream_id: str
    stream: EventStream
    framework_id: str = ""
    heartbeat: Handle | None = None
    heartbeats_sent: int = 0
    events_sent: int = 0
    stalled: bool = False

    @property
    def open(self) -> bool:
        return not self.stream.closed


@dataclass
class Framework:
    id: str
    info: dict[str, Any]
    roles: list[str]
    capabilities: set[str]
    connected: bool = False
    active: bool = False
    recovered: bool = False
    subscription: Subscription | None = None
    offers: dict[str, Offer] = field(default_factory=dict)
    tasks: dict[str, Task] = field(default_factory=dict)
    unreachable_tasks: collections.OrderedDict[str, Task] = field(default_factory=collections.OrderedDict)
    completed_tasks: collections.deque[Task] = field(default_factory=lambda: collections.deque(maxlen=1000))
    failover_timer: Handle | None = None
    reregistered_time: float = 0.0
    registered_time: float = 0.0
    unregistered_time: float | None = None

    @property
    def partition_aware(self) -> bool:
        return "PARTITION_AWARE" in self.capabilities


@dataclass
class AgentRecord:
    """The master's view of a registered agent, with its resource ledger."""

    agent: Agent
    total: Resources
    connected: bool = True
    active: bool = True
    available: Resources = field(default_factory=Resources)
    offered: Resources = field(default_factory=Resources)
    used: dict[str, Resources] = field(default_factory=dict)
    used_total: Resources = field(default_factory=Resources)
    tasks: dict[tuple[str, str], Task] = field(default_factory=dict)
    offers: set[str] = field(default_factory=set)
    killed_tasks: set[tuple[str, str]] = field(default_factory=set)
    reregister_timer: Handle | None = None
    ping_misses: int = 0
    # DRAIN_AGENT / DEACTIVATE_AGENT: no offers until REACTIVATE_AGENT (``maintenance.py``)
    deactivated: bool = False

    def __post_init__(self) -> None:
        self.available = self.total.copy()

    @property
    def id(self) -> str:
        return self.agent.id

    @property
    def hostname(self) -> str:
        return self.agent.hostname

    @property
    def has_gpus(self) -> bool:
        return self.total.scalar("gpus") > 0

    @property
    def schedulable(self) -> bool:
        return self.connected and self.active and not self.deactivated

    # -- ledger -------------------------------------------------------------------------
    def offer(self, resources: Resources) -> None:
        self.available = self.available - resources
        self.offered = self.offered + resources

    def unoffer(self, resources: Resources) -> None:
        self.offered = self.offered - resources
        self.available = self.available + resources

    def convert(self, source: Resources, target: Resources) -> None:
        """Offered ``source`` becomes ``target`` (a RESERVE or UNRESERVE): same amounts,
        another reservation, in the agent's total and in what is offered."""
        self.total = self.total - source + target
        self.offered = self.offered - source + target

    def allocate(self, framework_id: str, resources: Resources, from_offer: bool = True) -> None:
        if from_offer:
            self.offered = self.offered - resources
        else:
            self.available = self.available - resources
        self.used[framework_id] = self.used.get(framework_id, Resources()) + resources
        self.used_total = self.used_total + resources

    def free(self, framework_id: str, resources: Resources) -> None:
        remaining = self.used.get(framework_id, Resources()) - resources
        if remaining:
            self.used[framework_id] = remaining
        else:
            self.used.pop(framework_id, None)
        self.used_total = self.used_total - resources
        self.available = self.available + resources

    def ledger_error(self) -> str | None:
        committed = self.used_total + self.offered
        if not self.total.contains(committed):
            return f"agent {self.id}: offered+used {committed} exceeds total {self.total}"
        if self.available + committed != self.total:
            return (
                f"agent {self.id}: available {self.available} + offered {self.offered} + "
                f"used {self.used_total} != total {self.total}"
            )
        parts = [self.available, self.offered, *self.used.values()]
        for name, value in self.total:
            if isinstance(value, tuple):
                counted = sum(ranges_size(part.ranges(name)) for part in parts)
                if counted != ranges_size(value):
                    return f"agent {self.id}: '{name}' ranges are double-booked or lost"
        return None


@dataclass
class Registry:
    """What a master persists: admitted agents and their unreachable / gone marks."""

    admitted: dict[str, Agent] = field(default_factory=dict)
    unreachable: dict[str, float] = field(default_factory=dict)
    gone: dict[str, float] = field(default_factory=dict)
    # Persisted as upstream persists them: each draining agent's DrainInfo, and the
    # maintenance schedule (``maintenance.py``)
    draining: dict[str, dict[str, Any]] = field(default_factory=dict)
    schedule: list[dict[str, Any]] = field(default_factory=list)
