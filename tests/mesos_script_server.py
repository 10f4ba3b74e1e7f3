"""A scripted HTTP/1.1 server on 127.0.0.1 that plays a Mesos master for client tests.

It is deliberately dumb: it records every request (connection id, headers, body) and answers
as the test scripts it. SUBSCRIBE (``on_subscribe``) returns either a plain ``Reply``
(307/401/503...) or a ``Stream``: a chunked 200 response held open, into which the test pushes
events, raw bytes with any chunking, a clean end or an abrupt close. Other calls go to
``on_call`` (default: 202). Optional TLS with a given certificate.
"""

from __future__ import annotations

import base64
import contextlib
import itertools
import json
import queue
import select
import socket
import socketserver
import ssl
import threading
import time
import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

JSON = dict[str, Any]


def record(event: JSON) -> bytes:
    payload = json.dumps(event, ensure_ascii=False).encode("utf-8")
    return b"%d\n%s" % (len(payload), payload)


def new_uuid() -> str:
    """A base64 16-byte uuid that contains '+', '/' and '=' (to check it is echoed exactly)."""
    return base64.b64encode(b"\xfb\xff\xbf" + uuid.uuid4().bytes[3:]).decode()


@dataclass
class Request:
    conn: int
    method: str
    path: str
    headers: dict[str, str]  # lower-case names
    body: bytes
    at: float

    @property
    def json(self) -> JSON:
        data: JSON = json.loads(self.body.decode("utf-8"))
        return data

    @property
    def type(self) -> str | None:
        try:
            return str(self.json.get("type"))
        except ValueError:
            return None


@dataclass
class Reply:
    status: int
    body: bytes = b""
    headers: dict[str, str] = field(default_factory=dict)
    interim: tuple[int, ...] = ()  # 1xx answers sent before this one (e.g. 100 Continue)


_END, _ABORT = object(), object()


def _peer_closed(sock: socket.socket) -> bool:
    """Whether the client hung up (it sends nothing else on a stream connection)."""
    if isinstance(sock, ssl.SSLSocket) or not select.select([sock], [], [], 0)[0]:
        return False
    try:
        return sock.recv(1, socket.MSG_PEEK | socket.MSG_DONTWAIT) == b""
    except BlockingIOError:
        return False


class Stream:
    """An open SUBSCRIBE response. Push bytes with ``event``/``raw``; finish with ``end``/``abort``."""

    def __init__(self, stream_id: str | None = None) -> None:
        self.stream_id = stream_id or str(uuid.uuid4())
        self.request: Request | None = None
        self.closed = threading.Event()
        self.last_write = 0.0
        self._q: queue.Queue[object] = queue.Queue()

    def raw(self, *chunks: bytes) -> Stream:
        """Each argument becomes one HTTP chunk (so records can be split or coalesced at will)."""
        for chunk in chunks:
            if chunk:
                self._q.put(chunk)
        return self

    def event(self, event: JSON, chunker: Callable[[bytes], Iterable[bytes]] | None = None) -> Stream:
        data = record(event)
        return self.raw(*(chunker(data) if chunker else [data]))

    def subscribed(self, framework_id: str = "fw-1", interval: float = 15.0) -> Stream:
        body = {"framework_id": {"value": framework_id}, "heartbeat_interval_seconds": interval}
        body["master_info"] = {"id": "master-1", "hostname": "127.0.0.1", "port": 5050, "ip": 16777343}
        return self.event({"type": "SUBSCRIBED", "subscribed": body})

    def heartbeat(self) -> Stream:
        return self.event({"type": "HEARTBEAT"})

    def error(self, message: str) -> Stream:
        return self.event({"type": "ERROR", "error": {"message": message}})

    def update(self, task_id: str, state: str, uuid_b64: str | None, **extra: Any) -> Stream:
        status: JSON = {"task_id": {"value": task_id}, "state": state, "agent_id": {"value": "agent-1"}}
        if uuid_b64 is not None:
            status["uuid"] = uuid_b64
        status.update(extra)
        return self.event({"type": "UPDATE", "update": {"status": status}})

    def end(self) -> None:
        """Finish the chunked response properly (terminating chunk), then close."""
        self._q.put(_END)

    def abort(self) -> None:
        """Close the socket without finishing the response."""
        self._q.put(_ABORT)

    def heartbeats(self, every: float) -> None:
        """Send a HEARTBEAT every ``every`` seconds until the stream closes."""

        def beat() -> None:
            while not self.closed.wait(every):
                self.heartbeat()

        threading.Thread(target=beat, daemon=True).start()


class ScriptServer:
    def __init__(self, tls: ssl.SSLContext | None = None) -> None:
        self.requests: list[Request] = []
        self.streams: list[Stream] = []
        self.on_subscribe: Callable[[Request], Reply | Stream] = self.default_subscribe
        self.on_call: Callable[[Request], Reply] = lambda req: Reply(202)
        self._cond = threading.Condition()
        self._conn_ids = itertools.count(1)
        self._socks: list[socket.socket] = []
        outer = self

        class Handler(socketserver.BaseRequestHandler):
            def handle(self) -> None:
                outer._serve_connection(self.request)

        class Server(socketserver.ThreadingTCPServer):
            daemon_threads = True
            allow_reuse_address = True

            def get_request(self) -> tuple[socket.socket, Any]:
                sock, addr = super().get_request()
                if tls is not None:
                    sock.settimeout(5)
                    sock = tls.wrap_socket(sock, server_side=True)
                    sock.settimeout(None)
                return sock, addr

            def handle_error(self, request: Any, client_address: Any) -> None:
                pass  # clients hanging up mid-stream are expected

        self._server = Server(("127.0.0.1", 0), Handler)
        self.port = self._server.server_address[1]
        self.scheme = "https" if tls else "http"
        self._thread = threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.05})
        self._thread.daemon = True
        self._thread.start()

    @property
    def url(self) -> str:
        return f"{self.scheme}://127.0.0.1:{self.port}"

    @property
    def location(self) -> str:
        """What a non-leading master would put in Location to send clients here."""
        return f"//127.0.0.1:{self.port}/api/v1/scheduler"

    def default_subscribe(self, req: Request) -> Stream:
        fid = req.json.get("framework_id", {}).get("value", "fw-1")
        return Stream().subscribed(fid).heartbeat()

    # -------------------------------------------------------------- queries

    def subscribes(self) -> list[Request]:
        with self._cond:
            return [r for r in self.requests if r.type == "SUBSCRIBE"]

    def calls(self, call_type: str | None = None) -> list[Request]:
        with self._cond:
            return [r for r in self.requests if r.type != "SUBSCRIBE" and call_type in (None, r.type)]

    def wait(self, predicate: Callable[[], object], timeout: float = 5.0) -> None:
        with self._cond:
            if not self._cond.wait_for(predicate, timeout):
                raise AssertionError(
                    f"timed out after {timeout}s; requests: {[r.type for r in self.requests]}"
                )

    def wait_stream(self, n: int, timeout: float = 5.0) -> Stream:
        """The n-th stream (1-based) once it is open."""
        self.wait(lambda: len(self.streams) >= n, timeout)
        return self.streams[n - 1]

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        for stream in self.streams:
            stream.abort()
        with self._cond:
            socks = list(self._socks)
        for sock in socks:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)

    # ----------------------------------------------------------- the server

    def _serve_connection(self, sock: socket.socket) -> None:
        conn = next(self._conn_ids)
        with self._cond:
            self._socks.append(sock)
        rfile = sock.makefile("rb")
        try:
            while True:
                req = self._read_request(conn, rfile)
                if req is None:
                    return
                with self._cond:
                    self.requests.append(req)
                    self._cond.notify_all()
                answer = self.on_subscribe(req) if req.type == "SUBSCRIBE" else self.on_call(req)
                if isinstance(answer, Stream):
                    answer.request = req
                    with self._cond:
                        self.streams.append(answer)
                        self._cond.notify_all()
                    self._stream(sock, answer)
                    return
                for status in answer.interim:
                    sock.sendall(f"HTTP/1.1 {status} Interim\r\n\r\n".encode())
                head = [f"HTTP/1.1 {answer.status} X", f"Content-Length: {len(answer.body)}"]
                head += [f"{k}: {v}" for k, v in answer.headers.items()]
                sock.sendall(("\r\n".join(head) + "\r\n\r\n").encode() + answer.body)
                if req.headers.get("connection", "").lower() == "close":
                    return
        except OSError:
            return
        finally:
            with contextlib.suppress(OSError):
                sock.close()

    @staticmethod
    def _read_request(conn: int, rfile: Any) -> Request | None:
        line = rfile.readline()
        if not line:
            return None
        method, path, _ = line.decode("latin-1").split(" ", 2)
        headers: dict[str, str] = {}
        while (line := rfile.readline()) not in (b"\r\n", b"\n", b""):
            name, _, value = line.decode("latin-1").partition(":")
            headers[name.strip().lower()] = value.strip()
        body = rfile.read(int(headers.get("content-length", "0")))
        return Request(conn, method, path, headers, body, time.monotonic())

    @staticmethod
    def _stream(sock: socket.socket, stream: Stream) -> None:
        head = (
            "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n"
            f"Mesos-Stream-Id: {stream.stream_id}\r\n\r\n"
        )
        try:
            sock.sendall(head.encode())
            stream.last_write = time.monotonic()
            while True:
                try:
                    item = stream._q.get(timeout=0.02)
                except queue.Empty:
                    if _peer_closed(sock):
                        return
                    continue
                if item is _ABORT:
                    with contextlib.suppress(OSError):
                        sock.shutdown(socket.SHUT_RDWR)
                    return
                if item is _END:
                    sock.sendall(b"0\r\n\r\n")
                    return
                assert isinstance(item, bytes)
                sock.sendall(b"%x\r\n%s\r\n" % (len(item), item))
                stream.last_write = time.monotonic()
        except OSError:
            return
        finally:
            stream.closed.set()
