"""A container task's port stays reserved machine-wide for the container's whole life
(backends/local/port_holder.py), as a process task's does under its supervisor: another state
folder never hands it out, a holder killed from outside is replaced at the next look, and
the port is let go once the container ends. With a real engine, through the CLI."""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import cli, job_yaml, worker_ports
from tests.waiting import wait_until
from tfdeclare.backends.local import ports
from tfdeclare.backends.local.docker_runtime import owner_of


def _project(root: Path, spec: str) -> Path:
    first, last = worker_ports(20)
    (root / "specs").mkdir(parents=True)
    (root / "tfdeclare.yaml").write_text(
        f"local: {{cpus: 8, mem: 8Gi, gpus: 0, portRange: {{first: {first}, last: {last}}}}}\n"
    )
    (root / "specs" / "job.yaml").write_text(spec)
    return root


def _tasks(root: Path) -> list[dict[str, Any]]:
    """The task records of a state folder (``task.json``)."""
    found = sorted((root / ".tfdeclare" / "local" / "tasks").glob("*/task.json"))
    return [json.loads(path.read_text()) for path in found]


def _ports(root: Path) -> set[int]:
    return {int(task["port"]) for task in _tasks(root)}


@pytest.mark.slow
@pytest.mark.docker
def test_a_container_tasks_port_stays_reserved_machine_wide_while_its_container_runs(
    tmp_path: Path, docker_client: Any, base_image: str
) -> None:
    k = _project(
        tmp_path / "k", job_yaml("k", workers=3, command="[sleep, '600']", extra=f"  image: {base_image}\n")
    )
    p = _project(tmp_path / "p", job_yaml("p", workers=3, command="[sleep, '600']"))
    ours = {"label": f"tfdeclare.owner={owner_of(k / '.tfdeclare' / 'local')}"}
    running = lambda: docker_client.containers.list(filters=ours, ignore_removed=True)  # noqa: E731
    try:
        applied = cli("apply", "specs", cwd=k)
        assert applied.returncode == 0, applied.stderr
        wait_until(lambda: len(running()) == 3, 60, what="k's 3 containers running", interval=0.2)
        applied = cli("apply", "specs", cwd=p)  # another state folder, process tasks
        assert applied.returncode == 0, applied.stderr
        k_ports, p_ports = _ports(k), _ports(p)
        assert len(k_ports) == len(p_ports) == 3
        assert not k_ports & p_ports, f"both state folders handed out {sorted(k_ports & p_ports)}"
        assert all(ports.held(port) for port in k_ports), "held while the containers run"

        # Its holder killed from outside: the next look of k's controller holds the ports again.
        (launcher,) = {
            json.loads(path.read_text())["pid"]
            for path in (k / ".tfdeclare" / "local" / "tasks").glob("*/launcher.json")
        }
        os.kill(launcher, signal.SIGKILL)
        wait_until(lambda: not any(ports.held(port) for port in k_ports), 10, what="the holder's end")
        refreshed = cli("status", "k", "--refresh", cwd=k)
        assert refreshed.returncode == 0, refreshed.stderr
        wait_until(
            lambda: all(ports.held(port) for port in k_ports), 30, what="k's ports held again", interval=0.1
        )

        # Once its container ends, the port is let go (ended with the engine's stop here).
        assert cli("delete", "k", cwd=k).returncode == 0
        wait_until(lambda: not running(), 60, what="k's containers stopped", interval=0.2)
        wait_until(
            lambda: not any(ports.held(port) for port in k_ports), 30, what="k's ports let go", interval=0.1
        )
    finally:
        cli("delete", "p", cwd=p)
        for container in docker_client.containers.list(all=True, filters=ours, ignore_removed=True):
            container.remove(force=True)
