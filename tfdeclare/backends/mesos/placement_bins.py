"""One gang's placement in progress, per agent: ``Bin``, and the tests on free amounts.

This module owns the state a ``place_gang`` decision keeps for an agent it took a slot on
(``Bin``: free cpus, mem, GPUs and port ranges, and how many of the gang's slots it holds), the
slots still to place summed (``Rest``, for ``pack``'s "takes the whole rest" test), the tests
on an agent's free amounts (``view_fits``, ``holds_all``) and the order slots are placed in
(``slot_order``: slots with a previous address first, then the largest).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from tfdeclare.backends.mesos.placement_index import AgentKey
from tfdeclare.backends.mesos.placement_rules import gpu_rules_allow, is_gpu_agent
from tfdeclare.backends.mesos.placement_values import EPS, AgentOffer, PlacementOptions
from tfdeclare.core.run.tasks import SlotRequest
from tfdeclare.core.spec.keys import TaskKey
from tfdeclare.core.spec.resources import Resources


@dataclass(slots=True)
class Bin:
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
    def of(cls, view: AgentOffer) -> Bin:
        key = (view.agent_id, view.role)
        return cls(view, key, is_gpu_agent(view), view.cpus, view.mem_mib, view.gpus, list(view.ports))

    def fits(self, resources: Resources) -> bool:
        return (
            resources.cpus <= self.cpus + EPS
            and resources.mem_mib <= self.mem + EPS
            and resources.gpus <= self.gpus
            and bool(self.free_ports)
        )

    def allows(self, resources: Resources, options: PlacementOptions) -> bool:
        return gpu_rules_allow(self.gpu_agent, resources, options)

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

    def holds_all(self, rest: Rest, options: PlacementOptions) -> bool:
        return holds_all(self.gpu_agent, self.cpus, self.mem, self.gpus, self.free_ports, rest, options)


def view_fits(view: AgentOffer, resources: Resources) -> bool:
    return (
        resources.cpus <= view.cpus + EPS
        and resources.mem_mib <= view.mem_mib + EPS
        and resources.gpus <= view.gpus
        and bool(view.ports)
    )


def slot_order(slot: SlotRequest) -> tuple[int, int, float, int, TaskKey]:
    r = slot.resources
    return (0 if slot.previous is not None else 1, -r.gpus, -r.cpus, -r.mem_mib, slot.key)


@dataclass(frozen=True, slots=True)
class Rest:
    """The slots still to place, summed (for ``pack``'s "takes the whole rest" test)."""

    need: Resources
    count: int
    any_gpu: bool
    any_cpu_only: bool

    @classmethod
    def of(cls, slots: Sequence[SlotRequest]) -> Rest:
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


def holds_all(
    gpu_agent: bool,
    cpus: float,
    mem: float,
    gpus: int,
    ports: Sequence[tuple[int, int]],
    rest: Rest,
    options: PlacementOptions,
) -> bool:
    """Can this agent take every slot still to place (summed), GPU rules included?"""
    if rest.any_gpu and not gpu_agent:
        return False
    if rest.any_cpu_only and gpu_agent and not options.cpu_tasks_on_gpu_agents:
        return False
    need = rest.need
    return (
        need.cpus <= cpus + EPS
        and need.mem_mib <= mem + EPS
        and need.gpus <= gpus
        and rest.count <= sum(end - begin + 1 for begin, end in ports)
    )
