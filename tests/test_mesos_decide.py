"""The Mesos backend's policies (``backends/mesos/decide.py``) in virtual time.

No emulator, no threads, no sleeps: each test feeds the reducer events and ticks with explicit
times and checks the calls it decides (what the loop would send to the master). The end-to-end
tests (``test_mesos_backend.py``, ``test_mesos_faults.py``, ``test_mesos_shared.py``) prove
the wiring against the emulator.
"""

from __future__ import annotations

import itertools
from dataclasses import MISSING, dataclass, field, fields, replace

import pytest

from tfdeclare.backends.mesos import decide, decide_offers, decide_state
from tfdeclare.backends.mesos import decide_messages as msg
from tfdeclare.backends.mesos.config import MesosConfig
from tfdeclare.backends.mesos.decide_messages import (
    Call,
    Decline,
    Kill,
    KillTarget,
    PlacementExpired,
    Reconcile,
    RefreshAgents,
    Reported,
    Revive,
    Suppress,
    WakeWatchers,
)
from tfdeclare.backends.mesos.decide_state import (
    AGENTS_REFRESH_S,
    MIN_KILL_RETRY_S,
    QUEUE_TTL_S,
    RECONCILE_MAX_RETRY_S,
    Interest,
    Policy,
    Settings,
)
from tfdeclare.backends.mesos.placement_values import AgentOffer, GangFit, SlotAssignment
from tfdeclare.core.enums import Role
from tfdeclare.core.run.tasks import GangRequest, SlotRequest
from tfdeclare.core.spec.keys import TaskKey
from tfdeclare.core.spec.resources import Resources

ROLES = ("*",)


@dataclass(frozen=True)
class Held:
    offer_id: str
    agent_id: str
    role: str
    received_at: float
    hold_until: float


@dataclass
class Pool:
    """The read-only view of the offer pool the reducer gets on a tick."""

    offers: dict[str, Held] = field(default_factory=dict)
    agents: list[AgentOffer] = field(default_factory=list)  # the master's list of agents

    def views(self) -> list[AgentOffer]:
        return []

    def capacities(self) -> list[AgentOffer]:
        return self.agents


class Run:
    """A policy driven in virtual time; ``calls`` collects what it decided since last read."""

    def __init__(self, roles: tuple[str, ...] = ROLES, **settings: float) -> None:
        values = {"offer_hold_s": 1.0, **settings}  # the rest as MesosConfig's defaults
        config = MesosConfig(roles=roles, **values)  # type: ignore[arg-type]
        self.policy = Policy(Settings.from_config(config))
        self.pool = Pool()
        self.decided: list[Call] = []

    def event(self, event: msg.Event, now: float) -> list[Call]:
        calls = decide.on_event(self.policy, event, now)
        return self._answer(calls, now)

    def tick(self, now: float) -> list[Call]:
        calls = decide.on_tick(self.policy, now, self.pool)
        for call in calls:
            if isinstance(call, Decline):  # the loop removes what it declines from the pool
                for offer_id in call.offer_ids:
                    del self.pool.offers[offer_id]
        return self._answer(calls, now)

    def _answer(self, calls: list[Call], now: float, ok: bool = True) -> list[Call]:
        """The master takes every REVIVE/SUPPRESS and answers the agents' list at once."""
        out = list(calls)
        for call in calls:
            if isinstance(call, Revive | Suppress):
                out += self.event(msg.InterestAnswered(ok, bool(self.pool.offers)), now)
            elif isinstance(call, RefreshAgents):
                out += self.event(msg.AgentsAnswered(ok), now)
        return out

    def subscribe(self, now: float = 0.0, **kwargs: tuple[object, ...]) -> list[Call]:
        return self.event(msg.Subscribed(**kwargs), now)  # type: ignore[arg-type]


def gang(job: str, cpus: float = 1.0) -> GangRequest:
    return GangRequest(job, 0, (SlotRequest(TaskKey(Role.WORKER, 0), Resources(cpus, 128)),))


def fit_on(agent_id: str) -> GangFit:
    assignment = SlotAssignment(
        TaskKey(Role.WORKER, 0), agent_id, f"{agent_id}.example", "*", 31000, Resources(1, 128)
    )
    return GangFit((assignment,))


def kinds(calls: list[Call], *types: type) -> list[Call]:
    return [c for c in calls if isinstance(c, types)]


def ask(run: Run, job: str, now: float) -> list[Call]:
    """A job asks to be placed and does not fit what is held (as ``MesosBackend.place``)."""
    first = job not in run.policy.queue
    calls = run.event(msg.PlaceAsked(gang(job)), now)
    return calls + run.event(msg.NotPlacedYet(job, first, bool(run.pool.offers)), now)


# ---- offer interest ---------------------------------------------------------------------------


def test_subscribing_with_nothing_to_do_suppresses_once() -> None:
    run = Run()
    run.subscribe()
    assert kinds(run.tick(0.1), Revive, Suppress) == [Suppress(ROLES)]
    assert all(not kinds(run.tick(t), Revive, Suppress) for t in (0.3, 5.0, 60.0)), "SUPPRESS is sent once"
    assert run.policy.offers.suppressed


def test_a_queued_gang_revives_once_then_every_interval_and_suppresses_after_the_queue_empties() -> None:
    run = Run(revive_interval_s=5.0)
    run.subscribe()
    run.tick(0.1)  # suppressed: nothing waits
    assert kinds(ask(run, "big", 1.0), Revive) == [Revive(ROLES)], "a waiting gang revives at once"
    revives = [t for t in (1.2, 2.0, 3.0, 4.0, 5.9, 6.0, 6.2, 8.0, 11.0) if kinds(run.tick(t), Revive)]
    assert revives == [6.0, 11.0], "then at most every reviveIntervalSeconds while it waits"
    assert not kinds(ask(run, "big", 11.5), Revive), "asking again is not a new job"
    # Placed (a reservation, so still demand), then launched: nothing waits, no offer held.
    run.event(msg.Placed("t1", "big", fit_on("a1"), 13.0), 12.0)
    assert not kinds(run.tick(12.1), Suppress), "a placement not launched yet is demand"
    run.event(msg.Released("t1"), 12.2)
    assert kinds(run.tick(12.3), Revive, Suppress) == [Suppress(ROLES)]


def test_no_suppress_while_offers_are_held() -> None:
    run = Run(offer_hold_s=1.0)
    run.subscribe()
    run.pool.offers["o1"] = Held("o1", "a1", "*", 0.0, 10.0)
    assert not kinds(run.tick(0.1), Suppress)
    assert kinds(run.tick(10.0), Decline, Suppress) == [Decline(("o1",), 5.0), Suppress(ROLES)]


def test_one_interest_call_at_a_time_and_a_new_job_is_decided_after_the_answer() -> None:
    run = Run(revive_interval_s=5.0, refuse_s=5.0)
    run.subscribe()
    run.tick(0.1)
    run.pool.offers["o1"] = Held("o1", "a1", "*", 0.0, 0.5)
    run.tick(1.0)  # declined with a filter: our filter may hide agents from us
    assert run.policy.offers.filtered
    decide.on_event(run.policy, msg.PlaceAsked(gang("a")), 2.0)
    calls = decide.on_event(run.policy, msg.NotPlacedYet("a", True, False), 2.0)
    assert calls == [Revive(ROLES)] and run.policy.offers.out is Interest.REVIVE
    # Another new job while that REVIVE is out: nothing is sent now, it is decided after.
    decide.on_event(run.policy, msg.PlaceAsked(gang("b")), 2.1)
    calls = decide.on_event(run.policy, msg.NotPlacedYet("b", True, False), 2.1)
    assert calls == [] and run.policy.offers.again
    assert offers_coming(run.policy)
    calls = decide.on_event(run.policy, msg.InterestAnswered(True, False), 2.2)
    assert calls == [], "the REVIVE that was out cleared the filters: no second one within 1 s"
    assert (run.policy.offers.filtered, run.policy.offers.suppressed) == (False, False)


def offers_coming(policy: Policy, pool: Pool | None = None) -> bool:
    """(The master lists one agent, a1, and none of its offers is held unless ``pool`` says.)"""
    return decide_offers.offers_coming(policy, True, pool or Pool(agents=[agent("a1")]))


def test_a_refused_revive_is_decided_again_on_the_next_tick() -> None:
    run = Run()
    run.subscribe()
    run.tick(0.1)
    decide.on_event(run.policy, msg.PlaceAsked(gang("a")), 1.0)
    calls = decide.on_event(run.policy, msg.NotPlacedYet("a", True, False), 1.0)
    assert calls == [Revive(ROLES)]
    calls = decide.on_event(run.policy, msg.InterestAnswered(False, False), 1.1)
    assert calls == [] and run.policy.offers.suppressed, "the master did not take it: still suppressed"
    assert kinds(run.tick(1.2), Revive) == [Revive(ROLES)]


def test_closing_declines_what_is_held_suppresses_and_revives_no_more() -> None:
    run = Run(refuse_s=5.0)
    run.subscribe()
    run.tick(0.1)
    ask(run, "a", 1.0)  # a REVIVE: not suppressed any more
    run.pool.offers["o1"] = Held("o1", "a1", "*", 1.5, 30.0)  # held for a job
    calls = run.event(msg.Closing(("o1",)), 2.0)
    assert kinds(calls, Decline, Revive, Suppress) == [Decline(("o1",), 5.0), Suppress(ROLES)]
    assert not run.policy.queue and run.policy.offers.closing
    del run.pool.offers["o1"]
    run.pool.offers["o2"] = Held("o2", "a1", "*", 2.1, 30.0)  # came after: declined at once
    assert kinds(run.tick(2.2), Decline, Revive, Suppress) == [Decline(("o2",), 5.0)]
    assert not kinds(ask(run, "b", 2.3) + run.tick(60.0), Revive, Suppress)


def test_closing_while_suppressed_or_disconnected_sends_nothing_more() -> None:
    run = Run()
    run.subscribe()
    run.tick(0.1)  # suppressed
    assert run.event(msg.Closing(()), 1.0) == []
    gone = Run()
    gone.subscribe()
    gone.event(msg.Disconnected(), 0.5)
    assert gone.event(msg.Closing(("o1",)), 1.0) == []


def test_asking_for_gpu_offers_revives() -> None:
    run = Run()
    run.subscribe()
    ask(run, "gpu", 0.5)
    run.tick(0.6)
    assert not kinds(run.tick(0.8), Revive)
    run.event(msg.GpuOffersAsked(), 1.0)
    assert kinds(run.tick(1.1), Revive) == [Revive(ROLES)]


def test_nothing_is_asked_of_the_master_while_disconnected() -> None:
    run = Run()
    run.subscribe()
    run.event(msg.Disconnected(), 1.0)
    assert ask(run, "a", 2.0) == []
    assert run.tick(100.0) == []
    assert not decide_offers.offers_coming(run.policy, False, run.pool)


# ---- reconciliation ---------------------------------------------------------------------------


def test_reconciliation_is_retried_with_doubling_backoff_capped_and_stops_when_answered() -> None:
    run = Run(reconcile_interval_s=10_000.0)
    run.subscribe(0.0, live=(("t1", "a1"), ("t2", "a2")))
    sent = {}
    t = 0.0
    while t < 400.0:
        explicit = [c for c in kinds(run.tick(t), Reconcile) if c.tasks]  # type: ignore[union-attr]
        if explicit:
            sent[t] = explicit[0].tasks  # type: ignore[union-attr]
        t = round(t + 0.5, 1)
    times = list(sent)
    gaps = [b - a for a, b in itertools.pairwise(times)]
    assert times[:4] == [0.0, 1.0, 3.0, 7.0]
    assert gaps[:7] == [1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 60.0] and set(gaps[6:]) == {RECONCILE_MAX_RETRY_S}
    assert sent[0.0] == (("t1", "a1"), ("t2", "a2"))
    run.event(msg.Update("t1", "a1", Reported.RUNNING), 400.0)
    later = [c for t in range(400, 600) for c in kinds(run.tick(float(t)), Reconcile)]
    assert later and all(c.tasks == (("t2", "a2"),) for c in later)  # type: ignore[union-attr]
    run.event(msg.Update("t2", "a2", Reported.ENDED, known=False), 600.0)
    assert not [c for t in range(600, 1000) for c in kinds(run.tick(float(t)), Reconcile)]


def test_implicit_reconciliation_every_interval() -> None:
    run = Run(reconcile_interval_s=100.0)
    run.subscribe(0.0)
    implicit = [t for t in range(0, 301, 1) if Reconcile(()) in run.tick(float(t))]
    assert implicit == [100, 200, 300]


def test_a_launch_without_answer_is_reconciled_at_once() -> None:
    run = Run(reconcile_interval_s=10_000.0)
    run.subscribe(0.0)
    run.tick(0.0)
    run.event(msg.LaunchUnanswered((("t9", "a1"),)), 50.0)
    assert Reconcile((("t9", "a1"),)) in run.tick(50.0)


# ---- kills ------------------------------------------------------------------------------------


def test_a_kill_is_retried_every_10_s_until_a_terminal_update() -> None:
    run = Run()
    run.subscribe(0.0)
    stop = msg.Stop((KillTarget("t1", "a1", 2.0),))
    assert run.event(stop, 1.0) == [Kill("t1", "a1", 2.0)]
    assert run.event(stop, 5.0) == [], "asked again within the retry: not sent again"
    sent = [t for t in range(2, 40) if kinds(run.tick(float(t)), Kill)]
    assert sent == [11, 21, 31]
    run.event(msg.Update("t1", "a1", Reported.KILLING), 35.0)
    assert kinds(run.tick(41.0), Kill), "TASK_KILLING is not the end"
    run.event(msg.Update("t1", "a1", Reported.ENDED), 42.0)
    assert not [t for t in range(42, 100) if kinds(run.tick(float(t)), Kill)]


@pytest.mark.parametrize(("grace", "retry"), [(None, MIN_KILL_RETRY_S), (3.0, 10.0), (30.0, 60.0)])
def test_the_kill_retry_is_past_twice_the_grace_period(grace: float | None, retry: float) -> None:
    run = Run()
    run.subscribe(0.0)
    run.event(msg.Stop((KillTarget("t1", "a1", grace),)), 0.0)
    assert not kinds(run.tick(retry - 0.5), Kill)
    assert kinds(run.tick(retry), Kill) == [Kill("t1", "a1", grace)]


def test_unconfirmed_kills_are_sent_again_on_resubscribing() -> None:
    run = Run()
    run.subscribe(0.0)
    run.event(msg.Stop((KillTarget("t1", "a1", 1.0),)), 1.0)
    run.event(msg.Disconnected(), 2.0)
    assert not kinds(run.tick(12.0), Kill), "not while disconnected"
    run.subscribe(13.0, kill_requested=(KillTarget("t2", "a2", None),))
    assert sorted(c.task_id for c in kinds(run.tick(13.0), Kill)) == ["t1", "t2"]  # type: ignore[union-attr]


def test_an_unknown_task_of_ours_is_killed_at_most_every_10_s() -> None:
    run = Run()
    run.subscribe(0.0)
    unknown = msg.Update("x.1.worker-0.a", "a7", Reported.RUNNING, known=False, ours=True)
    assert run.event(unknown, 1.0) == [Kill("x.1.worker-0.a", "a7", None, unknown=True)]
    assert run.event(unknown, 5.0) == []
    assert run.event(unknown, 11.0) == [Kill("x.1.worker-0.a", "a7", None, unknown=True)]
    not_ours = msg.Update("someone-else", "a7", Reported.RUNNING, known=False, ours=False)
    ended = msg.Update("y.1.worker-0.a", "a7", Reported.ENDED, known=False, ours=True)
    assert run.event(not_ours, 20.0) == [] and run.event(ended, 20.0) == []


def test_the_kill_of_an_unknown_task_is_sent_again_only_when_the_master_reports_it_again() -> None:
    """Not on a timer, nor on subscribing again (a known task's KILL is): the master's
    repeated update is what says it still runs. Once it ended, its record goes."""
    run = Run()
    run.subscribe(0.0)
    unknown = msg.Update("x.1.worker-0.a", "a7", Reported.RUNNING, known=False, ours=True)
    assert kinds(run.event(unknown, 1.0), Kill)
    assert not kinds(run.tick(30.0), Kill), "no retry on a timer"
    run.event(msg.Disconnected(), 31.0)
    run.subscribe(32.0)
    assert not kinds(run.tick(32.0), Kill), "nor on subscribing again"
    run.event(msg.Update("x.1.worker-0.a", "a7", Reported.ENDED, known=False, ours=True), 33.0)
    assert "x.1.worker-0.a" not in run.policy.kills
    assert kinds(run.event(unknown, 34.0), Kill), "reported alive again: killed at once"


def test_a_task_back_from_a_partition_that_was_asked_to_stop_is_killed_at_once() -> None:
    run = Run()
    run.subscribe(0.0)
    run.event(msg.Stop((KillTarget("t1", "a1", 5.0),)), 1.0)
    run.event(msg.Update("t1", "a1", Reported.LOST, lost_since=2.0), 2.0)
    back = msg.Update("t1", "a1", Reported.RUNNING, kill_requested=True, kill_grace_s=5.0, was_lost=True)
    assert run.event(back, 3.0) == [Kill("t1", "a1", 5.0)]


def test_forgotten_tasks_are_no_longer_killed() -> None:
    run = Run()
    run.subscribe(0.0)
    run.event(msg.Stop((KillTarget("t1", "a1", None),)), 0.0)
    run.event(msg.Forgotten(("t1",)), 1.0)
    assert not [t for t in range(0, 60) if kinds(run.tick(float(t)), Kill)]


# ---- offers, the queue, reservations ------------------------------------------------------------


def test_an_offer_held_past_its_expiry_is_declined_with_the_refuse_filter() -> None:
    run = Run(refuse_s=7.0)
    run.subscribe(0.0)
    run.tick(0.0)
    assert decide_offers.hold_for(run.policy, 0.5) == 0.0, "nothing to do: declined at once"
    ask(run, "a", 1.0)
    assert decide_offers.hold_for(run.policy, 1.0) == 1.0
    run.pool.offers["o1"] = Held("o1", "a1", "*", 1.0, 2.0)
    run.pool.offers["o2"] = Held("o2", "a2", "*", 1.0, 2.0)
    run.event(msg.Placed("t1", "b", fit_on("a2"), 9.0), 1.5)
    assert not kinds(run.tick(1.9), Decline)
    assert kinds(run.tick(2.0), Decline) == [Decline(("o1",), 7.0)], "o2 backs a placement: kept"
    assert kinds(run.tick(9.0), PlacementExpired, Decline) == [PlacementExpired("b"), Decline(("o2",), 7.0)]


def test_a_placement_does_not_lapse_while_another_place_waits_for_offers() -> None:
    """The controller is blocked in the second ``place`` (a real master may send no offer for
    what is all held already): the first placement keeps what it took through that wait and
    its whole hold after it, so the waiting gang is not placed on it."""
    run = Run(offer_hold_s=1.0)
    run.subscribe(0.0)
    run.tick(0.0)
    run.pool.offers["o1"] = Held("o1", "a1", "*", 0.5, 1.5)
    run.event(msg.Placed("t1", "whole", fit_on("a1"), 2.0), 1.0)  # held for 1 s
    run.event(msg.PlaceAsked(gang("other")), 1.1)
    run.event(msg.NotPlacedYet("other", True, True, waits_until=3.1), 1.1)  # waits up to 2 s
    assert [t for t in (2.0, 2.5, 3.1, 4.0) if kinds(run.tick(t), PlacementExpired, Decline)] == []
    assert kinds(run.tick(4.1), PlacementExpired, Decline) == [
        PlacementExpired("whole"),
        Decline(("o1",), 5.0),
    ]
    # a place that does not wait holds nothing back
    run.pool.offers["o2"] = Held("o2", "a1", "*", 5.0, 6.0)
    run.event(msg.Placed("t2", "whole", fit_on("a1"), 7.0), 6.0)
    run.event(msg.NotPlacedYet("other", False, True), 6.5)
    assert kinds(run.tick(7.0), PlacementExpired) == [PlacementExpired("whole")]


def test_the_head_of_a_long_queue_keeps_the_offers_of_the_agents_it_drains() -> None:
    run = Run(fifo_backfill_s=10.0, head_of_line_hold_s=30.0)
    run.subscribe(0.0)
    ask(run, "head", 0.0)
    run.pool.offers["o1"] = Held("o1", "a1", "*", 11.0, 12.0)

    class Draining(Pool):  # no capacities known: every agent the head can use drains
        def views(self) -> list[AgentOffer]:
            return [AgentOffer("a1", "a1.example", 8.0, 4096.0, 0, ((31000, 32000),))]

    run.pool = Draining(run.pool.offers)
    for t in range(11, 41, 2):
        ask(run, "head", float(t))  # still asking: it stays first in line
        assert not kinds(run.tick(float(t) + 0.5), Decline), t
    ask(run, "head", 41.0)
    assert kinds(run.tick(41.0), Decline) == [Decline(("o1",), 5.0)], "held up to headOfLineHoldSeconds"


def test_a_queued_gang_that_stops_asking_leaves_the_queue_and_offers_are_suppressed() -> None:
    run = Run(revive_interval_s=5.0)
    run.subscribe(0.0)
    run.tick(0.0)
    ask(run, "gone", 1.0)
    assert "gone" in run.policy.queue
    calls = [c for t in range(2, 40) for c in run.tick(float(t))]
    assert "gone" not in run.policy.queue
    revives = [c for c in calls if isinstance(c, Revive)]
    assert len(revives) == 3, "revived at 6, 11, 16 while it waited, never after it left"
    assert kinds(calls, Suppress) == [Suppress(ROLES)]
    assert QUEUE_TTL_S == 15.0  # asked last at 1.0: gone at the first tick past 16.0


# ---- the master's agents ------------------------------------------------------------------------


def test_the_agents_are_asked_on_subscribe_while_jobs_wait_and_when_an_unlisted_agent_offers() -> None:
    run = Run()
    assert kinds(run.subscribe(0.0), RefreshAgents) == [RefreshAgents()]
    assert not [t for t in range(1, 100) if kinds(run.tick(float(t)), RefreshAgents)], "nothing waits"
    ask(run, "a", 100.0)
    asked = []
    for t in range(100, 170):
        ask(run, "a", float(t))  # the job keeps asking
        if kinds(run.tick(float(t)), RefreshAgents):
            asked.append(t)
    assert asked == [100, 130, 160], f"every {AGENTS_REFRESH_S:g} s while a job waits"
    joined = [t for t in (160.5, 161.0, 161.5, 162.0) if run.event(msg.OffersReceived(unlisted=True), t)]
    assert joined == [161.0, 162.0], "an unlisted agent: asked again, at most every second"


def test_an_unlisted_agent_is_asked_about_every_30_s_while_the_master_refuses_the_list() -> None:
    run = Run()
    assert decide.on_event(run.policy, msg.Subscribed(), 0.0) == [RefreshAgents()]
    decide.on_event(run.policy, msg.AgentsAnswered(False), 0.1)
    assert not decide.on_event(run.policy, msg.OffersReceived(unlisted=True), 5.0)
    assert decide.on_event(run.policy, msg.OffersReceived(unlisted=True), 30.0) == [RefreshAgents()]
    assert not decide.on_event(run.policy, msg.OffersReceived(unlisted=True), 31.0), "one ask out"


def test_an_unschedulable_job_asks_for_the_agents_again_at_most_every_3_s() -> None:
    run = Run()
    run.subscribe(0.0)
    asked = [t for t in (1.0, 2.0, 3.0, 4.0, 5.0, 6.5) if run.event(msg.Unschedulable("huge"), t)]
    assert asked == [3.0, 6.5]


# ---- fencing ----------------------------------------------------------------------------------


def test_a_lost_task_wakes_the_controller_once_its_fencing_timeout_passes() -> None:
    run = Run(fencing_timeout_s=60.0)
    run.subscribe(0.0)
    run.event(msg.Update("t1", "a1", Reported.LOST, lost_since=10.0), 10.0)
    run.event(msg.Update("t2", "a2", Reported.LOST, lost_since=10.0), 10.0)
    run.event(msg.Update("t2", "a2", Reported.RUNNING), 20.0)  # t2 came back: no deadline
    woken = [t for t in range(10, 200) if WakeWatchers() in run.tick(float(t))]
    assert woken == [70]


def test_a_removed_framework_leaves_nothing_to_kill_or_fence() -> None:
    run = Run(fencing_timeout_s=60.0)
    run.subscribe(0.0)
    run.event(msg.Stop((KillTarget("t1", "a1", None),)), 0.0)
    run.event(msg.Update("t2", "a2", Reported.LOST, lost_since=1.0), 1.0)
    run.event(msg.FrameworkRemoved(), 2.0)
    run.subscribe(3.0)
    assert not [c for t in range(3, 100) for c in kinds(run.tick(float(t)), Kill, WakeWatchers)]


def test_the_settings_are_the_configs_with_no_defaults_of_their_own() -> None:
    """``decide.Settings`` repeats no default: every field comes from a ``MesosConfig``."""
    assert all(f.default is MISSING and f.default_factory is MISSING for f in fields(Settings))
    config = MesosConfig(
        roles=("gpu", "*"),
        revive_interval_s=7.0,
        reconcile_interval_s=11.0,
        refuse_s=13.0,
        fencing_timeout_s=17.0,
        offer_hold_s=19.0,
        fifo_backfill_s=23.0,
        head_of_line_hold_s=29.0,
        cpu_tasks_on_gpu_agents=True,
    )
    settings = Settings.from_config(config)
    for field_ in fields(Settings):
        if field_.name != "options":
            assert getattr(settings, field_.name) == getattr(config, field_.name), field_.name
    assert settings.options.cpu_tasks_on_gpu_agents is True
    assert Settings.from_config(MesosConfig()).options.cpu_tasks_on_gpu_agents is False


# ---- offers coming: a REVIVE brings nothing when every agent's offers are held -------------------


def agent(agent_id: str, cpus: float = 4.0, mem: float = 4096.0) -> AgentOffer:
    return AgentOffer(agent_id, f"{agent_id}.example", cpus, mem, 0, ((31000, 31099),))


def revived_holding_every_agent(roles: tuple[str, ...] = ROLES) -> Run:
    """Agents a1 and a2 listed, an offer of each held since 0.5 (for a job that waits), and a
    REVIVE decided at 6.0 (the gang still waits after ``reviveIntervalSeconds``): the master
    offers nothing more, all it has for us is held."""
    run = Run(roles, revive_interval_s=5.0, refuse_s=5.0, offer_hold_s=100.0)
    run.subscribe(0.0)
    run.tick(0.1)
    ask(run, "big", 0.2)
    run.pool.agents = [agent("a1"), agent("a2")]
    for role in roles:
        run.pool.offers[f"o1{role}"] = Held(f"o1{role}", "a1", role, 0.5, 100.0)
        run.pool.offers[f"o2{role}"] = Held(f"o2{role}", "a2", role, 0.5, 100.0)
    run.event(msg.OffersReceived(agents=("a1", "a2")), 0.5)
    assert kinds(ask(run, "big", 6.0), Revive) == [Revive(roles)]
    return run


def _held_offer_of_an_unlisted_agent(run: Run) -> None:
    run.pool.offers["o9"] = Held("o9", "a9", "*", 6.1, 100.0)


def _a_task_of_ours_ended(run: Run) -> None:
    run.event(msg.Update("t1", "a1", Reported.ENDED), 6.1)


def _the_agents_list_is_asked_again(run: Run) -> None:
    run.policy.agents = decide_state.Agents(decide_state.AgentsAsk.OUT, run.policy.agents.asked_at)


def _an_offer_of_a2_was_rescinded(run: Run) -> None:
    run.pool.offers["o2b"] = Held("o2b", "a2", "*", 0.5, 100.0)  # a second offer of a2
    run.event(msg.Rescinded("a2"), 6.1)  # the other one: offered again on a next round


def _a_revive_is_asked_after_the_one_out(run: Run) -> None:
    run.pool.agents.append(agent("a3"))
    run.policy.offers = replace(run.policy.offers, again=True)


@pytest.mark.parametrize(
    ("case", "change", "coming"),
    [
        ("every agent's offers held", lambda run: None, False),
        (
            "a third agent not offered to us (busy, or offered elsewhere)",
            lambda run: run.pool.agents.append(agent("a3")),
            True,
        ),
        (
            "a third agent with nothing for us (reserved to other roles)",
            lambda run: run.pool.agents.append(agent("a3", 0.0, 0.0)),
            False,
        ),
        ("a held offer of an agent the list lacks (one joined)", _held_offer_of_an_unlisted_agent, True),
        ("the agents' list asked again", _the_agents_list_is_asked_again, True),
        ("a task of ours ended since the last offers", _a_task_of_ours_ended, True),
        ("an offer of a2 rescinded while another is held", _an_offer_of_a2_was_rescinded, True),
        ("a REVIVE to come while an agent is not held", _a_revive_is_asked_after_the_one_out, True),
        (
            "a REVIVE to come while every agent is held",
            lambda run: setattr(run.policy, "offers", replace(run.policy.offers, again=True)),
            False,
        ),
        ("disconnected", lambda run: run.event(msg.Disconnected(), 6.1), False),
    ],
)
def test_offers_coming_after_a_revive_unless_every_agent_is_held(
    case: str, change: object, coming: bool
) -> None:
    run = revived_holding_every_agent()
    change(run)  # type: ignore[operator]
    assert decide_offers.offers_coming(run.policy, True, run.pool) is coming, case


def test_offers_coming_until_the_agents_are_known() -> None:
    run = revived_holding_every_agent()
    assert decide_offers.offers_coming(run.policy, False, run.pool), (
        "no list yet: nothing to tell held from all"
    )
    run.policy.agents = decide_state.Agents(decide_state.AgentsAsk.OUT, run.policy.agents.asked_at)
    assert decide_offers.offers_coming(run.policy, False, run.pool)


def test_with_several_roles_every_role_of_every_agent_must_be_held() -> None:
    run = revived_holding_every_agent(("ml", "ml/team"))
    assert not decide_offers.offers_coming(run.policy, True, run.pool)
    del run.pool.offers["o2ml/team"]  # a2's resources reserved to ml/team may still come
    assert decide_offers.offers_coming(run.policy, True, run.pool)


def test_what_we_declined_counts_as_not_held_until_it_is_offered_again() -> None:
    """a2 has two offers; one is declined (with a filter). Until an offer of a2 comes again
    (the master offers all a2 has free for us at once, what we declined with it, once the
    filter ends or a REVIVE clears it), a2 may still bring an offer."""
    run = revived_holding_every_agent()
    run.pool.offers["o2old"] = Held("o2old", "a2", "*", 0.4, 6.5)
    assert kinds(run.tick(6.5), Decline) == [Decline(("o2old",), 5.0)]
    assert offers_coming(run.policy, run.pool)
    run.event(msg.OffersReceived(agents=("a1",)), 7.0)  # an offer of another agent: still coming
    assert kinds(ask(run, "big", 12.0), Revive) == [Revive(ROLES)], "clears the filter"
    assert offers_coming(run.policy, run.pool)
    run.pool.offers["o2new"] = Held("o2new", "a2", "*", 12.5, 100.0)
    run.event(msg.OffersReceived(agents=("a2",)), 12.5)  # what we declined came back
    assert not offers_coming(run.policy, run.pool)


def test_a_placement_that_cannot_be_helped_by_offers_is_not_kept_waiting_for_them() -> None:
    """Once every agent's offers are held, offers coming is false right after the REVIVE and
    stays false, pass after pass, though no offer round ever comes again."""
    run = revived_holding_every_agent()
    assert [t for t in (6.0, 8.0, 11.0, 11.5) if offers_coming(run.policy, run.pool)] == []
    assert kinds(ask(run, "big", 11.9), Revive) == [Revive(ROLES)]
    assert not offers_coming(run.policy, run.pool)
