"""``MesosBackend``: the backend protocol on a Mesos cluster, tfdeclare as a v1 HTTP framework.

This module owns the protocol (``tfdeclare.backends.base.Backend``) and nothing else: each
method runs in the caller's thread and hands the loop (``loop.Loop``) the work, waiting for
its answer where there is one. The backend is made of collaborators it owns as fields:

- ``loop``: the one thread that owns every piece of state below (typed messages in, waiters);
- ``table`` (``tasktable``): the tasks, their journal and the launches and acknowledgements
  in flight;
- ``framework`` (``framework``): the framework file, capabilities, fatal and read-only states;
- ``sender`` (``sender``): the client and the calls and acknowledgement threads, the ACCEPT
  bursts;
- ``policies`` (``policies``): the reducer's state, the offers held, the calls it decides;
- ``scheduler`` (``scheduler``): the loop's handlers of the master's events and the senders'
  answers, with ``placing`` and ``launching`` (a gang's placement and launch on the loop);
- ``connection`` (``connection``): connecting lazily on first use, in the caller's thread.

``observe`` maps the journal onto ``TaskState``; ``place`` is gang placement over the held
offers; ``launch`` journals, then queues ACCEPTs sent in bursts; ``stop`` KILLs with the grace
period; ``forget``/``purge``; ``read_log`` reads the agent's sandbox; ``close`` sends no
TEARDOWN (tasks keep running).

The first ``observe`` after a (re)subscription waits for the answers to the explicit
RECONCILE of every live task the journal knows (one UPDATE per task), at most
``FIRST_OBSERVE_WAIT_S`` (2 s) after SUBSCRIBED, so the first pass of a process that just
started (apply, status --refresh, delete, the daemon, the background controller) sees a task
that ended while no controller ran as ended, and its policy acts in that same command: the
agent re-sends an update nobody acknowledged only on its retry timer (10 s and up), so without
the wait the pass would decide on what the journal last knew. A master answers a
reconciliation in milliseconds; it does not answer at all for tasks on agents still
re-registering after a master failover, so the wait is bounded, short enough for a command
line, and the answers that come later are folded in by the next pass.

See ``docs/architecture.md`` (Mesos backend) for the threads, one launch's path and the offer,
backfill, fencing and reconciliation policies.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from dataclasses import replace
from pathlib import Path

from tfdeclare.backends.base import BackendError, LogChunk
from tfdeclare.backends.mesos import closing
from tfdeclare.backends.mesos import decide_messages as msg
from tfdeclare.backends.mesos.auth import Credentials, credentials_for
from tfdeclare.backends.mesos.clusterwire import ClusterWire
from tfdeclare.backends.mesos.config import MesosConfig
from tfdeclare.backends.mesos.connection import Connection
from tfdeclare.backends.mesos.errors import ConfigError
from tfdeclare.backends.mesos.framework import FrameworkRecord
from tfdeclare.backends.mesos.inbox import Inbound
from tfdeclare.backends.mesos.info import validate_id
from tfdeclare.backends.mesos.journal import JournalError, TaskEntry
from tfdeclare.backends.mesos.loop import Effect, Loop
from tfdeclare.backends.mesos.policies import Policies
from tfdeclare.backends.mesos.sandbox import Piece, SandboxError, SandboxReader
from tfdeclare.backends.mesos.scheduler import Scheduler
from tfdeclare.backends.mesos.sender import Sender
from tfdeclare.backends.mesos.taskstate import LOST_LIKE, is_terminal, observed_state, observed_task
from tfdeclare.backends.mesos.tasktable import TaskTable
from tfdeclare.backends.mesos.tls import client_certificate_of, tls_verify
from tfdeclare.backends.secrets import SecretUnavailable, read_all
from tfdeclare.core.enums import SecretSource
from tfdeclare.core.errors import ErrorCode
from tfdeclare.core.run.tasks import GangRequest, ObservedTask, Placement, TaskLaunch, Unplaced

FIRST_OBSERVE_WAIT_S = 2.0  # the first observe() after subscribing waits this long for answers


class MesosBackend:
    """The backend protocol (``tfdeclare.backends.base.Backend``) as a Mesos framework."""

    name = "mesos"

    def __init__(
        self, state_dir: Path, config: MesosConfig, *, clock: Callable[[], float] = time.time
    ) -> None:
        if config.on_framework_removed not in ("fail", "newFramework"):
            raise BackendError(
                f"mesos.onFrameworkRemoved must be fail or newFramework, not {config.on_framework_removed!r}",
                code=ErrorCode.SETTINGS_UNUSABLE,
            )
        self.config = config
        root = state_dir / "mesos"
        try:
            table = TaskTable(root)
            gpu_wanted = any(t.gpus > 0 and not is_terminal(t.state) for t in table)
            self._framework = FrameworkRecord(root, config, self._load_credentials, gpu_wanted)
        except JournalError as err:
            raise BackendError(str(err), code=ErrorCode.BACKEND_STATE_UNREADABLE) from err
        self._table = table
        self._sender = Sender(config, lambda message: self._loop.post(message))  # noqa: PLW0108 (made below)
        lost = {t.task_id: t.lost_since for t in table if t.state in LOST_LIKE and t.lost_since is not None}
        self._policies = Policies(config, self._sender, clock, lost)
        self._scheduler = Scheduler(config, clock, table, self._framework, self._sender, self._policies)
        hold = config.offer_hold_s
        self._loop: Loop[Inbound] = Loop(
            "mesos-backend-loop",
            self._scheduler.handle,
            before_start=self._sender.start,
            upkeep=self._scheduler.upkeep,
            after_batch=self._scheduler.after_batch,
            stopped=self._sender.stop,
            tick_s=max(0.02, min(0.2, hold / 4 if hold > 0 else 0.05)),
            clock=clock,
        )
        self._connection = Connection(config, self._loop, self._framework, self._sender, self._scheduler)
        self._sandbox: SandboxReader | None = None
        # each task's cluster, in band or fetched; the server's answers told to the loop
        self._cluster_wire = ClusterWire(config.cluster_server, root, self._loop.post)

    @classmethod
    def from_config(cls, state_dir: Path, config: MesosConfig) -> MesosBackend:
        return cls(state_dir, config)

    @property
    def clock(self) -> Callable[[], float]:
        return self._loop.clock

    @property
    def address_wait_s(self) -> float | None:
        """How long a task restarting alone waits for an offer of its agent and port."""
        return self.config.same_address_timeout_s

    def _load_credentials(self) -> Credentials | None:
        return credentials_for(self.config)

    def _ready(self) -> None:
        """Connected (connecting on first use) and usable, or ``BackendError``."""
        self._connection.client()
        self._framework.usable()
        self._serve_clusters()

    def _serve_clusters(self) -> None:
        """With ``mesos.clusterServer``, serve from the subscription on: tasks an earlier process
        launched fetch their cluster from this one (``clusterwire``)."""
        try:
            self._cluster_wire.start()
        except OSError as err:
            raise BackendError(
                f"mesos.clusterServer cannot listen: {err}", code=ErrorCode.SETTINGS_UNUSABLE
            ) from None

    def watch(self, notify: Callable[[], None]) -> None:
        """``notify`` is called (from the backend's loop thread) on every status update, offer
        change that matters to a waiting job, fencing deadline and (re)subscription. It must
        only wake someone up, never call the backend itself."""
        self._loop.ask(lambda: self._policies.watchers.append(notify))

    def tend(self) -> None:
        """The loop thread does the framework's upkeep as events come; this only reports a
        subscription that is gone: ``BackendError`` (MasterUnreachable, with the master's last
        answer) while the client is not subscribed and a SUBSCRIBE failed (the tasks keep
        running on the agents; nothing is done to them), and FrameworkRefused while the master
        has removed the framework (policy ``fail``). The client re-subscribes on its own (a
        backoff capped near 15 s), so a blip heals by itself: the daemon reports it only once
        it has stood ``core.errors.UNREACHABLE_REPORT_S``, as it does an unreachable Docker
        engine. The words stay the same while the answer does (a pass logs a change)."""
        if self._framework.removed_for_good:  # policy fail: every pass says so
            self._framework.usable()
        client = self._sender.client
        if client is None or client.terminal_error is not None:
            return  # not connected yet (the pass connects), or stopped (reported then)
        down = client.unsubscribed_for()
        last = client.last_error
        if down is None or last is None:
            return
        raise BackendError(
            f"not subscribed to the Mesos master at {self.config.master} "
            f"(the tasks keep running on the agents): {last}",
            code=ErrorCode.MASTER_UNREACHABLE,
        )

    def observe(self) -> Sequence[ObservedTask]:
        """The tasks as the task table has them. A framework the master removed (policy
        ``fail``) is answered too: its tasks are gone, killed by the master (journaled when it
        said so), so their jobs are seen to have lost them; what would start them again
        (``place``, ``launch``) raises FrameworkRefused until an operator chooses."""
        try:
            self._ready()
        except BackendError:
            if not self._framework.removed_for_good:
                raise
        fencing_s = self.config.fencing_timeout_s

        def start(future: Future[list[ObservedTask]]) -> Effect:
            def answer(now: float) -> bool:
                # Right after subscribing, give explicit reconciliation a moment to answer, so the
                # first pass of a restarted controller sees what happened while it was away.
                policy = self._policies.policy
                since = policy.subscribed_at
                if policy.reconcile_pending and since is not None and now - since < FIRST_OBSERVE_WAIT_S:
                    return False
                future.set_result([observed_task(e, now, fencing_s) for e in self._table if not e.forgotten])
                return True

            self._loop.keep_trying(future, answer)
            return Effect.NONE

        return self._loop.request(start)

    def place(self, request: GangRequest) -> Placement | Unplaced:
        self._ready()
        if request.total.gpus > 0:
            self._connection.enable_gpu_offers()
        return self._loop.request(lambda f: self._scheduler.placer.start(self._loop.keep_trying, f, request))

    def release(self, placement: Placement) -> None:
        def release() -> Effect:
            self._policies.decide(msg.Released(placement.token))
            return Effect.TICK

        self._loop.run(release)

    def launch(self, placement: Placement, tasks: Sequence[TaskLaunch]) -> None:
        """Journal the tasks, then queue their ACCEPTs (``launching``, then ``sender``)."""
        self._ready()
        for task in tasks:
            try:
                validate_id(task.task_id, "task id")
            except ConfigError as err:
                raise BackendError(str(err), code=ErrorCode.LAUNCH_REFUSED) from None
        try:  # the controller's secrets go into the TaskInfo; agentFile ones are read on the agent
            ready = [
                replace(
                    task,
                    env=(*task.env, *read_all(task.secrets, os.environ, agent_files=False).items()),
                    secrets=tuple((n, r) for n, r in task.secrets if r.source is SecretSource.AGENT_FILE),
                )
                for task in tasks
            ]
        except SecretUnavailable as err:
            raise BackendError(f"{placement.job}: {err}", code=ErrorCode.SECRET_UNAVAILABLE) from None
        ready = self._cluster_wire.prepare(ready)  # each task's cluster in band or fetched (clusterwire)
        launches = self._scheduler.launches
        self._loop.request(lambda f: launches.start(self._loop.keep_trying, f, placement, ready))

    def stop(self, task_ids: Sequence[str], grace_s: float) -> None:
        self._ready()

        def stop() -> Effect:
            targets, changed = self._table.request_stop(task_ids, grace_s)
            self._policies.decide(msg.Stop(tuple(targets)))  # a KILL now, unless one went out recently
            if not changed:
                return Effect.NONE
            self._policies.notify()
            return Effect.CHANGED

        self._loop.run(stop)

    def forget(self, task_ids: Sequence[str]) -> None:
        self._loop.ask(lambda: self._table.forget(task_ids, self._ended))

    def purge(self, job: str) -> None:
        def purge() -> Effect:
            gone = [t.task_id for t in self._table if t.job == job and self._ended(t)]
            self._table.remove(gone, sync=False)
            for task_id in gone:
                if self._sandbox is not None:
                    self._sandbox.forget(task_id)
            self._policies.decide(msg.Forgotten(tuple(gone)))
            return Effect.NONE

        self._loop.run(purge)
        self._cluster_wire.forget(job)  # its token is refused from now on

    def _ended(self, entry: TaskEntry) -> bool:
        return observed_state(entry, self.clock(), self.config.fencing_timeout_s)[0].ended

    def read_log(self, task_id: str, offset: int = 0, limit: int = 1 << 20) -> LogChunk:
        """The task's stdout, then (once it has ended) a ``--- stderr ---`` line and its stderr
        (``sandbox``)."""
        return self._read_sandbox(task_id, lambda r, url, ended: r.read(url, task_id, offset, limit, ended))

    def read_log_stream(self, task_id: str, stream: str, offset: int = 0, limit: int = 1 << 20) -> LogChunk:
        """The sandbox's ``stdout`` or ``stderr`` alone, as it grows (``base.LogStreams``)."""
        return self._read_sandbox(
            task_id, lambda r, url, ended: r.read_file(url, task_id, stream, offset, limit, ended)
        )

    def _read_sandbox(self, task_id: str, read: Callable[[SandboxReader, str, bool], Piece]) -> LogChunk:
        agent_url, ended, reader = self._loop.ask(lambda: self._log_source(task_id))
        if not agent_url:
            raise BackendError(
                f"no log for task {task_id}: the offer named no agent address", code=ErrorCode.LOG_UNAVAILABLE
            )
        try:
            piece = read(reader, agent_url, ended)
        except SandboxError as err:
            raise BackendError(
                f"cannot read the log of {task_id}: {err}", code=ErrorCode.LOG_UNAVAILABLE
            ) from None
        return LogChunk(piece.data, piece.next_offset, piece.complete)

    def _log_source(self, task_id: str) -> tuple[str, bool, SandboxReader]:
        """Where a task's log is, whether it is complete, and the reader (thread-safe) to use."""
        entry = self._table.get(task_id)
        if entry is None:
            raise BackendError(f"no log for task {task_id}", code=ErrorCode.LOG_UNAVAILABLE)
        if self._sandbox is None:
            config = self.config
            try:
                credentials = self._framework.credentials()
                verify = tls_verify(config.ca_file, not config.tls_verify, client_certificate_of(config))
            except ConfigError as err:
                raise BackendError(
                    f"the mesos settings are not usable: {err}", code=ErrorCode.SETTINGS_UNUSABLE
                ) from None
            self._sandbox = SandboxReader(verify=verify, credentials=credentials)
        return entry.agent_url, self._ended(entry), self._sandbox

    def close(self) -> None:
        """Stop threads and connections. No TEARDOWN: the tasks keep running. Before the
        stream closes (each step bounded in time, ``closing``): the ACCEPTs already decided go
        out, the first update of each task just launched is awaited and every update
        acknowledged, and the offers held are declined and offers suppressed."""
        if self._loop.closed:
            return
        if self._loop.started:
            wait = self._loop.keep_trying
            self._loop.request(lambda f: closing.drain(wait, f, self._table, self._sender, self._policies))
            closing.await_fetches(self._loop, self._table, self._cluster_wire)
            self._loop.request(lambda f: closing.hand_back(wait, f, self._scheduler, self._sender))
        self._loop.stop(timeout_s=5)  # after what is queued; then the senders stop
        self._sender.join(timeout_s=5)
        # The loop is gone: what it owned is this thread's now.
        for client in [*self._sender.old_clients, *([self._sender.client] if self._sender.client else [])]:
            client.stop()
        self._sender.client = None
        if self._table.journal.wrote and not self._framework.read_only:
            self._table.compact()
        self._table.journal.close()
        if self._sandbox is not None:
            self._sandbox.close()

    def teardown(self) -> None:
        """TEARDOWN: the master kills every task of the framework and forgets it. Only ever
        called explicitly (never by close() or on errors)."""
        self._connection.teardown()
