"""The Mesos backend's policies as a pure reducer: what to ask of the master, and when.

The backend's decisions: offer interest, reconciliation with backoff, KILLs and their
retries, which held offers to DECLINE, the queue of waiting gangs (by priority, then first
come), the reservations of placed gangs, the master's agents asked again, and fencing of lost
tasks. Like the core's ``lifecycle.step`` it does no I/O, starts no thread, reads no clock:

- ``on_event(policy, event, now) -> calls`` for what happened (the master's events as the
  loop booked them, and the protocol's requests where they change a policy);
- ``on_tick(policy, now, pool) -> calls`` for timers, given a read-only view of the offers
  held (``HeldOffers``: ``offers.OfferPool`` satisfies it);
- ``calls`` are plain values (``Revive``, ``Suppress``, ``Reconcile``, ``Kill``, ``Decline``,
  ``RefreshAgents``, ``PlacementExpired``, ``WakeWatchers``) that the loop (``policies``)
  only executes, in order; what came of a call it executes comes back as an event
  (``InterestAnswered``, ``AgentsAnswered``, ``LaunchUnanswered``). Events and calls are
  defined in ``decide_messages``.

Three modules: this one folds events and ticks in and keeps the task-side policies
(subscription, reconciliation, updates, KILLs, fencing); ``decide_offers`` the offers' side
(holding and declining, the queue and the reservations, REVIVE / SUPPRESS, the agents' list,
the close); ``decide_state`` the settings, the state and the shared timings.

The state, ``Policy``, is a small mutable record that only these modules write: ``on_event``
and ``on_tick`` change it in place (they return only the calls, so no caller mistakes it for a
new value). Its one owner is the loop (``policies``), which reads it (the queue and the
reservations for ``queueing.place_in_line``, ``offers_coming`` for a placement that waits) but
never writes it. Not a frozen value: its maps hold up to one entry per task or job, and
copying them for each status update would make each update cost O(tasks). Besides its settings
it holds ten fields: when we subscribed (None: not connected); the offers' state machine
(``OfferState``, a frozen value replaced whole: suppressed or not, the REVIVE or SUPPRESS out
and what follows its answer, our refuse filters, when we last revived, were offered, expect
resources back and were asked for a placement, and the close); the agents whose resources we
handed back; the queue and the reservations; the ask for the master's agents (``Agents``: out,
refused or idle, and when); the reconciliation ids not answered and the timers
(``ReconcileTimers``); the KILLs we sent (``KillRecord``, also those of tasks the journal does
not know); and the lost tasks. ``tests/test_mesos_shape.py`` counts them with the backend's
other mutable state. Tests drive it in virtual time (``tests/test_mesos_decide.py``).

What stays with the loop, because it is bookkeeping of I/O: the task table and its journal
(an ``Update`` says what an update did to a task), the offer pool (``offers.OfferPool``), the
ACCEPT bursts and the acknowledgements.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import replace
from typing import assert_never

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
    Released,
    Reported,
    Rescinded,
    Stop,
    Subscribed,
    Unschedulable,
    Update,
    WakeWatchers,
)
from tfdeclare.backends.mesos.decide_offers import (
    ask_agents,
    closing,
    expect_offers,
    expired_offers,
    interest_answered,
    not_placed_yet,
    offer_interest,
    offers_back,
    offers_received,
    place_asked,
)
from tfdeclare.backends.mesos.decide_state import (
    AGENTS_REFRESH_S,
    MIN_KILL_RETRY_S,
    QUEUE_TTL_S,
    RECONCILE_FIRST_RETRY_S,
    RECONCILE_MAX_RETRY_S,
    UNSCHEDULABLE_RECHECK_S,
    AgentsAsk,
    KillRecord,
    Policy,
    ReconcileTimers,
    Reservation,
)

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
            offers_received(policy, unlisted, agents, now, calls)
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
            offers_back(policy, event, now)
        case PlaceAsked():
            place_asked(policy, event, now)
        case NotPlacedYet():
            not_placed_yet(policy, event, now, calls)
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
            interest_answered(policy, ok, held, now, calls)
        case AgentsAnswered(ok=ok):
            policy.agents = replace(policy.agents, ask=AgentsAsk.IDLE if ok else AgentsAsk.REFUSED)
        case Closing(offer_ids=offer_ids):
            closing(policy, offer_ids, calls)
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
        expired = expired_offers(policy, now, pool)
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
            ask_agents(policy, now, calls)  # agents may have left or been resized
        for task_id, kill in policy.kills.items():
            if not kill.unknown and now - kill.sent_at >= _kill_retry_s(kill.grace_s):
                kill.sent_at = now
                calls.append(Kill(task_id, kill.agent_id, kill.grace_s))
    fenced = [task_id for task_id, since in policy.lost.items() if now - since >= settings.fencing_timeout_s]
    for task_id in fenced:  # presumed gone from now on: the controller acts
        del policy.lost[task_id]
    offer_interest(policy, now, len(pool.offers) > declined, calls)
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
    ask_agents(policy, now, calls)
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


def _unschedulable(policy: Policy, job: str, now: float, calls: list[Call]) -> None:
    """Out of the queue, so offers may be suppressed: learn of agents that join (the job is
    placed once one could hold it) from the master's list, asked again as the controller
    asks again (at most every ``UNSCHEDULABLE_RECHECK_S``)."""
    policy.queue.pop(job, None)
    if now - policy.agents.asked_at >= UNSCHEDULABLE_RECHECK_S:
        ask_agents(policy, now, calls)


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
        expect_offers(policy, now)  # its resources come back
        return
    if reported is Reported.LOST:
        policy.lost[task_id] = event.lost_since if event.lost_since is not None else now
        return
    policy.lost.pop(task_id, None)
    if event.kill_requested and reported is Reported.RUNNING and event.was_lost:
        # It came back from a partition although it was asked to stop: kill it again now.
        policy.kills[task_id] = KillRecord(event.agent_id, event.kill_grace_s, now)
        calls.append(Kill(task_id, event.agent_id, event.kill_grace_s))


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
