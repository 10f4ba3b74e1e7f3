"""Shared helpers for tests of the Mesos backend against the master emulator: short timings,
emulators with real or simulated executors, and readers of the emulator's ground truth."""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from tests.conftest import cli, kill_leftovers
from tests.mesos_emulator import Emulator
from tests.waiting import wait_until
from tfdeclare.backends.mesos.config import MesosConfig

PY = sys.executable


def mesos_test_config(master: str, **changes: object) -> MesosConfig:
    """Short timings for tests against the emulator."""
    values: dict[str, object] = {
        "master": master,
        "offer_hold_s": 1.0,
        "refuse_s": 1.0,
        "fencing_timeout_s": 5.0,
        "reconcile_interval_s": 30.0,
        "subscribe_timeout_s": 10.0,
        "place_wait_s": 2.0,
        "failover_timeout_s": 120.0,
        "framework_name": "tfdeclare-test",
        **changes,
    }
    return MesosConfig(**values)  # type: ignore[arg-type]


def config_yaml(master: str, **mesos: object) -> str:
    """A ``tfdeclare.yaml`` for the CLI: the mesos backend on the emulator, short timings."""
    settings: dict[str, object] = {
        "master": master,
        "offerHoldSeconds": 1,
        "refuseSeconds": 1,
        "fencingTimeoutSeconds": 5,
        "reconcileIntervalSeconds": 30,
        "subscribeTimeoutSeconds": 10,
        "placeWaitSeconds": 2,
        "failoverTimeoutSeconds": 300,
        "sharedFilesystem": True,
        **mesos,
    }
    body = ", ".join(f"{k}: {v if not isinstance(v, bool) else str(v).lower()}" for k, v in settings.items())
    return f"backend: mesos\nrestartBackoff: {{initialSeconds: 0.2, maxSeconds: 1}}\nmesos: {{{body}}}\n"


def start_emulator(tmp_path: Path, **overrides: Any) -> Emulator:
    options: dict[str, Any] = {
        "agents": 1,
        "agent_resources": "cpus:4;mem:4096;ports:[31000-31999]",
        "heartbeat_interval": 0.5,
        "allocation_interval": 0.05,
        "update_retry_interval": 0.2,
        "kill_grace_period": 1.0,
        "sandbox_root": str(tmp_path / "sandboxes"),
        **overrides,
    }
    return Emulator(**options).start()


@contextlib.contextmanager
def emulated_project(tmp_path: Path, emulator: Emulator, **mesos: object) -> Iterator[tuple[Path, Emulator]]:
    """A project folder for the CLI and the daemon on ``emulator`` (``config_yaml`` with
    ``mesos``'s settings, an empty ``specs/``). On the way out the emulator's invariants hold
    (when the test passed), every job is deleted, what is left of its tasks is killed and the
    emulator is stopped."""
    (tmp_path / "tfdeclare.yaml").write_text(config_yaml(emulator.url, **mesos))
    (tmp_path / "specs").mkdir()
    try:
        yield tmp_path, emulator
        assert emulator.check_invariants() == []
    finally:
        cli("delete", "--all", cwd=tmp_path)
        kill_leftovers(tmp_path)
        emulator.stop()


eventually = wait_until  # its former name here (tests/waiting.py)


def running_on_agents(emulator: Emulator) -> dict[str, str]:
    """task id -> agent id of every task an agent really runs now (ground truth)."""
    return {
        task_id: str(view["agent_id"])
        for task_id, view in emulator.tasks().items()
        if view.get("agent_state") in ("TASK_STARTING", "TASK_RUNNING", "TASK_KILLING")
    }


def slots_running(emulator: Emulator, job: str) -> dict[str, list[str]]:
    """slot (e.g. worker-0) -> ids of the tasks of ``job`` that agents run for it now."""
    out: dict[str, list[str]] = {}
    for task_id in running_on_agents(emulator):
        parts = task_id.split(".")
        if parts[0] == job and len(parts) >= 4:
            out.setdefault(parts[2], []).append(task_id)
    return out


def offer_ids_of(call: dict[str, Any]) -> list[str]:
    body = call["call"].get("accept") or call["call"].get("decline") or {}
    return [o["value"] for o in body.get("offer_ids", [])]
