"""A background controller starting does not give way to a look at the lock
(``ControllerLock.holder`` takes it for an instant: ``status``, ``logs --follow``, the command
waiting for the controller it started), only to a controller that holds it. Real ``flock``s on
a real lock file; the pause between tries is the test's (``sleep``), so nothing sleeps."""

from __future__ import annotations

from pathlib import Path

import pytest

from tfdeclare.cli.background import PROBE_PAUSE_S, PROBE_TRIES, PURPOSE, acquire_past_probes
from tfdeclare.shell.lock import ControllerLock, LockHeld


def test_a_look_at_the_lock_in_the_instant_it_starts_does_not_turn_it_away(tmp_path: Path) -> None:
    look = ControllerLock(tmp_path)
    look.acquire("a look")  # what holder() does for an instant, held here until the first pause
    pauses: list[float] = []

    def sleep(seconds: float) -> None:
        pauses.append(seconds)
        look.release()  # the look is over

    starting = ControllerLock(tmp_path)
    try:
        acquire_past_probes(starting, PURPOSE, sleep=sleep, log="controller.log")
        assert pauses == [PROBE_PAUSE_S]
        held = ControllerLock(tmp_path).holder()
        assert held is not None and held["purpose"] == PURPOSE and held["log"] == "controller.log"
    finally:
        starting.release()


def test_a_controller_that_holds_the_lock_turns_it_away(tmp_path: Path) -> None:
    controller = ControllerLock(tmp_path)
    controller.acquire("apply")
    pauses: list[float] = []
    try:
        with pytest.raises(LockHeld) as held:
            acquire_past_probes(ControllerLock(tmp_path), PURPOSE, sleep=pauses.append)
        assert held.value.holder["purpose"] == "apply"
        assert pauses == [PROBE_PAUSE_S] * (PROBE_TRIES - 1)
    finally:
        controller.release()
