"""When the Docker engine was away, and whether a container ended with it
(``backends/local/engine_outages.py``), table by table; and how the cause is taken: a platform
event, never the job's failure (``core.run.causes``)."""

from __future__ import annotations

import pytest

from tfdeclare.backends.local.engine_outages import HOLD_S, SLACK_S, EngineOutages, Verdict
from tfdeclare.core.enums import EndCause, TaskState
from tfdeclare.core.run.causes import classify

# (answered, at) asks of the engine: up at 10 and 20, away at 25 and 30, back at 40, up at 50
ASKS = [(True, 10.0), (True, 20.0), (False, 25.0), (False, 30.0), (True, 40.0), (True, 50.0)]


@pytest.mark.parametrize(
    ("finished_at", "with_engine"),
    [
        (15.0, False),  # ended while the engine answered before and after
        (20.0 - SLACK_S - 0.1, False),
        (22.0, True),  # after its last answer, before the first failed ask: its shutdown had begun
        (27.0, True),
        (40.0 + SLACK_S, True),
        (45.0, False),  # after it was back
        (None, False),  # no end time known
    ],
)
def test_a_container_that_ended_while_the_engine_was_away_ended_with_it(
    finished_at: float | None, with_engine: bool
) -> None:
    outages = EngineOutages()
    for answered, at in ASKS:
        outages.saw(answered, at)
    assert outages.ended_with_engine(finished_at) is with_engine


# A real engine's stop (Debian's dockerd, SIGTERM): it keeps answering while it stops its
# containers (one ended at 11 with 143, the last killed at 19.9 with 137), closes its API at
# 20 and answers again at 40. Listings every 0.3 s see the ends with the engine "up".
STOPPING = [(True, 10.0), (True, 11.5), (True, 19.9), (False, 20.2), (False, 30.0), (True, 40.0)]


@pytest.mark.parametrize(
    ("asks", "finished_at", "signalled", "verdict"),
    [
        # seen ended while the engine still answers: not judged yet
        (STOPPING[:2], 11.0, True, Verdict.WAIT),
        (STOPPING[:3], 19.9, True, Verdict.WAIT),
        # the engine went away within HOLD_S of the end: it was stopping (the 143 ten seconds
        # before its API closed too), under way or after it answered again
        (STOPPING[:4], 11.0, True, Verdict.ENGINE),
        (STOPPING, 11.0, True, Verdict.ENGINE),
        (STOPPING, 19.9, True, Verdict.ENGINE),
        # a code that is not a signal, ended before the outage's slack: the job's at once
        (STOPPING, 11.0, False, Verdict.JOB),
        # the engine answered HOLD_S past a signal's end and answers now: the job's
        ([(True, 10.0), (True, 11.0 + HOLD_S)], 11.0, True, Verdict.JOB),
        ([(True, 10.0), (True, 11.0 + HOLD_S - 0.1)], 11.0, True, Verdict.WAIT),
        # away since, but only after HOLD_S: the job's once it answers again
        ([(True, 10.0), (True, 11.0 + HOLD_S + 1), (False, 35.0)], 11.0, True, Verdict.WAIT),
        ([(True, 10.0), (True, 11.0 + HOLD_S + 1), (False, 35.0), (True, 50.0)], 11.0, True, Verdict.JOB),
        # never answered this controller yet: wait for it
        ([], 11.0, True, Verdict.WAIT),
        # a controller started long after (no failed ask): not known, the job's (as before)
        ([(True, 500.0)], 11.0, True, Verdict.JOB),
        (STOPPING, None, True, Verdict.JOB),
    ],
)
def test_a_signals_end_is_judged_by_what_the_engine_said_after_it(
    asks: list[tuple[bool, float]], finished_at: float | None, signalled: bool, verdict: Verdict
) -> None:
    outages = EngineOutages()
    for answered, at in asks:
        outages.saw(answered, at)
    assert outages.verdict(finished_at, signalled) is verdict


def test_an_outage_under_way_covers_everything_since_the_last_answer() -> None:
    outages = EngineOutages()
    outages.saw(True, 10.0)
    outages.saw(False, 12.0)
    assert outages.ended_with_engine(11.0) and outages.ended_with_engine(1000.0)
    assert not outages.ended_with_engine(5.0)
    outages.saw(True, 14.0)
    assert not outages.ended_with_engine(1000.0)


def test_no_failed_ask_no_outage() -> None:
    outages = EngineOutages()
    for at in (1.0, 2.0, 3.0):
        outages.saw(True, at)
    assert outages.outages() == () and not outages.ended_with_engine(2.5) and not outages.away_since(0.0)


def test_a_container_found_removed_went_with_the_engine_only_if_it_was_away_since_it_started() -> None:
    outages = EngineOutages()
    for answered, at in ASKS:
        outages.saw(answered, at)
    assert outages.away_since(35.0)  # started before it came back at 40
    assert not outages.away_since(45.0)
    assert not outages.away_since(None)


def test_only_the_last_outages_are_kept() -> None:
    outages = EngineOutages()
    for n in range(40):
        outages.saw(False, n * 10.0)
        outages.saw(True, n * 10.0 + 1)
    assert len(outages.outages()) == 16
    assert not outages.ended_with_engine(5.0) and outages.ended_with_engine(385.0)  # (381, 391)


@pytest.mark.parametrize(
    ("state", "counted_as"),
    [
        (TaskState.FAILED, EndCause.ENGINE_RESTART),  # exit 143 / 137 at the engine's shutdown
        (TaskState.STOPPED, EndCause.ENGINE_RESTART),
        (TaskState.SUCCEEDED, EndCause.JOB),  # exit 0 ended by itself, whatever else happened
    ],
)
def test_an_engine_restart_is_a_platform_event(state: TaskState, counted_as: EndCause) -> None:
    assert classify(state, EndCause.ENGINE_RESTART) is counted_as
    assert EndCause.ENGINE_RESTART.platform
