"""One HTTP request and its whole answer, bounded in all, over the standard library's
``http.client``: what ``plan`` asks the master (``readonly.ask``) and the agents' sandbox
reads (``sandbox``: task logs, for ``tfdeclare logs`` and the daemon's page).

This module owns the bound: each socket operation is bounded by the call's time (connect,
send, every read), and the socket is shut when that time is up whatever is under way, so a
peer that answers a byte at a time cannot hold the caller (a master sending a byte every half
second held ``plan`` 128 s against its 2 s when only each read was bounded); answers over
``MAX_ANSWER_BYTES`` are refused. No keep-alive, no proxy, no redirect followed (the caller
reads ``location``). ``verify`` is what ``tls.tls_verify`` gives (a context, or a bool for
httpx's default trust or none).
"""

from __future__ import annotations

import contextlib
import http.client
import json
import socket
import ssl
import threading
import time
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from tfdeclare.backends.mesos.tls import ssl_context

MAX_ANSWER_BYTES = 256 * 2**20  # GET_AGENTS of 10,000 agents is tens of MB
Failure = (OSError, http.client.HTTPException)  # what ``request`` raises when there is no answer


@dataclass(frozen=True, slots=True)
class PlainAnswer:
    """An answer read whole."""

    status_code: int
    location: str | None
    content: bytes

    @property
    def text(self) -> str:
        return self.content.decode("utf-8", errors="replace")

    def json(self) -> Any:
        return json.loads(self.content)


def request(
    method: str,
    url: str,
    *,
    timeout_s: float,
    verify: ssl.SSLContext | bool,
    headers: dict[str, str] | None = None,
    body: bytes | None = None,
) -> PlainAnswer:
    """``method url`` and its whole answer within ``timeout_s`` in all. Raises one of
    ``Failure`` when there is none (unreachable, cut off, too large, malformed)."""
    deadline = time.monotonic() + timeout_s
    parts = urlsplit(url)
    target = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
    connection: http.client.HTTPConnection
    if parts.scheme == "https":
        connection = http.client.HTTPSConnection(
            parts.hostname or "", parts.port, timeout=timeout_s, context=ssl_context(verify)
        )
    else:
        connection = http.client.HTTPConnection(parts.hostname or "", parts.port, timeout=timeout_s)
    cutoff: threading.Timer | None = None
    try:
        connection.connect()
        cutoff = threading.Timer(max(0.0, deadline - time.monotonic()), _shut, (connection.sock,))
        cutoff.daemon = True
        cutoff.start()
        connection.request(method, target, body=body, headers=headers or {})
        answer = connection.getresponse()
        content = answer.read(MAX_ANSWER_BYTES + 1)
        if len(content) > MAX_ANSWER_BYTES:
            raise http.client.HTTPException(f"an answer over {MAX_ANSWER_BYTES} bytes")
        return PlainAnswer(answer.status, answer.getheader("Location"), content)
    finally:
        if cutoff is not None:
            cutoff.cancel()
        connection.close()


def _shut(sock: socket.socket | None) -> None:
    """Make every blocked read or write of ``sock`` return (the time of the call is up)."""
    if sock is not None:
        with contextlib.suppress(OSError):
            sock.shutdown(socket.SHUT_RDWR)
