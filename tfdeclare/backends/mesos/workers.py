"""The Mesos backend's periodic upkeep (on the loop) and its two sender threads.

This module owns ``BackgroundWork``:

- upkeep, run by the loop (``state``) on every tick: the policies' timers are decided by
  ``decide.on_tick`` (placements not launched in time, stale queue entries, held offers to
  decline, reconciliation retries, KILL retries, the master's agents asked again, fencing
  deadlines, REVIVE/SUPPRESS) and executed by ``state``; then the journal is compacted;
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

from tfdeclare.backends.mesos import decide
from tfdeclare.backends.mesos import decide_messages as msg
from tfdeclare.backends.mesos.client import SchedulerClient
from tfdeclare.backends.mesos.errors import MesosError, NotSubscribedError
from tfdeclare.backends.mesos.state import LAUNCH_BURST, Accept, AckBatch, BackendState
from tfdeclare.backends.mesos.taskinfo import take_resources, task_info, task_labels
from tfdeclare.backends.mesos.tasktable import AcceptOutcome, accept_outcome, launchable
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
            try:
                self._acknowledge(batches)
            finally:
                self._post_acks_sent(len(batches))

    def _post_acks_sent(self, batches: int) -> None:
        self._inbox.put(lambda: self._acks_sent(batches))

    def _acks_sent(self, batches: int) -> None:
        """On the loop: the acks thread is done with ``batches`` batches (close waits for it)."""
        self._acks_out_n -= batches
        self._changed = True

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
        """The policies' timers (``decide.on_tick``), then compaction of the journal."""
        if self._read_only or self._closed:
            return
        calls = decide.on_tick(self._policy, self.clock(), self._pool)
        self._execute(calls)
        if self._table.journal.needs_compaction(len(self._table)):
            self._table.compact()

    # ---- ACCEPTs (bursts built on the loop, sent by the calls thread) --------------------------

    def _dispatch_accepts(self) -> None:
        """Hand the next burst of queued ACCEPTs to the calls thread, unless one is out."""
        if self._burst_out or not self._accepts:
            return
        burst: Burst = []
        while self._accepts and len(burst) < LAUNCH_BURST:
            accept = self._accepts.popleft()
            # Tasks asked to stop before their ACCEPT are not launched at all.
            keep = [t for t in accept.tasks if launchable(self._table.get(t.task_id))]
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
            self._table.answered(t.task_id for t in accept.tasks)
        self._changed = True

    def _launched(self, accept: Accept, ids: list[str], result: MesosError | None) -> None:
        """Book the answer to one ACCEPT."""
        outcome = accept_outcome(result)
        if outcome is AcceptOutcome.UNANSWERED:
            log.warning(
                "launching %s on agent %s: %s; reconciliation will tell", accept.job, accept.agent_id, result
            )
            self._decide(  # did the master get it? Reconciliation will say.
                msg.LaunchUnanswered(
                    tuple((t, e.agent_id) for t in ids if (e := self._table.get(t)) is not None)
                )
            )
            self._tick_soon = True
            return
        if outcome is AcceptOutcome.REFUSED:
            self._forget_unlaunched(ids, f"the master refused its launch ({result})")
            return
        self._decide(msg.OffersUsed())
        self._table.launched(ids)

    def _forget_unlaunched(self, task_ids: list[str], why: str) -> None:
        """Tasks whose ACCEPT was not sent or was refused never existed: the controller sees
        the slot empty and launches it again."""
        self._table.forget_unlaunched(task_ids, why)
        self._decide(msg.Forgotten(tuple(task_ids)))
        self._changed = True
        self._notify()  # the controller launches those slots again
