"""Gang placement over resource offers: pure, deterministic, table-tested.

This module owns ``place_gang``, the decision a cluster backend makes for a gang (all the tasks
of one job attempt): every slot gets an agent and one port from that agent's offered ranges, or
the whole gang is refused with a typed reason (all or nothing). A slot's previous ``host:port``
is reused when an agent with that hostname offers that port; a *pinned* slot (a task restarting
alone, whose address the others' TF_CONFIG names) gets it or the gang waits
(``WAITING_FOR_ADDRESS``). GPUs are whole; tasks without GPUs stay off agents that have GPUs
unless ``cpu_tasks_on_gpu_agents``. ``pack`` fills few agents (the tightest agent that can take
every remaining slot, else the largest), ``spread`` uses as many agents as possible (the least
used, then the emptiest). ``place_avoiding_windows`` keeps a gang off agents inside a
maintenance window when it fits elsewhere. The same input always gives the same answer: agents
are ordered by id, slots by key, and every tie is broken by agent id.

Its neighbours, each pure: ``placement_values`` (what placement reads and answers, port
ranges), ``placement_rules`` (constraints and GPU rules), ``placement_index`` (the offered
agents, indexed: ``AgentIndex``), ``placement_bins`` and ``placement_decision`` (one decision's
state and its choice of agent), ``placement_capacity`` (``never_fits``: can a gang ever be
placed) and ``placement_backfill`` (FIFO with backfill: ``backfill``, ``drain_set``).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from tfdeclare.backends.mesos.placement_bins import Bin, Rest, slot_order
from tfdeclare.backends.mesos.placement_decision import Decision
from tfdeclare.backends.mesos.placement_index import AgentIndex, AgentKey, as_index
from tfdeclare.backends.mesos.placement_rules import gpu_rules_allow, matches
from tfdeclare.backends.mesos.placement_values import (
    AgentOffer,
    GangFit,
    NoFit,
    PlacementOptions,
    SlotAssignment,
    describe_agent,
)
from tfdeclare.core.enums import PlacementStrategy
from tfdeclare.core.run.tasks import GangRequest, SlotRequest, UnplacedReason
from tfdeclare.core.spec.resources import Resources


def place_gang(
    request: GangRequest,
    offers: AgentIndex | Sequence[AgentOffer],
    options: PlacementOptions = PlacementOptions(),
) -> GangFit | NoFit:
    """Place every slot of ``request`` on the offered agents, or none (see the module doc).

    ``offers``: an ``AgentIndex`` kept between decisions costs only the agents looked at; a
    sequence is indexed first (its cost in the number of agents)."""
    agents = as_index(offers)
    decision = Decision(agents, request.constraints, options)
    spread = request.strategy is PlacementStrategy.SPREAD
    slots = sorted(request.slots, key=slot_order)
    wanted = {(s.previous.host, s.previous.port) for s in slots if s.previous is not None}
    assignments: list[SlotAssignment] = []
    for position, slot in enumerate(slots):
        resources = slot.resources
        chosen: Bin | None = None
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
                    resources, Rest.of(slots[position:])
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
        flag
        for flag in (False, True)
        if any(gpu_rules_allow(flag, s.resources, options) for s in request.slots)
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
