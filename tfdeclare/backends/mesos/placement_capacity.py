"""Can a gang ever be placed? ``never_fits``, against what each agent has in all.

This module owns the cheap necessary check placement makes against the agents' whole
capacities (not what is free now: other frameworks may hold the rest), so a gang that can never
be placed is reported as such instead of waiting forever, and one that fits an agent waits for
it: constraints no agent matches, a task no agent could hold (``agent_holds``, with the
``largest_agent`` named), tasks that together need more than all usable agents have, or
more tasks of one size than the agents could hold side by side (``tasks_held``: a task runs
on one agent, so two agents of 4 cpus hold two tasks of 2.5, not three). Each is necessary
for a placement, so a gang said never to fit cannot fit; one that passes may still not (a
mix of sizes), and then waits for offers as before.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from tfdeclare.backends.mesos.placement_rules import matches
from tfdeclare.backends.mesos.placement_values import EPS, AgentOffer, PlacementOptions, describe_agent
from tfdeclare.core.run.tasks import GangRequest
from tfdeclare.core.spec.resources import Resources


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
            int(sum(c.mem_mib for c in hosts) + EPS),
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
    shapes: dict[Resources, int] = {}
    for slot in request.slots:
        shapes[slot.resources] = shapes.get(slot.resources, 0) + 1
    for shape, count in sorted(
        shapes.items(), key=lambda item: (item[0].cpus, item[0].mem_mib, item[0].gpus)
    ):
        hosts = gpu_hosts if shape.gpus > 0 else cpu_hosts
        room = sum(tasks_held(c, shape) for c in hosts)
        if count > room:
            return (
                f"its {count} tasks of {shape.describe()}: the usable agents hold {room} of them at "
                "most side by side (a task runs on one agent)"
            )
    return None


def tasks_held(agent: AgentOffer, shape: Resources) -> int:
    """How many tasks of ``shape`` the agent could ever run side by side (with ``agent``
    saying what it has in all; a port each)."""
    counts = [agent.port_count]
    for need, have in ((shape.cpus, agent.cpus), (shape.mem_mib, agent.mem_mib), (shape.gpus, agent.gpus)):
        if need > 0:
            counts.append(int(have / need + EPS))
    return max(0, min(counts))


def _as_resources(view: AgentOffer) -> Resources:
    return Resources(view.cpus, int(view.mem_mib + EPS), view.gpus)


def agent_holds(agent: AgentOffer, resources: Resources) -> bool:
    """Could this agent, with ``agent`` saying what it has in all, ever run one task of
    ``resources`` (and give it a port)?"""
    return resources.fits_in(_as_resources(agent)) and agent.port_count > 0


def largest_agent(agents: Iterable[AgentOffer]) -> AgentOffer:
    """The largest of ``agents`` (not empty): most cpus, then mem, then GPUs, then agent id."""
    return max(agents, key=lambda c: (c.cpus, c.mem_mib, c.gpus, c.agent_id))
