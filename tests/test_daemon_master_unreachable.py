"""A daemon that cannot reach its Mesos master says so: the emulator's master loses its leader
(SUBSCRIBE answers 503 "No leader elected") while a job runs, and once the backend's bound has
passed ``/healthz`` is degraded with a MasterUnreachable reason naming the master's answer, the
code is in ``passErrors`` and ``tfdeclare_backend_connected{backend="mesos"}`` is 0; the job's
tasks run on untouched, and everything clears once a leader is back and the daemon subscribed
again. A real daemon process, real task processes."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import job_yaml
from tests.mesos_emulator import Emulator
from tests.mesos_fixtures import emulated_project, eventually, running_on_agents, start_emulator
from tests.test_daemon import Daemon
from tfdeclare.core.errors import UNREACHABLE_REPORT_S

pytestmark = pytest.mark.slow  # real task processes, a 20 s outage


@pytest.fixture
def project(tmp_path: Path) -> Iterator[tuple[Path, Emulator]]:
    emulator = start_emulator(tmp_path)
    with emulated_project(tmp_path, emulator) as project:
        yield project


def connected(daemon: Daemon) -> float | None:
    found = re.search(
        r'^tfdeclare_backend_connected\{backend="mesos"\} (\S+)$', daemon.get("/metrics")[1], re.M
    )
    return float(found.group(1)) if found else None


def health(daemon: Daemon) -> tuple[int, dict[str, Any]]:
    code, body = daemon.get("/healthz")
    return code, body


def test_healthz_and_metrics_say_the_master_cannot_be_reached(project: tuple[Path, Emulator]) -> None:
    root, emulator = project
    (root / "specs" / "train.yaml").write_text(job_yaml("train", command="[sleep, '300']"))
    daemon = Daemon(root, "--specs", "specs", "--interval", "1")
    try:
        eventually(lambda: len(running_on_agents(emulator)) == 1, timeout=30)
        eventually(lambda: health(daemon)[0] == 200 and connected(daemon) == 1, timeout=20)
        tasks = running_on_agents(emulator)

        emulator.set_leader(False)
        eventually(lambda: "No leader elected" in daemon.text(), timeout=20)
        # within the bound: a blip is not reported
        assert health(daemon)[0] == 200
        eventually(lambda: health(daemon)[0] == 503, timeout=UNREACHABLE_REPORT_S + 15)
        body = health(daemon)[1]
        assert body["status"] == "degraded"
        (reason,) = [r for r in body["reasons"] if r.startswith("MasterUnreachable")]
        assert "No leader elected" in reason, reason
        assert "MasterUnreachable" in [e["code"] for e in body["passErrors"]]
        assert connected(daemon) == 0
        assert running_on_agents(emulator) == tasks  # nothing done to the running job

        emulator.set_leader(True)
        eventually(lambda: health(daemon)[0] == 200 and connected(daemon) == 1, timeout=30)
        assert health(daemon)[1]["reasons"] == []
        assert running_on_agents(emulator) == tasks
    finally:
        daemon.stop()
