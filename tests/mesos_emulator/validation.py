"""Validation rules of the Mesos master, with its error messages.

Owns: ``scheduler::call::validate`` (§1.4 step 8), FrameworkInfo validation and the
re-subscribe/update rules, role and ID rules, and per-task validation for LAUNCH in the
order of ``validation::task::validate`` (task id, unique id, agent id, kill policy,
max completion time, health check, resources, command, container, limits, then
command-xor-executor and "Total resources ... is more than available ...").
Messages are those of upstream ``src/master/validation.cpp`` and
``src/common/validation.cpp``.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from .resources import Resources, ResourceValue, coalesce, resource_key, to_fixed
from .status import valid_uuid_bytes

NAME_MAX = 255
_ROLE_INVALID_CHARS = frozenset("\x08\x0c\n\r\t\x0b ")


def capabilities(info: dict[str, Any]) -> set[str]:
    return {cap["type"] for cap in info.get("capabilities", []) if "type" in cap}


def framework_roles(info: dict[str, Any]) -> list[str]:
    if "MULTI_ROLE" in capabilities(info):
        return list(dict.fromkeys(info.get("roles", [])))
    return [info.get("role", "*")]


def validate_id(value: str) -> str | None:
    if not value:
        return "ID must not be empty"
    if len(value) > NAME_MAX:
        return f"ID must not be greater than {NAME_MAX} characters"
    if value in (".", ".."):
        return f"'{value}' is disallowed"
    if any(ch in "/\\" or ord(ch) < 0x20 or ord(ch) == 0x7F for ch in value):
        return f"'{value}' contains invalid characters"
    return None


def validate_role(role: str) -> str | None:
    if role == "*":
        return None
    if role.startswith("/"):
        return f"Role '{role}' cannot start with a slash"
    if role.endswith("/"):
        return f"Role '{role}' cannot end with a slash"
    if "//" in role:
        return f"Role '{role}' cannot contain two adjacent slashes"
    components = [c for c in role.split("/") if c]
    if not components:
        return "Role names cannot be the empty string"
    for component in components:
        if component in (".", "..", "*"):
            return f"Role '{role}' cannot include '{component}' as a component"
        if component.startswith("-"):
            return f"Role component '{component}' is invalid because it starts with a dash"
        if any(ch in _ROLE_INVALID_CHARS for ch in component):
            return f"Role component '{component}' is invalid because it contains backspace or whitespace"
    return None


def stringify_set(items: Iterable[str]) -> str:
    """stout's ``stringify(std::set<string>)``: ``{ a, b }``."""
    return "{ " + ", ".join(sorted(items)) + " }"


# -------------------------------------------------------------------------------------
# calls and frameworks


def validate_call(call: dict[str, Any], principal: str | None) -> str | None:
    """``validation::scheduler::call::validate``; returns the error message or None."""
    call_type = call.get("type")
    if call_type is None:
        return "Expecting 'type' to be present"
    if call_type == "SUBSCRIBE":
        if "subscribe" not in call:
            return "Expecting 'subscribe' to be present"
        info = call["subscribe"]["framework_info"]
        if info.get("id") != call.get("framework_id"):
            return "'framework_id' differs from 'subscribe.framework_info.id'"
        if principal is not None and "principal" in info and info["principal"] != principal:
            return (
                f"Authenticated principal '{principal}' does not match principal "
                f"'{info['principal']}' set in `FrameworkInfo`"
            )
        return None
    if "framework_id" not in call:
        return "Expecting 'framework_id' to be present"
    body = {
        "ACCEPT": "accept",
        "DECLINE": "decline",
        "ACCEPT_INVERSE_OFFERS": "accept_inverse_offers",
        "DECLINE_INVERSE_OFFERS": "decline_inverse_offers",
        "KILL": "kill",
        "SHUTDOWN": "shutdown",
        "ACKNOWLEDGE": "acknowledge",
        "ACKNOWLEDGE_OPERATION_STATUS": "acknowledge_operation_status",
        "RECONCILE": "reconcile",
        "RECONCILE_OPERATIONS": "reconcile_operations",
        "MESSAGE": "message",
        "REQUEST": "request",
        "UPDATE_FRAMEWORK": "update_framework",
    }.get(call_type)
    if body is not None and body not in call:
        return f"Expecting '{body}' to be present"
    if call_type == "ACKNOWLEDGE" and not valid_uuid_bytes(call["acknowledge"]["uuid"]):
        return "Not a valid UUID"
    if call_type == "ACKNOWLEDGE_OPERATION_STATUS":
        ack = call["acknowledge_operation_status"]
        if not valid_uuid_bytes(ack["uuid"]):
            return "Not a valid UUID"
        if "agent_id" not in ack:
            return "Expecting 'agent_id' to be present"
    if (
        call_type == "UPDATE_FRAMEWORK"
        and call["update_framework"]["framework_info"].get("id") != call["framework_id"]
    ):
        return "'framework_id' differs from 'update_framework.framework_info.id'"
    return None


def validate_framework_info(
    info: dict[str, Any],
    *,
    role_whitelist: set[str] | None,
    root_submissions: bool,
    completed: bool,
) -> str | None:
    """``Master::validateFramework``: roles, id, failover timeout, whitelist, completed."""
    multi_role = "MULTI_ROLE" in capabilities(info)
    if multi_role and "role" in info:
        return "'FrameworkInfo.role' must not be set when the framework is MULTI_ROLE capable"
    if not multi_role and info.get("roles"):
        return "'FrameworkInfo.roles' must not be set when the framework is not MULTI_ROLE capable"
    if multi_role:
        roles = info.get("roles", [])
        duplicates = {role for role in roles if roles.count(role) > 1}
        if duplicates:
            return f"'FrameworkInfo.roles' contains duplicate items: {stringify_set(duplicates)}"
        for role in roles:
            error = validate_role(role)
            if error:
                return f"'FrameworkInfo.roles' contains invalid role: {error}"
    else:
        error = validate_role(info.get("role", "*"))
        if error:
            return f"'FrameworkInfo.role' is not a valid role: {error}"
    framework_id = info.get("id", {}).get("value", "")
    if framework_id:
        error = validate_id(framework_id)
        if error:
            return error
    timeout = info.get("failover_timeout", 0.0)
    if not math.isfinite(timeout) or abs(timeout) * 1e9 >= 2**63:
        return f"The framework failover_timeout ({timeout:g}) is invalid"
    if role_whitelist is not None:
        invalid = {r for r in framework_roles(info) if r != "*" and r not in role_whitelist}
        if invalid:
            return f"Roles {stringify_set(invalid)} are not present in the master's --roles"
    if info.get("user") == "root" and not root_submissions:
        return "User 'root' is not allowed to run frameworks without --root_submissions set"
    if framework_id and completed:
        return "Framework has been removed"
    return None


def validate_update(old: dict[str, Any], new: dict[str, Any]) -> str | None:
    """``validation::framework::validateUpdate`` (principal, user, checkpoint)."""
    if old.get("principal") != new.get("principal"):
        return "Changing framework's principal is not allowed."
    if old.get("user") != new.get("user"):
        return (
            "Updating 'FrameworkInfo.user' is unsupported; attempted to update from "
            f"'{old.get('user')}' to '{new.get('user')}'"
        )
    if bool(old.get("checkpoint", False)) != bool(new.get("checkpoint", False)):
        return (
            "Updating 'FrameworkInfo.checkpoint' is unsupported; attempted to update from "
            f"'{str(old.get('checkpoint', False)).lower()}' to "
            f"'{str(new.get('checkpoint', False)).lower()}'"
        )
    return None


def validate_suppressed(roles: Iterable[str], suppressed: Iterable[str]) -> str | None:
    invalid = set(suppressed) - set(roles)
    if invalid:
        return f"Suppressed roles {stringify_set(invalid)} are not contained in the set of roles"
    return None


# -------------------------------------------------------------------------------------
# resources of a task


@dataclass
class TaskResources:
    """Task resources split into the plain part (comparable with offers) and the rest."""

    plain: Resources = field(default_factory=Resources)
    exotic: list[str] = field(default_factory=list)
    text: list[str] = field(default_factory=list)

    def describe(self) -> str:
        return "; ".join(self.text)


def _resource_value(resource: dict[str, Any]) -> ResourceValue | None:
    kind = resource.get("type")
    if kind == "SCALAR":
        return to_fixed(resource["scalar"]["value"])
    if kind == "RANGES":
        return coalesce((r["begin"], r["end"]) for r in resource["ranges"].get("range", []))
    if kind == "SET":
        return frozenset(resource["set"].get("item", []))
    return None


def _value_text(resource: dict[str, Any]) -> str:
    kind = resource.get("type")
    if kind == "SCALAR" and "scalar" in resource:
        value = resource["scalar"]["value"]
        return f"{value:g}"
    if kind == "RANGES" and "ranges" in resource:
        ranges = resource["ranges"].get("range", [])
        return "[" + ", ".join(f"{r['begin']}-{r['end']}" for r in ranges) + "]"
    if kind == "SET" and "set" in resource:
        return "{" + ", ".join(resource["set"].get("item", [])) + "}"
    return "?"


def resource_text(resource: dict[str, Any]) -> str:
    tag = ""
    if "allocation_info" in resource and "role" in resource["allocation_info"]:
        tag = f"(allocated: {resource['allocation_info']['role']})"
    reserved_to, dynamic = reservation_of(resource)
    if reserved_to is not None:
        tag += f"(reservations: [({'DYNAMIC' if dynamic else 'STATIC'},{reserved_to})])"
    if "revocable" in resource:
        tag += "{REV}"
    if "shared" in resource:
        tag += "<SHARED>"
    return f"{resource.get('name', '')}{tag}:{_value_text(resource)}"


def _validate_resource(resource: dict[str, Any]) -> str | None:
    if not resource.get("name"):
        return "Empty resource name"
    kind = resource.get("type")
    has = {key: key in resource for key in ("scalar", "ranges", "set")}
    if kind == "SCALAR":
        if not has["scalar"] or has["ranges"] or has["set"]:
            return "Invalid scalar resource"
        value = resource["scalar"]["value"]
        if not math.isfinite(value):
            return "Invalid scalar resource"
        if value < 0:
            return "Invalid scalar resource: value < 0"
    elif kind == "RANGES":
        if has["scalar"] or not has["ranges"] or has["set"]:
            return "Invalid ranges resource"
        ranges = resource["ranges"].get("range", [])
        for i, rng in enumerate(ranges):
            if rng["begin"] > rng["end"]:
                return "Invalid ranges resource: begin > end"
            for other in ranges[i + 1 :]:
                if rng["begin"] <= other["begin"] <= rng["end"]:
                    return "Invalid ranges resource: overlapping ranges"
    elif kind == "SET":
        if has["scalar"] or has["ranges"] or not has["set"]:
            return "Invalid set resource"
        items = resource["set"].get("item", [])
        if len(items) != len(set(items)):
            return "Invalid set resource: duplicated elements"
    else:
        return "Unsupported resource type"
    if "disk" in resource and resource["name"] != "disk":
        return f"DiskInfo should not be set for {resource['name']} resource"
    return None


def _single_allocation_role(resources: list[dict[str, Any]]) -> str | None:
    first: str | None = None
    for resource in resources:
        role = resource["allocation_info"].get("role")
        if role is None:
            return "The resources are not allocated to a role"
        if first is None:
            first = role
        elif role != first:
            return (
                f"The resources have multiple allocation roles ('{role}' and '{first}') "
                "but only one allocation role is allowed"
            )
    return None


def normalise_task_resources(resources: list[dict[str, Any]], role: str) -> tuple[TaskResources, str | None]:
    """Inject the allocation role, validate, and split the task's resources."""
    out = TaskResources()
    for resource in resources:
        resource.setdefault("allocation_info", {}).setdefault("role", role)
    for resource in resources:
        error = _validate_resource(resource)
        if error:
            return out, (f"Invalid resources: Resource '{resource_text(resource)}' is invalid: {error}")
    gpus = sum(r["scalar"]["value"] for r in resources if r["name"] == "gpus" and r["type"] == "SCALAR")
    if int(gpus * 1000.0) % 1000 != 0:
        return out, "Invalid 'gpus' resource: The 'gpus' resource must be an unsigned integer"
    for resource in resources:
        out.text.append(resource_text(resource))
        exotic = (
            "disk" in resource
            or "revocable" in resource
            or "shared" in resource
            or "provider_id" in resource
            or resource["allocation_info"].get("role") != role
            or len(resource.get("reservations") or []) > 1  # refined reservations
        )
        value = _resource_value(resource)
        if exotic or value is None:
            out.exotic.append(resource_text(resource))
        else:
            reserved_to, dynamic = reservation_of(resource)
            out.plain = out.plain + Resources({resource_key(resource["name"], reserved_to, dynamic): value})
    return out, None


def reservation_of(resource: dict[str, Any]) -> tuple[str | None, bool]:
    """(the role a resource is reserved to or None, whether dynamically), in either format."""
    stack = resource.get("reservations") or []
    if stack:
        return stack[-1].get("role"), stack[-1].get("type") == "DYNAMIC"
    role = resource.get("role", "*")
    if role != "*":
        return role, "reservation" in resource
    return None, False


# -------------------------------------------------------------------------------------
# tasks


def _validate_environment(command: dict[str, Any]) -> str | None:
    for variable in command.get("environment", {}).get("variables", []):
        kind = variable.get("type", "VALUE")
        name = variable["name"]
        if kind == "SECRET":
            if "secret" not in variable:
                return f"Environment variable '{name}' of type 'SECRET' must have a secret set"
            if "value" in variable:
                return f"Environment variable '{name}' of type 'SECRET' must not have a value set"
        elif kind == "VALUE":
            if "value" not in variable:
                return f"Environment variable '{name}' of type 'VALUE' must have a value set"
            if "secret" in variable:
                return f"Environment variable '{name}' of type 'VALUE' must not have a secret set"
        else:
            return "Environment variable of type 'UNKNOWN' is not allowed"
    return None


def validate_container(container: dict[str, Any]) -> str | None:
    """``common::validation::validateContainerInfo``."""
    for volume in container.get("volumes", []):
        count = sum(1 for key in ("host_path", "image", "source") if key in volume)
        if count != 1:
            return "Invalid volume: Only one of them should be set: 'host_path', 'image' and 'source'"
        source = volume.get("source")
        if source is not None:
            kind = source.get("type", "UNKNOWN")
            needed = {
                "DOCKER_VOLUME": "docker_volume",
                "HOST_PATH": "host_path",
                "SANDBOX_PATH": "sandbox_path",
                "SECRET": "secret",
                "CSI_VOLUME": "csi_volume",
            }.get(kind)
            if needed is None:
                return "Invalid volume: 'source.type' is unknown"
            if needed not in source:
                return f"Invalid volume: 'source.{needed}' is not set for {kind} volume"
    if container.get("type") == "DOCKER":
        if "docker" not in container:
            return "DockerInfo 'docker' is not set for DOCKER typed ContainerInfo"
        for parameter in container["docker"].get("parameters", []):
            if parameter.get("key") == "name":
                return "Parameter in DockerInfo must not be 'name'"
    return None


def _validate_health_check(check: dict[str, Any]) -> str | None:
    kind = check.get("type")
    if kind is None:
        return "HealthCheck must specify 'type'"
    if kind == "UNKNOWN":
        return f"'{kind}' is not a valid health check type"
    needed = {"COMMAND": "command", "HTTP": "http", "TCP": "tcp"}[kind]
    if needed not in check:
        return f"Expecting '{needed}' to be set for {kind} health check"
    for key in ("delay_seconds", "interval_seconds", "timeout_seconds", "grace_period_seconds"):
        if check.get(key, 0.0) < 0:
            return f"Expecting '{key}' to be non-negative"
    return None


def _validate_limits(task: dict[str, Any], plain: Resources) -> str | None:
    limits = task.get("limits", {})
    if not limits:
        return None
    if set(limits) - {"cpus", "mem"}:
        return "Only cpus and mem may be included in a task's resource limits"
    if "cpus" in limits:
        if "cpus" not in plain.items:
            return "When a CPU limit is specified, a CPU request must also be specified"
        if limits["cpus"]["value"] < plain.scalar("cpus"):
            return "The cpu limit must be greater than or equal to the cpu request"
    if "mem" in limits:
        if "mem" not in plain.items:
            return "When a memory limit is specified, a memory request must also be specified"
        mem_limit = limits["mem"]["value"]
        if not math.isinf(mem_limit) and mem_limit < plain.scalar("mem"):
            return "The memory limit must be greater than or equal to the memory request"
    return None


@dataclass
class TaskContext:
    """What task validation needs to know about the framework and the agent."""

    active_task_ids: set[str] | dict[str, Any]
    unreachable_task_ids: set[str] | dict[str, Any]
    agent_id: str
    role: str
    available: Resources
    framework_id: str


def validate_task(  # noqa: C901 - mirrors the master's validation::task::validate, check by check
    task: dict[str, Any], ctx: TaskContext
) -> tuple[str | None, TaskResources]:
    """``validation::task::validate`` for one TaskInfo of a LAUNCH."""
    resources = TaskResources()
    task_id = task["task_id"]["value"]
    error = validate_id(task_id)
    if error:
        return error, resources
    if task_id in ctx.active_task_ids:
        return f"Task has duplicate ID: {task_id}", resources
    if task_id in ctx.unreachable_task_ids:
        return f"Task reuses the ID of an unreachable task: {task_id}", resources
    agent = task["agent_id"]["value"]
    if agent != ctx.agent_id:
        return f"Task uses invalid agent {agent} while agent {ctx.agent_id} is expected", resources
    grace = task.get("kill_policy", {}).get("grace_period")
    if grace is not None and grace["nanoseconds"] < 0:
        return "Task's 'kill_policy.grace_period' must be non-negative", resources
    completion = task.get("max_completion_time")
    if completion is not None and completion["nanoseconds"] < 0:
        return "Task's `max_completion_time` must be non-negative", resources
    if "health_check" in task:
        error = _validate_health_check(task["health_check"])
        if error:
            return f"Task uses invalid health check: {error}", resources
    if not task.get("resources"):
        return "Task uses no resources", resources
    resources, error = normalise_task_resources(task["resources"], ctx.role)
    if error:
        return f"Task uses invalid resources: {error}", resources
    error = _single_allocation_role(task["resources"])
    if error:
        return f"Invalid task resources: {error}", resources
    if "command" in task:
        error = _validate_environment(task["command"])
        if error:
            return f"Task's `CommandInfo` is invalid: {error}", resources
    if "container" in task:
        error = validate_container(task["container"])
        if error:
            return f"Task's `ContainerInfo` is invalid: {error}", resources
    error = _validate_limits(task, resources.plain)
    if error:
        return error, resources
    if ("executor" in task) == ("command" in task):
        return (
            "Task should have at least one (but not both) of CommandInfo or ExecutorInfo present",
            resources,
        )
    total_text = resources.describe()
    total = resources.plain
    exotic = list(resources.exotic)
    if "executor" in task:
        error, executor_resources = _validate_executor(task["executor"], ctx)
        if error:
            return error, resources
        total = total + executor_resources.plain
        exotic += executor_resources.exotic
        if executor_resources.text:
            total_text = "; ".join(filter(None, [total_text, executor_resources.describe()]))
    if exotic or not ctx.available.contains(total):
        return (
            f"Total resources {total_text} required by task and its executor is more than "
            f"available {ctx.available.describe(ctx.role)}",
            resources,
        )
    return None, resources


def _validate_executor(executor: dict[str, Any], ctx: TaskContext) -> tuple[str | None, TaskResources]:
    empty = TaskResources()
    error = validate_id(executor["executor_id"]["value"])
    if error:
        return f"Executor uses invalid ExecutorID: {error}", empty
    framework_id = executor.get("framework_id", {}).get("value", ctx.framework_id)
    if framework_id != ctx.framework_id:
        return (
            f"ExecutorInfo has an invalid FrameworkID (Actual: {framework_id} vs Expected: "
            f"{ctx.framework_id})",
            empty,
        )
    if executor.get("type", "CUSTOM") != "CUSTOM":
        return "'ExecutorInfo.type' must be 'CUSTOM'", empty
    if "command" not in executor:
        return "'ExecutorInfo.command' must be set", empty
    resources, error = normalise_task_resources(list(executor.get("resources", [])), ctx.role)
    if error:
        return f"Executor uses invalid resources: {error}", empty
    return None, resources


# -------------------------------------------------------------------------------------
# offers


def validate_offer_ids(
    offer_ids: list[str],
    offers: dict[str, Any],
    framework_id: str,
) -> str | None:
    """``validation::offer::validate``: unique, known, owned, one role, one agent."""
    seen: set[str] = set()
    for offer_id in offer_ids:
        if offer_id in seen:
            return f"Duplicate offer {offer_id} in offer list"
        seen.add(offer_id)
    for offer_id in offer_ids:
        if offer_id not in offers:
            return f"Offer {offer_id} is no longer valid"
    for offer_id in offer_ids:
        owner = offers[offer_id].framework_id
        if owner != framework_id:
            return (
                f"Offer {offer_id} has invalid framework {owner} while framework {framework_id} is expected"
            )
    role: str | None = None
    for offer_id in offer_ids:
        offer_role = offers[offer_id].role
        if role is None:
            role = offer_role
        elif offer_role != role:
            return (
                "Aggregated offers must be allocated to the same role. Offer "
                f"{offer_id} uses role '{offer_role} but another is using role '{role}"
            )
    agent: str | None = None
    for offer_id in offer_ids:
        offer_agent = offers[offer_id].agent_id
        if agent is None:
            agent = offer_agent
        elif offer_agent != agent:
            return (
                "Aggregated offers must belong to one single agent. Offer "
                f"{offer_id} uses agent {offer_agent} and agent {agent}"
            )
    return None
