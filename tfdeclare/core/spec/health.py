"""A role's health check (``spec.healthCheck``, ``spec.replicas.<role>.healthCheck``): what
it checks and when, as a frozen value made from the canonical spec.

Three kinds, exactly one per check: ``tcpSocket`` (the task's own port accepts a TCP
connection: its TF server answers), ``exec`` (a command, an argv list, exits 0 within the
timeout, run in the task's working folder or container) and ``progress`` (a file, the task's
log by default, was written within ``stalledSeconds``). The timing fields are Kubernetes'
probe fields. The verdict over time is ``tfdeclare.core.run.health``'s.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Any


class HealthCheckKind(StrEnum):
    TCP = "tcpSocket"
    EXEC = "exec"
    PROGRESS = "progress"


DEFAULT_PERIOD_S = 10.0
DEFAULT_TIMEOUT_S = 1.0
DEFAULT_FAILURE_THRESHOLD = 3


@dataclass(frozen=True, slots=True)
class HealthCheck:
    kind: HealthCheckKind
    command: tuple[str, ...] = ()  # exec
    path: str | None = None  # progress: the file watched (None: the task's log)
    stalled_s: float = 0.0  # progress: longer than this without a write is a failure
    initial_delay_s: float = 0.0
    period_s: float = DEFAULT_PERIOD_S
    timeout_s: float = DEFAULT_TIMEOUT_S
    failure_threshold: int = DEFAULT_FAILURE_THRESHOLD

    def describe(self) -> str:
        """What it checks, in words (for messages)."""
        if self.kind is HealthCheckKind.TCP:
            return "its port accepts a connection"
        if self.kind is HealthCheckKind.EXEC:
            return f"the command {' '.join(self.command)} exits 0"
        return f"{self.path or 'its log'} is written within {self.stalled_s:g} s"

    def to_json(self) -> dict[str, Any]:
        """The canonical form (also what a backend stores with a task)."""
        out: dict[str, Any] = {}
        if self.kind is HealthCheckKind.TCP:
            out["tcpSocket"] = {}
        elif self.kind is HealthCheckKind.EXEC:
            out["exec"] = {"command": list(self.command)}
        else:
            progress: dict[str, Any] = {"stalledSeconds": _number(self.stalled_s)}
            if self.path is not None:
                progress["path"] = self.path
            out["progress"] = progress
        out.update(
            initialDelaySeconds=_number(self.initial_delay_s),
            periodSeconds=_number(self.period_s),
            timeoutSeconds=_number(self.timeout_s),
            failureThreshold=self.failure_threshold,
        )
        return out

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> HealthCheck:
        """From the canonical form or a filled spec fragment; ``KeyError``/``ValueError`` for
        one that is neither."""
        command: tuple[str, ...] = ()
        path: str | None = None
        stalled_s = 0.0
        if "tcpSocket" in data:
            kind = HealthCheckKind.TCP
        elif "exec" in data:
            kind, command = HealthCheckKind.EXEC, tuple(str(a) for a in data["exec"]["command"])
        else:
            kind, progress = HealthCheckKind.PROGRESS, data["progress"]
            path = str(progress["path"]) if progress.get("path") is not None else None
            stalled_s = float(progress["stalledSeconds"])
        return cls(
            kind,
            command=command,
            path=path,
            stalled_s=stalled_s,
            initial_delay_s=float(data.get("initialDelaySeconds", 0)),
            period_s=float(data.get("periodSeconds", DEFAULT_PERIOD_S)),
            timeout_s=float(data.get("timeoutSeconds", DEFAULT_TIMEOUT_S)),
            failure_threshold=int(data.get("failureThreshold", DEFAULT_FAILURE_THRESHOLD)),
        )


def canonical_health_check(filled: Mapping[str, Any]) -> dict[str, Any]:
    """The canonical form of a schema-valid, default-filled ``healthCheck``."""
    return HealthCheck.from_json(filled).to_json()


def _number(value: float) -> int | float:
    return int(value) if float(value).is_integer() else float(value)
