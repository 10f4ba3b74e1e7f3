"""The desired state's model: frozen, typed job specs, their canonical form and fingerprint.

A ``JobSpec`` is built only from a *canonical* spec: the schema-valid document with defaults
filled in and quantities normalised (``mem`` in MiB, ``cpus: 2`` == ``cpus: 2.0``, roles with
``count: 0`` dropped). The canonical form is what is stored as "applied", diffed by the planner
and hashed into ``spec_hash``, so formatting, key order and defaults never count as changes.

Upgrades: records keep the canonical form of the release that applied them, and an upgrade must
never change a running job's plan (docs/reference.md#job-semantics). The planner takes a key
missing on one side as equal to an unset value (``None``, ``{}``, ``[]``), so a field added to
this form must be unset when the user did not set it, and ``from_canonical`` must read it with a default.
(``tests/test_upgrade.py`` plans against records written by earlier releases.)
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from tfdeclare.core import jsontext
from tfdeclare.core.diagnostics import JsonPath
from tfdeclare.core.enums import (
    ROLE_NAMES,
    ClusterSpecStyle,
    ConstraintOperator,
    ImagePullPolicy,
    PlacementStrategy,
    RestartPolicy,
    RestartScope,
    Role,
    ScopeReason,
    SuccessPolicy,
    VolumeMode,
)
from tfdeclare.core.spec.health import HealthCheck, canonical_health_check
from tfdeclare.core.spec.keys import AttributeConstraint, TaskKey, Volume
from tfdeclare.core.spec.resources import QuantityError, Resources, parse_mem_mib
from tfdeclare.core.spec.secrets import EnvValue, env_value

Pairs = tuple[tuple[str, str], ...]
EnvPairs = tuple[tuple[str, EnvValue], ...]  # a value is a string or a reference to a secret

DEFAULT_EVALUATOR_GRACE_S = 60.0
"""How long the evaluator may finish its final evaluation after training succeeded, when the
spec does not say (``evaluatorGraceSeconds``): long enough for one evaluation pass of a
typical model over a validation set, short enough that a forgotten evaluator that waits for
checkpoints forever does not hold a finished job open for long."""
# Restarts for platform events (``EndCause``) a job may have before it fails: a rolling
# upgrade drains every agent once, so well above ``backoffLimit``'s default of 3.
DEFAULT_PLATFORM_RESTART_LIMIT = 10


SCOPE_WHY: Mapping[ScopeReason, str] = {
    ScopeReason.SET_FOR_ROLE: "set for the role (spec.replicas.{role}.restartScope)",
    ScopeReason.SET_FOR_JOB: "set for the job (spec.restartScope)",
    ScopeReason.WORKER_WITH_PS: "the job has ps roles: the coordinator re-dispatches a lost worker's "
    "work and a worker restarted at its address rejoins",
    ScopeReason.PS_OR_CHIEF: "the job has ps roles: a failed ps or chief needs the whole job, "
    "restored from its checkpoint",
    ScopeReason.WORKERS_ONLY: "no ps roles (MultiWorkerMirroredStrategy): its collectives need every worker",
    ScopeReason.EVALUATOR: "the evaluator is outside the training cluster",
    ScopeReason.TENSORBOARD: "TensorBoard is outside the training cluster",
}
"""Why a role has its restart scope, in words (``{role}``: the role's name)."""


def _number(value: float) -> int | float:
    """One spelling per number, so ``2`` and ``2.0`` hash the same."""
    return int(value) if float(value).is_integer() else float(value)


def canonicalize(filled: Mapping[str, Any]) -> dict[str, Any]:
    """The canonical form of a schema-valid, default-filled job document.

    Raises ``QuantityError`` (with its path) for a quantity the schema's pattern admitted but
    that makes no sense (``0Gi``); the loader turns that into a diagnostic.
    """
    spec = filled["spec"]
    replicas: dict[str, Any] = {}
    for _, role_name in ROLE_NAMES:
        replica = spec["replicas"].get(role_name)
        if replica is None or replica["count"] == 0:
            continue
        resources = replica["resources"]
        try:
            mem = parse_mem_mib(resources["mem"])
        except QuantityError as err:
            raise QuantityError(str(err), ("spec", "replicas", role_name, "resources", "mem")) from None
        entry: dict[str, Any] = {
            "count": int(replica["count"]),
            "resources": {
                "cpus": _number(resources["cpus"]),
                "mem": mem,
                "gpus": int(resources["gpus"]),
            },
        }
        if replica.get("env"):
            entry["env"] = dict(sorted(replica["env"].items()))
        if "command" in replica:
            entry["command"] = list(replica["command"])
        # Added for Kubeflow parity: present only when set, so earlier specs hash the same.
        for key in ("args", "image", "imagePullPolicy", "workingDir", "restartPolicy", "restartScope"):
            if key in replica:
                entry[key] = list(replica[key]) if key == "args" else replica[key]
        if "healthCheck" in replica:  # issue 34: present only when set, so earlier specs hash the same
            entry["healthCheck"] = canonical_health_check(replica["healthCheck"])
        replicas[role_name] = entry
    canonical_spec: dict[str, Any] = {
        "command": list(spec["command"]) if "command" in spec else None,
        "env": dict(sorted(spec["env"].items())),
        "image": spec.get("image"),
        "workingDir": spec.get("workingDir"),
        "replicas": replicas,
        "restartPolicy": spec["restartPolicy"],
        "backoffLimit": int(spec["backoffLimit"]),
        "activeDeadlineSeconds": int(spec["activeDeadlineSeconds"])
        if "activeDeadlineSeconds" in spec
        else None,
        "terminationGracePeriodSeconds": _number(spec["terminationGracePeriodSeconds"]),
        "clusterSpec": spec["clusterSpec"],
        "placement": {
            "strategy": spec["placement"]["strategy"],
            "constraints": [
                {"attribute": c["attribute"], "operator": c["operator"], "values": list(c["values"])}
                for c in spec["placement"]["constraints"]
            ],
        },
        "volumes": [
            {"hostPath": v["hostPath"], "containerPath": v["containerPath"], "mode": v["mode"]}
            for v in spec["volumes"]
        ],
        **_parity_fields(spec),
    }
    if "tensorboard" in spec:  # absent when unset: the hash of every other job stays as it was
        canonical_spec["tensorboard"] = _canonical_tensorboard(spec["tensorboard"])
    if "checkpoint" in spec:  # issue 34: absent when unset, so no other job's hash changes
        checkpoint = spec["checkpoint"]
        canonical_spec["checkpoint"] = {
            "dir": checkpoint["dir"],
            **({"totalSteps": int(checkpoint["totalSteps"])} if "totalSteps" in checkpoint else {}),
        }
    return {
        "apiVersion": filled["apiVersion"],
        "kind": filled["kind"],
        "metadata": {
            "name": filled["metadata"]["name"],
            "labels": dict(sorted(filled["metadata"]["labels"].items())),
        },
        "spec": canonical_spec,
    }


def _canonical_tensorboard(board: Mapping[str, Any]) -> dict[str, Any]:
    resources = board["resources"]
    try:
        mem = parse_mem_mib(resources["mem"])
    except QuantityError as err:
        raise QuantityError(str(err), ("spec", "tensorboard", "resources", "mem")) from None
    canonical = {
        "logDir": board["logDir"],
        "command": list(board["command"]),
        "resources": {"cpus": _number(resources["cpus"]), "mem": mem, "gpus": int(resources["gpus"])},
    }
    if "image" in board:  # added later: present only when set, so earlier specs hash the same
        canonical["image"] = board["image"]
    return canonical


_IF_NOT_PRESENT = ImagePullPolicy.IF_NOT_PRESENT.value  # (an enum's value is a property: read once)


def _parity_fields(spec: Mapping[str, Any]) -> dict[str, Any]:
    """The job fields added for Kubeflow parity, present only when set (so earlier specs keep
    their hash)."""
    out: dict[str, Any] = {}
    if "args" in spec:
        out["args"] = list(spec["args"])
    for key in ("ttlSecondsAfterFinished", "evaluatorGraceSeconds"):
        if key in spec:
            out[key] = _number(spec[key])
    for key in ("successPolicy", "restartScope"):
        if key in spec:
            out[key] = spec[key]
    # The schema's default is left out, so specs written before the field keep their hash.
    if spec.get("imagePullPolicy", _IF_NOT_PRESENT) != _IF_NOT_PRESENT:
        out["imagePullPolicy"] = spec["imagePullPolicy"]
    # Issue 34: present only when not the default (priority 0, not suspended), so no existing
    # job's hash changes.
    if spec.get("priority", 0):
        out["priority"] = int(spec["priority"])
    if spec.get("suspend", False):
        out["suspend"] = True
    if "priorityClassName" in spec:  # its value is written into priority when the spec is read
        out["priorityClassName"] = spec["priorityClassName"]
    if "healthCheck" in spec:
        out["healthCheck"] = canonical_health_check(spec["healthCheck"])
    if spec.get("platformRestartLimit", DEFAULT_PLATFORM_RESTART_LIMIT) != DEFAULT_PLATFORM_RESTART_LIMIT:
        out["platformRestartLimit"] = int(spec["platformRestartLimit"])
    return out


_FINGERPRINT_JSON = jsontext.encoder(sort_keys=True, separators=(",", ":"))


def fingerprint(canonical: Mapping[str, Any]) -> str:
    encoded = _FINGERPRINT_JSON(canonical)
    return hashlib.sha256(encoded.encode("utf-8")).hexdigest()


def restart_scope_of(
    role: Role, own: RestartScope | None, job: RestartScope | None, *, has_ps: bool
) -> tuple[RestartScope, ScopeReason]:
    """``JobSpec.restart_scope_for``, from the role's own ``restartScope``, the job's, and
    whether the job has ps tasks."""
    if role is Role.TENSORBOARD:
        return RestartScope.TASK, ScopeReason.TENSORBOARD
    if role is Role.EVALUATOR:
        return RestartScope.TASK, ScopeReason.EVALUATOR
    if own is not None:
        return own, ScopeReason.SET_FOR_ROLE
    if job is not None:
        return job, ScopeReason.SET_FOR_JOB
    if role is Role.WORKER and has_ps:
        return RestartScope.TASK, ScopeReason.WORKER_WITH_PS
    if role in (Role.PS, Role.CHIEF) and has_ps:
        return RestartScope.JOB, ScopeReason.PS_OR_CHIEF
    return RestartScope.JOB, ScopeReason.WORKERS_ONLY


def restart_scopes_of(canonical: Mapping[str, Any]) -> tuple[tuple[Role, RestartScope, ScopeReason], ...]:
    """Each role's ``restart_scope_for`` (in the order of ``JobSpec.replicas``), read off the
    canonical form without building the ``JobSpec`` (a plan of 10,000 new jobs)."""
    spec = canonical["spec"]
    by_role = spec["replicas"]
    job = RestartScope(spec["restartScope"]) if "restartScope" in spec else None
    has_ps = by_role.get(Role.PS.value, {}).get("count", 0) > 0
    return tuple(
        (
            role,
            *restart_scope_of(
                role,
                RestartScope(entry["restartScope"]) if "restartScope" in entry else None,
                job,
                has_ps=has_ps,
            ),
        )
        for role, name in ROLE_NAMES
        if (entry := by_role.get(name)) is not None
    )


def task_keys_of(canonical: Mapping[str, Any]) -> tuple[TaskKey, ...]:
    """Every task of a canonical spec, without building the ``JobSpec``. Jobs of one small
    shape share one tuple (a plan of 10,000 new jobs made 80,000 keys, about 1 µs each)."""
    spec = canonical["spec"]
    replicas = spec["replicas"]
    shape = (*((name, entry["count"]) for name, entry in replicas.items()), bool(spec.get("tensorboard")))
    keys = _SHAPES.get(shape)
    if keys is None:
        keys = tuple(
            TaskKey(role, i)
            for role, name in ROLE_NAMES
            if name in replicas
            for i in range(replicas[name]["count"])
        )
        keys = (*keys, TENSORBOARD_KEY) if shape[-1] else keys
        if len(keys) <= _SHARED_UP_TO:
            if len(_SHAPES) >= _SHAPES_KEPT:
                _SHAPES.clear()
            _SHAPES[shape] = keys
    return keys


_SHAPES: dict[tuple[Any, ...], tuple[TaskKey, ...]] = {}
_SHARED_UP_TO = 64  # tasks: a bigger job's keys are made for it alone
_SHAPES_KEPT = 1024


TENSORBOARD_KEY = TaskKey(Role.TENSORBOARD, 0)


@dataclass(frozen=True, slots=True)
class TensorBoardSpec:
    log_dir: str
    command: tuple[str, ...]
    resources: Resources
    image: str | None = None  # None: the job's spec.image


@dataclass(frozen=True, slots=True)
class CheckpointSpec:
    """``spec.checkpoint``: the folder the job saves its checkpoints in (relative: in the
    saving task's working folder) and the step at which it is done (None: not declared)."""

    dir: str
    total_steps: int | None = None


@dataclass(frozen=True, slots=True)
class TaskRun:
    """What the tasks of one role (or the TensorBoard task) run, resolved exactly as their
    launches are (``clusterspec.task_configs`` asks the same ``JobSpec`` methods), with the
    JSON path each value comes from. The policy checks read these, never the spec fields one
    by one, so a field that changes what runs cannot slip past them."""

    role: Role
    count: int
    image: str | None
    image_at: JsonPath  # where the image is named; where one would go when there is none
    working_dir: str | None
    working_dir_at: JsonPath
    resources: Resources
    count_at: JsonPath
    resources_at: JsonPath


@dataclass(frozen=True, slots=True)
class FieldScreen:
    """What the fields that feed a job's runs say, read straight off the canonical form: a
    cheap first look, so a rule resolves the runs (``LoadedJob.runs``, which builds the typed
    spec) only when one of these could break it. Each is a superset of what runs: every image a
    task runs is named by one of ``images``, every working folder is one of ``working_dirs``
    (``tests/security/test_policy_entries.py`` checks that against the runs). The policy's
    rules read it first (``tfdeclare.core.spec.policy``)."""

    images: frozenset[str]
    unset_image: bool  # some role (or TensorBoard) may run with no image
    working_dirs: frozenset[str]
    tasks: int
    gpus: int

    @classmethod
    def of(cls, canonical: Mapping[str, Any]) -> FieldScreen:
        spec = canonical["spec"]
        board = spec.get("tensorboard")
        images: set[str] = set()
        dirs: set[str] = set()
        tasks = gpus = 0
        for e in spec["replicas"].values():  # one pass (every job is screened)
            if e.get("image"):
                images.add(e["image"])
            if e.get("workingDir"):
                dirs.add(e["workingDir"])
            count = int(e["count"])
            tasks += count
            gpus += count * int(e["resources"]["gpus"])
        if board:
            images.update([board["image"]] if board.get("image") else [])
            tasks, gpus = tasks + 1, gpus + int(board["resources"]["gpus"])
        images.update([spec["image"]] if spec.get("image") else [])
        dirs.update([spec["workingDir"]] if spec.get("workingDir") else [])
        return cls(frozenset(images), not spec.get("image"), frozenset(dirs), tasks, gpus)


@dataclass(frozen=True, slots=True)
class ReplicaSpec:
    role: Role
    count: int
    resources: Resources
    env: EnvPairs = ()
    command: tuple[str, ...] | None = None
    args: tuple[str, ...] | None = None
    image: str | None = None
    working_dir: str | None = None
    restart_policy: RestartPolicy | None = None
    image_pull_policy: ImagePullPolicy | None = None
    restart_scope: RestartScope | None = None
    health_check: HealthCheck | None = None


@dataclass(frozen=True, slots=True)
class JobSpec:
    name: str
    labels: Pairs
    image: str | None
    command: tuple[str, ...] | None
    env: EnvPairs
    working_dir: str | None
    replicas: tuple[ReplicaSpec, ...]  # role order, only roles with count > 0
    restart_policy: RestartPolicy
    backoff_limit: int
    active_deadline_s: int | None
    grace_period_s: float
    cluster_spec: ClusterSpecStyle
    strategy: PlacementStrategy
    constraints: tuple[AttributeConstraint, ...]
    volumes: tuple[Volume, ...]
    spec_hash: str
    tensorboard: TensorBoardSpec | None = None
    args: tuple[str, ...] | None = None
    success_policy: SuccessPolicy = SuccessPolicy.ALL_WORKERS
    ttl_after_finished_s: int | None = None
    evaluator_grace_s: float = DEFAULT_EVALUATOR_GRACE_S
    image_pull_policy: ImagePullPolicy = ImagePullPolicy.IF_NOT_PRESENT
    restart_scope: RestartScope | None = None  # unset: by the roles (``restart_scope_for``)
    priority: int = 0  # higher first: the queue's order, and whom it may preempt
    suspend: bool = False  # stopped the graceful way until it is false again
    checkpoint: CheckpointSpec | None = None  # where its progress is read (issue 34)
    health_check: HealthCheck | None = None  # every cluster role's without one of its own
    # restarts for platform events (lost or drained agents, maintenance, ...): their own budget
    platform_restart_limit: int = DEFAULT_PLATFORM_RESTART_LIMIT

    @classmethod
    def from_canonical(cls, canonical: Mapping[str, Any], spec_hash: str | None = None) -> JobSpec:
        """The typed spec of a canonical document (``spec_hash``: its fingerprint, when the
        caller has it already)."""
        spec = canonical["spec"]
        by_role = spec["replicas"]
        replicas = tuple(
            ReplicaSpec(
                role=role,
                count=entry["count"],
                resources=Resources(
                    float(entry["resources"]["cpus"]), entry["resources"]["mem"], entry["resources"]["gpus"]
                ),
                env=tuple((k, env_value(v)) for k, v in entry.get("env", {}).items()),
                command=tuple(entry["command"]) if "command" in entry else None,
                args=tuple(entry["args"]) if "args" in entry else None,
                image=entry.get("image"),
                working_dir=entry.get("workingDir"),
                restart_policy=RestartPolicy(entry["restartPolicy"]) if "restartPolicy" in entry else None,
                image_pull_policy=ImagePullPolicy(entry["imagePullPolicy"])
                if "imagePullPolicy" in entry
                else None,
                restart_scope=RestartScope(entry["restartScope"]) if "restartScope" in entry else None,
                health_check=HealthCheck.from_json(entry["healthCheck"]) if "healthCheck" in entry else None,
            )
            for role, name in ROLE_NAMES
            if (entry := by_role.get(name)) is not None
        )
        return cls(
            name=canonical["metadata"]["name"],
            labels=tuple(canonical["metadata"]["labels"].items()),
            image=spec["image"],
            command=tuple(spec["command"]) if spec["command"] is not None else None,
            env=tuple((k, env_value(v)) for k, v in spec["env"].items()),
            working_dir=spec["workingDir"],
            replicas=replicas,
            restart_policy=RestartPolicy(spec["restartPolicy"]),
            backoff_limit=spec["backoffLimit"],
            active_deadline_s=spec["activeDeadlineSeconds"],
            grace_period_s=float(spec["terminationGracePeriodSeconds"]),
            cluster_spec=ClusterSpecStyle(spec["clusterSpec"]),
            strategy=PlacementStrategy(spec["placement"]["strategy"]),
            constraints=tuple(
                AttributeConstraint(c["attribute"], ConstraintOperator(c["operator"]), tuple(c["values"]))
                for c in spec["placement"]["constraints"]
            ),
            volumes=tuple(
                Volume(v["hostPath"], v["containerPath"], VolumeMode(v["mode"])) for v in spec["volumes"]
            ),
            spec_hash=spec_hash or fingerprint(canonical),
            tensorboard=_tensorboard_spec(spec.get("tensorboard")),
            args=tuple(spec["args"]) if "args" in spec else None,
            success_policy=SuccessPolicy(spec.get("successPolicy", SuccessPolicy.ALL_WORKERS.value)),
            ttl_after_finished_s=spec.get("ttlSecondsAfterFinished"),
            evaluator_grace_s=float(spec.get("evaluatorGraceSeconds", DEFAULT_EVALUATOR_GRACE_S)),
            image_pull_policy=ImagePullPolicy(
                spec.get("imagePullPolicy", ImagePullPolicy.IF_NOT_PRESENT.value)
            ),
            restart_scope=RestartScope(spec["restartScope"]) if "restartScope" in spec else None,
            priority=int(spec.get("priority", 0)),
            suspend=bool(spec.get("suspend", False)),
            checkpoint=CheckpointSpec(spec["checkpoint"]["dir"], spec["checkpoint"].get("totalSteps"))
            if "checkpoint" in spec
            else None,
            health_check=HealthCheck.from_json(spec["healthCheck"]) if "healthCheck" in spec else None,
            platform_restart_limit=int(spec.get("platformRestartLimit", DEFAULT_PLATFORM_RESTART_LIMIT)),
        )

    def health_check_for(self, role: Role) -> HealthCheck | None:
        """The health check of ``role``'s tasks: its own, else the job's (none for TensorBoard)."""
        replica = self.replica(role)
        if replica is not None and replica.health_check is not None:
            return replica.health_check
        return self.health_check if role.in_cluster else None

    def replica(self, role: Role) -> ReplicaSpec | None:
        for replica in self.replicas:
            if replica.role is role:
                return replica
        return None

    def count(self, role: Role) -> int:
        replica = self.replica(role)
        return replica.count if replica else 0

    @property
    def has_chief(self) -> bool:
        return self.count(Role.CHIEF) > 0

    @property
    def saver(self) -> TaskKey:
        """The task that saves checkpoints (TensorFlow's chief: ``chief-0``, else
        ``worker-0``): a relative ``checkpoint.dir`` lies in its working folder."""
        return TaskKey(Role.CHIEF if self.has_chief else Role.WORKER, 0)

    def task_keys(self) -> tuple[TaskKey, ...]:
        """Every task: the cluster's, then the TensorBoard task when there is one."""
        keys = tuple(TaskKey(r.role, i) for r in self.replicas for i in range(r.count))
        return (*keys, TENSORBOARD_KEY) if self.tensorboard else keys

    def command_for(self, role: Role) -> tuple[str, ...]:
        """The argv of a role: its command and its args; only the args when the role runs its
        image's entrypoint (``runs_entrypoint``)."""
        replica = self.replica(role)
        command = replica.command if replica and replica.command else self.command
        args = replica.args if replica and replica.args is not None else self.args
        if command is None and self.image_for(role) is None:  # the loader refuses such specs
            raise ValueError(f"job {self.name}: role {role.value} has no command")
        return (*(command or ()), *(args or ()))

    def runs_entrypoint(self, role: Role) -> bool:
        """No command anywhere: the role's image's own entrypoint runs (with the args)."""
        replica = self.replica(role)
        return self.command is None and (replica is None or replica.command is None)

    def image_for(self, role: Role) -> str | None:
        replica = self.replica(role)
        return replica.image if replica and replica.image else self.image

    def image_pull_policy_for(self, role: Role) -> ImagePullPolicy:
        """When the role's image is pulled: its own policy, else the job's (the TensorBoard
        task runs ``spec.image`` under the job's)."""
        replica = self.replica(role)
        return replica.image_pull_policy if replica and replica.image_pull_policy else self.image_pull_policy

    def working_dir_for(self, role: Role) -> str | None:
        replica = self.replica(role)
        return replica.working_dir if replica and replica.working_dir else self.working_dir

    @property
    def tensorboard_image(self) -> str | None:
        """The TensorBoard task's image: its own, else the job's."""
        return (self.tensorboard.image if self.tensorboard else None) or self.image

    def runs(self) -> tuple[TaskRun, ...]:
        """Every kind of task the job runs, the TensorBoard task included (``TaskRun``)."""
        runs = []
        for replica in self.replicas:
            role = ("spec", "replicas", replica.role.value)
            runs.append(
                TaskRun(
                    role=replica.role,
                    count=replica.count,
                    image=self.image_for(replica.role),
                    image_at=(*role, "image") if replica.image else ("spec", "image") if self.image else role,
                    working_dir=self.working_dir_for(replica.role),
                    working_dir_at=(*role, "workingDir") if replica.working_dir else ("spec", "workingDir"),
                    resources=replica.resources,
                    count_at=(*role, "count"),
                    resources_at=(*role, "resources"),
                )
            )
        board = self.tensorboard
        if board is not None:
            at: JsonPath = ("spec", "tensorboard")
            runs.append(
                TaskRun(
                    role=Role.TENSORBOARD,
                    count=1,
                    image=self.tensorboard_image,
                    image_at=(*at, "image") if board.image else ("spec", "image") if self.image else at,
                    working_dir=self.working_dir,
                    working_dir_at=("spec", "workingDir"),
                    resources=board.resources,
                    count_at=at,
                    resources_at=(*at, "resources"),
                )
            )
        return tuple(runs)

    def restart_policy_for(self, role: Role) -> RestartPolicy:
        replica = self.replica(role)
        return replica.restart_policy if replica and replica.restart_policy else self.restart_policy

    def restart_scope_for(self, role: Role) -> tuple[RestartScope, ScopeReason]:
        """What a failed task of ``role`` restarts, and why: the evaluator and TensorBoard
        always alone; else the role's ``restartScope``, the job's, or the default the roles
        imply (reference: tensorflow-distributed.md §8.2, §11.4): with ``ps`` roles
        (ParameterServerStrategy, TF1 between-graph) a worker alone, since the coordinator
        re-dispatches its closures and a worker restarted at its address rejoins, while a ps
        or the chief takes the whole job (restored from its checkpoint); without, every role
        takes the whole job (MultiWorkerMirroredStrategy's collectives need every worker)."""
        replica = self.replica(role)
        own = replica.restart_scope if replica is not None else None
        return restart_scope_of(role, own, self.restart_scope, has_ps=self.count(Role.PS) > 0)

    @property
    def images(self) -> tuple[str, ...]:
        """Every image the job's tasks run (TensorBoard's included), each once."""
        return tuple(dict.fromkeys(run.image for run in self.runs() if run.image))

    def env_for(self, role: Role) -> dict[str, EnvValue]:
        env = dict(self.env)
        replica = self.replica(role)
        if replica:
            env.update(replica.env)
        return env

    def resources_for(self, role: Role) -> Resources:
        if role is Role.TENSORBOARD and self.tensorboard:
            return self.tensorboard.resources
        replica = self.replica(role)
        if replica is None:
            raise KeyError(role)
        return replica.resources

    @property
    def total_resources(self) -> Resources:
        total = Resources(0.0, 0, 0)
        for replica in self.replicas:
            total = total + replica.resources.scaled(replica.count)
        return total + self.tensorboard.resources if self.tensorboard else total

    @property
    def gpus(self) -> int:
        return self.total_resources.gpus


def _tensorboard_spec(board: Mapping[str, Any] | None) -> TensorBoardSpec | None:
    if not board:
        return None
    resources = board["resources"]
    return TensorBoardSpec(
        board["logDir"],
        tuple(board["command"]),
        Resources(float(resources["cpus"]), resources["mem"], resources["gpus"]),
        board.get("image"),
    )
