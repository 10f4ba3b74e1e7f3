"""Emulated agents: task launch, kill, sandboxes and the status update manager.

Owns the agent side of the cluster — what survives a master restart and keeps running
through a partition:

* ``run_task`` / ``kill_task`` / ``shutdown_framework`` as the master asks, using the
  runners of ``executor`` (host processes, simulations) or, with ``containerizers``, the
  composing containerizer's choice and the container runners of ``containers``; a task whose
  user (``CommandInfo.user``, else the framework's) the agent does not know is dropped as a
  real agent with ``--switch_user`` drops it; sandboxes under ``<root>/slaves/<agent>/frameworks/<fw>/
  executors/<task>/runs/<container>`` with a ``latest`` link, like a real agent;
* the per-task status update stream: every update gets a fresh v4 UUID, only the head
  is forwarded (with ``latest_state``), it is re-sent with exponential backoff until the
  framework acknowledges that UUID, then the next one goes; streams are flushed when the
  agent re-registers;
* the report an agent sends when it (re-)registers, and the answer to master
  reconciliation of tasks it does not know (``TASK_LOST`` / ``TASK_DROPPED`` from
  ``SOURCE_AGENT`` with a UUID).

Messages to the master only get through while the agent is alive, its link is up and it
is registered with the current master; anything else is lost, as on a real network.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import functools
import logging
import os
import pwd
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from .clock import Clock, Handle
from .containers import (
    DockerCli,
    DockerTaskRunner,
    MesosImageTaskRunner,
    default_docker_socket,
    prepare_docker,
    prepare_mesos,
)
from .docker_run import container_name, containerizer_for, mesos_image_argv
from .executor import (
    LaunchSpec,
    ProcessRunner,
    Runner,
    SimulatedRunner,
    container_launch_error,
    fetch_uris,
    labels_of,
)
from .health import REASON as HEALTH_REASON
from .health import HealthChecker
from .resources import Resources
from .status import is_terminal, make_status, new_uuid, new_uuid_string
from .validation import capabilities

if TYPE_CHECKING:
    from .config import EmulatorConfig
    from .master import Master

log = logging.getLogger("mesos_emulator.agent")


class AgentHost(Protocol):
    """What an agent needs from the emulated cluster."""

    clock: Clock
    loop: asyncio.AbstractEventLoop
    config: EmulatorConfig
    sandbox_root: Path

    @property
    def agent_port(self) -> int: ...

    @property
    def master(self) -> Master | None: ...

    def track_process(self, pid: int, alive: bool) -> None: ...


def known_users(configured: frozenset[str] | None) -> frozenset[str]:
    """The users tasks may run as on an agent: the configured set, else this machine's."""
    if configured is not None:
        return configured
    return _machine_users()


@functools.cache
def _machine_users() -> frozenset[str]:
    return frozenset(entry.pw_name for entry in pwd.getpwall())


@dataclass
class UpdateStream:
    framework_id: str
    task_id: str
    pending: collections.deque[dict[str, Any]] = field(default_factory=collections.deque)
    latest_state: str = "TASK_STAGING"
    timer: Handle | None = None
    backoff: float = 0.0
    done: bool = False


@dataclass
class AgentTask:
    framework_id: str
    task_id: str
    info: dict[str, Any]
    container_id: str
    sandbox: Path
    state: str = "TASK_STAGING"
    runner: Runner | None = None
    kill_requested: bool = False
    kill_policy: dict[str, Any] | None = None
    simulated: bool = False
    # with EmulatorConfig.containerizers: which one launches it, and what preparing found
    containerizer: str | None = None
    image_config: dict[str, Any] | None = None
    mounts: list[tuple[str, str, bool]] = field(default_factory=list)
    ip_address: str | None = None  # the container's own, once a runner reported one
    health: HealthChecker | None = None  # the executor's health checks (health.py)

    @property
    def executor_id(self) -> str:
        return str(self.info.get("executor", {}).get("executor_id", {}).get("value", self.task_id))


@dataclass
class TaskReport:
    """One task as the agent reports it when (re-)registering."""

    framework_id: str
    framework_info: dict[str, Any]
    info: dict[str, Any]
    state: str
    status_update_state: str | None
    status_update_uuid: bytes | None


class _Events:
    def __init__(self, agent: Agent, task: AgentTask) -> None:
        self.agent = agent
        self.task = task

    def running(self, ip_address: str | None = None) -> None:
        self.agent._executor_update(self.task, "TASK_RUNNING", ip_address=ip_address)

    def exited(self, state: str, message: str, reason: str | None) -> None:
        checker = self.task.health
        if checker is not None:
            checker.stop()
        healthy = False if checker is not None and checker.unhealthy else None
        self.agent._executor_update(self.task, state, message=message, reason=reason, healthy=healthy)


class Agent:
    def __init__(
        self,
        host: AgentHost,
        index: int,
        agent_id: str,
        *,
        hostname: str,
        resources: Resources,
        attributes: list[dict[str, Any]],
    ) -> None:
        self.host = host
        self.index = index
        self.id = agent_id
        self.hostname = hostname
        self.resources = resources
        self.attributes = attributes
        self.pid_path = f"slave({index})"
        self.alive = True
        self.link_up = True
        self.registered = False
        self.ever_registered = False
        self.frameworks: dict[str, dict[str, Any]] = {}
        self.shutdown_frameworks: set[str] = set()
        # DRAIN_AGENT (upstream ``Slave::drain``): the DrainConfig while draining, else None
        self.drain_config: dict[str, Any] | None = None
        self.tasks: dict[tuple[str, str], AgentTask] = {}
        self.completed: collections.deque[AgentTask] = collections.deque(maxlen=200)
        self.streams: dict[tuple[str, str], UpdateStream] = {}

    # -- connectivity --------------------------------------------------------------------
    def _master(self) -> Master | None:
        if self.alive and self.link_up and self.registered:
            return self.host.master
        return None

    def register(self) -> None:
        """(Re-)register with the current master, if it can be reached."""
        master = self.host.master
        if not (self.alive and self.link_up) or master is None:
            return
        master.agent_registers(self)

    def on_registered(self) -> None:
        self.registered = True
        self.ever_registered = True
        for stream in list(self.streams.values()):
            if stream.pending:
                self._forward_head(stream, reset=True)

    def report(self) -> list[TaskReport]:
        reports = []
        for (fid, _tid), task in self.tasks.items():
            stream = self.streams.get((fid, task.task_id))
            head = stream.pending[0] if stream and stream.pending else None
            reports.append(
                TaskReport(
                    fid,
                    self.frameworks.get(fid, {}),
                    task.info,
                    task.state,
                    head["state"] if head else task.state,
                    head["uuid"] if head else None,
                )
            )
        return reports

    # -- commands from the master --------------------------------------------------------
    def run_task(self, framework_info: dict[str, Any], task: dict[str, Any]) -> None:
        fid = framework_info["id"]["value"]
        tid = task["task_id"]["value"]
        self.frameworks[fid] = framework_info
        self.shutdown_frameworks.discard(fid)
        container_id = new_uuid_string()
        simulated = self.host.config.executor == "simulated"
        simulated = simulated or labels_of(task).get("emulator.executor") == "simulated"
        # Simulated tasks run nothing, so their sandbox is never created (scale mode).
        user = task.get("command", {}).get("user") or framework_info.get("user")
        unknown_user = bool(user) and user not in known_users(self.host.config.agent_users)
        sandbox = self._make_sandbox(fid, tid, container_id, create=not simulated and not unknown_user)
        entry = AgentTask(fid, tid, task, container_id, sandbox, simulated=simulated)
        self.tasks[(fid, tid)] = entry
        if unknown_user:
            # slave.cpp (--switch_user, the default): the executor directory is chowned to
            # the task's user before anything runs; getpwnam failing drops the task.
            partition_aware = "PARTITION_AWARE" in capabilities(framework_info)
            self._agent_update(
                entry,
                "TASK_DROPPED" if partition_aware else "TASK_LOST",
                message=f"Failed to create executor directory '{sandbox}': Failed to chown directory "
                f"to '{user}': No such user '{user}'",
                reason="REASON_EXECUTOR_TERMINATED",
            )
            return
        containerizers = self.host.config.containerizers
        if containerizers is not None and not simulated and "executor" not in task:
            self._containerize(entry, containerizers)
            return
        error = container_launch_error(task, self.host.config.failing_images)
        if error is None and "executor" in task:
            error = "custom executors are not supported by the emulator"
        if error is not None:
            self._launch_failed(entry, error)
            return
        uris = task.get("command", {}).get("uris", [])
        if uris:
            future = self.host.loop.run_in_executor(None, fetch_uris, uris, sandbox)
            future.add_done_callback(lambda f: self._fetched(entry, f))
            return
        self._start(entry)

    @property
    def docker_cli(self) -> DockerCli:
        config = self.host.config
        return DockerCli(config.docker, config.docker_socket or default_docker_socket())

    def _containerize(self, task: AgentTask, containerizers: tuple[str, ...]) -> None:
        """The composing containerizer: the first that supports the task prepares it
        (fetch, image, isolators) off the loop, then its executor starts."""
        kind = containerizer_for(task.info, containerizers)
        if kind is None:
            # NOT_SUPPORTED: Slave::executorLaunched logs it, then the executor's container
            # is unknown when it terminates (Slave::sendExecutorTerminatedStatusUpdate).
            self._agent_update(
                task,
                "TASK_FAILED",
                message="Abnormal executor termination: unknown container",
                reason="REASON_EXECUTOR_TERMINATED",
            )
            return
        task.containerizer = kind
        run, cli, cid = self.host.loop.run_in_executor, self.docker_cli, task.container_id
        if kind == "docker":
            future = run(None, prepare_docker, cli, task.info, task.sandbox, cid)
            future.add_done_callback(lambda f: self._prepared(task, f.result()))
            return
        mapped = self.host.config.sandbox_directory
        prepared = run(None, prepare_mesos, cli, task.info, task.sandbox, cid, mapped)

        def done(
            f: asyncio.Future[tuple[str | None, dict[str, Any] | None, list[tuple[str, str, bool]]]],
        ) -> None:
            error, task.image_config, task.mounts = f.result()
            self._prepared(task, error)

        prepared.add_done_callback(done)

    def _fetched(self, task: AgentTask, future: asyncio.Future[str | None]) -> None:
        error = future.result() if not future.cancelled() else "fetch cancelled"
        if error is not None:
            error = f"Failed to fetch all URIs for container '{task.container_id}': {error}"
        self._prepared(task, error)

    def _prepared(self, task: AgentTask, error: str | None) -> None:
        if (task.framework_id, task.task_id) not in self.tasks or not self.alive:
            return
        if error is not None:
            self._launch_failed(task, error)
            return
        self._start(task)

    def _launch_failed(self, task: AgentTask, error: str) -> None:
        self._agent_update(
            task,
            "TASK_FAILED",
            message=f"Failed to launch container: {error}",
            reason="REASON_CONTAINER_LAUNCH_FAILED",
        )

    def _start(self, task: AgentTask) -> None:
        if task.kill_requested:
            self._agent_update(
                task,
                "TASK_KILLED",
                message="Task killed before it was launched",
                reason="REASON_TASK_KILLED_DURING_LAUNCH",
            )
            return
        framework = self.frameworks.get(task.framework_id, {})
        contained = task.containerizer == "docker" or task.image_config is not None
        spec = LaunchSpec(
            task.info,
            task.sandbox,
            {} if task.simulated or contained else self._environment(task),
            self.host.config.kill_grace_period,
            "TASK_KILLING_STATE" in capabilities(framework),
        )
        events = _Events(self, task)
        if task.simulated:
            runner: Runner = SimulatedRunner(spec, events, self.host.clock)
        elif contained:
            runner = self._container_runner(task, spec, events)
        else:
            self._link_volumes(task)
            runner = ProcessRunner(spec, events, self.host.clock, self.host.loop, self.host.track_process)
        task.runner = runner
        self._executor_update(task, "TASK_STARTING")
        runner.launch()
        if "health_check" in task.info and isinstance(runner, ProcessRunner) and not runner.finished:
            self._check_health(task, spec)

    def _check_health(self, task: AgentTask, spec: LaunchSpec) -> None:
        """The command executor's health checks (health.py): updates with ``healthy``, and a
        kill after ``consecutive_failures``."""
        loop = self.host.loop

        def post(callback: Callable[[], None]) -> None:
            with contextlib.suppress(RuntimeError):  # the loop closed: the emulator stopped
                loop.call_soon_threadsafe(callback)

        def update(healthy: bool) -> None:
            if task.runner is not None and not task.runner.finished and not task.runner.killed:
                self._executor_update(task, "TASK_RUNNING", reason=HEALTH_REASON, healthy=healthy)

        def kill() -> None:
            runner = task.runner
            if runner is not None and not runner.finished and not runner.killed:
                runner.kill(runner.grace_period(task.kill_policy))

        task.health = HealthChecker(
            task.info["health_check"],
            clock=self.host.clock,
            post=post,
            env=spec.env,
            sandbox=task.sandbox,
            update=update,
            kill=kill,
            alive=lambda: task.runner is not None and not task.runner.finished,
        )
        task.health.start()

    def _container_runner(self, task: AgentTask, spec: LaunchSpec, events: _Events) -> Runner:
        host, cli, name = self.host, self.docker_cli, container_name(task.container_id)
        mapped = host.config.sandbox_directory
        common = (spec, events, host.clock, host.loop, host.track_process)
        if task.containerizer == "docker":
            return DockerTaskRunner(*common, cli=cli, name=name, mapped=mapped)
        assert task.image_config is not None
        config, mounts = task.image_config, task.mounts
        image = task.info["container"]["mesos"]["image"]["docker"]["name"]
        # The command executor's environment (the agent's, not this process's) under the task's.
        env = self._environment(task, inherit=False, sandbox=mapped)
        env["MESOS_ALLOCATION_ROLE"] = task.info["resources"][0].get("allocation_info", {}).get("role", "*")

        def argv() -> list[str]:
            return mesos_image_argv(
                cli.base,
                task.info,
                name=name,
                image=image,
                image_config=config,
                env=env,
                mounts=mounts,
                sandbox=str(task.sandbox),
                mapped=mapped,
            )

        return MesosImageTaskRunner(*common, cli=cli, name=name, argv_of=argv)

    def _environment(
        self, task: AgentTask, inherit: bool = True, sandbox: str | None = None
    ) -> dict[str, str]:
        env = dict(os.environ) if inherit else {}
        env.update(
            {
                "MESOS_SANDBOX": sandbox or str(task.sandbox),
                "MESOS_DIRECTORY": str(task.sandbox),
                "MESOS_TASK_ID": task.task_id,
                "MESOS_EXECUTOR_ID": task.executor_id,
                "MESOS_AGENT_ID": self.id,
                "MESOS_FRAMEWORK_ID": task.framework_id,
                "MESOS_AGENT_ENDPOINT": f"{self.hostname}:{self.host.agent_port}",
            }
        )
        for variable in task.info.get("command", {}).get("environment", {}).get("variables", []):
            if variable.get("type", "VALUE") == "VALUE" and "value" in variable:
                env[variable["name"]] = variable["value"]
        return env

    def _link_volumes(self, task: AgentTask) -> None:
        """Relative ``container_path`` host volumes become links inside the sandbox."""
        for volume in task.info.get("container", {}).get("volumes", []):
            container_path = volume.get("container_path", "")
            host_path = volume.get("host_path")
            if host_path and container_path and not container_path.startswith("/"):
                link = task.sandbox / container_path
                with contextlib.suppress(OSError):
                    link.parent.mkdir(parents=True, exist_ok=True)
                    link.symlink_to(host_path)

    def kill_task(self, fid: str, tid: str, kill_policy: dict[str, Any] | None) -> None:
        task = self.tasks.get((fid, tid))
        if task is None or is_terminal(task.state):
            return
        task.kill_policy = kill_policy
        if task.runner is None:
            task.kill_requested = True
            return
        if task.runner.killed or task.runner.finished:
            return
        if "TASK_KILLING_STATE" in capabilities(self.frameworks.get(fid, {})):
            self._executor_update(task, "TASK_KILLING")
        task.runner.kill(task.runner.grace_period(kill_policy))

    def drain(self, config: dict[str, Any]) -> None:
        """Upstream ``Slave::drain``/``_drain``: remember the drain, then KILL every task whose
        latest state is neither terminal nor KILLING, with a grace of the smaller of its own
        kill policy's and ``max_grace_period`` (a task without a kill policy: the cap, or the
        executor's default)."""
        self.drain_config = config
        cap = config.get("max_grace_period")
        for (fid, tid), task in list(self.tasks.items()):
            if is_terminal(task.state) or task.state == "TASK_KILLING":
                continue
            policy = task.info.get("kill_policy")
            if cap is not None:
                own = (policy or {}).get("grace_period", {}).get("nanoseconds")
                limit = int(cap.get("nanoseconds", 0))
                nanos = limit if own is None else min(int(own), limit)
                policy = {"grace_period": {"nanoseconds": nanos}}
            self.kill_task(fid, tid, policy)

    def _drained_status(self, status: dict[str, Any]) -> dict[str, Any]:
        """Upstream ``Slave::statusUpdate`` while draining: KILLING, KILLED and GONE_BY_OPERATOR
        updates carry ``REASON_AGENT_DRAINING``; with ``mark_gone`` a KILLED becomes
        GONE_BY_OPERATOR."""
        config = self.drain_config
        if config is None or status["state"] not in ("TASK_KILLING", "TASK_KILLED", "TASK_GONE_BY_OPERATOR"):
            return status
        state = status["state"]
        if state == "TASK_KILLED" and config.get("mark_gone"):
            state = "TASK_GONE_BY_OPERATOR"
        return {**status, "state": state, "reason": "REASON_AGENT_DRAINING"}

    def shutdown_framework(self, fid: str) -> None:
        self.shutdown_frameworks.add(fid)
        for key, task in list(self.tasks.items()):
            if key[0] != fid:
                continue
            if task.runner is not None and not task.runner.finished:
                task.runner.kill(task.runner.grace_period(None))
            else:
                task.kill_requested = True
        for key in [key for key in self.streams if key[0] == fid]:
            self._drop_stream(key)

    def reconcile_unknown(self, fid: str, framework_info: dict[str, Any], task_ids: list[str]) -> None:
        partition_aware = "PARTITION_AWARE" in capabilities(framework_info)
        state = "TASK_DROPPED" if partition_aware else "TASK_LOST"
        for tid in task_ids:
            if (fid, tid) in self.tasks:
                continue
            status = make_status(
                tid,
                state,
                source="SOURCE_AGENT",
                wall=self.host.clock.wall(),
                agent_id=self.id,
                message="Reconciliation: task unknown to the agent",
                reason="REASON_RECONCILIATION",
                uuid=new_uuid(),
            )
            self._enqueue(fid, tid, status)

    def acknowledge(self, fid: str, tid: str, uuid: bytes) -> None:
        stream = self.streams.get((fid, tid))
        if stream is None or not stream.pending or stream.pending[0].get("uuid") != uuid:
            return
        acked = stream.pending.popleft()
        if stream.timer is not None:
            stream.timer.cancel()
            stream.timer = None
        stream.backoff = 0.0
        if is_terminal(acked["state"]) and not stream.pending:
            self._drop_stream((fid, tid))
            task = self.tasks.pop((fid, tid), None)
            if task is not None:
                self.completed.append(task)
            return
        if stream.pending:
            self._forward_head(stream)

    # -- death and restart ----------------------------------------------------------------
    def die(self) -> None:
        """The agent process dies: its tasks die with it and its memory is gone."""
        self.alive = False
        self.registered = False
        for task in self.tasks.values():
            if task.runner is not None:
                task.runner.destroy()
        for stream in self.streams.values():
            if stream.timer is not None:
                stream.timer.cancel()
        self.tasks.clear()
        self.streams.clear()
        self.frameworks.clear()

    def destroy_all(self) -> None:
        for task in self.tasks.values():
            if task.runner is not None:
                task.runner.destroy()
        for stream in self.streams.values():
            if stream.timer is not None:
                stream.timer.cancel()

    # -- updates ---------------------------------------------------------------------------
    def _executor_update(
        self,
        task: AgentTask,
        state: str,
        message: str | None = None,
        reason: str | None = None,
        ip_address: str | None = None,
        healthy: bool | None = None,
    ) -> None:
        # Every update an executor sends for a task it was given carries the container's
        # status: Slave::statusUpdate asks the containerizer for it, and Slave::_statusUpdate
        # fills in the agent's IP when the executor gave none (upstream slave.cpp, 1.11).
        # Found on the real agent (issue 21); the emulator once added it to TASK_RUNNING only.
        task.ip_address = ip_address or task.ip_address
        container_status = {
            "container_id": {"value": task.container_id},
            "network_infos": [{"ip_addresses": [{"ip_address": task.ip_address or self.hostname}]}],
        }
        status = make_status(
            task.task_id,
            state,
            source="SOURCE_EXECUTOR",
            wall=self.host.clock.wall(),
            agent_id=self.id,
            message=message,
            reason=reason,
            executor_id=task.executor_id,
            uuid=new_uuid(),
            container_status=container_status,
            healthy=healthy,
        )
        self._record(task, status)

    def _agent_update(self, task: AgentTask, state: str, message: str, reason: str) -> None:
        status = make_status(
            task.task_id,
            state,
            source="SOURCE_AGENT",
            wall=self.host.clock.wall(),
            agent_id=self.id,
            message=message,
            reason=reason,
            uuid=new_uuid(),
        )
        self._record(task, status)

    def _record(self, task: AgentTask, status: dict[str, Any]) -> None:
        if is_terminal(task.state):
            return
        status = self._drained_status(status)
        task.state = status["state"]
        if task.framework_id in self.shutdown_frameworks:
            if is_terminal(task.state):
                self.tasks.pop((task.framework_id, task.task_id), None)
                self.completed.append(task)
            return
        self._enqueue(task.framework_id, task.task_id, status)

    def _enqueue(self, fid: str, tid: str, status: dict[str, Any]) -> None:
        stream = self.streams.get((fid, tid))
        if stream is None:
            stream = self.streams[(fid, tid)] = UpdateStream(fid, tid)
        stream.pending.append(status)
        stream.latest_state = status["state"]
        if len(stream.pending) == 1:
            self._forward_head(stream)

    def _forward_head(self, stream: UpdateStream, reset: bool = False) -> None:
        if stream.done or not stream.pending:
            return
        if stream.timer is not None:
            stream.timer.cancel()
        config = self.host.config
        if reset or stream.backoff == 0.0:
            stream.backoff = config.update_retry_interval
        else:
            stream.backoff = min(stream.backoff * 2, config.update_retry_max)
        stream.timer = self.host.clock.call_later(stream.backoff, lambda: self._forward_head(stream))
        if self._master() is not None:
            head = dict(stream.pending[0])
            self.host.loop.call_soon(self._deliver, stream.framework_id, head, stream.latest_state)

    def _deliver(self, framework_id: str, status: dict[str, Any], latest_state: str) -> None:
        master = self._master()
        if master is not None:
            master.agent_status_update(self, framework_id, status, latest_state)

    def _drop_stream(self, key: tuple[str, str]) -> None:
        stream = self.streams.pop(key, None)
        if stream is not None:
            stream.done = True
            if stream.timer is not None:
                stream.timer.cancel()

    # -- sandboxes -------------------------------------------------------------------------
    def _make_sandbox(self, fid: str, executor_id: str, container_id: str, create: bool) -> Path:
        root = self.host.sandbox_root
        runs_text = f"{root}/slaves/{self.id}/frameworks/{fid}/executors/{executor_id}/runs"
        sandbox = Path(f"{runs_text}/{container_id}")
        if not create:
            return sandbox
        runs = Path(runs_text)
        sandbox.mkdir(parents=True, exist_ok=True)
        latest = runs / "latest"
        with contextlib.suppress(OSError):
            if latest.is_symlink():
                latest.unlink()
            latest.symlink_to(container_id)
        (sandbox / "stdout").touch()
        (sandbox / "stderr").touch()
        return sandbox

    def executor_directory(self, fid: str, executor_id: str) -> Path | None:
        for task in [*self.tasks.values(), *self.completed]:
            if task.framework_id == fid and task.executor_id == executor_id:
                return task.sandbox
        return None

    def each_task(self) -> list[tuple[AgentTask, bool]]:
        out = [(task, False) for task in self.tasks.values()]
        out += [(task, True) for task in self.completed]
        return out
