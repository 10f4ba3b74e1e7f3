"""Registries that are slow on purpose, in front of the real one (``tests/registry_server.py``),
for what a real registry cannot be made to do: a huge image on a slow link, a registry that
never answers.

``TrickleProxy(upstream)`` is a threaded HTTP proxy on a loopback port: every request is
forwarded to the registry as it came (one per connection), and the answer comes back as it
is, except the body of a blob larger than ``threshold`` bytes, which trickles at ``rate``
bytes a second (None: at full speed; it may be changed while a pull runs). It counts the
requests for each blob (``blob_gets``; ``trickled``: those that trickled) and how many blob answers are being sent now
(``sending``), so a test can tell one pull from two, and sees when a client went away.

``SilentRegistry()`` accepts connections and never answers a byte.

The engine treats registries on 127.0.0.0/8 as insecure-allowed: it pulls from either over
plain HTTP without being configured.
"""

from __future__ import annotations

import contextlib
import http.client
import socket
import threading
import time
from collections import Counter
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

CHUNK = 512  # bytes sent at a time while trickling


class TrickleProxy:
    def __init__(self, upstream: str, rate: float | None = 2048.0, threshold: int = 65536) -> None:
        self.upstream = upstream
        self.rate = rate
        self.threshold = threshold
        self.blob_gets: Counter[str] = Counter()  # digest -> GETs of that blob
        self.trickled: Counter[str] = Counter()  # digest -> its GETs that trickled
        self.sending = 0  # blob answers being trickled now
        self.sent = 0  # blob bytes trickled so far
        self._lock = threading.Lock()
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: object) -> None:
                pass

            def do_GET(self) -> None:
                proxy._forward(self)

            def do_HEAD(self) -> None:
                proxy._forward(self)

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, name="trickle-proxy", daemon=True)
        self._thread.start()

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self._server.server_address[1]}"

    def _forward(self, request: BaseHTTPRequestHandler) -> None:
        host, port = self.upstream.rsplit(":", 1)
        upstream = http.client.HTTPConnection(host, int(port), timeout=60)
        try:
            upstream.putrequest(request.command, request.path, skip_host=True, skip_accept_encoding=True)
            upstream.putheader("Host", self.upstream)
            for key, value in request.headers.items():  # each as it came (Accept comes several times)
                if key.lower() not in ("host", "connection"):
                    upstream.putheader(key, value)
            upstream.endheaders()
            answer = upstream.getresponse()
            blob = request.command == "GET" and "/blobs/" in request.path
            if blob:
                with self._lock:
                    self.blob_gets[request.path.rsplit("/", 1)[-1]] += 1
            request.send_response_only(answer.status, answer.reason)
            for key, value in answer.getheaders():
                if key.lower() not in ("connection", "transfer-encoding"):
                    request.send_header(key, value)
            request.send_header("Connection", "close")
            request.end_headers()
            if request.command == "HEAD":
                return
            length = int(answer.getheader("Content-Length") or 0)
            if blob and length > self.threshold:
                with self._lock:
                    self.trickled[request.path.rsplit("/", 1)[-1]] += 1
                self._trickle(answer, request)
            else:
                request.wfile.write(answer.read())
        except OSError:
            pass  # the client went away (a pull cancelled)
        finally:
            upstream.close()
            request.close_connection = True

    def _trickle(self, answer: http.client.HTTPResponse, request: BaseHTTPRequestHandler) -> None:
        with self._lock:
            self.sending += 1
        try:
            while True:
                chunk = answer.read(CHUNK)
                if not chunk:
                    return
                request.wfile.write(chunk)
                request.wfile.flush()
                with self._lock:
                    self.sent += len(chunk)
                rate = self.rate
                if rate is not None:
                    time.sleep(len(chunk) / rate)
        finally:
            with self._lock:
                self.sending -= 1

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()

    def __enter__(self) -> TrickleProxy:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class SilentRegistry:
    """Accepts every connection and never answers; ``accepted`` counts them."""

    def __init__(self) -> None:
        self.accepted = 0
        self._held: list[socket.socket] = []
        self._server = socket.socket()
        self._server.bind(("127.0.0.1", 0))
        self._server.listen(64)
        self._closed = False
        threading.Thread(target=self._accept, name="silent-registry", daemon=True).start()

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self._server.getsockname()[1]}"

    def _accept(self) -> None:
        while not self._closed:
            try:
                conn, _ = self._server.accept()
            except OSError:
                return
            self.accepted += 1
            self._held.append(conn)

    def close(self) -> None:
        self._closed = True
        with contextlib.suppress(OSError):
            self._server.shutdown(socket.SHUT_RDWR)
        self._server.close()
        for conn in self._held:
            conn.close()

    def __enter__(self) -> SilentRegistry:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
