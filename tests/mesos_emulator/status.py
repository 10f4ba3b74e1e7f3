"""TaskStatus construction and task-state predicates shared by master and agents.

Owns what ``protobuf::createStatusUpdate`` / ``createTaskStatus`` do in Mesos: the field
set of a status (``source``, ``reason``, ``message``, ``timestamp``, ``uuid`` only for
agent/executor updates) and the helpers around task states.
"""

from __future__ import annotations

import os
from typing import Any

TERMINAL_STATES = frozenset(
    {
        "TASK_FINISHED",
        "TASK_FAILED",
        "TASK_KILLED",
        "TASK_ERROR",
        "TASK_LOST",
        "TASK_DROPPED",
        "TASK_GONE",
        "TASK_GONE_BY_OPERATOR",
    }
)


def is_terminal(state: str) -> bool:
    """Mesos' ``protobuf::isTerminalState`` (TASK_LOST counts as terminal here)."""
    return state in TERMINAL_STATES


def new_uuid() -> bytes:
    """A random RFC 4122 version-4 UUID, as ``id::UUID::random()`` makes."""
    raw = bytearray(os.urandom(16))
    raw[6] = (raw[6] & 0x0F) | 0x40
    raw[8] = (raw[8] & 0x3F) | 0x80
    return bytes(raw)


def new_uuid_string() -> str:
    """The canonical text form of a fresh v4 UUID (stream ids, container ids)."""
    hexed = new_uuid().hex()
    return f"{hexed[:8]}-{hexed[8:12]}-{hexed[12:16]}-{hexed[16:20]}-{hexed[20:]}"


def valid_uuid_bytes(value: bytes) -> bool:
    """Whether ``id::UUID::fromBytes`` accepts the bytes: 16 of them, a known version."""
    return len(value) == 16 and 1 <= (value[6] >> 4) <= 5


def make_status(
    task_id: str,
    state: str,
    *,
    source: str,
    wall: float,
    agent_id: str | None = None,
    message: str | None = None,
    reason: str | None = None,
    executor_id: str | None = None,
    uuid: bytes | None = None,
    unreachable_time: float | None = None,
    container_status: dict[str, Any] | None = None,
    healthy: bool | None = None,
) -> dict[str, Any]:
    """Build a ``TaskStatus`` message dict."""
    status: dict[str, Any] = {"task_id": {"value": task_id}, "state": state}
    if message is not None:
        status["message"] = message
    status["source"] = source
    if reason is not None:
        status["reason"] = reason
    if agent_id is not None:
        status["agent_id"] = {"value": agent_id}
    if executor_id is not None:
        status["executor_id"] = {"value": executor_id}
    status["timestamp"] = wall
    if uuid is not None:
        status["uuid"] = uuid
    if healthy is not None:
        status["healthy"] = healthy
    if container_status is not None:
        status["container_status"] = container_status
    if unreachable_time is not None:
        status["unreachable_time"] = {"nanoseconds": int(unreachable_time * 1e9)}
    return status
