"""Issue 24 with real TensorFlow: a ParameterServerStrategy job with a coordinator trains a
fixed number of steps (``bench/pss_steps.py``); one worker is SIGKILLed mid-run; the job
completes with only that worker restarted, alone and at the same address (the chief, the ps
and the other worker keep their process ids), all its steps done, and a final loss like that
of the same job left alone. On the local backend, and on the Mesos backend against the
master emulator (its agents run the tasks as processes of this machine)."""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.conftest import REPO, cli, kill_leftovers, processes_of, worker_ports
from tests.mesos_fixtures import config_yaml, start_emulator
from tests.waiting import live_files, wait_until

pytestmark = [
    pytest.mark.tf,
    pytest.mark.e2e,
    pytest.mark.slow,
]

STEPS, GATE_AT, KILL_AT = 150, 60, 20
LOSS_TOLERANCE = 0.05  # asynchronous SGD: runs left alone differ by less than a hundredth here


def job_spec(name: str, workdir: Path, *, gate: bool) -> str:
    env = {"TF_ENABLE_ONEDNN_OPTS": "0", "STEPS": str(STEPS), "CKPT_DIR": str(workdir / f"ckpt-{name}")}
    if gate:
        env.update(GATE_AT=str(GATE_AT), GATE_FILE=str(workdir / "go"))
    small = {"resources": {"cpus": 0.2, "mem": 512}}
    return yaml.safe_dump(
        {
            "apiVersion": "tfdeclare/v1",
            "kind": "TFJob",
            "metadata": {"name": name},
            "spec": {
                "command": ["python", "pss_steps.py"],
                "env": env,
                "replicas": {
                    "chief": {"count": 1, **small},
                    "ps": {"count": 1, **small},
                    "worker": {"count": 2, **small},
                },
                "backoffLimit": 3,
            },
        }
    )


def ended(proc: subprocess.Popen[str]) -> Callable[[], str | None]:
    """For ``wait_until(stop=...)``: why waiting on while ``proc`` (apply) has ended is pointless."""

    def why() -> str | None:
        if proc.poll() is None:
            return None
        out, err = proc.communicate()
        return f"apply ended (rc {proc.returncode}):\n{out}\n{err}"

    return why


def task_pids(cwd: Path, job: str) -> dict[str, int]:
    """The live TF processes of this test's ``job`` on this machine, by task name, from their
    environment (both backends run them here: the local backend, and the emulator's agents; the
    job's CKPT_DIR lies in ``cwd``, which tells them from another test's job of the same name)."""
    return {
        f"{env['TFDECLARE_ROLE']}-{env['TFDECLARE_INDEX']}": pid
        for pid, env in processes_of(cwd, "pss_steps.py").items()
        if env.get("TFDECLARE_JOB") == job
    }


def status(cwd: Path, name: str) -> dict[str, Any]:
    path = cwd / "status" / f"{name}.yaml"
    return yaml.safe_load(path.read_text()) if path.exists() else {}  # type: ignore[no-any-return]


def log(cwd: Path, job: str, task: str) -> str:
    """Everything the task's launches printed, oldest first: the local backend's log files
    (``<state>/local/logs/JOB/TASK-ID.log``) or the emulator's sandboxes (``.../TASK-ID/.../stdout``);
    read from the files, so that waiting for a line costs no process."""
    name = f"{job}.*.{task}.*"
    found = [*live_files(cwd, f"{name}.log"), *live_files(cwd, "stdout", under=name)]
    found.sort(key=lambda p: p.stat().st_mtime)
    return "".join(p.read_text(errors="replace") for p in found)


def final_loss(text: str) -> float:
    found = re.findall(r"^FINAL_LOSS ([0-9.]+)$", text, re.M)
    assert found, text[-2000:]
    return float(found[-1])


def run_pss_with_a_worker_killed(cwd: Path, extra: tuple[str, ...] = ()) -> None:
    specs = cwd / "specs"
    specs.mkdir()
    shutil.copy(REPO / "bench" / "pss_steps.py", specs / "pss_steps.py")

    # The same job left alone, for its loss.
    (specs / "calm.yaml").write_text(job_spec("calm", cwd, gate=False))
    calm = cli("apply", "specs/calm.yaml", "--wait", "--timeout", "300", *extra, cwd=cwd, timeout=360)
    assert calm.returncode == 0, calm.stdout + calm.stderr
    calm_loss = final_loss(log(cwd, "calm", "chief-0"))

    (specs / "hit.yaml").write_text(job_spec("hit", cwd, gate=True))
    command = [
        sys.executable,
        "-m",
        "tfdeclare",
        "apply",
        "specs/hit.yaml",
        "--wait",
        "--timeout",
        "400",
        *extra,
    ]
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    proc = subprocess.Popen(
        command, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    try:
        wait_until(
            lambda: f"STEP {KILL_AT} " in log(cwd, "hit", "chief-0"),
            300,
            what=f"step {KILL_AT}",
            interval=0.3,
            stop=ended(proc),
        )
        before = task_pids(cwd, "hit")
        assert set(before) == {"chief-0", "ps-0", "worker-0", "worker-1"}, before
        port = next(
            (t["host"], t["port"])
            for t in status(cwd, "hit")["tasks"]
            if t["role"] == "worker" and t["index"] == 1
        )
        os.kill(before["worker-1"], signal.SIGKILL)  # mid-run: the chief schedules steps meanwhile

        def restarted() -> bool:
            now = task_pids(cwd, "hit")
            entries = status(cwd, "hit").get("taskRestarts") or []
            return (
                now.get("worker-1", before["worker-1"]) != before["worker-1"]
                and bool(entries)
                and "restarts=1" in log(cwd, "hit", "worker-1")
            )

        wait_until(
            restarted, 180, what="worker-1 restarted alone and serving", interval=0.3, stop=ended(proc)
        )
        during = status(cwd, "hit")
        assert during["phase"] == "Running" and during["restarts"] == 0, during
        again = next(t for t in during["tasks"] if t["role"] == "worker" and t["index"] == 1)
        assert (again["host"], again["port"]) == port, "restarted at the same address"
        middle = task_pids(cwd, "hit")
        for name in ("chief-0", "ps-0", "worker-0"):
            assert middle[name] == before[name], f"{name} kept running"
        wait_until(
            lambda: "PAUSED" in log(cwd, "hit", "chief-0"),
            300,
            what=f"the chief at its gate (step {GATE_AT})",
            interval=0.3,
            stop=ended(proc),
        )
        (cwd / "go").touch()
        out, err = proc.communicate(timeout=400)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 0, out + err

    done = status(cwd, "hit")
    assert done["phase"] == "Succeeded" and done["restarts"] == 0, done
    (entry,) = done["taskRestarts"]
    assert (entry["task"], entry["restarts"], entry["exitCode"]) == ("worker-1", 1, 137), entry
    assert "signal 9" in entry["message"]
    assert {r: s["scope"] for r, s in done["restartScopes"].items()} == {
        "chief": "Job",
        "ps": "Job",
        "worker": "Task",
    }
    chief = log(cwd, "hit", "chief-0")
    assert f"DONE steps={STEPS}" in chief and "RESTORED" not in chief, "the chief ran once, to the end"
    hit_loss = final_loss(chief)
    assert abs(hit_loss - calm_loss) <= LOSS_TOLERANCE, (hit_loss, calm_loss)
    print(f"final loss: undisturbed {calm_loss:.4f}, a worker killed {hit_loss:.4f}")


def test_a_killed_pss_worker_restarts_alone_on_the_local_backend(tmp_path: Path) -> None:
    first, last = worker_ports()
    (tmp_path / "tfdeclare.yaml").write_text(f"local: {{portRange: {{first: {first}, last: {last}}}}}\n")
    try:
        run_pss_with_a_worker_killed(tmp_path)
    finally:
        kill_leftovers(tmp_path)


def test_a_killed_pss_worker_restarts_alone_on_mesos(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The emulator's agents run the tasks here (hence ``sharedFilesystem``, and ``python`` on
    their PATH); the worker comes back on the same agent and port."""
    monkeypatch.setenv("PATH", f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}")
    emulator = start_emulator(
        tmp_path, agents=2, agent_resources="cpus:4;mem:16384;ports:[31000-31099]", kill_grace_period=3.0
    )
    try:
        (tmp_path / "tfdeclare.yaml").write_text(config_yaml(emulator.url))
        run_pss_with_a_worker_killed(tmp_path, ("--backend", "mesos"))
        assert emulator.check_invariants() == []
    finally:
        emulator.stop()
        kill_leftovers(tmp_path)
