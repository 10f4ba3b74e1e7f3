"""Where a gang goes, on the Mesos backend's loop: gang placement over the held offers.

This module owns ``Placer``: ``start`` (on the loop, for ``MesosBackend.place``) puts the
job in the queue (``decide``: ``PlaceAsked``) and places it by priority then FIFO with
backfill (``queueing.place_in_line``) over the held offers not reserved by another placement;
not placed, it makes sure offers come (REVIVE) and waits a little (``placeWaitSeconds``) for an
offer round on its way (none when the offers held are of every agent: ``decide.offers_coming``).
A placement reserves what it took until its launch (``Placed``). "Can never fit" is judged
against what the agents have (the master's list of them, and the roles' quota; cached until
those change), never against what is free now; what a gang lacks in total (``Unplaced.short``,
for preemption) is said only when the held offers are all there is.
"""

from __future__ import annotations

import logging
import secrets
from collections.abc import Callable, Iterable
from concurrent.futures import Future

from tfdeclare.backends.mesos import decide_messages as msg
from tfdeclare.backends.mesos import decide_offers
from tfdeclare.backends.mesos.amounts import quota_verdict
from tfdeclare.backends.mesos.config import MesosConfig
from tfdeclare.backends.mesos.loop import Effect, Waiter
from tfdeclare.backends.mesos.placement_capacity import never_fits
from tfdeclare.backends.mesos.placement_values import AgentOffer, GangFit
from tfdeclare.backends.mesos.policies import Policies
from tfdeclare.backends.mesos.queueing import Waiting, head_of, place_in_line, rooms, shortfall
from tfdeclare.core.run.tasks import GangRequest, Placement, Slot, Unplaced, UnplacedReason
from tfdeclare.core.spec.resources import Resources

log = logging.getLogger("tfdeclare.mesos")

Answer = Placement | Unplaced
KeepTrying = Callable[[Future[Answer], Waiter], None]


class Placer:
    """See the module docstring."""

    def __init__(self, config: MesosConfig, clock: Callable[[], float], policies: Policies) -> None:
        self._config, self._clock, self._policies = config, clock, policies
        # cached until the capacities change: (capacity version, gang's slots, constraints) -> why
        self._never_fits: dict[tuple[int, object, object], str | None] = {}

    def start(self, keep_trying: KeepTrying, future: Future[Answer], request: GangRequest) -> Effect:
        policies = self._policies
        now = self._clock()
        new = request.job not in policies.queue
        policies.decide(msg.PlaceAsked(request), now)
        waiting = policies.queue[request.job]
        answer, ideal, fit = self.try_place(request, waiting)
        if ideal:
            future.set_result(self._settle(request, answer, fit))
            return Effect.CHANGED
        # Not placed from the offers held: make sure offers come (REVIVE clears our filters and
        # un-suppresses), then wait a little for an offer round that is on its way.
        deadline = now + self._config.place_wait_s
        policies.decide(msg.NotPlacedYet(request.job, new, bool(policies.pool.offers), deadline), now)

        def attempt(now: float) -> bool:
            answer, ideal, fit = self.try_place(request, waiting)
            # Offers are on their way (not when every agent's are held already: a REVIVE brings
            # nothing then), or the master's list of agents (to judge "can never fit") is.
            coming = decide_offers.offers_coming(policies.policy, policies.pool.agents_known, policies.pool)
            if not ideal and now < deadline and coming:
                return False
            future.set_result(self._settle(request, answer, fit))
            return True

        keep_trying(future, attempt)
        return Effect.CHANGED

    def _settle(self, request: GangRequest, answer: Answer, fit: GangFit | None) -> Answer:
        """Reserve what a placement took, or leave the queue for good."""
        now = self._clock()
        if isinstance(answer, Placement) and fit is not None:
            expires_at = now + decide_offers.reservation_hold_s(self._config.offer_hold_s)
            self._policies.decide(msg.Placed(answer.token, request.job, fit, expires_at), now)
        elif isinstance(answer, Unplaced) and answer.reason is UnplacedReason.UNSCHEDULABLE:
            self._policies.decide(msg.Unschedulable(request.job), now)
        return answer

    def try_place(self, request: GangRequest, waiting: Waiting) -> tuple[Answer, bool, GangFit | None]:
        """(answer, ideal, fit): ideal when nothing better can come from offers on their way."""
        policies, pool = self._policies, self._policies.pool
        if not policies.connected:
            message = "not connected to the Mesos master (re-subscribing)"
            return Unplaced(UnplacedReason.WAITING_FOR_OFFERS, message), False, None
        # "Can never fit" is judged against what the agents have (the master's list of them),
        # never against what is free now; until that list came, the gang waits.
        why = self._never_fits_why(request) if pool.agents_known else None
        if why is not None:
            return Unplaced(UnplacedReason.UNSCHEDULABLE, why), True, None
        reserved = [a for r in policies.reservations.values() for a in r.fit.assignments]
        views = pool.index(reserved)  # indexed: the decision looks at candidate agents only
        decision = place_in_line(
            waiting,
            policies.queue,
            views,
            self._clock(),
            self._config.fifo_backfill_s,
            policies.options,
            pool.capacities(),
        )
        fit, note = decision.fit, decision.note
        if not isinstance(fit, GangFit):
            message = f"{fit.message}; {note}" if note else fit.message
            short, room = self._short(request, waiting, views)
            return Unplaced(fit.reason, message, short, room), False, None
        if decision.inside_window:
            log.warning(
                "%s: placed on an agent scheduled for maintenance (nothing outside a window fits)",
                request.job,
            )
        slots = tuple(Slot(a.key, a.hostname, a.port, backend_ref=a.agent_id) for a in fit.assignments)
        wanted = {s.key: s.previous for s in request.slots if s.previous is not None}
        ideal = all(
            (a.hostname, a.port) == (wanted[a.key].host, wanted[a.key].port)
            for a in fit.assignments
            if a.key in wanted
        )
        return Placement(request.job, request.attempt, slots, secrets.token_hex(8)), ideal, fit

    def _short(
        self, request: GangRequest, waiting: Waiting, views: Iterable[AgentOffer]
    ) -> tuple[Resources | None, tuple[tuple[str, Resources], ...] | None]:
        """What the gang lacks beyond the offers held in all and the room on each agent it may
        use (``Unplaced.short`` and ``rooms``: the controller may preempt lower-priority jobs
        of ours so that it fits), said only when the held offers are what there is: the gang is
        first in line, the master's agents are known and no offers are on their way (an offer
        round came since we last asked). A task restarting alone (pinned) never preempts."""
        policies = self._policies
        if any(slot.pinned for slot in request.slots) or not policies.pool.agents_known:
            return None, None
        if decide_offers.offers_coming(policies.policy, policies.pool.agents_known, policies.pool):
            return None, None
        if head_of(policies.queue.items(), waiting.first_asked, request.job, request.priority) is not None:
            return None, None
        held = list(views)
        return shortfall(request, held), rooms(request, held, policies.pool.capacities(), policies.options)

    def _never_fits_why(self, request: GangRequest) -> str | None:
        """``never_fits`` against the capacities seen, cached until they change."""
        pool = self._policies.pool
        key = (pool.capacity_version, tuple((s.key, s.resources) for s in request.slots), request.constraints)
        if key not in self._never_fits:
            if next(iter(self._never_fits), key)[0] != key[0]:  # the capacities changed since
                self._never_fits.clear()
            why = never_fits(request, pool.capacities(), self._policies.options)
            if why is None and pool.quota:
                needs = {
                    "cpus": sum(s.resources.cpus for s in request.slots),
                    "mem": float(sum(s.resources.mem_mib for s in request.slots)),
                    "gpus": float(sum(s.resources.gpus for s in request.slots)),
                }
                why = quota_verdict({k: v for k, v in needs.items() if v > 0}, self._config.roles, pool.quota)
            self._never_fits[key] = why
        return self._never_fits[key]
