"""Why the daemon is not ok: a closed vocabulary (``HealthReason``) and one ``Alert`` per
standing reason. ``service.alerts`` makes the list; ``/healthz``'s ``reasons`` are their lines
and the page shows the same list (``page.render``), each with what it means for the jobs
(``MEANING``): one source, so a new reason shows in both or fails the test that walks them."""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum


class HealthReason(StrEnum):
    """Why ``/healthz`` is not ok (once the first pass has ended): each ``Alert``'s kind. The
    page's alerts are the same list (``service.alerts``), so a reason cannot be shown in one place and
    forgotten in the other."""

    OVERDUE = "passOverdue"  # no pass for 3 intervals (at least 60 s): a hang?
    SOURCE_NOT_READ = "sourceNotRead"  # git mode: the first fetch is not applied yet
    SOURCE_UNREADABLE = "sourceUnreadable"  # the folder or repository cannot be read now
    FOLDER_UNWRITABLE = "folderUnwritable"  # the state or status folder cannot take a write
    JOB_WRITE_FAILED = "jobWriteFailed"  # a job's record or status file could not be written
    UNFINISHED = "passWriteFailed"  # a pass could not finish for a write outside any job
    STATUS_BRANCH = "statusBranchUnwritten"  # git mode: the status branch not written or pushed
    BACKEND_UNREACHABLE = "backendUnreachable"  # the backend cannot reach its cluster
    NOT_STARTED = "notStarted"  # a job not started: it runs under another state folder


@dataclass(frozen=True, slots=True)
class Alert:
    """One reason ``/healthz`` is degraded: its kind and its line (``/healthz``'s ``reasons``)."""

    reason: HealthReason
    text: str
    job: str | None = None  # the job it concerns, if one


# What each reason means for the jobs, after its line on the page.
MEANING: dict[HealthReason, str] = {
    HealthReason.OVERDUE: "nothing is reconciled until a pass ends; the jobs keep running",
    HealthReason.SOURCE_NOT_READ: "nothing new is applied until it is; the jobs keep running",
    HealthReason.SOURCE_UNREADABLE: "the last applied state keeps running",
    HealthReason.FOLDER_UNWRITABLE: "what tfdeclare does is not recorded; the jobs keep running",
    HealthReason.JOB_WRITE_FAILED: "retried every pass",
    HealthReason.UNFINISHED: "retried soon",
    HealthReason.STATUS_BRANCH: "tried again with back-off; the jobs keep running",
    HealthReason.BACKEND_UNREACHABLE: "the jobs are left as they are until it is reached again",
    HealthReason.NOT_STARTED: "started here once it is gone from there",
}
