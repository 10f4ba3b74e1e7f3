"""A container task's launch record while its launcher runs (``backends/local/pull_log.py``),
and how the Docker driver reads it: the pull's progress for the task's status, and a launcher
still there past its pull timeout, killed with the reason recorded. The engine is a stand-in
here (its listing: no container), the launcher a real process holding the task's lock; the
clock is the driver's, injected."""

from __future__ import annotations

import fcntl
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.test_local_docker import _spec
from tfdeclare.backends import progress
from tfdeclare.backends.local.docker_driver import LAUNCHER_SLACK_S, DockerDriver
from tfdeclare.backends.local.drivers import Chore, TaskFolder
from tfdeclare.backends.local.pull_log import PULL_LOG, LauncherInfo, PullView, event_line
from tfdeclare.backends.local.record import TASK_FILE, LocalTask, write_task
from tfdeclare.backends.local.supervisor import process_start_ticks
from tfdeclare.backends.progress import PullEvent, PullStep
from tfdeclare.core.enums import TaskState

IMAGE = "registry.example/tf:2"
EVENTS = [
    PullEvent(IMAGE, PullStep.STARTED, "j"),
    PullEvent(IMAGE, PullStep.LAYER, "j", "aaaa", "Already exists"),
    PullEvent(IMAGE, PullStep.LAYER, "j", "bbbb", "Pulling fs layer"),
    PullEvent(IMAGE, PullStep.LAYER, "j", "cccc", "Pulling fs layer"),
    PullEvent(IMAGE, PullStep.LAYER, "j", "bbbb", "Downloading", 1_000, 2_500_000),
    PullEvent(IMAGE, PullStep.LAYER, "j", "cccc", "Downloading", 500_000, 1_000_000),
]


def _write(path: Path, *events: PullEvent) -> None:
    with open(path, "ab") as handle:
        handle.write(b"".join(event_line(e) for e in events))


def test_a_pull_read_as_it_is_written_only_whole_lines(tmp_path: Path) -> None:
    path = tmp_path / PULL_LOG
    view = PullView(path)
    assert view.read_new() == [] and view.summary() == ""
    _write(path, *EVENTS[:4])
    assert view.read_new() == EVENTS[:4]
    assert view.summary() == f"pulling {IMAGE}: 0 B fetched, 2 of 2 layer(s) to go"
    _write(path, EVENTS[4])
    with open(path, "ab") as handle:  # half a line: the launcher is writing it
        handle.write(event_line(EVENTS[5])[:20])
    assert view.read_new() == [EVENTS[4]]
    assert view.summary() == f"pulling {IMAGE}: 1.0 kB fetched, 2 of 2 layer(s) to go"
    with open(path, "ab") as handle:
        handle.write(event_line(EVENTS[5])[20:] + b"not an event\n")
    assert view.read_new() == [EVENTS[5]]
    assert view.summary() == f"pulling {IMAGE}: 501.0 kB of 3.5 MB fetched, 2 of 2 layer(s) to go"
    with open(path, "ab") as handle:  # another task's copy: counted, not handed on
        handle.write(event_line(PullEvent(IMAGE, PullStep.LAYER, "j", "cccc", "Pull complete"), echo=True))
    assert view.read_new() == []
    assert view.summary() == f"pulling {IMAGE}: 1.0 MB of 3.5 MB fetched, 1 of 2 layer(s) to go"
    _write(path, PullEvent(IMAGE, PullStep.FAILED, "j", status="manifest unknown"))
    view.read_new()
    assert view.summary() == f"cannot pull {IMAGE}: manifest unknown"


def test_a_launcher_is_overdue_only_past_its_timeout_and_the_slack() -> None:
    launcher = LauncherInfo(pid=1, ticks=2, started_at=1000.0, pull_timeout_s=60.0)
    assert not launcher.overdue(1089.0, 30.0)
    assert launcher.overdue(1090.5, 30.0)


class _NoContainers:
    """The engine's side, as far as a task without a container needs it."""

    owner = "o"

    def listing(self) -> dict[str, str]:
        return {}

    def close(self) -> None:
        pass


@pytest.fixture
def task_dir(tmp_path: Path) -> Iterator[Path]:
    folder = tmp_path / "tasks" / "j.a0.l1.worker-0"
    folder.mkdir(parents=True)
    write_task(folder, LocalTask.from_json(_spec(logPath=str(tmp_path / "j.log"))))
    yield folder


def test_a_launcher_past_its_timeout_is_killed_and_the_task_fails_saying_why(task_dir: Path) -> None:
    """A launcher that did not end at its pull timeout (wedged): the task is starting, with its
    pull's progress, until the timeout and the slack are past; then ``tend`` kills it and
    records why the task ended."""
    wedged = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    lock = os.open(task_dir / TASK_FILE, os.O_RDONLY)
    try:
        fcntl.flock(lock, fcntl.LOCK_EX)  # as the launcher holds it
        ticks = process_start_ticks(wedged.pid)
        assert ticks is not None
        info = LauncherInfo(wedged.pid, ticks, 1000.0, 60.0)
        (task_dir / "launcher.json").write_text(json.dumps(info.to_json()))
        _write(task_dir / PULL_LOG, *EVENTS)
        now = [1050.0]
        driver = DockerDriver("o", {}, task_dir.parent, sys.executable, 60.0, clock=lambda: now[0])
        driver.engine = _NoContainers()  # type: ignore[assignment]
        folder = TaskFolder(task_dir, LocalTask.from_json(_spec()))
        shown: list[PullEvent] = []
        previous = progress.set_receiver(shown.append)
        try:
            seen = driver.inspect(folder)
            assert seen.state is TaskState.STARTING and seen.chore is None
            assert seen.message == f"pulling {IMAGE}: 501.0 kB of 3.5 MB fetched, 2 of 2 layer(s) to go"
            assert shown == EVENTS, "handed on to whoever shows pulls"
            driver.begin_pass()
            assert driver.inspect(folder).chore is None and len(shown) == len(EVENTS), "each event once"
            now[0] = 1000.0 + 60.0 + LAUNCHER_SLACK_S + 1
            driver.begin_pass()
            seen = driver.inspect(folder)
            assert seen.state is TaskState.STARTING and seen.chore is Chore.KILL
            driver.tend(folder, seen)
        finally:
            progress.set_receiver(previous)
        assert wedged.wait(10) == -9
        end = json.loads((task_dir / "exit.json").read_text())
        assert end["exitCode"] is None and end["containerRemoved"] is True
        assert end["message"].startswith(
            "cannot pull image tf:2: not done within 60 s (local.pullTimeoutSeconds)"
        ), end
    finally:
        os.close(lock)
        if wedged.poll() is None:
            wedged.kill()
            wedged.wait()
    driver.begin_pass()
    assert driver.inspect(folder).state is TaskState.FAILED
