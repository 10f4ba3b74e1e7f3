"""FrameworkInfo: what the scheduler tells the master about itself on SUBSCRIBE.

This module owns the typed FrameworkInfo, its validation (the rules the master would
otherwise answer with an in-stream ERROR) and its JSON form.
"""

from __future__ import annotations

import dataclasses
import math
import re
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from tfdeclare.backends.mesos.errors import ConfigError

JSON = dict[str, Any]

_BAD_ID = re.compile(r"[/\\\x00-\x1f\x7f]")


class Capability(StrEnum):
    GPU_RESOURCES = "GPU_RESOURCES"
    PARTITION_AWARE = "PARTITION_AWARE"
    TASK_KILLING_STATE = "TASK_KILLING_STATE"
    MULTI_ROLE = "MULTI_ROLE"
    REVOCABLE_RESOURCES = "REVOCABLE_RESOURCES"
    SHARED_RESOURCES = "SHARED_RESOURCES"
    RESERVATION_REFINEMENT = "RESERVATION_REFINEMENT"
    REGION_AWARE = "REGION_AWARE"


DEFAULT_CAPABILITIES = (Capability.GPU_RESOURCES, Capability.PARTITION_AWARE, Capability.TASK_KILLING_STATE)


def validate_id(value: str, what: str) -> None:
    """The Mesos ID rules (framework, task, agent ids): non-empty, <=255, no '/', '\\' or controls."""
    if not value or len(value) > 255 or value in {".", ".."} or _BAD_ID.search(value):
        raise ConfigError(
            f"invalid {what} {value!r}: must be 1-255 characters, not '.'/'..', no '/', '\\\\' or controls"
        )


@dataclass(frozen=True)
class FrameworkInfo:
    """A Mesos v1 FrameworkInfo.

    ``id`` is None on the very first subscribe; the owner persists the id from ``subscribed``
    and passes it here on later runs. ``failover_timeout`` (seconds) is how long the master
    keeps the tasks after the stream breaks: Mesos's own default of 0 kills every task on any
    disconnect, so this class defaults to one week. Setting ``roles`` adds MULTI_ROLE.
    """

    user: str
    name: str
    id: str | None = None
    failover_timeout: float = 7 * 24 * 3600.0
    checkpoint: bool = True
    role: str | None = None
    roles: tuple[str, ...] = ()
    principal: str | None = None
    hostname: str | None = None
    webui_url: str | None = None
    capabilities: tuple[Capability, ...] = DEFAULT_CAPABILITIES
    labels: dict[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not self.user:
            raise ConfigError("FrameworkInfo.user is required")
        if not self.name:
            raise ConfigError("FrameworkInfo.name is required")
        if self.id is not None:
            validate_id(self.id, "framework id")
        if not math.isfinite(self.failover_timeout) or self.failover_timeout < 0:
            raise ConfigError("failover_timeout must be a finite number of seconds >= 0")
        if self.role is not None and self.roles:
            raise ConfigError("set either role or roles (MULTI_ROLE), not both")
        if len(set(self.roles)) != len(self.roles):
            raise ConfigError(f"duplicate roles in {list(self.roles)}")
        if self.role is not None and Capability.MULTI_ROLE in self.capabilities:
            raise ConfigError("role cannot be combined with the MULTI_ROLE capability; use roles")
        for cap in self.capabilities:
            Capability(cap)  # raises ValueError on a typo

    def with_id(self, framework_id: str | None) -> FrameworkInfo:
        return dataclasses.replace(self, id=framework_id)

    def effective_capabilities(self) -> tuple[Capability, ...]:
        caps = list(dict.fromkeys(Capability(c) for c in self.capabilities))
        if self.roles and Capability.MULTI_ROLE not in caps:
            caps.append(Capability.MULTI_ROLE)
        return tuple(caps)

    def to_json(self) -> JSON:
        info: JSON = {
            "user": self.user,
            "name": self.name,
            "failover_timeout": self.failover_timeout,
            "checkpoint": self.checkpoint,
        }
        if self.id is not None:
            info["id"] = {"value": self.id}
        if self.roles:
            info["roles"] = list(self.roles)
        elif self.role is not None:
            info["role"] = self.role
        for key in ("principal", "hostname", "webui_url"):
            value = getattr(self, key)
            if value is not None:
                info[key] = value
        caps = self.effective_capabilities()
        if caps:
            info["capabilities"] = [{"type": str(c)} for c in caps]
        if self.labels:
            info["labels"] = {"labels": [{"key": k, "value": v} for k, v in self.labels.items()]}
        return info
