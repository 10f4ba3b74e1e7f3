"""The daemon's timing (``tfdeclare/daemon/schedule.py``) in virtual time: each case is a
script of events and questions at given instants, and the steps the schedule answers. No
clock is read and nothing sleeps: the times are the script's."""

from __future__ import annotations

import itertools
from dataclasses import dataclass

import pytest

from tfdeclare.daemon.schedule import (
    MAX_DEBOUNCE_S,
    MIN_WAIT_S,
    Event,
    FileEvent,
    PassDone,
    PassRequest,
    Schedule,
    Step,
    SyncRequest,
)

INTERVAL = 30.0
DEBOUNCE = 0.05
MIN_SYNC = 1.0
HOLD = 5.0  # a pass that could not write: the next waits this long


def schedule(interval: float = INTERVAL, debounce: float = DEBOUNCE, min_sync: float = MIN_SYNC) -> Schedule:
    return Schedule(interval, debounce, min_sync)


def started(at: float = 0.0, **kwargs: float) -> Schedule:
    """A schedule whose first pass (a fetch, every file) ran at ``at`` and ended at once."""
    made = schedule(**kwargs)
    first = made.next(at)
    assert (first.run, first.sync, first.changes) == (True, True, None)
    made.on(PassDone(at))
    return made


@dataclass(frozen=True)
class Ask:
    """Ask the schedule at ``at``; what it answers is compared with ``expect``."""

    at: float
    expect: Step


def play(made: Schedule, script: list[Event | Ask]) -> None:
    for number, item in enumerate(script):
        if isinstance(item, Ask):
            assert made.next(item.at) == item.expect, f"step {number} at {item.at}"
        else:
            made.on(item)


def run(at: float, sync: bool = False, changes: frozenset[str] | None = frozenset()) -> Step:
    return Step(True, at, sync, changes)


def wait(until: float) -> Step:
    return Step(False, until)


CASES: dict[str, list[Event | Ask]] = {
    "nothing happens: the next look is the resync": [
        Ask(1.0, wait(INTERVAL)),
        Ask(INTERVAL - 0.001, wait(INTERVAL)),
        Ask(INTERVAL, run(INTERVAL, sync=True, changes=None)),
    ],
    "the resync interval counts from the end of the fetching pass": [
        Ask(INTERVAL, run(INTERVAL, sync=True, changes=None)),
        PassDone(INTERVAL + 7.0),  # a slow fetch
        Ask(INTERVAL + 8.0, wait(2 * INTERVAL + 7.0)),
    ],
    "a pass asked for runs at once, without a fetch": [
        PassRequest(5.0),
        Ask(5.0, run(5.0)),
        PassDone(5.2),
        Ask(5.2, wait(INTERVAL)),
    ],
    "file events wait until quiet for the debounce, then re-read only their paths": [
        FileEvent(5.0, ("a.yaml",)),
        Ask(5.0, wait(5.0 + DEBOUNCE)),
        FileEvent(5.03, ("b.yaml", "a.yaml")),
        Ask(5.05, wait(5.03 + DEBOUNCE)),
        Ask(5.03 + DEBOUNCE, run(5.03 + DEBOUNCE, changes=frozenset({"a.yaml", "b.yaml"}))),
        PassDone(5.2),
        Ask(5.2, wait(INTERVAL)),
    ],
    "a pass asked for during a burst of file events waits for its end": [
        FileEvent(5.0, ("a.yaml",)),
        PassRequest(5.01),
        Ask(5.01, wait(5.0 + DEBOUNCE)),
        Ask(5.0 + DEBOUNCE, run(5.0 + DEBOUNCE, changes=frozenset({"a.yaml"}))),
    ],
    "a folder written without pause is applied after MAX_DEBOUNCE_S": [
        *[FileEvent(5.0 + i * 0.04, (f"f{i}.yaml",)) for i in range(40)],  # 1.6 s, never quiet
        Ask(5.0 + MAX_DEBOUNCE_S - 0.01, wait(5.0 + MAX_DEBOUNCE_S)),
        Ask(
            5.0 + MAX_DEBOUNCE_S,
            run(5.0 + MAX_DEBOUNCE_S, changes=frozenset(f"f{i}.yaml" for i in range(40))),
        ),
    ],
    "events during a pass make the next pass, debounced from them": [
        PassRequest(5.0),
        Ask(5.0, run(5.0)),
        FileEvent(5.1, ("a.yaml",)),
        PassDone(5.12),
        Ask(5.12, wait(5.1 + DEBOUNCE)),
        Ask(5.2, run(5.2, changes=frozenset({"a.yaml"}))),
    ],
    "a resync re-reads every file, whatever the events named": [
        FileEvent(INTERVAL - 0.01, ("a.yaml",)),
        Ask(INTERVAL - 0.01 + DEBOUNCE, run(INTERVAL - 0.01 + DEBOUNCE, sync=True, changes=None)),
    ],
    "a pass that could not read the files gives them back: the next reads every file": [
        FileEvent(5.0, ("a.yaml",)),
        Ask(5.1, run(5.1, changes=frozenset({"a.yaml"}))),
        PassDone(5.2, applied=False),
        FileEvent(6.0, ("b.yaml",)),
        Ask(6.1, run(6.1, changes=None)),
    ],
    "a sync request fetches at once when the last fetch is old enough": [
        SyncRequest(5.0),
        Ask(5.0, run(5.0, sync=True, changes=None)),
        PassDone(5.1),
        Ask(5.1, wait(5.1 + INTERVAL)),
    ],
    "a sync request too soon after a fetch waits for the minimum interval": [
        SyncRequest(0.2),
        Ask(0.2, wait(MIN_SYNC)),
        Ask(MIN_SYNC, run(MIN_SYNC, sync=True, changes=None)),
    ],
    "a pass that is due anyway does not fetch for a sync request that must wait": [
        SyncRequest(0.2),
        PassRequest(0.3),
        Ask(0.3, run(0.3)),
        PassDone(0.4),
        Ask(0.4, wait(MIN_SYNC)),
        Ask(MIN_SYNC, run(MIN_SYNC, sync=True, changes=None)),
    ],
    "a pass's wake-up (a backoff's end) runs a pass then": [
        PassRequest(1.0),
        Ask(1.0, run(1.0)),
        PassDone(1.1, wake_at=11.1),
        Ask(1.2, wait(11.1)),
        Ask(11.1, run(11.1)),
        PassDone(11.2),
        Ask(11.2, wait(INTERVAL)),
    ],
    "a pass that could not write holds the next back, whatever asks sooner": [
        PassRequest(1.0),
        Ask(1.0, run(1.0)),
        PassDone(1.1, wake_at=1.3, hold_s=HOLD),  # a restart due at 1.3 that was not recorded
        Ask(1.3, wait(1.1 + HOLD)),
        PassRequest(1.4),  # a backend's watch saw the files the failed write touched
        Ask(1.4, wait(1.1 + HOLD)),
        FileEvent(1.5, ("a.yaml",)),
        Ask(2.0, wait(1.1 + HOLD)),
        Ask(1.1 + HOLD, run(1.1 + HOLD, changes=frozenset({"a.yaml"}))),
        PassDone(1.2 + HOLD),  # written this time: no hold
        PassRequest(1.3 + HOLD),
        Ask(1.3 + HOLD, run(1.3 + HOLD)),
    ],
    "a held pass that nothing asks for waits for what falls due after the hold": [
        PassRequest(1.0),
        Ask(1.0, run(1.0)),
        PassDone(1.1, hold_s=HOLD),
        Ask(1.2, wait(INTERVAL)),
        Ask(INTERVAL, run(INTERVAL, sync=True, changes=None)),
        PassDone(INTERVAL + 0.1, hold_s=HOLD),
        SyncRequest(INTERVAL + 1.2),  # its minimum interval is past before the hold ends
        Ask(INTERVAL + 1.2, wait(INTERVAL + 0.1 + HOLD)),
        Ask(INTERVAL + 0.1 + HOLD, run(INTERVAL + 0.1 + HOLD, sync=True, changes=None)),
    ],
    "a wake-up already past waits MIN_WAIT_S, not a busy loop": [
        PassRequest(1.0),
        Ask(1.0, run(1.0)),
        PassDone(1.5, wake_at=0.5),
        Ask(1.5, wait(1.5 + MIN_WAIT_S)),
    ],
}


@pytest.mark.parametrize("name", CASES)
def test_schedule(name: str) -> None:
    play(started(), CASES[name])


def simulate(made: Schedule, events: list[Event], until: float, pass_s: float = 0.05) -> list[Step]:
    """The daemon's loop in virtual time: ``events`` arrive at their times (also during a
    pass), the loop waits for the schedule's time or the next event, each pass takes
    ``pass_s``. The passes run, with the instant each started as ``wake_at``."""
    pending = sorted(events, key=lambda e: e.at)
    passes: list[Step] = []
    now = 0.0
    while now < until:
        while pending and pending[0].at <= now:
            made.on(pending.pop(0))
        step = made.next(now)
        if step.run:
            passes.append(step)
            now += pass_s
            while pending and pending[0].at <= now:  # those that came during the pass
                made.on(pending.pop(0))
            made.on(PassDone(now))
        else:
            now = min(step.wake_at, pending[0].at if pending else until)
    return passes


def test_sync_requests_are_coalesced_to_one_fetch_per_minimum_interval() -> None:
    """200 POST /sync in 2 s: one fetch per minimum interval while they come (from the first),
    and one after the last; never 200."""
    requests: list[Event] = [SyncRequest(1.0 + number * 0.01) for number in range(200)]
    fetches = [
        step.wake_at for step in simulate(started(0.0, min_sync=0.5), requests, until=10.0) if step.sync
    ]
    assert fetches == [1.0, 1.5, 2.0, 2.5, 3.0]  # 2.99: the last request, honoured at 3.0
    assert all(round(b - a, 9) >= 0.5 for a, b in itertools.pairwise(fetches))


def test_file_events_at_a_steady_trickle_make_one_pass_per_max_debounce() -> None:
    """A file written every 40 ms for 3 s (never quiet for the debounce): a pass at most every
    ``MAX_DEBOUNCE_S``, and one after the last event once it is quiet."""
    events: list[Event] = [FileEvent(1.0 + number * 0.04, ("a.yaml",)) for number in range(75)]
    passes = [step.wake_at for step in simulate(started(0.0), events, until=10.0)]
    # from the first event of each burst, MAX_DEBOUNCE_S; the last burst ends quiet sooner
    assert passes == pytest.approx([1.0 + MAX_DEBOUNCE_S, 2.04 + MAX_DEBOUNCE_S, 1.0 + 74 * 0.04 + DEBOUNCE])


def test_a_sync_request_joins_a_pending_one_until_its_fetch_starts() -> None:
    made = started(0.0)
    assert made.on(SyncRequest(0.1)) is True
    assert made.on(SyncRequest(0.2)) is False  # pending: joins it
    assert made.next(MIN_SYNC).sync
    assert made.on(SyncRequest(MIN_SYNC + 0.01)) is True  # during its pass: a new request
