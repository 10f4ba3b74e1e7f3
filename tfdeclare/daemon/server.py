"""The daemon's HTTP endpoints, on 127.0.0.1 unless configured:

- ``GET /`` — the status page (``page.py``), also the Mesos framework's ``webui_url``;
  ``?refresh=SECONDS`` (0: off) sets how often it reloads, remembered in a cookie;
- ``GET /jobs/<name>/logs?task=ROLE-INDEX&offset=N`` — a page of a task's output, read-only
  (``&stream=stdout`` or ``stderr``: one alone, as it grows, where the backend reads them apart);
- ``GET /healthz`` (readiness) — 200 ``ok`` while passes run on time; 503 with ``status``
  ``starting`` until the first pass has ended (as long as that is not overdue), ``degraded``
  when a pass is overdue, the source cannot be read, the state or status folder cannot take
  a write, the backend cannot reach its cluster or a job runs under another state folder (the
  JSON body says which: ``reasons``, the page's alerts too: ``alerts.HealthReason``); its
  ``problems`` list the standing source problems (a user's bad file is no reason for 503;
  with ``daemon.tokenForReads`` and no token, only their kinds);
- ``GET /livez`` (liveness) — 200 unless a pass is overdue (a hang: 503), so a probe tells
  a slow start or an unreadable source, which a restart would not fix, from a hang;
- ``GET /metrics`` — Prometheus text format;
- ``GET /jobs`` — every job's status document, as a JSON list (at most ``JOBS_TASKS`` tasks
  over all of them: ``service.Daemon.jobs``; each with ``problems``: the standing source
  problems that hold it back); ``?problems=true`` answers an object instead,
  ``{"jobs": [...], "problems": [...], "problemsOmitted": N}``, with every standing problem
  listed (a new file that cannot be applied holds back no job yet; at most 200, N more);
- ``GET /jobs/<name>?tasksOffset=I&tasksLimit=N`` — one job's status document with its tasks
  from the I-th (default 0), at most N (default 1000, at most ``MAX_TASKS_PAGE``), as JSON;
- ``POST /sync`` — fetch the source now and run a pass (202); requests that arrive while one
  is pending, or sooner than a second after the last fetch, are coalesced into it. With a
  webhook secret, a git host's delivery is judged by ``webhook_auth`` (signature first) and
  syncs only when it is a push to the watched branch.

A known path asked with another method is 405 with an ``Allow`` header (``ALLOWED``); an
unknown one is 404.

Every request first passes ``httpguard`` (Host, Origin, token, size). A numeric query
parameter that is not a plain decimal number in its range (``offset`` from 0 to 2^63-1 and
within the log, ``refresh`` 0 or 2 to 3600, ``jobsOffset`` and ``tasksOffset`` from 0,
``tasksLimit`` from 0 to ``MAX_TASKS_PAGE``) is answered 400, like any malformed request.

**Bounds.** One thread (``daemon-http``) runs an asyncio event loop that accepts connections
and reads each request whole: request line, headers (at most ``MAX_HEADER_BYTES``) and body
(at most ``httpguard.body_limit``: 1 KiB, or ``daemon.webhookMaxBodyBytes`` for a delivery,
of which at most ``MAX_LARGE_READS`` are read at once, else 503) must all arrive within the request deadline
(``REQUEST_DEADLINE_S`` unless the server is made with another) of the connection's first
byte however slowly they trickle, else 408 and the connection is closed (a client that sends
nothing is closed after the same time). Only a complete request goes to one of ``WORKERS``
threads, which runs the endpoint on it in memory; the answer is written by the loop, which
gives a slow reader the response deadline (``RESPONSE_DEADLINE_S``; then the connection is
dropped, unsent bytes and all). So a slow client holds a file descriptor, never a worker.
The deadlines are parameters so that the tests can wait for them in a fraction of a second;
the daemon uses the defaults. At most ``MAX_CONNECTIONS`` connections are open; when all are,
a new one closes the connection that has been sending its request the longest (a trickling
client cannot keep others out), or is refused at once when every one is being answered.
Each connection carries one request (HTTP/1.0 semantics, ``Connection: close``).
"""

from __future__ import annotations

import asyncio
import errno
import io
import json
import logging
import socket
import threading
from concurrent.futures import ThreadPoolExecutor
from http.client import HTTPException, parse_headers
from http.server import BaseHTTPRequestHandler
from typing import Any, Protocol
from urllib.parse import parse_qs, unquote, urlsplit

from tfdeclare.backends.base import STREAMS, BackendError, LogChunk, LogOffsetError
from tfdeclare.core.spec.names import is_job_name
from tfdeclare.daemon import page
from tfdeclare.daemon.httpguard import (
    INT64_MAX,
    MAX_BODY,
    SYNC_PATH,
    AccessPolicy,
    BadRequest,
    body_limit,
    is_webhook_delivery,
    number,
    refusal,
)
from tfdeclare.daemon.metrics import CONTENT_TYPE as METRICS_CONTENT_TYPE
from tfdeclare.daemon.webhook_auth import Outcome, judge

log = logging.getLogger("tfdeclare.daemon")


class Endpoints(Protocol):
    """What the server asks the daemon; implemented by ``service.Daemon``."""

    def health(self) -> tuple[bool, dict[str, Any]]: ...

    def metrics_text(self) -> str: ...

    def jobs(self) -> list[dict[str, Any]]: ...

    def problem_list(self) -> list[dict[str, Any]]: ...

    def problems_omitted(self) -> int: ...

    def jobs_json(self) -> str: ...

    def job(self, name: str, offset: int, limit: int | None) -> dict[str, Any] | None: ...

    def request_sync(self) -> bool: ...

    def page_html(self, refresh: int, jobs_offset: int = 0) -> str: ...

    def task_log(self, name: str, task: str | None, offset: int, stream: str | None = None) -> LogChunk: ...


WORKERS = 8
MAX_CONNECTIONS = 256
REQUEST_DEADLINE_S = 5.0  # the whole request, from its first byte (or the connection) to its last
RESPONSE_DEADLINE_S = 30.0  # writing the answer to a slow reader
MAX_HEADER_BYTES = 16 * 1024  # request line and headers together; more is 431
MAX_HEADERS = 100
MAX_QUERY_FIELDS = 20
MAX_TASKS_PAGE = 10_000  # tasks one /jobs/<name> answer lists at most
BACKLOG = 128  # a burst is accepted (and sorted out) at once
MAX_LARGE_READS = 8  # bodies over MAX_BODY (webhook deliveries) being read at once; more: 503
# The methods each known path answers; another method is 405 with an Allow header.
ALLOWED = {
    "/": "GET",
    "/healthz": "GET",
    "/livez": "GET",
    "/metrics": "GET",
    "/jobs": "GET",
    SYNC_PATH: "POST",
}


def allowed_methods(path: str) -> str | None:
    """The methods ``path`` answers (None: no such endpoint)."""
    if path.startswith("/jobs/") and path.endswith("/logs"):
        return "GET"
    return ALLOWED.get(path)


class ListenError(Exception):
    """The endpoints cannot listen where configured (the message is one line for a person)."""


def listen(host: str, port: int) -> socket.socket:
    """A listening socket on ``host:port``, or ``ListenError`` saying what to change."""
    where = f"{'[' + host + ']' if ':' in host else host or '0.0.0.0'}:{port}"  # noqa: S104
    change = "choose another with --port or daemon.port in the config (0: any free port)"
    if not 0 <= port <= 65535:
        raise ListenError(f"cannot listen on port {port}: ports are 0 to 65535; {change}")
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    try:
        return socket.create_server((host, port), family=family, backlog=BACKLOG)
    except socket.gaierror as err:
        raise ListenError(
            f"cannot listen on {where}: no such address ({err.strerror}); "
            "change --host or daemon.host in the config"
        ) from None
    except OSError as err:
        if err.errno == errno.EADDRINUSE:
            why = f"the address is already in use (another tfdeclare daemon or another program); {change}"
        elif err.errno == errno.EADDRNOTAVAIL:
            why = "no interface of this machine has that address; change --host or daemon.host in the config"
        elif err.errno == errno.EACCES:
            why = f"permission denied (ports below 1024 need privileges); {change}"
        else:
            why = f"{err.strerror}; change --host/--port or daemon.host/daemon.port in the config"
        raise ListenError(f"cannot listen on {where}: {why}") from None


def _response(code: int, reason: str, body: dict[str, Any]) -> bytes:
    data = (json.dumps(body) + "\n").encode()
    head = (
        f"HTTP/1.0 {code} {reason}\r\nServer: tfdeclare\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(data)}\r\nConnection: close\r\n\r\n"
    )
    return head.encode("ascii") + data


class DaemonServer:
    """The endpoints on ``host:port``. The socket is bound at construction (``ListenError``
    when it cannot be: nothing else has started then); ``start`` serves ``endpoints`` (given
    here or there) until ``close``. ``request_deadline_s`` and ``response_deadline_s`` bound
    a request's arrival and its answer's departure (module docstring)."""

    def __init__(
        self,
        host: str,
        port: int,
        endpoints: Endpoints | None = None,
        access: AccessPolicy | None = None,
        *,
        request_deadline_s: float = REQUEST_DEADLINE_S,
        response_deadline_s: float = RESPONSE_DEADLINE_S,
    ) -> None:
        self._socket = listen(host, port)
        self._request_deadline_s = request_deadline_s
        self._response_deadline_s = response_deadline_s
        bound = self._socket.getsockname()
        self._address = (str(bound[0]), int(bound[1]))
        self._endpoints = endpoints
        self._access = access or AccessPolicy(frozenset())
        self._pool = ThreadPoolExecutor(WORKERS, thread_name_prefix="daemon-http-worker")
        self._handler: type[_Handler] | None = None
        self._thread: threading.Thread | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stopping: asyncio.Event | None = None
        self._ready = threading.Event()
        self._closing = False
        self._listening = False
        # Each open connection's task and writer. A connection is closed by aborting its
        # transport, never by cancelling its task (Python 3.11's start_server logs a cancelled
        # one as an error, with a traceback).
        self._reading: dict[asyncio.Task[None], asyncio.StreamWriter] = {}  # oldest first
        self._serving: dict[asyncio.Task[None], asyncio.StreamWriter] = {}  # being answered
        self.turned_away = 0  # refused at once: every connection was being answered
        self.evicted = 0  # closed to make room: the one sending its request the longest
        self.timed_out = 0  # their request was not complete within the request deadline
        self._large_reads = 0  # bodies over MAX_BODY being read now (the loop's own count)

    @property
    def address(self) -> tuple[str, int]:
        return self._address

    def open_connections(self) -> int:
        """Connections open now (being read or answered)."""
        return len(self._reading) + len(self._serving)

    def start(self, endpoints: Endpoints | None = None) -> None:
        if endpoints is not None:
            self._endpoints = endpoints
        if self._endpoints is None:
            raise ValueError("DaemonServer.start: no endpoints to serve")
        self._handler = _handler_for(self._endpoints, self._access, self.address[1])
        self._thread = threading.Thread(target=self._run, name="daemon-http", daemon=True)
        self._thread.start()
        self._ready.wait()
        if not self._listening:
            raise RuntimeError("the HTTP server's loop ended at once (see the error above)")

    def close(self) -> None:
        """Stop serving: the connections are closed, the threads end, the port is free."""
        if self._thread is not None and self._loop is not None and self._stopping is not None:
            self._loop.call_soon_threadsafe(self._stopping.set)
            self._thread.join()
            self._thread = None
        self._socket.close()
        self._pool.shutdown(wait=True, cancel_futures=True)

    # ---- the loop thread ------------------------------------------------------------------

    def _run(self) -> None:
        try:
            asyncio.run(self._main())
        finally:
            self._ready.set()  # start() waits for this, also when the loop could not start

    async def _main(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._stopping = asyncio.Event()
        server = await asyncio.start_server(self._connection, sock=self._socket, limit=MAX_HEADER_BYTES)
        self._listening = True
        self._ready.set()
        try:
            await self._stopping.wait()
        finally:
            self._closing = True  # a connection whose task has not started yet closes at once
            server.close()
            for writer in [*self._reading.values(), *self._serving.values()]:
                writer.transport.abort()
            # connections accepted meanwhile start their tasks later: until none is left
            while others := asyncio.all_tasks() - {asyncio.current_task()}:
                await asyncio.gather(*others, return_exceptions=True)
            await server.wait_closed()

    async def _connection(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        if self._closing:
            writer.transport.abort()
            return
        if len(self._reading) + len(self._serving) >= MAX_CONNECTIONS:
            if not self._reading:
                self.turned_away += 1
                writer.transport.abort()
                return
            oldest = next(iter(self._reading))
            self._reading.pop(oldest).transport.abort()  # its read ends: the task ends
            self.evicted += 1
        self._reading[task] = writer
        closed = False
        try:
            raw = await self._read_request(reader, writer)
            self._serving[task] = self._reading.pop(task, writer)  # no longer to be evicted
            if raw is not None:
                peer = writer.get_extra_info("peername") or ("?", 0)
                answer = await asyncio.get_running_loop().run_in_executor(self._pool, self._answer, raw, peer)
                writer.write(answer)
            async with asyncio.timeout(self._response_deadline_s):  # the answer (or a 408) gets out
                writer.close()
                await writer.wait_closed()
                closed = True
        except (OSError, TimeoutError):
            pass  # the client hung up, or reads too slowly: no error of ours
        except Exception:  # a bug: logged here, as nothing else would
            log.exception("HTTP connection failed")
        finally:
            if not closed:  # whatever is still unsent goes: nothing is held once not counted
                writer.transport.abort()
            self._reading.pop(task, None)
            self._serving.pop(task, None)

    async def _read_request(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> bytes | None:
        """The whole request within the deadline; None when it was answered (408, 431) or the
        client went away."""
        received = bytearray()
        try:
            async with asyncio.timeout(self._request_deadline_s):
                if not await _read_head(reader, received):
                    return None  # closed before a whole request
                method, path, headers = _head(bytes(received))
                length = _content_length(headers)
                if 0 < length <= MAX_BODY:
                    received += await reader.readexactly(length)
                elif MAX_BODY < length <= body_limit(method, path, headers, self._access):
                    if self._large_reads >= MAX_LARGE_READS:
                        busy = {"error": "too many large requests at once; try again"}
                        writer.write(_response(503, "Service Unavailable", busy))
                        return None
                    self._large_reads += 1
                    try:
                        received += await reader.readexactly(length)
                    finally:
                        self._large_reads -= 1
                # larger ones are refused (413) unread
        except TimeoutError:
            self.timed_out += 1
            if received:
                writer.write(_response(408, "Request Timeout", {"error": "the request took too long"}))
            return None
        except ValueError:  # a line over the reader's limit, or too many of them
            writer.write(_response(431, "Request Header Fields Too Large", {"error": "headers too large"}))
            return None
        except asyncio.IncompleteReadError:
            return None
        return bytes(received)

    # ---- a worker thread ------------------------------------------------------------------

    def _answer(self, raw: bytes, peer: tuple[Any, ...]) -> bytes:
        """Runs the endpoint on one complete request; the answer's bytes."""
        assert self._handler is not None
        try:
            handler = self._handler(raw, peer, self)  # type: ignore[arg-type]
        except Exception:
            log.exception("HTTP request from %s failed", peer[0] if peer else "?")
            return _response(500, "Internal Server Error", {"error": "internal error (a bug; see the log)"})
        return handler.answer()


async def _read_head(reader: asyncio.StreamReader, received: bytearray) -> bool:
    """Reads the request line and headers, up to the empty line, into ``received``; False
    when the client closed first. ``ValueError`` past ``MAX_HEADER_BYTES``/``MAX_HEADERS``."""
    while True:
        line = await reader.readline()
        if not line:
            return False
        if not received and line in (b"\r\n", b"\n"):
            continue  # empty lines before the request line are tolerated (RFC 9112 2.2)
        received += line
        if len(received) > MAX_HEADER_BYTES or received.count(b"\n") > MAX_HEADERS + 2:
            raise ValueError("request head too large")
        if line in (b"\r\n", b"\n"):
            return True


def _head(head: bytes) -> tuple[str, str, dict[str, str]]:
    """A request head's method, path (without the query) and headers (lower-case names; empty
    when they cannot be parsed: the handler answers that)."""
    line, _, rest = head.partition(b"\n")
    parts = line.decode("latin-1").split()
    method, target = (parts[0], parts[1]) if len(parts) >= 2 else ("", "")
    try:
        headers = parse_headers(io.BytesIO(rest))
    except HTTPException:
        return method, "", {}
    return method, target.split("?", 1)[0], {k.lower(): v for k, v in headers.items()}


def _content_length(headers: dict[str, str]) -> int:
    """The Content-Length of a request (0 when absent or not a small number)."""
    value = (headers.get("content-length") or "0").strip()
    return int(value) if value.isascii() and value.isdigit() and len(value) <= 10 else 0


def _handler_for(endpoints: Endpoints, access: AccessPolicy, port: int) -> type[_Handler]:
    handler = type("Handler", (_Handler,), {"endpoints": endpoints, "access": access, "port": port})
    return handler


class _Handler(BaseHTTPRequestHandler):
    """One request, read from memory (``raw``), answered into memory (``answer``)."""

    endpoints: Endpoints
    access: AccessPolicy
    port: int
    server_version = "tfdeclare"

    def setup(self) -> None:
        self.rfile = io.BytesIO(self.request)
        self.wfile = io.BytesIO()

    def handle(self) -> None:
        self.handle_one_request()

    def finish(self) -> None:
        return

    def answer(self) -> bytes:
        return self.wfile.getvalue()  # type: ignore[attr-defined, no-any-return]

    def log_message(self, format: str, *args: Any) -> None:
        return  # requests are not worth a log line each

    def _refused(self, method: str) -> bool:
        headers = {k.lower(): v for k, v in self.headers.items()}
        answer = refusal(method, self.path.split("?", 1)[0], headers, self.port, self.access)
        if answer is None:
            return False
        self._json(answer.code, {"error": answer.reason})
        return True

    def _send(self, code: int, body: bytes, content_type: str, **headers: str) -> None:
        self.send_response(code)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Connection", "close")
        for name, value in headers.items():
            self.send_header(name.replace("_", "-"), value)
        self.end_headers()
        self.wfile.write(body)

    def _json(self, code: int, data: Any, **headers: str) -> None:
        self._send(code, (json.dumps(data, indent=1) + "\n").encode(), "application/json", **headers)

    def _query(self) -> tuple[str, dict[str, list[str]]]:
        url = urlsplit(self.path)
        try:
            query = parse_qs(url.query, keep_blank_values=True, max_num_fields=MAX_QUERY_FIELDS)
        except ValueError:
            raise BadRequest(f"at most {MAX_QUERY_FIELDS} query parameters") from None
        return url.path, query

    def _log(self, path: str, query: dict[str, list[str]]) -> None:
        name = unquote(path.removeprefix("/jobs/").removesuffix("/logs"))
        offset = number(query, "offset", 0, 0, INT64_MAX)
        tasks = query.get("task")
        if tasks is not None and len(tasks) > 1:
            raise BadRequest(f"task is given {len(tasks)} times")
        streams = query.get("stream")
        if streams is not None and (len(streams) > 1 or streams[0] not in STREAMS):
            raise BadRequest(f"stream is given once, {' or '.join(STREAMS)}")
        try:
            chunk = self.endpoints.task_log(
                name, tasks[0] if tasks else None, offset, streams[0] if streams else None
            )
        except LookupError as err:
            self._json(404, {"error": str(err.args[0])})
            return
        except LogOffsetError as err:
            raise BadRequest(str(err)) from None
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

    def _page(self, query: dict[str, list[str]]) -> None:
        chosen = page.refresh_from(query)  # BadRequest for a bad value
        refresh = chosen if chosen is not None else page.refresh_from_cookie(self.headers.get("Cookie"))
        headers = {
            "Content_Security_Policy": page.CONTENT_SECURITY_POLICY,
            "X_Content_Type_Options": "nosniff",
            "Cache_Control": "no-store",
        }
        if chosen is not None:  # remembered for the next visit without ?refresh
            headers["Set_Cookie"] = page.refresh_cookie(chosen)
        offset = number(query, "jobsOffset", 0, 0, INT64_MAX)
        html = self.endpoints.page_html(refresh, offset) if offset else self.endpoints.page_html(refresh)
        self._send(200, html.encode(), "text/html; charset=utf-8", **headers)

    def _job(self, path: str, query: dict[str, list[str]]) -> None:
        name = unquote(path.removeprefix("/jobs/"))
        offset = number(query, "tasksOffset", 0, 0, INT64_MAX)
        limit = number(query, "tasksLimit", -1, 0, MAX_TASKS_PAGE) if "tasksLimit" in query else None
        document = self.endpoints.job(name, offset, limit) if is_job_name(name) else None
        if document is None:
            self._json(404, {"error": f"no job named {name!r}"})
        else:
            self._send(200, (json.dumps(document) + "\n").encode(), "application/json")

    def _guarded_health(self, detail: dict[str, Any]) -> dict[str, Any]:
        """``/healthz`` stays open for probes with ``daemon.tokenForReads``: without the token
        its problems say their kind only, the last pass's errors their code (their files, jobs
        and errors are for those who may read)."""
        if not self.access.token_for_reads or not (detail.get("problems") or detail.get("passErrors")):
            return detail
        headers = {k.lower(): v for k, v in self.headers.items()}
        if refusal("GET", "/jobs", headers, self.port, self.access) is None:
            return detail
        shown = {**detail, "problems": [{"kind": p["kind"]} for p in detail.get("problems", ())]}
        if "passErrors" in detail:
            shown["passErrors"] = [
                {"code": e["code"], "terminal": e["terminal"]} for e in detail["passErrors"]
            ]
            # a reason that is a pass error ("MasterUnreachable: ...") says its code only
            codes = {f"{e['code']}: " for e in detail["passErrors"]}
            shown["reasons"] = [
                next((c[:-2] for c in codes if r.startswith(c)), r) for r in detail.get("reasons", ())
            ]
        return shown

    def _jobs(self, query: dict[str, list[str]]) -> None:
        asked = query.get("problems")
        if asked is not None and asked not in (["true"], ["false"]):
            raise BadRequest("problems must be true or false")
        if asked == ["true"]:
            listed = {"jobs": self.endpoints.jobs(), "problems": self.endpoints.problem_list()}
            self._json(200, {**listed, "problemsOmitted": self.endpoints.problems_omitted()})
        else:  # joined from each document's own JSON text (10,000 jobs)
            self._send(200, (self.endpoints.jobs_json() + "\n").encode(), "application/json")

    def do_GET(self) -> None:
        if self._refused("GET"):
            return
        try:
            path, query = self._query()
            if path == "/":
                self._page(query)
            elif path.startswith("/jobs/") and path.endswith("/logs"):
                self._log(path, query)
            elif path.startswith("/jobs/"):
                self._job(path, query)
            elif path == "/healthz":
                healthy, detail = self.endpoints.health()
                self._json(200 if healthy else 503, self._guarded_health(detail))
            elif path == "/livez":  # a hang, not a slow start or an unreadable source
                _, detail = self.endpoints.health()
                overdue = bool(detail.get("passOverdue"))
                self._json(503 if overdue else 200, {"status": "hung" if overdue else "alive"})
            elif path == "/metrics":
                self._send(200, self.endpoints.metrics_text().encode(), METRICS_CONTENT_TYPE)
            elif path == "/jobs":
                self._jobs(query)
            else:
                self._not_here("GET", path)
        except BadRequest as err:
            self._json(400, {"error": str(err)})

    def do_POST(self) -> None:
        if self._refused("POST"):
            return
        path = self.path.split("?", 1)[0]
        if path == SYNC_PATH:
            self._sync()
        else:
            self._not_here("POST", path)

    def _not_here(self, method: str, path: str) -> None:
        """405 with ``Allow`` for a known path asked with another method, else 404."""
        allowed = allowed_methods(path)
        if allowed is None:
            body: dict[str, str] = {"error": f"no such endpoint {path}"}
            code = 404
        else:
            body = {"error": f"{path} answers {allowed}, not {method}"}
            code = 405
        if method == "HEAD":  # an answer to HEAD has no body
            self.send_response(code)
            self.send_header("Content-Length", "0")
            self.send_header("Connection", "close")
            if allowed is not None:
                self.send_header("Allow", allowed)
            self.end_headers()
        elif allowed is None:
            self._json(code, body)
        else:
            self._json(code, body, Allow=allowed)

    def _other_method(self) -> None:
        if not self._refused(self.command):
            self._not_here(self.command, self.path.split("?", 1)[0])

    do_HEAD = do_PUT = do_PATCH = do_DELETE = do_OPTIONS = _other_method

    def _sync(self) -> None:
        headers = {k.lower(): v for k, v in self.headers.items()}
        if not is_webhook_delivery("POST", SYNC_PATH, headers, self.access):
            self._json(202, {"sync": "requested" if self.endpoints.request_sync() else "coalesced"})
            return
        assert self.access.webhook is not None
        length = int(headers.get("content-length", "0").strip() or "0")  # refusal() checked it
        verdict = judge(headers, self.rfile.read(length), self.access.webhook)
        sync = None
        if verdict.outcome is Outcome.SYNC:
            sync = "requested" if self.endpoints.request_sync() else "coalesced"
        peer = self.client_address[0] if self.client_address else "?"
        level = logging.WARNING if verdict.outcome is Outcome.REFUSED else logging.INFO
        log.log(
            level,
            "webhook from %s (%s %s, delivery %s): %s: %s",
            peer,
            verdict.host or "unknown host",
            verdict.event or "no event",
            verdict.delivery or "-",
            verdict.outcome,
            verdict.reason,
        )
        self._json(verdict.code, verdict.answer(sync))
