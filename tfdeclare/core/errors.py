"""The closed vocabulary of runtime errors: what a reconcile pass, a backend or the daemon met
while running jobs (spec errors are ``core.diagnostics``' instead).

Each ``ErrorCode`` has a one-line summary and says whether it is *terminal* (doing the same
again cannot help until someone changes something: credentials, a framework id, an image, a
spec, a file) or *retryable* (the next pass may succeed: an unreachable master, a full disk).
Terminal ones are not retried where the retry lives (a Mesos master's 401/403 ends the
subscription at once). A ``RuntimeProblem`` is one occurrence: its code, what happened in
words and the job it concerns; its ``str()`` is the message printed before codes existed, so
what the commands print did not change. docs/reference.md lists the codes (generated from
this module by ``tfdeclare.cli.reference``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Any


class ErrorCode(StrEnum):
    """A runtime error's kind; the value is the code as written (status files, JSON). Each has a
    ``summary`` and says whether it is ``terminal`` (``_ABOUT``)."""

    # ---- a cluster manager or engine ----------------------------------------------------------
    MASTER_UNREACHABLE = "MasterUnreachable"
    CREDENTIALS_REFUSED = "CredentialsRefused"
    FRAMEWORK_REFUSED = "FrameworkRefused"
    CLIENT_STOPPED = "ClientStopped"
    SETTINGS_UNUSABLE = "SettingsUnusable"
    BACKEND_CLOSED = "BackendClosed"
    BACKEND_UNKNOWN = "BackendUnknown"
    MASTER_CALL_FAILED = "MasterCallFailed"
    BACKEND_STATE_UNREADABLE = "BackendStateUnreadable"
    ENGINE_UNREACHABLE = "EngineUnreachable"
    # ---- launching ---------------------------------------------------------------------------
    IMAGE_REQUIRED = "ImageRequired"
    IMAGE_MISSING = "ImageMissing"
    IMAGE_PULL_FAILED = "ImagePullFailed"
    LAUNCH_REFUSED = "LaunchRefused"
    LAUNCH_FAILED = "LaunchFailed"
    PLACEMENT_LOST = "PlacementLost"
    PORTS_UNAVAILABLE = "PortsUnavailable"
    SECRET_UNAVAILABLE = "SecretUnavailable"  # noqa: S105 (a code, not a secret)
    WORKING_DIR_MISSING = "WorkingDirMissing"
    TASK_UNKNOWN = "TaskUnknown"
    # ---- running and stopping ----------------------------------------------------------------
    TEND_FAILED = "TendFailed"
    STOP_FAILED = "StopFailed"
    FORGET_FAILED = "ForgetFailed"
    LOG_UNAVAILABLE = "LogUnavailable"
    # ---- tfdeclare's own files ---------------------------------------------------------------
    STATE_WRITE_FAILED = "StateWriteFailed"
    STATUS_WRITE_FAILED = "StatusWriteFailed"
    RECORD_UNREADABLE = "RecordUnreadable"
    # ---- anything else a backend raises (a backend plugin that names no code) ----------------
    BACKEND_FAILED = "BackendFailed"

    @property
    def summary(self) -> str:
        """What the code means, in one line."""
        return _ABOUT[self][0]

    @property
    def terminal(self) -> bool:
        """Doing the same again cannot help until someone changes something: not retried."""
        return _ABOUT[self][1]

    @property
    def backend_down(self) -> bool:
        """The backend cannot work with its cluster at all (it does not answer, it refuses the
        credentials, it removed the framework or another scheduler took it over): a readiness
        problem for the daemon (an ``unreachable`` one once it has stood
        ``UNREACHABLE_REPORT_S``, the others at once), an exit 1 for ``status --refresh``."""
        return self in _BACKEND_DOWN

    @property
    def fails_the_job(self) -> bool:
        """A terminal error of the job's own (its image, its secret): the job fails at once
        (reason TerminalError). The other terminal ones are the operator's (credentials, a
        framework, a record): the jobs keep their phase, and passes report them."""
        return self in _FAILS_THE_JOB

    @property
    def unreachable(self) -> bool:
        """The backend cannot reach what runs its tasks at all (a Mesos master, the Docker
        engine): the tasks run on without us, the jobs keep their phase, and a controller that
        keeps passing (the daemon, the background controller) shows it on each job it could
        not look at (``lastError``) and, once it has stood ``UNREACHABLE_REPORT_S``, in the
        daemon's readiness."""
        return self in _UNREACHABLE


_ABOUT: dict[ErrorCode, tuple[str, bool]] = {  # code -> (summary, terminal)
    # ---- a cluster manager or engine ----------------------------------------------------------
    ErrorCode.MASTER_UNREACHABLE: ("the Mesos master does not answer or cannot be subscribed to", False),
    ErrorCode.CREDENTIALS_REFUSED: ("the Mesos master refused the framework's credentials or ACLs", True),
    ErrorCode.FRAMEWORK_REFUSED: (
        "the Mesos master removed the framework, or another scheduler took it over",
        True,
    ),
    ErrorCode.CLIENT_STOPPED: ("the Mesos client stopped; the next pass connects again", False),
    ErrorCode.SETTINGS_UNUSABLE: ("the backend's settings cannot be used as written", True),
    ErrorCode.BACKEND_CLOSED: ("the backend was closed while a call was under way", False),
    ErrorCode.BACKEND_UNKNOWN: ("the job's tasks run on a backend this controller cannot reach", False),
    ErrorCode.MASTER_CALL_FAILED: ("a call to the Mesos master failed", False),
    ErrorCode.BACKEND_STATE_UNREADABLE: (
        "the backend's own state (its journal, its framework id) cannot be read",
        True,
    ),
    ErrorCode.ENGINE_UNREACHABLE: ("the Docker engine does not answer or refused a call", False),
    # ---- launching ---------------------------------------------------------------------------
    ErrorCode.IMAGE_REQUIRED: ("a container task names no image", True),
    ErrorCode.IMAGE_MISSING: (
        "the image is not on the machine and imagePullPolicy is Never: launched once it is",
        False,
    ),
    ErrorCode.IMAGE_PULL_FAILED: ("the image could not be pulled", False),
    ErrorCode.LAUNCH_REFUSED: ("a folder of the task is refused (it changed, or is reserved)", False),
    ErrorCode.LAUNCH_FAILED: ("the task's folder, supervisor or launcher could not be made", False),
    ErrorCode.PLACEMENT_LOST: ("the offers placed for the job went before the launch: placed again", False),
    ErrorCode.PORTS_UNAVAILABLE: ("no port could be reserved for the task", False),
    ErrorCode.SECRET_UNAVAILABLE: ("a secret the task reads is not there or cannot be read", True),
    ErrorCode.WORKING_DIR_MISSING: (
        "the task's workingDir is not a folder of the machine that runs it",
        True,
    ),
    ErrorCode.TASK_UNKNOWN: ("the task is not part of the placement or the backend", False),
    # ---- running and stopping ----------------------------------------------------------------
    ErrorCode.TEND_FAILED: ("the backend's upkeep of a task (a restart, an end's record) failed", False),
    ErrorCode.STOP_FAILED: ("a task could not be stopped", False),
    ErrorCode.FORGET_FAILED: ("what the runtime keeps of an ended task could not be removed", False),
    ErrorCode.LOG_UNAVAILABLE: ("the task's log cannot be read", False),
    # ---- tfdeclare's own files ---------------------------------------------------------------
    ErrorCode.STATE_WRITE_FAILED: ("the job's record could not be written (full or read-only disk)", False),
    ErrorCode.STATUS_WRITE_FAILED: ("the job's status file could not be written", False),
    ErrorCode.RECORD_UNREADABLE: ("the job's record cannot be read, so the job is left alone", True),
    # ---- anything else a backend raises (a backend plugin that names no code) ----------------
    ErrorCode.BACKEND_FAILED: ("the backend could not do what was asked", False),
}

_UNREACHABLE = frozenset({ErrorCode.MASTER_UNREACHABLE, ErrorCode.ENGINE_UNREACHABLE})
_BACKEND_DOWN = _UNREACHABLE | {ErrorCode.CREDENTIALS_REFUSED, ErrorCode.FRAMEWORK_REFUSED}
# How long an unreachable cluster or engine stands before the daemon reports it (/healthz
# degraded, ``tfdeclare_backend_connected`` 0): a Mesos client re-subscribes on its own with a
# backoff capped near 15 s and an engine restarts in seconds, so a blip heals within it.
UNREACHABLE_REPORT_S = 20.0

_FAILS_THE_JOB = frozenset(
    {ErrorCode.IMAGE_REQUIRED, ErrorCode.SECRET_UNAVAILABLE, ErrorCode.WORKING_DIR_MISSING}
)


@dataclass(frozen=True, slots=True)
class RuntimeProblem:
    """One runtime error: its ``code``, what happened (``detail``) and the job it concerns
    (None: the pass or a backend as a whole). ``str()`` is the message as printed."""

    code: ErrorCode
    detail: str
    job: str | None = None

    @property
    def summary(self) -> str:
        return self.code.summary

    @property
    def terminal(self) -> bool:
        return self.code.terminal

    def __str__(self) -> str:
        return f"{self.job}: {self.detail}" if self.job is not None else self.detail

    def to_json(self) -> dict[str, Any]:
        """As the status file, ``status -o json`` and the daemon show it."""
        return {
            "code": self.code.value,
            "summary": self.code.summary,
            "detail": self.detail,
            "terminal": self.code.terminal,
            **({"job": self.job} if self.job is not None else {}),
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> RuntimeProblem:
        """From ``to_json`` (a code this version does not know reads as ``BackendFailed``)."""
        try:
            code = ErrorCode(data["code"])
        except ValueError:
            code = ErrorCode.BACKEND_FAILED
        job = data.get("job")
        return cls(code, str(data.get("detail", "")), str(job) if job is not None else None)
