"""A small HTTP/1.1 server on asyncio streams, with chunked streaming responses.

Owns the transport: request parsing (Content-Length or chunked bodies, keep-alive),
plain responses, and ``EventStream`` — the never-ending chunked response that carries a
subscription. The stream knows the fault modes tests can put it in: re-chunking
(``record``: one HTTP chunk per RecordIO record, as libprocess writes it; ``split``:
records cut at random points, including inside the length prefix; ``coalesce``: records
of one loop tick merged into one chunk; ``bytes``: one-byte chunks), ``stall`` (nothing is
written, the socket stays open) and ``abort`` (the socket is reset without a final chunk).
Nothing here knows about Mesos semantics.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import random
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from email.utils import formatdate
from http import HTTPStatus
from typing import Any
from urllib.parse import parse_qsl, urlsplit

log = logging.getLogger("mesos_emulator.wire")

MAX_HEADER_BYTES = 64 * 1024
MAX_BODY_BYTES = 64 * 1024 * 1024
CHUNK_MODES = ("record", "split", "coalesce", "bytes")


class Headers:
    """Case-insensitive request headers (first value wins)."""

    def __init__(self, pairs: list[tuple[str, str]]) -> None:
        self.pairs = pairs
        self._map: dict[str, str] = {}
        for name, value in pairs:
            self._map.setdefault(name.lower(), value)

    def get(self, name: str) -> str | None:
        return self._map.get(name.lower())

    def __contains__(self, name: object) -> bool:
        return isinstance(name, str) and name.lower() in self._map


@dataclass
class Request:
    method: str
    target: str
    path: str
    query: dict[str, str]
    version: str
    headers: Headers
    body: bytes
    peer: str = ""


@dataclass
class Response:
    status: int
    body: bytes = b""
    headers: list[tuple[str, str]] = field(default_factory=list)
    content_type: str | None = None

    @classmethod
    def text(cls, status: int, text: str = "", **extra: str) -> Response:
        headers = [(name.replace("_", "-"), value) for name, value in extra.items()]
        body = text.encode("utf-8")
        return cls(status, body, headers, "text/plain; charset=utf-8" if body else None)

    @classmethod
    def json(cls, status: int, body: bytes) -> Response:
        return cls(status, body, [], "application/json")


class BadRequestError(Exception):
    pass


async def read_request(reader: asyncio.StreamReader, peer: str) -> Request | None:
    """Read one request; ``None`` on a clean EOF between requests."""
    try:
        head = await reader.readuntil(b"\r\n\r\n")
    except asyncio.IncompleteReadError as exc:
        if not exc.partial.strip():
            return None
        raise BadRequestError("truncated request head") from exc
    except asyncio.LimitOverrunError as exc:
        raise BadRequestError("request head too large") from exc
    lines = head.decode("latin-1").split("\r\n")
    parts = lines[0].split(" ")
    if len(parts) != 3 or not parts[2].startswith("HTTP/1."):
        raise BadRequestError(f"malformed request line {lines[0]!r}")
    method, target, version = parts
    pairs: list[tuple[str, str]] = []
    for line in lines[1:]:
        if not line:
            continue
        name, sep, value = line.partition(":")
        if not sep:
            raise BadRequestError(f"malformed header line {line!r}")
        pairs.append((name.strip(), value.strip()))
    headers = Headers(pairs)
    body = await _read_body(reader, headers)
    split = urlsplit(target)
    query = dict(parse_qsl(split.query, keep_blank_values=True))
    return Request(method, target, split.path, query, version, headers, body, peer)


async def _read_body(reader: asyncio.StreamReader, headers: Headers) -> bytes:
    encoding = (headers.get("Transfer-Encoding") or "").lower()
    if "chunked" in encoding:
        out = bytearray()
        while True:
            size_line = await reader.readuntil(b"\r\n")
            size = int(size_line.split(b";")[0].strip() or b"0", 16)
            if size == 0:
                while (await reader.readuntil(b"\r\n")) != b"\r\n":
                    pass
                return bytes(out)
            out += await reader.readexactly(size)
            await reader.readexactly(2)
            if len(out) > MAX_BODY_BYTES:
                raise BadRequestError("request body too large")
    length_text = headers.get("Content-Length")
    if not length_text:
        return b""
    try:
        length = int(length_text)
    except ValueError as exc:
        raise BadRequestError("invalid Content-Length") from exc
    if length < 0 or length > MAX_BODY_BYTES:
        raise BadRequestError("invalid Content-Length")
    return await reader.readexactly(length)


_date_cache: list[Any] = [0, ""]


def http_date() -> str:
    """The ``Date`` header value, formatted at most once per second."""
    now = int(time.time())
    if _date_cache[0] != now:
        _date_cache[0], _date_cache[1] = now, formatdate(now, usegmt=True)
    return str(_date_cache[1])


def render_response(response: Response, keep_alive: bool) -> bytes:
    reason = HTTPStatus(response.status).phrase
    lines = [f"HTTP/1.1 {response.status} {reason}", f"Date: {http_date()}"]
    lines.extend(f"{name}: {value}" for name, value in response.headers)
    if response.content_type:
        lines.append(f"Content-Type: {response.content_type}")
    lines.append(f"Content-Length: {len(response.body)}")
    if not keep_alive:
        lines.append("Connection: close")
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + response.body


class EventStream:
    """A chunked, never-ending response body carrying RecordIO records."""

    def __init__(
        self,
        writer: asyncio.StreamWriter,
        loop: asyncio.AbstractEventLoop,
        chunk_mode: str = "record",
        seed: int = 0,
    ) -> None:
        self._writer = writer
        self._loop = loop
        self.chunk_mode = chunk_mode
        self._rng = random.Random(seed)
        self._pending = bytearray()  # records waiting to be merged (coalesce mode)
        self._flush_scheduled = False
        self._out = bytearray()  # framed chunks waiting for one transport write
        self._write_scheduled = False
        self.stalled = False
        self.closed = False
        self._on_close: list[Callable[[], None]] = []
        self.bytes_written = 0

    def on_close(self, callback: Callable[[], None]) -> None:
        if self.closed:
            callback()
        else:
            self._on_close.append(callback)

    def start(self, headers: list[tuple[str, str]]) -> None:
        lines = ["HTTP/1.1 200 OK", f"Date: {http_date()}"]
        lines.extend(f"{name}: {value}" for name, value in headers)
        lines.append("Transfer-Encoding: chunked")
        self._writer.write(("\r\n".join(lines) + "\r\n\r\n").encode("latin-1"))

    def send_record(self, record: bytes) -> None:
        if self.closed or self.stalled:
            return
        mode = self.chunk_mode
        if mode == "record":
            self._chunk(record)
        elif mode == "bytes":
            for index in range(len(record)):
                self._chunk(record[index : index + 1])
        elif mode == "split":
            cuts = sorted(self._rng.sample(range(1, len(record)), min(3, len(record) - 1)))
            start = 0
            for cut in [*cuts, len(record)]:
                self._chunk(record[start:cut])
                start = cut
        else:  # coalesce: merge everything written during this loop iteration
            self._pending += record
            if not self._flush_scheduled:
                self._flush_scheduled = True
                self._loop.call_soon(self._flush)

    def _flush(self) -> None:
        self._flush_scheduled = False
        if self._pending and not self.closed and not self.stalled:
            self._chunk(bytes(self._pending))
        self._pending.clear()

    def _chunk(self, data: bytes) -> None:
        """Frame one HTTP chunk; all chunks of a loop iteration share one socket write."""
        if not data:
            return
        self.bytes_written += len(data)
        self._out += b"%x\r\n%s\r\n" % (len(data), data)
        if not self._write_scheduled:
            self._write_scheduled = True
            self._loop.call_soon(self._write_out)

    def _write_out(self) -> None:
        self._write_scheduled = False
        if self._out and not self.closed:
            self._writer.write(bytes(self._out))
        self._out.clear()

    def close(self) -> None:
        """End the response normally (final chunk) and close the connection."""
        if self.closed:
            return
        self._flush()
        self._write_out()
        with contextlib.suppress(Exception):
            self._writer.write(b"0\r\n\r\n")
            self._writer.close()
        self._mark_closed()

    def abort(self) -> None:
        """Reset the connection without ending the chunked body."""
        if self.closed:
            return
        transport = self._writer.transport
        with contextlib.suppress(Exception):
            transport.abort()
        self._mark_closed()

    def peer_closed(self) -> None:
        if not self.closed:
            with contextlib.suppress(Exception):
                self._writer.close()
            self._mark_closed()

    def _mark_closed(self) -> None:
        self.closed = True
        callbacks, self._on_close = self._on_close, []
        for callback in callbacks:
            try:
                callback()
            except Exception:
                log.exception("stream close callback failed")


StreamStarter = Callable[[list[tuple[str, str]]], EventStream]
Handler = Callable[[Request, StreamStarter], Awaitable[Response | EventStream]]


class HttpServer:
    """Serves one handler on 127.0.0.1; the handler may turn a request into a stream."""

    def __init__(self, handler: Handler, host: str = "127.0.0.1", port: int = 0) -> None:
        self._handler = handler
        self._host = host
        self._port = port
        self._server: asyncio.base_events.Server | None = None
        self._connections: set[asyncio.StreamWriter] = set()
        self.chunk_mode = "record"
        self.seed = 0

    @property
    def port(self) -> int:
        assert self._server is not None
        sockname = self._server.sockets[0].getsockname()
        return int(sockname[1])

    async def start(self) -> None:
        self._server = await asyncio.start_server(
            self._serve, self._host, self._port, limit=MAX_HEADER_BYTES, reuse_address=True
        )

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
        for writer in list(self._connections):
            with contextlib.suppress(Exception):
                writer.transport.abort()
        if self._server is not None:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self._server.wait_closed(), 1.0)

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self._connections.add(writer)
        peername = writer.get_extra_info("peername")
        peer = f"{peername[0]}:{peername[1]}" if peername else ""
        try:
            await self._loop_requests(reader, writer, peer)
        except (ConnectionError, asyncio.IncompleteReadError, asyncio.CancelledError):
            pass
        except Exception:
            log.exception("connection handler failed")
        finally:
            self._connections.discard(writer)
            with contextlib.suppress(Exception):
                writer.close()

    def _start_stream(
        self,
        writer: asyncio.StreamWriter,
        loop: asyncio.AbstractEventLoop,
        headers: list[tuple[str, str]],
    ) -> EventStream:
        stream = EventStream(writer, loop, self.chunk_mode, self.seed)
        self.seed += 1
        stream.start(headers)
        return stream

    async def _loop_requests(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, peer: str
    ) -> None:
        loop = asyncio.get_running_loop()
        while True:
            try:
                request = await read_request(reader, peer)
            except BadRequestError as exc:
                writer.write(render_response(Response.text(400, str(exc)), keep_alive=False))
                await writer.drain()
                return
            if request is None:
                return
            result = await self._handler(request, functools.partial(self._start_stream, writer, loop))
            if isinstance(result, EventStream):
                await _watch_stream(reader, result)
                return
            connection = (request.headers.get("Connection") or "").lower()
            keep_alive = request.version == "HTTP/1.1" and connection != "close"
            writer.write(render_response(result, keep_alive))
            await writer.drain()
            if not keep_alive:
                return


async def _watch_stream(reader: asyncio.StreamReader, stream: EventStream) -> None:
    """Wait until the subscriber closes its side (or the stream is closed by us)."""
    closed: asyncio.Future[None] = asyncio.get_running_loop().create_future()

    def on_close() -> None:
        if not closed.done():
            closed.set_result(None)

    stream.on_close(on_close)
    reading = asyncio.ensure_future(_drain_until_eof(reader))
    try:
        done, _ = await asyncio.wait({reading, closed}, return_when=asyncio.FIRST_COMPLETED)
        if reading in done:
            stream.peer_closed()
    finally:
        reading.cancel()


async def _drain_until_eof(reader: asyncio.StreamReader) -> None:
    with contextlib.suppress(ConnectionError):
        while await reader.read(65536):
            pass
