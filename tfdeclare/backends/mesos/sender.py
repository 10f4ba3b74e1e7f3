"""The Mesos backend's sender: the client it calls through, and the two threads that call.

This module owns ``Sender``: the subscribed client (and the clients it replaced, stopped at
close), ``mesos-backend-calls``, which makes the calls the loop decided in order, and
``mesos-backend-acks``, which fsyncs the journal (a descriptor the loop hands over with each
batch of updates) and then acknowledges those updates (HTTP/1.1-pipelined): an update is
acknowledged only once durable, and apart from the calls, so acknowledgements never hold up
an ACCEPT. The threads own nothing but the call in hand; what came of a call goes back to the
loop as a message (``Answered``, ``BurstAnswered``, ``AcksSent``), never as a callback.

It also owns the ACCEPTs queued by launches: one burst at a time (at most ``LAUNCH_BURST``,
pipelined) is with the calls thread, so the controller never waits for the master; whatever
queued up while a burst was out goes in the next one. A launch, top to bottom:
``backend.launch`` journals the tasks and ``queue``s one ``Accept`` per agent and gang;
``dispatch`` (after the loop's batch) drops the tasks stopped meanwhile and hands the burst
over; ``send_accepts`` (calls thread) builds each ``TaskInfo`` from the offered resources and
sends the ACCEPTs; ``BurstAnswered`` comes back and ``book`` says, per ACCEPT, what its answer
means for its tasks (``tasktable.accept_outcome``).
"""

from __future__ import annotations

import collections
import itertools
import logging
import os
import queue
import threading
from collections.abc import Callable
from dataclasses import dataclass
from enum import Enum
from typing import Any

from tfdeclare.backends.mesos.client import SchedulerClient
from tfdeclare.backends.mesos.config import MesosConfig
from tfdeclare.backends.mesos.errors import MesosError, NotSubscribedError
from tfdeclare.backends.mesos.taskinfo import take_resources, task_info, task_labels
from tfdeclare.backends.mesos.tasktable import Ack, TaskTable, launchable
from tfdeclare.core.run.tasks import TaskLaunch

log = logging.getLogger("tfdeclare.mesos")

LAUNCH_BURST = 64  # ACCEPTs pipelined in one go at most

AckBatch = tuple[SchedulerClient, list[Ack], int | None]  # (client, acks, a descriptor to fsync first)


@dataclass(slots=True)
class Accept:
    """One ACCEPT to send: the tasks of one gang on one agent, with that agent's offers."""

    job: str
    agent_id: str
    role: str
    offer_ids: list[str]
    tasks: list[TaskLaunch]
    offered: list[dict[str, Any]]  # the offers' usable resources, with their reservations


Burst = list[tuple[Accept, list[TaskLaunch]]]


class Answer(Enum):
    """Which call an ``Answered`` answers (calls whose answer the loop books)."""

    INTEREST = "interest"  # REVIVE or SUPPRESS
    AGENTS = "agents"  # GET_AGENTS (and the roles' quota)
    CLOSE = "close"  # the calls thread is past what close() decided


@dataclass(frozen=True, slots=True)
class Answered:
    what: Answer
    ok: bool
    result: object = None  # what the call returned


@dataclass(frozen=True, slots=True)
class BurstAnswered:
    burst: Burst
    results: list[MesosError | None] | None  # None: sending failed unexpectedly


@dataclass(frozen=True, slots=True)
class AcksSent:
    batches: int


SenderAnswer = Answered | BurstAnswered | AcksSent


class Sender:
    """See the module docstring. ``post`` hands a message to the loop."""

    def __init__(self, config: MesosConfig, post: Callable[[SenderAnswer], None]) -> None:
        self._config = config
        self._post = post
        self.client: SchedulerClient | None = None  # written by the loop, read by callers
        self.old_clients: list[SchedulerClient] = []
        self._calls: queue.SimpleQueue[Callable[[], None] | None] = queue.SimpleQueue()
        self._acks: queue.SimpleQueue[AckBatch | None] = queue.SimpleQueue()
        self._threads = tuple(
            threading.Thread(target=target, name=name, daemon=True)
            for name, target in (
                ("mesos-backend-calls", self._calls_loop),
                ("mesos-backend-acks", self._acks_loop),
            )
        )
        self.accepts: collections.deque[Accept] = collections.deque()
        self.burst_out = False
        self.acks_out = 0  # batches with the acks thread, not sent yet

    def start(self) -> None:
        """Start the two threads (once: the loop calls it before its own thread starts)."""
        for thread in self._threads:
            thread.start()

    def stop(self) -> None:
        """Stop the threads after what was handed to them (on the loop, as it ends)."""
        self._calls.put(None)
        self._acks.put(None)

    def join(self, *, timeout_s: float) -> None:
        for thread in self._threads:
            if thread.ident is not None:  # started
                thread.join(timeout=timeout_s)

    def drop_client(self) -> None:
        """The client stopped (or was replaced): calls no longer go through it."""
        if self.client is not None:
            self.old_clients.append(self.client)
        self.client = None

    # ---- on the loop -----------------------------------------------------------------------------

    def call(self, what: str, fn: Callable[[SchedulerClient], object], answer: Answer | None = None) -> None:
        """Hand one call to the calls thread (in order); its ``Answered`` comes back to the loop
        when ``answer`` is given (at once, not ok, without a client)."""
        client = self.client
        if client is None:
            if answer is not None:
                self._post(Answered(answer, False))
            return

        def send() -> None:
            ok, result = True, None
            try:
                result = fn(client)
            except MesosError as err:
                log.warning("%s failed: %s", what, err)
                ok = False
            except Exception:
                log.exception("%s failed unexpectedly", what)
                ok = False
            if answer is not None:
                self._post(Answered(answer, ok, result))

        self._calls.put(send)

    def acknowledge(self, acks: list[Ack], handle: int | None) -> None:
        """Acknowledge ``acks`` once ``handle`` (the journal's) is fsynced (acks thread)."""
        if self.client is not None:
            self.acks_out += 1
            self._acks.put((self.client, acks, handle))
        elif handle is not None:
            os.close(handle)

    def dispatch(self, table: TaskTable, owner: str) -> list[str]:
        """Hand the next burst of queued ACCEPTs to the calls thread, unless one is out; the
        tasks left out because they were stopped before their ACCEPT (not launched at all)."""
        if self.burst_out or not self.accepts:
            return []
        burst: Burst = []
        dropped: list[str] = []
        while self.accepts and len(burst) < LAUNCH_BURST:
            accept = self.accepts.popleft()
            keep: list[TaskLaunch] = []
            for task in accept.tasks:  # one pass (a test of each task against keep was quadratic)
                if launchable(table.get(task.task_id)):
                    keep.append(task)
                else:
                    dropped.append(task.task_id)
            burst.append((accept, keep))
        self.burst_out = True
        client = self.client

        def send() -> None:
            try:
                results = self._send_accepts(client, owner, burst)
            except Exception:
                log.exception("launching %d ACCEPT(s) failed unexpectedly", len(burst))
                results = None
            self._post(BurstAnswered(burst, results))

        self._calls.put(send)
        return dropped

    # ---- the threads -----------------------------------------------------------------------------

    def _calls_loop(self) -> None:
        while (call := self._calls.get()) is not None:
            call()

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
        config = self._config
        for accept, tasks in launches:
            # Each task's resources come from what was offered, with the same reservations.
            # (take_resources uses up the scalar values: they are copied, the rest is shared)
            offered = [{**e, "scalar": dict(e["scalar"])} if "scalar" in e else e for e in accept.offered]
            infos = [
                task_info(
                    task,
                    accept.agent_id,
                    task_labels(task, owner),
                    containerizer=config.containerizer,
                    shared_filesystem=config.shared_filesystem,
                    resources=take_resources(offered, task, config.reserved_first),
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

    def _acks_loop(self) -> None:
        while (item := self._acks.get()) is not None:
            batches = [item]
            while True:  # what queued up meanwhile goes in the same burst
                try:
                    more = self._acks.get_nowait()
                except queue.Empty:
                    break
                if more is None:
                    self._acks.put(None)  # the loop's last word: stop after this burst
                    break
                batches.append(more)
            try:
                _acknowledge(batches)
            finally:
                self._post(AcksSent(len(batches)))


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
