"""The simulated cluster: N agents with 8 GPUs each, what they offer, what runs where.

An agent offers everything free on it (no offer delays are modelled: the backend holds
offers while work waits, so what is free is what it sees). Other frameworks may hold part of
an agent (``foreign``), which is never offered to us; an agent may be reserved to a role, and
then offers with that role (our framework is subscribed with ``*`` and that role).
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field

from tfdeclare.backends.mesos.placement_index import AgentIndex
from tfdeclare.backends.mesos.placement_values import AgentOffer, remove_ports
from tfdeclare.core.spec.resources import Resources

GPUS_PER_AGENT = 8
CPUS_PER_AGENT = 64.0
MEM_PER_AGENT = 512 * 1024
PORTS = ((31000, 31999),)
CPUS_PER_GPU = 4.0
MEM_PER_GPU = 32 * 1024


def task_resources(gpus: int) -> Resources:
    return Resources(CPUS_PER_GPU * gpus, MEM_PER_GPU * gpus, gpus)


@dataclass(slots=True)
class Agent:
    agent_id: str
    role: str
    cpus: float
    mem: float
    gpus: int
    used_ports: set[int] = field(default_factory=set)
    foreign_gpus: int = 0  # held by other frameworks
    _view: AgentOffer | None = None
    changed: bool = True  # since the cluster's index last saw it

    def view(self) -> AgentOffer:
        if self._view is None:
            ports = remove_ports(PORTS, self.used_ports) if self.used_ports else PORTS
            self._view = AgentOffer(
                self.agent_id,
                self.agent_id,
                self.cpus,
                self.mem,
                self.gpus,
                ports,
                {},
                self.role,
                gpu_agent=True,
            )
        return self._view

    def take(self, resources: Resources, port: int) -> None:
        assert self.gpus >= resources.gpus and port not in self.used_ports
        self.cpus -= resources.cpus
        self.mem -= resources.mem_mib
        self.gpus -= resources.gpus
        self.used_ports.add(port)
        self._view = None
        self.changed = True

    def give(self, resources: Resources, port: int) -> None:
        self.cpus += resources.cpus
        self.mem += resources.mem_mib
        self.gpus += resources.gpus
        self.used_ports.discard(port)
        self._view = None
        self.changed = True

    def free_port(self) -> int:
        for begin, end in PORTS:
            for port in range(begin, end + 1):
                if port not in self.used_ports:
                    return port
        raise AssertionError("no free port")


@dataclass(slots=True)
class Cluster:
    agents: list[Agent]
    by_id: dict[str, Agent]
    _index: AgentIndex = field(default_factory=AgentIndex)

    @property
    def capacity_gpus(self) -> int:
        """The GPUs our framework may ever use (other frameworks' holdings excluded)."""
        return len(self.agents) * GPUS_PER_AGENT - sum(a.foreign_gpus for a in self.agents)

    def free_gpus(self) -> int:
        return sum(a.gpus for a in self.agents)

    def capacities(self) -> list[AgentOffer]:
        """What each agent has for us when empty (the backend's "largest seen" per agent)."""
        return [
            AgentOffer(
                a.agent_id,
                a.agent_id,
                CPUS_PER_AGENT - CPUS_PER_GPU * a.foreign_gpus,
                MEM_PER_AGENT - MEM_PER_GPU * a.foreign_gpus,
                GPUS_PER_AGENT - a.foreign_gpus,
                PORTS,
                {},
                a.role,
                gpu_agent=True,
            )
            for a in self.agents
        ]

    def views(self) -> AgentIndex:
        """One offer per agent with a free GPU (every task of these traces needs GPUs), in an
        index kept current as the backend's offer pool keeps its own: the agents that changed
        since the last call are put in again or dropped."""
        for agent in self.agents:
            if agent.changed:
                agent.changed = False
                if agent.gpus > 0:
                    self._index.put(agent.view())
                else:
                    self._index.drop(agent.agent_id, agent.role)
        return self._index


def make_cluster(
    agents: int,
    *,
    seed: int = 0,
    foreign_share: float = 0.0,
    reserved_share: float = 0.0,
    reserved_role: str = "ml",
) -> Cluster:
    """``agents`` agents; ``foreign_share`` of all GPUs held by other frameworks (whole GPUs
    scattered over half the agents, never offered); the first ``reserved_share`` of the agents
    reserved to ``reserved_role``."""
    rng = random.Random(seed)
    out: list[Agent] = []
    reserved = round(agents * reserved_share)
    for i in range(agents):
        role = reserved_role if i < reserved else "*"
        out.append(Agent(f"a{i:04d}", role, CPUS_PER_AGENT, MEM_PER_AGENT, GPUS_PER_AGENT))
    target = round(foreign_share * agents * GPUS_PER_AGENT)
    candidates = [a for a in out if a.role == "*"]
    rng.shuffle(candidates)
    candidates = candidates[: max(1, len(candidates) // 2)] if target else []
    while target > 0 and candidates:
        agent = rng.choice(candidates)
        if agent.gpus == 0:
            candidates.remove(agent)
            continue
        agent.gpus -= 1
        agent.cpus -= CPUS_PER_GPU
        agent.mem -= MEM_PER_GPU
        agent.foreign_gpus += 1
        target -= 1
    return Cluster(out, {a.agent_id: a for a in out})
