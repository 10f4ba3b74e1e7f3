"""The master's handling of agents: registration, health, partitions and removal.

Owns the agent half of ``src/master/master.cpp``:

* first registration (admitted into the registry), re-registration of a known agent
  (reconcile tasks the agent no longer has — it answers ``TASK_LOST``/``TASK_DROPPED``
  with a UUID — and re-send kills), re-admission of an unreachable or recovered agent
  (its tasks reappear; connected frameworks get ``REASON_AGENT_REREGISTERED`` updates
  with the current state unless the master is recovering);
* socket close (``disconnect``): offers rescinded, non-checkpointing frameworks' tasks
  ``TASK_LOST``/``REASON_AGENT_DISCONNECTED``, removal after the re-registration timeout;
* health checks: ``max_agent_ping_timeouts`` missed pings of ``agent_ping_timeout`` mark
  the agent unreachable: ``TASK_UNREACHABLE`` (partition-aware) or ``TASK_LOST`` with
  ``REASON_AGENT_REMOVED`` and ``unreachable_time``, RESCIND of its offers, and a
  ``FAILURE{agent_id}`` for every connected framework;
* ``mark_gone`` (``TASK_GONE_BY_OPERATOR`` / ``TASK_LOST``), and agents that do not come
  back after a master restart;
* the operator API's ``GET_AGENTS`` listing (what each agent has, allocated and offered).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from .model import AgentRecord, Framework, Registry, Task
from .status import is_terminal, make_status
from .validation import normalise_task_resources

if TYPE_CHECKING:
    from .agent import Agent, TaskReport
    from .clock import Handle
    from .emulator import Cluster
    from .model import Offer

log = logging.getLogger("mesos_emulator.master")


class AgentLifecycle:
    """Base of ``Master``; the framework-side methods it calls are defined there."""

    frameworks: dict[str, Framework]
    completed_frameworks: dict[str, Framework]
    offers: dict[str, Offer]

    def __init__(self, cluster: Cluster, master_id: str, recovered_agents: set[str]) -> None:
        self.cluster = cluster
        self.id = master_id
        self.clock = cluster.clock
        self.registry: Registry = cluster.registry
        self.agents: dict[str, AgentRecord] = {}
        self.recovered: set[str] = set(recovered_agents)
        self.dead = False
        self._timers: set[Handle] = set()
        self._timer(cluster.config.agent_ping_timeout, self._ping_tick)
        if self.recovered:
            self._timer(cluster.config.agent_reregister_timeout, self._recovered_timeout)

    # -- interface implemented by Master ----------------------------------------------
    def send(self, framework: Framework, event: dict[str, Any]) -> bool:
        raise NotImplementedError

    def forward(self, framework: Framework, status: dict[str, Any]) -> None:
        raise NotImplementedError

    def update_task(self, task: Task, latest_state: str) -> None:
        raise NotImplementedError

    def remove_task(self, task: Task, unreachable: bool = False) -> None:
        raise NotImplementedError

    def request_allocation(self) -> None:
        raise NotImplementedError

    def _rescind_offer(self, offer: Offer) -> None:
        raise NotImplementedError

    def _recover_framework(self, info: dict[str, Any]) -> Framework:
        raise NotImplementedError

    # -- plumbing ---------------------------------------------------------------------
    def _timer(self, delay: float, callback: Callable[[], None]) -> Handle:
        holder: list[Handle] = []

        def fire() -> None:
            if holder:
                self._timers.discard(holder[0])
            if not self.dead:
                callback()

        handle = self.clock.call_later(delay, fire)
        holder.append(handle)
        self._timers.add(handle)
        return handle

    def _to_agent(self, record: AgentRecord, message: Callable[[Agent], None]) -> None:
        """Send a message to an agent; it is lost if the agent is dead or cut off."""
        self.cluster.loop.call_soon(self._deliver, record.agent, message)

    def _deliver(self, agent: Agent, message: Callable[[Agent], None]) -> None:
        if agent.alive and agent.link_up and not self.dead:
            message(agent)

    def check_ledger(self, record: AgentRecord) -> None:
        error = record.ledger_error()
        if error is not None:
            log.error("invariant violated: %s", error)
            self.cluster.violations.append(error)

    def _failure_to_all(self, agent_id: str) -> None:
        event = {"type": "FAILURE", "failure": {"agent_id": {"value": agent_id}}}
        for framework in list(self.frameworks.values()):
            if framework.connected:
                self.send(framework, event)

    # -- the operator API's GET_AGENTS -------------------------------------------------
    def agents_listing(self) -> list[dict[str, Any]]:
        """``Response.GetAgents.agents``: every registered agent (connected or not) with
        its ``agent_info`` and total, allocated and offered resources."""
        out = []
        for record in self.agents.values():
            agent = record.agent
            used = record.used_total.to_json(None, pre_refinement=False, endpoint=True)
            out.append(
                {
                    "agent_info": {
                        "id": {"value": agent.id},
                        "hostname": agent.hostname,
                        "port": self.cluster.agent_port,
                        "resources": record.total.to_json(None, pre_refinement=False, endpoint=True),
                        "attributes": agent.attributes,
                    },
                    "active": record.connected and record.active,
                    "deactivated": not record.active or record.deactivated,
                    "pid": f"{agent.pid_path}@{self.cluster.config.host_ip}:{self.cluster.agent_port}",
                    "version": self.cluster.config.version,
                    "total_resources": record.total.to_json(None, pre_refinement=False, endpoint=True),
                    "allocated_resources": used,
                    "offered_resources": record.offered.to_json(None, pre_refinement=False, endpoint=True),
                    **self._drain_listing(record.id),
                }
            )
        return out

    def _drain_listing(self, agent_id: str) -> dict[str, Any]:
        info = self.registry.draining.get(agent_id)
        return {} if info is None else {"drain_info": {"state": info["state"], "config": info["config"]}}

    # -- registration -----------------------------------------------------------------
    def agent_registers(self, agent: Agent) -> None:
        if self.dead:
            return
        if agent.id in self.registry.gone:
            self.cluster.loop.call_soon(agent.die)
            return
        record = self.agents.get(agent.id)
        if record is not None:
            self._reregister_known(record)
        elif agent.id in self.registry.admitted:
            self._readmit(agent)
        else:
            self.registry.admitted[agent.id] = agent
            self.agents[agent.id] = AgentRecord(agent, agent.resources.copy())
            agent.on_registered()
        self.request_allocation()

    def _reregister_known(self, record: AgentRecord) -> None:
        agent = record.agent
        if record.reregister_timer is not None:
            record.reregister_timer.cancel()
            record.reregister_timer = None
        record.connected = record.active = True
        record.ping_misses = 0
        reports = {(r.framework_id, r.info["task_id"]["value"]): r for r in agent.report()}
        agent.on_registered()
        unknown: dict[str, list[str]] = {}
        for key in record.tasks:
            if key not in reports:
                unknown.setdefault(key[0], []).append(key[1])
        for fid, task_ids in unknown.items():
            framework = self.frameworks.get(fid)
            info = framework.info if framework is not None else {}
            self._to_agent(record, _call("reconcile_unknown", fid, info, task_ids))
        for key, report in reports.items():
            if key not in record.tasks and not is_terminal(report.state):
                self._adopt(record, report, "Agent reregistered", notify=True)
            if key in record.killed_tasks and not is_terminal(report.state):
                self._to_agent(record, _call("kill_task", key[0], key[1], None))
        self._shutdown_completed(record, reports.values())

    def _readmit(self, agent: Agent) -> None:
        was_recovered = agent.id in self.recovered
        message = (
            "Unreachable agent re-reregistered"
            if agent.id in self.registry.unreachable
            else "Unknown agent reregistered"
        )
        record = AgentRecord(agent, agent.resources.copy())
        self.agents[agent.id] = record
        reports = agent.report()
        for report in reports:
            if report.framework_id in self.completed_frameworks:
                continue
            self._adopt(record, report, message, notify=not was_recovered)
        for framework in self.frameworks.values():
            stale = [t for t, task in framework.unreachable_tasks.items() if task.agent_id == agent.id]
            for task_id in stale:
                del framework.unreachable_tasks[task_id]
        self.recovered.discard(agent.id)
        self.registry.unreachable.pop(agent.id, None)
        agent.on_registered()
        self._shutdown_completed(record, reports)

    def _shutdown_completed(self, record: AgentRecord, reports: Any) -> None:
        for fid in {report.framework_id for report in reports}:
            if fid in self.completed_frameworks:
                self._to_agent(record, _call("shutdown_framework", fid))

    def _adopt(self, record: AgentRecord, report: TaskReport, message: str, notify: bool) -> None:
        """Add a task an agent reports to the master's books."""
        fid = report.framework_id
        framework = self.frameworks.get(fid)
        if framework is None:
            if not report.framework_info:
                return
            framework = self._recover_framework(dict(report.framework_info))
        info = report.info
        task_id = info["task_id"]["value"]
        framework.unreachable_tasks.pop(task_id, None)
        role = _task_role(info, framework.roles[0] if framework.roles else "*")
        resources, _ = normalise_task_resources([dict(r) for r in info.get("resources", [])], role)
        task = Task(
            task_id,
            fid,
            record.id,
            info.get("name", ""),
            role,
            resources.plain,
            info,
            state=report.state,
            status_update_state=report.status_update_state,
            status_update_uuid=report.status_update_uuid,
            executor_id=info.get("executor", {}).get("executor_id", {}).get("value"),
        )
        framework.tasks[task_id] = task
        record.tasks[(fid, task_id)] = task
        if not is_terminal(task.state):
            record.allocate(fid, task.resources, from_offer=False)
            self.check_ledger(record)
        if notify and framework.connected:
            status = make_status(
                task_id,
                report.state,
                source="SOURCE_MASTER",
                wall=self.clock.wall(),
                agent_id=record.id,
                message=message,
                reason="REASON_AGENT_REREGISTERED",
                executor_id=task.executor_id,
            )
            self.forward(framework, status)

    # -- disconnection and health ------------------------------------------------------
    def agent_exited(self, agent: Agent) -> None:
        """The agent's socket closed (agent process died or its connection broke)."""
        record = self.agents.get(agent.id)
        if self.dead or record is None or not record.connected:
            return
        record.connected = record.active = False
        for offer_id in list(record.offers):
            self._rescind_offer(self.offers[offer_id])
        for (fid, _task_id), task in list(record.tasks.items()):
            framework = self.frameworks.get(fid)
            if framework is None or framework.info.get("checkpoint", False):
                continue
            status = make_status(
                task.task_id,
                "TASK_LOST",
                source="SOURCE_MASTER",
                wall=self.clock.wall(),
                agent_id=record.id,
                message=f"Agent {record.hostname} disconnected",
                reason="REASON_AGENT_DISCONNECTED",
                executor_id=task.executor_id,
            )
            self.update_task(task, "TASK_LOST")
            self.remove_task(task)
            if framework.connected:
                self.forward(framework, status)
        timeout = self.cluster.config.agent_reregister_timeout
        record.reregister_timer = self._timer(timeout, lambda: self._reregister_timeout(record))

    def _reregister_timeout(self, record: AgentRecord) -> None:
        if self.agents.get(record.id) is record and not record.connected:
            timeout = self.cluster.config.agent_reregister_timeout
            self.mark_unreachable(
                record, f"agent did not reregister within {timeout:g}secs after disconnecting"
            )

    def _ping_tick(self) -> None:
        config = self.cluster.config
        for record in list(self.agents.values()):
            if not record.connected:
                continue
            agent = record.agent
            if agent.alive and agent.link_up:
                record.ping_misses = 0
                continue
            record.ping_misses += 1
            if record.ping_misses >= config.max_agent_ping_timeouts:
                self.mark_unreachable(record, "health check timed out")
        self._timer(config.agent_ping_timeout, self._ping_tick)

    def mark_unreachable(self, record: AgentRecord, message: str) -> None:
        if self.agents.get(record.id) is not record:
            return
        wall = self.clock.wall()
        self.registry.unreachable[record.id] = wall
        self._remove_agent(record, message, wall)

    def _remove_agent(self, record: AgentRecord, message: str, unreachable_time: float | None) -> None:
        for (fid, _task_id), task in list(record.tasks.items()):
            framework = self.frameworks.get(fid)
            if framework is None:
                continue
            if not framework.partition_aware:
                state, reason = "TASK_LOST", "REASON_AGENT_REMOVED"
            elif unreachable_time is not None:
                state, reason = "TASK_UNREACHABLE", "REASON_AGENT_REMOVED"
            else:
                state, reason = "TASK_GONE_BY_OPERATOR", "REASON_AGENT_REMOVED_BY_OPERATOR"
            status = make_status(
                task.task_id,
                state,
                source="SOURCE_MASTER",
                wall=self.clock.wall(),
                agent_id=record.id,
                message=message,
                reason=reason,
                executor_id=task.executor_id,
                unreachable_time=unreachable_time,
            )
            if unreachable_time is not None:
                task.unreachable_time = unreachable_time
            self.update_task(task, "TASK_UNREACHABLE" if unreachable_time is not None else state)
            self.remove_task(task, unreachable=unreachable_time is not None)
            if framework.connected:
                self.forward(framework, status)
        for offer_id in list(record.offers):
            self._rescind_offer(self.offers[offer_id])
        if record.reregister_timer is not None:
            record.reregister_timer.cancel()
        del self.agents[record.id]
        self._failure_to_all(record.id)

    def mark_gone(self, agent_id: str) -> None:
        if agent_id in self.registry.gone:
            return
        self.registry.gone[agent_id] = self.clock.wall()
        record = self.agents.get(agent_id)
        if record is not None:
            self._to_agent(record, lambda agent: agent.die())
            self._remove_agent(record, "Agent has been marked gone", None)
            return
        if agent_id in self.recovered:
            self.recovered.discard(agent_id)
            return
        self.registry.unreachable.pop(agent_id, None)
        for framework in list(self.frameworks.values()):
            for task_id, task in list(framework.unreachable_tasks.items()):
                if task.agent_id != agent_id:
                    continue
                if framework.partition_aware:
                    state, reason = "TASK_GONE_BY_OPERATOR", "REASON_AGENT_REMOVED_BY_OPERATOR"
                else:
                    state, reason = "TASK_LOST", "REASON_AGENT_REMOVED"
                task.state = state
                del framework.unreachable_tasks[task_id]
                framework.completed_tasks.append(task)
                if framework.connected:
                    status = make_status(
                        task_id,
                        state,
                        source="SOURCE_MASTER",
                        wall=self.clock.wall(),
                        agent_id=agent_id,
                        message="Agent has been marked gone",
                        reason=reason,
                        executor_id=task.executor_id,
                    )
                    self.forward(framework, status)

    def _recovered_timeout(self) -> None:
        for agent_id in sorted(self.recovered):
            self.registry.unreachable[agent_id] = self.clock.wall()
            self._failure_to_all(agent_id)
        self.recovered.clear()


def _call(method: str, *args: Any) -> Callable[[Agent], None]:
    """A message for ``_to_agent``: call ``agent.<method>(*args)`` on delivery."""

    def deliver(agent: Agent) -> None:
        getattr(agent, method)(*args)

    return deliver


def _task_role(info: dict[str, Any], default: str) -> str:
    for resource in info.get("resources", []):
        role = resource.get("allocation_info", {}).get("role")
        if role is not None:
            return str(role)
    return default
