"""A launch on the Mesos backend's loop, from a placement to the answers of its ACCEPTs.

This module owns ``Launches``, which reads top to bottom as one launch goes (with
``sender``, which makes the calls):

1. ``start`` (on the loop, for ``MesosBackend.launch``): the tasks not launched yet are
   grouped per (agent, role) of the placement's reservation; it waits (bounded by
   ``placeWaitSeconds``) for the held offers of each group to cover it (an earlier launch on
   the same agent may have used them up);
2. ``_queue``: the tasks are journaled (write-ahead, synced), their offers leave the pool,
   the reservation is released and one ``sender.Accept`` per group is queued;
3. ``dispatch`` (after the loop's batch): the sender hands the next burst to the calls thread
   (``sender.send_accepts`` builds the TaskInfos and sends the ACCEPTs); the tasks stopped
   meanwhile are forgotten, never launched;
4. ``answered`` (``sender.BurstAnswered`` back on the loop): per ACCEPT, as
   ``tasktable.accept_outcome`` says: launched (the offers' rest comes back, the tasks await
   their first update), unanswered (reconcile them) or refused (forgotten: the controller
   launches the slots again).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from concurrent.futures import Future
from typing import assert_never

from tfdeclare.backends.base import BackendError
from tfdeclare.backends.mesos import decide_messages as msg
from tfdeclare.backends.mesos.clusterwire import fetches
from tfdeclare.backends.mesos.config import MesosConfig
from tfdeclare.backends.mesos.errors import MesosError
from tfdeclare.backends.mesos.journal import TaskEntry
from tfdeclare.backends.mesos.loop import Effect, Waiter
from tfdeclare.backends.mesos.offers import HeldOffer
from tfdeclare.backends.mesos.policies import Policies
from tfdeclare.backends.mesos.sender import Accept, Burst, Sender
from tfdeclare.backends.mesos.tasktable import AcceptOutcome, TaskTable, accept_outcome
from tfdeclare.core.errors import ErrorCode
from tfdeclare.core.run.tasks import Placement, TaskLaunch

log = logging.getLogger("tfdeclare.mesos")

KeepTrying = Callable[[Future[None], Waiter], None]
Groups = dict[tuple[str, str], list[TaskLaunch]]  # (agent id, role) -> its tasks


class Launches:
    """See the module docstring."""

    def __init__(
        self,
        config: MesosConfig,
        clock: Callable[[], float],
        table: TaskTable,
        sender: Sender,
        policies: Policies,
    ) -> None:
        self._config, self._clock = config, clock
        self._table, self._sender, self._policies = table, sender, policies

    def start(
        self, keep_trying: KeepTrying, future: Future[None], placement: Placement, tasks: list[TaskLaunch]
    ) -> Effect:
        todo = [t for t in tasks if t.task_id not in self._table]
        if not todo:
            self._policies.decide(msg.Released(placement.token))
            future.set_result(None)
            return Effect.CHANGED
        reservation = self._policies.reservations.get(placement.token)
        if reservation is None:
            raise BackendError(
                f"{placement.job}: its placement was released before the launch (offers are held "
                f"{self._config.offer_hold_s:g} s); it is placed again",
                code=ErrorCode.PLACEMENT_LOST,
            )
        assignment_of = {a.key: a for a in reservation.fit.assignments}
        groups: Groups = {}
        for task in todo:
            assignment = assignment_of.get(task.key)
            if assignment is None or assignment.port != task.slot.port:
                raise BackendError(
                    f"{task.task_id}: not part of placement {placement.token}", code=ErrorCode.TASK_UNKNOWN
                )
            groups.setdefault((assignment.agent_id, assignment.role), []).append(task)
        deadline = self._clock() + self._config.place_wait_s

        def attempt(now: float) -> bool:
            # The held offers to ACCEPT per (agent, role); waits (bounded) for offers that an
            # earlier launch on the same agent used up to come back.
            backing: dict[tuple[str, str], list[HeldOffer]] = {}
            missing = []
            for (agent_id, role), group in groups.items():
                held = self._policies.pool.covers(agent_id, role, [assignment_of[t.key] for t in group])
                if held is None:
                    missing.append(agent_id)
                else:
                    backing[(agent_id, role)] = held
            if missing:
                if now < deadline and self._policies.connected:
                    return False
                raise BackendError(
                    f"{placement.job}: the offers of agent(s) {', '.join(sorted(missing))} were used or "
                    "rescinded before the launch; it is placed again",
                    code=ErrorCode.PLACEMENT_LOST,
                )
            self._queue(placement, groups, backing, now)
            future.set_result(None)
            return True

        keep_trying(future, attempt)
        return Effect.CHANGED

    def _queue(
        self,
        placement: Placement,
        groups: Groups,
        backing: dict[tuple[str, str], list[HeldOffer]],
        now: float,
    ) -> None:
        entries = [
            self._entry(task, agent_id, now) for (agent_id, _), group in groups.items() for task in group
        ]
        self._table.record_launch(entries)  # write-ahead: before any ACCEPT
        for held in backing.values():
            for offer in held:
                self._policies.pool.remove(offer.offer_id)
        self._policies.decide(msg.Released(placement.token), now)
        for (agent_id, role), group in sorted(groups.items()):
            held = backing[(agent_id, role)]
            offered = [r for o in held for r in o.resources]
            self._sender.accepts.append(
                Accept(placement.job, agent_id, role, [o.offer_id for o in held], group, offered)
            )
        # What the tasks leave of those offers comes back once the ACCEPT is done.
        self._policies.decide(msg.OffersUsed(), now)
        self._policies.notify()

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
            agent_url=self._policies.pool.agent_urls.get(agent_id, ""),
            created_at=now,
            kill_grace_s=task.grace_period_s,
            fetches_cluster=fetches(task),
        )

    def dispatch(self, owner: str) -> None:
        """Hand the next burst to the calls thread; tasks asked to stop before their ACCEPT
        are not launched at all."""
        dropped = self._sender.dispatch(self._table, owner)
        if dropped:
            self._forget_unlaunched(dropped, "it was stopped before its launch")

    def answered(self, burst: Burst, results: list[MesosError | None] | None) -> Effect:
        """Book the answers to a burst (the next one goes after this batch)."""
        self._sender.burst_out = False
        effect = Effect.CHANGED
        for (accept, tasks), result in zip(burst, results or [None] * len(burst), strict=True):
            ids = [t.task_id for t in tasks]
            if results is None:
                self._forget_unlaunched(ids, "its launch failed")
            elif tasks:
                effect = max(effect, self._launched(accept, ids, result))
            self._table.answered(t.task_id for t in accept.tasks)
        return effect

    def _launched(self, accept: Accept, ids: list[str], result: MesosError | None) -> Effect:
        """Book the answer to one ACCEPT."""
        match outcome := accept_outcome(result):
            case AcceptOutcome.UNANSWERED:
                log.warning(
                    "launching %s on agent %s: %s; reconciliation will tell",
                    accept.job,
                    accept.agent_id,
                    result,
                )
                self._policies.decide(  # did the master get it? Reconciliation will say.
                    msg.LaunchUnanswered(
                        tuple((t, e.agent_id) for t in ids if (e := self._table.get(t)) is not None)
                    )
                )
                return Effect.TICK
            case AcceptOutcome.REFUSED:
                self._forget_unlaunched(ids, f"the master refused its launch ({result})")
            case AcceptOutcome.LAUNCHED:
                self._policies.decide(msg.OffersUsed())
                self._table.launched(ids)
            case _:
                assert_never(outcome)
        return Effect.CHANGED

    def _forget_unlaunched(self, task_ids: list[str], why: str) -> None:
        """Tasks whose ACCEPT was not sent or was refused never existed: the controller sees
        the slot empty and launches it again."""
        self._table.forget_unlaunched(task_ids, why)
        self._policies.decide(msg.Forgotten(tuple(task_ids)))
        self._policies.notify()  # the controller launches those slots again
