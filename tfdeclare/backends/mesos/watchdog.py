"""The scheduler client's hold on its event stream: the socket and the heartbeat watchdog.

This module owns ``Watchdog``: the socket of the SUBSCRIBE stream being read (so that any
thread can make the stream thread's blocking read return, with a reason), when bytes last came,
and the *watchdog* thread's loop, which drops the stream after ``heartbeat_miss_factor``
heartbeat intervals without bytes (before SUBSCRIBED: after ``subscribe_timeout``). Its fields
are guarded by the session's ``state``.
"""

from __future__ import annotations

import socket
import time

import httpx

from tfdeclare.backends.mesos.session import Session, log

_BUSY = float("inf")  # _idle_since while events are being handled: the watchdog waits


class Watchdog:
    """The stream's socket and its heartbeat deadline; ``watch()`` is the watchdog thread."""

    def __init__(self, session: Session) -> None:
        self._session = session
        self._sock: socket.socket | None = None
        self._abort_reason: str | None = None
        self._idle_since = 0.0
        self._stream_timeout: float | None = None

    @property
    def abort_reason(self) -> str | None:
        """Why the stream is being dropped on purpose (its read error is expected), if it is."""
        return self._abort_reason

    def attach(self, resp: httpx.Response) -> None:
        """Watch the stream of ``resp``, until SUBSCRIBED with ``subscribe_timeout``."""
        stream = resp.extensions.get("network_stream")
        sock = stream.get_extra_info("socket") if stream is not None else None
        with self._session.state:
            self._sock = sock if isinstance(sock, socket.socket) else None
            self._abort_reason = None
            self._idle_since = time.monotonic()
            self._stream_timeout = self._session.config.subscribe_timeout
        if self._sock is None:
            log.warning("no socket handle for the event stream: the heartbeat watchdog cannot act")
        if self._session.stop.is_set():
            self.abort("client stopped")

    def detach(self) -> str | None:
        """The stream is over; why it was aborted (None: it was not)."""
        with self._session.state:
            self._sock = None
            self._stream_timeout = None
            reason, self._abort_reason = self._abort_reason, None
            return reason

    def busy(self) -> None:
        """Events are being handled: no deadline until ``idle()``."""
        self._idle_since = _BUSY

    def idle(self) -> None:
        """The events read so far are handled: the deadline runs from now."""
        self._idle_since = time.monotonic()

    def expect_heartbeats(self, timeout: float) -> None:
        """SUBSCRIBED (under the session's ``state``): bytes must come every ``timeout``."""
        self._stream_timeout = timeout

    def abort(self, reason: str) -> None:
        """Make the stream thread's blocking read return (from any thread)."""
        with self._session.state:
            sock, self._stream_timeout = self._sock, None
            if sock is None:
                return
            if self._abort_reason is None:
                self._abort_reason = reason
        try:
            sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass

    def watch(self) -> None:
        """The watchdog thread: until stop() or the end of the client."""
        session = self._session
        while not session.stop.is_set() and session.terminal is None:
            with session.state:
                timeout, idle_since = self._stream_timeout, self._idle_since
            tick = 0.5 if timeout is None else max(0.005, min(0.5, timeout / 10))
            if timeout is not None and time.monotonic() - idle_since > timeout:
                log.warning("no bytes from the Mesos master for %.2fs: dropping the stream", timeout)
                self.abort(f"heartbeat timeout: no bytes for {timeout:g}s")
            session.stop.wait(tick)
