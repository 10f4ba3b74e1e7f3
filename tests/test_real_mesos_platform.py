"""The platform's own events against a real Apache Mesos 1.11.0 master and agents (issue 34;
tests/real_mesos.py, ``make real-mesos``): an operator's ``DRAIN_AGENT`` of the agent a job
runs on moves the job to the other agent through the daemon, and touches neither its
``restarts`` nor its ``backoffLimit`` (0 here: one counted failure would fail it). What is
checked is what the real master says and what the status file says."""

from __future__ import annotations

import time
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.conftest import cli, job_yaml
from tests.mesos_fixtures import config_yaml
from tests.mesos_fixtures import eventually as _eventually
from tests.real_mesos import RealMesos
from tests.test_daemon import Daemon

eventually = partial(_eventually, timeout=60.0)  # a real cluster on a loaded machine
pytestmark = [pytest.mark.real_mesos, pytest.mark.slow]

Start = Callable[..., RealMesos]
TRAP = "[sh, -c, \"trap 'exit 143' TERM; while true; do sleep 0.2; done\"]"


def _status(root: Path) -> dict[str, Any]:
    path = root / "status" / "train.yaml"
    return (yaml.safe_load(path.read_text()) if path.exists() else None) or {}


def _agent_of(mesos: RealMesos) -> str | None:
    agents = {agent for task, agent in mesos.running().items() if task.startswith("train.")}
    return agents.pop() if len(agents) == 1 else None


def test_a_drain_on_the_real_master_moves_the_job_without_touching_backoff_limit(
    real_mesos: Start, tmp_path: Path
) -> None:
    mesos = real_mesos(agents=2, resources="cpus:2;mem:2048;ports:[31000-31099]")
    (tmp_path / "tfdeclare.yaml").write_text(config_yaml(mesos.url))
    (tmp_path / "specs").mkdir()
    roles = "worker: {count: 1, resources: {cpus: 2, mem: 256}}"
    extra = "  backoffLimit: 0\n  terminationGracePeriodSeconds: 3\n"
    (tmp_path / "specs" / "train.yaml").write_text(job_yaml("train", command=TRAP, roles=roles, extra=extra))
    daemon = Daemon(tmp_path, "--specs", "specs", "--interval", "1")
    try:
        first = eventually(lambda: _status(tmp_path).get("phase") == "Running" and _agent_of(mesos))
        drain = {"agent_id": {"value": first}, "max_grace_period": {"nanoseconds": 10 * 10**9}}
        drained_at = time.monotonic()
        mesos.operator({"type": "DRAIN_AGENT", "drain_agent": drain})

        def moved() -> dict[str, Any] | None:
            doc, now = _status(tmp_path), _agent_of(mesos)
            return doc if doc.get("phase") == "Running" and now not in (None, first) else None

        doc = eventually(moved, timeout=120)
        print(f"drained to running elsewhere: {time.monotonic() - drained_at:.1f} s")  # a figure, not a check
        assert doc["restarts"] == 0 and doc["platformRestarts"] == 1
        assert [e["cause"] for e in doc["platformEvents"]] == ["AgentDrained"]
        ended = [
            t for i, t in mesos.tasks().items() if i.startswith("train.") and t["state"] != "TASK_RUNNING"
        ]
        assert [t["state"] for t in ended] == ["TASK_KILLED"], ended  # SIGTERM, its grace: a graceful stop
        shown = cli("status", "train", cwd=tmp_path).stdout
        assert "platform restarts 1 of 10" in shown
    finally:
        daemon.stop()
        cli("delete", "--all", cwd=tmp_path)


def test_a_window_over_every_agent_on_the_real_master_is_declined_and_moves_nothing(
    real_mesos: Start, tmp_path: Path
) -> None:
    """The real cluster's agents share one machine id (hostname and IP), so one window covers
    them all: the real master offers both with the window and sends inverse offers for them.
    Moving the job would only bring it back to an agent going down (found so on the real
    master: it went round until its platform budget was spent), so the backend declines,
    keeps the job where it is, and says why; its offers carry the window."""
    mesos = real_mesos(agents=2, resources="cpus:2;mem:2048;ports:[31000-31099]")
    (tmp_path / "tfdeclare.yaml").write_text(config_yaml(mesos.url))
    (tmp_path / "specs").mkdir()
    roles = "worker: {count: 1, resources: {cpus: 1, mem: 256}}"
    extra = "  backoffLimit: 0\n  terminationGracePeriodSeconds: 3\n"
    (tmp_path / "specs" / "train.yaml").write_text(job_yaml("train", command=TRAP, roles=roles, extra=extra))
    daemon = Daemon(tmp_path, "--specs", "specs", "--interval", "1")
    try:
        first = eventually(lambda: _status(tmp_path).get("phase") == "Running" and _agent_of(mesos))
        agent = next(a for a in mesos.state()["slaves"] if a["id"] == first)
        machine = {"hostname": agent["hostname"], "ip": agent["pid"].split("@")[1].split(":")[0]}
        window = {
            "machine_ids": [machine],
            "unavailability": {"start": {"nanoseconds": int(time.time() * 1e9)}},
        }
        mesos.operator(
            {
                "type": "UPDATE_MAINTENANCE_SCHEDULE",
                "update_maintenance_schedule": {"schedule": {"windows": [window]}},
            }
        )

        def declined() -> bool:
            status = mesos.operator({"type": "GET_MAINTENANCE_STATUS"})["get_maintenance_status"]["status"]
            answers = [s for m in status.get("draining_machines", []) for s in m.get("statuses", [])]
            return any(s.get("status") == "DECLINE" for s in answers)

        eventually(declined)
        done = daemon.passes()
        eventually(lambda: daemon.passes() >= done + 3)  # passes go on: nothing moves
        doc = _status(tmp_path)
        assert doc["phase"] == "Running" and doc["platformRestarts"] == 0 and doc["restarts"] == 0
        assert _agent_of(mesos) == first
        assert "no agent outside a maintenance window is known" in daemon.text()
    finally:
        daemon.stop()
        cli("delete", "--all", cwd=tmp_path)
