"""The background controller (cli.background, cli.keeper): with no daemon, a job applied by a
plain ``apply`` still finishes by its rules without another command. Real CLI processes, real
task processes, real signals; TensorFlow is not needed (tests/e2e_task.py stands in)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.conftest import REPO, cli, kill_leftovers, worker_ports
from tests.waiting import wait_until
from tfdeclare.shell.lock import ControllerLock
from tfdeclare.shell.store import StateStore

pytestmark = pytest.mark.e2e

TASK = str(REPO / "tests" / "e2e_task.py")
PORTS = worker_ports()
CONFIG = f"""\
restartBackoff: {{initialSeconds: 0.2, maxSeconds: 1}}
local: {{cpus: 8, mem: 8Gi, gpus: 0, portRange: {{first: {PORTS[0]}, last: {PORTS[1]}}}}}
"""
ON = {"TFDECLARE_BACKGROUND_CONTROLLER": "on"}
CHIEF_SAYS = "the chief is done"


def ps_job(name: str, chief: str) -> str:
    """A ParameterServerStrategy-like job: ``chief`` (a command), a ps and two workers that
    serve until stopped."""
    serve = f"[python, {TASK}, serve]"
    return (
        "apiVersion: tfdeclare/v1\nkind: TFJob\n"
        f"metadata: {{name: {name}}}\n"
        "spec:\n  env: {OUT: out}\n  workingDir: .\n  replicas:\n"
        f"    chief: {{count: 1, resources: {{cpus: 0.1, mem: 64}}, command: {chief}}}\n"
        f"    ps: {{count: 1, resources: {{cpus: 0.1, mem: 64}}, command: {serve}}}\n"
        f"    worker: {{count: 2, resources: {{cpus: 0.1, mem: 64}}, command: {serve}}}\n"
    )


# The chief waits for the test's go-ahead (``out/go``, in its working folder), so that the job
# cannot end before the test has looked at it, however slow a loaded machine starts a command.
FINISHING = (
    "[python, -c, 'import os, time; "
    '[time.sleep(0.1) for _ in iter(lambda: os.path.exists("out/go"), True)]; '
    f'print("{CHIEF_SAYS}", flush=True); time.sleep(1)\']'
)
SERVING = f"[python, {TASK}, serve]"


@pytest.fixture
def project(tmp_path: Path) -> Iterator[Path]:
    (tmp_path / "specs" / "out").mkdir(parents=True)
    (tmp_path / "tfdeclare.yaml").write_text(CONFIG)
    try:
        yield tmp_path
        cli("delete", "--all", cwd=tmp_path)  # asks a background controller to yield; starts none
        wait_until(lambda: keeper(tmp_path) is None, 30)
    finally:
        left = kill_leftovers(tmp_path)
    assert left == [], "a task or a background controller outlived the test"


def holder(project: Path) -> dict[str, Any] | None:
    return ControllerLock(project / ".tfdeclare").holder()


def keeper(project: Path) -> int | None:
    """The pid of the background controller holding the project's lock, if one does."""
    held = holder(project)
    return held["pid"] if held and held.get("purpose") == "background controller" else None


def phase(project: Path, name: str) -> str | None:
    try:
        document = yaml.safe_load((project / "status" / f"{name}.yaml").read_text())
    except (OSError, yaml.YAMLError):
        return None
    return document.get("phase") if isinstance(document, dict) else None


def task_pids(project: Path, role: str) -> list[int]:
    return [json.loads(p.read_text())["pid"] for p in (project / "specs" / "out").glob(f"{role}-*.json")]


def alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat", "rb") as handle:
            return handle.read().split(b") ")[1][:1] != b"Z"
    except OSError:
        return False


def test_a_plain_apply_finishes_its_job_without_another_command(project: Path) -> None:
    (project / "specs" / "job.yaml").write_text(ps_job("pstrain", FINISHING))
    applied = cli("apply", "specs", cwd=project, env=ON)
    assert applied.returncode == 0, applied.stdout + applied.stderr
    pid = keeper(project)
    assert pid is not None, "apply left no background controller"
    shown = cli("status", cwd=project)  # read-only: it says who keeps the jobs
    assert f"kept current by a background controller (pid {pid}" in shown.stderr, shown.stderr
    (project / "specs" / "out" / "go").touch()  # the chief may finish now
    followed = subprocess.run(  # returns when the job ends, with the chief's output
        [sys.executable, "-m", "tfdeclare", "logs", "pstrain", "--follow"],
        cwd=project,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert followed.returncode == 0, followed.stderr
    assert f"chief-0  | {CHIEF_SAYS}" in followed.stdout  # padded to worker-0
    assert phase(project, "pstrain") == "Succeeded"  # logs --follow returned when the job ended
    serving = task_pids(project, "ps") + task_pids(project, "worker")
    assert len(serving) == 3
    wait_until(lambda: not any(alive(p) for p in serving), 15)  # the ps and workers were stopped
    wait_until(lambda: not alive(pid), 15)  # and nothing needs it any more: it exits
    assert keeper(project) is None
    log = (project / ".tfdeclare" / "controller.log").read_text()
    assert "no job needs a controller; exiting" in log
    assert "no controller is running" in cli("status", cwd=project).stderr


def test_apply_and_delete_while_it_runs_take_over_and_hand_back(project: Path) -> None:
    (project / "specs" / "job.yaml").write_text(ps_job("serving", SERVING))
    assert cli("apply", "specs", cwd=project, env=ON).returncode == 0
    first = wait_until(lambda: keeper(project))
    again = cli("apply", "specs", cwd=project, env=ON)
    assert again.returncode == 0, again.stderr
    assert "holds the state folder lock" not in again.stderr
    second = keeper(project)
    assert second is not None and second != first, "apply asked it to yield and started one again"
    wait_until(lambda: not alive(first), 10)  # it let go of the lock, then exits
    refreshed = cli("status", "--refresh", cwd=project, env=ON)
    assert refreshed.returncode == 0, refreshed.stderr
    serving = task_pids(project, "ps") + task_pids(project, "worker") + task_pids(project, "chief")
    assert len(serving) == 4, "no task was launched twice"
    deleted = cli("delete", "serving", cwd=project, env=ON)
    assert deleted.returncode == 0, deleted.stderr
    assert not any(alive(p) for p in serving)
    wait_until(lambda: keeper(project) is None, 10)  # nothing left to keep


def test_pruning_a_job_finishes_its_stops_in_the_background(project: Path) -> None:
    (project / "specs" / "job.yaml").write_text(ps_job("pruned", SERVING))
    assert cli("apply", "specs", cwd=project, env=ON).returncode == 0
    serving = task_pids(project, "ps") + task_pids(project, "worker") + task_pids(project, "chief")
    (project / "specs" / "job.yaml").unlink()
    pruned = cli("apply", "specs", "--prune", "--allow-empty", cwd=project, env=ON)
    assert pruned.returncode == 0, pruned.stderr
    wait_until(lambda: not any(alive(p) for p in serving), 20)
    wait_until(lambda: "pruned" not in StateStore(project / ".tfdeclare").names(), 20)
    wait_until(lambda: keeper(project) is None, 10)


def test_a_daemon_takes_over_from_it(project: Path) -> None:
    (project / "specs" / "job.yaml").write_text(ps_job("kept", SERVING))
    assert cli("apply", "specs", cwd=project, env=ON).returncode == 0
    pid = wait_until(lambda: keeper(project))
    env = {k: v for k, v in os.environ.items() if not k.startswith("TFDECLARE_STATE")}
    daemon = subprocess.Popen(
        [sys.executable, "-m", "tfdeclare", "daemon", "--specs", "specs", "--port", "0"],
        cwd=project,
        env={**env, **ON},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        wait_until(lambda: (holder(project) or {}).get("purpose") == "daemon", 40)
        wait_until(lambda: not alive(pid), 10)  # it let go of the lock, then exits
    finally:
        daemon.send_signal(signal.SIGTERM)
        _, err = daemon.communicate(timeout=30)
    assert "holds the state folder lock" not in err
    assert keeper(project) is None, "a daemon ending starts no background controller"


def test_a_killed_one_is_adopted_by_the_next_apply(project: Path) -> None:
    (project / "specs" / "job.yaml").write_text(ps_job("adopted", SERVING))
    assert cli("apply", "specs", cwd=project, env=ON).returncode == 0
    pid = wait_until(lambda: keeper(project))
    serving = sorted(task_pids(project, "ps") + task_pids(project, "worker") + task_pids(project, "chief"))
    os.kill(pid, signal.SIGKILL)
    wait_until(lambda: holder(project) is None, 10)  # the kernel let go of its lock
    assert all(alive(p) for p in serving), "its tasks keep running"
    again = cli("apply", "specs", cwd=project, env=ON)
    assert again.returncode == 0, again.stderr
    assert keeper(project) not in (None, pid)
    assert (
        sorted(task_pids(project, "ps") + task_pids(project, "worker") + task_pids(project, "chief"))
        == serving
    )
    assert phase(project, "adopted") == "Running"


def test_it_can_be_turned_off_in_the_config(project: Path) -> None:
    (project / "tfdeclare.yaml").write_text(CONFIG + "backgroundController: false\n")
    (project / "specs" / "job.yaml").write_text(ps_job("alone", SERVING))
    applied = cli("apply", "specs", cwd=project, env={"TFDECLARE_BACKGROUND_CONTROLLER": ""})
    assert applied.returncode == 0, applied.stderr
    assert holder(project) is None


def test_logs_follow_a_task_across_its_restart_to_the_end(project: Path) -> None:
    twice = (
        '[python, -c, \'import os, sys, time; a = os.environ["TFDECLARE_ATTEMPT"]; '
        'print("attempt", a, flush=True); '
        '[time.sleep(0.1) for _ in iter(lambda: a != "0" or os.path.exists("out/go"), True)]; '
        'sys.exit(1 if a == "0" else 0)\']'
    )  # attempt 0 fails when the test says so (out/go), once logs --follow is on its way
    (project / "specs" / "job.yaml").write_text(
        ps_job("retried", twice) + "  restartPolicy: OnFailure\n  backoffLimit: 2\n"
    )
    assert cli("apply", "specs", cwd=project, env=ON).returncode == 0
    following = subprocess.Popen(
        [sys.executable, "-m", "tfdeclare", "logs", "retried", "--follow", "--task", "chief-0"],
        cwd=project,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, **ON},  # the settings the job was applied with
    )
    assert following.stdout is not None
    assert following.stdout.readline() == "attempt 0\n"  # it follows attempt 0 as it runs
    (project / "specs" / "out" / "go").touch()
    out, err = following.communicate(timeout=60)
    followed = subprocess.CompletedProcess(following.args, following.returncode, "attempt 0\n" + out, err)
    assert followed.returncode == 0, followed.stderr
    assert followed.stdout.splitlines() == ["attempt 0", "attempt 1"]
    assert phase(project, "retried") == "Succeeded"
    wait_until(lambda: keeper(project) is None, 15)


def test_a_lock_holder_that_only_says_it_is_one_is_never_signalled(project: Path) -> None:
    """The lock file is evidence: a process holding the lock whose file says "background
    controller" but which does not run the keeper is not sent SIGTERM; the command says who
    holds the lock, as for any other controller."""
    (project / "specs" / "job.yaml").write_text(ps_job("claimed", SERVING))
    holds = (
        "import sys, time; from pathlib import Path; from tfdeclare.shell.lock import ControllerLock; "
        "ControllerLock(Path(sys.argv[1])).acquire('background controller'); print('held', flush=True); "
        "time.sleep(120)"
    )
    pretender = subprocess.Popen(
        [sys.executable, "-c", holds, str(project / ".tfdeclare")], stdout=subprocess.PIPE, text=True
    )
    try:
        assert pretender.stdout is not None and pretender.stdout.readline() == "held\n"
        refused = cli("apply", "specs", cwd=project, env=ON, timeout=60)
        assert refused.returncode == 1
        assert f"background controller (pid {pretender.pid}" in refused.stderr, refused.stderr
        assert pretender.poll() is None, "it was not signalled"
    finally:
        pretender.kill()
        pretender.wait()


@pytest.mark.slow
def test_on_mesos_a_plain_apply_finishes_its_job_and_places_a_waiting_gang(tmp_path: Path) -> None:
    """The same on the Mesos backend (the master emulator, one agent of 4 cpus): a job whose
    gang waits for offers (another job holds the agent) is placed by the background controller
    once they come, and when its chief exits 0 its worker is killed and it Succeeds; no other
    tfdeclare command runs meanwhile."""
    from tests.mesos_fixtures import config_yaml, start_emulator

    emulator = start_emulator(tmp_path)
    (tmp_path / "tfdeclare.yaml").write_text(config_yaml(emulator.url, reviveIntervalSeconds=1))
    (tmp_path / "specs").mkdir()

    def job(name: str, chief: str, cpus: float) -> str:
        return (
            "apiVersion: tfdeclare/v1\nkind: TFJob\n"
            f"metadata: {{name: {name}}}\n"
            "spec:\n  terminationGracePeriodSeconds: 1\n  replicas:\n"
            f"    chief: {{count: 1, resources: {{cpus: {cpus}, mem: 64}}, command: {chief}}}\n"
            f"    worker: {{count: 1, resources: {{cpus: 0.5, mem: 64}}, command: [sleep, '600']}}\n"
        )

    try:
        # first's chief ends when the test says so (go), once second has been seen waiting
        go = tmp_path / "go"
        until_go = f"[sh, -c, 'while [ ! -e {go} ]; do sleep 0.1; done']"
        (tmp_path / "specs" / "first.yaml").write_text(job("first", until_go, 3))
        assert cli("apply", "specs/first.yaml", "--backend", "mesos", cwd=tmp_path, env=ON).returncode == 0
        (tmp_path / "specs" / "second.yaml").write_text(job("second", "[sleep, '1']", 3))
        applied = cli("apply", "specs/second.yaml", "--backend", "mesos", cwd=tmp_path, env=ON)
        assert applied.returncode == 0, applied.stdout + applied.stderr
        assert phase(tmp_path, "second") != "Running", "its gang waits for first's cpus"
        go.touch()
        wait_until(lambda: phase(tmp_path, "first") == "Succeeded", 60)  # its worker killed
        wait_until(lambda: phase(tmp_path, "second") == "Succeeded", 60)  # placed, then done
        wait_until(lambda: keeper(tmp_path) is None, 30)  # and the controller went away
        killed = {c["call"]["kill"]["task_id"]["value"] for c in emulator.calls("KILL")}
        assert {t.split(".")[0] for t in killed} == {"first", "second"}, killed  # each job's worker
    finally:
        cli("delete", "--all", cwd=tmp_path)
        kill_leftovers(tmp_path)
        emulator.stop()
