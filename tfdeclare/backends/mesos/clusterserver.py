"""The framework's cluster server: each fetched job generation's cluster, over HTTP.

Started by ``clusterwire`` in the process that runs the Mesos backend (``apply``, the
background controller after it, or the daemon, which serves for as long as it runs), on
``mesos.clusterServer.listen`` (the loopback address unless configured). One read-only route,
``GET /TOKEN`` (and ``GET /v1/cluster?token=TOKEN``, the form tasks launched by earlier
versions carry, with the same tokens), answers the document of the task the token names
(``tfdeclare.core.run.clusterdoc.document``, as JSON) after its MAC. Each job generation has a
random secret, its tasks tokens and keys derived from it, and every answer is signed with the
task's key (``clustergen``), so an answer from anyone else is refused by the bootstrap. The
secrets are kept in this process's memory and handed to the next one through a file of mode
0600 (below), never logged nor shown in any status. Registering a new generation of a job
forgets the old one's, so a stale token, like a wrong one, gets 403; every other path 404; a
malformed query of the earlier form 400; any method but GET 501.

Bounded: at most ``MAX_ANSWERING`` requests are answered at once (the others get 503 and
retry), each connection is dropped after ``REQUEST_TIMEOUT_S`` of silence, request targets
longer than ``MAX_TARGET`` get 414, and the server reads no request body. Tokens are looked up
by their SHA-256, never compared byte by byte with the request's. The token travels in the
path (not a header) to keep the bootstrap and its URL short; the server logs no request target, and the
bootstrap bypasses proxies. What an observer of the network learns is a job's addresses
(which the Mesos master shows anyway) and a token it can replay for the same answer.

The server also counts which launched tasks have fetched their document, so that ``apply``
can wait for them before it returns (``wait_fetched``), tells the backend's loop of each
answer (``Fetched``: a task that has its cluster runs its own program, whose exit 86 is then
its own, not the bootstrap's failed fetch), and hands its generations over to the
next framework process (``saved``/``restore``: ``clusterwire`` keeps them in the state folder).
"""

from __future__ import annotations

import contextlib
import json
import logging
import re
import secrets
import socket
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit

from tfdeclare.backends.mesos.clustergen import (
    SECRET_MIN_CHARS,
    Generation,
    credentials,
    signed,
    token_digest,
)
from tfdeclare.backends.mesos.config import ClusterServerConfig
from tfdeclare.core.enums import ClusterSpecStyle, Role
from tfdeclare.core.run.clusterdoc import Documents
from tfdeclare.core.run.tasks import ClusterSource, TaskKey

log = logging.getLogger("tfdeclare.mesos")

ROUTE = "/v1/cluster"  # the first form, GET /v1/cluster?token=TOKEN: tasks launched before still use it
_TOKEN_PATH = re.compile(r"/[A-Za-z0-9_-]{1,64}")  # the form tasks are given: GET /TOKEN
MAX_TARGET = 2048
MAX_ANSWERING = 32
REQUEST_TIMEOUT_S = 10.0
WAIT_STEP_S = 0.5
_WILDCARDS = ("0.0.0.0", "::")  # noqa: S104 (recognised, not bound)


def split_host_port(text: str) -> tuple[str, int]:
    """``HOST:PORT`` or ``[V6]:PORT`` (the schema checked the shape)."""
    host, _, port = text.rpartition(":")
    return host.strip("[]"), int(port)


def join_host_port(host: str, port: int) -> str:
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def _error(message: str) -> bytes:
    return json.dumps({"error": message}).encode()


@dataclass(frozen=True, slots=True)
class Fetched:
    """The server answered the token of ``job``'s task in slot ``key`` (``task_id``: the task
    registered for it by this process; None for a generation an earlier process served)."""

    job: str
    key: TaskKey
    task_id: str | None


class ClusterServer:
    """The registry of generations (thread-safe) and the HTTP server answering from it."""

    def __init__(
        self,
        settings: ClusterServerConfig,
        clock: Callable[[], float] = time.monotonic,
        told: Callable[[Fetched], None] | None = None,
    ) -> None:
        self.settings = settings
        self.clock = clock
        self.told = told  # the backend loop's inbox: each answer, as it is given
        self._changed = threading.Condition()
        self._by_key: dict[str, tuple[Generation, TaskKey]] = {}  # sha256(token) -> generation, task
        self._jobs: dict[str, Generation] = {}  # job -> its current generation
        self._answering = threading.BoundedSemaphore(MAX_ANSWERING)
        self._http: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None
        self.base_url = ""
        self.port = 0
        self.busy = 0  # requests answered 503 (too many at once): a figure for logs and tests

    # ---- the registry -------------------------------------------------------------------------

    def register(
        self, job: str, name: str, source: ClusterSource, tasks: Iterable[tuple[str, TaskKey]]
    ) -> dict[str, tuple[str, str]]:
        """Serve ``source`` to ``job``'s tasks ``tasks`` (id, key; added to those awaited); each
        task's token and key by the task's name (the same while the generation is the same,
        else new ones, the old generation's forgotten)."""
        with self._changed:
            current = self._jobs.get(job)
            if current is None or current.name != name:
                if current is not None:
                    self._drop(current)
                current = Generation(job, name, secrets.token_urlsafe(32), source)
                self._add(current)
            out: dict[str, tuple[str, str]] = {}
            for task_id, key in tasks:
                current.tasks[key.name] = (task_id, key)
                current.pending.add(task_id)
                out[key.name] = credentials(current.secret, key.name)
            return out

    def _add(self, generation: Generation) -> None:
        generation.derive()
        self._jobs[generation.job] = generation
        for key in generation.source.addresses:
            self._by_key[generation.credentials[key.name][0]] = (generation, key)

    def _drop(self, generation: Generation) -> None:
        for digest, _ in generation.credentials.values():
            self._by_key.pop(digest, None)

    def forget(self, job: str) -> None:
        """Stop serving ``job`` (its token gets 403 from now on)."""
        with self._changed:
            current = self._jobs.pop(job, None)
            if current is not None:
                self._drop(current)
                self._changed.notify_all()

    def pending(self) -> set[str]:
        with self._changed:
            return {task for generation in self._jobs.values() for task in generation.pending}

    def answer(self, target: str) -> tuple[int, bytes]:
        """The status and body answering ``GET target`` (thread-safe; no I/O)."""
        if len(target) > MAX_TARGET:
            return 414, _error("request target too long")
        if _TOKEN_PATH.fullmatch(target):
            token = target[1:]
        elif urlsplit(target).path == ROUTE:
            try:
                query = parse_qs(urlsplit(target).query, strict_parsing=True, max_num_fields=1)
                (token,) = query["token"]  # and no other field (max_num_fields)
            except (ValueError, KeyError):
                return 400, _error("expected the query token=TOKEN")
        else:
            return 404, _error("not found")
        with self._changed:
            found = self._by_key.get(token_digest(token))
        if found is None:
            return 403, _error("unknown or stale token")
        generation, key = found
        with self._changed:
            task_id = generation.tasks.get(key.name, ("", key))[0]  # "": a task launched before
            mac_key = generation.credentials[key.name][1]
            if generation.documents is None:
                generation.documents = Documents(generation.source)
            documents = generation.documents
        body = signed(mac_key, json.dumps(documents.of(key), separators=(",", ":")).encode())
        with self._changed:
            if task_id in generation.pending:
                generation.pending.discard(task_id)
                self._changed.notify_all()
        if self.told is not None:  # before the answer leaves: its exit comes after this message
            self.told(Fetched(generation.job, key, task_id or None))
        return 200, body

    def wait_fetched(self, timeout_s: float, ended: Callable[[set[str]], set[str]]) -> set[str]:
        """Wait until every awaited task has fetched its cluster or ended (``ended``: which of
        some task ids have; they are awaited no more), at most ``timeout_s``; those left."""
        deadline = self.clock() + timeout_s
        while True:
            left = self.pending()
            if left:
                gone = ended(left)
                if gone:
                    with self._changed:
                        for generation in self._jobs.values():
                            generation.pending.difference_update(gone)
                    left -= gone
            remaining = deadline - self.clock()
            if not left or remaining <= 0:
                return left
            with self._changed:
                self._changed.wait(min(WAIT_STEP_S, remaining))

    def saved(self) -> dict[str, Any]:
        """The generations served and the port bound, for the next framework process."""
        with self._changed:
            generations = [
                {
                    "job": g.job,
                    "name": g.name,
                    "secret": g.secret,
                    "style": g.source.style.value,
                    "addresses": sorted([k.role.value, k.index, a] for k, a in g.source.addresses.items()),
                }
                for g in self._jobs.values()
            ]
        return {"port": self.port, "generations": generations}

    def restore(self, generations: Iterable[Mapping[str, Any]]) -> None:
        """Serve the generations an earlier framework process served, with their secrets: its
        tasks that have yet to fetch their cluster get it from this one (none is awaited).
        Raises ``ValueError`` (or ``KeyError``, ``TypeError``) on a malformed entry."""
        for entry in generations:
            addresses = {TaskKey(Role(r), int(i)): str(a) for r, i, a in entry["addresses"]}
            source = ClusterSource(ClusterSpecStyle(entry["style"]), addresses, {})
            secret = str(entry["secret"])
            generation = Generation(str(entry["job"]), str(entry["name"]), secret, source)
            generation.tasks = {key.name: ("", key) for key in addresses}
            with self._changed:
                if generation.job not in self._jobs and len(secret) >= SECRET_MIN_CHARS:
                    self._add(generation)

    # ---- the HTTP server ------------------------------------------------------------------------

    def start(self, port_before: int | None = None) -> None:
        """Listen (raises ``OSError``) and answer on a thread of its own. With ``listen``'s
        port 0, the port an earlier process bound (``port_before``) when it is free, so the
        URLs of its tasks still lead here."""
        host, port = split_host_port(self.settings.listen)
        server_class = _V6Server if ":" in host else _Server
        http: _Server | None = None
        if port == 0 and port_before:
            with contextlib.suppress(OSError):
                http = server_class((host, port_before), _Handler)
        if http is None:
            http = server_class((host, port), _Handler)
        http.owner = self
        self._http = http
        bound_host, bound_port = http.server_address[:2]
        self.port = int(bound_port)
        advertise = self.settings.advertise
        if advertise is None:
            shown = str(bound_host) if bound_host not in _WILDCARDS else socket.getfqdn()
            advertise = join_host_port(shown, int(bound_port))
        self.base_url = f"http://{advertise}"
        self._thread = threading.Thread(
            target=http.serve_forever, kwargs={"poll_interval": 0.2}, name="mesos-cluster-server", daemon=True
        )
        self._thread.start()

    def close(self) -> None:
        http, self._http = self._http, None
        if http is not None:
            http.shutdown()
            http.server_close()
        if self._thread is not None:
            self._thread.join(timeout=5)


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    owner: ClusterServer


class _V6Server(_Server):
    address_family = socket.AF_INET6


class _Handler(BaseHTTPRequestHandler):
    server: _Server
    timeout = REQUEST_TIMEOUT_S
    server_version = "tfdeclare-cluster"
    sys_version = ""

    def do_GET(self) -> None:
        if not self.server.owner._answering.acquire(blocking=False):
            self.server.owner.busy += 1
            self._reply(503, _error("busy, retry"))
            return
        try:
            status, body = self.server.owner.answer(self.path)
        finally:
            self.server.owner._answering.release()
        self._reply(status, body)

    def _reply(self, status: int, body: bytes) -> None:
        self.send_response(status)
        self.send_header("Content-Type", "application/octet-stream" if status == 200 else "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Cache-Control", "no-store")
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:
        pass  # the request line holds a token
