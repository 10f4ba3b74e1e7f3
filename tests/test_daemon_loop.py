"""The daemon's loop in-process (``tfdeclare/daemon/service.py``): a real folder source (its file
events) over a temp folder of specs, the real controller and state, the in-memory fake backend
and an injected clock. The test waits on the end of passes (a condition), never on a sleep."""

from __future__ import annotations

import re
import threading
from collections.abc import Callable, Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from tests.controller_world import BACKOFF, World, job_text
from tfdeclare.core.enums import Phase, Reason, Role
from tfdeclare.daemon.service import Daemon, DaemonOptions
from tfdeclare.daemon.sources import FolderSource

SETTLE_S = 3.0  # the daemon's settle time for changes that stop or restart tasks


class RecordingDaemon(Daemon):
    """The real daemon; keeps the file events its source delivered."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.file_events: list[str] = []
        self.finished = 0  # passes whose bookkeeping (health, metrics, events) is done
        self.finished_changed = threading.Condition()

    def _pass(self, changes: frozenset[str] | None = None) -> tuple[float | None, bool]:
        done = super()._pass(changes)
        with self.finished_changed:
            self.finished += 1
            self.finished_changed.notify_all()
        return done

    def on_file_event(self, paths: list[str]) -> None:
        self.file_events.extend(paths)
        super().on_file_event(paths)


class Running:
    def __init__(self, world: World, options: DaemonOptions) -> None:
        self.world = world
        self.controller = world.controller
        source = FolderSource(world.specs, [world.root / "state", world.status_dir])
        self.daemon = RecordingDaemon(
            source, world.controller, world.files, world.status_dir, options, clock=world.clock
        )
        self.thread = threading.Thread(target=self.daemon.run, name="daemon-under-test", daemon=True)
        self.thread.start()

    def wait(self, check: Callable[[], bool] = lambda: True, after: int | None = None) -> int:
        """Until a pass (after the current one, or pass ``after``) ends with ``check`` true, and
        the daemon has finished that pass (health, metrics and events are set after the
        controller's part)."""
        number = self.controller.wait_for_pass(self.controller.passes if after is None else after, check)
        with self.daemon.finished_changed:
            assert self.daemon.finished_changed.wait_for(lambda: self.daemon.finished >= number, 10)
        return number

    def stop(self) -> None:
        self.daemon.stop()
        self.thread.join(timeout=10)
        assert not self.thread.is_alive(), "the loop did not stop"
        self.daemon.source.close()


@pytest.fixture
def world(tmp_path: Path) -> World:
    return World(tmp_path)


@pytest.fixture
def daemon(world: World) -> Iterator[Running]:
    world.write("a", job_text("a"))
    running = Running(world, DaemonOptions(interval_s=3600, debounce_s=0.0, prune=True, settle_s=SETTLE_S))
    running.wait(lambda: len(world.tasks("a")) == 2, after=0)
    yield running
    running.stop()


def test_the_first_pass_applies_the_folder_and_writes_status(daemon: Running, world: World) -> None:
    status = world.status("a")
    assert status is not None and status["specHash"] == world.record("a").spec_hash
    healthy, health = daemon.daemon.health()
    assert healthy and health["sourceError"] is None
    assert re.search(r"^tfdeclare_tasks_launched_total 2(\.0)?$", daemon.daemon.metrics_text(), re.M)


def test_a_new_file_is_applied_on_its_file_event(daemon: Running, world: World) -> None:
    world.write("b", job_text("b"))
    daemon.wait(lambda: len(world.tasks("b")) == 2)
    assert world.record("b").source is not None


def test_a_changed_file_restarts_its_job_once_it_has_settled_on_the_clock(
    daemon: Running, world: World
) -> None:
    before = {t.task_id for t in world.tasks("a").values()}
    world.write("a", job_text("a", extra="env: {LR: '0.1'}"))
    daemon.wait(lambda: world.record("a").not_synced is not None)
    assert world.record("a").not_synced[0] is Reason.NOT_SETTLED  # type: ignore[index]
    assert {t.task_id for t in world.tasks("a").values()} == before, "nothing restarts before the settle time"
    world.clock.advance(SETTLE_S)
    daemon.daemon.request_pass()
    daemon.wait(
        lambda: len(world.tasks("a")) == 2 and not {t.task_id for t in world.tasks("a").values()} & before
    )
    assert world.record("a").attempt == 1


def test_a_task_that_ends_wakes_the_loop_and_backoff_runs_on_the_clock(daemon: Running, world: World) -> None:
    world.backend.finish(world.task("a", Role.WORKER, 0).task_id, 1)  # the backend's watch fires
    daemon.wait(lambda: world.record("a").phase is Phase.RESTARTING and world.tasks("a") == {})
    launched = len(world.backend.cluster.launched)
    daemon.daemon.request_pass()  # a pass before the backoff is over launches nothing
    daemon.wait()
    assert len(world.backend.cluster.launched) == launched
    world.clock.advance(BACKOFF.delay(1))
    daemon.daemon.request_pass()
    daemon.wait(lambda: len(world.tasks("a")) == 2)
    assert world.record("a").restarts == 1


def test_an_invalid_file_keeps_its_job_running_and_the_loop_goes_on(daemon: Running, world: World) -> None:
    ids = {t.task_id for t in world.tasks("a").values()}
    world.write("a", "apiVersion: tfdeclare/v1\nkind: TFJob\nmetadata: {name: a}\nspec: {replicas: 3}\n")
    daemon.wait(lambda: (world.record("a").not_synced or (None,))[0] is Reason.INVALID_SPEC)
    assert {t.task_id for t in world.tasks("a").values()} == ids
    world.write("b", job_text("b"))
    daemon.wait(lambda: len(world.tasks("b")) == 2)


def test_a_removed_file_deletes_its_job_with_prune_once_settled(daemon: Running, world: World) -> None:
    world.write("b", job_text("b"))
    daemon.wait(lambda: len(world.tasks("b")) == 2)
    (world.specs / "a.yaml").unlink()
    daemon.wait(lambda: world.record("a").not_synced is not None)
    assert len(world.tasks("a")) == 2, "nothing is deleted before the settle time"
    world.clock.advance(SETTLE_S)
    daemon.daemon.request_pass()
    daemon.wait(lambda: world.store.load("a") is None and world.status("a") is None)
    assert world.tasks("a") == {} and len(world.tasks("b")) == 2


def test_its_own_status_writes_in_the_watched_folder_are_not_events(tmp_path: Path) -> None:
    world = World(tmp_path, status_dir=tmp_path / "specs" / "status")  # status inside the specs folder
    world.write("a", job_text("a"))
    running = Running(world, DaemonOptions(interval_s=3600, debounce_s=0.0))
    try:
        running.wait(lambda: world.status("a") is not None, after=0)
        world.backend.finish(world.task("a", Role.WORKER, 0).task_id, 0)  # status changes again
        running.wait(lambda: world.status("a")["replicas"]["worker"]["succeeded"] == 1)  # type: ignore[index]
        world.write("b", job_text("b"))  # delivered after any event of the status writes above
        running.wait(lambda: len(world.tasks("b")) == 2)
        events = running.daemon.file_events
        assert any(e.endswith("b.yaml") for e in events)
        assert not [e for e in events if "status" in Path(e).parts], events
    finally:
        running.stop()


def test_health_says_overdue_when_no_pass_ran_for_long_on_the_clock(daemon: Running, world: World) -> None:
    assert daemon.daemon.health()[0]
    world.clock.advance(3 * 3600 + 1)  # three resync intervals without a pass, on the clock
    healthy, health = daemon.daemon.health()
    assert not healthy and health["passOverdue"]


def test_health_says_starting_until_the_first_pass_and_overdue_if_it_never_ends(world: World) -> None:
    source = FolderSource(world.specs, [world.root / "state", world.status_dir])
    options = DaemonOptions(interval_s=10)  # overdue after max(3 intervals, 60 s)
    daemon = Daemon(source, world.controller, world.files, world.status_dir, options, clock=world.clock)
    try:
        healthy, health = daemon.health()  # no pass has run: starting, not a hang
        assert (healthy, health["status"], health["passOverdue"]) == (False, "starting", False)
        world.clock.advance(59)  # a first pass may take this long (3 intervals, at least 60 s)
        assert daemon.health()[1]["status"] == "starting"
        world.clock.advance(2)  # past it: a first pass that never ends is a hang
        healthy, health = daemon.health()
        assert (healthy, health["status"], health["passOverdue"]) == (False, "degraded", True)
        daemon.shown = replace(daemon.shown, last_pass_at=world.clock())  # as a pass publishes it
        healthy, health = daemon.health()
        assert (healthy, health["status"], health["passOverdue"]) == (True, "ok", False)
    finally:
        daemon.notifier.close()
        source.close()


def test_suspend_in_the_file_stops_the_job_once_settled_and_false_resumes_it(
    daemon: Running, world: World
) -> None:
    before = {t.task_id for t in world.tasks("a").values()}
    world.write("a", job_text("a", extra="suspend: true"))
    daemon.wait(lambda: world.record("a").not_synced is not None)
    assert world.record("a").not_synced[0] is Reason.NOT_SETTLED  # type: ignore[index]
    assert {t.task_id for t in world.tasks("a").values()} == before, "nothing stops before the settle time"
    world.clock.advance(SETTLE_S)
    daemon.daemon.request_pass()
    daemon.wait(lambda: world.record("a").phase is Phase.SUSPENDED and not world.tasks("a"))
    record = world.record("a")
    assert record.reason is Reason.SUSPENDED and record.restarts == 0 and record.suspensions == 1
    status = world.status("a")
    assert status is not None and status["phase"] == "Suspended"
    assert re.search(r'^tfdeclare_jobs\{phase="Suspended"\} 1(\.0)?$', daemon.daemon.metrics_text(), re.M)
    assert re.search(r'^tfdeclare_job_suspensions\{job="a"\} 1(\.0)?$', daemon.daemon.metrics_text(), re.M)
    world.write("a", job_text("a"))  # a resume stops nothing: made at once
    daemon.wait(lambda: len(world.tasks("a")) == 2 and world.record("a").phase is Phase.RUNNING)
    assert not {t.task_id for t in world.tasks("a").values()} & before
    assert world.record("a").suspension_history[-1].resumed_at is not None
