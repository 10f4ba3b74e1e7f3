"""The Mesos backend's policies as a pure reducer: what to ask of the master, and when.

This module owns the backend's decisions: offer interest (REVIVE / SUPPRESS), explicit and
implicit reconciliation with backoff, KILLs and their retries (and the KILL of a task of ours
the journal does not know), which held offers to DECLINE and when, the queue of waiting gangs
(by priority, then first come) and its TTL, the reservations of placed gangs and their expiry,
when to ask the master for its agents again, and fencing deadlines of lost tasks. Like the
core's ``lifecycle.step`` it does no I/O, starts no thread and reads no clock:

- ``on_event(policy, event, now) -> calls`` for what happened (the master's events as the
  loop booked them, and the protocol's requests where they change a policy);
- ``on_tick(policy, now, pool) -> calls`` for timers, given a read-only view of the offers
  held (``HeldOffers``: ``offers.OfferPool`` satisfies it);
- ``calls`` are plain values (``Revive``, ``Suppress``, ``Reconcile``, ``Kill``, ``Decline``,
  ``RefreshAgents``, ``PlacementExpired``, ``WakeWatchers``) that the loop (``policies``)
  only executes, in order; what came of a call it executes comes back as an event
  (``InterestAnswered``, ``AgentsAnswered``, ``LaunchUnanswered``). Events and calls are
  defined in ``decide_messages``.

The state, ``Policy``, is a small mutable record that only this module writes: ``on_event``
and ``on_tick`` change it in place (they return only the calls, so no caller mistakes it for
a new value). Its one owner is the loop (``policies``), which reads it (the queue and the
reservations for ``queueing.place_in_line``, ``offers_coming`` for a placement that waits)
but never writes it. It is not a frozen value because the queue, the reservations and the
kill and reconciliation tables are maps of up to one entry per task or job (thousands), and
the loop feeds an event per status update: copying them per event would make each update
cost O(tasks). Besides its settings it holds ten fields: when we subscribed (None: not connected); the offers'
state machine (``OfferState``, a frozen value replaced whole: suppressed or not, the REVIVE or
SUPPRESS out and what follows its answer, our refuse filters, when we last revived, were
offered, expect resources back and were asked for a placement, and the close); the agents
whose resources we handed back; the queue and the reservations; the ask for the master's
agents (``Agents``: out, refused or idle, and when); the reconciliation ids not answered and
the timers (``ReconcileTimers``); the KILLs we sent (``KillRecord``, also those of tasks the
journal does not know); and the lost tasks. ``tests/test_mesos_shape.py`` counts them with
the backend's other mutable state. Tests drive it as a value all the same: a fresh
``Policy``, events and ticks with explicit times, and the calls that come out
(``tests/test_mesos_decide.py``).

What stays with the loop, because it is bookkeeping of I/O rather than a policy: the task
table and its journal (the reducer is told what an update did to a task: ``Update``), the
offer pool itself (``offers.OfferPool``; the reducer decides which offers to decline and the
loop removes them), the ACCEPT bursts and the acknowledgements.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from enum import Enum
from typing import assert_never

from tfdeclare.backends.mesos.config import MesosConfig
from tfdeclare.backends.mesos.decide_messages import (
    AgentsAnswered,
    Call,
    Closing,
    Decline,
    Disconnected,
    Event,
    Forgotten,
    FrameworkRemoved,
    GpuOffersAsked,
    HeldOffers,
    InterestAnswered,
    Kill,
    KillTarget,
    LaunchUnanswered,
    NotPlacedYet,
    OffersReceived,
    OffersUsed,
    PlaceAsked,
    Placed,
    PlacementExpired,
    Reconcile,
    RefreshAgents,
    Released,
    Reported,
    Rescinded,
    Revive,
    Stop,
    Subscribed,
    Suppress,
    Unschedulable,
    Update,
    WakeWatchers,
)
from tfdeclare.backends.mesos.placement import GangFit, PlacementOptions, drain_set
from tfdeclare.backends.mesos.queueing import Waiting, enqueue, head_of

RECONCILE_FIRST_RETRY_S = 1.0
RECONCILE_MAX_RETRY_S = 60.0
QUEUE_TTL_S = 15.0  # a waiting job that has not asked again for this long left the queue
MIN_KILL_RETRY_S = 10.0
AGENTS_REFRESH_S = 30.0  # the master's list of agents is asked again this often while jobs wait
AGENTS_RETRY_S = 1.0  # at most this often for an agent not on the list (one that just joined)
UNSCHEDULABLE_RECHECK_S = 3.0  # at most this often while a job is told it can never fit
FILTERED_REVIVE_S = 1.0  # a new job revives at once (our filters hide agents) at most this often


# ---- settings and state --------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Settings:
    """The configuration the policies read: made from a ``MesosConfig`` (``from_config``),
    whose defaults are the only ones (no second copy here)."""

    roles: tuple[str, ...]
    revive_interval_s: float
    reconcile_interval_s: float
    refuse_s: float
    fencing_timeout_s: float
    offer_hold_s: float
    fifo_backfill_s: float
    head_of_line_hold_s: float
    options: PlacementOptions

    @classmethod
    def from_config(cls, config: MesosConfig, options: PlacementOptions | None = None) -> Settings:
        """``config``'s settings; ``options``: the placement's (default: as ``config`` says)."""
        return cls(
            roles=tuple(config.roles),
            revive_interval_s=config.revive_interval_s,
            reconcile_interval_s=config.reconcile_interval_s,
            refuse_s=config.refuse_s,
            fencing_timeout_s=config.fencing_timeout_s,
            offer_hold_s=config.offer_hold_s,
            fifo_backfill_s=config.fifo_backfill_s,
            head_of_line_hold_s=config.head_of_line_hold_s,
            options=options or PlacementOptions(cpu_tasks_on_gpu_agents=config.cpu_tasks_on_gpu_agents),
        )


class Interest(Enum):
    """The two offer-interest calls, REVIVE and SUPPRESS."""

    REVIVE = "REVIVE"
    SUPPRESS = "SUPPRESS"


@dataclass(frozen=True, slots=True)
class OfferState:
    """Our interest in offers and what we know of their coming: one small state machine,
    replaced whole (``dataclasses.replace``) by the reducer's offer functions.

    The master's side as it last took it (``suppressed``), the REVIVE or SUPPRESS out (one
    decision at a time, so the master always ends up told the latest), and what to do once it
    is answered; our refuse filters; when we last revived, were offered, and expect resources
    back; when a job last asked for a placement (offers are held while work waits or waited a
    moment ago); and the close, after which every offer goes back and no REVIVE or SUPPRESS
    goes out. The queue and the reservations, the rest of what decides it, are maps of their
    own in ``Policy``."""

    suppressed: bool = False  # as the master took the last REVIVE/SUPPRESS (a subscription: not)
    recheck: bool = False  # decide REVIVE/SUPPRESS on the next chance, whatever ``suppressed`` says
    out: Interest | None = None  # the REVIVE or SUPPRESS out
    again: bool = False  # a REVIVE was asked for while one was out: decide again once answered
    filtered: bool = False  # we declined with a refuse filter since the last REVIVE
    revived_at: float = float("-inf")  # a REVIVE went out: offers of agents not all held may come
    received_at: float = 0.0  # the last offers came
    expected_since: float = 0.0  # resources come back after this (subscribed, an ACCEPT, a task ended)
    asked_at: float = float("-inf")  # a job last asked to be placed: offers are held a while after
    closing: bool = False  # the backend closes: offers declined and suppressed, no REVIVE


class AgentsAsk(Enum):
    """Where the ask for the master's list of agents (GET_AGENTS) stands."""

    IDLE = "idle"  # none out, the last one answered (or none yet)
    OUT = "out"  # one out: at most one at a time
    REFUSED = "refused"  # the last one was refused (no operator API, or no permission)


@dataclass(frozen=True, slots=True)
class Agents:
    """The ask for the master's agents and when it last went out, replaced whole."""

    ask: AgentsAsk = AgentsAsk.IDLE
    asked_at: float = -AGENTS_REFRESH_S


@dataclass(frozen=True, slots=True)
class ReconcileTimers:
    """Reconciliation's timers, replaced whole: the next explicit round (while task ids wait
    for an answer) and its doubling delay, and the next implicit round."""

    next_at: float = 0.0
    delay: float = RECONCILE_FIRST_RETRY_S
    implicit_at: float = 0.0


@dataclass(slots=True)
class Reservation:
    """What a placement took of the held offers, until its launch or ``expires_at``."""

    job: str
    fit: GangFit
    expires_at: float


@dataclass(slots=True)
class KillRecord:
    """A KILL we sent: one the controller asked for, re-sent until the task ends; or one of a
    task of ours the journal does not know (``unknown``), sent again only when the master
    reports it alive again, at most every ``MIN_KILL_RETRY_S``."""

    agent_id: str | None
    grace_s: float | None
    sent_at: float  # -inf: due now
    unknown: bool = False


@dataclass(slots=True)
class Policy:
    """The reducer's state: written only by ``on_event``/``on_tick``; see the module docstring."""

    settings: Settings
    subscribed_at: float | None = None  # None: not subscribed (or the subscription ended)
    offers: OfferState = OfferState()  # offer interest, and when offers came and are expected
    # agents whose resources we handed back (declined, rescinded), until an offer of theirs
    # comes: the master offers all an agent has free for us at once, what we declined with it
    # (a filter only holds back an offer that would be all refused resources)
    returned: set[str] = field(default_factory=set)
    # demand: the FIFO queue (in the order jobs first asked) and the placements not launched yet
    queue: dict[str, Waiting] = field(default_factory=dict)
    reservations: dict[str, Reservation] = field(default_factory=dict)
    agents: Agents = Agents()  # the ask for the master's list of agents
    # reconciliation: task id -> agent id, until the master answers; and the timers
    reconcile_pending: dict[str, str | None] = field(default_factory=dict)
    reconcile: ReconcileTimers = ReconcileTimers()
    kills: dict[str, KillRecord] = field(default_factory=dict)  # the KILLs we sent, by task id
    # fencing: lost tasks and since when
    lost: dict[str, float] = field(default_factory=dict)

    @property
    def connected(self) -> bool:
        """Subscribed, and the subscription has not ended."""
        return self.subscribed_at is not None


# ---- queries (read-only) -----------------------------------------------------------------------------


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


# ---- the reducer --------------------------------------------------------------------------------------


def on_event(policy: Policy, event: Event, now: float) -> list[Call]:
    """Fold one event into ``policy`` (in place); the calls to make, in order."""
    calls: list[Call] = []
    match event:
        case Subscribed():
            _subscribed(policy, event, now, calls)
        case Disconnected():
            policy.subscribed_at = None
        case FrameworkRemoved():  # its tasks are all gone: nothing to kill or fence
            policy.subscribed_at = None
            policy.kills.clear()
            policy.lost.clear()
        case OffersReceived(unlisted=unlisted, agents=agents):
            _offers_received(policy, unlisted, agents, now, calls)
        case Update():
            _update(policy, event, now, calls)
        case Stop(targets=targets):
            _stop(policy, targets, now, calls)
        case Forgotten(task_ids=task_ids):
            _forgotten(policy, task_ids)
        case LaunchUnanswered(tasks=tasks):
            policy.reconcile_pending.update(tasks)
            policy.reconcile = replace(policy.reconcile, next_at=now)
        case OffersUsed() | Rescinded():
            _offers_back(policy, event, now)
        case PlaceAsked():
            _place_asked(policy, event, now)
        case NotPlacedYet():
            _not_placed_yet(policy, event, now, calls)
        case Placed(token=token, job=job, fit=fit, expires_at=expires_at):
            policy.reservations[token] = Reservation(job, fit, expires_at)
            policy.queue.pop(job, None)
        case Unschedulable(job=job):
            _unschedulable(policy, job, now, calls)
        case Released(token=token):
            policy.reservations.pop(token, None)
        case GpuOffersAsked():
            policy.offers = replace(policy.offers, recheck=True)
        case InterestAnswered(ok=ok, offers_held=held):
            _interest_answered(policy, ok, held, now, calls)
        case AgentsAnswered(ok=ok):
            policy.agents = replace(policy.agents, ask=AgentsAsk.IDLE if ok else AgentsAsk.REFUSED)
        case Closing(offer_ids=offer_ids):
            _closing(policy, offer_ids, calls)
        case _:
            assert_never(event)
    return calls


def on_tick(policy: Policy, now: float, pool: HeldOffers) -> list[Call]:
    """The timers: placements not launched in time, stale queue entries, held offers to
    decline, reconciliation retries, the master's agents asked again, KILL retries, fencing
    deadlines, and REVIVE/SUPPRESS. ``policy`` is changed in place; the calls to make, in
    order."""
    settings = policy.settings
    calls: list[Call] = []
    for token, reservation in list(policy.reservations.items()):
        if reservation.expires_at <= now:
            calls.append(PlacementExpired(reservation.job))
            del policy.reservations[token]
    for job, waiting in list(policy.queue.items()):
        if now - waiting.last_asked > QUEUE_TTL_S:
            del policy.queue[job]
    declined = 0
    if policy.connected:
        expired = _expired_offers(policy, now, pool)
        if expired:
            declined = len(expired)
            calls.append(Decline(tuple(expired), settings.refuse_s))
            policy.returned.update(pool.offers[offer_id].agent_id for offer_id in expired)
            # Those agents are hidden from us for refuse_s (if the DECLINE goes through):
            # a job that does not fit what is held REVIVEs to see them.
            if settings.refuse_s > 0 and not policy.offers.filtered:
                policy.offers = replace(policy.offers, filtered=True)
        _reconcile(policy, now, calls)
        if policy.queue and now - policy.agents.asked_at >= AGENTS_REFRESH_S:
            _ask_agents(policy, now, calls)  # agents may have left or been resized
        for task_id, kill in policy.kills.items():
            if not kill.unknown and now - kill.sent_at >= _kill_retry_s(kill.grace_s):
                kill.sent_at = now
                calls.append(Kill(task_id, kill.agent_id, kill.grace_s))
    fenced = [task_id for task_id, since in policy.lost.items() if now - since >= settings.fencing_timeout_s]
    for task_id in fenced:  # presumed gone from now on: the controller acts
        del policy.lost[task_id]
    _offer_interest(policy, now, len(pool.offers) > declined, calls)
    if fenced:
        calls.append(WakeWatchers())
    return calls


# ---- the policies -------------------------------------------------------------------------------------


def _subscribed(policy: Policy, event: Subscribed, now: float, calls: list[Call]) -> None:
    """Void what an earlier subscription knew: ask for the agents, reconcile every live task
    explicitly (from the next tick), re-send every unconfirmed KILL, decide offer interest
    afresh (the master forgot our suppression)."""
    policy.subscribed_at = now
    policy.offers = replace(policy.offers, expected_since=now, suppressed=False, recheck=True)
    _ask_agents(policy, now, calls)
    policy.reconcile_pending = dict(event.live)
    policy.reconcile = ReconcileTimers(
        now, RECONCILE_FIRST_RETRY_S, now + policy.settings.reconcile_interval_s
    )
    for kill in policy.kills.values():
        if not kill.unknown:
            kill.sent_at = float("-inf")
    for target in event.kill_requested:
        policy.kills[target.task_id] = KillRecord(target.agent_id, target.grace_s, float("-inf"))


def _reconcile(policy: Policy, now: float, calls: list[Call]) -> None:
    """Explicit reconciliation of the ids not answered yet, retried after 1, 2, 4, ... 60 s;
    implicit reconciliation every ``reconcile_interval_s``."""
    timers = policy.reconcile
    if policy.reconcile_pending and now >= timers.next_at:
        timers = replace(
            timers, next_at=now + timers.delay, delay=min(RECONCILE_MAX_RETRY_S, timers.delay * 2)
        )
        calls.append(Reconcile(tuple(sorted(policy.reconcile_pending.items(), key=lambda kv: kv[0]))))
    if now >= timers.implicit_at:
        timers = replace(timers, implicit_at=now + policy.settings.reconcile_interval_s)
        calls.append(Reconcile(()))
    policy.reconcile = timers


def _offers_received(
    policy: Policy, unlisted: bool, agents: Iterable[str], now: float, calls: list[Call]
) -> None:
    if unlisted:  # an agent joined: what it has may make a waiting job schedulable
        _ask_agents(policy, now, calls, retry=True)
    policy.offers = replace(policy.offers, received_at=now)
    policy.returned.difference_update(agents)  # what we handed back of them is offered again


def _offers_back(policy: Policy, event: OffersUsed | Rescinded, now: float) -> None:
    """What an ACCEPT left comes back as offers; a rescinded offer's agent may be offered
    again on a next round (unless it left)."""
    if isinstance(event, Rescinded):
        policy.returned.add(event.agent_id)
    else:
        _expect_offers(policy, now)


def _expect_offers(policy: Policy, now: float) -> None:
    """Resources come back from now on (an ACCEPT's rest, a task that ended)."""
    if now > policy.offers.expected_since:
        policy.offers = replace(policy.offers, expected_since=now)


def _place_asked(policy: Policy, event: PlaceAsked, now: float) -> None:
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


def _unschedulable(policy: Policy, job: str, now: float, calls: list[Call]) -> None:
    """Out of the queue, so offers may be suppressed: learn of agents that join (the job is
    placed once one could hold it) from the master's list, asked again as the controller
    asks again (at most every ``UNSCHEDULABLE_RECHECK_S``)."""
    policy.queue.pop(job, None)
    if now - policy.agents.asked_at >= UNSCHEDULABLE_RECHECK_S:
        _ask_agents(policy, now, calls)


def _update(policy: Policy, event: Update, now: float, calls: list[Call]) -> None:
    task_id = event.task_id
    policy.reconcile_pending.pop(task_id, None)  # answered
    reported = event.reported
    if not event.known:
        # A live task the journal does not know: ours (by its id and labels) is killed, at
        # most once every MIN_KILL_RETRY_S (the master repeats its updates).
        alive = reported not in (Reported.ENDED, Reported.KILLING)
        sent = policy.kills.get(task_id)
        recently = sent is not None and now - sent.sent_at < MIN_KILL_RETRY_S
        if alive and not recently and event.ours:
            policy.kills[task_id] = KillRecord(event.agent_id, None, now, unknown=True)
            calls.append(Kill(task_id, event.agent_id, None, unknown=True))
        elif reported is Reported.ENDED and sent is not None and sent.unknown:
            del policy.kills[task_id]  # it ended: nothing more to kill
        return
    if not event.changed:
        return
    if reported is Reported.ENDED:
        policy.kills.pop(task_id, None)
        policy.lost.pop(task_id, None)
        _expect_offers(policy, now)  # its resources come back
        return
    if reported is Reported.LOST:
        policy.lost[task_id] = event.lost_since if event.lost_since is not None else now
        return
    policy.lost.pop(task_id, None)
    if event.kill_requested and reported is Reported.RUNNING and event.was_lost:
        # It came back from a partition although it was asked to stop: kill it again now.
        policy.kills[task_id] = KillRecord(event.agent_id, event.kill_grace_s, now)
        calls.append(Kill(task_id, event.agent_id, event.kill_grace_s))


def _closing(policy: Policy, offer_ids: tuple[str, ...], calls: list[Call]) -> None:
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


def _kill_retry_s(grace_s: float | None) -> float:
    """A KILL not confirmed is sent again after this long (past twice its grace period)."""
    return max(MIN_KILL_RETRY_S, 2 * (grace_s or 0.0))


def _stop(policy: Policy, targets: Iterable[KillTarget], now: float, calls: list[Call]) -> None:
    """KILL each target, unless a KILL of it went out less than its retry time ago."""
    for target in targets:
        kill = policy.kills.get(target.task_id)
        if kill is None or kill.unknown:
            kill = policy.kills[target.task_id] = KillRecord(target.agent_id, target.grace_s, float("-inf"))
        kill.grace_s = target.grace_s
        if now - kill.sent_at >= _kill_retry_s(target.grace_s):
            kill.sent_at = now
            calls.append(Kill(target.task_id, target.agent_id, target.grace_s))


def _forgotten(policy: Policy, task_ids: Iterable[str]) -> None:
    """Tasks the loop forgot: no KILL or fencing of them any more."""
    for task_id in task_ids:
        policy.kills.pop(task_id, None)
        policy.lost.pop(task_id, None)


def _ask_agents(policy: Policy, now: float, calls: list[Call], retry: bool = False) -> None:
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


def _offer_interest(
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


def _interest_answered(policy: Policy, ok: bool, offers_held: bool, now: float, calls: list[Call]) -> None:
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
        _offer_interest(policy, now, offers_held, calls, revive_now=True)


def reservation_hold_s(offer_hold_s: float) -> float:
    """How long a placement keeps what it took for its launch: ``offerHoldSeconds``, at least 1 s."""
    return max(offer_hold_s, 1.0)


def _not_placed_yet(policy: Policy, event: NotPlacedYet, now: float, calls: list[Call]) -> None:
    """Keep the placements held through the wait, and make sure offers come (REVIVE clears
    our filters and un-suppresses)."""
    if event.waits_until is not None:
        _keep_reservations(policy, event.waits_until)
    _offer_interest(policy, now, event.offers_held, calls, revive_now=event.first)


def _keep_reservations(policy: Policy, until: float) -> None:
    """A ``place`` that waits for offers until ``until`` blocks the controller, which cannot
    launch (or release) the placements it already holds meanwhile: none of them lapses during
    that wait (else the waiting gang would be placed on what one of them holds), and each keeps
    its whole hold after it."""
    keep = until + reservation_hold_s(policy.settings.offer_hold_s)
    for reservation in policy.reservations.values():
        reservation.expires_at = max(reservation.expires_at, keep)


def _expired_offers(policy: Policy, now: float, pool: HeldOffers) -> list[str]:
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
