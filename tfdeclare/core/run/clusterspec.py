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

import bisect
import functools
import hashlib
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, replace
from functools import cached_property
from typing import Any

from tfdeclare.core.enums import ROLE_ORDER, ClusterSpecStyle, Role
from tfdeclare.core.run.tasks import TaskKey, Volume
from tfdeclare.core.spec.keys import ORDER
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
        keys = sorted((k for k in addresses if k.role is cluster_role), key=ORDER)
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


_dump = functools.partial(json.dumps, separators=(",", ":"))


@dataclass(frozen=True)
class RoleCluster:
    """The ``cluster`` of ``TF_CONFIG`` as one role's tasks see it (``cluster_json``): one object
    shared by all of them, so a job's configurations take memory linear in its size."""

    json: str

    @cached_property
    def escaped(self) -> bytes:
        """The JSON as it appears inside a JSON string (in a task's identity encoding)."""
        return _dump(self.json)[1:-1].encode()

    def digest_after(self, head: str) -> Any:
        """A SHA-256 fed ``head`` and then the escaped cluster, made once per distinct head
        (a role's tasks mostly share theirs) and handed out as a copy: the cluster is hashed
        once per role, not once per task (a 1,000-task job hashed 20 MB per pass)."""
        prefixes: dict[str, Any] = self.__dict__.setdefault("_prefixes", {})
        found = prefixes.get(head)
        if found is None:
            found = prefixes[head] = hashlib.sha256(head.encode())
            found.update(self.escaped)
        return found.copy()


@dataclass(frozen=True)
class TaskConfig:
    key: TaskKey
    argv: tuple[str, ...]
    own_env: tuple[tuple[str, EnvValue], ...]  # sorted by name; secrets as references; no TF_CONFIG
    resources: Resources
    image: str | None
    working_dir: str | None
    volumes: tuple[Volume, ...]
    entrypoint: bool = False  # argv holds only arguments for the image's own entrypoint
    cluster: RoleCluster | None = None  # set: the task gets TF_CONFIG with this cluster

    @property
    def env(self) -> tuple[tuple[str, EnvValue], ...]:
        """The whole environment, sorted by name, TF_CONFIG included: made when asked (at
        launch), since each task's TF_CONFIG holds the whole cluster."""
        if self.cluster is None:
            return self.own_env
        return tuple(sorted((*self.own_env, ("TF_CONFIG", tf_config(self.cluster.json, self.key)))))

    @cached_property
    def config_hash(self) -> str:
        """A task's identity. Its encoding is frozen: a running task whose hash changes is
        replaced, so a field added later enters it only when set (``tests/test_upgrade.py``
        checks the hashes of an earlier release's tasks). It is the SHA-256 of the JSON of
        (argv, env, resources, image, workingDir, volumes), env with TF_CONFIG, fed in three
        parts so that the role's cluster is not copied into every task (``_encoding``)."""
        head, tail = self._encoding()
        if self.cluster is None:
            return hashlib.sha256(head.encode()).hexdigest()[:16]
        digest = self.cluster.digest_after(head)
        digest.update(tail.encode())
        return str(digest.hexdigest()[:16])

    def same_identity(self, other: TaskConfig) -> bool:
        """``self.config_hash == other.config_hash``, without hashing a cluster: the encoding's
        parts compared (the clusters as strings: the JSON of the whole decides them)."""
        return self.cluster == other.cluster and self._encoding() == other._encoding()

    def _encoding(self) -> tuple[str, str]:
        """The identity's JSON around the escaped cluster: (before, after); all of it in
        ``before`` when the task has no TF_CONFIG. Byte for byte what ``json.dumps`` of the
        whole document gives (JSON with these separators is made of its parts' JSON)."""
        entries = [_dump([k, v if isinstance(v, str) else v.to_json()]) for k, v in self.own_env]
        rest = (
            f'],"resources":{_dump([self.resources.cpus, self.resources.mem_mib, self.resources.gpus])}'
            f',"image":{_dump(self.image)},"workingDir":{_dump(self.working_dir)}'
            f',"volumes":{_dump([[v.host_path, v.container_path, v.mode.value] for v in self.volumes])}}}'
            + ("+entrypoint" if self.entrypoint else "")  # added later: part of the identity only when set
        )
        start = f'{{"argv":{_dump(self.argv)},"env":['
        if self.cluster is None:
            return start + ",".join(entries) + rest, ""
        at = bisect.bisect_left([k for k, _ in self.own_env], "TF_CONFIG")
        before, after = entries[:at], entries[at:]
        task = _dump({"type": self.key.role.value, "index": self.key.index})
        head = start + "".join(e + "," for e in before) + '["TF_CONFIG","' + _dump('{"cluster":')[1:-1]
        tail = _dump(f',"task":{task}}}')[1:-1] + '"]' + "".join("," + e for e in after) + rest
        return head, tail


def task_configs(
    spec: JobSpec,
    addresses: Mapping[TaskKey, str],
    attempt: int,
    previous: Mapping[TaskKey, TaskConfig] | None = None,
) -> dict[TaskKey, TaskConfig]:
    """What every task of ``spec`` runs, given every task's address. Linear in the job's size:
    TF_CONFIG is held as the role's shared ``RoleCluster`` and made only at launch, and what
    is the same for a role's tasks is worked out once per role. ``previous`` (the configs of
    the last pass, see ``reuse``): a role whose cluster is unchanged keeps its ``RoleCluster``."""
    configs: dict[TaskKey, TaskConfig] = {}
    roles: dict[Role, tuple[TaskConfig, list[tuple[str, EnvValue]], int]] = {}
    hosts: dict[str, str] | None = None
    with_tf_config = spec.cluster_spec in (ClusterSpecStyle.TF_CONFIG, ClusterSpecStyle.BOTH)
    with_flags = spec.cluster_spec in (ClusterSpecStyle.LEGACY_FLAGS, ClusterSpecStyle.BOTH)
    for key in spec.task_keys():
        if not key.role.in_cluster:
            configs[key] = tensorboard_config(spec, key, addresses[key])
            continue
        if key.role not in roles:  # the role's first task: what all of them share
            env = spec.env_for(key.role)
            env.update({"TFDECLARE_JOB": spec.name, "TFDECLARE_ROLE": key.role.value})
            env["TFDECLARE_ATTEMPT"] = str(attempt)
            env.pop("TFDECLARE_INDEX", None)  # each task's own, below
            shared = sorted(env.items())
            template = TaskConfig(
                key=key,
                argv=spec.command_for(key.role),
                own_env=(),
                resources=spec.resources_for(key.role),
                image=spec.image_for(key.role),
                working_dir=spec.working_dir_for(key.role),
                volumes=spec.volumes,
                entrypoint=spec.runs_entrypoint(key.role),
                cluster=_role_cluster(cluster_json(addresses, key.role), previous, key)
                if with_tf_config
                else None,
            )
            at = bisect.bisect_left([name for name, _ in shared], "TFDECLARE_INDEX")
            roles[key.role] = (template, shared, at)
        template, shared, at = roles[key.role]
        argv = template.argv
        if with_flags:
            hosts = hosts if hosts is not None else legacy_hosts(addresses)
            argv = substitute(argv, {**hosts, "job_name": key.role.value, "task_index": str(key.index)})
        own_env = (*shared[:at], ("TFDECLARE_INDEX", str(key.index)), *shared[at:])
        configs[key] = TaskConfig(
            key,
            argv,
            own_env,
            template.resources,
            template.image,
            template.working_dir,
            template.volumes,
            template.entrypoint,
            template.cluster,
        )
    return configs


def _role_cluster(text: str, previous: Mapping[TaskKey, TaskConfig] | None, key: TaskKey) -> RoleCluster:
    """The role's cluster: last pass's object when its JSON is the same (one comparison a role)."""
    prior = previous.get(key) if previous else None
    if prior is not None and prior.cluster is not None and prior.cluster.json == text:
        return prior.cluster
    return RoleCluster(text)


def reuse(configs: dict[TaskKey, TaskConfig], previous: Mapping[TaskKey, TaskConfig] | None) -> None:
    """Each of ``configs`` equal to ``previous``'s for its slot replaced by that object, whose
    identity is then not worked out again. A task's identity hashes its whole cluster (its
    encoding is frozen), so working out every task's identity afresh each pass made a pass over
    a running job cost the square of its size (10,000 tasks: about 2 GB of SHA-256 input);
    with the configs kept from the last pass (``task_configs(previous=...)`` keeps each
    unchanged role's cluster object, so comparing two configs never compares clusters' text),
    a pass hashes only the tasks whose configuration changed."""
    if not previous:
        return
    for key, config in configs.items():
        prior = previous.get(key)
        if prior is not None and prior is not config and prior == config:
            configs[key] = prior


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
        own_env=tuple(sorted(env.items())),
        resources=board.resources,
        image=spec.tensorboard_image,
        working_dir=spec.working_dir,
        volumes=spec.volumes,
    )


def symbolic_addresses(spec: JobSpec) -> dict[TaskKey, str]:
    """Stand-in addresses for comparing two specs' task configurations (ports are stable)."""
    return {key: key.name for key in spec.task_keys()}


def replaced_by_resize(old: JobSpec, new: JobSpec) -> tuple[TaskKey, ...]:
    """The tasks of both specs that a resize from ``old`` to ``new`` replaces, in role and
    index order: those whose view of the cluster changes (stand-in addresses, the same
    attempt). When a task of the TF cluster is among them, the resize is a new run of the job
    (``lifecycle.new_run``: the attempt moves on), which replaces every task of its cluster,
    so all of them are named; otherwise (the evaluator or TensorBoard task added or removed)
    only what changes."""
    old_configs = task_configs(old, symbolic_addresses(old), 0)
    new_configs = task_configs(new, symbolic_addresses(new), 0)
    both = sorted(new_configs.keys() & old_configs.keys(), key=ORDER)
    changed = [k for k in both if not new_configs[k].same_identity(old_configs[k])]
    if any(k.role.in_cluster for k in changed):
        return tuple(k for k in both if k.role.in_cluster or k in changed)
    return tuple(changed)


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
            env = [(k, v) for k, v in config.own_env if k != TASK_RESTARTS_ENV]
            configs[key] = replace(config, own_env=tuple(sorted([*env, (TASK_RESTARTS_ENV, str(count))])))
    return configs
