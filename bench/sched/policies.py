"""The policies compared, each deciding what to launch after every event.

- ``tfdeclare``: the Mesos backend's own decision, ``place_in_line`` (FIFO by first ask, the
  head of line owed its placement or, once it has waited ``fifoBackfillSeconds``, the agents
  kept for it to drain; everyone else placed all-or-nothing by ``place_gang`` on what is left), asked for each
  waiting job in the order they first asked, as the controller does. Nothing is re-implemented.
- ``greedy``: TFMesos-style. Every job is its own framework; the allocator offers agents one by
  one (shuffled, as Mesos' hierarchical allocator does) to the framework holding the fewest GPUs
  (DRF); a framework launches as many of its pending tasks as the offer holds, and keeps what it
  got until all its tasks run (no timeout, nothing given back): partial gangs, deadlocks.
- ``greedy-timeout``: the same, run as a careful TFMesos operator runs it: a gang still partial
  ``GIVE_UP_S`` after its first task was placed is killed (everything it holds is given back)
  and submitted again after a random ``RETRY_S``-``2 x RETRY_S``, doubled for each time the job
  gave up already, at most ``MAX_RETRY_S`` (the randomness breaks the symmetry of gangs that
  gave up together). No deadlock lasts; the GPUs partial gangs hold while they wait are the cost,
  and gangs can still take turns holding parts of the cluster (a livelock) until the jobs ahead
  of them end.
- ``tfdeclare-drain-all`` (only when asked for): the backend's first policy, which drained every
  agent the head could use.
- ``fifo``: gang scheduling without backfill: jobs in arrival order, each placed whole by
  ``place_gang``; the first that does not fit stops everyone behind it.
"""

from __future__ import annotations

import heapq
import random
import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from bench.sched.cluster import Cluster, task_resources
from bench.sched.trace import Job
from tfdeclare.backends.mesos.config import MesosConfig
from tfdeclare.backends.mesos.placement import place_gang
from tfdeclare.backends.mesos.placement_values import GangFit, PlacementOptions
from tfdeclare.backends.mesos.queueing import Waiting, place_in_line
from tfdeclare.core.enums import Role
from tfdeclare.core.run.tasks import GangRequest, SlotRequest
from tfdeclare.core.spec.keys import TaskKey
from tfdeclare.core.spec.resources import Resources


def gang_request(job: Job) -> GangRequest:
    """A job as the controller asks for it: a chief and workers, ``task_gpus`` GPUs each."""
    resources = task_resources(job.task_gpus)
    slots = [SlotRequest(TaskKey(Role.CHIEF, 0), resources)]
    slots += [SlotRequest(TaskKey(Role.WORKER, i), resources) for i in range(job.tasks - 1)]
    return GangRequest(job.name, 0, tuple(slots))


@dataclass(slots=True)
class SimJob:
    job: Job
    request: GangRequest
    waiting: Waiting
    placed: list[tuple[str, Resources, int]] = field(default_factory=list)  # (agent, resources, port)
    start: float | None = None
    end: float | None = None
    ever_partial: bool = False

    @property
    def complete(self) -> bool:
        return len(self.placed) == self.job.tasks


Commit = Callable[[SimJob, str, Resources, int], None]
Release = Callable[[SimJob], None]  # give back everything a job holds (it waits again)


class Policy(ABC):
    name = ""

    def __init__(self) -> None:
        self.decision_s: list[float] = []  # CPU time of each decision (one job, or one offer for greedy)

    @abstractmethod
    def schedule(
        self, now: float, pending: Sequence[SimJob], cluster: Cluster, commit: Commit, release: Release
    ) -> None:
        """Place what it will of ``pending`` on ``cluster`` now, through ``commit`` (and give
        back what a job holds through ``release``)."""

    def wake_at(self, now: float, pending: Sequence[SimJob]) -> float | None:
        """When the policy would decide differently with no event in between (None: never)."""
        return None


class Tfdeclare(Policy):
    name = "tfdeclare"

    def __init__(self, drain_after_s: float = MesosConfig().fifo_backfill_s, capacities: bool = True) -> None:
        super().__init__()
        self.drain_after_s = drain_after_s
        self.options = PlacementOptions()
        self.capacities = capacities  # False: as before any capacity is known (every agent drains)

    def schedule(
        self, now: float, pending: Sequence[SimJob], cluster: Cluster, commit: Commit, release: Release
    ) -> None:
        queue = {j.job.name: j.waiting for j in pending}  # the backend's queue: first asked first
        capacities = cluster.capacities() if self.capacities else []  # the backend's "largest seen"
        free = cluster.free_gpus()
        # A job of the same shape as one refused since the last placement gets the same
        # answer (same head, same offers; gangs here are uniform, so fewer offers never fit
        # better): skipped, to keep the simulation fast. Not a policy: the answer is the same.
        refused: set[tuple[int, int]] = set()
        for sim in pending:
            job = sim.job
            shape = (job.gpus, job.task_gpus)
            if job.gpus > free or shape in refused:
                continue
            started = time.thread_time()
            decision = place_in_line(
                sim.waiting, queue, cluster.views(), now, self.drain_after_s, self.options, capacities
            )
            self.decision_s.append(time.thread_time() - started)
            if not isinstance(decision.fit, GangFit):
                refused.add(shape)
                continue
            for a in decision.fit.assignments:
                commit(sim, a.agent_id, a.resources, a.port)
            del queue[job.name]
            free -= job.gpus
            refused.clear()

    def wake_at(self, now: float, pending: Sequence[SimJob]) -> float | None:
        if not pending:
            return None
        at = pending[0].waiting.first_asked + self.drain_after_s  # the head starts draining
        return at if at > now else None


class Fifo(Policy):
    name = "fifo"

    def schedule(
        self, now: float, pending: Sequence[SimJob], cluster: Cluster, commit: Commit, release: Release
    ) -> None:
        options = PlacementOptions()
        for sim in pending:
            started = time.thread_time()
            fit = place_gang(sim.request, cluster.views(), options)
            self.decision_s.append(time.thread_time() - started)
            if not isinstance(fit, GangFit):
                return
            for a in fit.assignments:
                commit(sim, a.agent_id, a.resources, a.port)


class Greedy(Policy):
    name = "greedy"

    def __init__(self, seed: int = 0) -> None:
        super().__init__()
        self.rng = random.Random(seed)

    def schedule(
        self, now: float, pending: Sequence[SimJob], cluster: Cluster, commit: Commit, release: Release
    ) -> None:
        wanting = [(len(s.placed) * s.job.task_gpus, i, s) for i, s in enumerate(pending) if not s.complete]
        if not wanting:
            return
        heapq.heapify(wanting)
        agents = [a for a in cluster.agents if a.gpus > 0]
        self.rng.shuffle(agents)
        for agent in agents:
            started = time.thread_time()
            skipped = []
            while wanting and agent.gpus > 0:
                held, i, sim = heapq.heappop(wanting)
                need = sim.job.task_gpus
                if need > agent.gpus:
                    skipped.append((held, i, sim))  # declines this offer
                    continue
                while agent.gpus >= need and not sim.complete:
                    commit(sim, agent.agent_id, task_resources(need), agent.free_port())
                    held += need
                if not sim.complete:
                    heapq.heappush(wanting, (held, i, sim))
            for entry in skipped:
                heapq.heappush(wanting, entry)
            self.decision_s.append(time.thread_time() - started)
            if not wanting:
                return


class GreedyTimeout(Greedy):
    name = "greedy-timeout"
    GIVE_UP_S = 600.0
    RETRY_S = 60.0
    MAX_RETRY_S = 3600.0

    def __init__(self, seed: int = 0) -> None:
        super().__init__(seed)
        self.partial_since: dict[str, float] = {}
        self.retry_at: dict[str, float] = {}
        self.gave_up: dict[str, int] = {}  # times each job gave up

    def schedule(
        self, now: float, pending: Sequence[SimJob], cluster: Cluster, commit: Commit, release: Release
    ) -> None:
        for sim in pending:
            name = sim.job.name
            if not sim.placed:
                self.partial_since.pop(name, None)
            elif now >= self.partial_since.setdefault(name, now) + self.GIVE_UP_S:
                release(sim)  # killed; resubmitted later
                del self.partial_since[name]
                times = self.gave_up[name] = self.gave_up.get(name, 0) + 1
                delay = min(self.MAX_RETRY_S, self.RETRY_S * 2 ** (times - 1))
                self.retry_at[name] = now + delay * (1 + self.rng.random())
        asking = [s for s in pending if self.retry_at.get(s.job.name, now) <= now]
        super().schedule(now, asking, cluster, commit, release)
        for sim in asking:
            self.retry_at.pop(sim.job.name, None)
            if sim.complete:
                self.partial_since.pop(sim.job.name, None)
            elif sim.placed:
                self.partial_since.setdefault(sim.job.name, now)

    def wake_at(self, now: float, pending: Sequence[SimJob]) -> float | None:
        times = [t + self.GIVE_UP_S for t in self.partial_since.values()] + list(self.retry_at.values())
        later = [t for t in times if t > now]
        return min(later) if later else None


class TfdeclareDrainAll(Tfdeclare):
    """The backend's first policy, for comparison: a head that waited too long drains every
    agent it can use (what ``place_in_line`` does when no agent capacity is known)."""

    name = "tfdeclare-drain-all"

    def __init__(self) -> None:
        super().__init__(capacities=False)


POLICIES: dict[str, Callable[[], Policy]] = {
    "tfdeclare": Tfdeclare,
    "greedy": Greedy,
    "greedy-timeout": GreedyTimeout,
    "fifo": Fifo,
    "tfdeclare-drain-all": TfdeclareDrainAll,
}
DEFAULT_POLICIES = ("tfdeclare", "greedy-timeout", "fifo", "greedy")
