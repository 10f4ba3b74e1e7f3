"""The Mesos backend's threads: acknowledgements, periodic upkeep, and the ACCEPT sender.

This module owns ``BackgroundWork``:

- ``mesos-backend-acks`` fsyncs the journal once per batch of updates, then acknowledges the
  batch (HTTP/1.1-pipelined): an update is acknowledged only once it is durable;
- ``mesos-backend-timer`` declines offers held longer than ``offerHoldSeconds`` (with a
  ``refuseSeconds`` filter; offers a long-waiting head of the queue can use are held up to
  ``headOfLineHoldSeconds``), expires unused reservations and stale queue entries, retries
  explicit reconciliation with backoff until every task has an answer, runs implicit
  reconciliation every ``reconcileIntervalSeconds``, re-sends unconfirmed KILLs, kills
  unknown tasks of ours, REVIVEs/SUPPRESSes, notices fencing deadlines, compacts the journal;
- ``mesos-backend-launcher`` sends the queued ACCEPTs in order (one per agent and gang), so
  the controller never waits for the master; tasks stopped before their ACCEPT are not
  launched, tasks the master refused are forgotten (the controller launches them again).
"""

from __future__ import annotations

import logging
import threading
import time

from tfdeclare.backends.mesos.errors import MesosConnectionError, MesosError, NotSubscribedError
from tfdeclare.backends.mesos.placement import eligible_for
from tfdeclare.backends.mesos.state import (
    LAUNCH_BURST,
    MIN_KILL_RETRY_S,
    QUEUE_TTL_S,
    RECONCILE_MAX_RETRY_S,
    Accept,
    BackendState,
)
from tfdeclare.backends.mesos.taskinfo import task_info, task_labels
from tfdeclare.backends.mesos.taskstate import LOST_LIKE, is_terminal
from tfdeclare.core.run.tasks import TaskLaunch

log = logging.getLogger("tfdeclare.mesos")


class BackgroundWork(BackendState):
    """The backend's own threads; see the module docstring."""

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
        declined = bool(declines) and self._call("DECLINE", lambda c: c.decline(declines, config.refuse_s))
        if declined and config.refuse_s > 0:
            self._filtered = True  # those agents are hidden from us for refuse_s: REVIVE to see them
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
                # A new job that does not fit what is held revives only when our own filters
                # (declines with refuseSeconds) may hide agents from us.
                if demand and (
                    self._suppressed
                    or self._revive_wanted
                    or (revive_now and self._filtered and now - self._last_revive_at >= 1.0)
                ):
                    action = "REVIVE"
                    self._last_revive_at = now
                    self._offers_reset_at = now
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
                    if action == "REVIVE":
                        self._filtered = False
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

    # ---- ACCEPTs (launcher thread) -------------------------------------------------------------

    def _launcher_loop(self) -> None:
        """Sends the queued ACCEPTs in order, so that the controller never waits for the master;
        whatever queued up while a burst was out goes in the next burst (pipelined)."""
        while True:
            with self._cond:
                while not self._accepts and not self._closed.is_set():
                    self._accepts_ready.wait(0.5)
                if not self._accepts:
                    return  # closed and drained
                burst: list[tuple[Accept, list[TaskLaunch]]] = []
                while self._accepts and len(burst) < LAUNCH_BURST:
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
                    burst.append((accept, keep))
            try:
                self._send_accepts(burst)
            except Exception:
                log.exception("launching %d ACCEPT(s) failed unexpectedly", len(burst))
                with self._cond:
                    self._forget_unlaunched(
                        [t.task_id for _, keep in burst for t in keep], "its launch failed"
                    )
            finally:
                with self._cond:
                    for accept, _ in burst:
                        self._unsent.difference_update(t.task_id for t in accept.tasks)
                    self._accepts_ready.notify_all()

    def _send_accepts(self, burst: list[tuple[Accept, list[TaskLaunch]]]) -> None:
        client = self._client
        launches = [(accept, tasks) for accept, tasks in burst if tasks]
        for accept, tasks in burst:
            if not tasks and client is not None:
                self._decline_now(accept.offer_ids)
        if not launches:
            return
        # What the tasks leave of the offers comes back at the next allocation (no filter):
        # the next gang may need it; unused, it is declined with refuseSeconds then.
        bodies = [
            (
                accept.offer_ids,
                [
                    task_info(
                        task,
                        accept.agent_id,
                        accept.role,
                        task_labels(task, self.owner),
                        containerizer=self.config.containerizer,
                        shared_filesystem=self.config.shared_filesystem,
                    )
                    for task in tasks
                ],
                0.0,
            )
            for accept, tasks in launches
        ]
        results: list[MesosError | None]
        try:
            if client is None:
                raise NotSubscribedError("not connected")
            results = client.launch_many(bodies)
        except MesosError as err:
            results = [err] * len(launches)
        for (accept, tasks), result in zip(launches, results, strict=True):
            self._launched(accept, [t.task_id for t in tasks], result)

    def _decline_now(self, offer_ids: list[str]) -> None:
        self._call("DECLINE", lambda c: c.decline(offer_ids, 0.0))

    def _launched(self, accept: Accept, ids: list[str], result: MesosError | None) -> None:
        """Book the answer to one ACCEPT."""
        if isinstance(result, MesosConnectionError):
            log.warning(
                "launching %s on agent %s: %s; reconciliation will tell", accept.job, accept.agent_id, result
            )
            with self._cond:
                for task_id in ids:  # did the master get it? Reconciliation will say.
                    if (entry := self._tasks.get(task_id)) is not None:
                        self._reconcile_pending[task_id] = entry.agent_id
                self._reconcile_next_at = self.clock()
                self._reconciled.clear()
            self._wake.set()
            return
        if result is not None:
            with self._cond:
                self._forget_unlaunched(ids, f"the master refused its launch ({result})")
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
