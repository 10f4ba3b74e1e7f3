"""What applying a plan preempts: the controller's passes after it, foretold (pure).

The controller looks at jobs in priority order (higher first, then by name); one that asks
for room the backend does not have free preempts running jobs of lower priority
(``core.run.preemption.choose``, the same choice). The plan can say so only where it knows
the room: the backend's whole capacity as data (``Room``; the local backend's configured or
detected capacity, which the CLI passes in), the tasks alive now from the state folder, and
what each of them takes from its applied spec. On a backend whose room is a cluster's offers
(Mesos) it cannot, and says nothing (docs/reference.md#job-semantics).

Foretold as the passes after the apply do it, until every job that asks for room has it or
waits: a task that stops anyway (a suspended, deleted, moved or already preempted job's) gives
its room back; each job that will ask for room (``Want``: a create, a resume, a re-run, a move
here, a job waiting now) takes it in that order where it is free, else preempts what
``choose`` chooses and takes the room its victims leave (the first pass preempts for the first
such job, a later one for the next, once the first has its room: the plan names them all). A
running job restarted or resized keeps its room (it relaunches where it ran).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from tfdeclare.core.run.preemption import Candidate, choose
from tfdeclare.core.run.tasks import TaskKey
from tfdeclare.core.spec.model import TENSORBOARD_KEY
from tfdeclare.core.spec.resources import ZERO, Resources


@dataclass(frozen=True, slots=True)
class Room:
    """What the plan needs to foretell preemption on its backend: what it offers in all, and
    the policy that keeps jobs from being preempted (``policy.nonPreemptiblePriority``, the
    priority classes marked ``preemptible: false``)."""

    total: Resources
    non_preemptible: int | None = None
    protected_classes: frozenset[str] = frozenset()


@dataclass(frozen=True, slots=True)
class Held:
    """A job with tasks alive now, and what they hold."""

    job: str
    priority: int  # after the plan is applied
    resources: Resources
    tasks: tuple[TaskKey, ...]
    started_at: float  # when its tasks started
    since: float | None  # its last checkpoint after that, when known
    grace_s: float
    stopping: bool  # its tasks stop anyway (suspended, deleted, moved, preempted before)
    preemptible: bool  # the policy does not protect it


@dataclass(frozen=True, slots=True)
class Want:
    """A job that will ask for room: what it needs in all."""

    job: str
    priority: int
    need: Resources


@dataclass(frozen=True, slots=True)
class Preempted:
    """A job the plan's apply preempts, for ``by``."""

    job: str
    by: str
    priority: int  # the victim's
    by_priority: int
    tasks: tuple[TaskKey, ...]  # its tasks that stop
    grace_s: float

    @property
    def why(self) -> str:
        return f"priority {self.by_priority} > {self.priority}"


def foretell(wants: Sequence[Want], held: Sequence[Held], room: Room, now: float) -> tuple[Preempted, ...]:
    """The preemptions applying the plan leads to (module doc)."""
    free = room.total
    for each in held:
        if not each.stopping:  # a stopping job's room comes back
            free = free - each.resources
    candidates = {
        each.job: Candidate(
            each.job, each.priority, each.resources, len(each.tasks), each.started_at, each.since
        )
        for each in held
        if not each.stopping and each.preemptible and each.resources != ZERO
    }
    by_name = {each.job: each for each in held}
    out: list[Preempted] = []
    for want in sorted(wants, key=lambda w: (-w.priority, w.job)):
        if not want.need.fits_in(room.total):
            continue  # it never fits: unschedulable, nothing is preempted for it
        if not want.need.fits_in(free):
            short = Resources(
                max(0.0, round(want.need.cpus - free.cpus, 3)),
                max(0, want.need.mem_mib - free.mem_mib),
                max(0, want.need.gpus - free.gpus),
            )
            if not any(c.priority < want.priority for c in candidates.values()):
                continue  # it waits: nothing of lower priority runs (the common case: one priority)
            others = [c for name, c in sorted(candidates.items()) if name != want.job]
            choice = choose(short, want.priority, others, now)
            if not choice.victims:
                continue  # it waits: nothing of lower priority frees enough
            for victim in choice.victims:
                gone = by_name[victim.job]
                out.append(
                    Preempted(victim.job, want.job, victim.priority, want.priority, gone.tasks, gone.grace_s)
                )
                del candidates[victim.job]
                free = free + victim.resources
        free = free - want.need  # it runs there once the room is back
    return tuple(out)


def priority_of(canonical: Mapping[str, Any]) -> int:
    return int(canonical["spec"].get("priority", 0))


def needs(canonical: Mapping[str, Any], keys: tuple[TaskKey, ...]) -> Resources:
    """What the tasks ``keys`` of ``canonical`` take, read off the canonical form (a plan of
    many new jobs builds no ``JobSpec`` for it)."""
    spec = canonical["spec"]
    counts: dict[TaskKey | str, int] = {}
    for key in keys:  # tasks of one role take the same: counted, then scaled
        role: TaskKey | str = key if key == TENSORBOARD_KEY else key.role.value
        counts[role] = counts.get(role, 0) + 1
    total = ZERO
    for role, count in counts.items():
        if isinstance(role, str):
            entry = spec["replicas"].get(role, {}).get("resources")
        else:
            entry = (spec.get("tensorboard") or {}).get("resources")
        if entry:
            total = total + Resources(float(entry["cpus"]), int(entry["mem"]), int(entry["gpus"])).scaled(
                count
            )
    return total
