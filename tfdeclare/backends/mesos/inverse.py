"""Maintenance on the Mesos backend's loop: the master's inverse offers, answered.

This module owns ``Maintenance``: the inverse offers held until our tasks are off their agent
(then accepted), and each agent's maintenance window as its latest offer or inverse offer said
(whether a task moved off for maintenance has anywhere to go). An inverse offer is answered
as ``maintenance.answer`` decides: accepted when nothing of ours runs on the agent; else our
tasks there are moved off (stopped with their grace, cause Maintenance, so the controller
restarts them elsewhere without counting a failure) once the window nears, and the inverse
offer declined until then (the master asks again after the filter).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence

from tfdeclare.backends.mesos import calls
from tfdeclare.backends.mesos import decide_messages as msg
from tfdeclare.backends.mesos.events import JSON, id_value
from tfdeclare.backends.mesos.framework import FrameworkRecord
from tfdeclare.backends.mesos.loop import Effect
from tfdeclare.backends.mesos.maintenance import OurTask, Window, answer, cuts_in, window_of
from tfdeclare.backends.mesos.policies import Policies
from tfdeclare.backends.mesos.sender import Sender
from tfdeclare.backends.mesos.tasktable import TaskTable
from tfdeclare.core.enums import EndCause

log = logging.getLogger("tfdeclare.mesos")


class Maintenance:
    """See the module docstring."""

    def __init__(
        self,
        clock: Callable[[], float],
        table: TaskTable,
        framework: FrameworkRecord,
        sender: Sender,
        policies: Policies,
    ) -> None:
        self._clock = clock
        self._table, self._framework, self._sender, self._policies = table, framework, sender, policies
        self.held: dict[str, str] = {}  # inverse offer id -> its agent, accepted once we are off it
        self.windows: dict[str, Window | None] = {}  # agent id -> its window (None: none)

    def inverse_offers(self, inverse_offers: Sequence[JSON]) -> Effect:
        """Maintenance asks an agent's resources back: accept when nothing of ours runs there;
        else move our tasks off (stopped with their grace, cause Maintenance, so the
        controller restarts them elsewhere without counting a failure) once the window nears,
        and decline until then (the master asks again after the filter)."""
        if self._framework.read_only or not self._policies.connected:
            return Effect.NONE
        now = self._clock()
        effect = Effect.NONE
        for inverse in inverse_offers:
            offer_id, agent_id = id_value(inverse.get("id")), id_value(inverse.get("agent_id"))
            if offer_id is None or agent_id is None:
                continue
            window = window_of(inverse.get("unavailability"))
            self.windows[agent_id] = window
            ours = [
                OurTask(e.task_id, e.kill_grace_s or 0.0, e.kill_requested)
                for e in self._table.live_on(agent_id)
            ]
            outside = (a for a, w in self.windows.items() if a != agent_id and not cuts_in(w, now))
            said = answer(window, ours, now, elsewhere=any(True for _ in outside))
            log.info("inverse offer %s for agent %s (%s): %s", offer_id, agent_id, window, said.why)
            if said.move:
                effect = max(effect, self.move_off(said.move, EndCause.MAINTENANCE))
            if said.accept:
                self._answer_inverse("ACCEPT_INVERSE_OFFERS", calls.accept_inverse_offers([offer_id]))
            elif said.hold:
                self.held[offer_id] = agent_id
            else:
                body = calls.decline_inverse_offers([offer_id], said.refuse_s)
                self._answer_inverse("DECLINE_INVERSE_OFFERS", body)
        return effect

    def settle(self) -> None:
        """Accept each held inverse offer whose agent no task of ours runs on any more."""
        if not self.held:
            return
        busy = self._table.busy_agents()
        done = [offer_id for offer_id, agent_id in self.held.items() if agent_id not in busy]
        for offer_id in done:
            del self.held[offer_id]
            log.info("our tasks are off the agent of inverse offer %s: accepting it", offer_id)
            self._answer_inverse("ACCEPT_INVERSE_OFFERS", calls.accept_inverse_offers([offer_id]))

    def _answer_inverse(self, what: str, body: JSON) -> None:
        self._sender.call(what, lambda client: client.call(body))

    def move_off(self, task_ids: Sequence[str], cause: EndCause) -> Effect:
        """Stop these tasks the graceful way, recording why (``TaskEntry.moved_for``)."""
        targets = self._table.move_off(task_ids, cause.value)
        if not targets:
            return Effect.NONE
        self._policies.decide(msg.Stop(tuple(targets)))
        self._policies.notify()
        return Effect.CHANGED
