"""The emulator facade: start/stop, the fault-injection API and ground-truth inspection.

Owns the ``Cluster`` (everything living on the event loop: clock, registry, master,
agents, HTTP servers, faults, the record of calls) and ``Emulator``, the thread-safe API
tests use. ``Emulator.start()`` runs the loop in a background thread; every public
method hops onto that loop and waits for the result, so the master core is only ever
touched from one thread.
"""

from __future__ import annotations

import asyncio
import collections
import concurrent.futures
import contextlib
import logging
import shutil
import signal
import tempfile
import threading
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from tests.waiting import wait_until

from .agent import Agent
from .agent_http import AgentEndpoints
from .clock import Clock, ManualClock, RealClock
from .config import EmulatorConfig
from .executor import kill_process_group
from .faults import UpdateFaults
from .http import MasterEndpoints
from .master import Master
from .model import Registry
from .resources import Resources, coalesce, parse_attributes, resource_key, split_key, to_fixed
from .status import is_terminal
from .wire import EventStream, HttpServer, Request, Response

if TYPE_CHECKING:
    from .zookeeper import ZooKeeperContender

log = logging.getLogger("mesos_emulator")
T = TypeVar("T")


class Cluster:
    """All emulator state; only touched on the loop thread."""

    def __init__(self, config: EmulatorConfig, loop: asyncio.AbstractEventLoop) -> None:
        config.validate()
        self.config = config
        self.loop = loop
        self.clock: Clock = ManualClock() if config.clock == "manual" else RealClock(loop)
        self.registry = Registry()
        self.agents: dict[str, Agent] = {}
        self.faults = UpdateFaults()
        self.violations: list[str] = []
        self.calls: collections.deque[dict[str, Any]] = collections.deque(maxlen=config.max_calls_recorded)
        self.stream_ids: list[str] = []
        self.processes: set[int] = set()
        self.master: Master | None = None
        self.leader = True
        self.leader_location: str | None = None
        self._own_sandbox = config.sandbox_root is None
        root = config.sandbox_root or tempfile.mkdtemp(prefix="mesos-emulator-")
        self.sandbox_root = Path(root)
        self._agent_index = 0
        self.master_server = HttpServer(MasterEndpoints(self).handle, config.host, config.port)
        self.agent_server = HttpServer(AgentEndpoints(self).handle, config.host, config.agent_port)
        self.master_server.chunk_mode = config.chunk_mode
        self.master_server.seed = config.seed

    @property
    def master_port(self) -> int:
        return self.master_server.port

    @property
    def agent_port(self) -> int:
        return self.agent_server.port

    async def start(self) -> None:
        await self.master_server.start()
        await self.agent_server.start()
        self.start_master()
        for _ in range(self.config.agents):
            self.add_agent()

    async def stop(self) -> None:
        if self.master is not None:
            self.master.shutdown()
            self.master = None
        for agent in self.agents.values():
            agent.destroy_all()
        for pid in list(self.processes):
            kill_process_group(pid)
        await self.master_server.stop()
        await self.agent_server.stop()
        deadline = time.monotonic() + 2.0
        while self.processes and time.monotonic() < deadline:
            await asyncio.sleep(0.01)
        if self._own_sandbox:
            shutil.rmtree(self.sandbox_root, ignore_errors=True)

    # -- processes and calls -----------------------------------------------------------
    def track_process(self, pid: int, alive: bool) -> None:
        if alive:
            self.processes.add(pid)
        else:
            self.processes.discard(pid)

    def record_call(
        self, request: Request, call: dict[str, Any] | None, response: Response | EventStream
    ) -> None:
        status = 200 if isinstance(response, EventStream) else response.status
        self.calls.append(
            {
                "time": self.clock.now(),
                "type": call.get("type") if call else None,
                "framework_id": (call or {}).get("framework_id", {}).get("value"),
                "stream_id": request.headers.get("Mesos-Stream-Id"),
                "status": status,
                "call": call,
            }
        )

    def note_stream(self, stream_id: str) -> None:
        self.stream_ids.append(stream_id)

    # -- master lifecycle --------------------------------------------------------------
    def start_master(self, reregister_delay: float | None = None) -> None:
        registry = self.registry
        recovered = set(registry.admitted) - set(registry.unreachable) - set(registry.gone)
        self.master = Master(self, str(uuid.uuid4()), recovered)
        delay = self.config.agent_reregister_delay if reregister_delay is None else reregister_delay
        for agent in self.agents.values():
            if agent.alive and agent.link_up:
                self.clock.call_later(delay, agent.register)

    def restart_master(self, reregister_delay: float | None = None) -> None:
        if self.master is not None:
            self.master.shutdown()
        for agent in self.agents.values():
            agent.registered = False
        self.start_master(reregister_delay)

    def set_leader(self, leader: bool, location: str | None) -> None:
        self.leader_location = location
        if leader == self.leader:
            return
        self.leader = leader
        if leader:
            self.restart_master()
            return
        if self.master is not None:
            self.master.shutdown()
            self.master = None
        for agent in self.agents.values():
            agent.registered = False

    # -- agents --------------------------------------------------------------------------
    def add_agent(
        self,
        resources: str | None = None,
        attributes: str | None = None,
        gpus: int | None = None,
        hostname: str | None = None,
        default_role: str | None = None,
    ) -> str:
        index = self._agent_index
        self._agent_index += 1
        role = default_role if default_role is not None else self.config.agent_default_role
        total = Resources.parse(resources or self.config.agent_resources, default_role=role)
        if not total.ranges("ports"):
            total = total + Resources({resource_key("ports", role): ((31000, 32000),)})
        if gpus is not None:
            total.items[resource_key("gpus", role)] = to_fixed(gpus)
        total = self._offset_ports(total, index)
        prefix = self.master.id if self.master is not None else str(uuid.uuid4())
        agent_id = f"{prefix}-S{index}"
        attrs = parse_attributes(attributes if attributes is not None else self.config.agent_attributes)
        agent = Agent(
            self,
            index + 1,
            agent_id,
            hostname=hostname or self.config.agent_hostname,
            resources=total,
            attributes=attrs,
        )
        self.agents[agent_id] = agent
        agent.register()
        return agent_id

    def _offset_ports(self, total: Resources, index: int) -> Resources:
        ports = total.ranges("ports")  # reserved or not
        if not ports or index == 0:
            return total
        offset = self.config.agent_port_offset
        if offset is None:
            # Real processes share 127.0.0.1, so by default agents get disjoint copies.
            offset = ports[-1][1] - ports[0][0] + 1 if self.config.executor == "process" else 0
        shift = offset * index
        if ports[-1][1] + shift > 65535:
            return total
        for key, value in list(total.items.items()):
            if split_key(key)[0] == "ports" and isinstance(value, tuple):
                total.items[key] = coalesce((b + shift, e + shift) for b, e in value)
        return total

    def agent(self, agent_id: str) -> Agent:
        try:
            return self.agents[agent_id]
        except KeyError:
            raise KeyError(f"unknown agent {agent_id!r}") from None

    def agent_by_index(self, index: int) -> Agent | None:
        for agent in self.agents.values():
            if agent.index == index:
                return agent
        return None

    def live_agents(self) -> list[Agent]:
        return [agent for agent in self.agents.values() if agent.alive]

    def agent_socket_closed(self, agent: Agent) -> None:
        if self.master is not None:
            self.master.agent_exited(agent)

    # -- inspection ------------------------------------------------------------------------
    def master_state(self) -> dict[str, Any]:
        master = self.master
        if master is None:
            return {"leader": False}
        return {
            "version": self.config.version,
            "id": master.id,
            "pid": f"master@{self.config.host}:{self.master_port}",
            "hostname": self.config.host,
            "frameworks": [framework_view(master, f) for f in master.frameworks.values()],
            "completed_frameworks": [framework_view(master, f) for f in master.completed_frameworks.values()],
            "slaves": [agent_view(master, a) for a in self.agents.values()],
        }


def framework_view(master: Master, framework: Any) -> dict[str, Any]:
    sub = framework.subscription
    return {
        "id": framework.id,
        "name": framework.info.get("name", ""),
        "info": framework.info,
        "roles": list(framework.roles),
        "capabilities": sorted(framework.capabilities),
        "connected": framework.connected,
        "active": framework.active,
        "recovered": framework.recovered,
        "stream_id": sub.stream_id if sub is not None else None,
        "stream_open": sub.open if sub is not None else False,
        "heartbeats_sent": sub.heartbeats_sent if sub is not None else 0,
        "offers": sorted(framework.offers),
        "suppressed_roles": sorted(master.allocator.frameworks[framework.id].suppressed)
        if framework.id in master.allocator.frameworks
        else [],
        "filters": master.allocator.filter_count(framework.id),
        "tasks": [task_view(t) for t in framework.tasks.values()],
        "unreachable_tasks": [task_view(t) for t in framework.unreachable_tasks.values()],
        "completed_tasks": [task_view(t) for t in framework.completed_tasks],
    }


def task_view(task: Any) -> dict[str, Any]:
    return {
        "id": task.task_id,
        "framework_id": task.framework_id,
        "agent_id": task.agent_id,
        "name": task.name,
        "state": task.state,
        "status_update_state": task.status_update_state,
        "resources": str(task.resources),
    }


def agent_view(master: Master, agent: Agent) -> dict[str, Any]:
    record = master.agents.get(agent.id)
    if record is not None:
        state = "registered" if record.connected else "disconnected"
    elif agent.id in master.registry.gone:
        state = "gone"
    elif agent.id in master.registry.unreachable:
        state = "unreachable"
    elif agent.id in master.recovered:
        state = "recovering"
    else:
        state = "unknown"
    return {
        "id": agent.id,
        "pid": agent.pid_path,
        "hostname": agent.hostname,
        "state": state,
        "alive": agent.alive,
        "link_up": agent.link_up,
        "ping_misses": record.ping_misses if record else 0,
        "total": str(agent.resources),
        "available": str(record.available) if record else None,
        "offered": str(record.offered) if record else None,
        "used": {fid: str(r) for fid, r in record.used.items()} if record else {},
        "running_tasks": sorted(
            f"{task.framework_id}/{task.task_id}:{task.state}"
            for task in agent.tasks.values()
            if not is_terminal(task.state)
        ),
    }


class Emulator:
    """Thread-safe handle on a running emulator (see the package README)."""

    def __init__(self, config: EmulatorConfig | None = None, **overrides: Any) -> None:
        base = config or EmulatorConfig()
        for key, value in overrides.items():
            if not hasattr(base, key):
                raise TypeError(f"unknown emulator option {key!r}")
            setattr(base, key, value)
        base.validate()
        self.config = base
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._cluster: Cluster | None = None
        self._contender: ZooKeeperContender | None = None

    # -- lifecycle -------------------------------------------------------------------------
    def start(self) -> Emulator:
        ready: concurrent.futures.Future[None] = concurrent.futures.Future()

        def run() -> None:
            loop = asyncio.new_event_loop()
            self._loop = loop
            asyncio.set_event_loop(loop)
            try:
                self._cluster = Cluster(self.config, loop)
                loop.run_until_complete(self._cluster.start())
            except BaseException as exc:
                ready.set_exception(exc)
                loop.close()
                return
            ready.set_result(None)
            loop.run_forever()
            loop.close()

        self._thread = threading.Thread(target=run, name="mesos-emulator", daemon=True)
        self._thread.start()
        ready.result(timeout=30)
        self._join_zookeeper()
        return self

    def _join_zookeeper(self) -> None:
        if self.config.zookeeper is not None:
            from .zookeeper import ZooKeeperContender

            info = self._call(lambda c: self._master(c).master_info())
            self._contender = ZooKeeperContender(self, self.config.zookeeper, info).start()

    def leave_zookeeper(self) -> None:
        """Leave the masters' group in ZooKeeper (as a master that stops does)."""
        contender, self._contender = self._contender, None
        if contender is not None:
            contender.stop()

    def stop(self) -> None:
        self.leave_zookeeper()
        loop, thread = self._loop, self._thread
        if loop is None or thread is None or self._cluster is None:
            return
        cluster = self._cluster
        with contextlib.suppress(RuntimeError, concurrent.futures.TimeoutError):
            asyncio.run_coroutine_threadsafe(cluster.stop(), loop).result(timeout=10)
        with contextlib.suppress(RuntimeError):
            loop.call_soon_threadsafe(loop.stop)
        thread.join(timeout=10)
        self._cluster = None

    def __enter__(self) -> Emulator:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def run_forever(self, on_ready: Callable[[Emulator], None] | None = None) -> None:
        """Run in the calling thread until SIGTERM/SIGINT (used by the CLI)."""
        loop = asyncio.new_event_loop()
        asyncio.set_event_loop(loop)
        self._loop = loop
        self._thread = threading.current_thread()  # other threads' calls go through the loop
        self._cluster = Cluster(self.config, loop)
        stop = asyncio.Event()
        for signum in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(signum, stop.set)

        async def main() -> None:
            assert self._cluster is not None
            await self._cluster.start()
            if self.config.zookeeper is not None:  # kazoo blocks: not on this loop
                await asyncio.to_thread(self._join_zookeeper)
            if on_ready is not None:
                on_ready(self)
            await stop.wait()
            await asyncio.to_thread(self.leave_zookeeper)
            await self._cluster.stop()

        try:
            loop.run_until_complete(main())
        finally:
            loop.close()

    def _call(self, fn: Callable[[Cluster], T], timeout: float = 10.0) -> T:
        cluster, loop = self._cluster, self._loop
        if cluster is None or loop is None:
            raise RuntimeError("emulator is not running")

        async def run() -> T:
            return fn(cluster)

        if threading.current_thread() is not self._thread and self._thread is not None:
            return asyncio.run_coroutine_threadsafe(run(), loop).result(timeout)
        return fn(cluster)

    def _master(self, cluster: Cluster) -> Master:
        if cluster.master is None:
            raise RuntimeError("no master is leading")
        return cluster.master

    # -- addresses ---------------------------------------------------------------------------
    @property
    def url(self) -> str:
        return self._call(lambda c: f"http://{c.config.host}:{c.master_port}")

    @property
    def scheduler_url(self) -> str:
        return self.url + "/api/v1/scheduler"

    @property
    def agent_url(self) -> str:
        return self._call(lambda c: f"http://{c.config.host}:{c.agent_port}")

    @property
    def master_id(self) -> str:
        return self._call(lambda c: self._master(c).id)

    # -- fault injection ---------------------------------------------------------------------
    def add_agent(
        self,
        resources: str | None = None,
        attributes: str | None = None,
        *,
        gpus: int | None = None,
        hostname: str | None = None,
        default_role: str | None = None,
    ) -> str:
        """An agent started with ``--resources`` (roles allowed: ``cpus(ml):4``),
        ``--attributes``, ``gpus`` and ``--default_role`` (default: the config's)."""
        return self._call(lambda c: c.add_agent(resources, attributes, gpus, hostname, default_role))

    def disconnect_agent(self, agent_id: str, reconnect_after: float | None = None) -> None:
        def run(c: Cluster) -> None:
            agent = c.agent(agent_id)
            agent.link_up = False
            agent.registered = False
            c.agent_socket_closed(agent)
            if reconnect_after is not None:
                c.clock.call_later(reconnect_after, lambda: _reconnect(agent))

        self._call(run)

    def reconnect_agent(self, agent_id: str) -> None:
        self._call(lambda c: _reconnect(c.agent(agent_id)))

    def partition_agent(self, agent_id: str) -> None:
        def run(c: Cluster) -> None:
            c.agent(agent_id).link_up = False

        self._call(run)

    def heal_agent(self, agent_id: str) -> None:
        self._call(lambda c: _reconnect(c.agent(agent_id)))

    def kill_agent(self, agent_id: str) -> None:
        def run(c: Cluster) -> None:
            agent = c.agent(agent_id)
            agent.die()
            c.agent_socket_closed(agent)

        self._call(run)

    def restart_agent(self, agent_id: str) -> None:
        def run(c: Cluster) -> None:
            agent = c.agent(agent_id)
            agent.alive = True
            agent.link_up = True
            agent.register()

        self._call(run)

    def mark_gone(self, agent_id: str) -> None:
        self._call(lambda c: self._master(c).mark_gone(agent_id))

    def drain_agent(
        self, agent_id: str, max_grace_period: float | None = None, mark_gone: bool = False
    ) -> None:
        """The operator's ``DRAIN_AGENT`` (``maintenance.py``)."""
        config: dict[str, Any] = {"mark_gone": mark_gone}
        if max_grace_period is not None:
            config["max_grace_period"] = {"nanoseconds": round(max_grace_period * 1e9)}
        error = self._call(lambda c: self._master(c).maintenance.drain_agent(agent_id, config))
        if error is not None:
            raise ValueError(error)

    def reactivate_agent(self, agent_id: str) -> None:
        error = self._call(lambda c: self._master(c).maintenance.reactivate_agent(agent_id))
        if error is not None:
            raise ValueError(error)

    def schedule_maintenance(self, windows: list[dict[str, Any]]) -> None:
        """The operator's ``UPDATE_MAINTENANCE_SCHEDULE`` (``[]`` cancels it)."""
        error = self._call(lambda c: self._master(c).maintenance.update_schedule({"windows": windows}))
        if error is not None:
            raise ValueError(error)

    def maintenance_status(self) -> dict[str, Any]:
        return self._call(lambda c: self._master(c).maintenance.status())

    def drain_info(self, agent_id: str) -> dict[str, Any] | None:
        return self._call(lambda c: self._master(c).maintenance.drain_info(agent_id))

    def drop_stream(self, framework_id: str, notify_master: bool = True) -> None:
        """Close the framework's subscription socket abruptly (no final chunk).

        With ``notify_master=False`` the master does not notice (a half-open connection):
        it keeps the framework connected and keeps writing into the void.
        """

        def run(c: Cluster) -> None:
            sub = self._master(c).frameworks[framework_id].subscription
            if sub is None:
                raise RuntimeError(f"framework {framework_id} has no open stream")
            if not notify_master:
                sub.stream._on_close.clear()
            sub.stream.abort()

        self._call(run)

    def stall_stream(self, framework_id: str, stalled: bool = True) -> None:
        """Stop (or resume) writing anything, heartbeats included; the socket stays open."""

        def run(c: Cluster) -> None:
            sub = self._master(c).frameworks[framework_id].subscription
            if sub is None:
                raise RuntimeError(f"framework {framework_id} has no open stream")
            sub.stalled = stalled
            sub.stream.stalled = stalled

        self._call(run)

    def restart_master(self, reregister_delay: float | None = None) -> None:
        self._call(lambda c: c.restart_master(reregister_delay))

    def set_leader(self, leader: bool, location: str | None = None) -> None:
        """``False``: answer 307 to ``//location`` (or 503 without one) and drop streams.

        Going back to ``True`` elects this master again, which recovers like a restart.
        """
        self._call(lambda c: c.set_leader(leader, location))

    def expire_failover(self, framework_id: str) -> bool:
        return self._call(lambda c: self._master(c).expire_failover(framework_id))

    def drop_updates(
        self,
        count: int = 1,
        *,
        framework_id: str | None = None,
        task_id: str | None = None,
        state: str | None = None,
    ) -> None:
        self._call(lambda c: c.faults.drop(count, framework_id=framework_id, task_id=task_id, state=state))

    def delay_updates(self, seconds: float) -> None:
        def run(c: Cluster) -> None:
            c.faults.delay = seconds

        self._call(run)

    def set_chunk_mode(self, mode: str) -> None:
        def run(c: Cluster) -> None:
            c.config.chunk_mode = mode
            c.config.validate()
            c.master_server.chunk_mode = mode

        self._call(run)

    def set_credentials(self, credentials: dict[str, str] | None) -> None:
        def run(c: Cluster) -> None:
            c.config.credentials = dict(credentials) if credentials is not None else None

        self._call(run)

    def set_failing_images(self, images: set[str]) -> None:
        def run(c: Cluster) -> None:
            c.config.failing_images = set(images)

        self._call(run)

    def advance(self, seconds: float) -> None:
        """Move a manual clock forward (``clock="manual"`` only)."""

        def run(c: Cluster) -> None:
            if not isinstance(c.clock, ManualClock):
                raise RuntimeError("advance() needs clock='manual'")
            c.clock.advance(seconds)

        self._call(run)

    # -- inspection ----------------------------------------------------------------------------
    def frameworks(self, include_completed: bool = False) -> list[dict[str, Any]]:
        def run(c: Cluster) -> list[dict[str, Any]]:
            master = self._master(c)
            views = [framework_view(master, f) for f in master.frameworks.values()]
            if include_completed:
                views += [framework_view(master, f) for f in master.completed_frameworks.values()]
            return views

        return self._call(run)

    def framework(self, framework_id: str) -> dict[str, Any] | None:
        for view in self.frameworks(include_completed=True):
            if view["id"] == framework_id:
                return view
        return None

    def completed_framework_ids(self) -> list[str]:
        return self._call(lambda c: list(self._master(c).completed_frameworks))

    def tasks(self, framework_id: str | None = None) -> dict[str, dict[str, Any]]:
        """Ground truth per task id: the master's view plus what the agent really runs."""

        def run(c: Cluster) -> dict[str, dict[str, Any]]:
            out: dict[str, dict[str, Any]] = {}
            master = c.master
            if master is not None:
                for framework in master.frameworks.values():
                    if framework_id is not None and framework.id != framework_id:
                        continue
                    for task in framework.tasks.values():
                        out[task.task_id] = {**task_view(task), "agent_state": None}
                    for task in framework.unreachable_tasks.values():
                        out[task.task_id] = {**task_view(task), "agent_state": None}
            for agent in c.agents.values():
                for running in agent.tasks.values():
                    if framework_id is not None and running.framework_id != framework_id:
                        continue
                    entry = out.setdefault(
                        running.task_id,
                        {
                            "id": running.task_id,
                            "framework_id": running.framework_id,
                            "agent_id": agent.id,
                            "state": None,
                        },
                    )
                    entry["agent_state"] = running.state
                    entry["sandbox"] = str(running.sandbox)
                    entry["container_id"] = running.container_id
            return out

        return self._call(run)

    def agents(self) -> list[dict[str, Any]]:
        def run(c: Cluster) -> list[dict[str, Any]]:
            master = self._master(c)
            return [agent_view(master, agent) for agent in c.agents.values()]

        return self._call(run)

    def agent_ids(self) -> list[str]:
        return self._call(lambda c: list(c.agents))

    def offers(self, framework_id: str | None = None) -> list[dict[str, Any]]:
        def run(c: Cluster) -> list[dict[str, Any]]:
            return [
                {
                    "id": o.id,
                    "framework_id": o.framework_id,
                    "agent_id": o.agent_id,
                    "role": o.role,
                    "resources": str(o.resources),
                }
                for o in self._master(c).offers.values()
                if framework_id is None or o.framework_id == framework_id
            ]

        return self._call(run)

    def calls(self, call_type: str | None = None) -> list[dict[str, Any]]:
        return self._call(lambda c: [dict(x) for x in c.calls if call_type is None or x["type"] == call_type])

    def stream_ids(self) -> list[str]:
        return self._call(lambda c: list(c.stream_ids))

    def processes(self) -> set[int]:
        return self._call(lambda c: set(c.processes))

    def allocation_cycles(self) -> int:
        """How many periodic allocation cycles the master has run."""
        return self._call(lambda c: self._master(c).allocation_cycles)

    def dropped_updates(self) -> list[dict[str, Any]]:
        return self._call(lambda c: list(c.faults.dropped))

    def task_state_counts(self) -> dict[str, int]:
        """How many tasks the master has in each state (cheap, for large clusters)."""

        def run(c: Cluster) -> dict[str, int]:
            counts: collections.Counter[str] = collections.Counter()
            for framework in self._master(c).frameworks.values():
                counts.update(task.state for task in framework.tasks.values())
            return dict(counts)

        return self._call(run)

    def check_invariants(self) -> list[str]:
        """Ledger violations seen so far plus a fresh check of every agent."""

        def run(c: Cluster) -> list[str]:
            problems = list(c.violations)
            master = c.master
            if master is not None:
                for record in master.agents.values():
                    error = record.ledger_error()
                    if error is not None:
                        problems.append(error)
                streams = [f.subscription for f in master.frameworks.values() if f.subscription]
                ids = [s.stream_id for s in streams]
                if len(ids) != len(set(ids)):
                    problems.append("two frameworks share a stream id")
            if len(c.stream_ids) != len(set(c.stream_ids)):
                problems.append("a stream id was reused")
            return problems

        return self._call(run)

    def wait_for(
        self, predicate: Callable[[Emulator], bool], timeout: float = 5.0, interval: float = 0.01
    ) -> None:
        """Until ``predicate(emulator)`` holds (tests/waiting.py; AssertionError after ``timeout``)."""
        wait_until(lambda: predicate(self), timeout, interval=interval)


def _reconnect(agent: Agent) -> None:
    agent.link_up = True
    if agent.alive:
        agent.register()
