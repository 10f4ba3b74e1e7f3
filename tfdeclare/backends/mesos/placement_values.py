"""The values Mesos placement reads and answers with, and the port-range helpers.

This module owns what placement's pure functions exchange, all frozen: ``AgentOffer`` (what one
agent offers now, or has in all), ``PlacementOptions``, and the answers: ``GangFit`` (a
``SlotAssignment`` per slot) or ``NoFit`` (a typed reason and a message). Beside them the
helpers on ``PortRanges`` (inclusive ranges: ``remove_ports``), ``describe_agent`` for the
messages, and ``EPS``, the tolerance every comparison of cpus and mem uses.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from tfdeclare.core.run.tasks import UnplacedReason
from tfdeclare.core.spec.keys import TaskKey
from tfdeclare.core.spec.resources import Resources

EPS = 1e-6  # cpus and mem compare with this tolerance

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


def describe_agent(view: AgentOffer) -> str:
    text = f"cpus {view.cpus:g}, mem {view.mem_mib:g} MiB"
    return f"{text}, gpus {view.gpus}" if view.gpus else text


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
