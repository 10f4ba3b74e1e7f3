"""The local backend's task record (``tfdeclare/backends/local/record.py``) and what reads it.

``tests/golden/local-task-records/`` holds the ``task.json`` each earlier stage of the format
wrote, made by running that release's own launch code (the state folder as ``@STATE@``, the
spec folder as ``@SPECS@``): the first records (no working folder, no secrets), then with
``workDir``/``sourceDir``, with secrets, the first container records (no ``imagePullPolicy``
nor ``hidden``), and the last unversioned ones. Today's reader reads each with the same
identity; a task a previous release started is adopted, and a launch it left unstarted is
started by the next controller's upkeep (``tend``), never by a look (``observe``).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from tests.backend_conformance import gang, look, wait_for
from tests.conftest import processes_mentioning
from tfdeclare.backends.local.backend import LocalBackend, LocalCapacity
from tfdeclare.backends.local.config import LocalRuntime
from tfdeclare.backends.local.docker_runtime import DockerRuntime, container_name, owner_of
from tfdeclare.backends.local.record import (
    RECORD_VERSION,
    LocalTask,
    TaskRuntime,
    read_task,
    write_task,
)
from tfdeclare.core.enums import ImagePullPolicy, Role, SecretSource, TaskState, VolumeMode
from tfdeclare.core.run.tasks import Placement, TaskKey
from tfdeclare.core.spec.keys import Volume
from tfdeclare.core.spec.resources import Resources

RECORDS = Path(__file__).parent / "golden" / "local-task-records"
FIXTURES = sorted(RECORDS.glob("*.json"))
CAPACITY = LocalCapacity(cpus=4, mem_mib=4096, gpus=0, port_first=35000, port_last=35099)


def _old(name: str, state: Path, specs: Path, **changes: Any) -> dict[str, Any]:
    text = (RECORDS / name).read_text().replace("@STATE@", str(state)).replace("@SPECS@", str(specs))
    data: dict[str, Any] = json.loads(text)
    data.update(changes)
    return data


@pytest.mark.parametrize("fixture", FIXTURES, ids=[f.stem for f in FIXTURES])
def test_every_record_an_earlier_release_wrote_reads_with_its_identity(fixture: Path, tmp_path: Path) -> None:
    task = LocalTask.from_json(_old(fixture.name, tmp_path / "state", tmp_path / "specs"))
    assert task.version == 1
    assert (task.task_id, task.job, task.key, task.attempt) == (
        "mnist.a0.l1.worker-0",
        "mnist",
        TaskKey(Role.WORKER, 0),
        0,
    )
    assert (task.config_hash, task.spec_hash) == ("c" * 16, "s" * 64)
    assert task.resources == Resources(1.0, 512, 0) and (task.host, task.port) == ("127.0.0.1", 35000)
    assert task.argv == ("python", "train.py", "--epochs", "2") and task.grace_s == 10.0
    assert task.log_path == tmp_path / "state" / "local" / "logs" / "mnist" / "mnist.a0.l1.worker-0.log"
    docker = fixture.stem.endswith("-docker")
    assert task.runtime is (TaskRuntime.DOCKER if docker else TaskRuntime.PROCESS)
    assert (task.container is not None) is docker
    # written again by this release: every key, a version, the same task
    assert LocalTask.from_json(json.loads(json.dumps(task.to_json()))) == task
    assert task.to_json()["runtime"] == task.runtime.value


def test_what_each_stage_left_out_reads_as_that_stage_behaved(tmp_path: Path) -> None:
    state, specs = tmp_path / "state", tmp_path / "specs"
    first = LocalTask.from_json(_old("first-process.json", state, specs))
    assert (first.work_dir, first.source_dir, first.secrets) == (None, None, ())
    assert first.cwd == str(specs)
    secrets = LocalTask.from_json(_old("secrets-process.json", state, specs))
    ((name, ref),) = secrets.secrets
    assert name == "TOKEN" and ref.source is SecretSource.ENV and ref.where == "TOKEN"
    assert "secret-value" not in (RECORDS / "secrets-process.json").read_text(), "references only"
    container = LocalTask.from_json(_old("first-docker.json", state, specs)).container
    assert container is not None
    assert container.image_pull_policy is ImagePullPolicy.IF_NOT_PRESENT and container.hidden == ()
    assert container.volumes == (Volume("/data", "/data", VolumeMode.RO),)
    latest = LocalTask.from_json(_old("before-records-docker.json", state, specs)).container
    assert latest is not None and latest.hidden == (str(state),)


def test_a_record_this_release_writes_reads_back_the_same(tmp_path: Path) -> None:
    task = LocalTask.from_json(_old("before-records-docker.json", tmp_path / "s", tmp_path / "p"))
    written = replace(task, version=RECORD_VERSION)
    write_task(tmp_path, written)
    assert (tmp_path / "task.json").stat().st_mode & 0o777 == 0o600
    assert json.loads((tmp_path / "task.json").read_text())["version"] == RECORD_VERSION
    assert read_task(tmp_path) == written


@pytest.mark.parametrize(
    "content",
    [
        '{"version": 99, "taskId": "x"}',  # a later release's: left alone, never half-understood
        '{"taskId": "x"}',
        "[1, 2]",
        "{not json",
    ],
)
def test_a_record_it_cannot_read_is_none(tmp_path: Path, content: str) -> None:
    (tmp_path / "task.json").write_text(content)
    assert read_task(tmp_path) is None


# ---- adoption of what a previous release started ----------------------------------------------

SLEEP = [sys.executable, "-c", "import time; time.sleep(60)"]


def _old_folder(tmp_path: Path, fixture: str) -> tuple[Path, str]:
    """A task folder as the previous release wrote it (its record, as it was), with a task
    that sleeps instead of training."""
    state, specs = tmp_path / "state", tmp_path / "specs"
    specs.mkdir(parents=True, exist_ok=True)
    data = _old(fixture, state, specs, argv=SLEEP, env={"PATH": "/usr/bin:/bin"})
    task_dir = state / "local" / "tasks" / data["taskId"]
    task_dir.mkdir(parents=True)
    Path(data["cwd"]).mkdir(parents=True, exist_ok=True)  # made by that release's launch
    (task_dir / "task.json").write_text(json.dumps(data))
    return task_dir, data["taskId"]


@pytest.mark.parametrize("fixture", ["first-process.json", "before-records-process.json"])
def test_a_task_a_previous_release_started_is_adopted(
    tmp_path: Path, fixture: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TOKEN", "secret-value")  # the secret the later records name
    task_dir, task_id = _old_folder(tmp_path, fixture)
    subprocess.run(  # its supervisor, started as that release started it
        [sys.executable, "-m", "tfdeclare.backends.local.supervisor", "--detach", str(task_dir)], check=True
    )
    backend = LocalBackend(tmp_path / "state", CAPACITY)
    try:
        tasks = wait_for(backend, lambda ts: task_id in ts and ts[task_id].state is TaskState.RUNNING)
        adopted = tasks[task_id]
        assert (adopted.key, adopted.attempt, adopted.config_hash) == (TaskKey(Role.WORKER, 0), 0, "c" * 16)
        assert adopted.port == 35000
        backend.stop([task_id], 1.0)
        ended = wait_for(backend, lambda ts: ts[task_id].state.ended)
        assert ended[task_id].state is TaskState.STOPPED
    finally:
        backend.stop([t.task_id for t in backend.observe() if t.state.alive], 0.1)
        backend.close()


def test_a_launch_left_unstarted_starts_at_the_next_upkeep_and_never_by_a_look(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``observe`` (and ``place``, which calls it) reports such a task as starting; only the
    controller's ``tend`` starts it, once."""
    monkeypatch.setenv("TOKEN", "secret-value")
    task_dir, task_id = _old_folder(tmp_path, "before-records-process.json")
    backend = LocalBackend(tmp_path / "state", CAPACITY)
    try:
        for _ in range(3):
            (task,) = backend.observe()
            assert task.state is TaskState.STARTING
            placement = backend.place(gang("other", 1))  # place looks too
            assert isinstance(placement, Placement)
            backend.release(placement)
        # a supervisor is started before the call that starts it returns, and runs on
        assert processes_mentioning(task_dir) == [], "a look started nothing"
        assert not (task_dir / "launch.json").exists()
        look(backend)
        tasks = wait_for(backend, lambda ts: ts[task_id].state is TaskState.RUNNING, timeout=10)
        assert tasks[task_id].exit_code is None
        assert processes_mentioning(task_dir), "as the upkeep's supervisor shows"
        assert b"never started" in backend.read_log(task_id).data
    finally:
        backend.stop([t.task_id for t in backend.observe() if t.state.alive], 0.1)
        backend.close()


@pytest.mark.slow
@pytest.mark.docker
@pytest.mark.parametrize("fixture", ["first-docker.json", "before-records-docker.json"])
def test_a_container_a_previous_release_started_is_adopted(
    tmp_path: Path, fixture: str, docker_client: Any, base_image: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The container as that release made it (its name, labels and options come from the
    record) and its ``launch.json``; the next controller sees it running, stops it, records
    its end and removes it."""
    monkeypatch.setenv("TOKEN", "secret-value")
    state, specs = tmp_path / "state", tmp_path / "specs"
    specs.mkdir()
    volumes = [{"hostPath": str(specs), "containerPath": "/data", "mode": "ro"}]
    data = _old(fixture, state, specs, argv=["python3", "-c", "import time; time.sleep(60)"])
    data.update(image=base_image, volumes=volumes, user=f"{os.getuid()}:{os.getgid()}", env={})
    task_dir = state / "local" / "tasks" / data["taskId"]
    task_dir.mkdir(parents=True)
    Path(data["cwd"]).mkdir(parents=True, exist_ok=True)
    (task_dir / "task.json").write_text(json.dumps(data))
    owner = owner_of(state / "local")
    made = DockerRuntime(owner)
    try:
        container = made.run(LocalTask.from_json(data))
        (task_dir / "launch.json").write_text(
            json.dumps({"container": container, "startedAt": time.time(), "logOffset": 0})
        )
        backend = LocalBackend(state, CAPACITY, runtime=LocalRuntime.DOCKER)
        try:
            task_id = data["taskId"]
            tasks = wait_for(backend, lambda ts: ts[task_id].state is TaskState.RUNNING, 60)
            assert (tasks[task_id].key, tasks[task_id].config_hash) == (TaskKey(Role.WORKER, 0), "c" * 16)
            backend.stop([task_id], 1.0)
            ended = wait_for(backend, lambda ts: ts[task_id].state.ended, 30)
            assert ended[task_id].state is TaskState.STOPPED
            look(backend)  # the next pass records its end and removes the container
            name = container_name(owner, task_id)
            assert docker_client.containers.list(all=True, filters={"name": name}, ignore_removed=True) == []
        finally:
            backend.close()
    finally:
        made.close()
        for each in docker_client.containers.list(
            all=True, filters={"label": f"tfdeclare.owner={owner}"}, ignore_removed=True
        ):
            each.remove(force=True)
