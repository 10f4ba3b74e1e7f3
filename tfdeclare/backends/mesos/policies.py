"""The Mesos backend's policies at work: the reducer's state, the offers held, and the calls.

This module owns ``Policies``: ``decide.Policy`` (offer interest, reconciliation, kills,
fencing, the FIFO queue of waiting gangs and the reservations of placed gangs), which only the
reducer ``decide`` changes, the offer pool (``offers.OfferPool``) and the watchers to wake.
``decide`` folds an event into the policy and executes the calls the reducer decides, in
order: REVIVE, SUPPRESS, RECONCILE, KILL, DECLINE and GET_AGENTS go to the calls thread
(``sender``); their answers come back to the loop as ``sender.Answered`` and are booked here
(``answered``). It also answers where a gang goes (``placing``) from what it holds. One thread
owns it (the backend's loop).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import assert_never

from tfdeclare.backends.mesos import decide
from tfdeclare.backends.mesos import decide_messages as msg
from tfdeclare.backends.mesos.amounts import agent_capacity
from tfdeclare.backends.mesos.client import SchedulerClient
from tfdeclare.backends.mesos.config import MesosConfig
from tfdeclare.backends.mesos.decide_state import Policy, Reservation, Settings
from tfdeclare.backends.mesos.errors import MesosError
from tfdeclare.backends.mesos.loop import Effect
from tfdeclare.backends.mesos.offers import OfferPool
from tfdeclare.backends.mesos.placement_values import AgentOffer, PlacementOptions
from tfdeclare.backends.mesos.queueing import Waiting
from tfdeclare.backends.mesos.sender import Answer, Answered, Sender

log = logging.getLogger("tfdeclare.mesos")


@dataclass(frozen=True, slots=True)
class AgentsListed:
    """What GET_AGENTS (and the roles' quota) returned."""

    agents: list[AgentOffer]
    quota: dict[str, dict[str, float]] | None


class Policies:
    """See the module docstring."""

    def __init__(
        self, config: MesosConfig, sender: Sender, clock: Callable[[], float], lost: dict[str, float]
    ) -> None:
        self._roles = tuple(config.roles)
        self._sender = sender
        self._clock = clock
        self.options = PlacementOptions(cpu_tasks_on_gpu_agents=config.cpu_tasks_on_gpu_agents)
        self.policy = Policy(Settings.from_config(config, self.options), lost=lost)
        self.pool = OfferPool()
        self.watchers: list[Callable[[], None]] = []

    @property
    def connected(self) -> bool:
        """Subscribed, and the subscription has not ended (the reducer's to say)."""
        return self.policy.connected

    @property
    def queue(self) -> dict[str, Waiting]:
        """The FIFO queue of waiting gangs (the reducer's: read it, never write it)."""
        return self.policy.queue

    @property
    def reservations(self) -> dict[str, Reservation]:
        """The placements not launched yet (the reducer's: read it, never write it)."""
        return self.policy.reservations

    def notify(self) -> None:
        """Tell the watchers (on the loop: a watcher only wakes someone, it never calls back)."""
        for notify in list(self.watchers):
            try:
                notify()
            except Exception:
                log.exception("a watcher of the Mesos backend raised")

    # ---- decided by ``decide``, executed here -------------------------------------------------------

    def decide(self, event: msg.Event, now: float | None = None) -> None:
        """Fold ``event`` into the policies and make the calls they decide."""
        self.execute(decide.on_event(self.policy, event, self._clock() if now is None else now))

    def tick(self) -> None:
        """The policies' timers."""
        self.execute(decide.on_tick(self.policy, self._clock(), self.pool))

    def execute(self, calls: list[msg.Call]) -> None:
        """Make the calls the reducer decided, in order (HTTP ones on the calls thread)."""
        for call in calls:
            self._execute_one(call)

    def _execute_one(self, call: msg.Call) -> None:
        send = self._sender.call
        match call:
            case msg.Revive(roles=roles):
                send("REVIVE", lambda c: c.revive(list(roles)), Answer.INTEREST)
            case msg.Suppress(roles=roles):
                send("SUPPRESS", lambda c: c.suppress(list(roles)), Answer.INTEREST)
            case msg.Reconcile(tasks=()):
                send("RECONCILE (implicit)", lambda c: c.reconcile([]))
            case msg.Reconcile(tasks=tasks):
                log.info("reconciling %d task(s)", len(tasks))
                send("RECONCILE", lambda c: c.reconcile(list(tasks)))
            case msg.Kill(task_id=task_id, agent_id=agent_id, grace_s=grace, unknown=unknown):
                if unknown:
                    log.warning("task %s runs but tfdeclare does not know it: killing it", task_id)
                send(f"KILL {task_id}", lambda c: c.kill(task_id, agent_id, grace))
            case msg.Decline(offer_ids=offer_ids, refuse_s=refuse_s):
                for offer_id in offer_ids:
                    self.pool.remove(offer_id)
                send("DECLINE", lambda c: c.decline(list(offer_ids), refuse_s))
            case msg.RefreshAgents():
                send("GET_AGENTS", self._list_agents, Answer.AGENTS)
            case msg.PlacementExpired(job=job):
                log.info("placement of %s was not launched in time: released", job)
            case msg.WakeWatchers():
                self.notify()
            case _:
                assert_never(call)

    def _list_agents(self, client: SchedulerClient) -> AgentsListed:
        """On the calls thread: the master's agents and what each has, and the roles' quota."""
        listed = (agent_capacity(raw, self._roles) for raw in client.get_agents())
        agents = [c for c in listed if c is not None]
        try:  # the roles' quota limits: a gang over them is never offered in full
            return AgentsListed(agents, client.get_quota())
        except MesosError as err:  # not allowed to see it, or a master without quota
            log.debug("no quota from the master: %s", err)
            return AgentsListed(agents, None)

    def answered(self, answer: Answered) -> Effect:
        """Book the answer to a call the reducer decided."""
        match answer.what:
            case Answer.INTEREST:
                self.decide(msg.InterestAnswered(answer.ok, bool(self.pool.offers)))
                return Effect.NONE
            case Answer.AGENTS:
                self.decide(msg.AgentsAnswered(answer.ok))
                listed = answer.result
                if not (answer.ok and isinstance(listed, AgentsListed) and self.connected):
                    return Effect.NONE
                self.pool.set_agents(listed.agents)  # replaces the pool's capacities
                if listed.quota is not None:
                    self.pool.set_quota(listed.quota)
                self.notify()
                return Effect.CHANGED
            case Answer.CLOSE:  # the owner books it
                return Effect.CHANGED
            case _:
                assert_never(answer.what)
