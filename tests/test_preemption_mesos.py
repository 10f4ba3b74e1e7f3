"""Preemption on the Mesos backend, as a user runs it: the daemon watching a folder, against
the master emulator (one agent, 4 cpus). A high-priority job that no held offer fits preempts
our low-priority job (its task is KILLed with its grace period, phase Suspended, reason
Preempted), runs once the offers come back, and the low job is launched again when it has
finished; resources another framework holds are never a reason to preempt anything (the
shortfall is not ours to free)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.conftest import job_yaml
from tests.mesos_emulator import Emulator
from tests.mesos_fixtures import emulated_project, eventually, running_on_agents, start_emulator
from tests.mesos_other_framework import OtherFramework
from tests.test_daemon import Daemon

pytestmark = pytest.mark.slow  # real task processes behind the emulator, offer timers


@pytest.fixture
def project(tmp_path: Path) -> Iterator[tuple[Path, Emulator]]:
    emulator = start_emulator(tmp_path)  # one agent: cpus 4, mem 4096
    with emulated_project(tmp_path, emulator, reviveIntervalSeconds=1) as project:
        yield project


def job(name: str, cpus: float, command: str, priority: int) -> str:
    roles = f"worker: {{count: 1, resources: {{cpus: {cpus}, mem: 256}}}}"
    extra = f"  priority: {priority}\n  terminationGracePeriodSeconds: 2\n"
    return job_yaml(name, command=command, roles=roles, extra=extra)


def status(root: Path, name: str) -> dict[str, Any]:
    path = root / "status" / f"{name}.yaml"
    document: dict[str, Any] = yaml.safe_load(path.read_text()) if path.exists() else {}
    return document or {"phase": None}


def test_a_high_priority_job_preempts_our_low_one_and_it_runs_again_after(
    project: tuple[Path, Emulator],
) -> None:
    root, emulator = project
    daemon = Daemon(root, "--specs", "specs", "--interval", "1")
    try:
        (root / "specs" / "low.yaml").write_text(job("low", 3, "[sleep, '600']", 0))
        eventually(lambda: status(root, "low")["phase"] == "Running", timeout=30)
        go = root / "go"  # high ends when the test says so: after it has seen low suspended
        (root / "specs" / "high.yaml").write_text(
            job("high", 3, f"[sh, -c, 'while [ ! -e {go} ]; do sleep 0.1; done']", 10)
        )

        def preempted() -> dict[str, Any] | None:
            low = status(root, "low")
            return low if low["phase"] == "Suspended" else None

        low = eventually(preempted, timeout=30)
        assert low["suspension"]["reason"] == "Preempted" and low["suspension"]["preemptedBy"] == "high"
        eventually(lambda: emulator.calls("KILL"), timeout=10)  # the victim's task, through the master
        go.touch()
        eventually(lambda: status(root, "high")["phase"] == "Succeeded", timeout=60)

        def resumed() -> dict[str, Any] | None:
            low = status(root, "low")
            return low if low["phase"] == "Running" else None

        low = eventually(resumed, timeout=60)
        assert low["restarts"] == 0 and low["preemptions"] == 1 and low["suspension"] is None
        assert [t["attempt"] for t in low["tasks"]] == [1], "a fresh attempt"
        assert low["suspensionHistory"][0]["preemptedBy"] == "high"
        assert any(t.startswith("low.") for t in running_on_agents(emulator))
    finally:
        daemon.stop()


def test_what_another_framework_holds_is_never_a_reason_to_preempt(project: tuple[Path, Emulator]) -> None:
    root, emulator = project
    other = OtherFramework(emulator.url)
    daemon = None
    try:
        other.hold(cpus=2.0)
        daemon = Daemon(root, "--specs", "specs", "--interval", "1")
        (root / "specs" / "low.yaml").write_text(job("low", 1, "[sleep, '600']", 0))
        eventually(lambda: status(root, "low")["phase"] == "Running", timeout=30)
        (root / "specs" / "high.yaml").write_text(job("high", 3, "[sleep, '4']", 10))
        eventually(lambda: status(root, "high")["phase"] == "Pending", timeout=30)
        revives = len(emulator.calls("REVIVE"))
        eventually(lambda: len(emulator.calls("REVIVE")) >= revives + 2, timeout=30)  # passes went by
        assert status(root, "low")["phase"] == "Running", "its 1 cpu would not make room for 3"
        high = status(root, "high")
        assert high["phase"] == "Pending" and "preempting" not in high["message"], high
    finally:
        if daemon is not None:
            daemon.stop()
        other.close()
