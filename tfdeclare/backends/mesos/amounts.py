"""What the master's ``Resource`` messages and agent entries mean for the Mesos backend: the
role a resource is reserved to and whether a role may use it (hierarchical roles, as upstream's
``Resources::isAllocatableTo``), the usable cpus, mem, whole GPUs and port ranges of a list of
them (``Amounts``), an agent's text attributes and HTTP address, what one agent of the operator
API's ``GET_AGENTS`` answer has in all for us (``agent_capacity``), and whether the roles'
quota can ever let a gang be offered (``quota_verdict``). Pure functions over the decoded JSON;
the pool of held offers that uses them is ``offers``."""

from __future__ import annotations

from collections.abc import Collection, Iterable
from dataclasses import dataclass
from typing import Any

from tfdeclare.backends.mesos.placement_values import AgentOffer, PortRanges


def reservation_role(resource: dict[str, Any]) -> str:
    """The role a resource is reserved to (``*``: unreserved), in either format the master
    speaks: the ``reservations`` stack (the last is the role), or ``role`` (before
    RESERVATION_REFINEMENT)."""
    stack = resource.get("reservations") or []
    if stack and isinstance(stack[-1], dict):
        return str(stack[-1].get("role", "*"))
    return str(resource.get("role") or "*")


def allocatable_to(reserved_to: str, role: str) -> bool:
    """Whether resources reserved to ``reserved_to`` may be allocated to ``role``: unreserved
    ones, those reserved to the role itself, and those reserved to one of its ancestors
    (hierarchical roles: ``ml``'s reservations are offered to a framework in ``ml/team``).
    Upstream ``Resources::isAllocatableTo`` (src/common/resources.cpp, Mesos 1.11):
    ``isUnreserved(resource) || role == reservationRole || roles::isStrictSubroleOf(role,
    reservationRole)``."""
    return reserved_to in ("*", role) or role.startswith(reserved_to + "/")


def usable(resource: dict[str, Any], roles: Collection[str]) -> bool:
    """Plain resources, unreserved or allocatable to one of ``roles`` (reserved to it or to an
    ancestor; no disk, revocable, shared or provider resources)."""
    if any(key in resource for key in ("disk", "revocable", "shared", "provider_id")):
        return False
    role = reservation_role(resource)
    return role == "*" or any(allocatable_to(role, ours) for ours in roles)


def quota_verdict(
    needs: dict[str, float], roles: Collection[str], quota: dict[str, dict[str, float]]
) -> str | None:
    """Why a gang needing ``needs`` in all (cpus, mem, gpus) can never be offered to a
    framework in ``roles``, given the roles' quota limits, or None. Upstream's allocator never
    allocates a role beyond its limit, nor beyond any ancestor's (hierarchical quota); a
    framework in several roles may use the sum of their limits, and a role without a limit
    on a resource is unbounded in it. Tasks of ours already running count against the limit
    too, but that is a wait, not never: only the limits themselves are compared."""
    allowed: dict[str, float] = {}
    limiting: dict[str, list[str]] = {}
    for name in needs:
        total = 0.0
        for role in roles:
            parts = role.split("/")
            ancestry = ["/".join(parts[: i + 1]) for i in range(len(parts))]
            bounds = [(quota[r][name], r) for r in ancestry if name in quota.get(r, {})]
            if not bounds:
                total = float("inf")
                break
            value, by = min(bounds)
            total += value
            limiting.setdefault(name, []).append(by)
        allowed[name] = total
    over = [name for name, need in needs.items() if need > allowed[name] + 1e-9]
    if not over:
        return None
    described = ", ".join(f"{name} {needs[name]:g}" for name in over)
    limits = ", ".join(f"{name} {allowed[name]:g}" for name in over)
    owners = ", ".join(sorted({r for name in over for r in limiting.get(name, [])}))
    return (
        f"the gang needs {described} in all but the quota of role {owners} limits it to {limits} "
        "(the master never offers a role more than its quota limit)"
    )


def merge_ranges(ranges: Iterable[tuple[int, int]]) -> PortRanges:
    out: list[tuple[int, int]] = []
    for begin, end in sorted(ranges):
        if out and begin <= out[-1][1] + 1:
            out[-1] = (out[-1][0], max(out[-1][1], end))
        else:
            out.append((begin, end))
    return tuple(out)


def _attribute_text(attribute: dict[str, Any]) -> str | None:
    kind = attribute.get("type")
    if kind == "TEXT":
        return str((attribute.get("text") or {}).get("value", ""))
    if kind == "SCALAR":
        return f"{float((attribute.get('scalar') or {}).get('value', 0)):g}"
    if kind == "SET":
        return ",".join(sorted(str(i) for i in (attribute.get("set") or {}).get("item", [])))
    if kind == "RANGES":
        ranges = (attribute.get("ranges") or {}).get("range", [])
        return ",".join(f"[{r.get('begin')}-{r.get('end')}]" for r in ranges)
    return None


def agent_url(raw: dict[str, Any]) -> str:
    """``scheme://ip:port/path`` of the offer's agent ("" when the offer has no url)."""
    url = raw.get("url")
    if not isinstance(url, dict):
        return ""
    address = url.get("address") or {}
    host = address.get("ip") or address.get("hostname")
    port = address.get("port")
    if not host or not port:
        return ""
    return f"{url.get('scheme', 'http')}://{host}:{port}{url.get('path', '')}"


@dataclass(frozen=True, slots=True)
class Amounts:
    """The cpus, mem, whole GPUs and ports of a list of ``Resource`` messages (usable ones)."""

    cpus: float
    mem_mib: float
    gpus: int
    ports: PortRanges

    @classmethod
    def of(cls, resources: Iterable[dict[str, Any]], roles: Collection[str] = ()) -> Amounts:
        """Unreserved resources, and those reserved to ``roles``."""
        cpus = mem = gpus = 0.0
        ports: list[tuple[int, int]] = []
        for resource in resources:
            if not usable(resource, roles):
                continue
            name = resource.get("name")
            if resource.get("type") == "SCALAR":
                value = float((resource.get("scalar") or {}).get("value", 0.0))
                if name == "cpus":
                    cpus += value
                elif name == "mem":
                    mem += value
                elif name == "gpus":
                    gpus += value
            elif resource.get("type") == "RANGES" and name == "ports":
                for entry in (resource.get("ranges") or {}).get("range", []):
                    ports.append((int(entry["begin"]), int(entry["end"])))
        return cls(round(cpus, 3), round(mem, 3), int(gpus + 1e-9), merge_ranges(ports))


def attributes_of(raw: Iterable[dict[str, Any]]) -> dict[str, str]:
    attributes = {}
    for attribute in raw:
        text = _attribute_text(attribute)
        if text is not None and "name" in attribute:
            attributes[str(attribute["name"])] = text
    return attributes


def agent_capacity(agent: dict[str, Any], roles: Collection[str] = ()) -> AgentOffer | None:
    """What one agent of the operator API's ``GET_AGENTS`` answer has in all for us:
    unreserved, and reserved to our ``roles`` (None when the entry names no agent)."""
    info = agent.get("agent_info") or {}
    agent_id = (info.get("id") or {}).get("value")
    if not isinstance(agent_id, str):
        return None
    total = Amounts.of(agent.get("total_resources") or info.get("resources") or [], roles)
    return AgentOffer(
        agent_id,
        str(info.get("hostname", "")),
        total.cpus,
        total.mem_mib,
        total.gpus,
        total.ports,
        attributes_of(info.get("attributes") or []),
        gpu_agent=total.gpus > 0,
    )
