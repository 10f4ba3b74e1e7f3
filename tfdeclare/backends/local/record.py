"""The local backend's task record: what ``task.json`` in a task's folder says, typed.

A launch writes the record once (complete, by rename, mode 600: ``write_task``) before
anything runs, and nobody changes it after; the backend, its drivers and the task's
supervisor read it (``read_task``). ``runtime`` names the driver that runs the task
(``drivers.py``), the one place the backend looks at it.

Every record an earlier release wrote is read (``tests/golden/local-task-records/`` keeps one of
each): records without ``version`` are version 1, which was written in stages, each adding
keys; a key that stage did not write has the value that stage behaved as:

- the first records had no ``workDir``, ``sourceDir`` or ``secrets`` (the task ran in
  ``cwd``, with no folder of its own and no secrets);
- no ``runtime``: a process; container records had no ``imagePullPolicy`` (``IfNotPresent``,
  the default) nor ``hidden`` (nothing covered).

Version 2 (this release) writes every key, ``runtime`` too. A record of a later version, or
one that is not a record at all, reads as None: its task is left alone (never adopted
half-understood).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path
from typing import Any

from tfdeclare.core.enums import ImagePullPolicy, Role, VolumeMode
from tfdeclare.core.spec.health import HealthCheck
from tfdeclare.core.spec.keys import TaskKey, Volume
from tfdeclare.core.spec.resources import Resources
from tfdeclare.core.spec.secrets import SecretRef
from tfdeclare.files import read_regular, write_atomic

RECORD_VERSION = 2
TASK_FILE = "task.json"
TASK_MAX_BYTES = 4 << 20  # a record names its task's environment and command: a few KiB


class TaskRuntime(StrEnum):
    """What runs one task: the driver its record names (``drivers.py``)."""

    PROCESS = "process"  # a process group under a supervisor of ours (``process_driver.py``)
    DOCKER = "docker"  # a container, supervised by the Docker engine (``docker_driver.py``)


@dataclass(frozen=True, slots=True)
class ContainerSpec:
    """What a container task has beyond a process task."""

    image: str
    image_pull_policy: ImagePullPolicy
    user: str  # uid:gid the container runs as (the controller's)
    hidden: tuple[str, ...]  # folders a mount holds that the task must not see (the state folder)
    volumes: tuple[Volume, ...]


@dataclass(frozen=True, slots=True)
class LocalTask:
    """One task of the local backend, as its ``task.json`` records it."""

    task_id: str
    job: str
    key: TaskKey
    attempt: int
    config_hash: str
    spec_hash: str
    argv: tuple[str, ...]
    env: Mapping[str, str] = field(hash=False)
    cwd: str | None  # where it runs (None: the controller's folder, the first records)
    work_dir: str | None  # its own writable folder (None: the first records had none)
    source_dir: str | None  # the folder whose entries are linked into ``work_dir``
    resources: Resources
    host: str
    port: int | None
    gpu_devices: tuple[int, ...]
    grace_s: float
    log_path: Path
    created_at: float
    runtime: TaskRuntime = TaskRuntime.PROCESS
    secrets: tuple[tuple[str, SecretRef], ...] = ()
    container: ContainerSpec | None = None  # with ``runtime`` docker
    version: int = RECORD_VERSION
    health_check: HealthCheck | None = None  # its role's ``healthCheck``, probed by ``prober.py``

    def to_json(self) -> dict[str, Any]:
        data: dict[str, Any] = {
            "version": self.version,
            "runtime": self.runtime.value,
            "taskId": self.task_id,
            "job": self.job,
            "role": self.key.role.value,
            "index": self.key.index,
            "attempt": self.attempt,
            "configHash": self.config_hash,
            "specHash": self.spec_hash,
            "argv": list(self.argv),
            "env": dict(self.env),
            "secrets": [[name, ref.to_json()] for name, ref in self.secrets],
            "cwd": self.cwd,
            "workDir": self.work_dir,
            "sourceDir": self.source_dir,
            "resources": [self.resources.cpus, self.resources.mem_mib, self.resources.gpus],
            "host": self.host,
            "port": self.port,
            "gpuDevices": list(self.gpu_devices),
            "graceSeconds": self.grace_s,
            "logPath": str(self.log_path),
            "createdAt": self.created_at,
        }
        if self.health_check is not None:  # absent without one: earlier records read the same
            data["healthCheck"] = self.health_check.to_json()
        if self.container is not None:
            data.update(
                image=self.container.image,
                imagePullPolicy=self.container.image_pull_policy.value,
                user=self.container.user,
                hidden=list(self.container.hidden),
                volumes=[
                    {"hostPath": v.host_path, "containerPath": v.container_path, "mode": v.mode.value}
                    for v in self.container.volumes
                ],
            )
        return data

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> LocalTask:
        """A record of any version this release knows; ``KeyError``, ``ValueError`` or
        ``TypeError`` for one it cannot read."""
        version = int(data.get("version", 1))
        if not 1 <= version <= RECORD_VERSION:
            raise ValueError(f"task record version {version} is newer than this release reads")
        runtime = TaskRuntime(data.get("runtime", TaskRuntime.PROCESS.value))
        container = None
        if runtime is TaskRuntime.DOCKER:
            container = ContainerSpec(
                image=str(data["image"]),
                image_pull_policy=ImagePullPolicy(
                    data.get("imagePullPolicy", ImagePullPolicy.IF_NOT_PRESENT.value)
                ),
                user=str(data["user"]),
                hidden=tuple(str(h) for h in data.get("hidden", ())),
                volumes=tuple(
                    Volume(str(v["hostPath"]), str(v["containerPath"]), VolumeMode(v["mode"]))
                    for v in data.get("volumes", ())
                ),
            )
        cpus, mem_mib, gpus = data["resources"]
        return cls(
            task_id=str(data["taskId"]),
            job=str(data["job"]),
            key=TaskKey(Role(data["role"]), int(data["index"])),
            attempt=int(data["attempt"]),
            config_hash=str(data["configHash"]),
            spec_hash=str(data["specHash"]),
            argv=tuple(str(a) for a in data["argv"]),
            env={str(k): str(v) for k, v in data["env"].items()},
            cwd=data.get("cwd"),
            work_dir=data.get("workDir"),
            source_dir=data.get("sourceDir"),
            resources=Resources(float(cpus), int(mem_mib), int(gpus)),
            host=str(data["host"]),
            port=None if data.get("port") is None else int(data["port"]),
            gpu_devices=tuple(int(g) for g in data.get("gpuDevices", ())),
            grace_s=float(data.get("graceSeconds", 10.0)),
            log_path=Path(data["logPath"]),
            created_at=float(data.get("createdAt", 0.0)),
            runtime=runtime,
            secrets=tuple((str(name), SecretRef.from_json(ref)) for name, ref in data.get("secrets", ())),
            container=container,
            version=version,
            health_check=HealthCheck.from_json(data["healthCheck"]) if "healthCheck" in data else None,
        )


def read_task(task_dir: Path) -> LocalTask | None:
    """The record in ``task_dir``; None when there is none (a launch that crashed before its
    folder was complete) or it cannot be read (damaged, from a later release, or not a regular
    file: never read through a link nor waiting on a FIFO, ``files.read_regular``)."""
    try:
        return LocalTask.from_json(json.loads(read_regular(task_dir / TASK_FILE, TASK_MAX_BYTES)))
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return None


def write_task(task_dir: Path, task: LocalTask) -> None:
    """Write the record (crash-safe: temp file, fsync, rename; mode 600, as it names secrets'
    references and the task's environment)."""
    write_atomic(task_dir / TASK_FILE, json.dumps(task.to_json()).encode(), mode=0o600)
