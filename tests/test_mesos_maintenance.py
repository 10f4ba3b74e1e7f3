"""The Mesos backend's pure decisions about the platform's own events: which Mesos states and
reasons are platform events (a table), maintenance windows read from ``unavailability``, the
answer to an inverse offer, and placement that keeps gangs out of maintenance windows when an
agent outside one fits."""

from __future__ import annotations

from dataclasses import replace

import pytest

from tests.test_placement import ONE, agent, agents_used, gang
from tfdeclare.backends.mesos.maintenance import (
    ASK_AGAIN_S,
    CANNOT_MOVE_REFUSE_S,
    MARGIN_S,
    MAX_REFUSE_S,
    OurTask,
    Window,
    answer,
    cuts_in,
    window_of,
)
from tfdeclare.backends.mesos.placement import place_avoiding_windows
from tfdeclare.backends.mesos.placement_index import AgentIndex
from tfdeclare.backends.mesos.placement_values import AgentOffer, GangFit, NoFit
from tfdeclare.backends.mesos.taskstate import cause_of
from tfdeclare.core.enums import EndCause

NOW = 1_800_000_000.0


@pytest.mark.parametrize(
    ("state", "reason", "cause"),
    [
        ("TASK_FAILED", None, EndCause.JOB),
        ("TASK_FAILED", "REASON_CONTAINER_LIMITATION_MEMORY", EndCause.JOB),  # its own OOM
        ("TASK_FAILED", "REASON_CONTAINER_LAUNCH_FAILED", EndCause.JOB),  # its image or spec
        ("TASK_KILLED", None, EndCause.JOB),
        ("TASK_FINISHED", None, EndCause.JOB),
        ("TASK_ERROR", "REASON_TASK_INVALID", EndCause.JOB),
        # DRAIN_AGENT: the agent kills every task with this reason (mark_gone: GONE_BY_OPERATOR)
        ("TASK_KILLING", "REASON_AGENT_DRAINING", EndCause.AGENT_DRAINED),
        ("TASK_KILLED", "REASON_AGENT_DRAINING", EndCause.AGENT_DRAINED),
        ("TASK_GONE_BY_OPERATOR", "REASON_AGENT_DRAINING", EndCause.AGENT_DRAINED),
        # an operator marked the agent gone
        ("TASK_GONE_BY_OPERATOR", "REASON_AGENT_REMOVED_BY_OPERATOR", EndCause.KILLED_BY_OPERATOR),
        ("TASK_LOST", "REASON_SLAVE_REMOVED_BY_OPERATOR", EndCause.KILLED_BY_OPERATOR),
        # an agent unreachable, removed or restarted
        ("TASK_UNREACHABLE", "REASON_AGENT_REMOVED", EndCause.AGENT_LOST),
        ("TASK_LOST", "REASON_SLAVE_REMOVED", EndCause.AGENT_LOST),
        ("TASK_LOST", "REASON_AGENT_DISCONNECTED", EndCause.AGENT_LOST),
        ("TASK_UNKNOWN", "REASON_RECONCILIATION", EndCause.AGENT_LOST),
        ("TASK_GONE", "REASON_RECONCILIATION", EndCause.AGENT_LOST),
        ("TASK_FAILED", "REASON_AGENT_RESTARTED", EndCause.AGENT_LOST),
        # a launch the cluster dropped
        ("TASK_DROPPED", "REASON_INVALID_OFFERS", EndCause.LAUNCH_DROPPED),
    ],
)
def test_which_mesos_states_are_platform_events(state: str, reason: str | None, cause: EndCause) -> None:
    assert cause_of(state, reason) is cause


def test_our_own_move_off_a_maintenance_agent_says_so_whatever_mesos_answers() -> None:
    assert cause_of("TASK_KILLED", None, EndCause.MAINTENANCE.value) is EndCause.MAINTENANCE


@pytest.mark.parametrize(
    ("raw", "window"),
    [
        ({"start": {"nanoseconds": 1_800_000_000_000_000_000}}, Window(1_800_000_000.0)),
        (
            {
                "start": {"nanoseconds": 1_800_000_000_000_000_000},
                "duration": {"nanoseconds": 3_600_000_000_000},
            },
            Window(1_800_000_000.0, 1_800_003_600.0),
        ),
        (None, None),
        ({}, None),
        ({"start": {"nanoseconds": "soon"}}, None),
        ({"start": {"nanoseconds": True}}, None),
    ],
)
def test_a_window_is_read_from_unavailability(raw: object, window: Window | None) -> None:
    assert window_of(raw) == window


@pytest.mark.parametrize(
    ("window", "cut"),
    [
        (None, False),
        (Window(NOW + 86_400), True),  # far ahead: a training job has no known end
        (Window(NOW - 10), True),  # open-ended, begun
        (Window(NOW - 7200, NOW - 3600), False),  # over
        (Window(NOW - 60, NOW + 60), True),
    ],
)
def test_which_windows_concern_a_gang_placed_now(window: Window | None, cut: bool) -> None:
    assert cuts_in(window, NOW) is cut


def test_an_inverse_offer_for_an_agent_without_our_tasks_is_accepted() -> None:
    said = answer(Window(NOW + 10), [], NOW)
    assert said.accept and said.move == ()


def test_our_tasks_move_off_when_the_window_nears_and_the_offer_is_declined_meanwhile() -> None:
    tasks = [OurTask("a", 30.0), OurTask("b", 120.0)]
    # far ahead: wait, and be asked again at the latest hourly
    far = answer(Window(NOW + 100_000), tasks, NOW)
    assert not far.accept and far.move == () and far.refuse_s == MAX_REFUSE_S
    # ahead, but not yet near: asked again when the longest grace and the margin remain
    ahead = answer(Window(NOW + 1000), tasks, NOW)
    assert not ahead.accept and ahead.move == ()
    assert ahead.refuse_s == pytest.approx(1000 - 120 - MARGIN_S)
    # near (or begun): move them now, and hold the offer until they are off (then accepted)
    near = answer(Window(NOW + 100), tasks, NOW)
    assert not near.accept and near.move == ("a", "b") and near.hold
    assert not far.hold and not ahead.hold
    # asked again a moment before it is time: never a filter shorter than the least
    assert answer(Window(NOW + 120 + MARGIN_S + 1), tasks, NOW).refuse_s == ASK_AGAIN_S
    # a task already stopping is not asked again
    again = answer(Window(NOW + 100), [replace(tasks[0], moving=True), tasks[1]], NOW + 5)
    assert again.move == ("b",)
    # no window given: at once
    assert answer(None, tasks, NOW).move == ("a", "b")
    # near, but no agent outside a window is known: moving would only bring them back, so decline
    stuck = answer(Window(NOW + 100), tasks, NOW, elsewhere=False)
    assert not stuck.accept and stuck.move == () and not stuck.hold
    assert stuck.refuse_s == CANNOT_MOVE_REFUSE_S


def windowed(name: str, start: float, end: float | None = None) -> AgentOffer:
    return replace(agent(name), window=(start, end))


def test_a_gang_avoids_an_agent_inside_a_window_when_another_fits() -> None:
    views = [windowed("a1", NOW + 3600), agent("a2")]
    fit, inside = place_avoiding_windows(gang(2), AgentIndex(views), NOW)
    assert agents_used(fit) == {"a2"} and not inside
    # without the window, pack would have chosen a1 (the lower id): the window decided
    plain, _ = place_avoiding_windows(gang(2), AgentIndex([agent("a1"), agent("a2")]), NOW)
    assert agents_used(plain) == {"a1"}


def test_a_gang_uses_a_window_agent_only_when_nothing_else_fits_and_says_so() -> None:
    views = [windowed("a1", NOW + 3600, NOW + 7200), agent("a2", cpus=1)]
    fit, inside = place_avoiding_windows(gang(3), AgentIndex(views), NOW)
    assert isinstance(fit, GangFit) and "a1" in agents_used(fit) and inside
    # a window that is over concerns no one
    over = [windowed("a1", NOW - 7200, NOW - 3600), agent("a2")]
    fit, inside = place_avoiding_windows(gang(2), AgentIndex(over), NOW)
    assert agents_used(fit) == {"a1"} and not inside
    # nothing fits anywhere: the ordinary answer
    nothing, inside = place_avoiding_windows(gang(9, ONE), AgentIndex(views), NOW)
    assert isinstance(nothing, NoFit) and not inside


def test_the_index_keeps_its_windowed_agents_current() -> None:
    index = AgentIndex([windowed("a1", NOW), agent("a2")])
    assert [v.agent_id for v in index.windowed()] == ["a1"]
    index.put(windowed("a2", NOW + 60))
    index.put(agent("a1"))  # its window was cancelled
    assert [v.agent_id for v in index.windowed()] == ["a2"]
    amended = index.amended({("a2", "*"): None, ("a1", "*"): windowed("a1", NOW)})
    assert [v.agent_id for v in amended.windowed()] == ["a1"]
    index.drop("a2", "*")
    assert index.windowed() == []
