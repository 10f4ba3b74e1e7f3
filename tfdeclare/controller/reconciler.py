"""``Controller``: plan application and reconcile passes (see the package docstring).

Write-ahead order, so that a crash at any point leaves a state the next pass adopts: a job's
record is saved with its new addresses and launch number *before* its tasks are launched
(a crash in between relaunches the missing tasks on the same ports next pass, with new ids),
and a restart is saved before its ended tasks are forgotten or the others stopped (a record
that cannot be written, a full disk, leaves the backend as it was: the next pass decides the
same restart again, and it is counted once, its events logged once);
tasks that a backend reports for no record are stopped; records and status files are written
atomically and only when they change.

What a pass writes for a job whose step did nothing to a backend (no launch, stop, forget
or purge: a job waiting for resources, an unchanged one after a restart of the controller) is
written at the end of the pass, all in one batch: the records in one transaction of the
store's database (``shell/store.py``), then the status files with one sync
(``write_atomic_many``): a crash before it leaves the old record, and the next pass decides
the same again. A job's removal
(its status file, then its record) goes in the same way, after its tasks are purged. Then the
status files this controller wrote that are gone from the folder (deleted, a fresh volume
mounted over it) are written again as they were (``StatusWriter.write_missing``: one listing
of the folder a pass), so an unchanged job's file does not stay gone.

``apply`` and ``delete`` from the command line stage the records they change (``stage=True``)
instead of writing them: the pass that follows at once writes each of them once, with what
that pass decides, rather than each twice (a rename over a file written a moment before: most
of an ``apply`` of 10,000 jobs went there). A staged record is written alone, before anything
is done to a backend for its job (a launch, a stop, a purge; a move starting): the write-ahead
order stays. A staged record that cannot be written is not retried: the job is as it was, and
``apply_failures`` names it (``stage_failures`` with the error). A kill before the pass's
batch leaves every staged job as it was before the command.

In the daemon (nothing staged), a change ``apply`` could not write (a full or read-only state
disk) leaves the job running as last applied; until it is written, each pass writes the job's
status from its record with ``lastError`` StateWriteFailed and Synced False saying why
(``_show_unsaved``): the status folder may be on a disk that has room.

A job belongs to the backend that runs it (its record says which): a pass reconciles every
record against its own backend, and a job moving to another one first has its tasks on the old
one stopped, so two copies never run. One job's failure to write its record or status is
reported and retried; it never stops the other jobs.

A pass's errors are ``RuntimeProblem``s with a code (``core.errors``; printed as the messages
they were). A backend's error for one job is kept in its record (``last_error``, the status
file's ``lastError``, with the time it was first met) until a pass gets through the job; a
terminal error of the job's own (a secret that is not there, a task without an image)
fails the job at once (reason TerminalError), never retried.
A backend that cannot be observed at all (its cluster unreachable, the framework refused) does
not stop the pass: each of its jobs meets the error (its ``lastError``), the others go on, and
``PassResult.unobserved`` says which backend (commands stop waiting on it). A placement that
fails with a backend error leaves the job as its step decided (a restart counted), with the
error: nothing was launched.
What depends on the machine at the moment (the Docker engine answers, an image under
imagePullPolicy Never is there) is the backend's placement's to say: the job waits with it as
its ``lastError``, looked at every pass.

Jobs are looked at in priority order (``spec.priority``, higher first, then by name), so a
higher-priority job is placed first. One that cannot be placed, where its backend says what it
lacks (``Unplaced.short``; and, where each task must fit on one agent, the room on each agent
it may use, ``Unplaced.rooms``), preempts running jobs of lower priority on that backend
(``core.run.preemption`` chooses them, by where their tasks run when there are rooms;
``lifecycle.suspend`` marks them Suspended/Preempted and
their own step, later in the same pass, stops their tasks with their grace period). A
preempted job asks to be placed again whenever nothing of it runs, but not while a job of
higher priority on its backend waits for room in that pass, so it never takes back what it
was preempted for.
"""

from __future__ import annotations

import functools
import json
import logging
import os
import secrets
import time
from collections import defaultdict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tfdeclare.backends.base import Backend, BackendError, LogChunk, log_streams, read_log_part
from tfdeclare.controller.launchpaths import LaunchPaths, LaunchRefused
from tfdeclare.controller.progresswatch import ProgressWatch
from tfdeclare.core.enums import Phase, Reason, TaskState
from tfdeclare.core.errors import ErrorCode, RuntimeProblem
from tfdeclare.core.plan.observed import ObservedJob
from tfdeclare.core.plan.planner import Action, Plan, PlanReason
from tfdeclare.core.run import lifecycle, preemption, progress, status
from tfdeclare.core.run.clusterspec import TaskConfig
from tfdeclare.core.run.launches import gang_request, launches, placed
from tfdeclare.core.run.lifecycle import Backoff
from tfdeclare.core.run.record import JobRecord, Revision, TaskRecord
from tfdeclare.core.run.tasks import ObservedTask, Placement, TaskKey, Unplaced, UnplacedReason
from tfdeclare.core.spec.keys import ORDER
from tfdeclare.core.spec.loader import SourceRef
from tfdeclare.core.spec.model import fingerprint
from tfdeclare.core.spec.policy import SpecSources
from tfdeclare.core.spec.resources import ZERO, Resources
from tfdeclare.files import JobWriteError, failed_write
from tfdeclare.shell.statuswriter import StatusWriter
from tfdeclare.shell.store import StateStore

log = logging.getLogger("tfdeclare.controller")


class _SeenTasks:
    """The tasks of each backend a pass looks at, observed once per pass, by job; what no record
    takes is left over (tasks of no job there)."""

    def __init__(
        self,
        backend: Callable[[str], Backend],
        errors: list[RuntimeProblem],
        told: dict[str, str] | None = None,
    ) -> None:
        self._backend = backend
        self._told = told if told is not None else {}  # backend -> its upkeep error as last logged
        self._by_backend: dict[str, dict[str, list[ObservedTask]]] = {}
        self._all: dict[str, dict[str, list[ObservedTask]]] = {}  # as observed, nothing taken
        self.failed: dict[str, BackendError] = {}  # backend -> why it could not be observed
        self._errors = errors  # the pass's: what a backend's upkeep could not do

    def of(self, backend_name: str) -> dict[str, list[ObservedTask]]:
        if backend_name in self.failed:  # asked once per pass, not once per job
            raise self.failed[backend_name]
        if backend_name not in self._by_backend:
            by_job: dict[str, list[ObservedTask]] = defaultdict(list)
            backend = self._backend(backend_name)
            try:  # its upkeep first (observe only reports); what fails there is reported
                backend.tend()
                if self._told.pop(backend_name, None) is not None:
                    log.info("%s: the backend's upkeep works again", backend_name)
            except BackendError as err:
                self._errors.append(err.problem(prefix=f"{backend_name}: "))
                if self._told.get(backend_name) != str(err):  # once per change, not every pass
                    self._told[backend_name] = str(err)
                    log.warning("%s: backend error: %s", backend_name, err)
            try:
                for task in backend.observe():
                    by_job[task.job].append(task)
            except BackendError as err:
                self.failed[backend_name] = err
                raise
            self._by_backend[backend_name] = by_job
            self._all[backend_name] = dict(by_job)
        return self._by_backend[backend_name]

    def all_of(self, backend_name: str) -> Mapping[str, list[ObservedTask]]:
        """Every job's tasks there as observed this pass, those already taken included."""
        self.of(backend_name)
        return self._all[backend_name]

    def take(self, backend_name: str, job: str) -> list[ObservedTask]:
        return self.of(backend_name).pop(job, [])

    def left(self) -> list[tuple[str, dict[str, list[ObservedTask]]]]:
        return sorted(self._by_backend.items())


# A job Unplaced for one of these waits for room that may come (not Unschedulable, not a
# slot's own address): a preempted job of lower priority does not take room before it.
_WAITS_FOR_ROOM = frozenset(
    {UnplacedReason.WAITING_FOR_RESOURCES, UnplacedReason.WAITING_FOR_GPUS, UnplacedReason.WAITING_FOR_OFFERS}
)


def priority(record: JobRecord) -> int:
    """``spec.priority`` from the canonical form (cheap: no typed spec is built)."""
    return int(record.canonical["spec"].get("priority", 0))


@dataclass(slots=True)
class _Pass:
    """What a pass shares between its jobs: every record as it stands now (a preempted
    job's is replaced when it is marked), the tasks observed, and per backend the highest
    priority of a job that waits for room (a preempted job does not take room before it)."""

    seen: _SeenTasks
    records: dict[str, JobRecord]
    waiting: dict[str, int] = field(default_factory=dict)
    # every record as the pass found it (what error each job had then: ``_met``)
    before: Mapping[str, JobRecord] = field(default_factory=dict)
    # the staged jobs whose record is not written yet (module docstring)
    unsaved: set[str] = field(default_factory=set)


@dataclass(slots=True)
class _Later:
    """What a pass writes at its end (module docstring)."""

    records: list[JobRecord] = field(default_factory=list)
    statuses: list[dict[str, Any]] = field(default_factory=list)
    removed: list[str] = field(default_factory=list)


@dataclass(slots=True)
class PassResult:
    """What one reconcile pass saw and did."""

    phases: dict[str, Phase] = field(default_factory=dict)
    launched: int = 0
    stopped: int = 0
    events: list[str] = field(default_factory=list)
    wake_at: float | None = None  # the earliest time a job wants another look
    # what went wrong, each with its code (``core.errors``); str() is the message as printed
    errors: list[RuntimeProblem] = field(default_factory=list)
    # job -> "PATH (why)": the record or status file this pass could not write (a full or
    # read-only disk); the daemon shows them in /healthz and /metrics until a pass writes them
    write_failures: dict[str, str] = field(default_factory=dict)
    # backend -> its error: a backend that could not be observed at all this pass (its
    # cluster unreachable, the framework refused); each of its jobs has it as its lastError
    unobserved: dict[str, RuntimeProblem] = field(default_factory=dict)

    def wake(self, at: float | None) -> None:
        if at is not None and (self.wake_at is None or at < self.wake_at):
            self.wake_at = at


# what a job failed by a terminal error of its own waits for
_AFTER_TERMINAL = "fix it, then apply a changed spec, or delete the job and apply it again"


def _counted(record: JobRecord) -> tuple[object, ...]:
    """What a record counts of its restarts (``backoffLimit`` and the platform's)."""
    return (record.attempt, record.restarts, record.task_restarts, record.platform_restarts)


def _without_error(record: JobRecord) -> JobRecord:
    """The record with no ``last_error`` (a pass got through its job), unless the error failed
    it: then its status says why until it runs again."""
    if record.last_error is None or record.reason is Reason.TERMINAL_ERROR:
        return record
    return record.evolve(last_error=None, last_error_at=None)


def _provenance(
    record: JobRecord,
    source: SourceRef | None,
    source_dirs: Callable[[SourceRef | None], tuple[str | None, str | None]],
    revision: Revision | None,
) -> JobRecord:
    """An unchanged job's record with where its spec now comes from (a new revision, a moved
    file, the folder it was read from) and no error; the same record object when nothing
    differs (the common case)."""
    changes: dict[str, Any] = {}
    if record.not_synced:
        changes["not_synced"] = None
    folder, root = source_dirs(source)
    if source != record.source:
        changes["source"] = source
        changes["source_dir"] = folder
    if revision is not None and revision.commit != record.revision:
        changes["revision"] = revision.commit
        changes["revision_info"] = revision.to_json()
        changes["source_dir"] = folder  # the new revision's snapshot, for later launches
    if root != record.source_root and (root is not None or "source_dir" in changes):
        changes["source_root"] = root  # a record from before it was kept gets it here
    if revision is not None and revision.commit != record.last_attempted_revision:
        changes["last_attempted_revision"] = revision.commit
    return record.evolve(**changes) if changes else record


class Controller:
    def __init__(
        self,
        store: StateStore,
        backend: Backend,
        statuses: StatusWriter,
        *,
        backoff: Backoff | None = None,
        clock: Callable[[], float] = time.time,
        base_dir: Path | None = None,
        other_backends: Callable[[str], Backend] | None = None,
        secrets_dir: str | None = None,
        launch_paths: LaunchPaths | None = None,
        non_preemptible: int | None = None,
        protected_classes: frozenset[str] = frozenset(),
    ) -> None:
        self.store = store
        # What every launch's folders are checked against again, links resolved then
        # (``launchpaths.py``); by default the state and status folders are reserved.
        self.launch_paths = launch_paths or LaunchPaths(
            {str(store.root): "tfdeclare's own folder", str(statuses.root): "tfdeclare's own folder"}
        )
        # Where the specs applied now were read from: the folder a job's relative workingDir
        # must stay inside (recorded with the job; None: each spec file's own folder).
        self.sources: SpecSources | None = None
        # policy.nonPreemptiblePriority: jobs of this priority or higher are never preempted
        self.non_preemptible = non_preemptible
        # policy.priorityClasses marked preemptible: false: their jobs are never preempted
        self.protected_classes = protected_classes
        self.secrets_dir = secrets_dir  # the config's secrets.dir: {name, key} references
        self.backend = backend
        # Builds another backend by name, for the jobs that run there (every record is
        # reconciled against its own backend) and for those moving away from it.
        self._build_other = other_backends
        self._others: dict[str, Backend] = {}
        self.statuses = statuses
        self.backoff = backoff or Backoff()
        self.clock = clock
        self.base_dir = base_dir or Path.cwd()  # spec file paths are relative to this when applied
        self._seen: dict[str, tuple[int, ...]] = {}
        self._seen_tasks: dict[str, list[object]] = {}  # keeps the ids above meaningful
        # Each job's desired configs of the last pass (``Step.desired``), given to the next
        # step: what did not change keeps its identity, worked out once (issue 23: a task's
        # identity hashes its whole cluster, so a pass over a running 10,000-task job hashed
        # about 2 GB when every identity was worked out again).
        self._desired: dict[str, Mapping[TaskKey, TaskConfig]] = {}
        self._apply_failures: dict[str, str] = {}  # of the last ``apply``: job -> "PATH (why)"
        # The changes of the last ``apply`` (not staged) that could not be written (job -> "PATH
        # (why)"), the status documents that say so (``_show_unsaved``), since when, and the
        # jobs whose status said so and must be written from their record again.
        self._unsaved: dict[str, str] = {}
        self._unsaved_shown: dict[str, dict[str, Any]] = {}
        self._unsaved_since: dict[str, float] = {}
        self._restatus: set[str] = set()
        # Records ``apply``/``delete`` staged for the next pass to write (module docstring),
        # and the staged ones that could not be written (job -> the error).
        self._staged: dict[str, JobRecord] = {}
        self.stage_failures: dict[str, OSError] = {}
        self._pass: _Pass | None = None  # during a pass
        # Each job's progress files, read every few seconds while it runs (issue 34)
        self.progress = ProgressWatch(self.launch_paths.reserved, self.launch_paths.allowed_host_paths)
        self._later = _Later()  # what this pass writes at its end
        # The events each job's step logged this pass; those of a job whose writes failed are
        # not logged again by the next pass while it decides the same (``_tell``).
        self._told: dict[str, tuple[str, ...]] = {}
        self._told_unwritten: dict[str, tuple[str, ...]] = {}
        self._told_upkeep: dict[str, str] = {}  # backend -> its upkeep error as last logged

    def _backend(self, name: str) -> Backend:
        if name == self.backend.name:
            return self.backend
        if name not in self._others:
            if self._build_other is None:
                raise BackendError(
                    f"its tasks run on backend {name}, which this controller cannot reach",
                    code=ErrorCode.BACKEND_UNKNOWN,
                )
            self._others[name] = self._build_other(name)
        return self._others[name]

    # ---- what a caller reads (the daemon): the state, the backend's logs, the status files ----

    @property
    def apply_failures(self) -> Mapping[str, str]:
        """The jobs the last ``apply`` could not write: job -> "PATH (why)"."""
        return self._apply_failures

    @property
    def state_root(self) -> Path:
        """The state folder this controller keeps its records in."""
        return self.store.root

    @property
    def backend_name(self) -> str:
        """The name of the backend new jobs run on."""
        return self.backend.name

    def watch(self, notify: Callable[[], None]) -> None:
        """Call ``notify`` (from any thread) whenever a pass may find something new."""
        self.backend.watch(notify)

    def observed(self) -> dict[str, ObservedJob]:
        """Every applied job as the planner sees it."""
        return self.store.observed()

    def read_log(self, task_id: str, offset: int, limit: int, stream: str | None = None) -> LogChunk:
        """A task's output from ``offset``: its one log (``Backend.read_log``), or with
        ``stream`` one of the logs ``log_streams`` names (``base.read_log_part``)."""
        return read_log_part(self.backend, task_id, stream, offset, limit)

    @property
    def log_streams(self) -> tuple[str, ...]:
        """The logs a task has apart (``base.log_streams``): stdout and stderr, or none."""
        return log_streams(self.backend)

    def status_files(self) -> list[dict[str, Any]]:
        """Every readable status file's document, as it is on disk."""
        documents = (self.statuses.read(name) for name in self.statuses.names())
        return [d for d in documents if d is not None]

    def status_documents(self, records: Mapping[str, JobRecord]) -> tuple[dict[str, Any], dict[str, str]]:
        """Each job's status document and its JSON text (name -> each): what the last pass
        wrote, the status file of a job whose record cannot be read (its last word: the pass
        leaves it alone), and, for one of ``records`` whose status file could not be written,
        the document as its record says."""
        written = self.statuses.documents()
        texts = self.statuses.json_documents()
        for name in self.store.unreadable.keys() - written.keys():
            document = self.statuses.read(name)
            if document is not None:
                written[name] = document
                texts[name] = json.dumps(document)
        now = self.clock()
        for name in records.keys() - written.keys():
            written[name] = status.status_document(records[name], now)
            texts[name] = json.dumps(written[name])
        for name, document in self._unsaved_shown.items():  # also where its file could not be written
            if name in records:
                written[name] = document
                texts[name] = json.dumps(document)
        return written, texts

    def close(self) -> None:
        """Let go of the backends this controller built itself (not the one it was given)."""
        for other in self._others.values():
            other.close()
        self._others.clear()

    # ---- applying a plan ------------------------------------------------------------------

    def apply(
        self,
        plan: Plan,
        revision: Revision | None = None,
        unverified: tuple[str, str] | None = None,
        *,
        stage: bool = False,
    ) -> list[str]:
        """Write the plan's decisions into the records. Returns one line per change.
        ``unverified``: (commit, why) of a git head that was not applied (its signature): every
        job says so in its Synced condition. A job whose record cannot be written (a full or
        read-only state disk) keeps its old record and is named in ``apply_failures`` (job ->
        "PATH (why)"); the other jobs are applied. ``stage``: the records are written by the
        next pass (module docstring)."""
        records = self.records()
        folders = self._source_dirs_once()  # one resolve a folder, not two a job
        changes: list[str] = []
        self._apply_failures = {}
        to_save: list[JobRecord] = []
        said: dict[str, str] = {}  # job -> its change line, once its record is written
        for job in plan.jobs:
            if PlanReason.OUTSIDE_SCOPE in job.reasons:
                continue  # another source's job: this plan read none of its files, so it says nothing of it
            if PlanReason.BEING_DELETED in job.reasons:
                continue  # its deletion, applied once, goes on in the passes: nothing to write
            record = records.get(job.name)
            canonical = plan.desired.get(job.name)
            source = plan.sources.get(job.name)
            updated = self._applied(
                job.action, record, job.name, canonical, source, revision, folders, job.spec_hash
            )
            if job.not_synced is not None and record is not None:
                updated = record.evolve(
                    not_synced=job.not_synced,
                    last_attempted_revision=revision.commit if revision else record.last_attempted_revision,
                )
            elif job.action is Action.NOOP and record is not None:
                where = source or job.source or record.source
                updated = _provenance(record, where, folders, revision)
            held = updated or record
            if unverified is not None and held is not None:  # the job runs as applied, and says why
                commit, why = unverified
                updated = held.evolve(
                    not_synced=(Reason.UNVERIFIED_REVISION, why), last_attempted_revision=commit
                )
            if updated is not None and updated is not record and updated != record:
                to_save.append(updated)
                if job.action.changes_something:
                    said[job.name] = f"{job.action.symbol} {job.name}: {job.message}"
        if stage:
            self._staged.update((r.name, r) for r in to_save)
            changes.extend(said.values())
            return changes
        # independent records: one sync for all; one that cannot be written (a full or
        # read-only state disk) keeps its old record, and the other jobs are applied
        failed = self.store.save_many(to_save)
        for name, err in sorted(failed.items()):
            self._apply_failures[name] = failed_write(err)
        self._unsaved = {name: failed_write(err) for name, err in failed.items() if name in said}
        changes.extend(line for name, line in said.items() if name not in failed)
        return changes

    def records(self) -> dict[str, JobRecord]:
        """Every readable job record as the next pass takes it: the store's, with the ones
        ``apply``/``delete`` staged for it (none in the daemon, which stages nothing)."""
        return {**self.store.records(), **self._staged}

    def _save(self, record: JobRecord) -> None:
        """Save one record now (a write-ahead); a staged one is then written."""
        self.store.save(record)
        if self._pass is not None:
            self._pass.unsaved.discard(record.name)
            self._pass.records[record.name] = record  # the newest, should the job's step fail

    def _write_ahead(self, record: JobRecord) -> None:
        """Before anything is done to a backend for this job: its staged record, written."""
        if self._pass is not None and record.name in self._pass.unsaved:
            self._save(record)

    def _source_dirs(self, source: SourceRef | None) -> tuple[str | None, str | None]:
        """The spec file's folder and the folder it was read from (the source-folder rule's
        bound), links resolved; (None, None) for a job with no file."""
        return self._source_dirs_once()(source)

    def _source_dirs_once(self) -> Callable[[SourceRef | None], tuple[str | None, str | None]]:
        """``_source_dirs``, each folder resolved once (for one ``apply``: the files of a
        folder of 10,000 specs share it)."""

        @functools.cache
        def of_folder(parent: str) -> tuple[str, str | None]:
            folder = str((self.base_dir / parent).resolve())
            return folder, self.sources.root_of(folder) if self.sources is not None else folder

        def source_dirs(source: SourceRef | None) -> tuple[str | None, str | None]:
            if source is None:
                return None, None
            return of_folder(os.path.dirname(source.file) or ".")

        return source_dirs

    def _applied(
        self,
        action: Action,
        record: JobRecord | None,
        name: str,
        canonical: Mapping[str, Any] | None,
        source: SourceRef | None,
        revision: Revision | None,
        folders: Callable[[SourceRef | None], tuple[str | None, str | None]] | None = None,
        spec_hash: str | None = None,
    ) -> JobRecord | None:
        """The record ``action`` makes of ``record``; ``spec_hash``: the planner's of
        ``canonical`` (worked out here when not given)."""
        source_dir, source_root = (folders or self._source_dirs)(source)
        provenance: dict[str, Any] = {
            "source": source,
            "source_dir": source_dir,
            "source_root": source_root,
            "revision": revision.commit if revision else None,
            "revision_info": revision.to_json() if revision else None,
            "last_attempted_revision": revision.commit if revision else None,
            "not_synced": None,
        }
        if action is Action.DELETE:
            return record.evolve(deleting=True) if record else None
        if canonical is None or action not in (
            Action.CREATE,
            Action.UPDATE,
            Action.RESIZE,
            Action.RESTART,
            Action.MOVE,
        ):
            return None
        spec_hash = spec_hash or fingerprint(canonical)
        if record is None:
            return JobRecord(
                name=name,
                uid=secrets.token_hex(4),
                canonical=canonical,
                spec_hash=spec_hash,
                backend=self.backend.name,
                reason=Reason.CREATED,
                message="created",
                **provenance,
            )
        changed = record.evolve(canonical=canonical, spec_hash=spec_hash, **provenance)
        if action is Action.CREATE or (action is Action.RESTART and record.phase.terminal):
            # re-created while being deleted, or a finished job whose spec changed: run again
            return lifecycle.new_run(
                changed,
                deleting=False,
                phase=Phase.PENDING,
                reason=Reason.SPEC_CHANGED,
                message="runs again",
                restarts=0,
                next_launch_at=None,
                start_time=None,
                completion_time=None,
                final_evaluation_since=None,
                cleaned_at=None,
                conditions=(),
                tasks=(),
            )
        if action is Action.MOVE:  # never both alive: it starts here once its old tasks are gone
            return lifecycle.new_run(
                changed,
                backend=self.backend.name,
                moving_from=record.moving_from or record.backend,
                addresses={},
                next_launch_at=None,
                phase=Phase.RESTARTING,
                reason=Reason.MOVING_BACKEND,
                message=f"moving from {record.backend} to {self.backend.name}",
            )
        if action is Action.RESTART:
            return lifecycle.new_run(
                changed,
                next_launch_at=None,
                reason=Reason.SPEC_CHANGED,
                message="spec changed: restarting every task",
            )
        if action is Action.RESIZE:  # a new run when its TF cluster changes
            return lifecycle.resized(record, changed, reason=Reason.RESIZED, message="replica counts changed")
        return changed

    def delete(self, names: Sequence[str], *, stage: bool = False) -> list[str]:
        """Mark jobs for deletion; the next passes stop their tasks and drop them. ``stage``:
        the marks are written by the next pass (module docstring): a job with nothing on a
        backend is then removed without its mark ever being written."""
        missing = []
        marked = []
        known = self.records()  # read once (cached), not a file a job
        for name in names:
            record = known.get(name) or self.store.load(name)  # an unreadable one says why
            if record is None:
                missing.append(name)
            elif not record.deleting:
                marked.append(record.evolve(deleting=True))
        if stage:
            self._staged.update((r.name, r) for r in marked)
            return missing
        failed = self.store.save_many(marked)  # one sync for all
        if failed:
            name, err = sorted(failed.items())[0]
            raise JobWriteError(name, err, "it was not marked for deletion")
        return missing

    # ---- one reconcile pass ---------------------------------------------------------------

    def reconcile(self) -> PassResult:
        """One pass over every record, each against the backend that runs its job (a job
        belongs to the backend that runs it: docs/reference.md); then the tasks of no job are
        stopped.

        A backend that cannot look at its tasks (the Mesos master or the Docker engine does
        not answer, the framework was removed) does not end the pass: each job of that
        backend keeps its phase with the error as its ``lastError`` (``_met``) until a pass
        gets through it, ``PassResult.unobserved`` names the backend (a one-shot command
        stops there), and the pass asks to look again within 5 s."""
        result = PassResult()
        now = self.clock()
        self._later = _Later()
        seen = _SeenTasks(self._backend, result.errors, self._told_upkeep)
        try:
            seen.of(self.backend.name)  # its orphans are stopped even when no record names it
        except BackendError:
            result.wake(now + 5.0)  # kept by ``seen``: each job of that backend meets it below
        staged, self._staged = self._staged, {}
        self.stage_failures = {}
        records = {**self.store.records(), **staged}
        self._pass = pass_ = _Pass(seen, records, before=dict(records), unsaved=set(staged))
        self._restatus = self._unsaved_shown.keys() - self._unsaved.keys()  # written again: from the record
        for name in self._restatus:
            self._unsaved_shown.pop(name, None)
            self._unsaved_since.pop(name, None)
            self._seen.pop(name, None)
        for name in sorted(records, key=lambda n: (-priority(records[n]), n)):
            try:
                record = records[name]  # a job preempted earlier in this pass: its new record
                if record.moving_from is not None:
                    self._write_ahead(record)
                    moved = self._move_out(record, seen.take(record.moving_from, name), now, result)
                    if moved is None:
                        continue
                    record = moved
                tasks = seen.take(record.backend, name)
                self._reconcile_job(record, self._backend(record.backend), tasks, now, result)
            except BackendError as err:
                problem = err.problem(name)
                if pass_.records[name].last_error != problem:  # logged once, not every pass
                    log.warning("%s: backend error: %s", name, err)
                self._met(problem, now, result)
            except OSError as err:  # e.g. the state or status disk is full: the other jobs go on
                self._seen.pop(name, None)  # look at it again next pass
                if name in pass_.unsaved:  # a staged record: not applied, not retried
                    self._not_staged(name, err)
                    continue
                result.write_failures[name] = failed_write(err)
                result.errors.append(self._write_problem(name, err))
                result.wake(now + 5.0)
        unsaved = pass_.unsaved
        self._pass = None
        self._unobserved(seen, result)
        for name, why in sorted(self.store.unreadable.items()):
            result.errors.append(
                RuntimeProblem(
                    ErrorCode.RECORD_UNREADABLE,
                    f"its record cannot be read, so it is left alone: {why}",
                    name,
                )
            )
        for backend_name, by_job in seen.left():
            for job, orphans in sorted(by_job.items()):
                if job not in self.store.unreadable:
                    self._stop_orphans(self._backend(backend_name), job, orphans, result)
        self._write_later(result, now, unsaved, records)
        self._show_unsaved(pass_.records, now, result)
        self._told_unwritten = {n: e for n, e in self._told.items() if n in result.write_failures}
        self._told = {}
        try:
            self.statuses.flush()  # the summaries' index: a cache, retried next pass
        except OSError as err:
            result.errors.append(self._write_problem(None, err, ErrorCode.STATUS_WRITE_FAILED))
        return result

    def _unobserved(self, seen: _SeenTasks, result: PassResult) -> None:
        """The backends this pass could not observe at all: in ``result.unobserved``, and
        reported once for the pass when no job of theirs met the error (each job that did has
        it as its lastError, ``_met``); logged once per change, not every pass (a pass may
        come every few seconds while an engine is away). The pass went on with the other
        backends' jobs."""
        reported = {(p.code, p.detail) for p in result.errors}
        for name in sorted(self._told_upkeep.keys() - {f"{n}#observe" for n in seen.failed}):
            if name.endswith("#observe"):
                log.info("%s: the backend can be observed again", name.removesuffix("#observe"))
                del self._told_upkeep[name]
        for name, err in sorted(seen.failed.items()):
            problem = err.problem(prefix=f"{name}: ")
            result.unobserved[name] = problem
            if (err.code, str(err)) not in reported:  # else each job's warning said it
                result.errors.append(problem)
            if self._told_upkeep.get(f"{name}#observe") != str(err):
                self._told_upkeep[f"{name}#observe"] = str(err)
                if self._told_upkeep.get(name) != str(err):  # its upkeep said the same already
                    log.warning("%s: backend error: %s", name, err)

    def _with_error(
        self, record: JobRecord, problem: RuntimeProblem, now: float, result: PassResult
    ) -> JobRecord:
        """``problem`` met in ``record``'s step: reported, and the record with it as its
        ``lastError`` (the time it was first met kept; Failed at once for a terminal error of
        the job's own, ``_failed``)."""
        result.errors.append(problem)
        pass_ = self._pass
        first = pass_.before.get(record.name) if pass_ is not None else None
        at = first.last_error_at if first is not None and first.last_error == problem else now
        if record.last_error == problem and record.last_error_at == at:
            return record
        return self._failed(record.evolve(last_error=problem, last_error_at=at), problem, now, result)

    def _met(self, problem: RuntimeProblem, now: float, result: PassResult) -> None:
        """A job's step failed with ``problem``: reported, and kept in its record (its status
        file's ``lastError``, written at the pass's end) with the time it was first met."""
        pass_ = self._pass
        record = pass_.records.get(problem.job) if pass_ is not None and problem.job else None
        if pass_ is None or record is None:
            result.errors.append(problem)
            return
        marked = self._with_error(record, problem, now, result)
        if marked is record:
            return
        pass_.records[record.name] = marked
        self._seen.pop(record.name, None)
        self._later.records.append(marked)
        self._later.statuses.append(status.status_document(marked, now))

    @staticmethod
    def _failed(record: JobRecord, problem: RuntimeProblem, now: float, result: PassResult) -> JobRecord:
        """The record, Failed at once when ``problem`` is a terminal error of the job's own
        (``ErrorCode.fails_the_job``): never retried; else as it is."""
        if not problem.code.fails_the_job or record.phase.terminal or record.deleting:
            return record
        failed = record.evolve(
            phase=Phase.FAILED,
            reason=Reason.TERMINAL_ERROR,
            message=f"{problem.detail} ({problem.code.value}: not retried; {_AFTER_TERMINAL})",
            completion_time=now,
            next_launch_at=None,
        )
        result.phases[record.name] = Phase.FAILED
        result.events.append(f"{record.name}: failed: {failed.message}")
        log.warning("%s: failed: %s", record.name, failed.message)
        return failed.evolve(conditions=status.conditions(failed, now))

    def _task_error(
        self, record: JobRecord, tasks: list[ObservedTask], now: float, result: PassResult
    ) -> JobRecord:
        """A task of this attempt that ended, never run, for a terminal error of the job's own
        that its backend names (``ErrorCode.fails_the_job``): reported, kept as the job's
        ``lastError``, and the job Failed at once (``_failed``). Another error a task ended for
        (a pull that failed; an image removed under imagePullPolicy Never between the placement's
        look and the launch, the relaunch then waiting for it) is its message, and the restart
        policy's to handle."""
        ended = [
            t
            for t in tasks
            if t.error is not None and t.error.fails_the_job and t.state.ended and t.attempt == record.attempt
        ]
        if not ended or record.phase.terminal or record.deleting:
            return record
        task = ended[0]
        assert task.error is not None
        problem = RuntimeProblem(task.error, f"{task.task_id}: {task.message}", record.name)
        result.errors.append(problem)
        return self._failed(record.evolve(last_error=problem, last_error_at=now), problem, now, result)

    def _write_problem(self, job: str | None, err: OSError, code: ErrorCode | None = None) -> RuntimeProblem:
        """A file that could not be written, as a pass reports it: a status file's or (else)
        a record's, by its path when ``code`` does not say."""
        if code is None:
            path = str(getattr(err, "filename", "") or "")
            inside = path.startswith(str(self.statuses.root) + os.sep)
            code = ErrorCode.STATUS_WRITE_FAILED if inside else ErrorCode.STATE_WRITE_FAILED
        return RuntimeProblem(code, f"cannot write {failed_write(err)}; retrying next pass", job)

    def _show_unsaved(self, records: Mapping[str, JobRecord], now: float, result: PassResult) -> None:
        """The status of each job whose change ``apply`` could not write (a full or read-only
        state disk): its record as it stands, with ``lastError`` StateWriteFailed and Synced
        False saying why, written where it can be (the status folder may be on another disk;
        the record cannot be). Once the change is written, or no longer wanted, the next pass
        writes the job's status from its record again (``_restatus``)."""
        shown = []
        for name, why in sorted(self._unsaved.items()):
            record = records.get(name)
            if record is None:
                continue
            since = self._unsaved_since.setdefault(name, now)
            problem = RuntimeProblem(
                ErrorCode.STATE_WRITE_FAILED, f"its change is not applied: cannot write {why}; retrying", name
            )
            marked = record.evolve(
                last_error=problem,
                last_error_at=since,
                not_synced=(
                    Reason.STATE_WRITE_FAILED,
                    f"its new spec is not applied: cannot write {why}; it runs as last applied until "
                    "the state folder takes the change",
                ),
            )
            document = status.status_document(marked.evolve(conditions=status.conditions(marked, now)), now)
            self._unsaved_shown[name] = document
            shown.append(document)
        for name, err in sorted(self.statuses.write_many(shown).items()):
            result.write_failures.setdefault(name, failed_write(err))

    def _not_staged(self, name: str, err: OSError) -> None:
        """A staged record that could not be written: the job stays as it was."""
        if self._pass is not None:
            self._pass.unsaved.discard(name)
        self.stage_failures[name] = err
        self._apply_failures[name] = failed_write(err)
        self._seen.pop(name, None)
        self._desired.pop(name, None)

    def _write_later(
        self, result: PassResult, now: float, unsaved: set[str], records: Mapping[str, JobRecord]
    ) -> None:
        """What the pass left to its end (module docstring): records, then status files; the
        status files of removed jobs, then their records. A job whose write failed is looked
        at again next pass, and said so; a staged one is not (``_not_staged``)."""
        later, self._later = self._later, _Later()
        listed = {r.name for r in later.records} | set(later.removed)
        # a staged job the pass left as it was (a backend error): its record as staged
        later.records.extend(records[n] for n in sorted(unsaved - listed) if n in records)
        failed = dict(self.store.save_many(later.records))
        codes = dict.fromkeys(failed, ErrorCode.STATE_WRITE_FAILED)
        not_staged = {name: failed.pop(name) for name in sorted(unsaved & failed.keys())}
        for name, err in not_staged.items():
            self._not_staged(name, err)
        skip = failed.keys() | not_staged.keys()
        unwritten = self.statuses.write_many([d for d in later.statuses if d["name"] not in skip])
        # the files of the jobs that did not change, gone from the folder: written again
        restored = self.statuses.write_missing(skip | unwritten.keys() | set(later.removed))
        unwritten.update(restored)
        kept = self.statuses.remove_many(later.removed)
        codes.update(dict.fromkeys([*unwritten, *kept], ErrorCode.STATUS_WRITE_FAILED))
        failed.update(unwritten)
        failed.update(kept)
        failed.update(self.store.delete_many([n for n in later.removed if n not in kept]))
        for name, err in sorted(failed.items()):
            self._seen.pop(name, None)
            result.write_failures[name] = failed_write(err)
            result.errors.append(
                self._write_problem(name, err, codes.get(name, ErrorCode.STATE_WRITE_FAILED))
            )
            result.wake(now + 5.0)

    def _move_out(
        self, record: JobRecord, tasks: list[ObservedTask], now: float, result: PassResult
    ) -> JobRecord | None:
        """Stop a moving job's ``tasks`` on the backend it leaves. Returns the record once none
        is alive there (the job may start on its new backend), else None (it waits)."""
        assert record.moving_from is not None
        old = self._backend(record.moving_from)
        alive = [t for t in tasks if t.state.alive]
        to_stop = [t.task_id for t in alive if t.state is not TaskState.STOPPING]
        if to_stop:
            old.stop(to_stop, record.spec.grace_period_s)
            result.stopped += len(to_stop)
        if alive:
            waiting = record.evolve(
                phase=Phase.RESTARTING,
                reason=Reason.MOVING_BACKEND,
                message=f"stopping {len(alive)} task(s) on {old.name} before it starts on {record.backend}",
            )
            waiting = waiting.evolve(conditions=status.conditions(waiting, now))
            if waiting != record:
                self._save(waiting)
                self.statuses.write(status.status_document(waiting, now))
            result.phases[record.name] = waiting.phase
            result.wake(now + 1.0)
            return None
        ended = [t.task_id for t in tasks if t.state.ended]
        if ended:
            old.forget(ended)
        log.info("%s: its tasks on %s are gone; it starts on %s", record.name, old.name, record.backend)
        moved = record.evolve(moving_from=None, tasks=())
        self._save(moved)
        return moved

    def _tell(self, name: str, events: Sequence[str]) -> None:
        """Log what a job's step decided, unless the last pass logged the same and could not
        write it (a full disk: the same decision again each pass, not a new event)."""
        said = tuple(events)
        if not said:
            return
        self._told[name] = said
        if self._told_unwritten.get(name) == said:
            return
        for event in said:
            log.info("%s", event)

    def _reconcile_job(
        self, record: JobRecord, backend: Backend, tasks: list[ObservedTask], now: float, result: PassResult
    ) -> None:
        given = self._task_error(record, tasks, now, result)  # a task that could not run at all
        decided = lifecycle.step(
            given, tasks, now, self.backoff, backend.address_wait_s, self._desired.get(record.name)
        )
        self._desired[record.name] = decided.desired
        if decided.stop or decided.forget or decided.purge or (decided.remove and (tasks or record.tasks)):
            self._write_ahead(record)  # a staged record before its backend is touched
        updated = _without_error(decided.record)  # this pass got through the job
        if not decided.remove:
            looked, again = self.progress.look(updated, backend, tasks, now)
            if looked is not updated.progress:
                updated = updated.evolve(progress=looked)
            result.wake(again)
        if _counted(decided.record) != _counted(record) and (decided.stop or decided.forget or decided.purge):
            # A restart is counted in the record before its ended tasks are forgotten or the
            # others stopped: a record that cannot be written (a full disk) leaves the backend
            # as it was, so the next pass decides the same restart again, counted once.
            self._save(updated)
            record = updated
        self._tell(record.name, decided.events)
        result.events.extend(decided.events)
        result.wake(decided.wake_at)
        if decided.stop:
            grace = updated.spec.grace_period_s
            backend.stop(decided.stop, grace)
            result.stopped += len(decided.stop)
            result.wake(now + grace + 1)
        if decided.forget:
            backend.forget(decided.forget)
        if decided.purge:  # ttlSecondsAfterFinished: its ended tasks and their logs go
            backend.purge(record.name)
        if decided.remove:
            backend.purge(record.name)
            # at the pass's end, the status file first: one that cannot go keeps the record
            self._later.removed.append(record.name)
            self._seen.pop(record.name, None)
            self._seen_tasks.pop(record.name, None)
            self._desired.pop(record.name, None)
            self.progress.forget(record.name)
            if self._pass is not None:
                self._pass.records.pop(record.name, None)
            return
        result.phases[record.name] = Phase.DELETING if updated.deleting else updated.phase
        seen = (id(record), *map(id, tasks))
        unsaved = self._pass is not None and record.name in self._pass.unsaved
        if updated is record and not decided.launch and self._seen.get(record.name) == seen and not unsaved:
            return  # the same record and tasks as last pass, all written: nothing to do
        shown = self._shown(updated, decided.desired, tasks)
        touched = bool(decided.stop or decided.forget or decided.purge)  # a backend was changed
        if decided.launch:
            updated, launched = self._launch(backend, updated, decided.launch, now, result)
            shown.update((t.key, t) for t in launched)
            touched = touched or bool(launched)
        tasks_now = tuple(shown[k] for k in sorted(shown, key=ORDER))
        if tasks_now != updated.tasks:
            updated = updated.evolve(tasks=tasks_now)
        conditions = status.conditions(updated, now)
        if conditions != updated.conditions:
            updated = updated.evolve(conditions=conditions)
        unsaved = self._pass is not None and record.name in self._pass.unsaved
        if updated != record or unsaved:
            if touched:
                self._save(updated)
            else:
                self._later.records.append(updated)
        if (
            updated != record
            or unsaved
            or not self.statuses.written(updated.name)
            or record.name in self._restatus
        ):
            document = status.status_document(updated, now)
            if touched:
                self.statuses.write(document)
            else:
                self._later.statuses.append(document)
        # The record and tasks this pass ended with, by identity: the store and the backends
        # hand out the same objects while nothing changes, so the same tuple next pass means
        # nothing to recompute. (The objects are kept, so their ids cannot be reused.)
        # Kept because the target needs it: a daemon pass over 1,000 unchanged jobs takes
        # 27-48 ms with this skip and 185-302 ms without it (target 100 ms; 2 shared cores,
        # 2026-12-03, bench/daemon_bench.py's thousand_jobs).
        kept = updated if updated != record or unsaved else record  # what the store holds now
        if self._pass is not None:  # later jobs of this pass see it as it is now
            self._pass.records[record.name] = kept
        self._seen[record.name] = (id(kept), *map(id, tasks))
        self._seen_tasks[record.name] = [kept, *tasks]

    @classmethod
    def _shown(
        cls, record: JobRecord, desired: Mapping[TaskKey, TaskConfig], tasks: list[ObservedTask]
    ) -> dict[TaskKey, TaskRecord]:
        """The tasks the record (and status) lists: of a job being deleted or suspended, what
        of it is still there, until it has stopped; otherwise the current run's, a slot not
        relaunched yet keeping its last run's entry (``status.with_last_runs``)."""
        if record.deleting or record.suspension is not None:
            return {t.key: t for t in status.task_records(tasks)}
        shown = {t.key: t for t in status.task_records(cls._current(desired, tasks))}
        return status.with_last_runs(shown, desired, tasks, record.tasks)

    @staticmethod
    def _current(desired: Mapping[TaskKey, TaskConfig], tasks: list[ObservedTask]) -> list[ObservedTask]:
        return [t for t in tasks if t.key in desired and t.config_hash == desired[t.key].config_hash]

    def _launch(
        self, backend: Backend, record: JobRecord, keys: tuple[TaskKey, ...], now: float, result: PassResult
    ) -> tuple[JobRecord, list[TaskRecord]]:
        mine = priority(record)
        pass_ = self._pass
        first = pass_.waiting.get(backend.name) if pass_ is not None else None
        if record.suspension is not None and first is not None and first > mine:
            result.wake(now + 2.0)  # preempted: a job of higher priority waits for room first
            return record, []
        request = gang_request(record, keys)
        try:
            answer = backend.place(request)
        except BackendError as err:  # nothing was launched: the job as decided, with the error
            result.wake(now + 5.0)
            said = f"{record.message}; not placed: {err.code.value} (see lastError)"
            unplaced = record.evolve(message=said)
            return self._with_error(unplaced, err.problem(record.name), now, result), []
        if isinstance(answer, Unplaced):
            result.wake(now + 2.0)
            if answer.reason in _WAITS_FOR_ROOM and pass_ is not None:
                pass_.waiting[backend.name] = max(mine, pass_.waiting.get(backend.name, mine))
            said = ""
            if answer.short is not None and not all(slot.pinned for slot in request.slots):
                gang = None
                if answer.rooms is not None:  # each task on one place: room where it fits
                    sizes = tuple(slot.resources for slot in request.slots)
                    gang = preemption.Gang(sizes, answer.rooms)
                said = self._preempt(record, backend, answer.short, now, result, gang)
            if record.suspension is not None:  # preempted: it waits as it is, for room
                return record, []
            phase = Phase.RESTARTING if record.phase is Phase.RESTARTING else Phase.PENDING
            if all(slot.pinned for slot in request.slots):  # restarting alone: the rest still run
                phase = record.phase
            message = f"{answer.message}; {said}" if said else answer.message
            return record.evolve(phase=phase, reason=Reason(answer.reason), message=message), []
        placement: Placement = answer
        if record.suspension is not None:  # a preempted job placed again
            record = lifecycle.resumed(record, now)
            result.events.append(f"{record.name}: {record.message}")
            log.info("%s: %s", record.name, record.message)
        ready = placed(record, placement).evolve(
            start_time=record.start_time or now,
            reason=Reason.TASKS_STARTING,
            message=f"starting {len(placement.slots)} task(s)",
        )
        self._save(ready)  # write-ahead: addresses and launch number before any task exists
        # the configs the tasks launch with, kept as this job's desired ones: the next pass
        # reuses them, so it does not work out every new task's identity a second time
        configs = lifecycle.desired_configs(ready.spec, ready, self._desired.get(record.name))
        self._desired[record.name] = configs
        to_launch = launches(ready, placement, record.source_dir, self.secrets_dir, configs)
        here = bool(getattr(backend, "host_paths_here", False))
        try:  # its folders as they are now, links resolved: what the backend then uses
            to_launch = self.launch_paths.checked_all(to_launch, record.source_root, host_paths_here=here)
        except LaunchRefused as err:
            backend.release(placement)
            phase = Phase.RESTARTING if record.phase is Phase.RESTARTING else Phase.PENDING
            if all(slot.pinned for slot in request.slots):  # restarting alone: the rest still run
                phase = record.phase
            where = f" ({record.source.file})" if record.source is not None else ""
            message = f"not launched: {err}{where}; launched once the folder is fixed"
            log.warning("%s: %s", record.name, message)
            result.wake(now + 30.0)
            return ready.evolve(phase=phase, reason=Reason.LAUNCH_REFUSED, message=message), []
        try:
            backend.launch(placement, to_launch)
        except BackendError:
            backend.release(placement)
            raise
        result.launched += len(to_launch)
        log.info("%s: launched %s", record.name, ", ".join(t.key.name for t in to_launch))
        started = [
            TaskRecord(
                t.task_id, t.key, t.attempt, TaskState.STARTING, t.slot.host, t.slot.port, started_at=now
            )
            for t in to_launch
        ]
        return ready, started

    def _preempt(
        self,
        record: JobRecord,
        backend: Backend,
        short: Resources,
        now: float,
        result: PassResult,
        gang: preemption.Gang | None = None,
    ) -> str:
        """Preempt the lower-priority jobs on ``backend`` that free ``short`` for ``record``
        (and, with a ``gang``, room where its tasks fit) losing the least work
        (``preemption.choose``); what it did, in words for the waiting job's message ("" when
        nothing of lower priority would help)."""
        pass_ = self._pass
        if pass_ is None:
            return ""
        mine = priority(record)
        tasks = pass_.seen.all_of(backend.name)
        candidates: list[preemption.Candidate] = []
        coming, stopping = ZERO, 0
        coming_on: list[tuple[str, Resources]] = []
        for name, other in pass_.records.items():
            if name == record.name or other.backend != backend.name or other.moving_from is not None:
                continue
            alive = [t for t in tasks.get(name, ()) if t.state.alive]
            if not alive:
                continue
            held = ZERO
            for task in alive:
                held = held + task.resources
            held_on = tuple((t.where, t.resources) for t in alive if t.where is not None)
            if other.suspension is not None or other.deleting or other.phase.terminal:
                coming, stopping = coming + held, stopping + len(alive)  # on its way back
                coming_on.extend(held_on)
                continue
            rank = priority(other)
            if self._protected(other, rank):
                continue
            started = min((t.started_at for t in alive if t.started_at is not None), default=now)
            # work at risk: since its last checkpoint that these tasks made (else since they started)
            since = progress.since_checkpoint(other.progress, started)[1]
            candidates.append(preemption.Candidate(name, rank, held, len(alive), started, since, held_on))
        if gang is not None:
            gang = preemption.Gang(gang.slots, gang.rooms, tuple(coming_on))
        choice = preemption.choose(short, mine, candidates, now, coming, gang)
        if choice.covered:
            if not stopping:  # it fits the room there is: what keeps it out is not ours to free
                return ""
            return f"waiting for {stopping} task(s) of suspended or preempted jobs to stop"
        if not choice.victims:
            return ""
        for victim in choice.victims:
            why = f"priority {mine} > {victim.priority}"
            marked = lifecycle.suspend(
                pass_.records[victim.job],
                Reason.PREEMPTED,
                now,
                by=record.name,
                message=why,
                tasks=victim.tasks,
            )
            self._save(marked)  # write-ahead: its own step, later this pass, stops its tasks
            pass_.records[victim.job] = marked
            event = (
                f"{victim.job}: preempted by {record.name} ({why}): stopping {victim.tasks} task(s), "
                f"{victim.work_at_risk(now):.0f} task-seconds of work at risk"
            )
            result.events.append(event)
            log.info("%s", event)
        names = ", ".join(v.job for v in choice.victims)
        return f"preempting {names} (lower priority): waiting for their tasks to stop"

    def _protected(self, record: JobRecord, rank: int) -> bool:
        """Whether the policy keeps ``record`` (of priority ``rank``) from being preempted:
        ``policy.nonPreemptiblePriority``, or a priority class marked ``preemptible: false``."""
        if self.non_preemptible is not None and rank >= self.non_preemptible:
            return True
        return record.canonical["spec"].get("priorityClassName") in self.protected_classes

    def _stop_orphans(
        self, backend: Backend, job: str, tasks: list[ObservedTask], result: PassResult
    ) -> None:
        """Tasks of no known job (its record was deleted, or lost in a crash): stop them."""
        alive = [t.task_id for t in tasks if t.state.alive and t.state is not TaskState.STOPPING]
        if alive:
            log.warning("%s: stopping %d task(s) that belong to no job", job, len(alive))
            backend.stop(alive, 10.0)
            result.stopped += len(alive)
        ended = [t.task_id for t in tasks if t.state.ended]
        if ended:
            backend.forget(ended)
