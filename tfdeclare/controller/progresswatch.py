"""When and where a job's progress files are read, for the reconcile pass (issue 34).

A job that declares ``spec.checkpoint`` or ``spec.tensorboard`` has its progress read every
``EVERY_S`` while any of its tasks is alive, once more after they have all stopped (a
checkpoint saved on SIGTERM, by ``PreemptionCheckpointHandler``), and once after a controller
starts. Where:

- a relative ``checkpoint.dir`` in the saving task's working folder (``JobSpec.saver``), a
  relative ``logDir`` in TensorBoard's, as the backend says (``TaskFolders``: the local
  backend; on another backend they are not read, and the progress says so); they may lie in
  the job's task folders or, through the links the local backend makes, its spec's folder;
- an absolute one where it says, read only under ``policy.allowedHostPaths``;
- never in tfdeclare's own folders; a URL (``gs://``) is not read.

The files are read by ``shell/progressfiles.py`` (no link followed, bounded), the progress is
derived by ``core/run/progress.py``; this module holds each job's incremental reader.
"""

from __future__ import annotations

import os
import posixpath
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from tfdeclare.backends.base import Backend, TaskFolders
from tfdeclare.core.run import progress, tfevents
from tfdeclare.core.run.record import JobRecord
from tfdeclare.core.run.tasks import ObservedTask
from tfdeclare.core.spec.keys import TaskKey
from tfdeclare.core.spec.model import TENSORBOARD_KEY
from tfdeclare.shell.progressfiles import EventReader, Refused, open_folder, read_checkpoint

EVERY_S = 10.0  # how often a running job's progress files are read


@dataclass(slots=True)
class _Job:
    events: EventReader = field(default_factory=EventReader)
    read_at: float | None = None
    alive: bool = False  # it had tasks alive at the last read


class ProgressWatch:
    def __init__(self, reserved: Mapping[str, str], allowed_host_paths: Sequence[str] | None) -> None:
        self.reserved = dict(reserved)
        self.allowed_host_paths = tuple(allowed_host_paths or ())
        self._jobs: dict[str, _Job] = {}

    def forget(self, name: str) -> None:
        self._jobs.pop(name, None)

    def look(
        self, record: JobRecord, backend: Backend, tasks: Sequence[ObservedTask], now: float
    ) -> tuple[progress.Progress | None, float | None]:
        """(the job's progress, now read again when due; when it wants the next look)."""
        spec = record.spec
        if spec.checkpoint is None and spec.tensorboard is None:
            self._jobs.pop(record.name, None)
            return record.progress, None
        alive = [t for t in tasks if t.state.alive]
        job = self._jobs.setdefault(record.name, _Job())
        due = job.read_at is None or (alive and now - job.read_at >= EVERY_S) or (job.alive and not alive)
        if not due:
            return record.progress, (job.read_at + EVERY_S) if alive and job.read_at is not None else None
        job.read_at, job.alive = now, bool(alive)
        started = [t.started_at for t in alive if t.key.role.in_cluster and t.started_at is not None]
        problems: list[str] = []
        checkpoint = None
        if spec.checkpoint is not None:
            wanted = spec.checkpoint.dir
            folder = self._folder(record, backend, wanted, spec.saver, problems, "checkpoint.dir")
            if folder is not None:
                try:
                    checkpoint = read_checkpoint(folder)
                finally:
                    os.close(folder)
        events: list[tfevents.Event] = []
        events_read = False
        board = spec.tensorboard
        if board is not None and "://" not in board.log_dir:
            folder = self._folder(record, backend, board.log_dir, TENSORBOARD_KEY, problems, "logDir")
            if folder is not None:
                try:
                    events, events_read = job.events.read(folder), True
                finally:
                    os.close(folder)
        seen = progress.Observation(
            now, checkpoint, events, tuple(problems), events_read, min(started) if started else None
        )
        total = spec.checkpoint.total_steps if spec.checkpoint else None
        derived = progress.observe(record.progress, seen, total)
        again = now + EVERY_S if alive else None
        return (record.progress if derived == record.progress else derived), again

    def _folder(
        self,
        record: JobRecord,
        backend: Backend,
        path: str,
        key: TaskKey,
        problems: list[str],
        what: str,
    ) -> int | None:
        """The folder ``path`` names, opened (``open_folder``); None, with why in ``problems``."""
        if posixpath.isabs(path):
            full, allowed = posixpath.normpath(path), self.allowed_host_paths
            if not allowed:
                problems.append(f"{what} {path}: not read (policy.allowedHostPaths allows no folder)")
                return None
        else:
            base = backend.task_folder(record.name, key) if isinstance(backend, TaskFolders) else None
            if base is None:
                problems.append(
                    f"{what} {path}: not read (backend {backend.name} keeps its tasks' folders "
                    "where the controller cannot read them: use an absolute folder on a shared filesystem)"
                )
                return None
            full = posixpath.normpath(posixpath.join(base, path))
            allowed = tuple(
                p for p in (posixpath.dirname(base), record.source_root or record.source_dir) if p is not None
            )
        try:
            return open_folder(full, allowed, self.reserved)
        except Refused as err:
            problems.append(f"{what} {err}")
            return None
