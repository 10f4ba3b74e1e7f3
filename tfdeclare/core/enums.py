"""The closed vocabularies shared by every layer: roles, policies, phases, task states.

Each is a ``StrEnum`` whose values are exactly what users write in specs or read in status
files, so that nothing outside this module spells them as free strings.
"""

from __future__ import annotations

from enum import StrEnum


class Role(StrEnum):
    """A task's role: the TensorFlow task types (``ROLE_ORDER``), and ``tensorboard``, the
    TensorBoard task a job may run beside its cluster (``spec.tensorboard``), which is in no
    TF cluster, counts for no completion and restarts alone."""

    CHIEF = "chief"
    PS = "ps"
    WORKER = "worker"
    EVALUATOR = "evaluator"
    TENSORBOARD = "tensorboard"

    @property
    def in_cluster(self) -> bool:
        return self is not Role.TENSORBOARD


# The TF cluster's roles; declaration order is the canonical order everywhere.
ROLE_ORDER: tuple[Role, ...] = tuple(role for role in Role if role.in_cluster)
# (role, its name) pairs: ``Role.value`` goes through the enum descriptor, which is slow in
# hot loops; a StrEnum member is also its own name as a str key.
ROLE_NAMES: tuple[tuple[Role, str], ...] = tuple((role, str(role.value)) for role in ROLE_ORDER)


class RestartPolicy(StrEnum):
    NEVER = "Never"
    ON_FAILURE = "OnFailure"
    ALWAYS = "Always"
    EXIT_CODE = "ExitCode"


class ImagePullPolicy(StrEnum):
    """When a task's image is pulled (Kubernetes' ``imagePullPolicy``)."""

    IF_NOT_PRESENT = "IfNotPresent"  # when the engine does not have it (the default)
    ALWAYS = "Always"  # at every launch
    NEVER = "Never"  # never: an image the engine lacks is an error


class RestartScope(StrEnum):
    """What a failed task restarts (``restartScope``, per job and per role)."""

    JOB = "Job"  # every task, so each gets a consistent cluster (same ports where possible)
    TASK = "Task"  # that task alone, at its address: every other task's TF_CONFIG stays valid


class ScopeReason(StrEnum):
    """Why a role has its restart scope (the plan's and the status's ``restartScopes``)."""

    SET_FOR_ROLE = "SetForRole"  # spec.replicas.<role>.restartScope
    SET_FOR_JOB = "SetForJob"  # spec.restartScope
    WORKER_WITH_PS = "WorkerWithParameterServers"  # the coordinator absorbs a lost worker
    PS_OR_CHIEF = "ParameterServerOrChief"  # the chief depends on them: the whole job, from its checkpoint
    WORKERS_ONLY = "NoParameterServers"  # MultiWorkerMirroredStrategy: collectives need every worker
    EVALUATOR = "Evaluator"  # outside the training cluster: always alone
    TENSORBOARD = "TensorBoard"  # outside the training cluster: always alone


class SuccessPolicy(StrEnum):
    """When a job without a chief has succeeded (with a chief, the chief decides)."""

    ALL_WORKERS = "AllWorkers"  # every worker exited 0 (the default)
    WORKER0 = "Worker0"  # worker 0 exited 0 (Kubeflow's default)


class ClusterSpecStyle(StrEnum):
    TF_CONFIG = "tf_config"
    LEGACY_FLAGS = "legacy_flags"
    BOTH = "both"


class PlacementStrategy(StrEnum):
    PACK = "pack"
    SPREAD = "spread"


class ConstraintOperator(StrEnum):
    IN = "In"
    NOT_IN = "NotIn"
    EXISTS = "Exists"
    DOES_NOT_EXIST = "DoesNotExist"


class VolumeMode(StrEnum):
    RO = "ro"
    RW = "rw"


class SecretSource(StrEnum):
    """Where an environment value given by reference (``{secretRef: {...}}``) is read, at launch."""

    ENV = "env"  # the controller's environment
    FILE = "file"  # a file on the controller
    AGENT_FILE = "agentFile"  # a file on the machine the task runs on, read as it starts
    NAME = "name"  # <config secrets.dir>/NAME/KEY on the controller, Kubernetes-secret style


class Phase(StrEnum):
    """A job's phase in its status file (docs/reference.md#status-files)."""

    PENDING = "Pending"
    RUNNING = "Running"
    RESTARTING = "Restarting"
    SUCCEEDED = "Succeeded"
    FAILED = "Failed"
    DELETING = "Deleting"
    # Stopped on purpose, waiting to run again: ``spec.suspend: true`` (reason Suspended) or a
    # higher-priority job took its resources (reason Preempted). Never counted in restarts.
    SUSPENDED = "Suspended"

    @property
    def terminal(self) -> bool:
        return self in (Phase.SUCCEEDED, Phase.FAILED)


class Reason(StrEnum):
    """Why a job is in its phase: the status file's ``reason`` and its conditions' reasons.
    Stable CamelCase tokens that alerts and dashboards match on."""

    CREATED = "Created"
    LAUNCHING = "Launching"
    TASKS_STARTING = "TasksStarting"
    ALL_TASKS_RUNNING = "AllTasksRunning"
    WAITING_FOR_TASKS_TO_STOP = "WaitingForTasksToStop"
    BACKING_OFF = "BackingOff"
    RESTARTING = "Restarting"
    # restartScope Task: a task restarts alone at its address while the others keep running
    TASK_RESTARTING = "TaskRestarting"
    # a task restarting alone waits for its address (Mesos: an offer of its agent and port)
    WAITING_FOR_ADDRESS = "WaitingForAddress"
    # a task restarting alone could not get its address in time: the whole job restarts
    TASK_RESTART_TIMED_OUT = "TaskRestartTimedOut"
    SPEC_CHANGED = "SpecChanged"
    RESIZED = "Resized"
    CHIEF_SUCCEEDED = "ChiefSucceeded"
    WORKERS_SUCCEEDED = "AllWorkersSucceeded"
    WORKER0_SUCCEEDED = "FirstWorkerSucceeded"  # successPolicy Worker0
    # Records of earlier releases only: the job stayed Running while the evaluator finished its
    # final evaluation. It is Succeeded then now (the message says the evaluator finishes).
    FINAL_EVALUATION = "FinalEvaluation"
    TASK_FAILED = "TaskFailed"
    # a task failed its health check (``healthCheck``) and is restarted as a failure
    UNHEALTHY = "Unhealthy"
    PERMANENT_EXIT_CODE = "PermanentExitCode"
    BACKOFF_LIMIT_EXCEEDED = "BackoffLimitExceeded"
    DEADLINE_EXCEEDED = "DeadlineExceeded"
    DELETING = "Deleting"
    SUSPENDED = "Suspended"  # spec.suspend: true stopped it; false resumes it
    PREEMPTED = "Preempted"  # a higher-priority job took its resources; it resumes when they return
    RESUMED = "Resumed"  # it ran again after being suspended or preempted (its history says so)
    MOVING_BACKEND = "MovingBackend"  # its tasks on the backend it leaves are stopping
    # A backend could not place the job's gang (``UnplacedReason`` carries the same values).
    WAITING_FOR_RESOURCES = "WaitingForResources"
    WAITING_FOR_GPUS = "WaitingForGPUs"
    WAITING_FOR_OFFERS = "WaitingForOffers"
    UNSCHEDULABLE = "Unschedulable"
    # A task's working folder or volume, its links resolved again at launch, leads somewhere
    # the spec may not reach (a link swapped since it was checked): not launched until fixed.
    LAUNCH_REFUSED = "LaunchRefused"
    # (WAITING_FOR_ADDRESS above is one of them too: a slot that must keep its address)
    # The Synced condition (False: the job runs as last applied, not as its files say now).
    INVALID_SPEC = "InvalidSpec"
    SPEC_APPLIED = "SpecApplied"
    FILE_HOLDS_NO_JOB = "FileHoldsNoJob"  # its file is empty or being rewritten
    FILES_UNREADABLE = "FilesUnreadable"  # a file or folder could not be read: nothing is pruned
    NOT_SETTLED = "NotSettled"  # the files changed; acted on once they have stayed so (settle time)
    PRUNE_REFUSED = "PruneRefused"  # the files define no job at all: pruning everything is refused
    NOT_IN_SOURCE = "NotInSource"  # gone from the files, and pruning is off (an orphan)
    UNVERIFIED_REVISION = "UnverifiedRevision"  # git head not signed by a trusted key: not applied
    # the new spec could not be written into its record (a full or read-only state disk): the job
    # runs as last applied, and the next passes try again
    STATE_WRITE_FAILED = "StateWriteFailed"
    # A platform event (``EndCause``: an agent lost or drained, maintenance, an operator, the
    # controller's own restart) ended tasks: a restart not counted against backoffLimit ...
    PLATFORM_RESTART = "PlatformRestart"
    # ... on its own budget (``platformRestartLimit``), which ran out
    PLATFORM_RESTART_LIMIT_EXCEEDED = "PlatformRestartLimitExceeded"
    # A terminal runtime error of the job's own (``core.errors``: a secret that is not there,
    # a container task without an image): failed at once, never retried
    TERMINAL_ERROR = "TerminalError"

    @property
    def stalled(self) -> bool:
        """The job cannot progress without a change (the Stalled condition)."""
        return self in _STALLED


_STALLED = frozenset(
    {
        Reason.UNSCHEDULABLE,
        Reason.LAUNCH_REFUSED,
        Reason.BACKOFF_LIMIT_EXCEEDED,
        Reason.DEADLINE_EXCEEDED,
        Reason.PERMANENT_EXIT_CODE,
        Reason.TASK_FAILED,
        Reason.PLATFORM_RESTART_LIMIT_EXCEEDED,
        Reason.TERMINAL_ERROR,
    }
)


class EndCause(StrEnum):
    """Why a task ended (or was lost): the job's own doing, or one of the platform's events,
    which restart the job without counting against ``backoffLimit`` (``platformRestartLimit``
    bounds them). Backends say which platform event they saw (Mesos: the task state and
    reason); anything they cannot tell apart is the job's own."""

    JOB = "Job"  # it exited or failed by itself (an exit code, a signal, a limit it hit)
    AGENT_LOST = "AgentLost"  # its machine (Mesos agent) became unreachable or was removed
    AGENT_DRAINED = "AgentDrained"  # an operator drained its machine (Mesos DRAIN_AGENT)
    MAINTENANCE = "Maintenance"  # moved off a machine scheduled for maintenance (inverse offer)
    KILLED_BY_OPERATOR = "KilledByOperator"  # an operator marked its machine gone, or killed it
    LAUNCH_DROPPED = "LaunchDropped"  # its launch never reached the machine (Mesos TASK_DROPPED)
    CONTROLLER_RESTART = "ControllerRestart"  # found gone by a controller that restarted meanwhile
    ENGINE_RESTART = "EngineRestart"  # its container ended with the Docker engine (stopped, restarted)
    # its cluster description, delivered out of band, could not be fetched (Mesos clusterServer)
    CLUSTER_UNDELIVERED = "ClusterUndelivered"

    @property
    def platform(self) -> bool:
        return self is not EndCause.JOB


class TaskState(StrEnum):
    """What a backend says about one task. Backends map their own states onto these."""

    STARTING = "starting"  # accepted by the backend, process not yet confirmed running
    RUNNING = "running"
    STOPPING = "stopping"  # a stop was requested and the task has not ended yet
    SUCCEEDED = "succeeded"  # exited 0 by itself
    FAILED = "failed"  # exited non-zero or by a signal it was not sent by us
    STOPPED = "stopped"  # ended after we asked it to stop
    LOST = "lost"  # the backend lost track of it; it may still be running (never proof of death)
    GONE = "gone"  # known not to be running, without an exit status (e.g. Mesos TASK_GONE)

    @property
    def ended(self) -> bool:
        return self in (TaskState.SUCCEEDED, TaskState.FAILED, TaskState.STOPPED, TaskState.GONE)

    @property
    def alive(self) -> bool:
        """Counts against resources and must be stopped before a replacement starts."""
        return self in (TaskState.STARTING, TaskState.RUNNING, TaskState.STOPPING, TaskState.LOST)
