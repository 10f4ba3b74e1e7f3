"""What runs the tasks cannot be reached (a Docker engine stopped, a Mesos master without a
leader): the controllers that keep passing (the daemon, the background controller) go on
with the pass, each job of that backend keeps its phase with ``lastError`` naming the code,
and the daemon reports it (``/healthz`` degraded, ``tfdeclare_backend_connected`` 0) once it
has stood ``UNREACHABLE_REPORT_S``, one rule for every backend; a one-shot command's pass
still fails with it. The fake backend, the real controller and daemon loop, virtual time."""

from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import Path

from tests.controller_world import World, daemon_running, job_text
from tests.fake_backend import FakeBackend
from tfdeclare.backends.base import BackendError
from tfdeclare.core.enums import Phase
from tfdeclare.core.errors import UNREACHABLE_REPORT_S, ErrorCode
from tfdeclare.core.run.tasks import ObservedTask
from tfdeclare.daemon.service import DaemonOptions, Shown
from tfdeclare.daemon.sources import FolderSource

AWAY = "no Docker engine answers at unix:///run/x.sock: connection refused"


class _Away(FakeBackend):
    """The fake backend, whose look at its tasks fails with ``away`` while it is set."""

    away: BackendError | None = None

    def observe(self) -> Sequence[ObservedTask]:
        if self.away is not None:
            raise self.away
        return super().observe()


def _running(tmp_path: Path) -> tuple[World, _Away]:
    world = World(tmp_path)
    backend = _Away(world.backend.cluster, world.clock)
    world.backend = backend
    world.controller.backend = backend
    world.write("a", job_text("a"))
    world.apply()
    world.settle()
    assert world.record("a").phase is Phase.RUNNING
    return world, backend


def test_each_job_keeps_its_phase_with_the_engine_as_its_last_error(tmp_path: Path) -> None:
    world, backend = _running(tmp_path)
    backend.away = BackendError(AWAY, code=ErrorCode.ENGINE_UNREACHABLE)
    result = world.controller.reconcile()
    assert set(result.unobserved) == {"local"}  # a one-shot command (apply, status --refresh) stops there
    assert [(e.code, e.job) for e in result.errors] == [(ErrorCode.ENGINE_UNREACHABLE, "a")]
    assert result.wake_at is not None  # it looks again soon
    shown = world.status("a")
    assert shown is not None and shown["phase"] == "Running"
    assert shown["lastError"]["code"] == "EngineUnreachable" and AWAY in shown["lastError"]["detail"]
    backend.away = None
    assert len(world.tasks("a")) == 2  # nothing done to the tasks
    world.clock.advance(5)
    assert world.controller.reconcile().errors == []
    cleared = world.status("a")
    assert cleared is not None and cleared["lastError"] is None and cleared["phase"] == "Running"


def test_another_error_of_the_look_is_each_jobs_too_and_names_the_backend(tmp_path: Path) -> None:
    world, backend = _running(tmp_path)
    backend.away = BackendError("the journal cannot be read", code=ErrorCode.BACKEND_STATE_UNREADABLE)
    result = world.controller.reconcile()
    assert result.unobserved["local"].code is ErrorCode.BACKEND_STATE_UNREADABLE
    shown = world.status("a")
    assert shown is not None and shown["phase"] == "Running"
    assert shown["lastError"]["code"] == "BackendStateUnreadable"


def _connected(text: str) -> float | None:
    found = re.search(r'^tfdeclare_backend_connected\{backend="local"\} (\S+)$', text, re.M)
    return float(found.group(1)) if found else None


def test_the_daemon_reports_an_engine_away_once_it_has_stood_the_bound(tmp_path: Path) -> None:
    world, backend = _running(tmp_path)
    source = FolderSource(world.specs, [world.root / "state", world.status_dir])
    options = DaemonOptions(interval_s=3600, debounce_s=0.0)
    with daemon_running(world, source, options) as daemon:
        daemon.wait_shown(lambda shown: shown.last_pass_at is not None)
        assert daemon.health()[0] and _connected(daemon.metrics_text()) == 1
        backend.away = BackendError(AWAY, code=ErrorCode.ENGINE_UNREACHABLE)

        def away(shown: Shown) -> bool:
            return any(e.code is ErrorCode.ENGINE_UNREACHABLE for e in shown.pass_errors)

        daemon.request_pass()
        daemon.wait_shown(away)
        healthy, body = daemon.health()
        assert healthy and body["reasons"] == [], "within the bound: a blip is not reported"
        assert "EngineUnreachable" in [e["code"] for e in body["passErrors"]]
        assert _connected(daemon.metrics_text()) == 1
        [document] = daemon.jobs()
        assert document["phase"] == "Running" and document["lastError"]["code"] == "EngineUnreachable"

        world.clock.advance(UNREACHABLE_REPORT_S + 1)
        later = world.clock()
        daemon.request_pass()
        daemon.wait_shown(lambda shown: (shown.last_pass_at or 0) >= later and away(shown))
        healthy, body = daemon.health()
        assert not healthy and body["status"] == "degraded"
        assert body["reasons"] == [f"EngineUnreachable: {AWAY}"], body["reasons"]
        assert _connected(daemon.metrics_text()) == 0
        assert daemon.jobs()[0]["phase"] == "Running"

        backend.away = None
        daemon.request_pass()
        daemon.wait_shown(lambda shown: not shown.pass_errors)
        healthy, body = daemon.health()
        assert healthy and body["reasons"] == [] and _connected(daemon.metrics_text()) == 1
        assert daemon.jobs()[0]["lastError"] is None
