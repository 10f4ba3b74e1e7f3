"""What crosses the backend boundary: placement requests and answers, task launches, and
observed tasks. Pure values; backends and the controller both speak them.

A *slot* is one (role, index) position of a job's TF cluster with its address. A *gang* is all
the slots of one job attempt: a backend places a gang whole or not at all, the controller then
builds the cluster description from the placement and launches every task of it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum

from tfdeclare.core.enums import (
    ClusterSpecStyle,
    EndCause,
    ImagePullPolicy,
    PlacementStrategy,
    Role,
    TaskState,
)
from tfdeclare.core.errors import ErrorCode
from tfdeclare.core.spec.health import HealthCheck
from tfdeclare.core.spec.keys import AttributeConstraint, TaskKey, Volume
from tfdeclare.core.spec.resources import Resources
from tfdeclare.core.spec.secrets import SecretRef

__all__ = [
    "Address",
    "AttributeConstraint",
    "ClusterSource",
    "GangRequest",
    "ObservedTask",
    "Placement",
    "Slot",
    "SlotRequest",
    "TaskKey",
    "TaskLaunch",
    "Unplaced",
    "UnplacedReason",
    "Volume",
]


@dataclass(frozen=True, slots=True)
class Address:
    host: str
    port: int

    def __str__(self) -> str:
        return f"{self.host}:{self.port}"


@dataclass(frozen=True, slots=True)
class SlotRequest:
    key: TaskKey
    resources: Resources
    # The address this slot had in an earlier attempt: backends reuse it when they can, so
    # PSS and TF1 peers can reconnect to the same host:port after a restart.
    previous: Address | None = None
    # A task restarting alone (``restartScope: Task``): it must get ``previous`` exactly, since
    # every other task's TF_CONFIG names that address; the backend waits for it
    # (``WAITING_FOR_ADDRESS``) instead of choosing another.
    pinned: bool = False


@dataclass(frozen=True, slots=True)
class GangRequest:
    job: str
    attempt: int
    slots: tuple[SlotRequest, ...]
    strategy: PlacementStrategy = PlacementStrategy.PACK
    constraints: tuple[AttributeConstraint, ...] = ()
    priority: int = 0  # ``spec.priority``: a queue of waiting gangs serves higher first
    # Each image the gang's tasks run, once, with its pull policy: a backend that must have
    # them on the machine before it launches (the local backend's Docker engine) looks first
    images: tuple[tuple[str, ImagePullPolicy], ...] = ()

    @property
    def total(self) -> Resources:
        total = Resources(0.0, 0, 0)
        for slot in self.slots:
            total = total + slot.resources
        return total


@dataclass(frozen=True, slots=True)
class Slot:
    """Where one task of a placed gang runs."""

    key: TaskKey
    host: str
    port: int
    # The backend's own name for where the task runs (a Mesos agent id, ...): opaque here.
    backend_ref: str | None = None
    gpu_devices: tuple[int, ...] = ()  # device indices, where the backend chooses them

    @property
    def address(self) -> Address:
        return Address(self.host, self.port)


@dataclass(frozen=True, slots=True)
class Placement:
    """A whole gang placed; held by the backend until ``launch`` or ``release``."""

    job: str
    attempt: int
    slots: tuple[Slot, ...]
    token: str  # backend-specific handle for what it holds (offers, reserved ports)

    def slot(self, key: TaskKey) -> Slot:
        for slot in self.slots:
            if slot.key == key:
                return slot
        raise KeyError(key)

    @property
    def addresses(self) -> Mapping[TaskKey, Address]:
        return {slot.key: slot.address for slot in self.slots}


class UnplacedReason(StrEnum):
    WAITING_FOR_RESOURCES = "WaitingForResources"  # fits the cluster, but not what is free now
    WAITING_FOR_GPUS = "WaitingForGPUs"
    WAITING_FOR_OFFERS = "WaitingForOffers"
    WAITING_FOR_ADDRESS = "WaitingForAddress"  # a pinned slot's host:port is not available now
    UNSCHEDULABLE = "Unschedulable"  # can never fit as configured


@dataclass(frozen=True, slots=True)
class Unplaced:
    reason: UnplacedReason
    message: str
    # What the gang lacks beyond what is free now, where the backend can say (the local
    # machine): the controller may preempt lower-priority jobs for it. None: not known.
    short: Resources | None = None
    # Where each task must fit on one place (Mesos agents): every place the gang may use, by
    # the backend's name for it (``ObservedTask.where``), with what it has free now; the
    # controller then chooses victims that free room there (``preemption.Gang``). None: one
    # place (the local machine), or not known.
    rooms: tuple[tuple[str, Resources], ...] | None = None


@dataclass(frozen=True, slots=True, eq=False)
class ClusterSource:
    """What the cluster description of a launch's tasks (``TF_CONFIG``, legacy flags) is made
    of, for a backend that delivers it out of band (``tfdeclare.core.run.clusterdoc``): one
    object shared by every task of a launch, so it costs nothing per task. Compared by
    identity (it is never part of a task's identity: ``config_hash`` is)."""

    style: ClusterSpecStyle
    addresses: Mapping[TaskKey, str]  # every task of the job in the TF cluster
    argv: Mapping[Role, tuple[str, ...]]  # each role's argv before the legacy placeholders


@dataclass(frozen=True, slots=True)
class TaskLaunch:
    """Everything a backend needs to start one task; built by the controller."""

    task_id: str
    job: str
    key: TaskKey
    attempt: int
    spec_hash: str
    config_hash: str  # identity of this task's configuration: a change means replace the task
    argv: tuple[str, ...]
    env: tuple[tuple[str, str], ...]
    resources: Resources
    slot: Slot
    working_dir: str | None = None
    image: str | None = None
    # When the backend pulls the image (not part of the config hash: a change of it alone
    # replaces no running task).
    image_pull_policy: ImagePullPolicy = ImagePullPolicy.IF_NOT_PRESENT
    entrypoint: bool = False  # argv holds only arguments for the image's own entrypoint
    volumes: tuple[Volume, ...] = ()
    grace_period_s: float = 10.0
    source_dir: str | None = None  # folder of the spec file (local backend: default working dir)
    # The task's source folder (``workingDir`` relative to ``source_dir``) as the controller
    # resolved and checked it just before this launch (links resolved): what a backend links
    # and mounts, never resolved again from ``source_dir``. None: not checked (then resolved).
    source_folder: str | None = None
    # Variables given by reference, read by the backend as the task starts, never stored by
    # tfdeclare (``tfdeclare.backends.secrets``); ``name`` references arrive as files.
    secrets: tuple[tuple[str, SecretRef], ...] = ()
    # Its role restarts a failed task alone at the same address (``restartScope: Task``): a
    # backend keeps the address for the slot while the task is down, where it can.
    keep_address: bool = False
    # Its role's ``healthCheck`` (not part of the config hash: a change applies from the next
    # launch). The backend runs it (Mesos: its executor; local: its prober).
    health_check: HealthCheck | None = None
    # The task is in the job's TF cluster: what its cluster description is made of, for a
    # backend that may deliver it out of band (``argv``/``env`` already hold it in band).
    cluster: ClusterSource | None = None


@dataclass(frozen=True, slots=True)
class ObservedTask:
    """One task as the backend sees it now."""

    task_id: str
    job: str
    key: TaskKey
    attempt: int
    config_hash: str
    state: TaskState
    resources: Resources
    host: str | None = None
    port: int | None = None
    exit_code: int | None = None  # 128+N when killed by signal N
    started_at: float | None = None  # unix seconds
    finished_at: float | None = None
    message: str = ""
    spec_hash: str = ""
    extra: Mapping[str, str] = field(default_factory=dict)  # backend detail, e.g. agent id
    # Not empty: the task failed its health check ``failureThreshold`` times in a row (why, in
    # words, starting "unhealthy: "); the lifecycle stops and restarts it as a failure.
    unhealthy: str = ""
    # What the backend knows of why it ended or was lost (``causes.classify`` has the last
    # word): JOB unless the backend saw one of the platform's own events.
    cause: EndCause = EndCause.JOB
    # It ended without running for a runtime error the backend names (``core.errors``: an
    # image that could not be pulled); one that fails the job fails it at once
    error: ErrorCode | None = None
    # The backend's name for the place it runs (a Mesos agent id), as ``Unplaced.rooms`` names
    # places; None where there is one place
    where: str | None = None
    # It ended, but its exit code may still come (unix seconds: until when the backend expects
    # it): a Mesos task whose end the master's reconciliation answer told, which names no exit
    # code; the agent's own update with it follows. restartPolicy ExitCode waits for it until
    # then (``lifecycle``). None: what is known of its end is all there will be.
    exit_code_due: float | None = None
