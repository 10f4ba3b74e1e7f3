"""Preemption loses no work, with real TensorFlow on the local backend (issue 34).

A low-priority MultiWorkerMirroredStrategy job running the example script
``specs/preemptible_train.py`` (``PreemptionCheckpointHandler``: SIGTERM -> agreed step ->
checkpoint -> exit) is preempted mid-run by a high-priority job that needs the machine's whole
(configured) capacity; it resumes once that one has finished and ends with the same final
weights as a run never stopped, each step done exactly once. The high-priority job runs the
same training undisturbed, so it is the reference. Each worker writes the steps it completes and
its final weights into its own working folder; the status counts a preemption, not a restart.
The same for a ParameterServerStrategy job (chief, ps, one worker: tests/tf_pss_preemptible.py),
whose chief saves on SIGTERM itself, TF's handler refusing clusters with a ps.
"""

from __future__ import annotations

import shutil
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import yaml

from tests.conftest import REPO, cli, kill_leftovers, worker_ports
from tests.preemption_steps import parse_steps, stopped_once_mid_run
from tests.test_background_controller import keeper, phase
from tests.test_e2e_local import status_of
from tests.waiting import wait_until

pytestmark = [pytest.mark.tf, pytest.mark.e2e, pytest.mark.slow]

STEPS = 40
# Between the ranges of test_e2e_local (the slice's start) and test_suspend_local (its top).
PORTS = (worker_ports()[0] + 600, worker_ports()[0] + 699)
CONFIG = (
    "restartBackoff: {initialSeconds: 0.2, maxSeconds: 1}\n"
    # Room for one 2-worker job of 0.5 cpus a task, not for two.
    f"local: {{cpus: 1, mem: 8Gi, gpus: 0, portRange: {{first: {PORTS[0]}, last: {PORTS[1]}}}}}\n"
)
# As a user runs it: after each apply a background controller keeps the jobs (preempts, resumes).
KEEPER = {"TFDECLARE_BACKGROUND_CONTROLLER": "on"}


PSS_SCRIPT = str(REPO / "tests" / "tf_pss_preemptible.py")


def job(name: str, *, priority: int, throttle: Path | None = None, pss: bool = False) -> str:
    """MWMS: the example script, 2 workers. PSS: tests/tf_pss_preemptible.py, chief, ps and
    one worker: plain TensorFlow servers, which die at once on SIGTERM, stopped after the chief
    has saved and exited."""
    slow = [str(throttle)] if throttle is not None else []
    if pss:
        command = ["python", PSS_SCRIPT, str(STEPS), *slow]
        replicas = {
            role: {"count": 1, "resources": {"cpus": cpus, "mem": 512}}
            for role, cpus in (("chief", 0.4), ("ps", 0.3), ("worker", 0.3))
        }
    else:
        command = ["python", "preemptible_train.py", "--steps", str(STEPS)]
        command += ["--throttle-file", *slow] if slow else []
        replicas = {"worker": {"count": 2, "resources": {"cpus": 0.5, "mem": 512}}}
    return yaml.safe_dump(
        {
            "apiVersion": "tfdeclare/v1",
            "kind": "TFJob",
            "metadata": {"name": name},
            "spec": {
                "command": command,
                "env": {"TF_ENABLE_ONEDNN_OPTS": "0", "PYTHONUNBUFFERED": "1"},
                "priority": priority,
                # MWMS: never a kill, the checkpoint is saved. PSS: the chief saves within a
                # second or so, then its ps and worker are stopped.
                "terminationGracePeriodSeconds": 10 if pss else 60,
                "restartPolicy": "ExitCode",
                "replicas": replicas,
            },
        }
    )


@pytest.fixture
def project(tmp_path: Path) -> Iterator[Path]:
    (tmp_path / "specs").mkdir()
    shutil.copy(REPO / "specs" / "preemptible_train.py", tmp_path / "specs")
    (tmp_path / "tfdeclare.yaml").write_text(CONFIG)
    try:
        yield tmp_path
        cli("delete", "--all", cwd=tmp_path)  # asks the background controller to yield; starts none
        wait(tmp_path, lambda: keeper(tmp_path) is None, "the background controller to exit", 30)
    finally:
        left = kill_leftovers(tmp_path)
    assert left == [], "a task or a background controller outlived the test"


def work(project: Path, name: str, index: int, role: str = "worker") -> Path:
    return project / ".tfdeclare" / "local" / "work" / name / f"{role}-{index}"


def steps(project: Path, name: str, index: int, role: str = "worker") -> list[tuple[int, int]]:
    """(step, attempt) per line of the task's steps.log, in the order written."""
    path = work(project, name, index, role) / "steps.log"
    if not path.exists():
        return []
    return parse_steps(path.read_text())


def wait(project: Path, predicate: Callable[[], bool], what: str, timeout: float) -> None:
    """Poll without starting processes: the background controller keeps the jobs and their
    status files; TensorFlow gets the cores."""

    def said() -> str:
        log = project / ".tfdeclare" / "controller.log"
        return f"{what}\n{cli('status', cwd=project).stdout}\n{log.read_text()[-4000:]}"

    wait_until(predicate, timeout, what=said, interval=0.5)


def test_a_preempted_mwms_job_resumes_from_its_checkpoint_and_ends_as_if_never_stopped(project: Path) -> None:
    throttle = project / "throttle"  # keeps the low job's steps slow until it has been preempted
    throttle.touch()
    (project / "specs" / "low.yaml").write_text(job("low", priority=0, throttle=throttle))
    applied = cli("apply", "specs", cwd=project, env=KEEPER)
    assert applied.returncode == 0, applied.stdout + applied.stderr
    wait(project, lambda: len(steps(project, "low", 0)) >= 5, "the low job's first steps", 180)

    (project / "specs" / "high.yaml").write_text(job("high", priority=10))
    applied = cli("apply", "specs", cwd=project, env=KEEPER)
    assert applied.returncode == 0, applied.stdout + applied.stderr
    low = status_of(project, "low")
    assert low["phase"] == "Suspended" and low["suspension"]["reason"] == "Preempted", low  # type: ignore[index]
    throttle.unlink()

    wait(project, lambda: phase(project, "high") == "Succeeded", "the high job to finish", 240)
    wait(project, lambda: phase(project, "low") == "Succeeded", "the low job to resume and finish", 240)

    low = status_of(project, "low")
    assert low["restarts"] == 0 and low["preemptions"] == 1, low
    assert [(h["reason"], h["preemptedBy"]) for h in low["suspensionHistory"]] == [("Preempted", "high")]  # type: ignore[union-attr,index]
    reference = (work(project, "high", 0) / "final_weights.sha256").read_text()
    for index in (0, 1):
        stopped_at = stopped_once_mid_run(steps(project, "low", index), STEPS, 5, f"worker {index}")
        assert [s for s, _ in steps(project, "high", index)] == list(range(1, STEPS + 1))
        assert (work(project, "low", index) / "final_weights.sha256").read_text() == reference
        assert (work(project, "high", index) / "final_weights.sha256").read_text() == reference
    resumed = cli("logs", "low", "--task", "worker-1", cwd=project).stdout
    assert f"RESUMED at step {stopped_at}" in resumed, resumed
    assert not (project / ".tfdeclare" / "local" / "work" / "low" / "checkpoints").exists()


def test_a_preempted_pss_job_resumes_from_the_checkpoint_its_chief_saved_on_sigterm(project: Path) -> None:
    """The same for ParameterServerStrategy, where TF's handler does not apply: the chief
    saves on SIGTERM itself while the ps (holding the variables) waits for the kill."""
    throttle = project / "throttle"
    throttle.touch()
    (project / "specs" / "low.yaml").write_text(job("low", priority=0, throttle=throttle, pss=True))
    applied = cli("apply", "specs", cwd=project, env=KEEPER)
    assert applied.returncode == 0, applied.stdout + applied.stderr
    wait(project, lambda: len(steps(project, "low", 0, "chief")) >= 5, "the low job's first steps", 180)

    (project / "specs" / "high.yaml").write_text(job("high", priority=10, pss=True))
    applied = cli("apply", "specs", cwd=project, env=KEEPER)
    assert applied.returncode == 0, applied.stdout + applied.stderr
    low = status_of(project, "low")
    assert low["phase"] == "Suspended" and low["suspension"]["reason"] == "Preempted", low  # type: ignore[index]
    throttle.unlink()

    wait(project, lambda: phase(project, "high") == "Succeeded", "the high job to finish", 240)
    wait(project, lambda: phase(project, "low") == "Succeeded", "the low job to resume and finish", 240)
    low = status_of(project, "low")
    assert low["restarts"] == 0 and low["preemptions"] == 1, low
    stopped_at = stopped_once_mid_run(steps(project, "low", 0, "chief"), STEPS, 5, "the chief")
    reference = (work(project, "high", 0, "chief") / "final_weights.sha256").read_text()
    assert (work(project, "low", 0, "chief") / "final_weights.sha256").read_text() == reference
    chief = cli("logs", "low", "--task", "chief-0", "--previous", cwd=project).stdout
    chief += cli("logs", "low", "--task", "chief-0", cwd=project).stdout
    assert f"SAVED at step {stopped_at}" in chief and f"RESUMED at step {stopped_at}" in chief, chief
