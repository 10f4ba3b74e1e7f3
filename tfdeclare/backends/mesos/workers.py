"""The Mesos backend's periodic upkeep (on the loop) and its two sender threads.

This module owns ``BackgroundWork``:

- upkeep, run by the loop (``state``) on every tick: declines offers held longer than
  ``offerHoldSeconds`` (with a ``refuseSeconds`` filter; offers of the agents kept for a
  long-waiting head of the queue are held up to ``headOfLineHoldSeconds``), expires unused reservations and
  stale queue entries, retries explicit reconciliation with backoff until every task has an
  answer, runs implicit reconciliation every ``reconcileIntervalSeconds``, re-sends
  unconfirmed KILLs, kills unknown tasks of ours, asks for the master's agents again while
  jobs wait, REVIVEs/SUPPRESSes, notices fencing deadlines, compacts the journal;
- ACCEPT bursts: the loop hands the queued ACCEPTs (one per agent and gang), in order and at
  most ``LAUNCH_BURST`` at a time, to the calls thread, so the controller never waits for the
  master; tasks stopped before their ACCEPT are not launched, tasks the master refused are
  forgotten (the controller launches them again); whatever queued up while a burst was out
  goes in the next one (HTTP/1.1-pipelined);
- ``mesos-backend-calls`` makes the calls the loop decided, in order, and posts what came of
  them back to the loop; it owns nothing but the call in hand;
- ``mesos-backend-acks`` fsyncs the journal (a descriptor the loop hands over with each
  batch of updates), then acknowledges them (HTTP/1.1-pipelined): an update is acknowledged
  only once durable; apart from the calls, so acknowledgements never hold up an ACCEPT.
"""

from __future__ import annotations

import itertools
import logging
import os
import queue

from tfdeclare.backends.mesos.client import SchedulerClient
from tfdeclare.backends.mesos.errors import MesosConnectionError, MesosError, NotSubscribedError
from tfdeclare.backends.mesos.placement import drain_set
from tfdeclare.backends.mesos.state import (
    AGENTS_REFRESH_S,
    LAUNCH_BURST,
    MIN_KILL_RETRY_S,
    QUEUE_TTL_S,
    RECONCILE_MAX_RETRY_S,
    Accept,
    AckBatch,
    BackendState,
)
from tfdeclare.backends.mesos.taskinfo import take_resources, task_info, task_labels
from tfdeclare.backends.mesos.taskstate import LOST_LIKE, is_terminal
from tfdeclare.core.run.tasks import TaskLaunch

log = logging.getLogger("tfdeclare.mesos")

Burst = list[tuple[Accept, list[TaskLaunch]]]


class BackgroundWork(BackendState):
    """Upkeep and the sender threads; see the module docstring."""

    # ---- the sender threads -------------------------------------------------------------------

    def _calls_loop(self) -> None:
        while (call := self._calls_out.get()) is not None:
            call()

    def _acks_loop(self) -> None:
        while (item := self._acks_out.get()) is not None:
            batches = [item]
            while True:  # what queued up meanwhile goes in the same burst
                try:
                    more = self._acks_out.get_nowait()
                except queue.Empty:
                    break
                if more is None:
                    self._acks_out.put(None)  # the loop's last word: stop after this burst
                    break
                batches.append(more)
            self._acknowledge(batches)

    @staticmethod
    def _acknowledge(batches: list[AckBatch]) -> None:
        """Make the journal durable, then acknowledge (an update only once durable)."""
        durable = True
        for _, _, handle in batches:
            if handle is not None:
                try:
                    os.fsync(handle)
                except OSError as err:
                    durable = False
                    log.error("cannot sync the task journal: %s", err)
                finally:
                    os.close(handle)
        if not durable:
            log.error("not acknowledging %d update(s)", sum(len(acks) for _, acks, _ in batches))
            return
        for client, group in itertools.groupby(batches, key=lambda batch: batch[0]):
            acks = [ack for _, batch_acks, _ in group for ack in batch_acks]
            try:
                client.acknowledge_many(acks)
            except MesosError as err:
                log.debug("ACKNOWLEDGE of %d update(s) failed (the master resends them): %s", len(acks), err)

    # ---- periodic work (on the loop) -------------------------------------------------------------

    def _upkeep(self) -> None:
        config = self.config
        now = self.clock()
        if self._read_only or self._closed:
            return
        for token, reservation in list(self._reservations.items()):
            if reservation.expires_at <= now:
                log.info("placement of %s was not launched in time: released", reservation.job)
                del self._reservations[token]
        for job, waiting in list(self._queue.items()):
            if now - waiting.last_asked > QUEUE_TTL_S:
                del self._queue[job]
        connected = self._connected
        if connected:
            declines = self._expired_offers(now)
            if declines:
                self._send("DECLINE", lambda c: c.decline(declines, config.refuse_s))
                # Those agents are hidden from us for refuse_s (if the DECLINE goes through):
                # a job that does not fit what is held REVIVEs to see them.
                self._filtered = self._filtered or config.refuse_s > 0
            if self._reconcile_pending and now >= self._reconcile_next_at:
                reconcile = sorted(self._reconcile_pending.items(), key=lambda kv: kv[0])
                self._reconcile_next_at = now + self._reconcile_delay
                self._reconcile_delay = min(RECONCILE_MAX_RETRY_S, self._reconcile_delay * 2)
                log.info("reconciling %d task(s)", len(reconcile))
                self._send("RECONCILE", lambda c: c.reconcile(reconcile))
            if now >= self._implicit_next_at:
                self._implicit_next_at = now + config.reconcile_interval_s
                self._send("RECONCILE (implicit)", lambda c: c.reconcile([]))
            if self._queue and now - self._agents_asked_at >= AGENTS_REFRESH_S:
                self._refresh_agents(now)  # agents may have left or been resized
            for task_id, agent_id, grace in self._kills_due(now):
                self._send_kill(task_id, agent_id, grace)
            for task_id, unknown_agent in self._unknown_kills.items():
                self._send_kill(task_id, unknown_agent, None)
            self._unknown_kills.clear()
        notify = False
        for task_id in list(self._lost):
            entry = self._tasks.get(task_id)
            if entry is None or entry.state not in LOST_LIKE or entry.lost_since is None:
                self._lost.discard(task_id)
            elif now - entry.lost_since >= config.fencing_timeout_s:
                self._lost.discard(task_id)  # presumed gone from now on: the controller acts
                notify = True
        if self._journal.needs_compaction(len(self._tasks)):
            self._compact()
        self._sync_offer_interest()
        if notify:
            self._changed = True
            self._notify()

    def _sync_offer_interest(self, revive_now: bool = False) -> None:
        """REVIVE when work waits (and we are suppressed, or were asked to, or a job has been
        waiting for resources not offered now for ``reviveIntervalSeconds``), SUPPRESS only
        when nothing waits and no offer is held. One decision at a time is out, so the master
        always ends up told the latest decision.

        On a shared cluster what a waiting gang needs is held by other frameworks now; when
        they release it, the master offers it to whoever is first by DRF and not filtered. A
        REVIVE at a bounded rate clears every filter we installed (declines with
        ``refuseSeconds``) and any suppression, so the freed resources reach us within about
        one interval, without flooding a large master with REVIVEs."""
        if self._interest_in_flight:
            self._revive_now_asked = self._revive_now_asked or revive_now
            return
        if not self._connected or self._read_only:
            return
        now = self.clock()
        demand = bool(self._queue) or bool(self._reservations)
        action = None
        # A new job that does not fit what is held revives at once only when our own
        # filters (declines with refuseSeconds) may hide agents from us; a job still waiting
        # revives every reviveIntervalSeconds.
        since_revive = now - self._last_revive_at
        if demand and (
            self._suppressed
            or self._revive_wanted
            or (revive_now and self._filtered and since_revive >= 1.0)
            or (bool(self._queue) and since_revive >= self.config.revive_interval_s)
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
        self._interest_in_flight = True

        def done(ok: bool) -> None:
            self._interest_in_flight = False
            if ok:
                self._suppressed = action == "SUPPRESS"
                if action == "REVIVE":
                    self._filtered = False
            else:
                self._revive_wanted = True  # decide again on the next tick
            again, self._revive_now_asked = self._revive_now_asked, False
            if again:
                self._sync_offer_interest(revive_now=True)

        if action == "REVIVE":
            self._send("REVIVE", lambda c: c.revive(roles), on_done=done)
        else:
            self._send("SUPPRESS", lambda c: c.suppress(roles), on_done=done)

    def _expired_offers(self, now: float) -> list[str]:
        """Held offers whose time is up (removed from the pool); kept: offers of agents with
        a live reservation, and offers of the agents kept for a long-waiting head of the queue
        (``drain_set``; bounded by ``headOfLineHoldSeconds``)."""
        reserved = {(a.agent_id, a.role) for r in self._reservations.values() for a in r.fit.assignments}
        head = self._head()
        kept: set[str] = set()
        if head is not None and now - head[1].first_asked >= self.config.fifo_backfill_s:
            kept = drain_set(head[1].request, self._pool.views(), self._pool.capacities(), self._options)
        expired = []
        for held in list(self._pool.offers.values()):
            if held.hold_until > now or (held.agent_id, held.role) in reserved:
                continue
            if held.agent_id in kept and now - held.received_at < self.config.head_of_line_hold_s:
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

    # ---- ACCEPTs (bursts built on the loop, sent by the calls thread) --------------------------

    def _dispatch_accepts(self) -> None:
        """Hand the next burst of queued ACCEPTs to the calls thread, unless one is out."""
        if self._burst_out or not self._accepts:
            return
        burst: Burst = []
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
        self._burst_out = True
        client, owner = self._client, self.owner

        def send() -> None:
            try:
                results = self._send_accepts(client, owner, burst)
            except Exception:
                log.exception("launching %d ACCEPT(s) failed unexpectedly", len(burst))
                results = None
            self._inbox.put(lambda: self._burst_sent(burst, results))

        self._calls_out.put(send)

    def _send_accepts(
        self, client: SchedulerClient | None, owner: str, burst: Burst
    ) -> list[MesosError | None]:
        """On the calls thread: one ACCEPT per entry with tasks (pipelined), a plain DECLINE
        for the others; the answer of each entry (None for the declined ones)."""
        for accept, tasks in burst:
            if not tasks and client is not None:
                try:
                    client.decline(accept.offer_ids, 0.0)
                except MesosError as err:
                    log.warning("DECLINE failed: %s", err)
        launches = [(accept, tasks) for accept, tasks in burst if tasks]
        if not launches:
            return [None] * len(burst)
        # What the tasks leave of the offers comes back at the next allocation (no filter):
        # the next gang may need it; unused, it is declined with refuseSeconds then.
        bodies = []
        for accept, tasks in launches:
            # Each task's resources come from what was offered, with the same reservations.
            # (take_resources uses up the scalar values: they are copied, the rest is shared)
            offered = [{**e, "scalar": dict(e["scalar"])} if "scalar" in e else e for e in accept.offered]
            infos = [
                task_info(
                    task,
                    accept.agent_id,
                    accept.role,
                    task_labels(task, owner),
                    containerizer=self.config.containerizer,
                    shared_filesystem=self.config.shared_filesystem,
                    resources=take_resources(offered, task, accept.role, self.config.reserved_first),
                )
                for task in tasks
            ]
            bodies.append((accept.offer_ids, infos, 0.0))
        results: list[MesosError | None]
        try:
            if client is None:
                raise NotSubscribedError("not connected")
            results = client.launch_many(bodies)
        except MesosError as err:
            results = [err] * len(launches)
        answers = iter(results)
        return [next(answers) if tasks else None for _, tasks in burst]

    def _burst_sent(self, burst: Burst, results: list[MesosError | None] | None) -> None:
        """Book the answers to a burst (on the loop) and send the next one."""
        self._burst_out = False
        for (accept, tasks), result in zip(burst, results or [None] * len(burst), strict=True):
            ids = [t.task_id for t in tasks]
            if results is None:
                self._forget_unlaunched(ids, "its launch failed")
            elif tasks:
                self._launched(accept, ids, result)
            self._unsent.difference_update(t.task_id for t in accept.tasks)
        self._changed = True

    def _launched(self, accept: Accept, ids: list[str], result: MesosError | None) -> None:
        """Book the answer to one ACCEPT."""
        if isinstance(result, MesosConnectionError):
            log.warning(
                "launching %s on agent %s: %s; reconciliation will tell", accept.job, accept.agent_id, result
            )
            for task_id in ids:  # did the master get it? Reconciliation will say.
                if (entry := self._tasks.get(task_id)) is not None:
                    self._reconcile_pending[task_id] = entry.agent_id
            self._reconcile_next_at = self.clock()
            self._tick_soon = True
            return
        if result is not None:
            self._forget_unlaunched(ids, f"the master refused its launch ({result})")
            self._notify()
            return
        self._expect_offers_since = max(self._expect_offers_since, self.clock())
        for task_id in ids:  # informational: written with the task's next change
            if (entry := self._tasks.get(task_id)) is not None:
                entry.accepted = True

    def _forget_unlaunched(self, task_ids: list[str], why: str) -> None:
        """Tasks whose ACCEPT was not sent or was refused never existed: the controller sees
        the slot empty and launches it again."""
        for task_id in task_ids:
            log.warning("task %s was not launched: %s", task_id, why)
            self._drop_task(task_id)
        self._journal.delete(task_ids, sync=True)
        self._changed = True
