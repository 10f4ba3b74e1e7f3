"""The TF cluster description of every task: ``TF_CONFIG`` and TFMesos-style legacy flags.

``task_configs`` resolves, for one job attempt and one placement, exactly what each task runs
(argv, environment, resources). Its ``config_hash`` is a task's identity: a running task whose
hash differs from the desired one is replaced. The planner calls the same function with
symbolic addresses to say which running tasks a change restarts.

Rules (reference: tensorflow-distributed.md §4, §11): every training task (chief, ps, worker)
sees the same cluster, *without* the evaluator; the evaluator sees the whole cluster including
itself. Legacy flags know only ``ps`` and ``worker``. The TensorBoard task is in no cluster
(``tensorboard_config``).
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, replace
from functools import cached_property

from tfdeclare.core.enums import ROLE_ORDER, ClusterSpecStyle, Role
from tfdeclare.core.run.tasks import TaskKey, Volume
from tfdeclare.core.spec.model import JobSpec
from tfdeclare.core.spec.resources import Resources
from tfdeclare.core.spec.secrets import EnvValue

_PLACEHOLDER = re.compile(r"\{(ps_hosts|worker_hosts|job_name|task_index)\}")


def cluster_for(addresses: Mapping[TaskKey, str], role: Role) -> dict[str, list[str]]:
    """The ``cluster`` map a task of ``role`` sees."""
    cluster: dict[str, list[str]] = {}
    for cluster_role in ROLE_ORDER:
        if cluster_role is Role.EVALUATOR and role is not Role.EVALUATOR:
            continue
        keys = sorted(k for k in addresses if k.role is cluster_role)
        if keys:
            cluster[cluster_role.value] = [addresses[k] for k in keys]
    return cluster


def cluster_json(addresses: Mapping[TaskKey, str], role: Role) -> str:
    return json.dumps(cluster_for(addresses, role), separators=(",", ":"))


def tf_config(cluster: str, key: TaskKey) -> str:
    """``TF_CONFIG`` of ``key`` given its role's ``cluster_json``: the same bytes as dumping the
    whole document (task identities depend on them), with the cluster made once per role, not
    once per task (which made a job's cost grow with the cube of its size)."""
    task = json.dumps({"type": key.role.value, "index": key.index}, separators=(",", ":"))
    return f'{{"cluster":{cluster},"task":{task}}}'


def legacy_hosts(addresses: Mapping[TaskKey, str]) -> dict[str, str]:
    """The ``{ps_hosts}`` and ``{worker_hosts}`` values (the same for every task)."""
    cluster = cluster_for(addresses, Role.WORKER)
    return {"ps_hosts": ",".join(cluster.get("ps", [])), "worker_hosts": ",".join(cluster.get("worker", []))}


def substitute(argv: tuple[str, ...], values: Mapping[str, str]) -> tuple[str, ...]:
    """Replace only the four known placeholders; other braces are left alone."""
    return tuple(_PLACEHOLDER.sub(lambda m: values[m.group(1)], arg) for arg in argv)


@dataclass(frozen=True)
class TaskConfig:
    key: TaskKey
    argv: tuple[str, ...]
    env: tuple[tuple[str, EnvValue], ...]  # sorted by name; secrets as references
    resources: Resources
    image: str | None
    working_dir: str | None
    volumes: tuple[Volume, ...]
    entrypoint: bool = False  # argv holds only arguments for the image's own entrypoint

    @cached_property
    def config_hash(self) -> str:
        """A task's identity. Its encoding is frozen: a running task whose hash changes is
        replaced, so a field added later enters it only when set (``tests/test_upgrade.py``
        checks the hashes of an earlier release's tasks)."""
        encoded = json.dumps(
            {
                "argv": self.argv,
                "env": [(k, v if isinstance(v, str) else v.to_json()) for k, v in self.env],
                "resources": [self.resources.cpus, self.resources.mem_mib, self.resources.gpus],
                "image": self.image,
                "workingDir": self.working_dir,
                "volumes": [[v.host_path, v.container_path, v.mode.value] for v in self.volumes],
            },
            separators=(",", ":"),
        )
        if self.entrypoint:  # added later: part of the identity only when set
            encoded += "+entrypoint"
        return hashlib.sha256(encoded.encode()).hexdigest()[:16]


def task_configs(spec: JobSpec, addresses: Mapping[TaskKey, str], attempt: int) -> dict[TaskKey, TaskConfig]:
    """What every task of ``spec`` runs, given every task's address."""
    configs: dict[TaskKey, TaskConfig] = {}
    clusters: dict[Role, str] = {}  # per role: the evaluator's differs from the others'
    hosts: dict[str, str] | None = None
    for key in spec.task_keys():
        if not key.role.in_cluster:
            configs[key] = tensorboard_config(spec, key, addresses[key])
            continue
        env = spec.env_for(key.role)
        argv = spec.command_for(key.role)
        if spec.cluster_spec in (ClusterSpecStyle.TF_CONFIG, ClusterSpecStyle.BOTH):
            if key.role not in clusters:
                clusters[key.role] = cluster_json(addresses, key.role)
            env["TF_CONFIG"] = tf_config(clusters[key.role], key)
        if spec.cluster_spec in (ClusterSpecStyle.LEGACY_FLAGS, ClusterSpecStyle.BOTH):
            hosts = hosts if hosts is not None else legacy_hosts(addresses)
            argv = substitute(argv, {**hosts, "job_name": key.role.value, "task_index": str(key.index)})
        env.update(
            {
                "TFDECLARE_JOB": spec.name,
                "TFDECLARE_ROLE": key.role.value,
                "TFDECLARE_INDEX": str(key.index),
                "TFDECLARE_ATTEMPT": str(attempt),
            }
        )
        configs[key] = TaskConfig(
            key=key,
            argv=argv,
            env=tuple(sorted(env.items())),
            resources=spec.resources_for(key.role),
            image=spec.image_for(key.role),
            working_dir=spec.working_dir_for(key.role),
            volumes=spec.volumes,
            entrypoint=spec.runs_entrypoint(key.role),
        )
    return configs


def tensorboard_config(spec: JobSpec, key: TaskKey, address: str) -> TaskConfig:
    """The TensorBoard task: its program with ``--logdir``, ``--host`` and ``--port`` of its
    own address; none of the job's environment (no TF_CONFIG) and no attempt, so a restart of
    the job does not replace it, only a change of its own spec or address does."""
    board = spec.tensorboard
    assert board is not None
    host, _, port = address.rpartition(":")
    argv = (*board.command, "--logdir", board.log_dir, "--host", host, "--port", port)
    env = {"TFDECLARE_JOB": spec.name, "TFDECLARE_ROLE": key.role.value, "TFDECLARE_INDEX": str(key.index)}
    return TaskConfig(
        key=key,
        argv=argv,
        env=tuple(sorted(env.items())),
        resources=board.resources,
        image=spec.tensorboard_image,
        working_dir=spec.working_dir,
        volumes=spec.volumes,
    )


def symbolic_addresses(spec: JobSpec) -> dict[TaskKey, str]:
    """Stand-in addresses for comparing two specs' task configurations (ports are stable)."""
    return {key: key.name for key in spec.task_keys()}


TASK_RESTARTS_ENV = "TFDECLARE_TASK_RESTARTS"


def with_restarts(
    configs: dict[TaskKey, TaskConfig], restarted: Mapping[str, int]
) -> dict[TaskKey, TaskConfig]:
    """``configs`` with the tasks restarted alone (``restartScope: Task``; task name -> how
    often) saying so in ``TFDECLARE_TASK_RESTARTS``: a new identity for that task only, so
    its ended copy is replaced while every other task's configuration stays as it was. A
    task never restarted alone has no such variable (identities of earlier releases hold)."""
    if not restarted:
        return configs
    for key, config in configs.items():
        count = restarted.get(key.name)
        if count and key.role.in_cluster:
            env = [(k, v) for k, v in config.env if k != TASK_RESTARTS_ENV]
            configs[key] = replace(config, env=tuple(sorted([*env, (TASK_RESTARTS_ENV, str(count))])))
    return configs
