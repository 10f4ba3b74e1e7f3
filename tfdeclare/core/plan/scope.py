"""What ``--prune`` may reach: the jobs last applied from the files a plan read.

``apply jobs/one.yaml --prune`` must not delete the jobs whose files sit next to ``one.yaml`` or
anywhere else (kubectl scopes pruning to what was applied, its ApplySet; Argo CD to the
application). A ``PruneScope`` holds the absolute, link-resolved paths the plan was given (the
shell resolves them: the core does no I/O) and whether standard input was one of them; a job is
in scope when the spec file it was last applied from is one of those files or lies under one of
those folders, or when it was last applied from standard input and ``-`` was given. A job whose
file was never recorded (a record of an early release) is outside every scope: it is never
pruned by a path, only by ``tfdeclare delete``. The daemon's scope is its source: the folder it
watches, or in git mode the folder of the repository's snapshots (every revision's files) and
every job last applied from a git revision, wherever its file was read: a job that an earlier
release read through a ``--path`` committed as a link out of the repository (docs/security.md)
is the repository's to remove, not kept out of its reach for good.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from tfdeclare.core.spec.loader import STDIN_NAME

if TYPE_CHECKING:  # validate builds a scope without importing the observed state's model
    from tfdeclare.core.plan.observed import ObservedJob


@dataclass(frozen=True, slots=True)
class PruneScope:
    roots: tuple[str, ...]  # absolute, link-resolved files and folders
    stdin: bool = False
    shown: tuple[str, ...] = ()  # the paths as the user gave them, for the plan's text
    revisions: bool = False  # git mode: a job last applied from a git revision is in scope

    def holds(self, job: ObservedJob) -> bool:
        if job.source is not None and job.source.file == STDIN_NAME:
            return self.stdin
        if self.revisions and job.revision is not None:
            return True
        path = job.source_path
        if path is None:
            return False
        return any(path == root or path.startswith(root.rstrip("/") + "/") for root in self.roots)

    def describe(self) -> str:
        return ", ".join(self.shown or (*self.roots, *(["-"] if self.stdin else [])))

    def outside_message(self, job: ObservedJob) -> str:
        if job.source is not None and job.source.file == STDIN_NAME:
            where = "last applied from standard input"
        elif job.source_path is not None:
            where = f"last applied from {job.source_path}"
        else:
            where = "applied by a release that did not record its file"
        return f"{where}, outside the paths given: not pruned"
