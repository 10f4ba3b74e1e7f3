"""The scheduler client's events, handed to its owner's ``Handler``.

This module owns ``Dispatcher``: each event decoded from the SUBSCRIBE stream becomes a call of
the handler (``subscribed``, ``offers``, ``rescind``, ``update``, ``failure``, ``error``,
``other``), with SUBSCRIBED taken into the session first and an UPDATE acknowledged after its
handler returned (unless the owner acknowledges); the client's own events (``disconnected``,
``terminated``) too. A handler that raises is logged, never fatal. An ERROR event ends the
stream with a typed error (``errors.py``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from tfdeclare.backends.mesos.clientconfig import Backoff
from tfdeclare.backends.mesos.errors import (
    FrameworkFailedOverError,
    FrameworkRemovedError,
    MasterErrorEvent,
    MesosError,
    ProtocolError,
    TerminalError,
)
from tfdeclare.backends.mesos.events import Handler, Offer, TaskStatus, id_value
from tfdeclare.backends.mesos.session import Session, log
from tfdeclare.backends.mesos.watchdog import Watchdog

JSON = dict[str, Any]


class Dispatcher:
    """Events to the handler (on the stream thread). ``acknowledge(agent, task, uuid)`` sends
    an ACKNOWLEDGE."""

    def __init__(
        self,
        session: Session,
        watchdog: Watchdog,
        backoff: Backoff,
        handler: Handler,
        acknowledge: Callable[[str, str, str], None],
    ) -> None:
        self._session = session
        self._watchdog = watchdog
        self._backoff = backoff
        self._handler = handler
        self._acknowledge = acknowledge

    def callback(self, name: str, *args: Any) -> bool:
        try:
            getattr(self._handler, name)(*args)
        except Exception:
            log.exception("the scheduler handler's %s() raised; continuing", name)
            return False
        return True

    def dispatch(self, event: JSON, stream_id: str) -> None:
        kind = event.get("type")
        if kind == "HEARTBEAT":
            return
        if kind == "SUBSCRIBED":
            self._on_subscribed(event.get("subscribed") or {}, stream_id)
        elif kind == "ERROR":
            error = event.get("error")
            message = str((error if isinstance(error, dict) else event).get("message", ""))
            log.error("ERROR event from the Mesos master: %s", message)
            self.callback("error", message)
            if "Framework has been removed" in message:
                raise FrameworkRemovedError(message)
            if "Framework failed over" in message:
                raise FrameworkFailedOverError(message)
            raise MasterErrorEvent(message)
        elif not self._session.subscribed:
            log.warning("ignoring a %s event received before SUBSCRIBED", kind)
        elif kind == "OFFERS":
            offers = []
            for raw in (event.get("offers") or {}).get("offers") or []:
                try:
                    offers.append(Offer.from_json(raw))
                except ProtocolError as exc:
                    log.warning("ignoring a malformed offer: %s", exc)
            self.callback("offers", offers)
        elif kind == "RESCIND":
            offer_id = id_value((event.get("rescind") or {}).get("offer_id"))
            if offer_id is not None:
                self.callback("rescind", offer_id)
        elif kind == "UPDATE":
            self._on_update((event.get("update") or {}).get("status") or {})
        elif kind == "FAILURE":
            failure = event.get("failure") or {}
            status = failure.get("status")
            self.callback(
                "failure",
                id_value(failure.get("agent_id")),
                id_value(failure.get("executor_id")),
                status if isinstance(status, int) else None,
            )
        else:
            self.callback("other", event)

    def end_stream(self, reason: str) -> None:
        session = self._session
        with session.call_lock:  # no call is in flight with the old stream id after this
            session.set_stream_id(None)
        with session.ack_lock:
            pass  # nor any acknowledgement
        if session.mark_disconnected():
            if session.stop.is_set():  # the client closing: every command's end, no news
                log.debug("disconnected from the Mesos master: %s", reason)
            else:
                log.warning("disconnected from the Mesos master: %s", reason)
            self.callback("disconnected", reason)

    def enter_terminal(self, exc: TerminalError) -> None:
        log.error("the Mesos client gives up: %s", exc)
        self._session.give_up(exc)
        self.callback("terminated", exc)

    def _on_subscribed(self, body: JSON, stream_id: str) -> None:
        framework_id = id_value(body.get("framework_id"))
        if framework_id is None:
            raise ProtocolError("SUBSCRIBED without a framework_id")
        interval = float(body.get("heartbeat_interval_seconds") or 15.0)
        session = self._session
        with session.call_lock:
            session.set_framework(session.framework.with_id(framework_id))
            session.set_stream_id(stream_id)
        with session.state:
            session.mark_subscribed()
            self._watchdog.expect_heartbeats(interval * session.config.heartbeat_miss_factor)
            session.state.notify_all()
        self._backoff.reset()
        log.info("subscribed to %s as framework %s (heartbeat %gs)", session.endpoint, framework_id, interval)
        self.callback("subscribed", framework_id, interval, body.get("master_info") or {})

    def _on_update(self, raw: JSON) -> None:
        try:
            status = TaskStatus.from_json(raw)
        except ProtocolError as exc:
            log.warning("ignoring a malformed UPDATE: %s", exc)
            return
        if not self.callback("update", status):
            log.warning("not acknowledging the update of task %s: the master will resend it", status.task_id)
            return
        if status.uuid is None or not self._session.config.auto_acknowledge:
            return  # master-generated (never acknowledged), or the owner acknowledges
        if status.agent_id is None:
            log.warning("cannot acknowledge the update of task %s: no agent_id", status.task_id)
            return
        try:
            self._acknowledge(status.agent_id, status.task_id, status.uuid)
        except MesosError as exc:
            log.warning("ACKNOWLEDGE of task %s failed (the master will resend): %s", status.task_id, exc)
