"""The master state machine: subscriptions, calls, offers, tasks and status updates.

Owns what ``src/master/master.cpp`` does for the v1 scheduler API once a request has
passed the HTTP pipeline: SUBSCRIBE (new, failover with ``ERROR "Framework failed
over"``, recovered after a master restart, refusals as an in-stream ERROR), heartbeats,
disconnection and the failover timeout, TEARDOWN, ACCEPT (offer-set validation, per-task
validation, resources consumed in order, the rest declined with the call's filters),
RESERVE / UNRESERVE in ACCEPT (dynamic reservations),
DECLINE, SUPPRESS / REVIVE, KILL, ACKNOWLEDGE, RECONCILE (the §3.3 table) and
UPDATE_FRAMEWORK, plus the allocation loop and status-update forwarding.
Agent registration, partitions and removal live in ``master_agents``.

Everything here runs on the emulator's event loop thread; nothing blocks.
"""

from __future__ import annotations

import collections
import functools
import logging
import socket
import struct
from typing import TYPE_CHECKING, Any

from . import jsonenc
from .allocator import Allocator, min_allocatable_from_info
from .maintenance import Maintenance
from .master_agents import AgentLifecycle
from .model import AgentRecord, Framework, Offer, Subscription, Task
from .resources import Resources, coalesce, resource_key, to_fixed
from .status import is_terminal, make_status
from .validation import (
    TaskContext,
    capabilities,
    framework_roles,
    reservation_of,
    validate_framework_info,
    validate_offer_ids,
    validate_role,
    validate_suppressed,
    validate_task,
    validate_update,
)

if TYPE_CHECKING:
    from .clock import Handle
    from .emulator import Cluster

log = logging.getLogger("mesos_emulator.master")


class Master(AgentLifecycle):
    def __init__(self, cluster: Cluster, master_id: str, recovered_agents: set[str]) -> None:
        super().__init__(cluster, master_id, recovered_agents)
        config = cluster.config
        self.frameworks: dict[str, Framework] = {}
        self.completed_frameworks: collections.OrderedDict[str, Framework] = collections.OrderedDict()
        self.offers: dict[str, Offer] = {}
        self.allocator = Allocator(
            self.clock, config.allocation_interval, config.filter_gpu_resources, config.seed
        )
        self._framework_counter = 0
        self._offer_counter = 0
        self.maintenance = Maintenance(self)
        self._allocation_timer: Handle | None = None
        self._allocation_requested = False
        self.allocation_cycles = 0  # periodic cycles run (tests wait for some instead of a time)
        self.recovered_registry = config.registry_recovery_delay <= 0
        if not self.recovered_registry:
            self._timer(config.registry_recovery_delay, self._registry_recovered)
        self._timer(config.allocation_interval, self._allocation_tick)

    def _registry_recovered(self) -> None:
        self.recovered_registry = True

    # ---------------------------------------------------------------------------------
    # master info

    def master_info(self) -> dict[str, Any]:
        host = self.cluster.config.host
        port = self.cluster.master_port
        ip = self.cluster.config.host_ip
        # MasterInfo.ip is the in_addr in network byte order read as a host integer.
        packed = struct.unpack("<I", socket.inet_aton(ip))[0]
        return {
            "id": self.id,
            "ip": packed,
            "port": port,
            "pid": f"master@{ip}:{port}",
            "hostname": host,
            "version": self.cluster.config.version,
            "address": {"hostname": host, "ip": ip, "port": port},
            "capabilities": [
                {"type": "AGENT_UPDATE"},
                {"type": "AGENT_DRAINING"},
                {"type": "QUOTA_V2"},
            ],
        }

    # ---------------------------------------------------------------------------------
    # events

    def send(self, framework: Framework, event: dict[str, Any]) -> bool:
        sub = framework.subscription
        if sub is None or not sub.open or not framework.connected:
            return False
        self._send_sub(sub, event)
        return True

    def _send_sub(self, sub: Subscription, event: dict[str, Any]) -> None:
        if sub.stalled:
            return
        payload = jsonenc.dumps("Event", event)
        sub.stream.send_record(jsonenc.record(payload))
        sub.events_sent += 1

    def _heartbeat(self, sub: Subscription) -> None:
        if self.dead or not sub.open:
            return
        self._send_sub(sub, {"type": "HEARTBEAT"})
        sub.heartbeats_sent += 1
        sub.heartbeat = self.clock.call_later(
            self.cluster.config.heartbeat_interval, lambda: self._heartbeat(sub)
        )

    def _send_subscribed(self, framework: Framework) -> None:
        assert framework.subscription is not None
        self.send(
            framework,
            {
                "type": "SUBSCRIBED",
                "subscribed": {
                    "framework_id": {"value": framework.id},
                    "heartbeat_interval_seconds": float(self.cluster.config.heartbeat_interval),
                    "master_info": self.master_info(),
                },
            },
        )
        self._heartbeat(framework.subscription)

    def _status_update_event(self, status: dict[str, Any]) -> dict[str, Any]:
        return {"type": "UPDATE", "update": {"status": status}}

    # ---------------------------------------------------------------------------------
    # subscription

    def subscribe(self, sub: Subscription, subscribe: dict[str, Any], principal: str | None) -> None:
        info = subscribe["framework_info"]
        if principal is not None and "principal" not in info:
            info["principal"] = principal
        framework_id = info.get("id", {}).get("value", "")
        config = self.cluster.config
        error = validate_framework_info(
            info,
            role_whitelist=config.roles,
            root_submissions=config.root_submissions,
            completed=framework_id in self.completed_frameworks,
        )
        roles = framework_roles(info)
        suppressed = list(subscribe.get("suppressed_roles", []))
        if error is None:
            error = validate_suppressed(roles, suppressed)
        if error is None:
            error = _offer_constraint_roles_error(roles, subscribe.get("offer_constraints", {}))
        if error is not None:
            self._refuse(sub, error)
            return
        if not framework_id:
            self._add_new_framework(sub, info, roles, suppressed)
            return
        framework = self.frameworks.get(framework_id)
        if framework is None:
            framework = self._recover_framework(info)
        info["user"] = framework.info.get("user")
        info["checkpoint"] = framework.info.get("checkpoint", False)
        error = validate_update(framework.info, info)
        if error is not None:
            self._refuse(sub, error)
            return
        self._update_framework(framework, info, suppressed)
        old = framework.subscription if framework.connected else None
        framework.recovered = False
        framework.reregistered_time = self.clock.now()
        self._connect(framework, sub)
        if old is not None:
            self._send_sub(old, {"type": "ERROR", "error": {"message": "Framework failed over"}})
            self._close_subscription(old)
        for offer in list(framework.offers.values()):
            self._discard_offer(offer, None)
        self._activate(framework)
        self._send_subscribed(framework)

    def _refuse(self, sub: Subscription, message: str) -> None:
        self._send_sub(sub, {"type": "ERROR", "error": {"message": message}})
        sub.stream.close()

    def _add_new_framework(
        self, sub: Subscription, info: dict[str, Any], roles: list[str], suppressed: list[str]
    ) -> None:
        framework_id = f"{self.id}-{self._framework_counter:04d}"
        self._framework_counter += 1
        info["id"] = {"value": framework_id}
        framework = Framework(framework_id, info, roles, capabilities(info))
        framework.registered_time = framework.reregistered_time = self.clock.now()
        self.frameworks[framework_id] = framework
        self.allocator.add_framework(
            framework_id,
            roles,
            suppressed,
            "GPU_RESOURCES" in framework.capabilities,
            min_allocatable_from_info(info),
        )
        self._connect(framework, sub)
        self._activate(framework)
        self._send_subscribed(framework)

    def _recover_framework(self, info: dict[str, Any]) -> Framework:
        framework_id = info["id"]["value"]
        framework = Framework(framework_id, info, framework_roles(info), capabilities(info), recovered=True)
        framework.registered_time = self.clock.now()
        self.frameworks[framework_id] = framework
        self.allocator.add_framework(
            framework_id,
            framework.roles,
            (),
            "GPU_RESOURCES" in framework.capabilities,
            min_allocatable_from_info(info),
        )
        self.allocator.set_active(framework_id, False)
        return framework

    def _update_framework(self, framework: Framework, info: dict[str, Any], suppressed: list[str]) -> None:
        old_roles = set(framework.roles)
        framework.info = info
        framework.roles = framework_roles(info)
        framework.capabilities = capabilities(info)
        for offer in list(framework.offers.values()):
            if offer.role in old_roles - set(framework.roles):
                self._rescind_offer(offer)
        self.allocator.update_framework(
            framework.id,
            framework.roles,
            suppressed,
            "GPU_RESOURCES" in framework.capabilities,
            min_allocatable_from_info(info),
        )

    def _connect(self, framework: Framework, sub: Subscription) -> None:
        if framework.failover_timer is not None:
            framework.failover_timer.cancel()
            framework.failover_timer = None
        sub.framework_id = framework.id
        framework.subscription = sub
        framework.connected = True
        sub.stream.on_close(lambda: self._stream_closed(framework.id, sub))

    def _activate(self, framework: Framework) -> None:
        framework.active = True
        self.allocator.set_active(framework.id, True)
        self.request_allocation()

    def _close_subscription(self, sub: Subscription) -> None:
        if sub.heartbeat is not None:
            sub.heartbeat.cancel()
            sub.heartbeat = None
        sub.stream.close()

    def _stream_closed(self, framework_id: str, sub: Subscription) -> None:
        if sub.heartbeat is not None:
            sub.heartbeat.cancel()
            sub.heartbeat = None
        framework = self.frameworks.get(framework_id)
        if self.dead or framework is None or framework.subscription is not sub:
            return
        self._disconnect(framework)
        timeout = float(framework.info.get("failover_timeout", 0.0))
        token = framework.reregistered_time
        framework.failover_timer = self.clock.call_later(
            timeout, lambda: self._failover_timeout(framework_id, token)
        )

    def _disconnect(self, framework: Framework) -> None:
        if framework.active:
            self._deactivate(framework, rescind=True)
        framework.connected = False
        self.maintenance.forget_framework(framework.id)
        sub, framework.subscription = framework.subscription, None
        if sub is not None:
            self._close_subscription(sub)

    def _deactivate(self, framework: Framework, rescind: bool) -> None:
        framework.active = False
        self.allocator.set_active(framework.id, False)
        for offer in list(framework.offers.values()):
            if rescind:
                self._rescind_offer(offer)
            else:
                self._discard_offer(offer, None)

    def _failover_timeout(self, framework_id: str, token: float) -> None:
        framework = self.frameworks.get(framework_id)
        if self.dead or framework is None or framework.connected:
            return
        if framework.reregistered_time == token:
            self.remove_framework(framework)

    def expire_failover(self, framework_id: str) -> bool:
        framework = self.frameworks.get(framework_id)
        if framework is None or framework.connected:
            return False
        self.remove_framework(framework)
        return True

    def remove_framework(self, framework: Framework) -> None:
        """``Master::removeFramework``: kill everything, move the id to completed."""
        if framework.active:
            self._deactivate(framework, rescind=False)
        for record in self.agents.values():
            self._to_agent(record, lambda agent: agent.shutdown_framework(framework.id))
        message = f"Framework {framework.id} removed"
        for task in list(framework.tasks.values()):
            status = self._master_status(
                task, "TASK_KILLED", message, "REASON_FRAMEWORK_REMOVED", task.agent_id
            )
            self.update_task(task, status["state"])
            self.remove_task(task)
        for task in list(framework.unreachable_tasks.values()):
            task.state = "TASK_KILLED"
            framework.completed_tasks.append(task)
        framework.unreachable_tasks.clear()
        if framework.connected:
            self._disconnect(framework)
        if framework.failover_timer is not None:
            framework.failover_timer.cancel()
        framework.unregistered_time = self.clock.now()
        self.allocator.remove_framework(framework.id)
        del self.frameworks[framework.id]
        self.completed_frameworks[framework.id] = framework
        while len(self.completed_frameworks) > 1000:
            self.completed_frameworks.popitem(last=False)

    # ---------------------------------------------------------------------------------
    # calls

    def handle_call(self, framework: Framework, call: dict[str, Any]) -> tuple[int, str]:
        """Run a validated non-SUBSCRIBE call; returns (HTTP status, body)."""
        kind = call["type"]
        handler = {
            "TEARDOWN": lambda: self.remove_framework(framework),
            "ACCEPT": lambda: self._accept(framework, call["accept"]),
            "DECLINE": lambda: self._decline(framework, call["decline"]),
            "REVIVE": lambda: self._revive(framework, call.get("revive", {})),
            "SUPPRESS": lambda: self._suppress(framework, call.get("suppress", {})),
            "KILL": lambda: self._kill(framework, call["kill"]),
            "ACKNOWLEDGE": lambda: self._acknowledge(framework, call["acknowledge"]),
            "RECONCILE": lambda: self._reconcile(framework, call["reconcile"]),
            "ACCEPT_INVERSE_OFFERS": lambda: self.maintenance.answer(
                framework, call["accept_inverse_offers"], True
            ),
            "DECLINE_INVERSE_OFFERS": lambda: self.maintenance.answer(
                framework, call["decline_inverse_offers"], False
            ),
        }.get(kind)
        if kind == "UPDATE_FRAMEWORK":
            return self._update_framework_call(framework, call["update_framework"])
        if kind == "UNKNOWN":
            return 501, ""
        if handler is not None:
            handler()
        return 202, ""

    def _update_framework_call(self, framework: Framework, body: dict[str, Any]) -> tuple[int, str]:
        info = body["framework_info"]
        config = self.cluster.config
        error = validate_framework_info(
            info,
            role_whitelist=config.roles,
            root_submissions=config.root_submissions,
            completed=False,
        )
        if error is not None:
            return 400, f"Supplied FrameworkInfo is not valid: {error}"
        error = validate_update(framework.info, info)
        if error is not None:
            return 400, f"FrameworkInfo update is not valid: {error}"
        roles = framework_roles(info)
        suppressed = list(body.get("suppressed_roles", []))
        error = validate_suppressed(roles, suppressed) or _offer_constraint_roles_error(
            roles, body.get("offer_constraints", {})
        )
        if error is not None:
            return 400, f"'UpdateFramework' call is not valid: {error}"
        self._update_framework(framework, info, suppressed)
        self.request_allocation()
        return 200, ""

    def _revive(self, framework: Framework, body: dict[str, Any]) -> None:
        roles = body.get("roles", [])
        if self._roles_error(framework, roles, "revive"):
            return
        self.allocator.revive(framework.id, roles)
        self.request_allocation()

    def _suppress(self, framework: Framework, body: dict[str, Any]) -> None:
        roles = body.get("roles", [])
        if self._roles_error(framework, roles, "suppression"):
            return
        self.allocator.suppress(framework.id, roles)

    def _roles_error(self, framework: Framework, roles: list[str], what: str) -> bool:
        for role in roles:
            error = validate_role(role)
            if error is not None:
                log.warning("dropping call: %s role '%s' is invalid: %s", what, role, error)
                return True
            if role not in framework.roles:
                log.warning("dropping call: %s role '%s' is not subscribed", what, role)
                return True
        return False

    # -- offers ---------------------------------------------------------------------------
    def request_allocation(self) -> None:
        if self._allocation_requested or self.dead:
            return
        self._allocation_requested = True
        self._timer(0.0, self._allocate)

    def _allocation_tick(self) -> None:
        self._allocate()
        self.allocation_cycles += 1
        self.maintenance.send_inverse_offers()
        self._timer(self.cluster.config.allocation_interval, self._allocation_tick)

    def _allocate(self) -> None:
        self._allocation_requested = False
        if self.dead:
            return
        held = [(o.framework_id, o.role, o.resources) for o in self.offers.values()]
        held += [
            (t.framework_id, t.role, t.resources)
            for framework in self.frameworks.values()
            for t in framework.tasks.values()
            if not is_terminal(t.state)
        ]
        grants = self.allocator.allocate(self.agents.values(), held)
        batches: dict[str, list[Offer]] = {}
        for framework_id, role, agent_id, resources in grants:
            record = self.agents[agent_id]
            self._offer_counter += 1
            offer = Offer(f"{self.id}-O{self._offer_counter}", framework_id, agent_id, role, resources)
            record.offer(resources)
            self.check_ledger(record)
            record.offers.add(offer.id)
            self.offers[offer.id] = offer
            self.frameworks[framework_id].offers[offer.id] = offer
            timeout = self.cluster.config.offer_timeout
            if timeout is not None:
                offer.timer = self.clock.call_later(timeout, functools.partial(self._offer_timeout, offer))
            batches.setdefault(framework_id, []).append(offer)
        for framework_id, offers in batches.items():
            framework = self.frameworks[framework_id]
            pre_refinement = "RESERVATION_REFINEMENT" not in framework.capabilities
            multi_role = "MULTI_ROLE" in framework.capabilities
            event = {
                "type": "OFFERS",
                "offers": {"offers": [self._offer_json(o, pre_refinement, multi_role) for o in offers]},
            }
            self.send(framework, event)

    def _offer_json(self, offer: Offer, pre_refinement: bool, multi_role: bool = True) -> dict[str, Any]:
        agent = self.agents[offer.agent_id].agent
        port = self.cluster.agent_port
        # Per MESOS-8237 the master strips ``allocation_info`` from the offer and its resources
        # for a framework without MULTI_ROLE (upstream master.cpp, ``Master::offer``); found on
        # the real master (issue 21), where the emulator once sent it to every framework.
        body = {
            "id": {"value": offer.id},
            "framework_id": {"value": offer.framework_id},
            "agent_id": {"value": offer.agent_id},
            "hostname": agent.hostname,
            "url": {
                "scheme": "http",
                "address": {"hostname": agent.hostname, "ip": self.cluster.config.host_ip, "port": port},
                "path": f"/{agent.pid_path}",
            },
            "resources": offer.resources.to_json(offer.role if multi_role else None, pre_refinement),
            "attributes": agent.attributes,
            "allocation_info": {"role": offer.role},
        }
        window = self.maintenance.window_of(self.agents[offer.agent_id])
        if window is not None:  # a machine in Draining mode: its offers say when it goes
            body["unavailability"] = window
        if not multi_role:
            del body["allocation_info"]
        return body

    def _offer_timeout(self, offer: Offer) -> None:
        if offer.id in self.offers and not self.dead:
            self._rescind_offer(offer)

    def _remove_offer(self, offer: Offer) -> None:
        self.offers.pop(offer.id, None)
        framework = self.frameworks.get(offer.framework_id)
        if framework is not None:
            framework.offers.pop(offer.id, None)
        record = self.agents.get(offer.agent_id)
        if record is not None:
            record.offers.discard(offer.id)
        if offer.timer is not None:
            offer.timer.cancel()

    def _recover_offer(self, offer: Offer, refuse_seconds: float | None, install: bool) -> None:
        self._remove_offer(offer)
        record = self.agents.get(offer.agent_id)
        if record is not None:
            record.unoffer(offer.resources)
            self.check_ledger(record)
        if install:
            self.allocator.refuse(
                offer.framework_id, offer.role, offer.agent_id, offer.resources, refuse_seconds
            )

    def _rescind_offer(self, offer: Offer) -> None:
        framework = self.frameworks.get(offer.framework_id)
        self._recover_offer(offer, None, install=False)
        if framework is not None:
            self.send(framework, {"type": "RESCIND", "rescind": {"offer_id": {"value": offer.id}}})

    def _discard_offer(self, offer: Offer, filters: dict[str, Any] | None) -> None:
        refuse = None if filters is None else filters.get("refuse_seconds")
        self._recover_offer(offer, refuse, install=filters is not None)

    def _decline(self, framework: Framework, body: dict[str, Any]) -> None:
        filters = body.get("filters", {})
        for offer_id in body.get("offer_ids", []):
            offer = self.offers.get(offer_id["value"])
            if offer is not None:
                self._discard_offer(offer, filters)

    # -- accept ----------------------------------------------------------------------------
    def _accept(self, framework: Framework, body: dict[str, Any]) -> None:
        offer_ids = [o["value"] for o in body.get("offer_ids", [])]
        operations = body.get("operations", [])
        filters = body.get("filters", {})
        error = (
            "No offers specified"
            if not offer_ids
            else validate_offer_ids(offer_ids, self.offers, framework.id)
        )
        if error is not None:
            for offer_id in offer_ids:
                offer = self.offers.get(offer_id)
                if offer is not None:
                    self._discard_offer(offer, None)
            state = "TASK_DROPPED" if framework.partition_aware else "TASK_LOST"
            for operation in operations:
                for task in _operation_tasks(operation):
                    self._send_master_update(
                        framework,
                        task,
                        state,
                        f"Task launched with invalid offers: {error}",
                        "REASON_INVALID_OFFERS",
                    )
                if not _operation_tasks(operation):
                    self._drop_operation(
                        framework, operation, f"Operation attempted with invalid offers: {error}"
                    )
            return
        offers = [self.offers[offer_id] for offer_id in offer_ids]
        agent_id, role = offers[0].agent_id, offers[0].role
        record = self.agents[agent_id]
        offered = Resources()
        for offer in offers:
            offered = offered + offer.resources
            self._remove_offer(offer)
        remaining = offered.copy()
        for operation in operations:
            remaining = self._apply_operation(framework, operation, record, role, remaining)
        if remaining:
            record.unoffer(remaining)
            self.allocator.refuse(framework.id, role, agent_id, remaining, filters.get("refuse_seconds"))
        self.check_ledger(record)

    def _apply_operation(
        self,
        framework: Framework,
        operation: dict[str, Any],
        record: AgentRecord,
        role: str,
        remaining: Resources,
    ) -> Resources:
        kind = operation.get("type", "UNKNOWN")
        if kind == "LAUNCH_GROUP":
            for task in _operation_tasks(operation):
                self._send_master_update(
                    framework,
                    task,
                    "TASK_ERROR",
                    "LAUNCH_GROUP is not supported by the emulator",
                    "REASON_TASK_GROUP_INVALID",
                )
            return remaining
        if kind in ("RESERVE", "UNRESERVE"):
            return self._reservation_operation(framework, operation, record, role, remaining)
        if kind != "LAUNCH":
            self._drop_operation(framework, operation, "Operation not supported by the emulator")
            return remaining
        tasks = operation.get("launch", {}).get("task_infos", [])
        if "id" in operation:
            for task in tasks:
                self._send_master_update(
                    framework,
                    task,
                    "TASK_ERROR",
                    "The `id` field cannot be set on LAUNCH operations",
                    "REASON_TASK_INVALID",
                )
            return remaining
        for task in tasks:
            ctx = TaskContext(
                framework.tasks, framework.unreachable_tasks, record.id, role, remaining, framework.id
            )
            error, resources = validate_task(task, ctx)
            if error is not None:
                self._send_master_update(framework, task, "TASK_ERROR", error, "REASON_TASK_INVALID")
                continue
            remaining = self._launch(
                framework, record, role, task, consumed=resources.plain, remaining=remaining
            )
        return remaining

    def _reservation_operation(
        self,
        framework: Framework,
        operation: dict[str, Any],
        record: AgentRecord,
        role: str,
        remaining: Resources,
    ) -> Resources:
        """RESERVE / UNRESERVE (dynamic reservations): offered resources change their
        reservation on the agent for good; later operations of the same ACCEPT see them so."""
        kind = operation["type"]
        unreserved, reserved = Resources(), Resources()
        resources = operation.get(kind.lower(), {}).get("resources", [])
        if not resources:
            self._drop_operation(framework, operation, f"Invalid {kind} Operation: no resources")
            return remaining
        for resource in resources:
            reserved_to, _ = reservation_of(resource)
            value = _operation_value(resource)
            if reserved_to is None or value is None:
                self._drop_operation(framework, operation, f"Invalid {kind} Operation: resource not reserved")
                return remaining
            if reserved_to != role:
                message = (
                    f"Invalid {kind} Operation: A reservation for role '{reserved_to}' cannot be "
                    f"made or removed by resources allocated to role '{role}'"
                )
                self._drop_operation(framework, operation, message)
                return remaining
            unreserved = unreserved + Resources({resource["name"]: value})
            reserved = reserved + Resources(
                {resource_key(resource["name"], reserved_to, dynamic=True): value}
            )
        source, target = (unreserved, reserved) if kind == "RESERVE" else (reserved, unreserved)
        if not remaining.contains(source):
            self._drop_operation(
                framework, operation, f"Invalid {kind} Operation: {source} is not available in {remaining}"
            )
            return remaining
        record.convert(source, target)
        record.agent.resources = record.total.copy()
        self._operation_finished(framework, operation)
        return remaining - source + target

    def _operation_finished(self, framework: Framework, operation: dict[str, Any]) -> None:
        if "id" not in operation:
            return
        status = {"operation_id": operation["id"], "state": "OPERATION_FINISHED"}
        self.send(
            framework, {"type": "UPDATE_OPERATION_STATUS", "update_operation_status": {"status": status}}
        )

    def _launch(
        self,
        framework: Framework,
        record: AgentRecord,
        role: str,
        info: dict[str, Any],
        *,
        consumed: Resources,
        remaining: Resources,
    ) -> Resources:
        task_id = info["task_id"]["value"]
        if "health_check" in info and "type" not in info["health_check"]:
            check = info["health_check"]
            if "command" in check and "http" not in check:
                check["type"] = "COMMAND"
            elif "http" in check and "command" not in check:
                check["type"] = "HTTP"
        task = Task(
            task_id,
            framework.id,
            record.id,
            info.get("name", ""),
            role,
            consumed,
            info,
            executor_id=info.get("executor", {}).get("executor_id", {}).get("value"),
        )
        framework.tasks[task_id] = task
        record.tasks[(framework.id, task_id)] = task
        record.allocate(framework.id, consumed)
        self._to_agent(record, lambda agent: agent.run_task(framework.info, info))
        return remaining - consumed

    def _drop_operation(self, framework: Framework, operation: dict[str, Any], message: str) -> None:
        if "id" not in operation:
            return
        self.send(
            framework,
            {
                "type": "UPDATE_OPERATION_STATUS",
                "update_operation_status": {
                    "status": {
                        "operation_id": operation["id"],
                        "state": "OPERATION_ERROR",
                        "message": message,
                    }
                },
            },
        )

    # -- tasks and updates ---------------------------------------------------------------
    def _master_status(
        self,
        task: Task,
        state: str,
        message: str,
        reason: str,
        agent_id: str | None,
    ) -> dict[str, Any]:
        return make_status(
            task.task_id,
            state,
            source="SOURCE_MASTER",
            wall=self.clock.wall(),
            agent_id=agent_id,
            message=message,
            reason=reason,
            executor_id=task.executor_id,
        )

    def _send_master_update(
        self, framework: Framework, task_info: dict[str, Any], state: str, message: str, reason: str
    ) -> None:
        agent_id = task_info.get("agent_id", {}).get("value")
        status = make_status(
            task_info["task_id"]["value"],
            state,
            source="SOURCE_MASTER",
            wall=self.clock.wall(),
            agent_id=agent_id,
            message=message,
            reason=reason,
        )
        self.send(framework, self._status_update_event(status))

    def forward(self, framework: Framework, status: dict[str, Any]) -> None:
        """``Master::forward``: send an update to a connected framework."""
        self.send(framework, self._status_update_event(status))

    def update_task(self, task: Task, latest_state: str) -> None:
        """``Master::updateTask``: track the latest state, free resources once terminal."""
        if is_terminal(task.state):
            return
        was_live = task.state != "TASK_UNREACHABLE"
        task.state = latest_state
        if was_live and (is_terminal(latest_state) or latest_state == "TASK_UNREACHABLE"):
            record = self.agents.get(task.agent_id)
            if record is not None:
                # Like the hierarchical allocator, recovering resources does not trigger an
                # allocation (MESOS-3078): they are offered at the next interval.
                record.free(task.framework_id, task.resources)
                self.check_ledger(record)

    def remove_task(self, task: Task, unreachable: bool = False) -> None:
        if not is_terminal(task.state) and task.state != "TASK_UNREACHABLE":
            self.update_task(task, "TASK_LOST")
        record = self.agents.get(task.agent_id)
        if record is not None:
            record.tasks.pop((task.framework_id, task.task_id), None)
        framework = self.frameworks.get(task.framework_id)
        if framework is None:
            return
        framework.tasks.pop(task.task_id, None)
        if unreachable:
            framework.unreachable_tasks[task.task_id] = task
            while len(framework.unreachable_tasks) > self.cluster.config.max_unreachable_tasks:
                framework.unreachable_tasks.popitem(last=False)
        else:
            framework.completed_tasks.append(task)

    def agent_status_update(
        self, agent: Any, framework_id: str, status: dict[str, Any], latest_state: str
    ) -> None:
        """An update arrives from an agent's status update manager."""
        if self.dead:
            return
        record = self.agents.get(agent.id)
        if record is None:
            return
        task = record.tasks.get((framework_id, status["task_id"]["value"]))
        framework = self.frameworks.get(framework_id)
        if framework is not None and framework.connected:
            delay = self.cluster.faults.on_update(framework_id, status)
            if delay is not None and delay > 0:
                self._timer(delay, lambda: self._forward_late(framework_id, status))
            elif delay is not None:
                self.forward(framework, status)
        if task is not None:
            self.update_task(task, latest_state)
            if "uuid" in status:
                # ``Master::updateTask`` sets these on receipt, whether or not the framework is
                # connected (or the update reaches it): a reconciliation answers this state.
                task.status_update_state = status["state"]
                task.status_update_uuid = status["uuid"]
            self.maintenance.progress(record)

    def _forward_late(self, framework_id: str, status: dict[str, Any]) -> None:
        framework = self.frameworks.get(framework_id)
        if framework is not None and framework.connected:
            self.forward(framework, status)

    def _kill(self, framework: Framework, body: dict[str, Any]) -> None:
        task_id = body["task_id"]["value"]
        agent_id = body.get("agent_id", {}).get("value")
        task = framework.tasks.get(task_id)
        if task is None:
            entry: dict[str, Any] = {"task_id": {"value": task_id}}
            if agent_id is not None:
                entry["agent_id"] = {"value": agent_id}
            self._reconcile(framework, {"tasks": [entry]})
            return
        if agent_id is not None and agent_id != task.agent_id:
            return
        record = self.agents[task.agent_id]
        record.killed_tasks.add((framework.id, task_id))
        if record.connected:
            policy = body.get("kill_policy")
            self._to_agent(record, lambda agent: agent.kill_task(framework.id, task_id, policy))

    def _acknowledge(self, framework: Framework, body: dict[str, Any]) -> None:
        agent_id = body["agent_id"]["value"]
        task_id = body["task_id"]["value"]
        uuid = body["uuid"]
        record = self.agents.get(agent_id)
        if record is None or not record.connected:
            return
        task = record.tasks.get((framework.id, task_id))
        if task is not None:
            if task.status_update_state is None:
                return
            if is_terminal(task.status_update_state) and task.status_update_uuid == uuid:
                self.remove_task(task)
        self._to_agent(record, lambda agent: agent.acknowledge(framework.id, task_id, uuid))

    def _reconcile(self, framework: Framework, body: dict[str, Any]) -> None:
        entries = body.get("tasks", [])
        if not entries:
            for task in list(framework.tasks.values()):
                self._send_reconciled(framework, task)
            return
        pa = framework.partition_aware
        for entry in entries:
            task_id = entry["task_id"]["value"]
            agent_id = entry.get("agent_id", {}).get("value")
            known = framework.tasks.get(task_id)
            if known is not None:
                self._send_reconciled(framework, known)
                continue
            if (agent_id is not None and agent_id in self.recovered) or (agent_id is None and self.recovered):
                continue  # no reply while agents are recovering
            unreachable_time = None
            if agent_id is not None and agent_id in self.agents:
                state = "TASK_GONE" if pa else "TASK_LOST"
                message = "Reconciliation: Task is unknown to the agent"
            elif agent_id is not None and agent_id in self.registry.unreachable:
                state = "TASK_UNREACHABLE" if pa else "TASK_LOST"
                message = "Reconciliation: Task is unreachable"
                unreachable_time = self.registry.unreachable[agent_id]
            elif agent_id is not None and agent_id in self.registry.gone:
                state = "TASK_GONE_BY_OPERATOR" if pa else "TASK_LOST"
                message = "Reconciliation: Task is gone"
            else:
                state = "TASK_UNKNOWN" if pa else "TASK_LOST"
                message = "Reconciliation: Task is unknown"
            status = make_status(
                task_id,
                state,
                source="SOURCE_MASTER",
                wall=self.clock.wall(),
                agent_id=agent_id,
                message=message,
                reason="REASON_RECONCILIATION",
                unreachable_time=unreachable_time,
            )
            self.send(framework, self._status_update_event(status))

    def _send_reconciled(self, framework: Framework, task: Task) -> None:
        state = task.status_update_state or task.state
        status = self._master_status(
            task, state, "Reconciliation: Latest task state", "REASON_RECONCILIATION", task.agent_id
        )
        self.send(framework, self._status_update_event(status))

    # ---------------------------------------------------------------------------------
    # shutdown

    def shutdown(self) -> None:
        """The master process goes away: close every stream, stop every timer."""
        self.dead = True
        for timer in self._timers:
            timer.cancel()
        for framework in self.frameworks.values():
            if framework.failover_timer is not None:
                framework.failover_timer.cancel()
            sub = framework.subscription
            if sub is not None:
                if sub.heartbeat is not None:
                    sub.heartbeat.cancel()
                sub.stream.abort()
        for offer in self.offers.values():
            if offer.timer is not None:
                offer.timer.cancel()
        for record in self.agents.values():
            if record.reregister_timer is not None:
                record.reregister_timer.cancel()


def _operation_value(resource: dict[str, Any]) -> int | tuple[tuple[int, int], ...] | None:
    if resource.get("type") == "SCALAR":
        return to_fixed(resource["scalar"]["value"])
    if resource.get("type") == "RANGES":
        return coalesce((r["begin"], r["end"]) for r in resource["ranges"].get("range", []))
    return None


def _operation_tasks(operation: dict[str, Any]) -> list[dict[str, Any]]:
    kind = operation.get("type")
    if kind == "LAUNCH":
        return list(operation.get("launch", {}).get("task_infos", []))
    if kind == "LAUNCH_GROUP":
        return list(operation.get("launch_group", {}).get("task_group", {}).get("tasks", []))
    return []


def _offer_constraint_roles_error(roles: list[str], constraints: dict[str, Any]) -> str | None:
    for role in constraints.get("role_constraints", {}):
        if role not in roles:
            return (
                f"Offer constraints specify `role_constraints` for a role '{role}'not "
                "contained in the set of roles"
            )
    return None
