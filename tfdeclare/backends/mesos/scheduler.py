"""What the Mesos backend does with the master's events.

The client's stream thread only posts each event to the loop (``state``), which handles it
in order with everything else; the stream thread never waits for the backend. This module
owns ``SchedulerEvents``: SUBSCRIBED (persist the framework id before anything
acts on it, void held offers), OFFERS (into the pool, held for as long as ``decide.hold_for``
says), RESCIND, UPDATE (folded into the journal, which is written before the update is
acknowledged; a task never launched is forgotten), INVERSE_OFFERS (answered as
``maintenance.answer`` says: accepted once nothing of ours runs on the agent, our tasks there
moved off the graceful way when its window nears), the end of a subscription, and a
framework the master removed (policy ``onFrameworkRemoved``). What follows from each for the
policies (ask for the agents, reconcile, re-send KILLs, kill an unknown task of ours, fence
a lost one) is decided by ``decide`` from the event this module hands it.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import replace

from tfdeclare.backends.base import BackendError
from tfdeclare.backends.mesos import calls, decide
from tfdeclare.backends.mesos import decide_messages as msg
from tfdeclare.backends.mesos.client import SchedulerClient
from tfdeclare.backends.mesos.decide_messages import Reported
from tfdeclare.backends.mesos.errors import (
    ClientStoppedError,
    FrameworkFailedOverError,
    FrameworkRemovedError,
    SubscribeRefusedError,
    TerminalError,
)
from tfdeclare.backends.mesos.events import JSON, BaseHandler, Offer, TaskStatus, id_value
from tfdeclare.backends.mesos.journal import FrameworkState
from tfdeclare.backends.mesos.maintenance import OurTask, Window, answer, cuts_in, window_of
from tfdeclare.backends.mesos.offers import HeldOffer
from tfdeclare.backends.mesos.state import BackendState
from tfdeclare.backends.mesos.taskinfo import LABEL_PREFIX
from tfdeclare.backends.mesos.taskstate import LOST_LIKE, is_terminal
from tfdeclare.backends.mesos.tasktable import (
    OUR_TASK_ID,
    StatusRule,
    reported,
    status_rule,
    stopping,
    to_reconcile,
)
from tfdeclare.core.enums import EndCause
from tfdeclare.core.errors import ErrorCode

log = logging.getLogger("tfdeclare.mesos")


def _older_than(version: str, than: tuple[int, int]) -> bool:
    """``version`` ("1.8.0", "1.8.1-rc2") is below ``than``; False when it cannot be read."""
    parts = version.split(".")
    try:
        major, minor = int(parts[0]), int(parts[1].split("-")[0])
    except (IndexError, ValueError):
        return False
    return (major, minor) < than


class EventHandler(BaseHandler):
    """Client callbacks (the stream thread) posted to the backend's loop, in order."""

    def __init__(self, backend: SchedulerEvents) -> None:
        self.backend = backend
        self.client: SchedulerClient | None = None  # the client these events come from

    def subscribed(
        self, framework_id: str, heartbeat_interval: float, master_info: dict[str, object]
    ) -> None:
        client = self.client
        version = str(master_info.get("version") or "")
        self.backend._post(lambda: self.backend._on_subscribed(framework_id, client, version))

    def offers(self, offers: Sequence[Offer]) -> None:
        self.backend._post(lambda: self.backend._on_offers(offers))

    def rescind(self, offer_id: str) -> None:
        self.backend._post(lambda: self.backend._on_rescind(offer_id))

    def update(self, status: TaskStatus) -> None:
        self.backend._post(lambda: self.backend._on_update(status))

    def failure(self, agent_id: str | None, executor_id: str | None, status: int | None) -> None:
        if agent_id is not None and executor_id is None:
            log.warning("the master removed agent %s; its tasks are reported separately", agent_id)

    def disconnected(self, reason: str) -> None:
        self.backend._post(self.backend._on_disconnected)

    def terminated(self, error: TerminalError) -> None:
        self.backend._post(lambda: self.backend._on_terminated(error))

    def other(self, event: JSON) -> None:
        if event.get("type") == "INVERSE_OFFERS":
            raw = (event.get("inverse_offers") or {}).get("inverse_offers") or []
            inverse = [offer for offer in raw if isinstance(offer, dict)]
            self.backend._post(lambda: self.backend._on_inverse_offers(inverse))


class SchedulerEvents(BackendState):
    """Handlers of the master's events (on the loop); see the module docstring."""

    def _framework_removed(self) -> None:
        """The master refused our framework id for good: stop, or start anew (policy)."""
        framework_id = self._framework.framework_id
        if framework_id is None or framework_id in self._removed_ids:
            return  # handled already (the client's terminal event and the connecting caller both report it)
        self._removed_ids.add(framework_id)
        path = self._framework_store.path
        if self.config.on_framework_removed != "newFramework":
            self._fatal = BackendError(
                f"the Mesos master removed framework {framework_id} (its failover timeout ran out, or it "
                "was torn down), so its tasks were killed. To start a new framework, move "
                f"{path} away (or set mesos.onFrameworkRemoved: newFramework); the old tasks are then "
                "reported gone and their jobs restart per their restart policy.",
                code=ErrorCode.FRAMEWORK_REFUSED,
            )
            log.error("%s", self._fatal)
            return
        archived = self._framework_store.archive(f"removed-{int(self.clock())}")
        log.error(
            "the Mesos master removed framework %s; starting a new framework (old id kept in %s)",
            framework_id,
            archived,
        )
        self._table.framework_removed(framework_id, self.clock())
        self._framework = FrameworkState(None, self._framework.instance_id, self._framework.gpu_resources)
        self._framework_store.save(self._framework)
        self._decide(msg.FrameworkRemoved())
        self._pool.clear()
        self._changed = True
        self._notify()

    def _on_terminated(self, error: TerminalError) -> None:
        if isinstance(error, ClientStoppedError):
            return
        if isinstance(error, FrameworkFailedOverError):
            self._read_only = True
            self._decide(msg.Disconnected())
            self._fatal = BackendError(
                f"another scheduler subscribed as framework {self._framework.framework_id} and took "
                "over; this controller stops acting (is the same state folder used elsewhere?)",
                code=ErrorCode.FRAMEWORK_REFUSED,
            )
            log.error("%s", self._fatal)
        elif isinstance(error, FrameworkRemovedError):
            if self._client is None:
                return  # still connecting: _connect() handles it
            self._old_clients.append(self._client)
            self._client = None
            self._framework_removed()
        elif isinstance(error, SubscribeRefusedError):
            # the credentials or ACLs changed under a running client: the next pass connects
            # again and says why; nothing is fatal, an operator's fix is taken then
            log.error("the Mesos master refused the framework: %s", error)
            if self._client is None:
                return  # still connecting: _connect() says so
            self._old_clients.append(self._client)
            self._client = None
        else:
            self._fatal = BackendError(f"the Mesos client stopped: {error}", code=ErrorCode.CLIENT_STOPPED)
        self._changed = True
        self._notify()

    # ---- events from the master (posted by the stream thread) ---------------------------------

    def _on_subscribed(self, framework_id: str, client: SchedulerClient | None, version: str = "") -> None:
        if self._read_only:
            return
        if framework_id != self._framework.framework_id:
            self._framework = replace(self._framework, framework_id=framework_id)
            self._framework_store.save(self._framework)  # before anything acts on it
        if client is not None:
            self._client = client
        self._pool.clear()  # offers of an earlier subscription are void
        self._pool.forget_agents()
        live = to_reconcile(self._table, self._table.unsent)
        self._decide(msg.Subscribed(live, stopping(self._table)))
        self._changed = self._tick_soon = True
        log.info("subscribed as framework %s; reconciling %d task(s)", framework_id, len(live))
        if not self._gpu_enabled and _older_than(version, (1, 9)):
            # No UPDATE_FRAMEWORK before Mesos 1.9 (the call is a 400 there): subscribe again
            # with GPU_RESOURCES now, so GPU jobs never need it. Remembered in framework.json.
            log.info("the Mesos master is %s (< 1.9): subscribing with GPU_RESOURCES from the start", version)
            self._gpu_enabled = True
            self._framework = replace(self._framework, gpu_resources=True)
            self._framework_store.save(self._framework)
            info = self._framework_info(gpu=True)
            self._send("SUBSCRIBE (with GPU_RESOURCES)", lambda c: c.resubscribe(info))
        self._notify()

    def _on_disconnected(self) -> None:
        self._decide(msg.Disconnected())
        self._pool.clear()
        self._inverse_held.clear()  # void with the subscription, as offers are
        self._changed = True

    def _on_offers(self, offers: Sequence[Offer]) -> None:
        if self._read_only or not self._connected:
            return
        now = self.clock()
        # Hold offers while work waits, or waited a moment ago (the controller places one
        # job after the other); with nothing to do, decline at once (with a filter).
        hold = decide.hold_for(self._policy, now)
        unlisted = False
        for offer in offers:
            held = HeldOffer.parse(offer, now, hold)
            self._pool.add(held)
            self._agent_windows[held.agent_id] = None if held.window is None else Window(*held.window)
            unlisted = unlisted or held.agent_id not in self._pool.capacity
        self._decide(msg.OffersReceived(unlisted), now)
        self._changed = self._tick_soon = True
        if decide.demand(self._policy, now):
            self._notify()

    def _on_rescind(self, offer_id: str) -> None:
        self._pool.remove(offer_id)
        self._changed = True

    def _on_update(self, status: TaskStatus) -> None:
        if self._read_only:
            return  # another scheduler owns the framework now: not ours to record or ack
        changed = False
        now = self.clock()
        task_id = status.task_id
        entry = self._table.get(task_id)
        if task_id in self._table.awaiting_update:
            self._table.awaiting_update.discard(task_id)
            self._changed = True  # close() may be waiting for it
        if task_id in self._policy.reconcile_pending:
            self._changed = True  # the first observe() may be waiting for these answers
        said = reported(status.state)
        rule = status_rule(entry, status.state, status.source, status.reason)
        if entry is None or rule is StatusRule.UNKNOWN:
            ours = said is not Reported.ENDED and self._is_ours(task_id, status)
            self._decide(msg.Update(task_id, status.agent_id, said, known=False, ours=ours), now)
        elif rule is StatusRule.NEVER_LAUNCHED:
            # The task never reached an agent: its launch did not happen. Forget it, so the
            # controller launches the slot again (this is not a failure of the task).
            log.warning(
                "task %s was never launched (%s %s: %s); it will be launched again",
                task_id,
                status.state,
                status.reason,
                status.message,
            )
            self._table.remove([task_id], sync=False)
            self._decide(msg.Forgotten((task_id,)), now)
            changed = True
        else:
            was_lost = entry.state in LOST_LIKE
            changed = self._table.apply(entry, status, now)
            self._decide(
                msg.Update(
                    task_id,
                    entry.agent_id,
                    said,
                    changed=changed,
                    kill_requested=entry.kill_requested,
                    kill_grace_s=entry.kill_grace_s,
                    was_lost=was_lost,
                    lost_since=entry.lost_since,
                ),
                now,
            )
        if status.uuid is not None and status.agent_id is not None:
            self._table.acks_due.append((status.agent_id, task_id, status.uuid))  # once the journal is synced
        if changed and self._inverse_held and is_terminal(status.state):
            self._settle_inverse()
        if changed:
            self._changed = True
            self._notify()

    def _on_inverse_offers(self, inverse_offers: Sequence[JSON]) -> None:
        """Maintenance asks an agent's resources back: accept when nothing of ours runs there;
        else move our tasks off (stopped with their grace, cause Maintenance, so the
        controller restarts them elsewhere without counting a failure) once the window nears,
        and decline until then (the master asks again after the filter)."""
        if self._read_only or not self._connected:
            return
        now = self.clock()
        for inverse in inverse_offers:
            offer_id, agent_id = id_value(inverse.get("id")), id_value(inverse.get("agent_id"))
            if offer_id is None or agent_id is None:
                continue
            window = window_of(inverse.get("unavailability"))
            self._agent_windows[agent_id] = window
            there = self._table.live_on(agent_id)
            ours = [OurTask(e.task_id, e.kill_grace_s or 0.0, e.kill_requested) for e in there]
            outside = (a for a, w in self._agent_windows.items() if a != agent_id and not cuts_in(w, now))
            said = answer(window, ours, now, elsewhere=any(True for _ in outside))
            log.info("inverse offer %s for agent %s (%s): %s", offer_id, agent_id, window, said.why)
            if said.move:
                self._move_off(said.move, EndCause.MAINTENANCE)
            if said.accept:
                self._answer_inverse("ACCEPT_INVERSE_OFFERS", calls.accept_inverse_offers([offer_id]))
            elif said.hold:
                self._inverse_held[offer_id] = agent_id
            else:
                body = calls.decline_inverse_offers([offer_id], said.refuse_s)
                self._answer_inverse("DECLINE_INVERSE_OFFERS", body)

    def _settle_inverse(self) -> None:
        """Accept each held inverse offer whose agent no task of ours runs on any more."""
        busy = self._table.busy_agents()
        done = [offer_id for offer_id, agent_id in self._inverse_held.items() if agent_id not in busy]
        for offer_id in done:
            del self._inverse_held[offer_id]
            log.info("our tasks are off the agent of inverse offer %s: accepting it", offer_id)
            self._answer_inverse("ACCEPT_INVERSE_OFFERS", calls.accept_inverse_offers([offer_id]))

    def _answer_inverse(self, what: str, body: JSON) -> None:
        def send(client: SchedulerClient) -> None:
            client.call(body)

        self._send(what, send)

    def _move_off(self, task_ids: Sequence[str], cause: EndCause) -> None:
        """Stop these tasks the graceful way, recording why (``TaskEntry.moved_for``)."""
        targets = self._table.move_off(task_ids, cause.value)
        if not targets:
            return
        self._decide(msg.Stop(tuple(targets)))
        self._changed = True
        self._notify()

    def _is_ours(self, task_id: str, status: TaskStatus) -> bool:
        if not OUR_TASK_ID.match(task_id):
            return False
        labels = status.raw.get("labels")
        if isinstance(labels, dict):
            for label in labels.get("labels", []):
                if label.get("key") == f"{LABEL_PREFIX}owner":
                    return bool(label.get("value") == self.owner)
        return True
