"""The Mesos backend's manners at close, on its loop, each step bounded in time.

This module owns the three waits ``MesosBackend.close`` makes before the stream closes:
``drain`` (the ACCEPTs already queued go out, at most ``LAUNCH_DRAIN_S``; then the first
update of each task just launched is awaited and every update acknowledged: an agent holds a
task's next update back until the one before is acknowledged, and retries an unacknowledged
one after 10 s; while first updates keep coming, at most ``CLOSE_UPDATES_IDLE_S`` after the
last and ``CLOSE_UPDATES_MAX_S`` in all) and ``hand_back`` (the offers held are declined and
offers suppressed, ``decide``: ``Closing``; at most ``CLOSE_CALLS_WAIT_S`` for the calls
thread to be past them); between them ``await_fetches`` (with ``mesos.clusterServer``,
the tasks just launched fetch their cluster before its server closes: ``clusterwire``).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from concurrent.futures import Future

from tfdeclare.backends.base import BackendError
from tfdeclare.backends.mesos import decide_messages as msg
from tfdeclare.backends.mesos.clusterwire import ClusterWire
from tfdeclare.backends.mesos.inbox import Inbound
from tfdeclare.backends.mesos.loop import Effect, Loop, Waiter
from tfdeclare.backends.mesos.policies import Policies
from tfdeclare.backends.mesos.scheduler import Scheduler
from tfdeclare.backends.mesos.sender import Answer, Sender
from tfdeclare.backends.mesos.taskstate import is_terminal
from tfdeclare.backends.mesos.tasktable import Launch, TaskTable

log = logging.getLogger("tfdeclare.mesos")

LAUNCH_DRAIN_S = 30.0  # close() waits this long for queued ACCEPTs
CLOSE_UPDATES_IDLE_S = 3.0
CLOSE_UPDATES_MAX_S = 20.0
CLOSE_CALLS_WAIT_S = 5.0  # close() waits this long for its DECLINE and SUPPRESS to be answered

KeepTrying = Callable[[Future[None], Waiter], None]


def drain(
    keep_trying: KeepTrying, future: Future[None], table: TaskTable, sender: Sender, policies: Policies
) -> Effect:
    """Resolve ``future`` once the queued ACCEPTs are answered, then the tasks they launched
    have sent their first update and every update is acknowledged (see the module docstring)."""
    progress: list[float] = []  # [when the update wait began, when a first update last came]
    awaited = [len(table.at(Launch.AWAITING_UPDATE))]
    launches_by: list[float] = []

    def drained(now: float) -> bool:
        if not launches_by:
            launches_by.append(now + LAUNCH_DRAIN_S)
        if (sender.accepts or table.at(Launch.UNSENT) or sender.burst_out) and now < launches_by[0]:
            return False
        if not progress:
            progress[:] = [now, now]
        if len(table.at(Launch.AWAITING_UPDATE)) < awaited[0]:
            progress[1] = now
        awaited[0] = len(table.at(Launch.AWAITING_UPDATE))
        by = min(progress[0] + CLOSE_UPDATES_MAX_S, progress[1] + CLOSE_UPDATES_IDLE_S)
        pending = table.at(Launch.AWAITING_UPDATE) or table.acks_due or sender.acks_out
        if pending and policies.connected and now < by:
            return False
        if (awaiting := len(table.at(Launch.AWAITING_UPDATE))) and policies.connected:
            log.info("closing before %d launched task(s) sent an update", awaiting)
        future.set_result(None)
        return True

    keep_trying(future, drained)
    return Effect.NONE


def hand_back(keep_trying: KeepTrying, future: Future[None], scheduler: Scheduler, sender: Sender) -> Effect:
    """DECLINE the offers held and SUPPRESS, then resolve ``future`` once the calls thread is
    past them (at most ``CLOSE_CALLS_WAIT_S``)."""
    policies = scheduler.policies
    if sender.client is None or not policies.connected:
        future.set_result(None)
        return Effect.NONE
    policies.decide(msg.Closing(tuple(policies.pool.offers)))
    past = threading.Event()  # set by the calls thread once past the calls above
    sender.call("close", lambda _client: past.set(), Answer.CLOSE)  # its answer wakes the waiter
    deadline: list[float] = []

    def sent(now: float) -> bool:
        if not deadline:
            deadline.append(now + CLOSE_CALLS_WAIT_S)
        if past.is_set() or now >= deadline[0]:
            future.set_result(None)
            return True
        return False

    keep_trying(future, sent)
    return Effect.NONE


def await_fetches(loop: Loop[Inbound], table: TaskTable, wire: ClusterWire) -> None:
    """Wait (``ClusterWire.close``, bounded) for the tasks launched to fetch their cluster or
    end, then stop the cluster server; called from the closing thread, asking the loop."""

    def ended_of(task_ids: set[str]) -> set[str]:
        def ended() -> set[str]:
            return {i for i in task_ids if (e := table.get(i)) is None or is_terminal(e.state)}

        try:
            return loop.ask(ended)
        except BackendError:  # closed meanwhile: nothing more is known
            return set()

    wire.close(ended_of)
