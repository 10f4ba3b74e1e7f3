"""``MesosBackend``: the backend protocol on a Mesos cluster, tfdeclare as a v1 HTTP framework.

The protocol side lives here: connecting (lazily, on first use; ``BackendError`` when no
SUBSCRIBED comes within ``subscribeTimeoutSeconds``), ``observe`` (the journal mapped onto
``TaskState``), ``place`` (gang placement over the held offers, by priority then FIFO with
backfill; what a gang lacks in total, for preemption, when the held offers are all there is),
``launch`` (write-ahead journal, then ACCEPTs queued, sent in bursts by the calls thread), ``stop``
(KILL with the grace period), ``forget``/``purge``, ``read_log`` (the agent's sandbox) and
``close`` (no TEARDOWN: tasks keep running). The events from the master are handled in
``scheduler``, upkeep and the sender threads in ``workers``, the state and its loop in
``state``.

Each method here runs in the caller's thread and sends the loop (``state``), which owns every
piece of the backend's state, a message, waiting for its answer where there is one; only
connecting, UPDATE_FRAMEWORK and reading logs make HTTP calls in the caller's thread. See
``docs/architecture.md`` (Mesos backend) for the threads and for the offer, backfill, fencing
and reconciliation policies.
"""

from __future__ import annotations

import logging
import os
import secrets
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import Future
from dataclasses import replace
from pathlib import Path

from tfdeclare.backends.base import BackendError, LogChunk
from tfdeclare.backends.mesos import decide
from tfdeclare.backends.mesos import decide_messages as msg
from tfdeclare.backends.mesos.auth import Credentials, credentials_for
from tfdeclare.backends.mesos.client import ClientConfig, SchedulerClient
from tfdeclare.backends.mesos.config import MesosConfig
from tfdeclare.backends.mesos.errors import (
    ConfigError,
    FrameworkRemovedError,
    MesosError,
    SubscribeRefusedError,
    SubscribeTimeoutError,
    TerminalError,
)
from tfdeclare.backends.mesos.info import validate_id
from tfdeclare.backends.mesos.journal import TaskEntry
from tfdeclare.backends.mesos.offers import HeldOffer, quota_verdict
from tfdeclare.backends.mesos.placement import AgentOffer, GangFit, never_fits
from tfdeclare.backends.mesos.queueing import Waiting, head_of, place_in_line, shortfall
from tfdeclare.backends.mesos.sandbox import SandboxError, SandboxReader
from tfdeclare.backends.mesos.scheduler import EventHandler, SchedulerEvents
from tfdeclare.backends.mesos.state import (
    CLOSE_CALLS_WAIT_S,
    CLOSE_UPDATES_IDLE_S,
    CLOSE_UPDATES_MAX_S,
    FIRST_OBSERVE_WAIT_S,
    LAUNCH_DRAIN_S,
    Accept,
)
from tfdeclare.backends.mesos.taskstate import cause_of, observed_state, unhealthy
from tfdeclare.backends.mesos.tls import client_certificate_of, tls_verify
from tfdeclare.backends.mesos.workers import BackgroundWork
from tfdeclare.backends.secrets import SecretUnavailable, read_all
from tfdeclare.core.enums import Role, SecretSource
from tfdeclare.core.errors import ErrorCode
from tfdeclare.core.run.tasks import (
    GangRequest,
    ObservedTask,
    Placement,
    Slot,
    TaskKey,
    TaskLaunch,
    Unplaced,
    UnplacedReason,
)
from tfdeclare.core.spec.resources import Resources

log = logging.getLogger("tfdeclare.mesos")


class MesosBackend(SchedulerEvents, BackgroundWork):
    """The backend protocol (``tfdeclare.backends.base.Backend``) as a Mesos framework."""

    name = "mesos"

    @property
    def address_wait_s(self) -> float | None:
        """How long a task restarting alone waits for an offer of its agent and port."""
        return self.config.same_address_timeout_s

    @classmethod
    def from_config(cls, state_dir: Path, config: MesosConfig) -> MesosBackend:
        return cls(state_dir, config)

    def _load_credentials(self) -> Credentials | None:
        return credentials_for(self.config)

    def _credentials_once(self) -> Credentials | None:
        """The credentials, loaded on first use (on the loop)."""
        if self._credentials is None:
            self._credentials = self._load_credentials()
        return self._credentials

    def _new_client(self) -> SchedulerClient:
        try:
            framework, credentials = self._ask(lambda: (self._framework_info(), self._credentials_once()))
            handler = EventHandler(self)
            client = SchedulerClient(
                ClientConfig(
                    master=self.config.master,
                    framework=framework,
                    credentials=credentials,
                    ca_file=self.config.ca_file,
                    insecure_skip_tls_verify=not self.config.tls_verify,
                    client_certificate=client_certificate_of(self.config),
                    auto_acknowledge=False,
                ),
                handler,
            )
        except (ConfigError, ValueError) as err:
            raise BackendError(
                f"the mesos settings are not usable: {err}", code=ErrorCode.SETTINGS_UNUSABLE
            ) from None
        handler.client = client
        return client

    def _connect(self) -> SchedulerClient:
        """The subscribed client, connecting on first use (raises ``BackendError``)."""
        client = self._client
        if client is not None and self._fatal is None:
            return client
        unreachable = (
            f"cannot reach the Mesos master at {self.config.master} within "
            f"{self.config.subscribe_timeout_s:g} s"
        )
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
                    self._ask(self._framework_removed)
                    self._usable()
                    continue
                except SubscribeRefusedError as err:  # at once, not after the subscribe timeout
                    client.stop()
                    self._forget_client(client)
                    raise BackendError(
                        f"the Mesos master at {self.config.master} refused the framework: {err} "
                        "(check mesos.principal and its secret, and the master's ACLs)",
                        code=ErrorCode.CREDENTIALS_REFUSED,
                    ) from None
                except TerminalError as err:
                    client.stop()
                    self._usable()
                    raise BackendError(
                        f"the Mesos client stopped: {err}", code=ErrorCode.CLIENT_STOPPED
                    ) from None
                except SubscribeTimeoutError as err:
                    client.stop()
                    self._forget_client(client)
                    detail = f": {err.last_error}" if err.last_error else " (no answer)"
                    raise BackendError(f"{unreachable}{detail}", code=ErrorCode.MASTER_UNREACHABLE) from None
                self._adopt(client, unreachable)
                return client
            raise BackendError(
                f"cannot subscribe a new framework at {self.config.master}", code=ErrorCode.FRAMEWORK_REFUSED
            )

    def _adopt(self, client: SchedulerClient, unreachable: str) -> None:
        """Wait until the loop has handled this client's SUBSCRIBED (framework id saved, the
        client taken as the one to call through)."""
        deadline = self.clock() + self.config.subscribe_timeout_s

        def adopted(future: Future[None], now: float) -> bool:
            if self._client is client:
                future.set_result(None)
            elif self._fatal is not None:
                future.set_exception(self._fatal)
            elif now >= deadline:
                future.set_exception(
                    BackendError(
                        f"{unreachable} (SUBSCRIBED was not handled)", code=ErrorCode.MASTER_UNREACHABLE
                    )
                )
            else:
                return False
            return True

        self._request(lambda f: self._keep_trying(f, lambda now: adopted(f, now)))

    def _forget_client(self, client: SchedulerClient) -> None:
        """Calls no longer go through ``client`` (it stopped)."""

        def forget() -> None:
            if self._client is client:
                self._client = None
                self._decide(msg.Disconnected())

        self._ask(forget)

    def watch(self, notify: Callable[[], None]) -> None:
        """``notify`` is called (from the backend's loop thread) on every status update, offer
        change that matters to a waiting job, fencing deadline and (re)subscription. It must
        only wake someone up, never call the backend itself."""
        self._post(lambda: self._watchers.append(notify))

    # ---- observe -----------------------------------------------------------------------------

    def tend(self) -> None:
        """Nothing: the loop thread does the framework's upkeep as events come."""

    def observe(self) -> Sequence[ObservedTask]:
        self._connect()
        self._usable()

        def answer(future: Future[list[ObservedTask]], now: float) -> bool:
            # Right after subscribing, give explicit reconciliation a moment to answer, so the
            # first pass of a restarted controller sees what happened while it was away.
            policy = self._policy
            if policy.reconcile_pending and now - policy.subscribed_at < FIRST_OBSERVE_WAIT_S:
                return False
            future.set_result([self._observed(e, now) for e in self._table if not e.forgotten])
            return True

        return self._request(lambda f: self._keep_trying(f, lambda now: answer(f, now)))

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
            unhealthy=unhealthy(entry),
            cause=cause_of(entry.state, entry.reason, entry.moved_for),
        )

    # ---- place / release -----------------------------------------------------------------------

    def place(self, request: GangRequest) -> Placement | Unplaced:
        self._connect()
        self._usable()
        if request.total.gpus > 0:
            self._enable_gpu_offers()
        return self._request(lambda f: self._place(f, request))

    def _place(self, future: Future[Placement | Unplaced], request: GangRequest) -> None:
        now = self.clock()
        new = request.job not in self._queue
        self._decide(msg.PlaceAsked(request), now)
        waiting = self._queue[request.job]
        answer, ideal, fit = self._try_place(request, waiting)
        if ideal:
            future.set_result(self._settle(request, answer, fit))
            return
        # Not placed from the offers held: make sure offers come (REVIVE clears our filters and
        # un-suppresses), then wait a little for an offer round that is on its way.
        self._decide(msg.NotPlacedYet(request.job, new, bool(self._pool.offers)), now)
        deadline = now + self.config.place_wait_s

        def attempt(now: float) -> bool:
            answer, ideal, fit = self._try_place(request, waiting)
            # Offers are on their way, or a REVIVE may be decided once the call out is answered,
            # or the master's list of agents (to judge "can never fit") is.
            coming = decide.offers_coming(self._policy, self._pool.agents_known)
            if not ideal and now < deadline and coming:
                return False
            future.set_result(self._settle(request, answer, fit))
            return True

        self._keep_trying(future, attempt)

    def _settle(
        self, request: GangRequest, answer: Placement | Unplaced, fit: GangFit | None
    ) -> Placement | Unplaced:
        """Reserve what a placement took, or leave the queue for good."""
        now = self.clock()
        if isinstance(answer, Placement) and fit is not None:
            expires_at = now + max(self.config.offer_hold_s, 1.0)
            self._decide(msg.Placed(answer.token, request.job, fit, expires_at), now)
        elif isinstance(answer, Unplaced) and answer.reason is UnplacedReason.UNSCHEDULABLE:
            self._decide(msg.Unschedulable(request.job), now)
        return answer

    def _try_place(
        self, request: GangRequest, waiting: Waiting
    ) -> tuple[Placement | Unplaced, bool, GangFit | None]:
        """(answer, ideal, fit): ideal when nothing better can come from offers on their way."""
        now = self.clock()
        if not self._connected:
            message = "not connected to the Mesos master (re-subscribing)"
            return Unplaced(UnplacedReason.WAITING_FOR_OFFERS, message), False, None
        # "Can never fit" is judged against what the agents have (the master's list of them),
        # never against what is free now; until that list came, the gang waits.
        why = self._never_fits(request) if self._pool.agents_known else None
        if why is not None:
            return Unplaced(UnplacedReason.UNSCHEDULABLE, why), True, None
        reserved = [a for r in self._reservations.values() for a in r.fit.assignments]
        views = self._pool.index(reserved)  # indexed: the decision looks at candidate agents only
        decision = place_in_line(
            waiting,
            self._queue,
            views,
            now,
            self.config.fifo_backfill_s,
            self._options,
            self._pool.capacities(),
        )
        fit, note = decision.fit, decision.note
        if not isinstance(fit, GangFit):
            message = f"{fit.message}; {note}" if note else fit.message
            return Unplaced(fit.reason, message, self._short(request, waiting, views)), False, None
        if decision.inside_window:
            log.warning(
                "%s: placed on an agent scheduled for maintenance (nothing outside a window fits)",
                request.job,
            )
        slots = tuple(Slot(a.key, a.hostname, a.port, backend_ref=a.agent_id) for a in fit.assignments)
        wanted = {s.key: s.previous for s in request.slots if s.previous is not None}
        ideal = all(
            (a.hostname, a.port) == (wanted[a.key].host, wanted[a.key].port)
            for a in fit.assignments
            if a.key in wanted
        )
        return Placement(request.job, request.attempt, slots, secrets.token_hex(8)), ideal, fit

    def _short(self, request: GangRequest, waiting: Waiting, views: Iterable[AgentOffer]) -> Resources | None:
        """What the gang lacks beyond the offers held (``Unplaced.short``: the controller may
        preempt lower-priority jobs of ours for it), said only when the held offers are what
        there is: the gang is first in line, the master's agents are known and no offers are on
        their way (an offer round came since we last asked). A task restarting alone (pinned)
        never preempts."""
        if any(slot.pinned for slot in request.slots) or not self._pool.agents_known:
            return None
        if decide.offers_coming(self._policy, self._pool.agents_known):
            return None
        ahead = head_of(self._queue.items(), waiting.first_asked, request.job, request.priority)
        return shortfall(request, views) if ahead is None else None

    def _never_fits(self, request: GangRequest) -> str | None:
        """``never_fits`` against the capacities seen, cached until they change."""
        version = self._pool.capacity_version
        if version != self._never_fits_version:
            self._never_fits_cache.clear()
            self._never_fits_version = version
        key = (tuple((s.key, s.resources) for s in request.slots), request.constraints)
        if key not in self._never_fits_cache:
            why = never_fits(request, self._pool.capacities(), self._options)
            if why is None and self._pool.quota:
                needs = {
                    "cpus": sum(s.resources.cpus for s in request.slots),
                    "mem": float(sum(s.resources.mem_mib for s in request.slots)),
                    "gpus": float(sum(s.resources.gpus for s in request.slots)),
                }
                why = quota_verdict(
                    {k: v for k, v in needs.items() if v > 0}, self.config.roles, self._pool.quota
                )
            self._never_fits_cache[key] = why
        return self._never_fits_cache[key]

    def release(self, placement: Placement) -> None:
        def release() -> None:
            self._decide(msg.Released(placement.token))
            self._changed = self._tick_soon = True

        self._post(release)

    def _enable_gpu_offers(self) -> None:
        """Add GPU_RESOURCES (UPDATE_FRAMEWORK) the first time a job asks for GPUs."""
        info = self._ask(lambda: None if self._gpu_enabled else self._framework_info(gpu=True))
        if info is None:
            return
        try:
            self._connect().update_framework(info)
        except MesosError as err:
            raise BackendError(
                f"cannot ask the Mesos master for GPU offers (UPDATE_FRAMEWORK): {err}",
                code=ErrorCode.MASTER_CALL_FAILED,
            ) from err
        self._ask(self._gpu_offers_asked)
        log.info("asked the master for offers from GPU agents (GPU_RESOURCES)")

    def _gpu_offers_asked(self) -> None:
        self._gpu_enabled = True
        self._framework = replace(self._framework, gpu_resources=True)
        self._framework_store.save(self._framework)
        self._decide(msg.GpuOffersAsked())
        self._tick_soon = True

    # ---- launch ---------------------------------------------------------------------------------

    def launch(self, placement: Placement, tasks: Sequence[TaskLaunch]) -> None:
        self._connect()
        self._usable()
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
        self._request(lambda f: self._launch(f, placement, ready))

    def _launch(self, future: Future[None], placement: Placement, tasks: list[TaskLaunch]) -> None:
        todo = [t for t in tasks if t.task_id not in self._table]
        if not todo:
            self._decide(msg.Released(placement.token))
            future.set_result(None)
            return
        reservation = self._reservations.get(placement.token)
        if reservation is None:
            raise BackendError(
                f"{placement.job}: its placement was released before the launch (offers are held "
                f"{self.config.offer_hold_s:g} s); it is placed again",
                code=ErrorCode.PLACEMENT_LOST,
            )
        assignment_of = {a.key: a for a in reservation.fit.assignments}
        groups: dict[tuple[str, str], list[TaskLaunch]] = {}
        for task in todo:
            assignment = assignment_of.get(task.key)
            if assignment is None or assignment.port != task.slot.port:
                raise BackendError(
                    f"{task.task_id}: not part of placement {placement.token}", code=ErrorCode.TASK_UNKNOWN
                )
            groups.setdefault((assignment.agent_id, assignment.role), []).append(task)
        deadline = self.clock() + self.config.place_wait_s

        def attempt(now: float) -> bool:
            # The held offers to ACCEPT per (agent, role); waits (bounded) for offers that an
            # earlier launch on the same agent used up to come back.
            backing: dict[tuple[str, str], list[HeldOffer]] = {}
            missing = []
            for (agent_id, role), group in groups.items():
                held = self._pool.covers(agent_id, role, [assignment_of[t.key] for t in group])
                if held is None:
                    missing.append(agent_id)
                else:
                    backing[(agent_id, role)] = held
            if missing:
                if now < deadline and self._connected:
                    return False
                raise BackendError(
                    f"{placement.job}: the offers of agent(s) {', '.join(sorted(missing))} were used or "
                    "rescinded before the launch; it is placed again",
                    code=ErrorCode.PLACEMENT_LOST,
                )
            self._queue_accepts(placement, groups, backing, now)
            future.set_result(None)
            return True

        self._keep_trying(future, attempt)

    def _queue_accepts(
        self,
        placement: Placement,
        groups: dict[tuple[str, str], list[TaskLaunch]],
        backing: dict[tuple[str, str], list[HeldOffer]],
        now: float,
    ) -> None:
        entries = [
            self._entry(task, agent_id, now) for (agent_id, _), group in groups.items() for task in group
        ]
        self._table.record_launch(entries)  # write-ahead: before any ACCEPT
        for held in backing.values():
            for offer in held:
                self._pool.remove(offer.offer_id)
        self._decide(msg.Released(placement.token), now)
        for (agent_id, role), group in sorted(groups.items()):
            held = backing[(agent_id, role)]
            offered = [r for o in held for r in o.resources]
            self._accepts.append(
                Accept(placement.job, agent_id, role, [o.offer_id for o in held], group, offered)
            )
        # What the tasks leave of those offers comes back once the ACCEPT is done.
        self._decide(msg.OffersUsed(), now)
        self._changed = True
        self._notify()

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
        self._ask(lambda: self._stop(task_ids, grace_s))

    def _stop(self, task_ids: Sequence[str], grace_s: float) -> None:
        targets, changed = self._table.request_stop(task_ids, grace_s)
        self._decide(msg.Stop(tuple(targets)))  # a KILL now, unless one went out recently
        if changed:
            self._changed = True
            self._notify()

    def forget(self, task_ids: Sequence[str]) -> None:
        def forget() -> None:
            now = self.clock()
            self._table.forget(task_ids, lambda entry: self._ended(entry, now))

        self._ask(forget)

    def purge(self, job: str) -> None:
        def purge() -> None:
            now = self.clock()
            gone = [t.task_id for t in self._table if t.job == job and self._ended(t, now)]
            self._table.remove(gone, sync=False)
            for task_id in gone:
                if self._sandbox is not None:
                    self._sandbox.forget(task_id)
            self._decide(msg.Forgotten(tuple(gone)), now)

        self._ask(purge)

    # ---- logs ---------------------------------------------------------------------------------

    def read_log(self, task_id: str, offset: int = 0, limit: int = 1 << 20) -> LogChunk:
        agent_url, ended, reader = self._ask(lambda: self._log_source(task_id))
        if not agent_url:
            raise BackendError(
                f"no log for task {task_id}: the offer named no agent address", code=ErrorCode.LOG_UNAVAILABLE
            )
        try:
            piece = reader.read(agent_url, task_id, offset, limit, ended)
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
                credentials = self._credentials_once()
                verify = tls_verify(config.ca_file, not config.tls_verify, client_certificate_of(config))
            except ConfigError as err:
                raise BackendError(
                    f"the mesos settings are not usable: {err}", code=ErrorCode.SETTINGS_UNUSABLE
                ) from None
            self._sandbox = SandboxReader(
                verify=verify,
                auth=credentials.httpx_auth() if credentials else None,
            )
        return entry.agent_url, self._ended(entry, self.clock()), self._sandbox

    # ---- close ------------------------------------------------------------------------------------

    def close(self) -> None:
        """Stop threads and connections. No TEARDOWN: the tasks keep running. Before the
        stream closes (each step bounded in time): the ACCEPTs already decided go out, the
        first update of each task just launched is awaited and every update acknowledged (an
        agent holds a task's next update back until the one before is acknowledged), and the
        offers held are declined and offers suppressed."""
        if self._closed:
            return
        if self._loop_thread is not None:
            self._request(self._drain)
            self._request(self._hand_back_offers)
            self._inbox.put(None)  # the loop stops after what is queued, then the senders
            for thread in self._threads:
                thread.join(timeout=5)
        self._closed = True
        # The loop is gone: what it owned is this thread's now.
        client, self._client = self._client, None
        for old in [*self._old_clients, *([client] if client is not None else [])]:
            old.stop()
        if self._table.journal.wrote and not self._read_only:
            self._table.compact()
        self._table.journal.close()
        if self._sandbox is not None:
            self._sandbox.close()

    def _drain(self, future: Future[None]) -> None:
        """On the loop: resolve ``future`` once the queued ACCEPTs are answered (at most
        ``LAUNCH_DRAIN_S``), then the tasks they launched have sent their first update and
        every update is acknowledged (while first updates keep coming: at most
        ``CLOSE_UPDATES_IDLE_S`` after the last, ``CLOSE_UPDATES_MAX_S`` in all)."""
        launches_by = self.clock() + LAUNCH_DRAIN_S
        progress: list[float] = []  # [when the update wait began, when a first update last came]
        awaited = [len(self._table.awaiting_update)]

        def drained(now: float) -> bool:
            if (self._accepts or self._table.unsent or self._burst_out) and now < launches_by:
                return False
            if not progress:
                progress[:] = [now, now]
            if len(self._table.awaiting_update) < awaited[0]:
                progress[1] = now
            awaited[0] = len(self._table.awaiting_update)
            by = min(progress[0] + CLOSE_UPDATES_MAX_S, progress[1] + CLOSE_UPDATES_IDLE_S)
            pending = self._table.awaiting_update or self._table.acks_due or self._acks_out_n
            if pending and self._connected and now < by:
                return False
            if self._table.awaiting_update and self._connected:
                log.info(
                    "closing before %d launched task(s) sent an update", len(self._table.awaiting_update)
                )
            future.set_result(None)
            return True

        self._keep_trying(future, drained)

    def _hand_back_offers(self, future: Future[None]) -> None:
        """On the loop: DECLINE the offers held and SUPPRESS (``decide``: ``Closing``), then
        resolve ``future`` once the calls thread is past them (at most ``CLOSE_CALLS_WAIT_S``)."""
        if self._client is None or self._read_only or not self._connected:
            future.set_result(None)
            return
        self._decide(msg.Closing(tuple(self._pool.offers)))
        answered: list[bool] = []

        def done(ok: bool) -> None:
            answered.append(ok)
            self._changed = True

        self._send("close", lambda _client: None, on_done=done)
        deadline = self.clock() + CLOSE_CALLS_WAIT_S

        def sent(now: float) -> bool:
            if answered or now >= deadline:
                future.set_result(None)
                return True
            return False

        self._keep_trying(future, sent)

    def teardown(self) -> None:
        """TEARDOWN: the master kills every task of the framework and forgets it. Only ever
        called explicitly (never by close() or on errors)."""
        client = self._connect()
        client.teardown()
        self._forget_client(client)
