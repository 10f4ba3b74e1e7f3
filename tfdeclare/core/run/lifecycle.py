"""A job's run, level-triggered: (record, its tasks as observed, now) -> what to do next.

Pure and clock-free (``now`` is an argument), so every timing rule is tested without sleeping.
Each call looks at everything afresh; nothing depends on what the previous call decided
except what it wrote into the record. The rules (docs/reference.md#job-semantics):

- A task's identity is its *config hash* (``clusterspec``): alive tasks whose hash is not the
  desired one are stale and stopped; desired slots without a current task are launched
  together, as one gang, once no stale task is alive (ports are reused) and any backoff is over.
- Completion: with a chief, the chief exiting 0; without one, every worker exiting 0 (or,
  with ``successPolicy: Worker0``, worker 0): the job has Succeeded then (its completion
  time), and every task still alive (ps, workers) is stopped, except a running evaluator:
  stopping it waits for its final evaluation, up to ``evaluatorGraceSeconds`` after the
  completion (``final_evaluation_since``; the message says so), and it is stopped when that
  runs out. Whatever it does meanwhile, failing included, the job stays Succeeded.
- ``ttlSecondsAfterFinished`` after completion (Succeeded or Failed), once nothing of the job
  runs, its ended tasks and their logs are purged; the record keeps ``cleaned_at``.
- Failure of a current task, by its role's restart policy: ``Never`` fails the job;
  ``ExitCode`` fails it for exit codes 1-127 except 42; otherwise it restarts after an
  exponential backoff. ``ExitCode`` decides by a code the backend still expects
  (``ObservedTask.exit_code_due``: a Mesos task whose end the master's reconciliation told)
  no sooner than it comes or that time passes (``_exit_code_awaited``: nothing is stopped or
  restarted meanwhile, the message says so); with none by then it decides as for any
  unknown code (a restart), and says so. ``Always`` also treats a ps or evaluator (or, with a chief, a worker)
  that exits 0 early as a failure. The phase is Restarting while any restart is under way: of
  the whole job, or of a task alone until that task runs again. What restarts is the role's
  restart scope
  (``JobSpec.restart_scope_for``): ``Job`` restarts the whole job (a new run, ``new_run``:
  attempt + 1, every task replaced, same ports), at most ``backoffLimit`` times for the job;
  ``Task`` restarts that task alone at its address while the others keep running, at most
  ``backoffLimit`` times for that task in this run of the job (``JobRecord.task_restarts``;
  its configuration gains ``TFDECLARE_TASK_RESTARTS``, so only it is replaced). When
  failures of both scopes come together, the whole job restarts. A training task restarting
  alone keeps its address (``launches.pinned``); if it has not got it back ``address_wait_s``
  after its launch was first asked for (a Mesos agent that does not offer its port), the
  whole job restarts instead (reason ``TaskRestartTimedOut``), where its tasks may move;
  that restart keeps the task restarts (the task's failure was counted for it).
- A new run of the job (``new_run``): a whole-job restart (for a failure or a platform
  event), a suspension or preemption, a change that restarts every task, a move to another
  backend, a resize that changes the TF cluster (``resized``). Every task of the cluster is
  replaced: the attempt (``TFDECLARE_ATTEMPT``) moves on and the restarts of tasks alone
  start afresh. Only the transition writes that: a record of an earlier release, whatever
  it holds, runs on as it is.
- ``activeDeadlineSeconds`` past the first start fails the job.
- A task its backend reports unhealthy (``healthCheck``, ``ObservedTask.unhealthy``: a hung
  task) is a failure of its role like a lost one: it is stopped, and restarted by its restart
  policy and scope, counted against ``backoffLimit``; the reason is ``Unhealthy`` until the
  restart's tasks are launched.
- Suspension (``spec.suspend: true``) and preemption (``suspend``, called by the controller
  for a job a higher-priority one needs the room of): every task is stopped with the job's
  grace period (a job with ps roles: its chief first, the rest once it has exited, so that
  the coordinator saves while the ps still serve), the phase is Suspended (reason Suspended
  or Preempted), and nothing of it counts as a failure, a restart or against
  ``backoffLimit`` (``suspensions`` and ``preemptions`` count them). The attempt moves on
  at once, so its next launch is a fresh gang on the same addresses where the backend can.
  ``suspend: false`` resumes a suspended job; a preempted one asks to be placed whenever
  nothing of it runs, and is resumed (by the controller, ``resumed``) once it is.
- The platform's own events (``causes``: a task lost with its agent, an agent drained or going
  into maintenance, an operator, tasks found gone by a restarted controller) are no failure of
  the job: when every failed task of a pass was taken so, the job (or each task alone, by its
  restart scope) restarts at once, without a backoff, counted in ``platform_restarts`` (and a
  task's ``TaskRestarts.platform``), never in ``restarts`` nor against ``backoffLimit``; past
  ``platformRestartLimit`` the job fails (reason PlatformRestartLimitExceeded). A pass with a
  failure of the job's own among them takes the ordinary failure path.
- The TensorBoard task (``spec.tensorboard``) is outside all of this: it starts with the
  job's tasks (or alone), is relaunched alone when it ends, is replaced only when its own
  config changes, and is stopped when the job ends or is deleted.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace

from tfdeclare.core.enums import Phase, Reason, RestartPolicy, RestartScope, Role, SuccessPolicy, TaskState
from tfdeclare.core.run.causes import WORDS, cause_of, split
from tfdeclare.core.run.clusterspec import TaskConfig, replaced_by_resize, reuse, task_configs, with_restarts
from tfdeclare.core.run.launches import pinned
from tfdeclare.core.run.record import (
    PLATFORM_HISTORY,
    SUSPENSION_HISTORY,
    JobRecord,
    PlatformEvent,
    Suspension,
    TaskRestarts,
    rfc3339,
)
from tfdeclare.core.run.tasks import ObservedTask, TaskKey
from tfdeclare.core.spec.model import SCOPE_WHY, TENSORBOARD_KEY, JobSpec

RETRYABLE_EXIT = 42  # "checkpoint saved, restart me"
# How a job held by spec.suspend is resumed; a Kubeflow manifest writes it runPolicy.suspend
# (the record does not say which kind of file a job came from, so both are named)
RESUME_HINT = "suspend: false (runPolicy.suspend in a Kubeflow manifest) runs it again"
TENSORBOARD_RELAUNCH_S = 10.0  # a TensorBoard task that ended is relaunched no sooner


@dataclass(frozen=True, slots=True)
class Backoff:
    initial_s: float = 1.0
    max_s: float = 300.0

    def delay(self, restarts: int) -> float:
        """Seconds before relaunch number ``restarts`` (1-based): initial * 2^(restarts-1)."""
        if restarts <= 0:
            return 0.0
        return float(min(self.max_s, self.initial_s * (2 ** min(restarts - 1, 30))))


@dataclass(frozen=True, slots=True)
class Step:
    """What one look at a job decided."""

    record: JobRecord
    stop: tuple[str, ...] = ()  # task ids to stop
    launch: tuple[TaskKey, ...] = ()  # slots to place and launch now, as one gang
    forget: tuple[str, ...] = ()  # ended tasks no longer needed
    events: tuple[str, ...] = ()  # what happened, for the log
    wake_at: float | None = None  # look again no later than this
    remove: bool = False  # the job is deleted and nothing of it runs: drop the record
    purge: bool = False  # its TTL after finishing ran out: purge its ended tasks and logs
    # What each slot of ``record`` should run (``desired_configs``), made once a pass: the
    # caller compares its tasks with it too. Empty when the record is removed.
    desired: Mapping[TaskKey, TaskConfig] = field(default_factory=dict)


def desired_configs(
    spec: JobSpec, record: JobRecord, previous: Mapping[TaskKey, TaskConfig] | None = None
) -> dict[TaskKey, TaskConfig]:
    """What each slot should run, given the addresses placed so far (unplaced slots get a
    stand-in address, so tasks that would see it count as stale). ``previous``: the last
    pass's (``Step.desired``); the configs that did not change are its objects, identities
    already worked out (``clusterspec.reuse``)."""
    addresses = {key: record.addresses.get(key.name, f"unplaced/{key.name}") for key in spec.task_keys()}
    configs = with_restarts(task_configs(spec, addresses, record.attempt, previous), record.restarted_alone)
    reuse(configs, previous)
    return configs


def new_run(record: JobRecord, **changes: object) -> JobRecord:
    """The record of a new run of the job (module docstring): every task of its TF cluster is
    replaced, so the attempt moves on and the restarts of tasks alone, counted per run, start
    afresh (``TFDECLARE_TASK_RESTARTS`` is gone from every task's configuration)."""
    fresh: dict[str, object] = {"attempt": record.attempt + 1, "task_restarts": {}, "restart_cause": ""}
    return record.evolve(**{**fresh, **changes})


def resized(before: JobRecord, after: JobRecord, **changes: object) -> JobRecord:
    """``after`` (``before`` with its resized spec) with ``changes``: a new run when the
    resize replaces the tasks of the TF cluster (TF's cluster spec is static: a role's count
    changed), as it is when it only adds or removes the evaluator or the TensorBoard task
    (nothing else restarts)."""
    if any(key.role.in_cluster for key in replaced_by_resize(before.spec, after.spec)):
        return new_run(after, **changes)
    return after.evolve(**changes)


def _describe_end(task: ObservedTask) -> str:
    if task.unhealthy:
        return f"{task.key.name} was {task.unhealthy}"
    cause = cause_of(task)
    if cause.platform:
        return f"{task.key.name} was taken: {WORDS[cause]}" + (f" ({task.message})" if task.message else "")
    if task.state is TaskState.LOST:
        return f"{task.key.name} is lost" + (f" ({task.message})" if task.message else "")
    if task.state is TaskState.GONE:
        return f"{task.key.name} is gone" + (f" ({task.message})" if task.message else "")
    if task.exit_code is not None and task.exit_code > 128:
        return f"{task.key.name} was killed by signal {task.exit_code - 128}"
    if task.exit_code is not None:
        return f"{task.key.name} exited {task.exit_code}"
    return f"{task.key.name} ended ({task.state.value})" + (f": {task.message}" if task.message else "")


def _is_failure(task: ObservedTask, spec: JobSpec) -> bool:
    if task.state in (TaskState.FAILED, TaskState.GONE, TaskState.STOPPED):
        return True
    if task.state is TaskState.SUCCEEDED and spec.restart_policy_for(task.key.role) is RestartPolicy.ALWAYS:
        # Exiting 0 is only the normal end for the roles that decide completion.
        terminal_roles = (Role.CHIEF,) if spec.has_chief else (Role.WORKER,)
        return task.key.role not in terminal_roles
    return False


def _hung(task: ObservedTask) -> bool:
    """Alive, found unhealthy by its health check, and not being stopped yet."""
    return bool(task.unhealthy) and task.state is not TaskState.STOPPING


def _still(record: JobRecord, otherwise: Reason) -> Reason:
    """A restart for a hung task says so (reason Unhealthy) until its tasks launch again."""
    return Reason.UNHEALTHY if record.reason is Reason.UNHEALTHY else otherwise


def _restart_reason(failures: Sequence[ObservedTask], otherwise: Reason) -> Reason:
    return Reason.UNHEALTHY if any(t.unhealthy for t in failures) else otherwise


def _permanent(task: ObservedTask, policy: RestartPolicy) -> bool:
    if policy is RestartPolicy.NEVER:
        return True
    if policy is RestartPolicy.EXIT_CODE:
        code = task.exit_code
        return code is not None and 1 <= code <= 127 and code != RETRYABLE_EXIT
    return False


def _completed(spec: JobSpec, succeeded: set[TaskKey]) -> Reason | None:
    if spec.has_chief:
        return Reason.CHIEF_SUCCEEDED if TaskKey(Role.CHIEF, 0) in succeeded else None
    if spec.success_policy is SuccessPolicy.WORKER0:
        return Reason.WORKER0_SUCCEEDED if TaskKey(Role.WORKER, 0) in succeeded else None
    workers = [TaskKey(Role.WORKER, i) for i in range(spec.count(Role.WORKER))]
    return Reason.WORKERS_SUCCEEDED if workers and all(w in succeeded for w in workers) else None


_SUCCESS = {
    Reason.CHIEF_SUCCEEDED: "the chief exited 0",
    Reason.WORKERS_SUCCEEDED: "every worker exited 0",
    Reason.WORKER0_SUCCEEDED: "worker 0 exited 0 (successPolicy Worker0)",
}


def step(
    record: JobRecord,
    tasks: Sequence[ObservedTask],
    now: float,
    backoff: Backoff,
    address_wait_s: float | None = None,
    previous: Mapping[TaskKey, TaskConfig] | None = None,
) -> Step:
    """``address_wait_s``: how long a task restarting alone may wait for its address (the
    backend's; None: for ever) before the whole job restarts instead. ``previous``: the last
    step's ``desired`` for this job, if the caller kept it (a pass then hashes only what changed)."""
    desired = desired_configs(record.spec, record, previous)  # once a pass: linear in the job's size
    result = _step(record, tasks, now, backoff, desired, address_wait_s)
    if result.remove:
        return result
    after = result.record
    inputs = (record.spec_hash, record.attempt, record.addresses, record.restarted_alone)
    if (after.spec_hash, after.attempt, after.addresses, after.restarted_alone) != inputs:
        desired = desired_configs(after.spec, after, desired)  # a restart (of the job or a task alone)
    if after.phase.terminal:
        return replace(result, desired=desired)
    # Ended tasks of earlier attempts or configurations have been accounted for: let them go
    # (their logs stay).
    old = tuple(
        t.task_id
        for t in tasks
        if t.state.ended and not (t.key in desired and t.config_hash == desired[t.key].config_hash)
    )
    return replace(result, forget=tuple(dict.fromkeys((*old, *result.forget))), desired=desired)


def _step(
    record: JobRecord,
    tasks: Sequence[ObservedTask],
    now: float,
    backoff: Backoff,
    desired: Mapping[TaskKey, TaskConfig],
    address_wait_s: float | None,
) -> Step:
    if record.deleting or record.phase.terminal:
        return _ending(record, tasks, now)
    record, said = _suspend_by_spec(record, tasks, now)
    if record.suspension is not None:
        held = _suspended(record, tasks)
        return replace(held, events=(*said, *held.events))
    boards = [t for t in tasks if not t.key.role.in_cluster]
    # "N task(s) running" counts what a status shows as running, the TensorBoard task included
    board_running = any(t.state is TaskState.RUNNING for t in boards)
    in_cluster = [t for t in tasks if t.key.role.in_cluster]
    result = _cluster_step(
        record, in_cluster, now, backoff, desired, address_wait_s, board_running=board_running
    )
    return _with_tensorboard(result, boards, now, desired)


# ---- suspension and preemption --------------------------------------------------------------


def suspend(
    record: JobRecord,
    reason: Reason,
    now: float,
    *,
    by: str | None = None,
    message: str = "",
    tasks: int = 0,
) -> JobRecord:
    """The record of a job stopped on purpose: ``reason`` SUSPENDED (``spec.suspend``) or
    PREEMPTED (``by`` the job that needs its room; ``message`` says why). Its tasks are
    stopped by the next ``step``; no restart is counted, and it is a new run (``new_run``),
    so what runs next is a fresh gang (on the same addresses where the backend can)."""
    assert reason in (Reason.SUSPENDED, Reason.PREEMPTED)
    history = record.suspension_history
    if record.suspension is not None:  # a preempted job suspended from its file
        history = (*history, record.suspension)[-SUSPENSION_HISTORY:]
    hold = Suspension(reason, now, by, message, tasks)
    return new_run(
        record,
        suspension=hold,
        suspension_history=history,
        suspensions=record.suspensions + (reason is Reason.SUSPENDED),
        preemptions=record.preemptions + (reason is Reason.PREEMPTED),
        phase=Phase.SUSPENDED,
        reason=reason,
        message=_held_words(hold),
        next_launch_at=None,
        final_evaluation_since=None,
    )


def resumed(record: JobRecord, now: float) -> JobRecord:
    """The record of a suspended or preempted job that may run again (``spec.suspend`` false,
    or the controller placed it): its suspension goes to the history, the phase to Pending,
    and its start time is reset (its next launch sets it), so ``activeDeadlineSeconds``
    counts from the resumption, as a Kubernetes Job's does."""
    hold = record.suspension
    if hold is None:
        return record
    ended = replace(hold, resumed_at=now)
    return record.evolve(  # start time reset, as Kubernetes does: activeDeadlineSeconds counts anew
        start_time=None,
        suspension=None,
        suspension_history=(*record.suspension_history, ended)[-SUSPENSION_HISTORY:],
        phase=Phase.PENDING,
        reason=Reason.RESUMED,
        message=f"resumed after {now - hold.at:.0f} s {_held_words(hold, short=True)}",
    )


def _held_words(hold: Suspension, *, short: bool = False) -> str:
    if hold.reason is Reason.SUSPENDED:
        return "suspended (spec.suspend)" + ("" if short else f" at {rfc3339(hold.at)}")
    by = f" by {hold.by}" if hold.by else ""
    if short:
        return f"preempted{by}"
    return f"preempted{by} at {rfc3339(hold.at)}" + (f" ({hold.message})" if hold.message else "")


def suspended_words(file: str | None) -> str:
    """Why a job suspended by its file is (a suspension's ``message``): the field, and the file
    that sets it when there is one."""
    return f"spec.suspend is true in {file}" if file else "spec.suspend is true"


def _suspend_by_spec(
    record: JobRecord, tasks: Sequence[ObservedTask], now: float
) -> tuple[JobRecord, tuple[str, ...]]:
    """``spec.suspend`` true suspends the job (a preempted one too: it now waits for the
    file, not for room); false resumes a job it suspended. A preemption stays as it is."""
    hold = record.suspension
    wanted = record.spec.suspend
    if wanted and (hold is None or hold.reason is Reason.PREEMPTED):
        alive = sum(1 for t in tasks if t.state.alive)
        grace = record.spec.grace_period_s
        stopping = f": stopping {alive} task(s) with a {grace:g} s grace" if alive else ""
        words = suspended_words(record.source.file if record.source is not None else None)
        return suspend(record, Reason.SUSPENDED, now, message=words, tasks=alive), (
            f"{record.name}: suspended (spec.suspend){stopping}",
        )
    if not wanted and hold is not None and hold.reason is Reason.SUSPENDED:
        return resumed(record, now), (f"{record.name}: resumed (spec.suspend is false)",)
    return record, ()


def _suspended(record: JobRecord, tasks: Sequence[ObservedTask]) -> Step:
    """A suspended or preempted job: stop whatever of it runs (the grace period is the
    caller's), forget what ended (its logs stay); once nothing runs, a preempted job asks to
    be placed again (the controller resumes it when it is), a suspended one waits for its file."""
    hold = record.suspension
    assert hold is not None
    alive = [t for t in tasks if t.state.alive]
    ended = tuple(t.task_id for t in tasks if t.state.ended)
    what = _held_words(hold)
    first = _coordinator_first(record, alive)
    if first:  # the rest wait: the chief's save on SIGTERM reads the variables the ps hold
        to_stop = tuple(t.task_id for t in first if t.state is not TaskState.STOPPING)
        rest = len(alive) - len(first)
        message = f"{what}: stopping the chief first (it saves while the ps serve), then {rest} task(s)"
        return Step(_update(record, Phase.SUSPENDED, hold.reason, message), stop=to_stop, forget=ended)
    to_stop = tuple(t.task_id for t in alive if t.state is not TaskState.STOPPING)
    if alive:
        stopping = _update(record, Phase.SUSPENDED, hold.reason, f"{what}: stopping {len(alive)} task(s)")
        return Step(stopping, stop=to_stop, forget=ended)
    if hold.reason is Reason.PREEMPTED:
        waiting = _update(record, Phase.SUSPENDED, hold.reason, f"{what}; it runs again when there is room")
        return Step(waiting, launch=record.spec.task_keys(), forget=ended)
    waiting = _update(record, Phase.SUSPENDED, hold.reason, f"{what}; {RESUME_HINT}")
    return Step(waiting, forget=ended)


def _coordinator_first(record: JobRecord, alive: Sequence[ObservedTask]) -> list[ObservedTask]:
    """The alive chief of a job with ps roles (ParameterServerStrategy's coordinator), while
    other tasks of the job are alive beside it: stopped before them. Its save on SIGTERM
    reads the variables the ps hold (each ps writes its own), and a ps dies at once on SIGTERM
    (TensorFlow's servers install no handler), so the ps and the workers get their SIGTERM
    once the chief has exited, or been killed at the end of its grace. Empty: stop them all."""
    if record.spec.count(Role.PS) == 0:
        return []
    chiefs = [t for t in alive if t.key.role is Role.CHIEF]
    return chiefs if chiefs and len(chiefs) < len(alive) else []


def _ending(record: JobRecord, tasks: Sequence[ObservedTask], now: float) -> Step:
    """A job being deleted, or done: stop whatever of it still runs."""
    alive = [t for t in tasks if t.state.alive]
    to_stop = tuple(t.task_id for t in alive if t.state is not TaskState.STOPPING)

    if record.deleting:
        if not alive:
            return Step(
                record,
                forget=tuple(t.task_id for t in tasks),
                remove=True,
                events=(f"{record.name}: deleted",),
            )
        return Step(
            record.evolve(phase=Phase.DELETING, reason=Reason.DELETING, message="stopping its tasks"),
            stop=to_stop,
        )
    # Completed or failed: only make sure nothing of it still runs, and clean up after it.
    if record.final_evaluation_since is not None:
        return _final_evaluation(record, alive, tasks, now)
    return _after_finish(record, tasks, now, to_stop)


@dataclass(frozen=True, slots=True)
class _Look:
    """What one look at the TF cluster's tasks sees, worked out once for the rules below.
    ``current``: the tasks running what their slot should (by config hash); ``stale``: alive
    tasks that do not; ``missing``: desired slots with no current task alive or succeeded;
    ``alone``: the task restarts of this attempt waiting for their task (``restartScope:
    Task``)."""

    record: JobRecord
    now: float
    backoff: Backoff
    address_wait_s: float | None
    board_running: bool
    alive: list[ObservedTask]
    to_stop: tuple[str, ...]  # every alive task not already stopping
    current: dict[str, ObservedTask]
    current_alive: list[ObservedTask]
    current_ended: list[ObservedTask]
    stale: list[ObservedTask]
    stop_stale: tuple[str, ...]  # the stale tasks not already stopping
    done: Reason | None  # why the job has completed, if it has
    missing: tuple[TaskKey, ...]
    alone: dict[str, TaskRestarts]

    @property
    def spec(self) -> JobSpec:
        return self.record.spec

    @property
    def events(self) -> tuple[str, ...]:
        if not self.stop_stale:
            return ()
        return (f"{self.record.name}: stopping {len(self.stop_stale)} task(s) whose configuration changed",)


def _look(
    record: JobRecord,
    tasks: Sequence[ObservedTask],
    now: float,
    backoff: Backoff,
    configs: Mapping[TaskKey, TaskConfig],
    address_wait_s: float | None,
    board_running: bool,
) -> _Look:
    alive = [t for t in tasks if t.state.alive]
    desired = {k: c for k, c in configs.items() if k.role.in_cluster}
    current, current_alive, stale = _current_and_stale(tasks, alive, desired)
    if record.task_restarts:
        record = _restarted(record, {t.key.name for t in current_alive})
    current_ended = [t for t in current.values() if t.state.ended]
    succeeded = {t.key for t in current_ended if t.state is TaskState.SUCCEEDED}
    covered = {t.key for t in current_alive} | succeeded
    return _Look(
        record=record,
        now=now,
        backoff=backoff,
        address_wait_s=address_wait_s,
        board_running=board_running,
        alive=alive,
        to_stop=tuple(t.task_id for t in alive if t.state is not TaskState.STOPPING),
        current=current,
        current_alive=current_alive,
        current_ended=current_ended,
        stale=stale,
        stop_stale=tuple(t.task_id for t in stale if t.state is not TaskState.STOPPING),
        done=_completed(record.spec, succeeded),
        missing=tuple(key for key in desired if key not in covered),
        alone=_restarting_alone(record),
    )


def _current_and_stale(
    tasks: Sequence[ObservedTask], alive: Sequence[ObservedTask], desired: Mapping[TaskKey, TaskConfig]
) -> tuple[dict[str, ObservedTask], list[ObservedTask], list[ObservedTask]]:
    """The current tasks (by id: those running what their slot should), those of them alive,
    and the stale ones (alive, running something else)."""
    current = {
        t.task_id: t for t in tasks if t.key in desired and t.config_hash == desired[t.key].config_hash
    }
    current_alive = [t for t in alive if t.task_id in current]
    stale = [t for t in alive if t.task_id not in current]
    return current, current_alive, stale


def _cluster_step(
    record: JobRecord,
    tasks: Sequence[ObservedTask],
    now: float,
    backoff: Backoff,
    configs: Mapping[TaskKey, TaskConfig],
    address_wait_s: float | None,
    *,
    board_running: bool = False,
) -> Step:
    """The TF cluster's tasks (``tasks`` holds no TensorBoard task; ``board_running``: the
    job's TensorBoard task runs, counted in the message): the first of ``_CLUSTER_RULES``
    that decides, else launch what is missing."""
    look = _look(record, tasks, now, backoff, configs, address_wait_s, board_running)
    for rule in _CLUSTER_RULES:
        decided = rule(look)
        if decided is not None:
            return decided
    return _launch_missing(look)


# The rules of the cluster's step, in order: each decides (a Step) or passes (None).


def _evaluation_goes_on(look: _Look) -> Step | None:
    """A record of an earlier release, Running (reason FinalEvaluation) while the evaluator
    finished its final evaluation: it has Succeeded, when training did; the grace goes on."""
    since = look.record.final_evaluation_since
    if look.done is None or since is None:
        return None
    succeeded = look.record.evolve(
        phase=Phase.SUCCEEDED, reason=look.done, completion_time=since, next_launch_at=None
    )
    return _final_evaluation(succeeded, look.alive, [*look.current.values(), *look.stale], look.now)


def _past_deadline(look: _Look) -> Step | None:
    """``activeDeadlineSeconds`` past the first start: the job has Failed."""
    deadline, started = look.spec.active_deadline_s, look.record.start_time
    if deadline is None or started is None or look.now < started + deadline:
        return None
    message = f"still running {deadline} s after it started (activeDeadlineSeconds)"
    return _finish(look.record, Phase.FAILED, Reason.DEADLINE_EXCEEDED, message, look.now, look.to_stop)


def _completed_now(look: _Look) -> Step | None:
    """Completed: Succeeded now. A running evaluator may first finish its final evaluation
    (``evaluatorGraceSeconds``): stopping it waits, every other task is stopped at once."""
    done, record, spec = look.done, look.record, look.spec
    if done is None:
        return None
    evaluating = [
        t for t in look.current_alive if t.key.role is Role.EVALUATOR and t.state is not TaskState.STOPPING
    ]
    if not evaluating or spec.evaluator_grace_s <= 0:
        return _finish(record, Phase.SUCCEEDED, done, _SUCCESS[done], look.now, look.to_stop)
    message = (
        f"{_SUCCESS[done]}; the evaluator finishes its final evaluation "
        f"(up to {spec.evaluator_grace_s:g} s, evaluatorGraceSeconds), then it is stopped"
    )
    evaluating_since = record.evolve(final_evaluation_since=look.now)
    finished = _finish(evaluating_since, Phase.SUCCEEDED, done, message, look.now, ())
    grace = _final_evaluation(finished.record, look.alive, [], look.now)
    return replace(grace, events=finished.events)


def _a_task_failed(look: _Look) -> Step | None:
    """A current task failed (by its role's policy) or is lost: restart (the job or the task
    alone) or fail. A lost task may still run (a partitioned agent): the job is degraded and
    restarts, but its replacement waits until the backend says it is gone (it stays "alive"
    until then). So is an unhealthy one (``healthCheck``): it is stopped, and restarted as a
    failure."""
    spec = look.spec
    lost = [t for t in look.current_alive if t.state is TaskState.LOST or _hung(t)]
    ended = [t for t in look.current_ended if _is_failure(t, spec)]
    failures = sorted([*ended, *lost], key=lambda t: t.key)
    if not failures:
        return None
    own, taken = split(failures)
    if own:
        awaited = _exit_code_awaited(look.record, spec, failures, look.now)
        if awaited is not None:
            return awaited
        return _on_failure(look.record, spec, failures, look.now, look.backoff, look.to_stop)
    return _on_platform_event(look.record, spec, taken, look.now, look.to_stop)


def _address_not_back(look: _Look) -> Step | None:
    """A task restarting alone has waited too long for its address: restart the whole job."""
    if not any(k.name in look.alone for k in look.missing):
        return None
    late = _address_timed_out(look.record, look.alone, look.missing, look.now, look.address_wait_s)
    if late is None:
        return None
    return _fall_back(look.record, late, look.now, look.address_wait_s or 0.0, look.to_stop)


def _nothing_missing(look: _Look) -> Step | None:
    """Every slot has its task: Running once all of them run, else still starting."""
    if look.missing:
        return None
    starting = [t for t in look.current_alive if t.state is not TaskState.RUNNING]
    if not starting:
        count = len(look.current_alive) + look.board_running
        record = _update(look.record, Phase.RUNNING, Reason.ALL_TASKS_RUNNING, f"{count} task(s) running")
        return Step(record, stop=look.stop_stale, events=look.events)
    alone = [t.key for t in starting if _restarted_alone_now(look.record, t.key.name)]
    if alone:
        message = f"{_alone_words(look.record, alone[0])}: starting"
        record = _update(look.record, Phase.RESTARTING, Reason.TASKS_STARTING, message)
    else:
        record = _update(look.record, look.record.phase, Reason.TASKS_STARTING, "tasks are starting")
    return Step(record, stop=look.stop_stale, events=look.events)


def _old_copy_stopping(look: _Look) -> Step | None:
    """Only tasks restarting alone are stale: each waits for its old copy to stop."""
    if not look.stale or not look.alone or any(t.key.name not in look.alone for t in look.stale):
        return None
    names = ", ".join(sorted({t.key.name for t in look.stale}))
    message = f"{names}: waiting for its old copy to stop"
    waiting = _update(look.record, Phase.RESTARTING, Reason.TASK_RESTARTING, message)
    return Step(waiting, stop=look.stop_stale, events=look.events)


def _stale_stopping(look: _Look) -> Step | None:
    """Stale tasks still run: the new gang waits for them (it reuses their ports)."""
    if not look.stale:
        return None
    waiting = look.record.evolve(
        phase=_waiting_phase(look.record),
        reason=_still(look.record, Reason.WAITING_FOR_TASKS_TO_STOP),
        message=f"waiting for {len(look.stale)} task(s) to stop before starting {len(look.missing)}",
    )
    return Step(waiting, stop=look.stop_stale, events=look.events)


def _backing_off(look: _Look) -> Step | None:
    """A restart of the job waits for its backoff to run out."""
    record, now = look.record, look.now
    if record.next_launch_at is None or now >= record.next_launch_at:
        return None
    left = record.next_launch_at - now
    waiting = record.evolve(
        phase=Phase.RESTARTING,
        reason=_still(record, Reason.BACKING_OFF),
        message=_restart_words(record.restart_cause, record.restarts, look.spec.backoff_limit, left),
    )
    return Step(waiting, wake_at=record.next_launch_at)


def _restart_words(cause: str, restarts: int, limit: int, left: float) -> str:
    """A whole-job restart's message while it backs off: which task failed and how (``cause``,
    the record's ``restart_cause``; empty in a record of an earlier release), which restart
    it is and in how long it comes ("worker-0 exited 5; restart 1 of 3 in 26 s")."""
    when = f"restart {restarts} of {limit} in {math.ceil(left - 1e-9):.0f} s"
    return f"{cause}; {when}" if cause else when


def _launch_missing(look: _Look) -> Step:
    """Launch what is missing: as one gang, or, with tasks restarting alone, each once its
    own backoff is over."""
    if look.alone:
        return _launch_alone(look.record, look.alone, look.missing, look.now, look.events)
    launching = look.record.evolve(reason=Reason.LAUNCHING, message=f"launching {len(look.missing)} task(s)")
    return Step(launching, launch=look.missing, events=look.events)


_CLUSTER_RULES: tuple[Callable[[_Look], Step | None], ...] = (
    _evaluation_goes_on,
    _past_deadline,
    _completed_now,
    _a_task_failed,
    _address_not_back,
    _nothing_missing,
    _old_copy_stopping,
    _stale_stopping,
    _backing_off,
)


# ---- restarts of a task alone (restartScope: Task) ------------------------------------------


def _restarting_alone(record: JobRecord) -> dict[str, TaskRestarts]:
    """The task restarts of this attempt that wait for their task to be launched and alive."""
    return {
        name: entry
        for name, entry in record.task_restarts.items()
        if entry.pending and entry.attempt == record.attempt
    }


def _restarted_alone_now(record: JobRecord, name: str) -> bool:
    """Whether the task ``name`` was restarted alone in this attempt (its current copy is
    that restart's, whether or not it runs yet)."""
    entry = record.task_restarts.get(name)
    return entry is not None and entry.attempt == record.attempt


def _alone_count(record: JobRecord, key: TaskKey) -> str:
    """``1 of backoffLimit 2``: a task's restarts alone (those for the platform's events
    apart: they count against no limit of the job's)."""
    entry = record.task_restarts[key.name]
    platform = f", +{entry.platform} for platform events" if entry.platform else ""
    return f"{entry.count} of backoffLimit {record.spec.backoff_limit}{platform}"


def _alone_words(record: JobRecord, key: TaskKey) -> str:
    """``worker-1 restarting alone (1 of backoffLimit 2)``: the task and its restart count."""
    return f"{key.name} restarting alone ({_alone_count(record, key)})"


def _restarted(record: JobRecord, alive: set[str]) -> JobRecord:
    """A pending restart is over once a task of its new configuration is alive."""
    done = {
        name: replace(entry, next_launch_at=None, waiting_since=None)
        for name, entry in record.task_restarts.items()
        if entry.pending and entry.attempt == record.attempt and name in alive
    }
    return record.evolve(task_restarts={**record.task_restarts, **done}) if done else record


def _address_timed_out(
    record: JobRecord,
    alone: Mapping[str, TaskRestarts],
    missing: Sequence[TaskKey],
    now: float,
    address_wait_s: float | None,
) -> TaskKey | None:
    """A training task restarting alone whose launch has waited for its address too long."""
    if address_wait_s is None:
        return None
    for key in missing:
        entry = alone.get(key.name)
        if (
            entry is not None
            and entry.waiting_since is not None
            and pinned(record, key)
            and now >= entry.waiting_since + address_wait_s
        ):
            return key
    return None


def _fall_back(
    record: JobRecord, key: TaskKey, now: float, address_wait_s: float, to_stop: tuple[str, ...]
) -> Step:
    """The task restarting alone did not get its address back in time: restart the whole
    job (not counted again against ``backoffLimit``: its failure was, for the task), where
    its tasks may move."""
    entry = record.task_restarts[key.name]
    address = record.addresses.get(key.name, "?")
    message = (
        f"{key.name} could not get its address {address} back within {address_wait_s:g} s: "
        "restarting the whole job instead, where its tasks may move"
    )
    fell_back = replace(entry, next_launch_at=None, waiting_since=None, fallbacks=entry.fallbacks + 1)
    restarted = record.evolve(
        phase=Phase.RESTARTING,
        reason=Reason.TASK_RESTART_TIMED_OUT,
        message=message,
        attempt=record.attempt + 1,
        next_launch_at=now,
        task_restarts={**record.task_restarts, key.name: fell_back},
    )
    return Step(restarted, stop=to_stop, events=(f"{record.name}: {message}",))


def _launch_alone(
    record: JobRecord,
    alone: Mapping[str, TaskRestarts],
    missing: tuple[TaskKey, ...],
    now: float,
    events: tuple[str, ...],
) -> Step:
    """Launch what is missing, but a task restarting alone only once its own backoff is
    over; the job keeps its phase (the other tasks keep running)."""
    held = [k for k in missing if k.name in alone and (alone[k.name].next_launch_at or 0.0) > now]
    ready = tuple(k for k in missing if k not in held)
    wake = min(((alone[k.name].next_launch_at or now) for k in held), default=None)
    if not ready:
        first = min(held, key=lambda k: alone[k.name].next_launch_at or now)
        entry = alone[first.name]
        ended = f"{entry.message}; " if entry.message else ""
        message = (
            f"{ended}{_alone_words(record, first)}: backing off {(entry.next_launch_at or now) - now:.1f} s"
        )
        return Step(
            _update(record, Phase.RESTARTING, Reason.TASK_RESTARTING, message), wake_at=wake, events=events
        )
    asked = {
        k.name: replace(alone[k.name], waiting_since=now)
        for k in ready
        if k.name in alone and alone[k.name].waiting_since is None
    }
    restarting = [k for k in ready if k.name in alone]
    phase = Phase.RESTARTING if restarting or held else record.phase
    if restarting:
        at = ", ".join(f"{k.name} at {record.addresses.get(k.name, 'a new address')}" for k in restarting)
        message = f"relaunching {at} alone ({_alone_count(record, restarting[0])})"
        reason = Reason.TASK_RESTARTING
    else:
        message, reason = f"launching {len(ready)} task(s)", Reason.LAUNCHING
    launching = record.evolve(
        phase=phase, reason=reason, message=message, task_restarts={**record.task_restarts, **asked}
    )
    return Step(launching, launch=ready, events=events, wake_at=wake)


def _with_tensorboard(
    result: Step, boards: Sequence[ObservedTask], now: float, desired: Mapping[TaskKey, TaskConfig]
) -> Step:
    """The TensorBoard task beside what the cluster's step decided: stopped with the job,
    replaced when its own config changed, relaunched alone (at most once per
    ``TENSORBOARD_RELAUNCH_S``) when it ended; never a reason to restart the job."""
    record = result.record
    alive = [t for t in boards if t.state.alive]
    stoppable = {t.task_id for t in alive if t.state is not TaskState.STOPPING}
    board = record.spec.tensorboard
    if record.phase.terminal or board is None:
        return replace(result, stop=(*result.stop, *sorted(stoppable)))
    config = desired[TENSORBOARD_KEY]  # the same for every attempt: the input record's will do
    current = [t for t in alive if t.config_hash == config.config_hash]
    stale = sorted(t.task_id for t in alive if t.config_hash != config.config_hash and t.task_id in stoppable)
    ended = [t for t in boards if t.state.ended]
    step = replace(result, stop=(*result.stop, *stale))
    if current:  # ended copies have been accounted for
        return replace(step, forget=(*step.forget, *(t.task_id for t in ended)))
    if alive:  # its replacement reuses its port: wait for it to stop
        return step
    last_end = max((t.finished_at or 0.0 for t in ended), default=None)
    if last_end is not None and now < last_end + TENSORBOARD_RELAUNCH_S:
        at = last_end + TENSORBOARD_RELAUNCH_S
        return replace(step, wake_at=at if step.wake_at is None else min(step.wake_at, at))
    events = step.events
    if ended:
        last = max(ended, key=lambda t: t.finished_at or 0.0)
        events = (*events, f"{record.name}: {_describe_end(last)}; relaunching it")
    return replace(step, launch=(*step.launch, TENSORBOARD_KEY), events=events)


def _update(record: JobRecord, phase: Phase, why: Reason, message: str) -> JobRecord:
    """The record with this phase, reason and message; itself when nothing changes (the
    steady state of a running job, every pass)."""
    if (record.phase, record.reason, record.message) == (phase, why, message):
        return record
    return record.evolve(phase=phase, reason=why, message=message)


def _waiting_phase(record: JobRecord) -> Phase:
    return Phase.RESTARTING if record.phase in (Phase.RUNNING, Phase.RESTARTING) else Phase.PENDING


def _finish(
    record: JobRecord, phase: Phase, why: Reason, message: str, now: float, to_stop: tuple[str, ...]
) -> Step:
    finished = record.evolve(
        phase=phase, reason=why, message=message, completion_time=now, next_launch_at=None
    )
    return Step(finished, stop=to_stop, events=(f"{record.name}: {phase.value}: {message}",))


def _final_evaluation(
    record: JobRecord, alive: Sequence[ObservedTask], tasks: Sequence[ObservedTask], now: float
) -> Step:
    """A Succeeded job whose evaluator finishes its final evaluation: every other task is
    stopped; the evaluator is stopped once ``evaluatorGraceSeconds`` after the completion ran
    out, unless it ended before. Then the message says how it ended (the phase, reason and
    completion time stay), and the job ends as any other."""
    assert record.final_evaluation_since is not None
    until = record.final_evaluation_since + record.spec.evaluator_grace_s
    evaluators = [t for t in alive if t.key.role is Role.EVALUATOR and t.attempt == record.attempt]
    if evaluators and now < until:
        others = tuple(t.task_id for t in alive if t not in evaluators and t.state is not TaskState.STOPPING)
        return Step(record, stop=others, wake_at=until)
    trained = _SUCCESS.get(record.reason, "training succeeded")
    if evaluators:
        what = f"{trained}; the evaluator was stopped after evaluatorGraceSeconds"
    else:
        ended = [
            t for t in tasks if t.key.role is Role.EVALUATOR and t.state.ended and t.attempt == record.attempt
        ]
        last = max(ended, key=lambda t: t.finished_at or 0.0, default=None)
        what = f"{trained}; " + (_describe_end(last) if last is not None else "the evaluator ended")
    ended_record = record.evolve(final_evaluation_since=None, message=what)
    to_stop = tuple(t.task_id for t in alive if t.state is not TaskState.STOPPING)
    after = _after_finish(ended_record, tasks, now, to_stop)
    return replace(after, events=(f"{record.name}: {what}", *after.events))


def _after_finish(
    record: JobRecord, tasks: Sequence[ObservedTask], now: float, to_stop: tuple[str, ...]
) -> Step:
    """``ttlSecondsAfterFinished``: once it ran out and nothing of the job runs, its ended
    tasks and their logs are purged, once (the record and status stay)."""
    ttl = record.spec.ttl_after_finished_s
    if ttl is None or record.cleaned_at is not None or record.completion_time is None or to_stop:
        return Step(record, stop=to_stop)
    due = record.completion_time + ttl
    if now < due or any(t.state.alive for t in tasks):
        return Step(record, wake_at=due if now < due else None)
    cleaned = record.evolve(cleaned_at=now, tasks=())
    event = (
        f"{record.name}: cleaned up its tasks and logs ({ttl} s after it finished, ttlSecondsAfterFinished)"
    )
    return Step(cleaned, purge=True, events=(event,))  # the backend's purge forgets them too


def _exit_code_due(task: ObservedTask, spec: JobSpec) -> float | None:
    """When the exit code restartPolicy ExitCode decides this failed task by is due, if it is
    still to come (``ObservedTask.exit_code_due``); None under any other policy."""
    if task.exit_code is not None or task.exit_code_due is None:
        return None
    return task.exit_code_due if spec.restart_policy_for(task.key.role) is RestartPolicy.EXIT_CODE else None


def _exit_code_awaited(
    record: JobRecord, spec: JobSpec, failures: Sequence[ObservedTask], now: float
) -> Step | None:
    """A failed task restartPolicy ExitCode decides by the exit code of, whose code the
    backend still expects: nothing is decided (stopped, restarted, failed) until it comes or
    its time passes, unless another failure fails the job already."""
    waiting = {t.key.name: d for t in failures if (d := _exit_code_due(t, spec)) is not None and now < d}
    if not waiting or any(_permanent(t, spec.restart_policy_for(t.key.role)) for t in failures):
        return None
    names = ", ".join(waiting)
    message = (
        f"{names} ended; waiting for its exit code (the cluster's answer named none), which "
        "restartPolicy ExitCode decides by"
    )
    held = record if record.message == message else record.evolve(message=message)
    return Step(held, wake_at=min(waiting.values()))


def _unknown_code(task: ObservedTask, spec: JobSpec) -> str:
    """What a failed task's description adds when ExitCode had to decide without its code."""
    if _exit_code_due(task, spec) is None:
        return ""
    return " (its exit code did not come in time: taken as retryable, restartPolicy ExitCode)"


def _on_failure(
    record: JobRecord,
    spec: JobSpec,
    failures: Sequence[ObservedTask],
    now: float,
    backoff: Backoff,
    to_stop: tuple[str, ...],
) -> Step:
    what = "; ".join(_describe_end(t) + _unknown_code(t, spec) for t in failures)
    permanent = [t for t in failures if _permanent(t, spec.restart_policy_for(t.key.role))]
    if permanent:
        policy = spec.restart_policy_for(permanent[0].key.role)
        why = Reason.TASK_FAILED if policy is RestartPolicy.NEVER else Reason.PERMANENT_EXIT_CODE
        return _finish(record, Phase.FAILED, why, f"{what} (restartPolicy {policy.value})", now, to_stop)
    whole = [t for t in failures if spec.restart_scope_for(t.key.role)[0] is RestartScope.JOB]
    if not whole:
        return _restart_alone(record, spec, failures, what, now, backoff, to_stop)
    if record.restarts >= spec.backoff_limit:
        message = f"{what}; {record.restarts} restart(s) used of backoffLimit {spec.backoff_limit}"
        return _finish(record, Phase.FAILED, Reason.BACKOFF_LIMIT_EXCEEDED, message, now, to_stop)
    restarts = record.restarts + 1
    delay = backoff.delay(restarts)
    restarted = new_run(
        record,
        phase=Phase.RESTARTING,
        reason=_restart_reason(failures, Reason.RESTARTING),
        message=_restart_words(what, restarts, spec.backoff_limit, delay),
        restarts=restarts,
        next_launch_at=now + delay,
        restart_cause=what,
    )
    return Step(
        restarted,
        stop=to_stop,
        events=(
            f"{record.name}: {what}; restarting the whole job "
            f"({restarts}/{spec.backoff_limit}, {_why(spec, whole[0].key.role)})",
        ),
        wake_at=now + delay,
    )


def _why(spec: JobSpec, role: Role) -> str:
    scope, reason = spec.restart_scope_for(role)
    return f"restartScope {scope.value} for {role.value}: {SCOPE_WHY[reason].format(role=role.value)}"


def _restart_alone(
    record: JobRecord,
    spec: JobSpec,
    failures: Sequence[ObservedTask],
    what: str,
    now: float,
    backoff: Backoff,
    to_stop: tuple[str, ...],
) -> Step:
    """Every failed task's role restarts it alone: each is counted against ``backoffLimit``
    for itself and relaunched at its address after its own backoff; the rest keep running.
    A lost one is stopped first (its replacement waits until it is gone)."""
    counts = dict(record.task_restarts)
    for task in failures:
        entry = counts.get(task.key.name)
        used = entry.count if entry is not None else 0
        if used >= spec.backoff_limit:
            message = (
                f"{what}; {task.key.name} was restarted alone {used} time(s), "
                f"backoffLimit {spec.backoff_limit}"
            )
            return _finish(record, Phase.FAILED, Reason.BACKOFF_LIMIT_EXCEEDED, message, now, to_stop)
        count = used + 1
        counts[task.key.name] = TaskRestarts(
            count=count,
            message=_describe_end(task),
            at=now,
            attempt=record.attempt,
            exit_code=task.exit_code,
            next_launch_at=now + backoff.delay(count),
            fallbacks=entry.fallbacks if entry is not None else 0,
        )
    first = failures[0]
    entry = counts[first.key.name]
    delay = (entry.next_launch_at or now) - now
    message = (
        f"{what}: restarting {', '.join(t.key.name for t in failures)} alone in {delay:g} s "
        f"({entry.count} of backoffLimit {spec.backoff_limit} for {first.key.name}; "
        f"{_why(spec, first.key.role)})"
    )
    reason = _restart_reason(failures, Reason.TASK_RESTARTING)
    restarted = record.evolve(phase=Phase.RESTARTING, reason=reason, message=message, task_restarts=counts)
    lost = tuple(t.task_id for t in failures if t.state is TaskState.LOST or _hung(t))
    wake = min((counts[t.key.name].next_launch_at or now) for t in failures)
    events = tuple(
        f"{record.name}: {_describe_end(t)}; "
        f"restarting it alone ({counts[t.key.name].count}/{spec.backoff_limit})"
        for t in failures
    )
    return Step(restarted, stop=lost, events=events, wake_at=wake)


# ---- the platform's own events ----------------------------------------------------------------


def _on_platform_event(
    record: JobRecord, spec: JobSpec, taken: Sequence[ObservedTask], now: float, to_stop: tuple[str, ...]
) -> Step:
    """Every failed task was taken by the platform: restart at once (the job, or each task
    alone by its scope), on the job's platform budget, never against ``backoffLimit``."""
    what = "; ".join(_describe_end(t) for t in taken)
    cause = cause_of(taken[0])
    limit = spec.platform_restart_limit
    used = record.platform_restarts
    event = PlatformEvent(cause, now, tuple(t.key.name for t in taken), what)
    history = (*record.platform_events, event)[-PLATFORM_HISTORY:]
    if used >= limit:
        message = f"{what}; {used} platform restart(s) used of platformRestartLimit {limit}"
        failed = record.evolve(platform_events=history)
        return _finish(failed, Phase.FAILED, Reason.PLATFORM_RESTART_LIMIT_EXCEEDED, message, now, to_stop)
    count = used + 1
    budget = f"platform restart {count} of {limit}, not counted against backoffLimit"
    whole = [t for t in taken if spec.restart_scope_for(t.key.role)[0] is RestartScope.JOB]
    if whole:
        restarted = new_run(
            record,
            phase=Phase.RESTARTING,
            reason=Reason.PLATFORM_RESTART,
            message=f"{what}: restarting the whole job ({budget})",
            next_launch_at=now,
            platform_restarts=count,
            platform_events=history,
        )
        said = f"{record.name}: {what}; restarting the whole job ({budget}; {_why(spec, whole[0].key.role)})"
        return Step(restarted, stop=to_stop, events=(said,), wake_at=now)
    counts = dict(record.task_restarts)
    for task in taken:
        entry = counts.get(task.key.name)
        counts[task.key.name] = TaskRestarts(
            count=entry.count if entry is not None else 0,
            message=_describe_end(task),
            at=now,
            attempt=record.attempt,
            exit_code=task.exit_code,
            next_launch_at=now,
            fallbacks=entry.fallbacks if entry is not None else 0,
            platform=(entry.platform if entry is not None else 0) + 1,
        )
    names = ", ".join(t.key.name for t in taken)
    restarted = record.evolve(
        phase=Phase.RESTARTING,
        reason=Reason.PLATFORM_RESTART,
        message=f"{what}: restarting {names} alone ({budget})",
        task_restarts=counts,
        platform_restarts=count,
        platform_events=history,
    )
    lost = tuple(t.task_id for t in taken if t.state.alive and t.state is not TaskState.STOPPING)
    said = f"{record.name}: {what}; restarting {names} alone ({budget})"
    return Step(restarted, stop=lost, events=(said,), wake_at=now)
