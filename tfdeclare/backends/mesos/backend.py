"""``MesosBackend``: the backend protocol on a Mesos cluster, tfdeclare as a v1 HTTP framework.

Threads (all daemon threads, started on first use, none at import):

- the client's *stream* thread delivers events to ``_Events``: offers go into the pool,
  status updates into the journal (written before they are acknowledged), the framework id
  into ``framework.json`` (before anything acts on it);
- the client's heartbeat *watchdog*;
- ``mesos-backend-acks``: fsyncs the journal once per batch of updates, then acknowledges
  them (updates are acknowledged only once durable);
- ``mesos-backend-timer``: declines offers held longer than ``offerHoldSeconds`` (with a
  ``refuseSeconds`` filter), expires unused reservations, retries explicit reconciliation
  with backoff until every task has an answer, runs implicit reconciliation every
  ``reconcileIntervalSeconds``, re-sends unconfirmed KILLs, kills unknown tasks of ours,
  REVIVEs when work waits and SUPPRESSes when nothing does, notices fencing deadlines;
- the caller's thread (the controller) for ``observe``/``place``/``launch``/``stop``/...

One lock guards the journal, the offer pool, reservations and the queue of waiting jobs;
HTTP calls are made outside it. See ``docs/architecture.md`` (Mesos backend) for the offer,
backfill, fencing and reconciliation policies.
"""

from __future__ import annotations

import collections
import getpass
import logging
import re
import secrets
import socket
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

from tfdeclare.backends.base import BackendError, LogChunk
from tfdeclare.backends.mesos.auth import Credentials, load_credentials
from tfdeclare.backends.mesos.client import ClientConfig, SchedulerClient
from tfdeclare.backends.mesos.errors import (
    ClientStoppedError,
    ConfigError,
    FrameworkFailedOverError,
    FrameworkRemovedError,
    MesosConnectionError,
    MesosError,
    NotSubscribedError,
    SubscribeTimeoutError,
    TerminalError,
)
from tfdeclare.backends.mesos.events import BaseHandler, Offer, TaskStatus
from tfdeclare.backends.mesos.info import Capability, FrameworkInfo, validate_id
from tfdeclare.backends.mesos.journal import (
    FrameworkState,
    FrameworkStore,
    JournalError,
    TaskEntry,
    TaskJournal,
)
from tfdeclare.backends.mesos.offers import HeldOffer, OfferPool
from tfdeclare.backends.mesos.sandbox import SandboxError, SandboxReader
from tfdeclare.backends.mesos.taskinfo import LABEL_PREFIX, task_info, task_labels
from tfdeclare.backends.mesos.taskstate import (
    LOST_LIKE,
    NEVER_LAUNCHED,
    TERMINAL,
    apply_status,
    is_terminal,
    observed_state,
)
from tfdeclare.core.config import MesosConfig
from tfdeclare.core.enums import Role
from tfdeclare.core.placement import (
    AgentOffer,
    GangFit,
    PlacementOptions,
    SlotAssignment,
    backfill_views,
    eligible_for,
    never_fits,
    place_gang,
)
from tfdeclare.core.resources import Resources
from tfdeclare.core.tasks import (
    GangRequest,
    ObservedTask,
    Placement,
    Slot,
    TaskKey,
    TaskLaunch,
    Unplaced,
    UnplacedReason,
)

log = logging.getLogger("tfdeclare.mesos")

# Task ids the controller makes: <job>.<uid>.<role>-<index>.<launch>
OUR_TASK_ID = re.compile(
    r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?\.[^./\\]+\.(chief|ps|worker|evaluator)-\d+\.[^./\\]+$"
)
RECONCILE_FIRST_RETRY_S = 1.0
RECONCILE_MAX_RETRY_S = 60.0
FIRST_OBSERVE_WAIT_S = 2.0  # the first observe() after subscribing waits this long for answers
QUEUE_TTL_S = 15.0  # a waiting job that has not asked again for this long left the queue
MIN_KILL_RETRY_S = 10.0
LAUNCH_DRAIN_S = 30.0  # close() waits this long for queued ACCEPTs


@dataclass(slots=True)
class _Reservation:
    job: str
    fit: GangFit
    expires_at: float


@dataclass(slots=True)
class _Accept:
    """One ACCEPT to send: the tasks of one gang on one agent, with that agent's offers."""

    job: str
    agent_id: str
    role: str
    offer_ids: list[str]
    tasks: list[TaskLaunch]


@dataclass(slots=True)
class _Waiting:
    """A job in the FIFO queue of gangs waiting for offers."""

    request: GangRequest
    first_asked: float
    last_asked: float


class _Events(BaseHandler):
    """Client callbacks (the stream thread) forwarded to the backend."""

    def __init__(self, backend: MesosBackend) -> None:
        self.backend = backend

    def subscribed(
        self, framework_id: str, heartbeat_interval: float, master_info: dict[str, object]
    ) -> None:
        self.backend._on_subscribed(framework_id)

    def offers(self, offers: Sequence[Offer]) -> None:
        self.backend._on_offers(offers)

    def rescind(self, offer_id: str) -> None:
        self.backend._on_rescind(offer_id)

    def update(self, status: TaskStatus) -> None:
        self.backend._on_update(status)

    def failure(self, agent_id: str | None, executor_id: str | None, status: int | None) -> None:
        if agent_id is not None and executor_id is None:
            log.warning("the master removed agent %s; its tasks are reported separately", agent_id)

    def disconnected(self, reason: str) -> None:
        self.backend._on_disconnected(reason)

    def terminated(self, error: TerminalError) -> None:
        self.backend._on_terminated(error)


class MesosBackend:
    """The backend protocol (``tfdeclare.backends.base.Backend``) as a Mesos framework."""

    name = "mesos"

    @classmethod
    def from_config(cls, state_dir: Path, config: MesosConfig) -> MesosBackend:
        return cls(state_dir, config)

    def __init__(
        self, state_dir: Path, config: MesosConfig, *, clock: Callable[[], float] = time.time
    ) -> None:
        if config.on_framework_removed not in ("fail", "newFramework"):
            raise BackendError(
                f"mesos.onFrameworkRemoved must be fail or newFramework, not {config.on_framework_removed!r}"
            )
        self.config = config
        self.clock = clock
        self.root = state_dir / "mesos"
        self._lock = threading.RLock()
        self._cond = threading.Condition(self._lock)
        self._journal = TaskJournal(self.root)
        self._framework_store = FrameworkStore(self.root)
        try:
            self._tasks: dict[str, TaskEntry] = self._journal.load()
            self._framework: FrameworkState = self._framework_store.load()
        except JournalError as err:
            raise BackendError(str(err)) from err
        self._options = PlacementOptions(cpu_tasks_on_gpu_agents=config.cpu_tasks_on_gpu_agents)
        self._pool = OfferPool()
        self._on_agent: dict[str, set[str]] = {}  # agent id -> ids of our tasks there
        for entry in self._tasks.values():
            self._on_agent.setdefault(entry.agent_id, set()).add(entry.task_id)
        self._never_fits_cache: dict[object, str | None] = {}
        self._never_fits_version = -1
        self._reservations: dict[str, _Reservation] = {}
        self._queue: dict[str, _Waiting] = {}
        self._client: SchedulerClient | None = None
        self._connect_lock = threading.Lock()
        self._credentials: Credentials | None = None
        self._gpu_enabled = (
            config.gpu_resources
            or self._framework.gpu_resources
            or any(t.gpus > 0 and not is_terminal(t.state) for t in self._tasks.values())
        )
        # subscription and offers
        self._connected = False
        self._subscribed_at = 0.0
        self._last_offers_at = 0.0
        self._last_demand_at = 0.0
        self._expect_offers_since = 0.0
        self._suppressed = False
        self._revive_wanted = False
        self._last_revive_at = 0.0
        # reconciliation, kills, fencing
        self._reconcile_pending: dict[str, str | None] = {}
        self._reconcile_next_at = 0.0
        self._reconcile_delay = RECONCILE_FIRST_RETRY_S
        self._reconciled = threading.Event()
        self._implicit_next_at = 0.0
        self._kill_sent: dict[str, float] = {}  # task id -> when KILL was last sent
        self._unknown_kills: dict[str, str | None] = {}  # to kill on the next tick
        self._unknown_killed: dict[str, float] = {}  # when a KILL was sent for an unknown task
        self._lost: set[str] = {t.task_id for t in self._tasks.values() if t.state in LOST_LIKE}
        self._interest_lock = threading.Lock()
        self._old_clients: list[SchedulerClient] = []
        self._removed_ids: set[str] = set()
        # acknowledgements
        self._ack_lock = threading.Lock()
        self._acks: list[tuple[str, str, str]] = []
        self._ack_event = threading.Event()
        # life cycle
        self._watchers: list[Callable[[], None]] = []
        self._fatal: BackendError | None = None
        self._read_only = False
        self._closed = threading.Event()
        self._wake = threading.Event()
        self._threads: list[threading.Thread] = []
        self._accepts: collections.deque[_Accept] = collections.deque()  # ACCEPTs to send, in order
        self._accepts_ready = threading.Condition(self._lock)
        self._unsent: set[str] = set()  # journaled tasks whose ACCEPT has not been answered
        self._sandbox: SandboxReader | None = None

    # ---- connection ----------------------------------------------------------------------------

    @property
    def owner(self) -> str:
        return f"{self.config.framework_name}/{self._framework.instance_id}"

    def _framework_info(self) -> FrameworkInfo:
        config = self.config
        capabilities = [Capability.PARTITION_AWARE, Capability.TASK_KILLING_STATE]
        if self._gpu_enabled:
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

    def _load_credentials(self) -> Credentials | None:
        config = self.config
        if config.principal is None or (config.secret_file is None and config.secret_env is None):
            return None
        return load_credentials(
            config.principal, secret_file=config.secret_file, secret_env=config.secret_env
        )

    def _new_client(self) -> SchedulerClient:
        try:
            if self._credentials is None:
                self._credentials = self._load_credentials()
            return SchedulerClient(
                ClientConfig(
                    master=self.config.master,
                    framework=self._framework_info(),
                    credentials=self._credentials,
                    ca_file=self.config.ca_file,
                    insecure_skip_tls_verify=not self.config.tls_verify,
                    auto_acknowledge=False,
                ),
                _Events(self),
            )
        except (ConfigError, ValueError) as err:
            raise BackendError(f"the mesos settings are not usable: {err}") from None

    def _connect(self) -> SchedulerClient:
        """The subscribed client, connecting on first use (raises ``BackendError``)."""
        client = self._client
        if client is not None and self._fatal is None:
            return client
        with self._connect_lock:
            self._usable()
            if self._client is not None:
                return self._client
            for _ in range(2):  # a second time only to subscribe as a new framework
                client = self._new_client()
                client.start()
                try:
                    client.wait_subscribed(self.config.subscribe_timeout_s)
                except FrameworkRemovedError:
                    client.stop()
                    self._framework_removed()
                    self._usable()
                    continue
                except TerminalError as err:
                    client.stop()
                    self._usable()
                    raise BackendError(f"the Mesos client stopped: {err}") from None
                except SubscribeTimeoutError as err:
                    client.stop()
                    detail = f": {err.last_error}" if err.last_error else " (no answer)"
                    raise BackendError(
                        f"cannot reach the Mesos master at {self.config.master} within "
                        f"{self.config.subscribe_timeout_s:g} s{detail}"
                    ) from None
                self._client = client
                self._start_threads()
                return client
            raise BackendError(f"cannot subscribe a new framework at {self.config.master}")

    def _start_threads(self) -> None:
        if self._threads:
            return
        for name, target in (
            ("mesos-backend-timer", self._timer_loop),
            ("mesos-backend-acks", self._ack_loop),
            ("mesos-backend-launcher", self._launcher_loop),
        ):
            thread = threading.Thread(target=target, name=name, daemon=True)
            self._threads.append(thread)
            thread.start()

    def _send_kill(self, task_id: str, agent_id: str | None, grace_s: float | None) -> None:
        self._call(f"KILL {task_id}", lambda c: c.kill(task_id, agent_id, grace_s))

    def _usable(self) -> None:
        if self._fatal is not None:
            raise self._fatal

    def _call(self, what: str, fn: Callable[[SchedulerClient], None]) -> bool:
        """Make one call; a failure is logged (the timer retries what must be retried)."""
        client = self._client
        if client is None or self._read_only:
            return False
        try:
            fn(client)
        except MesosError as err:
            log.warning("%s failed: %s", what, err)
            return False
        return True

    # ---- framework removed / failed over -----------------------------------------------------

    def _framework_removed(self) -> None:
        """The master refused our framework id for good: stop, or start anew (policy)."""
        framework_id = self._framework.framework_id
        if framework_id is None or framework_id in self._removed_ids:
            return  # handled already (the stream thread and the connecting thread both see it)
        self._removed_ids.add(framework_id)
        path = self._framework_store.path
        if self.config.on_framework_removed != "newFramework":
            self._fatal = BackendError(
                f"the Mesos master removed framework {framework_id} (its failover timeout ran out, or it "
                "was torn down), so its tasks were killed. To start a new framework, move "
                f"{path} away (or set mesos.onFrameworkRemoved: newFramework); the old tasks are then "
                "reported gone and their jobs restart per their restart policy."
            )
            log.error("%s", self._fatal)
            return
        with self._lock:
            archived = self._framework_store.archive(f"removed-{int(self.clock())}")
            log.error(
                "the Mesos master removed framework %s; starting a new framework (old id kept in %s)",
                framework_id,
                archived,
            )
            now = self.clock()
            gone = []
            for entry in self._tasks.values():
                if not is_terminal(entry.state):
                    apply_status(
                        entry,
                        "TASK_GONE",
                        reason="REASON_FRAMEWORK_REMOVED",
                        source="SOURCE_MASTER",
                        message=f"framework {framework_id} was removed by the master",
                        timestamp=None,
                        now=now,
                    )
                    gone.append(entry)
            self._journal.put(gone, sync=True)
            self._framework = FrameworkState(None, self._framework.instance_id, self._framework.gpu_resources)
            self._framework_store.save(self._framework)
            self._connected = False
            self._pool.clear()
        self._notify()

    def _on_terminated(self, error: TerminalError) -> None:
        if isinstance(error, ClientStoppedError) or self._closed.is_set():
            return
        if isinstance(error, FrameworkFailedOverError):
            with self._lock:
                self._read_only = True
                self._connected = False
                self._fatal = BackendError(
                    f"another scheduler subscribed as framework {self._framework.framework_id} and took "
                    "over; this controller stops acting (is the same state folder used elsewhere?)"
                )
            log.error("%s", self._fatal)
        elif isinstance(error, FrameworkRemovedError):
            if self._client is None:
                return  # still connecting: _connect() handles it
            self._old_clients.append(self._client)
            self._client = None
            self._framework_removed()
        else:
            self._fatal = BackendError(f"the Mesos client stopped: {error}")
        self._notify()

    # ---- events from the master (stream thread) ---------------------------------------------

    def _on_subscribed(self, framework_id: str) -> None:
        with self._lock:
            if self._read_only:
                return
            if framework_id != self._framework.framework_id:
                self._framework = replace(self._framework, framework_id=framework_id)
                self._framework_store.save(self._framework)  # before anything acts on it
            now = self.clock()
            self._connected = True
            self._subscribed_at = now
            self._expect_offers_since = now
            self._pool.clear()  # offers of an earlier subscription are void
            self._suppressed = False
            self._revive_wanted = True
            self._reconcile_pending = {
                t.task_id: t.agent_id
                for t in self._tasks.values()
                if not is_terminal(t.state) and t.task_id not in self._unsent
            }
            self._reconcile_next_at = now
            self._reconcile_delay = RECONCILE_FIRST_RETRY_S
            if self._reconcile_pending:
                self._reconciled.clear()
            else:
                self._reconciled.set()
            for task_id in list(self._kill_sent):
                self._kill_sent[task_id] = 0.0  # re-send every unconfirmed KILL
            for entry in self._tasks.values():
                if entry.kill_requested and not is_terminal(entry.state):
                    self._kill_sent[entry.task_id] = 0.0
            self._implicit_next_at = now + self.config.reconcile_interval_s
            self._cond.notify_all()
        log.info(
            "subscribed as framework %s; reconciling %d task(s)", framework_id, len(self._reconcile_pending)
        )
        self._wake.set()
        self._notify()

    def _on_disconnected(self, reason: str) -> None:
        with self._lock:
            self._connected = False
            self._pool.clear()
            self._cond.notify_all()

    def _add_task(self, entry: TaskEntry) -> None:
        self._tasks[entry.task_id] = entry
        self._on_agent.setdefault(entry.agent_id, set()).add(entry.task_id)

    def _drop_task(self, task_id: str) -> None:
        entry = self._tasks.pop(task_id, None)
        if entry is not None:
            self._on_agent.get(entry.agent_id, set()).discard(task_id)

    def _ours_on(self, agent_id: str) -> tuple[float, float, int]:
        """What our live tasks hold on an agent (its capacity is at least offered + this)."""
        cpus = mem = 0.0
        gpus = 0
        for task_id in self._on_agent.get(agent_id, ()):
            entry = self._tasks[task_id]
            if not is_terminal(entry.state):
                cpus, mem, gpus = cpus + entry.cpus, mem + entry.mem_mib, gpus + entry.gpus
        return cpus, mem, gpus

    def _on_offers(self, offers: Sequence[Offer]) -> None:
        with self._lock:
            if self._read_only or not self._connected:
                return
            now = self.clock()
            # Hold offers while work waits, or waited a moment ago (the controller places one
            # job after the other); with nothing to do, decline at once (with a filter).
            recent = now - self._last_demand_at < self.config.offer_hold_s
            demand = bool(self._queue) or bool(self._reservations) or recent
            hold = self.config.offer_hold_s if demand else 0.0
            for offer in offers:
                held = HeldOffer.parse(offer, now, hold)
                self._pool.add(held, self._ours_on(held.agent_id))
            self._last_offers_at = now
            self._cond.notify_all()
        self._wake.set()
        if demand:
            self._notify()

    def _on_rescind(self, offer_id: str) -> None:
        with self._lock:
            self._pool.remove(offer_id)
            self._cond.notify_all()

    def _on_update(self, status: TaskStatus) -> None:
        changed = False
        with self._lock:
            if self._read_only:
                return  # another scheduler owns the framework now: not ours to record or ack
            now = self.clock()
            task_id = status.task_id
            entry = self._tasks.get(task_id)
            if self._reconcile_pending:
                self._reconcile_pending.pop(task_id, None)
                if not self._reconcile_pending:
                    self._reconciled.set()
            if entry is None:
                if status.state not in TERMINAL and self._is_ours(task_id, status):
                    log.warning(
                        "task %s runs on the master but tfdeclare does not know it: killing it", task_id
                    )
                    self._unknown_kills[task_id] = status.agent_id
                    self._wake.set()
            elif entry.state is None and status.state in NEVER_LAUNCHED:
                # The task never reached an agent: its launch did not happen. Forget it, so the
                # controller launches the slot again (this is not a failure of the task).
                log.warning(
                    "task %s was never launched (%s %s: %s); it will be launched again",
                    task_id,
                    status.state,
                    status.reason,
                    status.message,
                )
                self._drop_task(task_id)
                self._journal.delete([task_id], sync=False)
                changed = True
            else:
                was_lost = entry.state in LOST_LIKE
                changed = apply_status(
                    entry,
                    status.state,
                    reason=status.reason,
                    source=status.source,
                    message=status.message,
                    timestamp=status.timestamp,
                    now=now,
                )
                if changed:
                    self._journal.put([entry], sync=False)
                    if status.state in TERMINAL:
                        self._kill_sent.pop(task_id, None)
                        self._expect_offers_since = max(self._expect_offers_since, now)
                    elif (
                        entry.kill_requested
                        and status.state in ("TASK_RUNNING", "TASK_STARTING")
                        and was_lost
                    ):
                        self._kill_sent[task_id] = 0.0  # it came back: kill it again now
                        self._wake.set()
                    if status.state in LOST_LIKE:
                        self._lost.add(task_id)
            if changed:
                self._cond.notify_all()
        if status.uuid is not None and status.agent_id is not None:
            with self._ack_lock:
                self._acks.append((status.agent_id, task_id, status.uuid))
            self._ack_event.set()
        if changed:
            self._notify()

    def _is_ours(self, task_id: str, status: TaskStatus) -> bool:
        if not OUR_TASK_ID.match(task_id):
            return False
        labels = status.raw.get("labels")
        if isinstance(labels, dict):
            for label in labels.get("labels", []):
                if label.get("key") == f"{LABEL_PREFIX}owner":
                    return bool(label.get("value") == self.owner)
        return True

    # ---- acknowledgements (acks thread) ---------------------------------------------------------

    def _ack_loop(self) -> None:
        while not self._closed.is_set():
            self._ack_event.wait(0.5)
            self._ack_event.clear()
            with self._ack_lock:
                batch, self._acks = self._acks, []
            if not batch:
                continue
            try:
                self._journal.sync()  # durable first: only then may the master forget them
            except OSError as err:
                log.error(
                    "cannot sync the task journal (%s); not acknowledging %d update(s)", err, len(batch)
                )
                continue
            client = self._client
            if client is None or self._closed.is_set():
                continue
            try:
                client.acknowledge_many(batch)
            except MesosError as err:
                log.debug("ACKNOWLEDGE of %d update(s) failed (the master resends them): %s", len(batch), err)

    # ---- periodic work (timer thread) ----------------------------------------------------------

    def _timer_loop(self) -> None:
        tick = max(0.02, min(0.2, self.config.offer_hold_s / 4 if self.config.offer_hold_s > 0 else 0.05))
        while not self._closed.is_set():
            try:
                self._tick()
            except Exception:
                log.exception("Mesos backend timer: unexpected error (continuing)")
            self._wake.wait(tick)
            self._wake.clear()

    def _head(self, before: float | None = None, exclude: str | None = None) -> tuple[str, _Waiting] | None:
        """The job first in line (optionally: that asked before ``before``)."""
        for job, waiting in self._queue.items():  # insertion order = first asked
            if job == exclude:
                continue
            if before is not None and waiting.first_asked >= before:
                return None
            return job, waiting
        return None

    def _tick(self) -> None:
        config = self.config
        notify = False
        with self._lock:
            now = self.clock()
            if self._read_only or self._closed.is_set():
                return
            for token, reservation in list(self._reservations.items()):
                if reservation.expires_at <= now:
                    log.info("placement of %s was not launched in time: released", reservation.job)
                    del self._reservations[token]
            for job, waiting in list(self._queue.items()):
                if now - waiting.last_asked > QUEUE_TTL_S:
                    del self._queue[job]
            connected = self._connected
            declines = self._expired_offers(now) if connected else []
            reconcile: list[tuple[str, str | None]] = []
            if connected and self._reconcile_pending and now >= self._reconcile_next_at:
                reconcile = sorted(self._reconcile_pending.items(), key=lambda kv: kv[0])
                self._reconcile_next_at = now + self._reconcile_delay
                self._reconcile_delay = min(RECONCILE_MAX_RETRY_S, self._reconcile_delay * 2)
            implicit = connected and now >= self._implicit_next_at
            if implicit:
                self._implicit_next_at = now + config.reconcile_interval_s
            kills = self._kills_due(now) if connected else []
            unknown: list[tuple[str, str | None]] = []
            if connected:
                unknown = list(self._unknown_kills.items())
                self._unknown_kills.clear()
            for task_id in list(self._lost):
                entry = self._tasks.get(task_id)
                if entry is None or entry.state not in LOST_LIKE or entry.lost_since is None:
                    self._lost.discard(task_id)
                elif now - entry.lost_since >= config.fencing_timeout_s:
                    self._lost.discard(task_id)  # presumed gone from now on: the controller acts
                    notify = True
            snapshot = None
            if self._journal.needs_compaction(len(self._tasks)):
                try:
                    snapshot = self._journal.begin_compaction(self._tasks.values())
                except OSError as err:
                    log.error("cannot compact the task journal: %s", err)
        if snapshot is not None:
            try:
                self._journal.finish_compaction(snapshot)
            except OSError as err:
                log.error("cannot write the task journal snapshot: %s", err)
        if declines:
            self._call("DECLINE", lambda c: c.decline(declines, config.refuse_s))
        if reconcile:
            log.info("reconciling %d task(s)", len(reconcile))
            self._call("RECONCILE", lambda c: c.reconcile(reconcile))
        if implicit:
            self._call("RECONCILE (implicit)", lambda c: c.reconcile([]))
        for task_id, agent_id, grace in kills:
            self._send_kill(task_id, agent_id, grace)
        for task_id, agent_id in unknown:
            self._send_kill(task_id, agent_id, None)
        self._sync_offer_interest()
        if notify:
            self._notify()

    def _sync_offer_interest(self, revive_now: bool = False) -> None:
        """REVIVE when work waits (and we are suppressed, or were asked to), SUPPRESS when
        nothing waits and no offer is held. Decision and call are serialised, so the master
        always ends up told the latest decision."""
        with self._interest_lock:
            with self._lock:
                if not self._connected or self._read_only:
                    return
                now = self.clock()
                demand = bool(self._queue) or bool(self._reservations)
                action = None
                if demand and (
                    self._suppressed
                    or self._revive_wanted
                    or (revive_now and now - self._last_revive_at >= 1.0)
                ):
                    action = "REVIVE"
                    self._last_revive_at = now
                    self._expect_offers_since = now
                elif not demand and not self._pool.offers and (self._revive_wanted or not self._suppressed):
                    action = "SUPPRESS"
                self._revive_wanted = False
            if action is None:
                return
            roles = list(self.config.roles)
            if action == "REVIVE":
                ok = self._call("REVIVE", lambda c: c.revive(roles))
            else:
                ok = self._call("SUPPRESS", lambda c: c.suppress(roles))
            with self._lock:
                if ok:
                    self._suppressed = action == "SUPPRESS"
                else:
                    self._revive_wanted = True  # decide again on the next tick

    def _expired_offers(self, now: float) -> list[str]:
        """Held offers whose time is up (removed from the pool); kept: offers of agents with
        a live reservation, and offers a long-waiting head of the queue can use (bounded)."""
        reserved = {(a.agent_id, a.role) for r in self._reservations.values() for a in r.fit.assignments}
        head = self._head()
        draining = head is not None and now - head[1].first_asked >= self.config.fifo_backfill_s
        expired = []
        for held in list(self._pool.offers.values()):
            if held.hold_until > now or (held.agent_id, held.role) in reserved:
                continue
            if (
                draining
                and head is not None
                and now - held.received_at < self.config.head_of_line_hold_s
                and eligible_for(head[1].request, self._view_of(held), self._options)
            ):
                continue
            self._pool.remove(held.offer_id)
            expired.append(held.offer_id)
        return expired

    @staticmethod
    def _view_of(held: HeldOffer) -> AgentOffer:
        return AgentOffer(
            held.agent_id,
            held.hostname,
            held.cpus,
            held.mem_mib,
            held.gpus,
            held.ports,
            held.attributes,
            held.role,
            gpu_agent=held.gpus > 0,
        )

    def _kills_due(self, now: float) -> list[tuple[str, str | None, float | None]]:
        due: list[tuple[str, str | None, float | None]] = []
        for task_id, sent in self._kill_sent.items():
            entry = self._tasks.get(task_id)
            if entry is None or is_terminal(entry.state):
                continue
            grace = entry.kill_grace_s
            retry = max(MIN_KILL_RETRY_S, 2 * (grace or 0.0))
            if now - sent >= retry:
                self._kill_sent[task_id] = now
                due.append((task_id, entry.agent_id, grace))
        return due

    def _compact(self) -> None:
        try:
            self._journal.compact(self._tasks.values())
        except OSError as err:
            log.error("cannot compact the task journal: %s", err)

    # ---- watchers -----------------------------------------------------------------------------

    def _notify(self) -> None:
        for notify in list(self._watchers):
            try:
                notify()
            except Exception:
                log.exception("a watcher of the Mesos backend raised")

    def watch(self, notify: Callable[[], None]) -> None:
        """``notify`` is called (from the backend's threads) on every status update, offer
        change that matters to a waiting job, fencing deadline and (re)subscription."""
        self._watchers.append(notify)

    # ---- observe -----------------------------------------------------------------------------

    def observe(self) -> Sequence[ObservedTask]:
        self._connect()
        self._usable()
        # Right after subscribing, give explicit reconciliation a moment to answer, so the
        # first pass of a restarted controller sees what happened while it was away.
        if self._subscribed_at and self.clock() - self._subscribed_at < FIRST_OBSERVE_WAIT_S:
            self._reconciled.wait(max(0.0, FIRST_OBSERVE_WAIT_S - (self.clock() - self._subscribed_at)))
        with self._lock:
            now = self.clock()
            return [self._observed(entry, now) for entry in self._tasks.values() if not entry.forgotten]

    def _observed(self, entry: TaskEntry, now: float) -> ObservedTask:
        state, exit_code, message = observed_state(entry, now, self.config.fencing_timeout_s)
        extra = {"agentId": entry.agent_id}
        if entry.state is not None:
            extra["mesosState"] = entry.state
        if entry.reason:
            extra["mesosReason"] = entry.reason
        return ObservedTask(
            task_id=entry.task_id,
            job=entry.job,
            key=TaskKey(Role(entry.role), entry.index),
            attempt=entry.attempt,
            config_hash=entry.config_hash,
            state=state,
            resources=Resources(entry.cpus, entry.mem_mib, entry.gpus),
            host=entry.host,
            port=entry.port,
            exit_code=exit_code,
            started_at=entry.started_at,
            finished_at=entry.finished_at if state.ended else None,
            message=message,
            spec_hash=entry.spec_hash,
            extra=extra,
        )

    # ---- place / release -----------------------------------------------------------------------

    def place(self, request: GangRequest) -> Placement | Unplaced:
        self._connect()
        self._usable()
        if request.total.gpus > 0 and not self._gpu_enabled:
            self._enable_gpu_offers()
        with self._cond:
            now = self.clock()
            self._last_demand_at = now
            waiting = self._queue.get(request.job)
            new = waiting is None
            if waiting is None:
                waiting = _Waiting(request, now, now)
                self._queue[request.job] = waiting
            else:
                waiting.request, waiting.last_asked = request, now
            answer, ideal, fit = self._try_place(request, waiting)
            if ideal:
                return self._settle(request, answer, fit)
        # Not placed from the offers held: make sure offers come (REVIVE clears our filters and
        # un-suppresses), then wait a little for an offer round that is on its way.
        self._sync_offer_interest(revive_now=new)
        with self._cond:
            deadline = self.clock() + self.config.place_wait_s
            while True:
                answer, ideal, fit = self._try_place(request, waiting)
                if ideal:
                    break
                remaining = deadline - self.clock()
                offers_coming = self._connected and self._last_offers_at < self._expect_offers_since
                if remaining <= 0 or not offers_coming:
                    break
                self._cond.wait(min(remaining, 0.25))
            return self._settle(request, answer, fit)

    def _settle(
        self, request: GangRequest, answer: Placement | Unplaced, fit: GangFit | None
    ) -> Placement | Unplaced:
        """Reserve what a placement took, or leave the queue for good (under the lock)."""
        if isinstance(answer, Placement) and fit is not None:
            self._reservations[answer.token] = _Reservation(
                request.job, fit, self.clock() + max(self.config.offer_hold_s, 1.0)
            )
            self._queue.pop(request.job, None)
        elif isinstance(answer, Unplaced) and answer.reason is UnplacedReason.UNSCHEDULABLE:
            self._queue.pop(request.job, None)
        return answer

    def _try_place(
        self, request: GangRequest, waiting: _Waiting
    ) -> tuple[Placement | Unplaced, bool, GangFit | None]:
        """(answer, ideal, fit): ideal when nothing better can come from offers on their way."""
        now = self.clock()
        if not self._connected:
            message = "not connected to the Mesos master (re-subscribing)"
            return Unplaced(UnplacedReason.WAITING_FOR_OFFERS, message), False, None
        why = self._never_fits(request)
        if why is not None:
            return Unplaced(UnplacedReason.UNSCHEDULABLE, why), True, None
        reserved = [a for r in self._reservations.values() for a in r.fit.assignments]
        views = self._pool.views(reserved)
        note = ""
        head = self._head(before=waiting.first_asked, exclude=request.job)
        if head is not None:
            backfill = backfill_views(
                head[1].request, now - head[1].first_asked, views, self.config.fifo_backfill_s, self._options
            )
            views, note = list(backfill.views), backfill.note
        fit = place_gang(request, views, self._options)
        if not isinstance(fit, GangFit):
            message = f"{fit.message}; {note}" if note else fit.message
            return Unplaced(fit.reason, message), False, None
        slots = tuple(Slot(a.key, a.hostname, a.port, a.agent_id) for a in fit.assignments)
        wanted = {s.key: s.previous for s in request.slots if s.previous is not None}
        ideal = all(
            (a.hostname, a.port) == (wanted[a.key].host, wanted[a.key].port)
            for a in fit.assignments
            if a.key in wanted
        )
        return Placement(request.job, request.attempt, slots, secrets.token_hex(8)), ideal, fit

    def _never_fits(self, request: GangRequest) -> str | None:
        """``never_fits`` against the capacities seen, cached until they change."""
        version = self._pool.capacity_version
        if version != self._never_fits_version:
            self._never_fits_cache.clear()
            self._never_fits_version = version
        key = (tuple((s.key, s.resources) for s in request.slots), request.constraints)
        if key not in self._never_fits_cache:
            self._never_fits_cache[key] = never_fits(request, self._pool.capacities(), self._options)
        return self._never_fits_cache[key]

    def release(self, placement: Placement) -> None:
        with self._cond:
            self._reservations.pop(placement.token, None)
            self._cond.notify_all()
        self._wake.set()

    def _enable_gpu_offers(self) -> None:
        """Add GPU_RESOURCES (UPDATE_FRAMEWORK) the first time a job asks for GPUs."""
        client = self._connect()
        self._gpu_enabled = True
        try:
            client.update_framework(self._framework_info())
        except MesosError as err:
            self._gpu_enabled = False
            raise BackendError(
                f"cannot ask the Mesos master for GPU offers (UPDATE_FRAMEWORK): {err}"
            ) from err
        with self._lock:
            self._framework = replace(self._framework, gpu_resources=True)
            self._framework_store.save(self._framework)
            self._revive_wanted = True
        log.info("asked the master for offers from GPU agents (GPU_RESOURCES)")
        self._wake.set()

    # ---- launch ---------------------------------------------------------------------------------

    def launch(self, placement: Placement, tasks: Sequence[TaskLaunch]) -> None:
        self._connect()
        self._usable()
        with self._cond:
            todo = [t for t in tasks if t.task_id not in self._tasks]
            if not todo:
                self._reservations.pop(placement.token, None)
                return
            for task in todo:
                try:
                    validate_id(task.task_id, "task id")
                except ConfigError as err:
                    raise BackendError(str(err)) from None
            reservation = self._reservations.get(placement.token)
            if reservation is None:
                raise BackendError(
                    f"{placement.job}: its placement was released before the launch (offers are held "
                    f"{self.config.offer_hold_s:g} s); it is placed again"
                )
            assignment_of = {a.key: a for a in reservation.fit.assignments}
            groups: dict[tuple[str, str], list[TaskLaunch]] = {}
            for task in todo:
                assignment = assignment_of.get(task.key)
                if assignment is None or assignment.port != task.slot.port:
                    raise BackendError(f"{task.task_id}: not part of placement {placement.token}")
                groups.setdefault((assignment.agent_id, assignment.role), []).append(task)
            backing = self._await_backing(groups, assignment_of, placement.job)
            now = self.clock()
            entries = [
                self._entry(task, agent_id, now) for (agent_id, _), group in groups.items() for task in group
            ]
            for entry in entries:
                self._add_task(entry)
            self._journal.put(entries, sync=True)  # write-ahead: before any ACCEPT
            for held in backing.values():
                for offer in held:
                    self._pool.remove(offer.offer_id)
            self._reservations.pop(placement.token, None)
            for (agent_id, role), group in sorted(groups.items()):
                offer_ids = [o.offer_id for o in backing[(agent_id, role)]]
                self._accepts.append(_Accept(placement.job, agent_id, role, offer_ids, group))
                self._unsent.update(t.task_id for t in group)
            # What the tasks leave of those offers comes back once the ACCEPT is done.
            self._expect_offers_since = max(self._expect_offers_since, now)
            self._accepts_ready.notify_all()
        self._notify()

    # ---- ACCEPTs (launcher thread) -------------------------------------------------------------

    def _launcher_loop(self) -> None:
        """Sends the queued ACCEPTs in order, so that the controller never waits for the master."""
        while True:
            with self._cond:
                while not self._accepts and not self._closed.is_set():
                    self._accepts_ready.wait(0.5)
                if not self._accepts:
                    return  # closed and drained
                accept = self._accepts.popleft()
                # Tasks asked to stop before their ACCEPT are not launched at all.
                keep = [
                    t
                    for t in accept.tasks
                    if (e := self._tasks.get(t.task_id)) is not None and not e.kill_requested
                ]
                dropped = [t.task_id for t in accept.tasks if t not in keep]
                if dropped:
                    self._forget_unlaunched(dropped, "it was stopped before its launch")
            try:
                self._send_accept(accept, keep)
            except Exception:
                log.exception("launching on agent %s failed unexpectedly", accept.agent_id)
                with self._cond:
                    self._forget_unlaunched([t.task_id for t in keep], "its launch failed")
            finally:
                with self._cond:
                    self._unsent.difference_update(t.task_id for t in accept.tasks)
                    self._accepts_ready.notify_all()

    def _send_accept(self, accept: _Accept, tasks: list[TaskLaunch]) -> None:
        client = self._client
        if not tasks:
            if client is not None:
                self._call("DECLINE", lambda c: c.decline(accept.offer_ids, 0.0))
            return
        infos = [
            task_info(
                task,
                accept.agent_id,
                accept.role,
                task_labels(task, self.owner),
                containerizer=self.config.containerizer,
                shared_filesystem=self.config.shared_filesystem,
            )
            for task in tasks
        ]
        ids = [t.task_id for t in tasks]
        try:
            if client is None:
                raise NotSubscribedError("not connected")
            # What the tasks leave of the offers comes back at the next allocation (no filter):
            # the next gang may need it; unused, it is declined with refuseSeconds then.
            client.launch(accept.offer_ids, infos, 0.0)
        except MesosConnectionError as err:
            log.warning(
                "launching %s on agent %s: %s; reconciliation will tell", accept.job, accept.agent_id, err
            )
            with self._cond:
                for task_id in ids:  # did the master get it? Reconciliation will say.
                    if (entry := self._tasks.get(task_id)) is not None:
                        self._reconcile_pending[task_id] = entry.agent_id
                self._reconcile_next_at = self.clock()
                self._reconciled.clear()
            self._wake.set()
            return
        except MesosError as err:
            with self._cond:
                self._forget_unlaunched(ids, f"the master refused its launch ({err})")
            self._notify()
            return
        with self._cond:
            self._expect_offers_since = max(self._expect_offers_since, self.clock())
            for task_id in ids:  # informational: written with the task's next change
                if (entry := self._tasks.get(task_id)) is not None:
                    entry.accepted = True
            self._cond.notify_all()

    def _forget_unlaunched(self, task_ids: list[str], why: str) -> None:
        """Tasks whose ACCEPT was not sent or was refused never existed: the controller sees
        the slot empty and launches it again. Called under the lock."""
        for task_id in task_ids:
            log.warning("task %s was not launched: %s", task_id, why)
            self._drop_task(task_id)
        self._journal.delete(task_ids, sync=True)
        self._cond.notify_all()

    def _drain_launches(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        with self._cond:
            while (self._accepts or self._unsent) and time.monotonic() < deadline:
                self._accepts_ready.wait(max(0.0, min(0.1, deadline - time.monotonic())))

    def _await_backing(
        self,
        groups: dict[tuple[str, str], list[TaskLaunch]],
        assignment_of: dict[TaskKey, SlotAssignment],
        job: str,
    ) -> dict[tuple[str, str], list[HeldOffer]]:
        """The held offers to ACCEPT per (agent, role); waits (bounded) for offers that an
        earlier launch on the same agent used up to come back."""
        deadline = self.clock() + self.config.place_wait_s
        while True:
            backing: dict[tuple[str, str], list[HeldOffer]] = {}
            missing = []
            for (agent_id, role), group in groups.items():
                held = self._pool.covers(agent_id, role, [assignment_of[t.key] for t in group])
                if held is None:
                    missing.append(agent_id)
                else:
                    backing[(agent_id, role)] = held
            if not missing:
                return backing
            remaining = deadline - self.clock()
            if remaining <= 0 or not self._connected:
                raise BackendError(
                    f"{job}: the offers of agent(s) {', '.join(sorted(missing))} were used or rescinded "
                    "before the launch; it is placed again"
                )
            self._cond.wait(min(remaining, 0.25))

    def _entry(self, task: TaskLaunch, agent_id: str, now: float) -> TaskEntry:
        return TaskEntry(
            task_id=task.task_id,
            job=task.job,
            role=task.key.role.value,
            index=task.key.index,
            attempt=task.attempt,
            config_hash=task.config_hash,
            spec_hash=task.spec_hash,
            cpus=task.resources.cpus,
            mem_mib=task.resources.mem_mib,
            gpus=task.resources.gpus,
            agent_id=agent_id,
            host=task.slot.host,
            port=task.slot.port,
            agent_url=self._pool.agent_urls.get(agent_id, ""),
            created_at=now,
            kill_grace_s=task.grace_period_s,
        )

    # ---- stop / forget / purge ----------------------------------------------------------------

    def stop(self, task_ids: Sequence[str], grace_s: float) -> None:
        self._connect()
        self._usable()
        now = self.clock()
        send: list[tuple[str, str | None]] = []
        with self._lock:
            changed = []
            for task_id in task_ids:
                entry = self._tasks.get(task_id)
                if entry is None or is_terminal(entry.state):
                    continue
                if not entry.kill_requested or entry.kill_grace_s != grace_s:
                    entry.kill_requested = True
                    entry.kill_grace_s = grace_s
                    changed.append(entry)
                last = self._kill_sent.get(task_id)
                if last is None or now - last >= max(MIN_KILL_RETRY_S, 2 * grace_s):
                    self._kill_sent[task_id] = now
                    send.append((task_id, entry.agent_id))
            self._journal.put(changed, sync=True)
        for task_id, agent_id in send:
            self._send_kill(task_id, agent_id, grace_s)
        if changed:
            self._notify()

    def _ended(self, entry: TaskEntry, now: float) -> bool:
        state, _, _ = observed_state(entry, now, self.config.fencing_timeout_s)
        return state.ended

    def forget(self, task_ids: Sequence[str]) -> None:
        with self._lock:
            now = self.clock()
            forgotten = []
            for task_id in task_ids:
                entry = self._tasks.get(task_id)
                if entry is not None and not entry.forgotten and self._ended(entry, now):
                    entry.forgotten = True
                    forgotten.append(entry)
            self._journal.put(forgotten, sync=False)

    def purge(self, job: str) -> None:
        with self._lock:
            now = self.clock()
            gone = [t.task_id for t in self._tasks.values() if t.job == job and self._ended(t, now)]
            for task_id in gone:
                self._drop_task(task_id)
                self._kill_sent.pop(task_id, None)
                if self._sandbox is not None:
                    self._sandbox.forget(task_id)
            self._journal.delete(gone, sync=False)

    # ---- logs ---------------------------------------------------------------------------------

    def read_log(self, task_id: str, offset: int = 0, limit: int = 1 << 20) -> LogChunk:
        with self._lock:
            entry = self._tasks.get(task_id)
            if entry is None:
                raise BackendError(f"no log for task {task_id}")
            ended = self._ended(entry, self.clock())
            agent_url = entry.agent_url
            if self._sandbox is None:
                try:
                    if self._credentials is None:
                        self._credentials = self._load_credentials()
                except ConfigError as err:
                    raise BackendError(f"the mesos settings are not usable: {err}") from None
                self._sandbox = SandboxReader(
                    verify=self.config.ca_file or self.config.tls_verify,
                    auth=self._credentials.httpx_auth() if self._credentials else None,
                )
            reader = self._sandbox
        if not agent_url:
            raise BackendError(f"no log for task {task_id}: the offer named no agent address")
        try:
            piece = reader.read(agent_url, task_id, offset, limit, ended)
        except SandboxError as err:
            raise BackendError(f"cannot read the log of {task_id}: {err}") from None
        return LogChunk(piece.data, piece.next_offset, piece.complete)

    # ---- close ------------------------------------------------------------------------------------

    def close(self) -> None:
        """Stop threads and connections. No TEARDOWN: the tasks keep running."""
        self._drain_launches(LAUNCH_DRAIN_S)  # ACCEPTs already decided go out first
        self._closed.set()
        with self._cond:
            self._accepts_ready.notify_all()
        self._wake.set()
        self._ack_event.set()
        for thread in self._threads:
            thread.join(timeout=5)
        client, self._client = self._client, None
        for old in [*self._old_clients, *([client] if client is not None else [])]:
            old.stop()
        with self._lock:
            if self._journal.wrote and not self._read_only:
                self._compact()
            self._journal.close()
        if self._sandbox is not None:
            self._sandbox.close()

    def teardown(self) -> None:
        """TEARDOWN: the master kills every task of the framework and forgets it. Only ever
        called explicitly (never by close() or on errors)."""
        client = self._connect()
        client.teardown()
        with self._lock:
            self._client = None
