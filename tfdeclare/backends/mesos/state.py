"""The Mesos backend's state, the one thread that owns it, and how the others talk to it.

This module owns ``BackendState``: the journal and framework files, the task table, the offer
pool, the queue of ACCEPTs to send, and the policies' state (``decide.Policy``: offer
interest, reconciliation, kills, fencing, the FIFO queue of waiting gangs and the
reservations of placed gangs), which only the reducer ``decide`` changes; this module
executes the calls it decides (``_decide``, ``_execute``: REVIVE, SUPPRESS, RECONCILE, KILL,
DECLINE, GET_AGENTS on the calls thread). All of it belongs to one thread,
``mesos-backend-loop``; nothing else reads or writes it while the loop runs. The others send
the loop messages (callables run in order on the loop): ``_post`` does not wait,
``_request`` waits on a future the loop resolves, at once or later (a *waiter* re-checked
after each batch of messages and on every tick: a placement waiting for offers, a
launch waiting for its offers to come back, the first ``observe`` waiting for reconciliation,
``close`` waiting for queued ACCEPTs). The loop never makes an HTTP call nor waits for an
fsync of status updates: it hands calls to ``mesos-backend-calls`` and acknowledgements, with
a journal descriptor to fsync first, to ``mesos-backend-acks`` (``workers``); they report
back with messages. ``scheduler`` (events from the master), ``workers`` (upkeep and
the sender threads) and ``backend`` (the protocol) build on it.
"""

from __future__ import annotations

import collections
import getpass
import logging
import os
import queue
import socket
import threading
import time
from abc import ABC, abstractmethod
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar, assert_never

from tfdeclare.backends.base import BackendError
from tfdeclare.backends.mesos import decide
from tfdeclare.backends.mesos import decide_messages as msg
from tfdeclare.backends.mesos.auth import Credentials
from tfdeclare.backends.mesos.client import SchedulerClient
from tfdeclare.backends.mesos.config import MesosConfig
from tfdeclare.backends.mesos.decide import Policy, Reservation, Settings
from tfdeclare.backends.mesos.errors import MesosError
from tfdeclare.backends.mesos.info import Capability, FrameworkInfo
from tfdeclare.backends.mesos.journal import (
    FrameworkState,
    FrameworkStore,
    JournalError,
    TaskEntry,
)
from tfdeclare.backends.mesos.maintenance import Window
from tfdeclare.backends.mesos.offers import OfferPool, agent_capacity
from tfdeclare.backends.mesos.placement import AgentOffer, PlacementOptions
from tfdeclare.backends.mesos.queueing import Waiting
from tfdeclare.backends.mesos.sandbox import SandboxReader
from tfdeclare.backends.mesos.taskinfo import LABEL_PREFIX
from tfdeclare.backends.mesos.taskstate import LOST_LIKE, is_terminal, observed_state
from tfdeclare.backends.mesos.tasktable import TaskTable
from tfdeclare.core.errors import ErrorCode
from tfdeclare.core.run.tasks import TaskLaunch

log = logging.getLogger("tfdeclare.mesos")

T = TypeVar("T")

FIRST_OBSERVE_WAIT_S = 2.0  # the first observe() after subscribing waits this long for answers
LAUNCH_DRAIN_S = 30.0  # close() waits this long for queued ACCEPTs
# close() waits for the first update of each task it launched and its ACKNOWLEDGE (an agent
# sends a task's next update, TASK_RUNNING, only once the one before is acknowledged, and
# retries an unacknowledged one after 10 s): while such updates keep coming, at most
# CLOSE_UPDATES_IDLE_S after the last one and CLOSE_UPDATES_MAX_S in all
CLOSE_UPDATES_IDLE_S = 3.0
CLOSE_UPDATES_MAX_S = 20.0
CLOSE_CALLS_WAIT_S = 5.0  # close() waits this long for its DECLINE and SUPPRESS to be answered
LAUNCH_BURST = 64  # ACCEPTs pipelined in one go at most
MESSAGE_BATCH = 1024  # messages the loop handles before its after-batch work (fsync, acks, waiters)

Message = Callable[[], None]
Waiter = Callable[[float], bool]  # (now) -> done: it resolved its future
Outgoing = Callable[[], None]  # a call for the calls thread, its client already bound
AckBatch = tuple[SchedulerClient, list[tuple[str, str, str]], int | None]


@dataclass(slots=True)
class Accept:
    """One ACCEPT to send: the tasks of one gang on one agent, with that agent's offers."""

    job: str
    agent_id: str
    role: str
    offer_ids: list[str]
    tasks: list[TaskLaunch]
    offered: list[dict[str, Any]]  # the offers' usable resources, with their reservations


class BackendState(ABC):
    """Everything the loop thread owns, and the loop; see the module docstring."""

    def __init__(
        self, state_dir: Path, config: MesosConfig, *, clock: Callable[[], float] = time.time
    ) -> None:
        if config.on_framework_removed not in ("fail", "newFramework"):
            raise BackendError(
                f"mesos.onFrameworkRemoved must be fail or newFramework, not {config.on_framework_removed!r}",
                code=ErrorCode.SETTINGS_UNUSABLE,
            )
        self.config = config
        self.clock = clock
        self.root = state_dir / "mesos"
        self._framework_store = FrameworkStore(self.root)
        try:
            self._table = TaskTable(self.root)
            self._framework: FrameworkState = self._framework_store.load()
        except JournalError as err:
            raise BackendError(str(err), code=ErrorCode.BACKEND_STATE_UNREADABLE) from err
        self._options = PlacementOptions(cpu_tasks_on_gpu_agents=config.cpu_tasks_on_gpu_agents)
        self._pool = OfferPool()
        # Inverse offers held until our tasks on their agent are gone, then accepted: id -> agent
        self._inverse_held: dict[str, str] = {}
        # Each agent's maintenance window as its latest offer or inverse offer said (None:
        # none): whether a task moved off for maintenance has anywhere to go
        self._agent_windows: dict[str, Window | None] = {}
        self._never_fits_cache: dict[object, str | None] = {}
        self._never_fits_version = -1
        # the policies (offer interest, reconciliation, kills, offers to decline, the queue and
        # the reservations, the agents' list, fencing): decided by ``decide``, executed here
        self._policy = Policy(
            Settings.from_config(config, self._options),
            lost={
                t.task_id: t.lost_since
                for t in self._table
                if t.state in LOST_LIKE and t.lost_since is not None
            },
        )
        self._client: SchedulerClient | None = None  # written by the loop, read by callers
        self._credentials: Credentials | None = None
        self._gpu_enabled = (
            config.gpu_resources
            or self._framework.gpu_resources
            or any(t.gpus > 0 and not is_terminal(t.state) for t in self._table)
        )
        self._old_clients: list[SchedulerClient] = []
        self._removed_ids: set[str] = set()
        self._acks_out_n = 0  # batches with the acks thread, not yet sent
        # ACCEPTs: queued in order; one burst at a time is with the calls thread
        self._accepts: collections.deque[Accept] = collections.deque()
        self._burst_out = False
        self._sandbox: SandboxReader | None = None
        # the loop
        self._watchers: list[Callable[[], None]] = []
        self._fatal: BackendError | None = None  # written by the loop, read by callers
        self._read_only = False
        self._closed = False  # set by close() once the loop is gone
        self._inbox: queue.SimpleQueue[Message | None] = queue.SimpleQueue()
        self._calls_out: queue.SimpleQueue[Outgoing | None] = queue.SimpleQueue()
        # (client, acks, a journal descriptor to fsync before acknowledging them)
        self._acks_out: queue.SimpleQueue[AckBatch | None] = queue.SimpleQueue()
        self._waiters: list[tuple[Future[Any], Waiter]] = []
        self._changed = False  # something a waiter may wait for changed in this batch
        self._tick_soon = False
        self._loop_thread: threading.Thread | None = None
        self._threads: list[threading.Thread] = []
        # Callers only: serialises connecting and starting the threads (re-entrant: connecting
        # sends the loop messages, which start the threads).
        self._connect_lock = threading.RLock()

    # ---- messages to the loop -----------------------------------------------------------------

    def _start_threads(self) -> None:
        if self._loop_thread is not None:
            return
        with self._connect_lock:
            if self._threads:  # started meanwhile
                return
            for name, target in (
                ("mesos-backend-calls", self._calls_loop),
                ("mesos-backend-acks", self._acks_loop),
            ):
                thread = threading.Thread(target=target, name=name, daemon=True)
                self._threads.append(thread)
                thread.start()
            loop = threading.Thread(target=self._loop, name="mesos-backend-loop", daemon=True)
            self._threads.append(loop)
            loop.start()
            self._loop_thread = loop

    def _post(self, message: Message) -> None:
        """Run ``message`` on the loop, after every message posted before it; do not wait."""
        self._start_threads()
        self._inbox.put(message)

    def _request(self, start: Callable[[Future[T]], None]) -> T:
        """Run ``start(future)`` on the loop and wait for the future: ``start`` resolves it at
        once or leaves a waiter that resolves it later. Exceptions reach the caller."""
        if self._closed:
            raise BackendError("the Mesos backend is closed", code=ErrorCode.BACKEND_CLOSED)
        if threading.current_thread() is self._loop_thread:
            raise RuntimeError("the loop cannot wait for itself")  # e.g. a watcher calling back
        future: Future[T] = Future()

        def message() -> None:
            try:
                start(future)
            except BaseException as err:  # handed to the caller
                if not future.done():
                    future.set_exception(err)

        self._post(message)
        return future.result()

    def _ask(self, fn: Callable[[], T]) -> T:
        """``fn()`` on the loop, its result (or exception) here."""

        def start(future: Future[T]) -> None:
            future.set_result(fn())

        return self._request(start)

    def _keep_trying(self, future: Future[T], attempt: Waiter) -> None:
        """``attempt(now)`` now and, until it says done (having resolved ``future``), after
        every batch of messages that changed something and on every tick. An exception
        resolves the future with it."""

        def waiter(now: float) -> bool:
            try:
                return attempt(now)
            except BaseException as err:  # handed to the caller
                future.set_exception(err)
                return True

        if not waiter(self.clock()):
            self._waiters.append((future, waiter))

    # ---- the loop -----------------------------------------------------------------------------

    def _loop(self) -> None:
        tick = max(0.02, min(0.2, self.config.offer_hold_s / 4 if self.config.offer_hold_s > 0 else 0.05))
        next_tick = 0.0
        stopping = False
        while not stopping:
            batch: list[Message | None] = []
            try:
                batch.append(self._inbox.get(timeout=max(0.0, next_tick - time.monotonic())))
            except queue.Empty:
                pass
            else:
                while len(batch) < MESSAGE_BATCH:
                    try:
                        batch.append(self._inbox.get_nowait())
                    except queue.Empty:
                        break
            for message in batch:
                if message is None:
                    stopping = True
                    continue
                try:
                    message()
                except Exception:
                    log.exception("Mesos backend: a message failed (continuing)")
            ticked = self._tick_soon or time.monotonic() >= next_tick
            if ticked:
                self._tick_soon = False
                next_tick = time.monotonic() + tick
                try:
                    self._upkeep()
                except Exception:
                    log.exception("Mesos backend upkeep: unexpected error (continuing)")
            self._after_batch(ticked)
        for future, _ in self._waiters:
            future.set_exception(BackendError("the Mesos backend was closed", code=ErrorCode.BACKEND_CLOSED))
        self._calls_out.put(None)
        self._acks_out.put(None)

    def _after_batch(self, ticked: bool) -> None:
        """Acknowledge what the batch journaled (the acks thread makes it durable first), send
        ACCEPTs, re-check the
        waiters if something they wait for changed (or their deadlines on a tick)."""
        if self._table.acks_due:
            acks = self._table.take_acks()
            try:
                handle = self._table.journal.durable_handle()  # fsynced by the acks thread, then acked
            except OSError as err:
                log.error("cannot sync the task journal (%s); not acknowledging %d update(s)", err, len(acks))
            else:
                if self._client is not None:
                    self._acks_out_n += 1
                    self._acks_out.put((self._client, acks, handle))
                elif handle is not None:
                    os.close(handle)
        self._dispatch_accepts()
        if self._waiters and (self._changed or ticked):
            now = self.clock()
            self._waiters = [(future, waiter) for future, waiter in self._waiters if not waiter(now)]
        self._changed = False

    def _send(
        self, what: str, fn: Callable[[SchedulerClient], None], on_done: Callable[[bool], None] | None = None
    ) -> None:
        """Hand one call to the calls thread (in order); ``on_done(ok)`` runs on the loop after."""
        client = self._client
        if client is None or self._read_only:
            if on_done is not None:
                on_done(False)
            return

        def call() -> None:
            ok = True
            try:
                fn(client)
            except MesosError as err:
                log.warning("%s failed: %s", what, err)
                ok = False
            except Exception:
                log.exception("%s failed unexpectedly", what)
                ok = False
            if on_done is not None:
                self._inbox.put(lambda: on_done(ok))

        self._calls_out.put(call)

    # Defined in ``workers``: the ACCEPT bursts, the periodic work, the two sender threads.

    @abstractmethod
    def _dispatch_accepts(self) -> None: ...

    @abstractmethod
    def _upkeep(self) -> None: ...

    @abstractmethod
    def _calls_loop(self) -> None: ...

    @abstractmethod
    def _acks_loop(self) -> None: ...

    # ---- helpers (on the loop) -------------------------------------------------------------------

    @property
    def owner(self) -> str:
        return f"{self.config.framework_name}/{self._framework.instance_id}"

    def _framework_info(self, gpu: bool | None = None) -> FrameworkInfo:
        config = self.config
        capabilities = [Capability.PARTITION_AWARE, Capability.TASK_KILLING_STATE]
        if self._gpu_enabled if gpu is None else gpu:
            capabilities.append(Capability.GPU_RESOURCES)
        return FrameworkInfo(
            user=config.user or getpass.getuser(),
            name=config.framework_name,
            id=self._framework.framework_id,
            failover_timeout=config.failover_timeout_s,
            checkpoint=config.checkpoint,
            roles=tuple(config.roles),
            principal=config.principal,
            hostname=config.hostname or socket.gethostname(),
            webui_url=config.webui_url,
            capabilities=tuple(capabilities),
            labels={f"{LABEL_PREFIX}instance": self._framework.instance_id},
        )

    def _send_kill(self, task_id: str, agent_id: str | None, grace_s: float | None) -> None:
        self._send(f"KILL {task_id}", lambda c: c.kill(task_id, agent_id, grace_s))

    def _usable(self) -> None:
        if self._fatal is not None:
            raise self._fatal

    # ---- the policies: decided by ``decide``, executed here (on the loop) ----------------------

    @property
    def _connected(self) -> bool:
        """Subscribed, and the subscription has not ended (the reducer's to say)."""
        return self._policy.connected

    @property
    def _queue(self) -> dict[str, Waiting]:
        """The FIFO queue of waiting gangs (the reducer's: read it, never write it)."""
        return self._policy.queue

    @property
    def _reservations(self) -> dict[str, Reservation]:
        """The placements not launched yet (the reducer's: read it, never write it)."""
        return self._policy.reservations

    def _decide(self, event: msg.Event, now: float | None = None) -> None:
        """Fold ``event`` into the policies and make the calls they decide."""
        self._execute(decide.on_event(self._policy, event, self.clock() if now is None else now))

    def _execute(self, calls: list[msg.Call]) -> None:
        """Make the calls the reducer decided, in order (HTTP ones on the calls thread)."""
        for call in calls:
            self._execute_one(call)

    def _execute_one(self, call: msg.Call) -> None:
        match call:
            case msg.Revive(roles=roles):
                self._send("REVIVE", lambda c: c.revive(list(roles)), on_done=self._interest_answered)
            case msg.Suppress(roles=roles):
                self._send("SUPPRESS", lambda c: c.suppress(list(roles)), on_done=self._interest_answered)
            case msg.Reconcile(tasks=()):
                self._send("RECONCILE (implicit)", lambda c: c.reconcile([]))
            case msg.Reconcile(tasks=tasks):
                log.info("reconciling %d task(s)", len(tasks))
                self._send("RECONCILE", lambda c: c.reconcile(list(tasks)))
            case msg.Kill(task_id=task_id, agent_id=agent_id, grace_s=grace, unknown=unknown):
                if unknown:
                    log.warning("task %s runs but tfdeclare does not know it: killing it", task_id)
                self._send_kill(task_id, agent_id, grace)
            case msg.Decline(offer_ids=offer_ids, refuse_s=refuse_s):
                for offer_id in offer_ids:
                    self._pool.remove(offer_id)
                self._send("DECLINE", lambda c: c.decline(list(offer_ids), refuse_s))
            case msg.RefreshAgents():
                self._refresh_agents()
            case msg.PlacementExpired(job=job):
                log.info("placement of %s was not launched in time: released", job)
            case msg.WakeWatchers():
                self._changed = True
                self._notify()
            case _:
                assert_never(call)

    def _interest_answered(self, ok: bool) -> None:
        self._decide(msg.InterestAnswered(ok, bool(self._pool.offers)))

    def _refresh_agents(self) -> None:
        """Ask the master for its agents and what each has (``GET_AGENTS``, on the calls
        thread), and the roles' quota; the answer replaces the pool's capacities."""
        answer: list[list[AgentOffer]] = []
        quota: list[dict[str, dict[str, float]]] = []
        roles = self.config.roles

        def ask(client: SchedulerClient) -> None:
            listed = (agent_capacity(raw, roles) for raw in client.get_agents())
            answer.append([c for c in listed if c is not None])
            try:  # the roles' quota limits: a gang over them is never offered in full
                quota.append(client.get_quota())
            except MesosError as err:  # not allowed to see it, or a master without quota
                log.debug("no quota from the master: %s", err)

        def done(ok: bool) -> None:
            self._decide(msg.AgentsAnswered(ok))
            if ok and answer and self._connected:
                self._pool.set_agents(answer[0])
                if quota:
                    self._pool.set_quota(quota[0])
                self._changed = True
                self._notify()

        self._send("GET_AGENTS", ask, on_done=done)

    def _notify(self) -> None:
        """Tell the watchers (on the loop: a watcher only wakes someone, it never calls back)."""
        for notify in list(self._watchers):
            try:
                notify()
            except Exception:
                log.exception("a watcher of the Mesos backend raised")

    def _ended(self, entry: TaskEntry, now: float) -> bool:
        state, _, _ = observed_state(entry, now, self.config.fencing_timeout_s)
        return state.ended
