"""Builders for the JSON bodies of scheduler calls (pure functions, no I/O).

This module owns the exact wire shape of each call a framework needs (SUBSCRIBE, ACCEPT,
DECLINE, REVIVE, SUPPRESS, KILL, ACKNOWLEDGE, RECONCILE, TEARDOWN, UPDATE_FRAMEWORK).
Every non-SUBSCRIBE body is completed with the top-level ``framework_id`` by the client.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from tfdeclare.backends.mesos.errors import ConfigError
from tfdeclare.backends.mesos.info import FrameworkInfo

JSON = dict[str, Any]


def _ids(values: Sequence[str], what: str) -> list[JSON]:
    if isinstance(values, str):
        raise TypeError(f"{what} must be a sequence of ids, not a string")
    if not values:
        raise ConfigError(f"{what} must not be empty")
    return [{"value": v} for v in values]


def filters(refuse_seconds: float | None) -> JSON | None:
    if refuse_seconds is None:
        return None
    if not math.isfinite(refuse_seconds) or refuse_seconds < 0:
        raise ConfigError("refuse_seconds must be a finite number >= 0")
    return {"refuse_seconds": float(refuse_seconds)}


def subscribe(info: FrameworkInfo, suppressed_roles: Sequence[str] = ()) -> JSON:
    body: JSON = {"type": "SUBSCRIBE", "subscribe": {"framework_info": info.to_json()}}
    if suppressed_roles:
        body["subscribe"]["suppressed_roles"] = list(suppressed_roles)
    if info.id is not None:  # top-level id == framework_info.id, both absent on first subscribe
        body["framework_id"] = {"value": info.id}
    return body


def launch_operation(task_infos: Sequence[JSON]) -> JSON:
    return {"type": "LAUNCH", "launch": {"task_infos": list(task_infos)}}


def accept(offer_ids: Sequence[str], operations: Sequence[JSON], refuse_seconds: float | None) -> JSON:
    body: JSON = {"offer_ids": _ids(offer_ids, "offer_ids"), "operations": list(operations)}
    if (f := filters(refuse_seconds)) is not None:
        body["filters"] = f
    return {"type": "ACCEPT", "accept": body}


def decline(offer_ids: Sequence[str], refuse_seconds: float | None) -> JSON:
    body: JSON = {"offer_ids": _ids(offer_ids, "offer_ids")}
    if (f := filters(refuse_seconds)) is not None:
        body["filters"] = f
    return {"type": "DECLINE", "decline": body}


def revive(roles: Sequence[str]) -> JSON:
    return {"type": "REVIVE", "revive": {"roles": list(roles)}}


def suppress(roles: Sequence[str]) -> JSON:
    return {"type": "SUPPRESS", "suppress": {"roles": list(roles)}}


def kill(task_id: str, agent_id: str | None, grace_period: float | None) -> JSON:
    body: JSON = {"task_id": {"value": task_id}}
    if agent_id is not None:
        body["agent_id"] = {"value": agent_id}
    if grace_period is not None:
        if not math.isfinite(grace_period) or grace_period < 0:
            raise ConfigError("grace_period must be a finite number of seconds >= 0")
        body["kill_policy"] = {"grace_period": {"nanoseconds": round(grace_period * 1e9)}}
    return {"type": "KILL", "kill": body}


def acknowledge(agent_id: str, task_id: str, uuid: str) -> JSON:
    ack = {"agent_id": {"value": agent_id}, "task_id": {"value": task_id}, "uuid": uuid}
    return {"type": "ACKNOWLEDGE", "acknowledge": ack}


def reconcile(tasks: Sequence[tuple[str, str | None]]) -> JSON:
    """Explicit reconciliation for (task_id, agent_id) pairs; an empty list is implicit."""
    entries: list[JSON] = []
    for task_id, agent_id in tasks:
        entry: JSON = {"task_id": {"value": task_id}}
        if agent_id is not None:
            entry["agent_id"] = {"value": agent_id}
        entries.append(entry)
    return {"type": "RECONCILE", "reconcile": {"tasks": entries}}


def teardown() -> JSON:
    return {"type": "TEARDOWN"}


def update_framework(info: FrameworkInfo, suppressed_roles: Sequence[str]) -> JSON:
    body: JSON = {"framework_info": info.to_json()}
    if suppressed_roles:
        body["suppressed_roles"] = list(suppressed_roles)
    return {"type": "UPDATE_FRAMEWORK", "update_framework": body}


def accept_inverse_offers(inverse_offer_ids: Sequence[str], refuse_seconds: float | None = None) -> JSON:
    body: JSON = {"inverse_offer_ids": _ids(inverse_offer_ids, "inverse_offer_ids")}
    if (f := filters(refuse_seconds)) is not None:
        body["filters"] = f
    return {"type": "ACCEPT_INVERSE_OFFERS", "accept_inverse_offers": body}


def decline_inverse_offers(inverse_offer_ids: Sequence[str], refuse_seconds: float | None) -> JSON:
    body: JSON = {"inverse_offer_ids": _ids(inverse_offer_ids, "inverse_offer_ids")}
    if (f := filters(refuse_seconds)) is not None:
        body["filters"] = f
    return {"type": "DECLINE_INVERSE_OFFERS", "decline_inverse_offers": body}
