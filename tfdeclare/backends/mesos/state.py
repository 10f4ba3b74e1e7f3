"""The Mesos backend's shared state and the small helpers every part of it uses.

This module owns ``BackendState``: the journal and framework files, the offer pool, the
reservations of placed gangs, the FIFO queue of waiting gangs, the queue of ACCEPTs to send,
reconciliation and kill bookkeeping, and the one lock (``_lock``, with the conditions
``_cond`` and ``_accepts_ready``) that guards all of it. ``scheduler`` (events from the
master), ``workers`` (the backend's threads) and ``backend`` (the protocol) build on it.
"""

from __future__ import annotations

import collections
import getpass
import logging
import re
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from tfdeclare.backends.base import BackendError
from tfdeclare.backends.mesos.auth import Credentials
from tfdeclare.backends.mesos.client import SchedulerClient
from tfdeclare.backends.mesos.config import MesosConfig
from tfdeclare.backends.mesos.errors import MesosError
from tfdeclare.backends.mesos.info import Capability, FrameworkInfo
from tfdeclare.backends.mesos.journal import (
    FrameworkState,
    FrameworkStore,
    JournalError,
    TaskEntry,
    TaskJournal,
)
from tfdeclare.backends.mesos.offers import HeldOffer, OfferPool
from tfdeclare.backends.mesos.placement import AgentOffer, GangFit, PlacementOptions
from tfdeclare.backends.mesos.sandbox import SandboxReader
from tfdeclare.backends.mesos.taskinfo import LABEL_PREFIX
from tfdeclare.backends.mesos.taskstate import LOST_LIKE, is_terminal, observed_state
from tfdeclare.core.run.tasks import GangRequest, TaskLaunch

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
LAUNCH_BURST = 64  # ACCEPTs pipelined in one go at most


@dataclass(slots=True)
class Reservation:
    job: str
    fit: GangFit
    expires_at: float


@dataclass(slots=True)
class Accept:
    """One ACCEPT to send: the tasks of one gang on one agent, with that agent's offers."""

    job: str
    agent_id: str
    role: str
    offer_ids: list[str]
    tasks: list[TaskLaunch]


@dataclass(slots=True)
class Waiting:
    """A job in the FIFO queue of gangs waiting for offers."""

    request: GangRequest
    first_asked: float
    last_asked: float


class BackendState:
    """Everything the parts of the Mesos backend share; see the module docstring."""

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
        self._reservations: dict[str, Reservation] = {}
        self._queue: dict[str, Waiting] = {}
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
        # An offer round after this time shows every agent with free resources (a REVIVE, a
        # new subscription, GPU offers asked for): only then is "can never fit" trusted.
        self._offers_reset_at = 0.0
        self._filtered = False  # we declined with a filter since the last REVIVE
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
        self._accepts: collections.deque[Accept] = collections.deque()  # ACCEPTs to send, in order
        self._accepts_ready = threading.Condition(self._lock)
        self._unsent: set[str] = set()  # journaled tasks whose ACCEPT has not been answered
        self._sandbox: SandboxReader | None = None

    # ---- helpers -------------------------------------------------------------------------------

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

    def _head(self, before: float | None = None, exclude: str | None = None) -> tuple[str, Waiting] | None:
        """The job first in line (optionally: that asked before ``before``)."""
        for job, waiting in self._queue.items():  # insertion order = first asked
            if job == exclude:
                continue
            if before is not None and waiting.first_asked >= before:
                return None
            return job, waiting
        return None

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

    def _notify(self) -> None:
        for notify in list(self._watchers):
            try:
                notify()
            except Exception:
                log.exception("a watcher of the Mesos backend raised")

    def _ended(self, entry: TaskEntry, now: float) -> bool:
        state, _, _ = observed_state(entry, now, self.config.fencing_timeout_s)
        return state.ended

    def _compact(self) -> None:
        try:
            self._journal.compact(self._tasks.values())
        except OSError as err:
            log.error("cannot compact the task journal: %s", err)
