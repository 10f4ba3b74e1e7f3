"""The queue of gangs waiting for offers, and the decision for one of them: pure.

This module owns the line that waiting jobs stand in (``Waiting``: by ``spec.priority``,
higher first, then by when each first asked; ``enqueue`` keeps that order)
and ``place_in_line``, the one decision the backend makes each time a job asks to be placed:
the job first in line before it (the head) is served by ``backfill`` (what the head's
placement takes, or the agents kept for it once it has waited ``drain_after_s``, are withheld;
``capacities``, the largest seen per agent, choose those), and the job is placed on what is
left by ``place_gang`` (all or nothing).

The backend calls it on its loop with the offers it holds (an ``AgentIndex`` its offer pool
keeps current, so a decision costs the agents it looks at); the scheduling simulator
(``bench/sched``) calls the very same function in virtual time, so what is measured there is
what the backend does.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from tfdeclare.backends.mesos.placement import place_avoiding_windows
from tfdeclare.backends.mesos.placement_backfill import backfill
from tfdeclare.backends.mesos.placement_index import AgentIndex, as_index
from tfdeclare.backends.mesos.placement_rules import eligible_for
from tfdeclare.backends.mesos.placement_values import AgentOffer, GangFit, NoFit, PlacementOptions
from tfdeclare.core.run.tasks import GangRequest
from tfdeclare.core.spec.resources import Resources


@dataclass(slots=True)
class Waiting:
    """A job in the FIFO queue of gangs waiting for offers."""

    request: GangRequest
    first_asked: float
    last_asked: float


@dataclass(frozen=True, slots=True)
class InLine:
    """The decision for one job: its placement (or why not), and what was withheld for the head."""

    fit: GangFit | NoFit
    note: str = ""
    # placed on an agent inside a maintenance window (no agent outside one would do)
    inside_window: bool = False


def enqueue(queue: dict[str, Waiting], job: str, waiting: Waiting) -> None:
    """Put ``waiting`` in line: after every job of its priority or higher (a dict keeps the
    order). The common case, a priority no higher than the last one's, appends."""
    queue.pop(job, None)
    last = next(reversed(queue.values()), None)
    if last is None or last.request.priority >= waiting.request.priority:
        queue[job] = waiting
        return
    entries = list(queue.items())
    at = next(i for i, (_, w) in enumerate(entries) if w.request.priority < waiting.request.priority)
    entries.insert(at, (job, waiting))
    queue.clear()
    queue.update(entries)


def head_of(
    queue: Iterable[tuple[str, Waiting]],
    before: float | None = None,
    exclude: str | None = None,
    priority: int = 0,
) -> tuple[str, Waiting] | None:
    """The job first in line (``queue`` in line order: ``enqueue``), optionally only one ahead
    of a job of ``priority`` that first asked at ``before`` (of a higher priority, or of the
    same one and asked earlier), never ``exclude``. A gang waiting for one agent's port (a
    task restarting alone, its slot ``pinned``) holds no line: no other agent is drained for it.
    """
    for job, waiting in queue:
        if job == exclude or any(slot.pinned for slot in waiting.request.slots):
            continue
        if before is not None:
            ahead = waiting.request.priority
            if ahead < priority or (ahead == priority and waiting.first_asked >= before):
                return None
        return job, waiting
    return None


def shortfall(request: GangRequest, offers: Iterable[AgentOffer]) -> Resources:
    """What the gang lacks beyond everything the held ``offers`` hold together (what the
    controller may preempt lower-priority jobs of ours for); zero when they hold enough in all
    and only how it is spread keeps the gang out (``rooms`` then tells where room is needed)."""
    cpus, mem, gpus = 0.0, 0.0, 0
    for offer in offers:
        cpus, mem, gpus = cpus + offer.cpus, mem + offer.mem_mib, gpus + offer.gpus
    need = request.total
    short = Resources(
        max(0.0, round(need.cpus - cpus, 3)),
        max(0, int(need.mem_mib - mem + 0.999)),
        max(0, need.gpus - gpus),
    )
    return short


def rooms(
    request: GangRequest,
    offers: Iterable[AgentOffer],
    capacities: Iterable[AgentOffer],
    options: PlacementOptions,
) -> tuple[tuple[str, Resources], ...]:
    """Every agent the gang may use (its constraints and GPU rules, judged on what the agent
    has in all: ``capacities``) with what its held ``offers`` hold free now, zero where none is
    held (its resources all taken: by our own tasks, perhaps), by agent id. The controller
    chooses victims so that the gang's tasks fit on these (``Unplaced.rooms``)."""
    free: dict[str, Resources] = {}
    for offer in offers:
        held = Resources(round(offer.cpus, 3), int(offer.mem_mib), offer.gpus)
        free[offer.agent_id] = free.get(offer.agent_id, Resources(0.0, 0, 0)) + held
    seen: set[str] = set()
    out = []
    for agent in sorted(capacities, key=lambda a: a.agent_id):
        if agent.agent_id in seen or not eligible_for(request, agent, options):
            continue
        seen.add(agent.agent_id)
        out.append((agent.agent_id, free.get(agent.agent_id, Resources(0.0, 0, 0))))
    return tuple(out)


def place_in_line(
    waiting: Waiting,
    queue: Mapping[str, Waiting],
    offers: AgentIndex | Sequence[AgentOffer],
    now: float,
    drain_after_s: float,
    options: PlacementOptions,
    capacities: Sequence[AgentOffer] = (),
) -> InLine:
    """Place ``waiting``'s gang on ``offers``, minus what its head of line is owed (module doc)."""
    request = waiting.request
    head = head_of(queue.items(), before=waiting.first_asked, exclude=request.job, priority=request.priority)
    agents, note = as_index(offers), ""
    if head is not None:
        first = head[1]
        agents, note = backfill(
            first.request, now - first.first_asked, agents, drain_after_s, options, capacities
        )
    fit, inside = place_avoiding_windows(request, agents, now, options)
    return InLine(fit, note, inside)
