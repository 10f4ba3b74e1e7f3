"""A job belongs to the backend that runs it: applying it with another backend moves it — its
tasks there stop before it starts on the new one, never two copies alive (issue 12, item 4).

Real processes on both sides: the local backend's supervised tasks and the Mesos master
emulator's agents, through the real CLI."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import cli, kill_leftovers
from tests.mesos_emulator import Emulator
from tests.mesos_fixtures import slots_running, start_emulator
from tests.test_e2e_local import pids_alive, wait_until
from tests.test_mesos_faults import Project, spec


@pytest.fixture
def emulator(tmp_path: Path) -> Iterator[Emulator]:
    made = start_emulator(tmp_path, agents=1, agent_resources="cpus:4;mem:4096;ports:[31000-31099]")
    try:
        yield made
    finally:
        made.stop()


@pytest.fixture
def project(tmp_path: Path, emulator: Emulator) -> Iterator[Project]:
    made = Project(tmp_path / "project", emulator)
    try:
        yield made
    finally:
        made.close()
        for backend in ("mesos", "local"):
            cli("delete", "--all", "--backend", backend, cwd=made.root, timeout=60)
        assert kill_leftovers(made.root) == [], "a task outlived its job"


def _local_ends(root: Path) -> list[float]:
    return [
        json.loads(p.read_text())["finishedAt"]
        for p in (root / ".tfdeclare" / "local").glob("tasks/*/exit.json")
    ]


def test_applying_with_another_backend_moves_the_job_never_two_copies(
    project: Project, emulator: Emulator
) -> None:
    project.write("mover", spec("mover", {"ps": (1, "serve"), "worker": (1, "serve")}))
    applied = cli("apply", "specs", "--backend", "local", cwd=project.root)
    assert applied.returncode == 0, applied.stdout + applied.stderr
    wait_until(lambda: {"ps-0.0", "worker-0.0"} <= set(project.outputs()))
    local_pids = [project.outputs()[k]["pid"] for k in ("ps-0.0", "worker-0.0")]

    # the same files, planned for the other backend: a move, not "no changes"
    planned = cli("plan", "specs", "--backend", "mesos", "--detailed-exitcode", cwd=project.root)
    assert planned.returncode == 2, planned.stdout + planned.stderr
    assert "-/+ mover will move to another backend" in planned.stdout
    assert "moves local → mesos" in planned.stdout
    # ... and planned for the backend it runs on: nothing to do
    assert cli("plan", "specs", "--backend", "local", "--detailed-exitcode", cwd=project.root).returncode == 0

    both_alive: list[tuple[list[int], dict[str, list[str]]]] = []
    done = threading.Event()

    def watch() -> None:  # the invariant, checked throughout the move
        while not done.is_set():
            local, remote = pids_alive(local_pids), slots_running(emulator, "mover")
            if local and remote:
                both_alive.append((local, remote))
            done.wait(0.02)  # the next sample

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    try:
        moved = cli("apply", "specs", "--backend", "mesos", cwd=project.root, timeout=120)
        assert moved.returncode == 0, moved.stdout + moved.stderr
        wait_until(lambda: set(slots_running(emulator, "mover")) == {"ps-0", "worker-0"}, timeout=60)
    finally:
        done.set()
        watcher.join()
    assert pids_alive(local_pids) == [], "the local copy still runs"
    assert both_alive == [], "both copies were alive at once"
    wait_until(lambda: {"ps-0.1", "worker-0.1"} <= set(project.outputs()), timeout=60)

    # from now on it belongs to mesos: planning for mesos is a no-op, for local a move back
    assert cli("plan", "specs", "--backend", "mesos", "--detailed-exitcode", cwd=project.root).returncode == 0
    back = cli("plan", "specs", "--backend", "local", cwd=project.root)
    assert "moves mesos → local" in back.stdout
