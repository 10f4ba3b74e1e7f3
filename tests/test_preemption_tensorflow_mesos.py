"""Preemption loses no work on the Mesos backend, with real TensorFlow (issue 34).

The Mesos half of ``tests/test_preemption_tensorflow.py``: the daemon watches a folder and runs
jobs as Mesos tasks through the master emulator, whose one agent (1.5 cpus) has room for one
2-worker job of 0.5 cpus a task, not for two. A low-priority MultiWorkerMirroredStrategy job
running ``specs/preemptible_train.py`` (``PreemptionCheckpointHandler``) is preempted mid-run by
a high-priority job: the master KILLs its tasks with their grace period, the agent sends
SIGTERM, the workers agree on a step, save and exit. The low job resumes once the high one has
ended, from that checkpoint (``$CHECKPOINT_DIR``, a folder the agent shares with this machine),
and ends with the same final weights as the high job, which ran the same training undisturbed;
each step is done exactly once. Each task runs in its own Mesos sandbox (``sharedFilesystem:
false``), where the script writes the steps it completed and its final weights. The same runs
against a real Mesos 1.11 master and agent (marker ``real_mesos``, ``make real-mesos``), where
the agent's command executor sends the SIGTERM and keeps the kill policy's grace.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.conftest import REPO, cli, kill_leftovers, worker_ports
from tests.mesos_emulator import Emulator
from tests.mesos_fixtures import config_yaml, emulated_project, eventually, start_emulator
from tests.preemption_steps import parse_steps, stopped_once_mid_run
from tests.real_mesos import RealMesos
from tests.test_daemon import Daemon

pytestmark = [pytest.mark.tf, pytest.mark.e2e, pytest.mark.slow]

STEPS = 40
SCRIPT = str(REPO / "specs" / "preemptible_train.py")
# The agent's ports: this worker's slice, above the local TF test's (+600) and the suspend one's (+700).
PORTS = (worker_ports()[0] + 800, worker_ports()[0] + 899)


@pytest.fixture
def project(tmp_path: Path) -> Iterator[tuple[Path, Emulator]]:
    emulator = start_emulator(
        tmp_path, agent_resources=f"cpus:1.5;mem:4096;ports:[{PORTS[0]}-{PORTS[1]}]", kill_grace_period=3.0
    )
    with emulated_project(tmp_path, emulator, reviveIntervalSeconds=1, sharedFilesystem=False) as project:
        yield project


def job(root: Path, name: str, priority: int, throttle: Path | None = None) -> str:
    command = [sys.executable, SCRIPT, "--steps", str(STEPS)]
    command += ["--throttle-file", str(throttle)] if throttle is not None else []
    env = {
        "TF_ENABLE_ONEDNN_OPTS": "0",
        "PYTHONUNBUFFERED": "1",
        "CHECKPOINT_DIR": str(root / "checkpoints" / name),  # one folder for both workers
    }
    return yaml.safe_dump(
        {
            "apiVersion": "tfdeclare/v1",
            "kind": "TFJob",
            "metadata": {"name": name},
            "spec": {
                "command": command,
                "env": env,
                "priority": priority,
                "terminationGracePeriodSeconds": 60,  # never a kill: the checkpoint is saved
                "restartPolicy": "ExitCode",
                "replicas": {"worker": {"count": 2, "resources": {"cpus": 0.5, "mem": 512}}},
            },
        }
    )


def status(root: Path, name: str) -> dict[str, Any]:
    path = root / "status" / f"{name}.yaml"
    document: dict[str, Any] = yaml.safe_load(path.read_text()) if path.exists() else {}
    return document or {"phase": None}


def sandboxes(root: Path, name: str, index: int) -> list[Path]:
    """The Mesos sandboxes of the job's worker ``index``, one per task launched, oldest first
    (the task id's last part is the launch number): the emulator's under ``sandboxes``, a real
    agent's under its work folder, both laid out as Mesos does."""
    pattern = f"**/slaves/*/frameworks/*/executors/{name}.*.worker-{index}.*/runs/*"
    # a real agent keeps its own records of each run under meta/: not a sandbox
    found = [p for p in root.glob(pattern) if not p.is_symlink() and "meta" not in p.parts]
    return sorted(found, key=lambda p: int(p.parent.parent.name.rsplit(".", 1)[1]))


def steps(root: Path, name: str, index: int) -> list[tuple[int, int]]:
    """(step, attempt) per line of the worker's steps.log files, in the order written."""
    out = []
    for sandbox in sandboxes(root, name, index):
        log = sandbox / "steps.log"
        if log.exists():
            out += parse_steps(log.read_text())
    return out


def final_hash(root: Path, name: str, index: int) -> str:
    return (sandboxes(root, name, index)[-1] / "final_weights.sha256").read_text()


def test_a_preempted_mwms_job_on_mesos_resumes_from_its_checkpoint_and_ends_as_if_never_stopped(
    project: tuple[Path, Emulator],
) -> None:
    root, emulator = project
    preempt_and_resume(root)
    assert emulator.calls("KILL"), "the victim's tasks were killed through the master"


@pytest.mark.real_mesos
def test_the_same_on_a_real_master(tmp_path: Path, real_mesos: Callable[..., RealMesos]) -> None:
    """The same against a real Mesos 1.11 master and agent (tests/real_mesos.py): the agent's
    command executor turns the KILL into SIGTERM, the kill policy's grace, then SIGKILL."""
    mesos = real_mesos(agents=1, resources=f"cpus:1.5;mem:4096;ports:[{PORTS[0]}-{PORTS[1]}]")
    (tmp_path / "tfdeclare.yaml").write_text(
        config_yaml(mesos.url, reviveIntervalSeconds=1, sharedFilesystem=False)
    )
    (tmp_path / "specs").mkdir()
    try:
        preempt_and_resume(tmp_path)
    finally:
        cli("delete", "--all", cwd=tmp_path)
        kill_leftovers(tmp_path)


def preempt_and_resume(root: Path) -> None:
    """Run the low job, preempt it with the high one, and check what both did."""
    throttle = root / "throttle"  # keeps the low job's steps slow until it has been preempted
    throttle.touch()
    daemon = Daemon(root, "--specs", "specs", "--interval", "1")
    try:
        (root / "specs" / "low.yaml").write_text(job(root, "low", 0, throttle))
        eventually(lambda: len(steps(root, "low", 0)) >= 3, timeout=180, interval=0.5)

        (root / "specs" / "high.yaml").write_text(job(root, "high", 10))
        low = eventually(lambda: (s := status(root, "low"))["phase"] == "Suspended" and s, timeout=60)
        assert low["suspension"]["reason"] == "Preempted" and low["suspension"]["preemptedBy"] == "high", low
        throttle.unlink()

        eventually(lambda: status(root, "high")["phase"] == "Succeeded", timeout=240, interval=0.5)
        eventually(lambda: status(root, "low")["phase"] == "Succeeded", timeout=240, interval=0.5)
    finally:
        daemon.stop()

    low = status(root, "low")
    assert low["restarts"] == 0 and low["preemptions"] == 1, low
    assert [(h["reason"], h["preemptedBy"]) for h in low["suspensionHistory"]] == [("Preempted", "high")]
    reference = final_hash(root, "high", 0)
    for index in (0, 1):
        stopped_at = stopped_once_mid_run(steps(root, "low", index), STEPS, 3, f"worker {index}")
        assert len(sandboxes(root, "low", index)) == 2, "one task launched before the preemption, one after"
        assert [s for s, _ in steps(root, "high", index)] == list(range(1, STEPS + 1))
        assert final_hash(root, "low", index) == reference == final_hash(root, "high", index)
    resumed = (sandboxes(root, "low", 1)[1] / "stdout").read_text()
    assert re.search(rf"^RESUMED at step {stopped_at} ", resumed, re.M), resumed
    assert not (root / "checkpoints" / "low").exists(), "the chief removes its checkpoints at the end"
