"""HTTP/1.1 pipelining of many small calls on one connection (used for ACKNOWLEDGE bursts).

This module owns a deliberately small HTTP/1.1 client: it writes a batch of POST requests in
one go and reads the responses in order (status line, headers, a ``Content-Length`` or
chunked body; interim ``1xx`` answers such as ``100 Continue`` are skipped, the final answer
that follows counts). libprocess, the Mesos HTTP server, answers pipelined requests in order.

A framework must acknowledge every status update; at 10,000 tasks that is 20,000 calls. One
request and response at a time through httpx costs about 1 ms of CPU per call in this
process; pipelined on a raw connection it costs a few tens of microseconds, so acks do not
starve placement and launches of the interpreter.

Anything unexpected (connection closed, a malformed answer) fails the rest of the batch: the
caller treats those calls as not made (for acknowledgements: the master redelivers them).
Credentials only travel in the ``Authorization`` header; they are never logged or put into
exceptions.
"""

from __future__ import annotations

import socket
import ssl
from collections.abc import Mapping, Sequence
from urllib.parse import urlsplit

_MAX_HEADER = 64 * 1024


class PipelineError(Exception):
    """The connection failed or the server answered something this client does not parse.

    ``statuses`` holds the answers read before the failure (in request order)."""

    def __init__(self, message: str, statuses: Sequence[int] = ()) -> None:
        super().__init__(message)
        self.statuses = list(statuses)


class PipelinedConnection:
    def __init__(self, endpoint: str, ssl_context: ssl.SSLContext | None, timeout: float) -> None:
        parts = urlsplit(endpoint)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise PipelineError(f"unusable endpoint {endpoint!r}")
        self.endpoint = endpoint
        self.host = parts.hostname
        self.port = parts.port or (443 if parts.scheme == "https" else 80)
        self.path = parts.path or "/"
        self.authority = parts.netloc.rsplit("@", 1)[-1]
        self.tls = parts.scheme == "https"
        self.ssl_context = ssl_context
        self.timeout = timeout
        self._sock: socket.socket | None = None
        self._buffer = b""

    def close(self) -> None:
        if self._sock is not None:
            try:
                self._sock.close()
            finally:
                self._sock = None
                self._buffer = b""

    def _connect(self) -> socket.socket:
        if self._sock is None:
            sock = socket.create_connection((self.host, self.port), timeout=self.timeout)
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            if self.tls:
                context = self.ssl_context or ssl.create_default_context()
                sock = context.wrap_socket(sock, server_hostname=self.host)
            self._sock = sock
            self._buffer = b""
        return self._sock

    def post_many(self, bodies: Sequence[bytes], headers: Mapping[str, str]) -> list[int]:
        """POST every body (in order, pipelined); returns the status of each. Raises
        ``PipelineError`` after closing the connection if anything goes wrong; statuses of
        the answers read before that are in ``err.statuses``."""
        if not bodies:
            return []
        fixed = "".join(f"{k}: {v}\r\n" for k, v in headers.items())
        head = f"POST {self.path} HTTP/1.1\r\nHost: {self.authority}\r\n{fixed}".encode()
        out = b"".join(head + b"Content-Length: %d\r\n\r\n" % len(body) + body for body in bodies)
        statuses: list[int] = []
        try:
            self._exchange(out, len(bodies), statuses)
        except (OSError, ValueError, PipelineError) as err:
            self.close()
            message = str(err) if isinstance(err, PipelineError) else f"{type(err).__name__}: {err}"
            raise PipelineError(message, statuses) from None
        return statuses

    def _exchange(self, out: bytes, count: int, statuses: list[int]) -> None:
        sock = self._connect()
        sock.sendall(out)
        for _ in range(count):
            status, close = self._read_response(sock)
            while 100 <= status < 200:  # interim (100 Continue, 102, 103): the final answer follows
                if status == 101:
                    raise PipelineError("the server switched protocols")
                status, close = self._read_response(sock)
            statuses.append(status)
            if close:
                self.close()
                if len(statuses) < count:
                    raise PipelineError("the server closed the connection")
                return

    def _fill(self, sock: socket.socket) -> None:
        data = sock.recv(65536)
        if not data:
            raise PipelineError("the server closed the connection")
        self._buffer += data

    def _read_response(self, sock: socket.socket) -> tuple[int, bool]:
        while (end := self._buffer.find(b"\r\n\r\n")) < 0:
            if len(self._buffer) > _MAX_HEADER:
                raise PipelineError("response headers too large")
            self._fill(sock)
        head, self._buffer = self._buffer[:end].decode("latin-1"), self._buffer[end + 4 :]
        lines = head.split("\r\n")
        parts = lines[0].split(" ", 2)
        if len(parts) < 2 or not parts[0].startswith("HTTP/1."):
            raise PipelineError("not an HTTP/1.x response")
        status = int(parts[1])
        fields: dict[str, str] = {}
        for line in lines[1:]:
            name, _, value = line.partition(":")
            fields[name.strip().lower()] = value.strip()
        close = fields.get("connection", "").lower() == "close" or parts[0] == "HTTP/1.0"
        if 100 <= status < 200 or status in (204, 304):
            return status, close  # never a body (RFC 9112, section 6.3)
        if "chunked" in fields.get("transfer-encoding", "").lower():
            self._skip_chunked(sock)
        elif "content-length" in fields:
            self._skip(sock, int(fields["content-length"]))
        else:
            raise PipelineError("a response without a length")
        return status, close

    def _skip(self, sock: socket.socket, length: int) -> None:
        while len(self._buffer) < length:
            self._fill(sock)
        self._buffer = self._buffer[length:]

    def _skip_chunked(self, sock: socket.socket) -> None:
        while True:
            while (end := self._buffer.find(b"\r\n")) < 0:
                self._fill(sock)
            size = int(self._buffer[:end].split(b";", 1)[0], 16)
            self._buffer = self._buffer[end + 2 :]
            if size == 0:
                while (trailer := self._buffer.find(b"\r\n")) != 0:
                    if trailer < 0:
                        self._fill(sock)
                    else:
                        self._buffer = self._buffer[trailer + 2 :]
                self._buffer = self._buffer[2:]
                return
            self._skip(sock, size + 2)
