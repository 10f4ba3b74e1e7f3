"""The scheduler client's subscription: SUBSCRIBE, read the stream, subscribe again.

This module owns ``Stream``, the loop of the *stream* thread: where to SUBSCRIBE (the configured
masters in turn, the leader a 307 names, or the leader ZooKeeper names), one SUBSCRIBE on its own
connection with its RecordIO stream decoded into events for the ``Dispatcher``, and what happens
when it ends (capped exponential backoff, the next master, or giving up on a terminal error).
"""

from __future__ import annotations

import httpx

from tfdeclare.backends.mesos import calls
from tfdeclare.backends.mesos.clientconfig import Backoff
from tfdeclare.backends.mesos.dispatch import Dispatcher
from tfdeclare.backends.mesos.errors import (
    ConfigError,
    MesosConnectionError,
    MesosError,
    ProtocolError,
    SubscribeRefusedError,
    TerminalError,
    error_for_status,
)
from tfdeclare.backends.mesos.leader import resolve_redirect
from tfdeclare.backends.mesos.recordio import RecordIODecoder, decode_event
from tfdeclare.backends.mesos.session import Session, log
from tfdeclare.backends.mesos.transport import Transport, dump, read_text
from tfdeclare.backends.mesos.watchdog import Watchdog


class _Redirect(Exception):
    def __init__(self, location: str | None) -> None:
        super().__init__(location)
        self.location = location


class Stream:
    """The subscription loop; ``run()`` is the stream thread, ``set_leader`` ZooKeeper's callback."""

    def __init__(
        self,
        session: Session,
        transport: Transport,
        watchdog: Watchdog,
        dispatcher: Dispatcher,
        backoff: Backoff,
    ) -> None:
        self._session = session
        self._transport = transport
        self._watchdog = watchdog
        self._dispatcher = dispatcher
        self._backoff = backoff
        self._candidate = 0
        # With ZooKeeper, the leader it names: every SUBSCRIBE goes there, even after a call's
        # redirect moved the session's endpoint (a redirect can name an old, stopped leader).
        self._leader: str | None = None

    def set_leader(self, endpoint: str | None) -> None:
        """Leader detection says the leader is now ``endpoint`` (None: no leader)."""
        if endpoint == self._leader:
            return
        self._leader = endpoint
        self._session.move_to(endpoint)
        self._watchdog.abort("the leading master changed")
        self._session.wake.set()

    def run(self) -> None:
        session, config = self._session, self._session.config
        zookeeper = session.zookeeper is not None
        redirects = 0
        while not session.stop.is_set():
            endpoint = self._leader if zookeeper else session.endpoint
            if endpoint is None:  # ZooKeeper knows no leader (yet)
                session.sleep(config.backoff_cap)
                continue
            session.move_to(endpoint)  # the calls of this subscription go where it goes
            reason = "stream ended"
            try:
                reason = self._subscribe_once(endpoint)
            except _Redirect as redirect:
                if zookeeper:
                    # ZooKeeper names the leader. One that still redirects has not yet seen its
                    # own election (its watch fires after ours) and points at the old leader,
                    # often a stopped one: following it would leave us there, since ZooKeeper
                    # then has no change left to tell. Ask the named leader again after a
                    # backoff, as upstream's scheduler library does; a change of leader wakes us.
                    reason = f"{endpoint} does not lead yet (it redirects to {redirect.location})"
                    log.info("SUBSCRIBE: %s", reason)
                else:
                    redirects += 1
                    try:
                        session.move_to(resolve_redirect(endpoint, redirect.location))
                        log.info("SUBSCRIBE redirected to %s", session.endpoint)
                    except ConfigError as exc:
                        session.failed(exc)
                    if redirects <= config.max_redirects:
                        continue
            except TerminalError as exc:
                if isinstance(exc, SubscribeRefusedError):
                    session.failed(exc.cause)
                self._dispatcher.end_stream(str(exc))
                self._dispatcher.enter_terminal(exc)
                return
            except MesosError as exc:
                reason = str(exc)
                session.failed(exc)
            except httpx.HTTPError as exc:
                reason = f"{type(exc).__name__}: {exc}"
                session.failed(MesosConnectionError(f"SUBSCRIBE to {endpoint}: {reason}"))
                if session.candidates:  # next configured master (also undoes a redirect)
                    self._candidate = (self._candidate + 1) % len(session.candidates)
                    session.move_to(session.candidates[self._candidate])
            except Exception:
                log.exception("unexpected error on the Mesos event stream")
                reason = "internal error"
            redirects = 0
            self._dispatcher.end_stream(reason)
            if not session.stop.is_set():
                delay = self._backoff.next()
                log.info("re-subscribing in %.2fs", delay)
                session.sleep(delay)

    def _subscribe_once(self, endpoint: str) -> str:
        """One SUBSCRIBE and its stream, dispatched until it ends. Returns why it ended."""
        session, watchdog = self._session, self._watchdog
        streams = self._transport.streams
        assert streams is not None
        body = dump(calls.subscribe(session.framework, session.suppressed_roles))
        headers = {
            "Content-Type": "application/json",
            "Accept": "application/json",
            "Accept-Encoding": "identity",
            "Connection": "close",
        }
        log.debug("SUBSCRIBE to %s (framework id %s)", endpoint, session.framework.id)
        with streams.stream("POST", endpoint, content=body, headers=headers) as resp:
            if resp.status_code == 307:
                raise _Redirect(resp.headers.get("Location"))
            if resp.status_code != 200:
                error = error_for_status(resp.status_code, read_text(resp), "SUBSCRIBE")
                if resp.status_code in (401, 403):  # an operator must act: never retried
                    raise SubscribeRefusedError(error)
                raise error
            stream_id = resp.headers.get("Mesos-Stream-Id")
            if not stream_id:
                raise ProtocolError("the SUBSCRIBE response has no Mesos-Stream-Id header")
            watchdog.attach(resp)
            decoder = RecordIODecoder(session.config.max_record_size)
            try:
                for chunk in resp.iter_raw():
                    watchdog.busy()
                    for record in decoder.feed(chunk):
                        if session.stop.is_set():
                            return "client stopped"
                        self._dispatcher.dispatch(decode_event(record), stream_id)
                    watchdog.idle()
                decoder.close()
            except httpx.HTTPError as exc:
                if watchdog.abort_reason is None:
                    raise
                log.debug("stream aborted (%s): %s", watchdog.abort_reason, exc)
            finally:
                aborted = watchdog.detach()
            if aborted is not None:
                if aborted.startswith("heartbeat"):
                    raise MesosConnectionError(aborted)
                return aborted
            return "the master closed the stream"
