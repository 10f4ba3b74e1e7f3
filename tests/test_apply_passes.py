"""While ``apply`` waits, passes follow what the backend reports, not a timer (issue 33): a pass
looks at every task, so one every quarter second cost a 1,000-task job most of the
framework's CPU. The real controller over the in-memory backend and real spec files; the wait
is ``run_commands._run_passes`` as apply and delete use it."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from tests.controller_world import World, job_text
from tfdeclare.cli import run_commands
from tfdeclare.core.enums import Phase


@pytest.fixture
def world(tmp_path: Path) -> World:
    made = World(tmp_path)
    made.write("quiet", job_text("quiet"))
    made.apply()
    return made


def _waiting(world: World, **kw: object) -> tuple[threading.Thread, list[object]]:
    out: list[object] = []
    thread = threading.Thread(
        target=lambda: out.append(run_commands._run_passes(world.controller, {"quiet"}, show=False, **kw)),  # type: ignore[arg-type]
        daemon=True,
    )
    thread.start()
    return thread, out


def test_no_pass_while_nothing_changes_and_one_soon_after_a_change(world: World) -> None:
    thread, out = _waiting(world, wait=True, timeout=60.0)
    controller = world.controller
    running = controller.wait_for_pass(0, lambda: world.record("quiet").phase is Phase.RUNNING)
    # Quiet: at most one more pass (for the launch the backend reported) in 3 s, where the
    # old 0.5 s timer made six; the safety resync is RESYNC_S.
    assert run_commands.RESYNC_S > 3.0
    with pytest.raises(AssertionError, match="no pass after"):
        controller.wait_for_pass(running + 1, timeout=3.0)
    # A change the backend reports makes a pass, and apply --wait ends with the job.
    for task in world.tasks("quiet").values():
        world.backend.finish(task.task_id, 0)
    thread.join(timeout=30)
    assert not thread.is_alive()
    records, timed_out, errors = out[0]  # type: ignore[misc]
    assert (timed_out, errors) == (False, [])
    assert records["quiet"].phase is Phase.SUCCEEDED


def test_a_change_never_reported_is_seen_by_the_safety_resync(
    world: World, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(run_commands, "RESYNC_S", 0.3)
    world.backend.watch = lambda notify: None  # type: ignore[method-assign]  # a backend that never tells
    thread, out = _waiting(world, wait=True, timeout=60.0)
    world.controller.wait_for_pass(0, lambda: world.record("quiet").phase is Phase.RUNNING)
    for task in world.tasks("quiet").values():
        world.backend.finish(task.task_id, 0)
    thread.join(timeout=30)
    assert not thread.is_alive() and out[0][1] is False  # type: ignore[index]


def test_the_time_limit_still_ends_the_wait(world: World) -> None:
    thread, out = _waiting(world, wait=True, timeout=0.5)
    thread.join(timeout=30)
    assert not thread.is_alive() and out[0][1] is True  # type: ignore[index]
