"""The daemon's HTTP endpoints, on 127.0.0.1 unless configured:

- ``GET /`` — the status page (``page.py``), also the Mesos framework's ``webui_url``;
- ``GET /jobs/<name>/logs?task=ROLE:INDEX&offset=N`` — a page of a task's output, read-only;
- ``GET /healthz`` — 200 while passes run on time, 503 when the last pass is overdue or the
  source cannot be read (JSON body says which);
- ``GET /metrics`` — Prometheus text format;
- ``GET /jobs`` — every job's status document, as JSON;
- ``POST /sync`` — fetch the source now and run a pass (202); requests that arrive while one
  is pending, or sooner than a second after the last fetch, are coalesced into it.

Every request first passes ``httpguard`` (Host, Origin, token, size). The server is bounded:
``WORKERS`` threads serve requests, at most ``MAX_CONNECTIONS`` are accepted at once (others
are closed at once), and a connection that sends nothing for ``TIMEOUT_S`` is closed. The
standard library's server does this with a thread pool in ``process_request``; a WSGI server
would bring the same bounds with more moving parts.
"""

from __future__ import annotations

import json
import logging
import sys
import threading
from concurrent.futures import ThreadPoolExecutor
from http.server import BaseHTTPRequestHandler, HTTPServer
from typing import Any, Protocol
from urllib.parse import parse_qs, unquote, urlsplit

from tfdeclare.backends.base import BackendError, LogChunk
from tfdeclare.daemon import page
from tfdeclare.daemon.httpguard import AccessPolicy, refusal
from tfdeclare.daemon.metrics import CONTENT_TYPE as METRICS_CONTENT_TYPE

log = logging.getLogger("tfdeclare.daemon")


class Endpoints(Protocol):
    """What the server asks the daemon; implemented by ``service.Daemon``."""

    def health(self) -> tuple[bool, dict[str, Any]]: ...

    def metrics_text(self) -> str: ...

    def jobs(self) -> list[dict[str, Any]]: ...

    def request_sync(self) -> bool: ...

    def page_html(self, refresh: int | None) -> str: ...

    def task_log(self, name: str, task: str | None, offset: int) -> LogChunk: ...


WORKERS = 8
MAX_CONNECTIONS = 64
TIMEOUT_S = 5.0


class _Server(HTTPServer):
    """Requests served by a fixed pool of threads, connections bounded and timed out."""

    request_queue_size = 128  # the listen backlog: a burst is accepted (and turned away) at once

    def __init__(self, address: tuple[str, int], handler: type[BaseHTTPRequestHandler]) -> None:
        super().__init__(address, handler)
        self.pool = ThreadPoolExecutor(WORKERS, thread_name_prefix="daemon-http")
        self.slots = threading.BoundedSemaphore(MAX_CONNECTIONS)
        self.turned_away = 0  # connections closed unserved: over MAX_CONNECTIONS

    def process_request(self, request: Any, client_address: Any) -> None:
        if not self.slots.acquire(blocking=False):
            self.turned_away += 1
            self.shutdown_request(request)
            return
        self.pool.submit(self._serve, request, client_address)

    def _serve(self, request: Any, client_address: Any) -> None:
        try:
            self.finish_request(request, client_address)
        except Exception:
            self.handle_error(request, client_address)
        finally:
            self.shutdown_request(request)
            self.slots.release()

    def server_close(self) -> None:
        super().server_close()
        self.pool.shutdown(wait=False, cancel_futures=True)

    def handle_error(self, request: Any, client_address: Any) -> None:
        """A client that hangs up early is no error of ours: no traceback in the log."""
        if isinstance(sys.exc_info()[1], ConnectionError):  # BrokenPipe, ConnectionReset, ...
            return
        log.exception("HTTP request from %s failed", client_address[0] if client_address else "?")


class DaemonServer:
    def __init__(
        self, host: str, port: int, endpoints: Endpoints, access: AccessPolicy | None = None
    ) -> None:
        handler = _handler_for(endpoints, access or AccessPolicy(frozenset()))
        self.httpd = _Server((host, port), handler)
        self.thread = threading.Thread(target=self.httpd.serve_forever, name="daemon-http", daemon=True)

    @property
    def address(self) -> tuple[str, int]:
        host, port = self.httpd.server_address[:2]
        return str(host), int(port)

    def start(self) -> None:
        self.thread.start()

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


def _handler_for(endpoints: Endpoints, access: AccessPolicy) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        server_version = "tfdeclare"
        timeout = TIMEOUT_S  # the socket's: a silent or slow client is dropped

        def _refused(self, method: str) -> bool:
            headers = {k.lower(): v for k, v in self.headers.items()}
            address: Any = self.server.server_address
            answer = refusal(method, self.path.split("?", 1)[0], headers, int(address[1]), access)
            if answer is None:
                return False
            self.close_connection = True
            self._json(answer.code, {"error": answer.reason})
            return True

        def log_message(self, format: str, *args: Any) -> None:
            return  # requests are not worth a log line each

        def _send(self, code: int, body: bytes, content_type: str, **headers: str) -> None:
            self.send_response(code)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(body)))
            for name, value in headers.items():
                self.send_header(name.replace("_", "-"), value)
            self.end_headers()
            self.wfile.write(body)

        def _json(self, code: int, data: Any) -> None:
            self._send(code, (json.dumps(data, indent=1) + "\n").encode(), "application/json")

        def _log(self, path: str, query: dict[str, list[str]]) -> None:
            name = unquote(path.removeprefix("/jobs/").removesuffix("/logs"))
            offset = query.get("offset", ["0"])[0]
            if not offset.isdigit():
                self._json(400, {"error": "offset is a byte count"})
                return
            try:
                chunk = endpoints.task_log(name, query.get("task", [None])[0], int(offset))
            except LookupError as err:
                self._json(404, {"error": str(err.args[0])})
                return
            except BackendError as err:
                self._json(502, {"error": str(err)})
                return
            self._send(
                200,
                chunk.data,
                "text/plain; charset=utf-8",
                X_Content_Type_Options="nosniff",
                X_Tfdeclare_Next_Offset=str(chunk.next_offset),
                X_Tfdeclare_Complete="true" if chunk.complete else "false",
            )

        def do_GET(self) -> None:
            if self._refused("GET"):
                return
            url = urlsplit(self.path)
            path, query = url.path, parse_qs(url.query)
            if path == "/":
                self._send(
                    200,
                    endpoints.page_html(page.refresh_from(query)).encode(),
                    "text/html; charset=utf-8",
                    Content_Security_Policy=page.CONTENT_SECURITY_POLICY,
                    X_Content_Type_Options="nosniff",
                    Cache_Control="no-store",
                )
            elif path.startswith("/jobs/") and path.endswith("/logs"):
                self._log(path, query)
            elif path == "/healthz":
                healthy, detail = endpoints.health()
                self._json(200 if healthy else 503, detail)
            elif path == "/metrics":
                self._send(200, endpoints.metrics_text().encode(), METRICS_CONTENT_TYPE)
            elif path == "/jobs":
                self._json(200, endpoints.jobs())
            else:
                self._json(404, {"error": f"no such endpoint {path}"})

        def do_POST(self) -> None:
            if self._refused("POST"):
                return
            if self.path.split("?", 1)[0] == "/sync":
                self._json(202, {"sync": "requested" if endpoints.request_sync() else "coalesced"})
            else:
                self._json(404, {"error": f"no such endpoint {self.path}"})

    return Handler
