"""The offers' side of the Mesos backend's reducer (``decide`` folds events in through these):
how long to hold offers and whether more are coming, the queue of waiting gangs and the
reservations of placed ones, which held offers to decline and when, our interest in offers
(REVIVE / SUPPRESS, one decision out at a time), the ask for the master's list of agents, and
the close (every offer back, the framework suppressed). Pure, like ``decide``: no I/O, no
thread, no clock; the loop reads the queries (``hold_for``, ``offers_coming``, ``head``)."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import replace

from tfdeclare.backends.mesos.decide_messages import (
    Call,
    Decline,
    HeldOffers,
    NotPlacedYet,
    OffersUsed,
    PlaceAsked,
    RefreshAgents,
    Rescinded,
    Revive,
    Suppress,
)
from tfdeclare.backends.mesos.decide_state import (
    AGENTS_REFRESH_S,
    AGENTS_RETRY_S,
    FILTERED_REVIVE_S,
    Agents,
    AgentsAsk,
    Interest,
    Policy,
)
from tfdeclare.backends.mesos.placement_backfill import drain_set
from tfdeclare.backends.mesos.queueing import Waiting, enqueue, head_of


def hold_for(policy: Policy, now: float) -> float:
    """How long to hold offers that come now: while work waits or waited a moment ago (the
    controller places one job after the other); else not at all (declined at once)."""
    return policy.settings.offer_hold_s if demand(policy, now) else 0.0


def demand(policy: Policy, now: float) -> bool:
    """Work waits for offers, or a job asked within ``offer_hold_s``."""
    recent = now - policy.offers.asked_at < policy.settings.offer_hold_s
    return bool(policy.queue) or bool(policy.reservations) or recent


def offers_coming(policy: Policy, agents_known: bool, pool: HeldOffers) -> bool:
    """Offers are on their way, or the master's list of agents (to judge "can never fit") is.

    Resources that come back (a task ended, what an ACCEPT left, a new subscription) are
    offered again whatever we hold. A REVIVE (out, or to be decided once the one out is
    answered) brings offers only of agents whose free resources we do not hold already: the
    master never offers again what is offered to us (an offer is ours until accepted, declined
    or rescinded), so once ``all_offered`` nothing more can come of it."""
    if not policy.connected:
        return False
    if not agents_known and policy.agents.ask is AgentsAsk.OUT:
        return True
    offers = policy.offers
    if offers.received_at < offers.expected_since:
        return True
    revived = offers.received_at < offers.revived_at or offers.again
    return revived and not all_offered(policy, agents_known, pool)


def all_offered(policy: Policy, agents_known: bool, pool: HeldOffers) -> bool:
    """Every agent the master listed that has anything for us (unreserved, or reserved to our
    roles) has an offer held in each of our roles, none of it handed back since (declined or
    rescinded, and not offered again), and every held offer is of a listed agent (none that
    joined since the list, no list out now). Conservative where we cannot know: an agent not
    offered to us (busy with tasks, ours or other frameworks', or offered to another
    framework now) counts as one that may still offer."""
    if not agents_known or policy.agents.ask is AgentsAsk.OUT:
        return False
    held = {(offer.agent_id, offer.role) for offer in pool.offers.values()}
    listed = set()
    for agent in pool.capacities():
        listed.add(agent.agent_id)
        if agent.cpus <= 0 and agent.mem_mib <= 0 and agent.gpus <= 0:
            continue  # nothing on it is ours to be offered
        if agent.agent_id in policy.returned:
            return False
        if any((agent.agent_id, role) not in held for role in policy.settings.roles):
            return False
    return all(agent_id in listed for agent_id, _ in held)


def head(policy: Policy) -> tuple[str, Waiting] | None:
    """The job first in line."""
    return head_of(policy.queue.items())


def offers_received(
    policy: Policy, unlisted: bool, agents: Iterable[str], now: float, calls: list[Call]
) -> None:
    if unlisted:  # an agent joined: what it has may make a waiting job schedulable
        ask_agents(policy, now, calls, retry=True)
    policy.offers = replace(policy.offers, received_at=now)
    policy.returned.difference_update(agents)  # what we handed back of them is offered again


def offers_back(policy: Policy, event: OffersUsed | Rescinded, now: float) -> None:
    """What an ACCEPT left comes back as offers; a rescinded offer's agent may be offered
    again on a next round (unless it left)."""
    if isinstance(event, Rescinded):
        policy.returned.add(event.agent_id)
    else:
        expect_offers(policy, now)


def expect_offers(policy: Policy, now: float) -> None:
    """Resources come back from now on (an ACCEPT's rest, a task that ended)."""
    if now > policy.offers.expected_since:
        policy.offers = replace(policy.offers, expected_since=now)


def place_asked(policy: Policy, event: PlaceAsked, now: float) -> None:
    """A job asks (again) to be placed: it joins the queue, or keeps its place there (a new
    place when its ``spec.priority`` changed)."""
    request = event.request
    policy.offers = replace(policy.offers, asked_at=now)
    waiting = policy.queue.get(request.job)
    if waiting is None:
        enqueue(policy.queue, request.job, Waiting(request, now, now))
    elif waiting.request.priority != request.priority:
        enqueue(policy.queue, request.job, Waiting(request, waiting.first_asked, now))
    else:
        waiting.request, waiting.last_asked = request, now


def closing(policy: Policy, offer_ids: tuple[str, ...], calls: list[Call]) -> None:
    """Manners at close: the offers held go back to the master (DECLINE, with the usual
    filter) and offers stop (SUPPRESS) while the stream is still open, so other frameworks
    get them at once rather than when the master notices we left."""
    policy.offers = replace(policy.offers, closing=True)
    policy.queue.clear()
    policy.reservations.clear()
    if not policy.connected:
        return
    if offer_ids:
        calls.append(Decline(offer_ids, policy.settings.refuse_s))
    if not (policy.offers.suppressed and policy.offers.out is None):
        policy.offers = replace(policy.offers, out=Interest.SUPPRESS)
        calls.append(Suppress(policy.settings.roles))


def ask_agents(policy: Policy, now: float, calls: list[Call], retry: bool = False) -> None:
    """Ask the master for its agents, at most one ask out; a ``retry`` (an agent not on the
    list offered) waits ``AGENTS_RETRY_S`` after the last ask, or ``AGENTS_REFRESH_S`` while
    the master refuses the list (no operator API, or no permission: jobs then wait and are
    never judged unschedulable)."""
    if policy.agents.ask is AgentsAsk.OUT or not policy.connected:
        return
    pause = AGENTS_REFRESH_S if policy.agents.ask is AgentsAsk.REFUSED else AGENTS_RETRY_S
    if retry and now - policy.agents.asked_at < pause:
        return
    policy.agents = Agents(AgentsAsk.OUT, now)
    calls.append(RefreshAgents())


def offer_interest(
    policy: Policy, now: float, offers_held: bool, calls: list[Call], revive_now: bool = False
) -> None:
    """REVIVE when work waits (and we are suppressed, or were asked to, or a job has been
    waiting for resources not offered now for ``reviveIntervalSeconds``), SUPPRESS only
    when nothing waits and no offer is held. One decision at a time is out, so the master
    always ends up told the latest decision.

    On a shared cluster what a waiting gang needs is held by other frameworks now; when
    they release it, the master offers it to whoever is first by DRF and not filtered. A
    REVIVE at a bounded rate clears every filter we installed (declines with
    ``refuseSeconds``) and any suppression, so the freed resources reach us within about
    one interval, without flooding a large master with REVIVEs. A new job that does not
    fit what is held revives at once only when our own filters may hide agents from us."""
    offers = policy.offers
    if offers.out is not None:
        if revive_now and not offers.again:
            policy.offers = replace(offers, again=True)
        return
    if not policy.connected or offers.closing:
        return
    waiting = bool(policy.queue) or bool(policy.reservations)
    since_revive = now - offers.revived_at
    call: Interest | None = None
    if waiting and (
        offers.suppressed
        or offers.recheck
        or (revive_now and offers.filtered and since_revive >= FILTERED_REVIVE_S)
        or (bool(policy.queue) and since_revive >= policy.settings.revive_interval_s)
    ):
        call = Interest.REVIVE
    elif not waiting and not offers_held and (offers.recheck or not offers.suppressed):
        call = Interest.SUPPRESS
    if call is not None or offers.recheck:
        revived_at = now if call is Interest.REVIVE else offers.revived_at
        policy.offers = replace(offers, recheck=False, out=call, revived_at=revived_at)
    if call is not None:
        roles = policy.settings.roles
        calls.append(Revive(roles) if call is Interest.REVIVE else Suppress(roles))


def interest_answered(policy: Policy, ok: bool, offers_held: bool, now: float, calls: list[Call]) -> None:
    """Book the answer to the REVIVE/SUPPRESS that was out (a refused one is decided again on
    the next tick); decide again at once if a new job asked meanwhile."""
    offers = policy.offers
    if ok:
        filtered = offers.filtered and offers.out is not Interest.REVIVE
        answered = replace(offers, suppressed=offers.out is Interest.SUPPRESS, filtered=filtered)
    else:
        answered = replace(offers, recheck=True)
    policy.offers = replace(answered, out=None, again=False)
    if offers.again:
        offer_interest(policy, now, offers_held, calls, revive_now=True)


def reservation_hold_s(offer_hold_s: float) -> float:
    """How long a placement keeps what it took for its launch: ``offerHoldSeconds``, at least 1 s."""
    return max(offer_hold_s, 1.0)


def not_placed_yet(policy: Policy, event: NotPlacedYet, now: float, calls: list[Call]) -> None:
    """Keep the placements held through the wait, and make sure offers come (REVIVE clears
    our filters and un-suppresses)."""
    if event.waits_until is not None:
        keep_reservations(policy, event.waits_until)
    offer_interest(policy, now, event.offers_held, calls, revive_now=event.first)


def keep_reservations(policy: Policy, until: float) -> None:
    """A ``place`` that waits for offers until ``until`` blocks the controller, which cannot
    launch (or release) the placements it already holds meanwhile: none of them lapses during
    that wait (else the waiting gang would be placed on what one of them holds), and each keeps
    its whole hold after it."""
    keep = until + reservation_hold_s(policy.settings.offer_hold_s)
    for reservation in policy.reservations.values():
        reservation.expires_at = max(reservation.expires_at, keep)


def expired_offers(policy: Policy, now: float, pool: HeldOffers) -> list[str]:
    """Held offers whose time is up; kept: offers of agents with a live reservation, and
    offers of the agents kept for a long-waiting head of the queue (``drain_set``; bounded by
    ``headOfLineHoldSeconds``)."""
    settings = policy.settings
    reserved = {(a.agent_id, a.role) for r in policy.reservations.values() for a in r.fit.assignments}
    first = head(policy)
    kept: set[str] = set()
    if first is not None and now - first[1].first_asked >= settings.fifo_backfill_s:
        kept = drain_set(first[1].request, pool.views(), pool.capacities(), settings.options)
    if policy.offers.closing:  # what came after the close's DECLINE goes back too
        return list(pool.offers)
    expired = []
    for held in pool.offers.values():
        if held.hold_until > now or (held.agent_id, held.role) in reserved:
            continue
        if held.agent_id in kept and now - held.received_at < settings.head_of_line_hold_s:
            continue
        expired.append(held.offer_id)
    return expired
