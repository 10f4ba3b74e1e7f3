"""The observed state the planner compares against: per job, what is applied and running.

Built by the shell from the controller's job records (and, where a backend is consulted, its
live tasks); golden plan cases write it as YAML. The planner needs nothing else.
"""

from __future__ import annotations

import hashlib
import json
import posixpath
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from tfdeclare.core.enums import Phase
from tfdeclare.core.run.progress import Progress
from tfdeclare.core.run.record import JobRecord
from tfdeclare.core.spec.keys import TaskKey
from tfdeclare.core.spec.loader import STDIN_NAME, SourceRef


@dataclass(frozen=True, slots=True)
class ObservedJob:
    name: str
    canonical: Mapping[str, Any]  # the applied spec, canonical form
    spec_hash: str
    phase: Phase
    source: SourceRef | None = None
    running: tuple[TaskKey, ...] = ()  # tasks alive now (or at the last pass)
    backend: str | None = None  # where it runs (None: not recorded, as in golden cases)
    source_path: str | None = None  # the absolute spec file it was last applied from (``scope``)
    progress: Progress | None = None  # what its checkpoint folder and event files said (issue 34)
    started_at: float | None = None  # when its running cluster tasks started (the earliest)
    revision: str | None = None  # the git commit it was last applied from (``scope``)


ObservedState = Mapping[str, ObservedJob]


def observed_job(record: JobRecord) -> ObservedJob:
    """What the planner needs of a controller's job record."""
    return ObservedJob(
        name=record.name,
        canonical=record.canonical,
        spec_hash=record.spec_hash,
        phase=Phase.DELETING if record.deleting else record.phase,
        source=record.source,
        running=tuple(sorted(t.key for t in record.tasks if t.state.alive)),
        backend=record.backend,
        source_path=source_path(record.source_dir, record.source.file if record.source else None),
        progress=record.progress,
        started_at=min(
            (t.started_at for t in record.tasks if t.state.alive and t.key.role.in_cluster and t.started_at),
            default=None,
        ),
        revision=record.revision,
    )


def source_path(source_dir: str | None, file: str | None) -> str | None:
    """The absolute spec file a job was applied from: its recorded folder (absolute, links
    resolved) and the file's name; None for standard input or an unrecorded folder."""
    if source_dir is None or file is None or file == STDIN_NAME:
        return None
    return posixpath.join(source_dir, posixpath.basename(file))


def _standing(phase: Phase) -> str:
    if phase is Phase.DELETING:
        return "deleting"
    return "terminal" if phase.terminal else "active"


def observed_fingerprint(observed: ObservedState) -> str:
    """What a saved plan was computed from. Phase changes within "active" do not count, so a
    plan made while a job was Pending is still good once it runs."""
    rows = sorted((job.name, job.spec_hash, _standing(job.phase)) for job in observed.values())
    return hashlib.sha256(json.dumps(rows).encode()).hexdigest()
