"""When a container task's port holder lets the reservation go (backends/local/port_holder.py),
in virtual time: once the engine says the container is not running; while the engine does not
answer, not before the task's end is on record, its folder is gone, or the engine has said
nothing for ``GIVE_UP_S`` (an engine that answered for a while and then broke counts afresh).
A real descriptor of a real reservation (ports.py) is held and closed."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tfdeclare.backends.local import ports
from tfdeclare.backends.local.docker_runtime import EngineError
from tfdeclare.backends.local.port_holder import GIVE_UP_S, RETRY_S, hold_one


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += seconds


class Engine:
    """Answers each ``wait_stopped`` as ``script`` says: ``("stopped", s)`` returns after s
    seconds, ``("away", s)`` fails after s seconds; ``on_call`` runs before each answer."""

    def __init__(self, clock: Clock, script: list[tuple[str, float]], on_call: object = None) -> None:
        self.clock, self.script, self.calls = clock, script, 0
        self.on_call = on_call

    def wait_stopped(self, name: str) -> None:
        self.calls += 1
        if callable(self.on_call):
            self.on_call(self)
        what, lasted = self.script.pop(0) if self.script else ("away", 0.0)
        self.clock.now += lasted
        if what == "away":
            raise EngineError("the Docker engine did not answer")


@pytest.fixture
def reservation(tmp_path: Path) -> int:
    fd = ports.reserve(40123, tmp_path / "locks")
    assert fd is not None
    return fd


def _closed(fd: int) -> bool:
    try:
        os.fstat(fd)
    except OSError:
        return True
    return False


def _held_until(engine: Engine, clock: Clock, fd: int, folder: Path) -> float:
    hold_one(engine, "c", fd, folder, clock=clock, sleep=clock.sleep)
    assert _closed(fd)
    return clock.now


def test_let_go_when_the_engine_says_the_container_stopped(tmp_path: Path, reservation: int) -> None:
    clock = Clock()
    engine = Engine(clock, [("away", 0.0), ("away", 0.0), ("stopped", 3600.0)])
    assert ports.held(40123, tmp_path / "locks")
    assert _held_until(engine, clock, reservation, tmp_path) == 3600.0 + 2 * RETRY_S
    assert not ports.held(40123, tmp_path / "locks"), "the port is free again"


def test_an_engine_away_keeps_it_until_the_end_is_on_record_or_the_folder_goes(
    tmp_path: Path, reservation: int
) -> None:
    clock = Clock()
    folder = tmp_path / "task"
    folder.mkdir()

    def record_end_at_60_s(engine: Engine) -> None:
        if clock.now >= 60.0:
            (folder / "exit.json").write_text("{}")

    assert _held_until(Engine(clock, [], record_end_at_60_s), clock, reservation, folder) == 60.0
    again = ports.reserve(40123, tmp_path / "locks")
    assert again is not None
    gone = tmp_path / "forgotten"  # never there: a task folder removed
    clock.now = 0.0
    assert _held_until(Engine(clock, []), clock, again, gone) == 0.0


def test_an_engine_that_answers_nothing_for_long_has_it_let_go_then_and_not_before(
    tmp_path: Path, reservation: int
) -> None:
    clock = Clock()
    # It waited with us for an hour, then broke: the time away counts from then on.
    engine = Engine(clock, [("away", 3600.0)])
    assert _held_until(engine, clock, reservation, tmp_path) == 3600.0 + GIVE_UP_S
    assert engine.calls == int(GIVE_UP_S / RETRY_S) + 1
