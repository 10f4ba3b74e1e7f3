"""What the parts of one scheduler client share: the subscription's state and its locks.

This module owns ``Session``: the framework as subscribed (its info, id and suppressed roles),
the endpoint the calls go to, the stream id, whether the client is subscribed (and since when not,
on the monotonic clock, as the watchdog measures), its last subscribe
error and its terminal error, with the locks and events that order them. The stream thread
(``stream.py``, ``dispatch.py``), the calls (``caller.py``) and the facade (``client.py``) read
and change it through its methods only; it does no I/O.

Lock order: ``ack_lock``, then ``call_lock``, then ``state``.
"""

from __future__ import annotations

import logging
import threading
import time

from tfdeclare.backends.mesos.clientconfig import ClientConfig
from tfdeclare.backends.mesos.errors import (
    ClientStoppedError,
    MesosError,
    NotSubscribedError,
    SubscribeTimeoutError,
    TerminalError,
)
from tfdeclare.backends.mesos.info import FrameworkInfo
from tfdeclare.backends.mesos.leader import parse_master

log = logging.getLogger("tfdeclare.backends.mesos.client")  # the client's parts log as the client


class Session:
    """The shared state of one ``SchedulerClient``; see the module docstring."""

    def __init__(self, config: ClientConfig) -> None:
        self.config = config
        spec = parse_master(config.master)
        self.zookeeper = spec.zookeeper
        self.candidates = spec.endpoints
        self._endpoint: str | None = spec.endpoints[0] if spec.endpoints else None  # calls go here
        self._framework = config.framework
        self._suppressed_roles = config.suppressed_roles
        self.call_lock = threading.RLock()  # serialises calls and stream-id changes
        # The pipelined ACKNOWLEDGE connection has its own lock, so a burst of acknowledgements
        # never holds up an ACCEPT (and the other way round). Order: ack_lock, then call_lock.
        self.ack_lock = threading.Lock()
        self.state = threading.Condition()  # guards the fields below (and the watchdog's)
        self._stream_id: str | None = None
        self._subscribed = False
        self._terminal: TerminalError | None = None
        self._last_error: MesosError | None = None
        self._unsubscribed_since: float | None = time.monotonic()  # None while subscribed
        self.stop = threading.Event()
        self.wake = threading.Event()  # a leader change or stop() ends a wait before SUBSCRIBE

    # ------------------------------------------------------------------ reads

    @property
    def endpoint(self) -> str | None:
        return self._endpoint

    @property
    def framework(self) -> FrameworkInfo:
        return self._framework

    @property
    def suppressed_roles(self) -> tuple[str, ...]:
        return self._suppressed_roles

    @property
    def stream_id(self) -> str | None:
        return self._stream_id

    @property
    def subscribed(self) -> bool:
        return self._subscribed

    @property
    def terminal(self) -> TerminalError | None:
        return self._terminal

    @property
    def last_error(self) -> MesosError | None:
        return self._last_error

    def unsubscribed_for(self) -> float | None:
        """Seconds since the client was last subscribed (or started); None while subscribed."""
        since = self._unsubscribed_since
        return None if since is None else time.monotonic() - since

    def tls_expected(self) -> bool:
        """Whether a configured master (or the ZooKeeper scheme) says https."""
        if self.zookeeper is not None:
            return self.config.zk_scheme == "https"
        return any(e.startswith("https:") for e in self.candidates)

    def subscription(self, what: str) -> tuple[str, str, str]:
        """The endpoint, stream id and framework id of the current subscription (call
        under ``call_lock``); raises when the client is done or not subscribed."""
        if self._terminal is not None:
            raise self._terminal
        endpoint, stream_id, framework_id = self._endpoint, self._stream_id, self._framework.id
        if endpoint is None or stream_id is None or framework_id is None:
            raise NotSubscribedError(f"{what}: not subscribed to a Mesos master")
        return endpoint, stream_id, framework_id

    def wait_subscribed(self, timeout: float) -> str:
        """Block until subscribed; return the framework id. Raises the terminal error if the
        client gave up, or SubscribeTimeoutError (with ``last_error``) after ``timeout``."""
        with self.state:
            self.state.wait_for(lambda: self._subscribed or self._terminal is not None, timeout)
            if self._terminal is not None:
                raise self._terminal
            if not self._subscribed or self._framework.id is None:
                last = self._last_error
                detail = f"; last error: {last}" if last else ""
                raise SubscribeTimeoutError(f"not subscribed after {timeout:g}s{detail}", last)
            return self._framework.id

    def sleep(self, delay: float) -> None:
        """Wait ``delay``, or less if stop() or a leader change sets ``wake``."""
        self.wake.wait(delay)
        self.wake.clear()

    # ---------------------------------------------------------------- changes

    def move_to(self, endpoint: str | None) -> None:
        """The calls (and this subscription) go to ``endpoint`` from now on."""
        self._endpoint = endpoint

    def set_framework(self, info: FrameworkInfo, suppressed_roles: tuple[str, ...] | None = None) -> None:
        """The FrameworkInfo (and suppressed roles) of the next SUBSCRIBE (under ``call_lock``)."""
        self._framework = info
        if suppressed_roles is not None:
            self._suppressed_roles = suppressed_roles

    def set_stream_id(self, stream_id: str | None) -> None:
        """The stream id of the calls (under ``call_lock``); None: no call may go out."""
        self._stream_id = stream_id

    def mark_subscribed(self) -> None:
        """SUBSCRIBED arrived (under ``state``): no last error any more."""
        self._subscribed = True
        self._last_error = None
        self._unsubscribed_since = None

    def mark_disconnected(self) -> bool:
        """The stream ended; whether it had been subscribed."""
        with self.state:
            was, self._subscribed = self._subscribed, False
            if was:
                self._unsubscribed_since = time.monotonic()
        return was

    def failed(self, exc: MesosError) -> None:
        log.warning("Mesos subscription failed: %s", exc)
        self._last_error = exc

    def give_up(self, exc: TerminalError) -> None:
        with self.state:
            self._terminal = exc
            self.state.notify_all()

    def stopped(self) -> None:
        """stop() was called: the client ends with ``ClientStoppedError`` unless it gave up."""
        with self.state:
            if self._terminal is None:
                self._terminal = ClientStoppedError("the client was stopped")
            self.state.notify_all()
