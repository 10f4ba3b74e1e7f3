"""Typed views of the scheduler events, and the owner-facing ``Handler`` protocol.

This module owns how an event's JSON is presented to the framework: light frozen
dataclasses with the fields a scheduler reads, each keeping the full JSON in ``raw``.
Missing lists are treated as empty (the master omits empty repeated fields).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from tfdeclare.backends.mesos.errors import ProtocolError, TerminalError

JSON = dict[str, Any]


def id_value(obj: Any) -> str | None:
    """``{"value": "x"}`` -> ``"x"``; anything else -> None."""
    value = obj.get("value") if isinstance(obj, dict) else None
    return value if isinstance(value, str) else None


@dataclass(frozen=True, slots=True)
class Offer:
    id: str
    agent_id: str
    hostname: str
    role: str | None  # allocation_info.role (MULTI_ROLE frameworks)
    resources: list[JSON]
    attributes: list[JSON]
    raw: JSON

    @classmethod
    def from_json(cls, raw: JSON) -> Offer:
        offer_id, agent_id = id_value(raw.get("id")), id_value(raw.get("agent_id"))
        if offer_id is None or agent_id is None:
            raise ProtocolError("offer without id or agent_id")
        alloc = raw.get("allocation_info")
        return cls(
            id=offer_id,
            agent_id=agent_id,
            hostname=str(raw.get("hostname", "")),
            role=alloc.get("role") if isinstance(alloc, dict) else None,
            resources=list(raw.get("resources") or []),
            attributes=list(raw.get("attributes") or []),
            raw=raw,
        )


@dataclass(frozen=True, slots=True)
class TaskStatus:
    task_id: str
    state: str
    agent_id: str | None
    uuid: str | None  # base64 exactly as received; None for master-generated updates
    source: str | None
    reason: str | None
    message: str | None
    healthy: bool | None
    timestamp: float | None
    raw: JSON

    @classmethod
    def from_json(cls, raw: JSON) -> TaskStatus:
        task_id = id_value(raw.get("task_id"))
        if task_id is None or not isinstance(raw.get("state"), str):
            raise ProtocolError("task status without task_id or state")
        uuid = raw.get("uuid")
        healthy = raw.get("healthy")
        timestamp = raw.get("timestamp")
        return cls(
            task_id=task_id,
            state=raw["state"],
            agent_id=id_value(raw.get("agent_id")),
            uuid=uuid if isinstance(uuid, str) and uuid else None,
            source=raw.get("source"),
            reason=raw.get("reason"),
            message=raw.get("message"),
            healthy=healthy if isinstance(healthy, bool) else None,
            timestamp=float(timestamp) if isinstance(timestamp, int | float) else None,
            raw=raw,
        )


class Handler(Protocol):
    """What the client calls, on its stream thread, one event at a time, in stream order.

    Callbacks may call the client's methods (calls go on another connection). An exception
    raised by a callback is logged and otherwise ignored: it never tears the framework down;
    for ``update`` it means the update is not acknowledged, so the master will resend it.
    """

    def subscribed(self, framework_id: str, heartbeat_interval: float, master_info: JSON) -> None:
        """A new subscription is live; persist ``framework_id`` and reconcile."""

    def offers(self, offers: Sequence[Offer]) -> None:
        """New offers; each must eventually be accepted or declined."""

    def rescind(self, offer_id: str) -> None:
        """The offer is gone; never use it again."""

    def update(self, status: TaskStatus) -> None:
        """A task status update; return normally only once it is durably processed."""

    def failure(self, agent_id: str | None, executor_id: str | None, status: int | None) -> None:
        """An agent was removed (only agent_id) or an executor exited."""

    def error(self, message: str) -> None:
        """The master sent an ERROR event; the stream closes after it."""

    def disconnected(self, reason: str) -> None:
        """The subscribed stream ended; outstanding offers are void. The client re-subscribes."""

    def terminated(self, error: TerminalError) -> None:
        """The client stopped for good (framework removed, failed over, or stopped)."""

    def other(self, event: JSON) -> None:
        """Any other event (MESSAGE, INVERSE_OFFERS, UPDATE_OPERATION_STATUS, ...)."""


class BaseHandler:
    """A Handler whose callbacks do nothing; subclass and override what you need."""

    def subscribed(self, framework_id: str, heartbeat_interval: float, master_info: JSON) -> None:
        pass

    def offers(self, offers: Sequence[Offer]) -> None:
        pass

    def rescind(self, offer_id: str) -> None:
        pass

    def update(self, status: TaskStatus) -> None:
        pass

    def failure(self, agent_id: str | None, executor_id: str | None, status: int | None) -> None:
        pass

    def error(self, message: str) -> None:
        pass

    def disconnected(self, reason: str) -> None:
        pass

    def terminated(self, error: TerminalError) -> None:
        pass

    def other(self, event: JSON) -> None:
        pass
