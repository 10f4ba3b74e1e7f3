"""The platform's own events on the Mesos backend, as a user runs it: the daemon watching a
folder, against the master emulator with two agents. A drain of the agent a job runs on
(``DRAIN_AGENT``), an agent lost, and a maintenance window scheduled for it each move the job
to the other agent without touching ``restarts`` or ``backoffLimit`` (the jobs here have
``backoffLimit: 0``, so one counted failure would fail them): the status counts them in
``platformRestarts`` with their cause. A job placed while one agent is inside a maintenance
window goes to the agent outside it."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.conftest import cli, job_yaml
from tests.mesos_emulator import Emulator
from tests.mesos_fixtures import emulated_project, eventually, running_on_agents, start_emulator
from tests.test_daemon import Daemon

pytestmark = pytest.mark.slow  # real task processes behind the emulator, offer timers

TRAP = "[sh, -c, \"trap 'exit 143' TERM; while true; do sleep 0.1; done\"]"


@pytest.fixture
def project(tmp_path: Path) -> Iterator[tuple[Path, Emulator]]:
    emulator = start_emulator(
        tmp_path, agents=0, agent_ping_timeout=0.2, max_agent_ping_timeouts=3, agent_reregister_timeout=1
    )
    emulator.add_agent(hostname="localhost")
    emulator.add_agent(hostname="127.0.0.1")
    with emulated_project(tmp_path, emulator, reviveIntervalSeconds=1, fencingTimeoutSeconds=1) as project:
        yield project


def write_job(root: Path, name: str = "train") -> None:
    roles = "worker: {count: 1, resources: {cpus: 3, mem: 256}}"
    extra = "  backoffLimit: 0\n  terminationGracePeriodSeconds: 2\n"
    (root / "specs" / f"{name}.yaml").write_text(job_yaml(name, command=TRAP, roles=roles, extra=extra))


def status(root: Path, name: str = "train") -> dict[str, Any]:
    path = root / "status" / f"{name}.yaml"
    document: dict[str, Any] = yaml.safe_load(path.read_text()) if path.exists() else {}
    return document or {"phase": None}


def agent_of(emulator: Emulator, job: str = "train") -> str | None:
    agents = {agent for task, agent in running_on_agents(emulator).items() if task.startswith(f"{job}.")}
    return agents.pop() if len(agents) == 1 else None


def moved(root: Path, emulator: Emulator, away_from: str) -> dict[str, Any]:
    def check() -> dict[str, Any] | None:
        doc = status(root)
        now = agent_of(emulator)
        return doc if doc["phase"] == "Running" and now is not None and now != away_from else None

    try:
        return dict(eventually(check, timeout=60))
    except AssertionError:
        raise AssertionError(
            f"not moved off {away_from}: {status(root)}; on {running_on_agents(emulator)}"
        ) from None


def test_a_drain_moves_the_job_without_touching_its_backoff_limit(project: tuple[Path, Emulator]) -> None:
    root, emulator = project
    daemon = Daemon(root, "--specs", "specs", "--interval", "1")
    try:
        write_job(root)
        first = eventually(lambda: status(root)["phase"] == "Running" and agent_of(emulator), timeout=30)
        emulator.drain_agent(str(first), max_grace_period=5)
        doc = moved(root, emulator, str(first))
        assert doc["restarts"] == 0 and doc["platformRestarts"] == 1
        [event] = doc["platformEvents"]
        assert event["cause"] == "AgentDrained" and event["tasks"] == ["worker-0"]
        assert emulator.drain_info(str(first))["state"] == "DRAINED"
        shown = cli("status", "train", cwd=root).stdout
        assert "platform restarts 1 of 10 (not counted against backoffLimit)" in shown
        assert "AgentDrained" in shown
    finally:
        daemon.stop()


def test_a_lost_agent_moves_the_job_as_a_platform_event(project: tuple[Path, Emulator]) -> None:
    root, emulator = project
    daemon = Daemon(root, "--specs", "specs", "--interval", "1")
    try:
        write_job(root)
        first = eventually(lambda: status(root)["phase"] == "Running" and agent_of(emulator), timeout=30)
        emulator.kill_agent(str(first))
        doc = moved(root, emulator, str(first))
        assert doc["restarts"] == 0 and doc["platformRestarts"] == 1
        assert doc["platformEvents"][0]["cause"] == "AgentLost"
    finally:
        daemon.stop()


def window(start_in_s: float, hostname: str) -> list[dict[str, Any]]:
    start = int((time.time() + start_in_s) * 1e9)
    unavailability = {"start": {"nanoseconds": start}, "duration": {"nanoseconds": 3600 * 10**9}}
    return [{"machine_ids": [{"hostname": hostname, "ip": "127.0.0.1"}], "unavailability": unavailability}]


def test_a_gang_avoids_an_agent_inside_a_maintenance_window(project: tuple[Path, Emulator]) -> None:
    root, emulator = project
    # the first agent (the one pack would choose) is scheduled for maintenance in a day
    emulator.schedule_maintenance(window(86_400, "localhost"))
    windowed = next(a["id"] for a in emulator.agents() if a["hostname"] == "localhost")
    daemon = Daemon(root, "--specs", "specs", "--interval", "1")
    try:
        write_job(root)
        where = eventually(lambda: status(root)["phase"] == "Running" and agent_of(emulator), timeout=30)
        assert where != windowed
    finally:
        daemon.stop()


def test_an_inverse_offer_moves_the_job_off_before_the_window_then_is_accepted(
    project: tuple[Path, Emulator],
) -> None:
    root, emulator = project
    daemon = Daemon(root, "--specs", "specs", "--interval", "1")
    try:
        write_job(root)
        first = str(eventually(lambda: status(root)["phase"] == "Running" and agent_of(emulator), timeout=30))
        hostname = next(a["hostname"] for a in emulator.agents() if a["id"] == first)
        emulator.schedule_maintenance(window(30, hostname))  # within grace + margin: move now
        doc = moved(root, emulator, first)
        assert doc["restarts"] == 0 and doc["platformRestarts"] == 1
        assert doc["platformEvents"][0]["cause"] == "Maintenance"
        assert any(c["call"].get("kill") for c in emulator.calls("KILL"))  # stopped by us, gracefully

        def answered() -> list[str]:
            machines = emulator.maintenance_status()["draining_machines"]
            return [s["status"] for m in machines for s in m["statuses"]]

        # held while its task moved off, accepted once it was gone; never declined
        assert eventually(lambda: answered() == ["ACCEPT"], timeout=30)
        assert emulator.calls("DECLINE_INVERSE_OFFERS") == []
    finally:
        daemon.stop()
