"""``Controller``: plan application and reconcile passes (see the package docstring).

Write-ahead order, so that a crash at any point leaves a state the next pass adopts: a job's
record is saved with its new addresses and launch number *before* its tasks are launched
(a crash in between relaunches the missing tasks on the same ports next pass, with new ids);
tasks that a backend reports for no record are stopped; records and status files are written
atomically and only when they change.
"""

from __future__ import annotations

import logging
import secrets
import time
from collections import defaultdict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tfdeclare.backends.base import Backend, BackendError
from tfdeclare.core.enums import Phase, Reason, TaskState
from tfdeclare.core.plan.planner import Action, Plan
from tfdeclare.core.run import lifecycle, status
from tfdeclare.core.run.launches import gang_request, launches, placed
from tfdeclare.core.run.lifecycle import Backoff
from tfdeclare.core.run.record import JobRecord, Revision, TaskRecord
from tfdeclare.core.run.tasks import ObservedTask, Placement, TaskKey, Unplaced
from tfdeclare.core.spec.loader import SourceRef
from tfdeclare.core.spec.model import fingerprint
from tfdeclare.shell.statuswriter import StatusWriter
from tfdeclare.shell.store import StateStore

log = logging.getLogger("tfdeclare.controller")


@dataclass(slots=True)
class PassResult:
    """What one reconcile pass saw and did."""

    phases: dict[str, Phase] = field(default_factory=dict)
    launched: int = 0
    stopped: int = 0
    events: list[str] = field(default_factory=list)
    wake_at: float | None = None  # the earliest time a job wants another look
    errors: list[str] = field(default_factory=list)

    def wake(self, at: float | None) -> None:
        if at is not None and (self.wake_at is None or at < self.wake_at):
            self.wake_at = at


def _provenance(
    record: JobRecord,
    source: SourceRef | None,
    source_dir: Callable[[SourceRef | None], str | None],
    revision: Revision | None,
) -> JobRecord:
    """An unchanged job's record with where its spec now comes from (a new revision, a moved
    file) and no error; the same record object when nothing differs (the common case)."""
    changes: dict[str, Any] = {}
    if record.not_synced:
        changes["not_synced"] = None
    if source != record.source:
        changes["source"] = source
        changes["source_dir"] = source_dir(source)
    if revision is not None and revision.commit != record.revision:
        changes["revision"] = revision.commit
        changes["revision_info"] = revision.to_json()
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
    ) -> None:
        self.store = store
        self.backend = backend
        self.statuses = statuses
        self.backoff = backoff or Backoff()
        self.clock = clock
        self.base_dir = base_dir or Path.cwd()  # spec file paths are relative to this when applied
        self._seen: dict[str, tuple[int, ...]] = {}
        self._seen_tasks: dict[str, list[object]] = {}  # keeps the ids above meaningful

    # ---- applying a plan ------------------------------------------------------------------

    def apply(self, plan: Plan, revision: Revision | None = None) -> list[str]:
        """Write the plan's decisions into the records. Returns one line per change."""
        records = self.store.records()
        changes: list[str] = []
        for job in plan.jobs:
            record = records.get(job.name)
            canonical = plan.desired.get(job.name)
            source = plan.sources.get(job.name)
            updated = self._applied(job.action, record, job.name, canonical, source, revision)
            if job.not_synced is not None and record is not None:
                updated = record.evolve(
                    not_synced=job.not_synced,
                    last_attempted_revision=revision.commit if revision else record.last_attempted_revision,
                )
            elif job.action is Action.NOOP and record is not None:
                where = source or job.source or record.source
                updated = _provenance(record, where, self._source_dir, revision)
            if updated is not None and updated is not record and updated != record:
                self.store.save(updated)
                if job.action.changes_something:
                    changes.append(f"{job.action.symbol} {job.name}: {job.message}")
        return changes

    def _source_dir(self, source: SourceRef | None) -> str | None:
        return str((self.base_dir / source.file).parent.resolve()) if source else None

    def _applied(
        self,
        action: Action,
        record: JobRecord | None,
        name: str,
        canonical: Mapping[str, Any] | None,
        source: SourceRef | None,
        revision: Revision | None,
    ) -> JobRecord | None:
        provenance: dict[str, Any] = {
            "source": source,
            "source_dir": self._source_dir(source),
            "revision": revision.commit if revision else None,
            "revision_info": revision.to_json() if revision else None,
            "last_attempted_revision": revision.commit if revision else None,
            "not_synced": None,
        }
        if action is Action.DELETE:
            return record.evolve(deleting=True) if record else None
        if canonical is None or action not in (Action.CREATE, Action.UPDATE, Action.RESIZE, Action.RESTART):
            return None
        spec_hash = fingerprint(canonical)
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
            return changed.evolve(
                deleting=False,
                phase=Phase.PENDING,
                reason=Reason.SPEC_CHANGED,
                message="runs again",
                attempt=record.attempt + 1,
                restarts=0,
                next_launch_at=None,
                start_time=None,
                completion_time=None,
                conditions=(),
                tasks=(),
            )
        if action is Action.RESTART:
            return changed.evolve(
                attempt=record.attempt + 1,
                next_launch_at=None,
                reason=Reason.SPEC_CHANGED,
                message="spec changed: restarting every task",
            )
        if action is Action.RESIZE:
            return changed.evolve(reason=Reason.RESIZED, message="replica counts changed")
        return changed

    def delete(self, names: Sequence[str]) -> list[str]:
        """Mark jobs for deletion; the next passes stop their tasks and drop them."""
        missing = []
        for name in names:
            record = self.store.load(name)
            if record is None:
                missing.append(name)
            elif not record.deleting:
                self.store.save(record.evolve(deleting=True))
        return missing

    # ---- one reconcile pass ---------------------------------------------------------------

    def reconcile(self) -> PassResult:
        result = PassResult()
        now = self.clock()
        by_job: dict[str, list[ObservedTask]] = defaultdict(list)
        for task in self.backend.observe():
            by_job[task.job].append(task)
        for name, record in sorted(self.store.records().items()):
            tasks = by_job.pop(name, [])
            try:
                self._reconcile_job(record, tasks, now, result)
            except BackendError as err:
                result.errors.append(f"{name}: {err}")
                log.warning("%s: backend error: %s", name, err)
        for name, why in sorted(self.store.unreadable.items()):
            result.errors.append(f"{name}: its record cannot be read, so it is left alone: {why}")
        for job, orphans in sorted(by_job.items()):
            if job not in self.store.unreadable:
                self._stop_orphans(job, orphans, result)
        return result

    def _reconcile_job(
        self, record: JobRecord, tasks: list[ObservedTask], now: float, result: PassResult
    ) -> None:
        decided = lifecycle.step(record, tasks, now, self.backoff)
        updated = decided.record
        result.events.extend(decided.events)
        for event in decided.events:
            log.info("%s", event)
        result.wake(decided.wake_at)
        if decided.stop:
            grace = updated.spec.grace_period_s
            self.backend.stop(decided.stop, grace)
            result.stopped += len(decided.stop)
            result.wake(now + grace + 1)
        if decided.forget:
            self.backend.forget(decided.forget)
        if decided.remove:
            self.backend.purge(record.name)
            self.store.delete(record.name)
            self.statuses.remove(record.name)
            self._seen.pop(record.name, None)
            self._seen_tasks.pop(record.name, None)
            return
        result.phases[record.name] = Phase.DELETING if updated.deleting else updated.phase
        seen = (id(record), *map(id, tasks))
        if updated is record and not decided.launch and self._seen.get(record.name) == seen:
            return  # the same record and tasks as last pass, all written: nothing to do
        shown = {
            t.key: t
            for t in status.task_records(tasks if updated.deleting else self._current(updated, tasks))
        }
        if decided.launch:
            updated, launched = self._launch(updated, decided.launch, now, result)
            shown.update((t.key, t) for t in launched)
        tasks_now = tuple(shown[k] for k in sorted(shown))
        if tasks_now != updated.tasks:
            updated = updated.evolve(tasks=tasks_now)
        conditions = status.conditions(updated, now)
        if conditions != updated.conditions:
            updated = updated.evolve(conditions=conditions)
        if updated != record:
            self.store.save(updated)
        if updated != record or not self.statuses.written(updated.name):
            self.statuses.write(status.status_document(updated, now))
        # The record and tasks this pass ended with, by identity: the store and the backends
        # hand out the same objects while nothing changes, so the same tuple next pass means
        # nothing to recompute. (The objects are kept, so their ids cannot be reused.)
        kept = updated if updated != record else record  # what the store holds now
        self._seen[record.name] = (id(kept), *map(id, tasks))
        self._seen_tasks[record.name] = [kept, *tasks]

    @staticmethod
    def _current(record: JobRecord, tasks: list[ObservedTask]) -> list[ObservedTask]:
        desired = lifecycle.desired_configs(record.spec, record)
        return [t for t in tasks if t.key in desired and t.config_hash == desired[t.key].config_hash]

    def _launch(
        self, record: JobRecord, keys: tuple[TaskKey, ...], now: float, result: PassResult
    ) -> tuple[JobRecord, list[TaskRecord]]:
        answer = self.backend.place(gang_request(record, keys))
        if isinstance(answer, Unplaced):
            phase = Phase.RESTARTING if record.phase is Phase.RESTARTING else Phase.PENDING
            result.wake(now + 2.0)
            return record.evolve(phase=phase, reason=Reason(answer.reason), message=answer.message), []
        placement: Placement = answer
        ready = placed(record, placement).evolve(
            start_time=record.start_time or now,
            reason=Reason.TASKS_STARTING,
            message=f"starting {len(placement.slots)} task(s)",
        )
        self.store.save(ready)  # write-ahead: addresses and launch number before any task exists
        to_launch = launches(ready, placement, record.source_dir)
        try:
            self.backend.launch(placement, to_launch)
        except BackendError:
            self.backend.release(placement)
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

    def _stop_orphans(self, job: str, tasks: list[ObservedTask], result: PassResult) -> None:
        """Tasks of no known job (its record was deleted, or lost in a crash): stop them."""
        alive = [t.task_id for t in tasks if t.state.alive and t.state is not TaskState.STOPPING]
        if alive:
            log.warning("%s: stopping %d task(s) that belong to no job", job, len(alive))
            self.backend.stop(alive, 10.0)
            result.stopped += len(alive)
        ended = [t.task_id for t in tasks if t.state.ended]
        if ended:
            self.backend.forget(ended)
