"""The Mesos v1 scheduler client: subscription stream, calls, reconnects, acknowledgements.

This module owns the connection life cycle. ``SchedulerClient.start()`` starts two daemon
threads: the *stream* thread (SUBSCRIBE on its own connection, RecordIO decoding, dispatch
to the owner's ``Handler``, reconnect with capped exponential backoff) and the *watchdog*
(drops the stream after ``heartbeat_miss_factor`` heartbeat intervals without bytes).
Calls go on a separate keep-alive connection, are serialised by one lock, carry the current
``Mesos-Stream-Id`` and may be made from any thread, including from handler callbacks.
Nothing here sends TEARDOWN except ``teardown()``.
"""

from __future__ import annotations

import json
import logging
import random
import socket
import ssl
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import httpx

from tfdeclare.backends.mesos import calls
from tfdeclare.backends.mesos.auth import Credentials
from tfdeclare.backends.mesos.errors import (
    ClientStoppedError,
    ConfigError,
    FrameworkFailedOverError,
    FrameworkRemovedError,
    MasterErrorEvent,
    MesosConnectionError,
    MesosError,
    NotSubscribedError,
    ProtocolError,
    SubscribeRefusedError,
    SubscribeTimeoutError,
    TerminalError,
    TooManyRedirectsError,
    error_for_status,
)
from tfdeclare.backends.mesos.events import Handler, Offer, TaskStatus, id_value
from tfdeclare.backends.mesos.info import FrameworkInfo
from tfdeclare.backends.mesos.leader import ZooKeeperDetector, parse_master, resolve_redirect
from tfdeclare.backends.mesos.pipeline import PipelinedConnection, PipelineError
from tfdeclare.backends.mesos.readonly import agents_of, operator_answer, operator_url
from tfdeclare.backends.mesos.recordio import DEFAULT_MAX_RECORD_SIZE, RecordIODecoder, decode_event
from tfdeclare.backends.mesos.tls import ClientCertificate, tls_verify

log = logging.getLogger(__name__)

JSON = dict[str, Any]
_ERROR_TEXT_LIMIT = 64 * 1024
_BUSY = float("inf")  # _idle_since while events are being handled: the watchdog waits


@dataclass(frozen=True)
class ClientConfig:
    """How to reach the master and how patient to be. Times are seconds."""

    master: str  # "http(s)://host:5050", "host:5050", "m1:5050,m2:5050" or "zk://h1:2181,h2:2181/mesos"
    framework: FrameworkInfo
    credentials: Credentials | None = None
    ca_file: str | None = None  # CA bundle for https masters; default: httpx's (certifi)
    insecure_skip_tls_verify: bool = False
    client_certificate: ClientCertificate | None = None  # presented to https masters that ask
    suppressed_roles: tuple[str, ...] = ()
    connect_timeout: float = 10.0
    call_timeout: float = 75.0
    subscribe_timeout: float = 75.0  # until SUBSCRIBED; also the httpx read timeout of the stream
    heartbeat_miss_factor: float = 5.0
    backoff_initial: float = 0.5
    backoff_cap: float = 15.0
    backoff_jitter: float = 0.2  # fraction of the delay removed at random
    backoff_seed: int | None = None
    call_503_retries: int = 3
    max_redirects: int = 5
    max_record_size: int = DEFAULT_MAX_RECORD_SIZE
    # False: the owner acknowledges updates itself with ``acknowledge()`` once they are
    # durable (e.g. after a group fsync on another thread); the client never does.
    auto_acknowledge: bool = True
    zk_scheme: str = "http"
    zk_timeout: float = 10.0

    def __post_init__(self) -> None:
        parse_master(self.master)
        positive = ("connect_timeout", "call_timeout", "subscribe_timeout", "heartbeat_miss_factor")
        for name in (*positive, "backoff_initial", "backoff_cap"):
            if not getattr(self, name) > 0:
                raise ConfigError(f"{name} must be > 0")
        if self.backoff_cap < self.backoff_initial:
            raise ConfigError("backoff_cap must be >= backoff_initial")
        if not 0 <= self.backoff_jitter < 1:
            raise ConfigError("backoff_jitter must be in [0, 1)")


class Backoff:
    """Capped exponential delays with proportional jitter; never below ``initial * (1 - jitter)``."""

    def __init__(self, initial: float, cap: float, jitter: float, rng: random.Random) -> None:
        self._initial, self._cap, self._jitter, self._rng = initial, cap, jitter, rng
        self._attempt = 0

    def next(self) -> float:
        delay: float = min(self._cap, self._initial * 2.0 ** min(self._attempt, 30))
        self._attempt += 1
        return delay * (1.0 - self._jitter * self._rng.random())

    def reset(self) -> None:
        self._attempt = 0


class _Redirect(Exception):
    def __init__(self, location: str | None) -> None:
        super().__init__(location)
        self.location = location


def _dump(body: JSON) -> bytes:
    return json.dumps(body, ensure_ascii=False, separators=(",", ":")).encode("utf-8")


class _LazyTransport(httpx.BaseTransport):
    """A transport made on its first request (the https one: no TLS set-up until needed)."""

    def __init__(self, make: Callable[[], httpx.BaseTransport]) -> None:
        self._make = make
        self._inner: httpx.BaseTransport | None = None
        self._lock = threading.Lock()
        self._closed = False

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        with self._lock:
            if self._closed:
                raise httpx.ConnectError("the client was closed", request=request)
            if self._inner is None:
                try:
                    self._inner = self._make()
                except ConfigError as exc:  # an unreadable CA file, found at the first https use
                    raise httpx.ConnectError(str(exc), request=request) from None
            inner = self._inner
        return inner.handle_request(request)

    def close(self) -> None:
        with self._lock:
            inner, self._inner, self._closed = self._inner, None, True
        if inner is not None:
            inner.close()


class SchedulerClient:
    """A Mesos v1 HTTP scheduler. ``start()``, then use the call methods; ``stop()`` at the end.

    ``stop()`` only closes connections: the framework stays registered and its tasks keep
    running for ``failover_timeout``. Only ``teardown()`` removes the framework.
    """

    def __init__(self, config: ClientConfig, handler: Handler) -> None:
        self._config = config
        self._handler = handler
        spec = parse_master(config.master)
        self._zk = spec.zookeeper
        self._candidates = spec.endpoints
        self._candidate = 0
        self._endpoint: str | None = spec.endpoints[0] if spec.endpoints else None  # calls go here
        # With ZooKeeper, the leader it names: every SUBSCRIBE goes there, even after a call's
        # redirect moved ``_endpoint`` (a redirect can name an old, stopped leader).
        self._leader: str | None = None
        self._framework = config.framework
        self._suppressed_roles = config.suppressed_roles
        self._backoff = Backoff(
            config.backoff_initial,
            config.backoff_cap,
            config.backoff_jitter,
            random.Random(config.backoff_seed),  # noqa: S311 (jitter, not crypto)
        )
        self._call_lock = threading.RLock()  # serialises calls and stream-id changes
        # The pipelined ACKNOWLEDGE connection has its own lock, so a burst of acknowledgements
        # never holds up an ACCEPT (and the other way round). Order: _ack_lock, then _call_lock.
        self._ack_lock = threading.Lock()
        self._state = threading.Condition()  # guards the fields below
        self._stream_id: str | None = None
        self._subscribed = False
        self._terminal: TerminalError | None = None
        self._last_error: MesosError | None = None
        self._sock: socket.socket | None = None
        self._abort_reason: str | None = None
        self._idle_since = 0.0
        self._stream_timeout: float | None = None
        self._stop = threading.Event()
        self._wake = threading.Event()
        self._threads: list[threading.Thread] = []
        self._calls: httpx.Client | None = None
        self._streams: httpx.Client | None = None
        self._ssl_context: ssl.SSLContext | None = None  # https only: made on first use
        self._tls_lock = threading.Lock()
        self._pipeline: PipelinedConnection | None = None  # ACKNOWLEDGEs (under _ack_lock)
        self._launches: PipelinedConnection | None = None  # ACCEPTs (under _call_lock)
        self._detector: ZooKeeperDetector | None = None
        self._started = False

    # ----------------------------------------------------------------- state

    @property
    def framework_id(self) -> str | None:
        return self._framework.id

    @property
    def connected(self) -> bool:
        """True between SUBSCRIBED and the end of that stream."""
        return self._subscribed

    @property
    def endpoint(self) -> str | None:
        """The scheduler endpoint in use (after redirects / leader detection)."""
        return self._endpoint

    @property
    def terminal_error(self) -> TerminalError | None:
        return self._terminal

    @property
    def last_error(self) -> MesosError | None:
        """The latest subscribe failure, cleared by the next SUBSCRIBED."""
        return self._last_error

    def wait_subscribed(self, timeout: float) -> str:
        """Block until subscribed; return the framework id. Raises the terminal error if the
        client gave up, or SubscribeTimeoutError (with ``last_error``) after ``timeout``."""
        with self._state:
            self._state.wait_for(lambda: self._subscribed or self._terminal is not None, timeout)
            if self._terminal is not None:
                raise self._terminal
            if not self._subscribed or self._framework.id is None:
                last = self._last_error
                detail = f"; last error: {last}" if last else ""
                raise SubscribeTimeoutError(f"not subscribed after {timeout:g}s{detail}", last)
            return self._framework.id

    # ------------------------------------------------------------- lifecycle

    def start(self) -> None:
        if self._started:
            raise RuntimeError("SchedulerClient.start() can only be called once")
        self._started = True
        if self._tls_expected():  # an https master: a bad CA file is an error now, not later
            self._tls_context()
        auth = self._config.credentials.httpx_auth() if self._config.credentials else None
        connect = self._config.connect_timeout
        self._calls = self._http_client(
            httpx.Timeout(self._config.call_timeout, connect=connect),
            httpx.Limits(max_connections=2, max_keepalive_connections=1),
            auth,
        )
        self._streams = self._http_client(
            httpx.Timeout(self._config.subscribe_timeout, connect=connect), httpx.Limits(), auth
        )
        if self._zk is not None:
            self._detector = ZooKeeperDetector(
                self._zk, self._set_leader, self._config.zk_scheme, self._config.zk_timeout
            )
            try:
                self._detector.start()
            except Exception:
                self.stop()
                raise
        for name, target in (
            ("mesos-scheduler-stream", self._run),
            ("mesos-heartbeat-watchdog", self._watch),
        ):
            thread = threading.Thread(target=target, name=name, daemon=True)
            self._threads.append(thread)
            thread.start()

    def _tls_expected(self) -> bool:
        """Whether a configured master (or the ZooKeeper scheme) says https."""
        if self._zk is not None:
            return self._config.zk_scheme == "https"
        return any(e.startswith("https:") for e in self._candidates)

    def _tls_context(self) -> ssl.SSLContext:
        """The TLS context for https masters, built on first use (an ``http://`` master never
        pays for loading a CA bundle). Raises ``ConfigError`` for an unreadable CA file or an
        unusable client certificate."""
        with self._tls_lock:
            if self._ssl_context is not None:
                return self._ssl_context
            config = self._config
            if config.insecure_skip_tls_verify:
                log.warning("TLS certificate verification of the Mesos master is disabled")
            verify = tls_verify(config.ca_file, config.insecure_skip_tls_verify, config.client_certificate)
            if isinstance(verify, ssl.SSLContext):
                context = verify
            elif verify is False:
                context = ssl.create_default_context()
                context.check_hostname = False
                context.verify_mode = ssl.CERT_NONE
            else:
                context = httpx.create_ssl_context()
            self._ssl_context = context
            return context

    def _http_client(
        self, timeout: httpx.Timeout, limits: httpx.Limits, auth: httpx.Auth | None
    ) -> httpx.Client:
        """An httpx client whose https transport (and TLS context) is made on its first
        https request. The plain transport's own context is never used: https goes to the
        mounted one."""

        def https() -> httpx.BaseTransport:
            return httpx.HTTPTransport(verify=self._tls_context(), limits=limits)

        return httpx.Client(
            auth=auth,
            timeout=timeout,
            transport=httpx.HTTPTransport(verify=False, limits=limits),
            mounts={"https://": _LazyTransport(https)},
        )

    def stop(self, timeout: float = 5.0) -> None:
        """Close the stream and connections without tearing the framework down."""
        self._stop.set()
        self._wake.set()
        self._abort_stream("client stopped")
        if self._detector is not None:
            self._detector.stop()
        for thread in self._threads:
            if thread is not threading.current_thread():
                thread.join(timeout)
        with self._state:
            if self._terminal is None:
                self._terminal = ClientStoppedError("the client was stopped")
            self._state.notify_all()
        with self._call_lock:  # after any call in flight
            for client in (self._calls, self._streams):
                if client is not None:
                    client.close()
            if self._launches is not None:
                self._launches.close()
        with self._ack_lock:  # after any acknowledgement in flight
            if self._pipeline is not None:
                self._pipeline.close()

    def __enter__(self) -> SchedulerClient:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # ------------------------------------------------------------------ calls

    def call(self, body: JSON, expect: tuple[int, ...] = (202,)) -> httpx.Response:
        """Send one non-SUBSCRIBE call (framework id and stream id are added); follow 307s,
        retry 503 a few times; raise a typed MesosError for any other status."""
        call_type = str(body.get("type"))
        with self._call_lock:
            if self._terminal is not None:
                raise self._terminal
            if self._stream_id is None or self._framework.id is None or self._calls is None:
                raise NotSubscribedError(f"{call_type}: not subscribed to a Mesos master")
            content = _dump({**body, "framework_id": {"value": self._framework.id}})
            headers = {"Content-Type": "application/json", "Mesos-Stream-Id": self._stream_id}
            redirects = retries = 0
            while True:
                endpoint = self._endpoint
                if endpoint is None:
                    raise NotSubscribedError(f"{call_type}: no leading master known")
                try:
                    resp = self._calls.post(endpoint, content=content, headers=headers)
                except httpx.HTTPError as exc:
                    raise MesosConnectionError(
                        f"{call_type} to {endpoint}: {type(exc).__name__}: {exc}"
                    ) from exc
                if resp.status_code in expect:
                    return resp
                if resp.status_code == 307:
                    redirects += 1
                    if redirects > self._config.max_redirects:
                        raise TooManyRedirectsError(307, "too many redirects", call_type)
                    self._endpoint = resolve_redirect(endpoint, resp.headers.get("Location"))
                    log.info("%s redirected to %s", call_type, self._endpoint)
                    continue
                if resp.status_code == 503 and retries < self._config.call_503_retries:
                    delay = min(self._config.backoff_cap, self._config.backoff_initial * 2**retries)
                    retries += 1
                    log.warning(
                        "%s: master unavailable (503 %s); retrying in %.2fs", call_type, resp.text, delay
                    )
                    if self._stop.wait(delay):
                        raise ClientStoppedError(f"{call_type}: the client was stopped")
                    continue
                raise error_for_status(resp.status_code, resp.text, call_type)

    def accept(
        self, offer_ids: Sequence[str], operations: Sequence[JSON], refuse_seconds: float | None = None
    ) -> None:
        self.call(calls.accept(offer_ids, operations, refuse_seconds))

    def launch(
        self, offer_ids: Sequence[str], task_infos: Sequence[JSON], refuse_seconds: float | None = None
    ) -> None:
        """ACCEPT the offers (one agent, one role) with a single LAUNCH of ``task_infos``."""
        self.call(calls.accept(offer_ids, [calls.launch_operation(task_infos)], refuse_seconds))

    def launch_many(
        self, launches: Sequence[tuple[Sequence[str], Sequence[JSON], float | None]]
    ) -> list[MesosError | None]:
        """``launch()`` for each (offer ids, task infos, refuse seconds), in order, HTTP/1.1-
        pipelined on one connection: the master works through a burst of ACCEPTs without
        waiting for this process between them. Returns, per launch, None (202) or its error.

        An ACCEPT answered with anything but 202 (a redirect, 503, 4xx) was not taken, so it
        is sent once more as a plain ``call()``, which follows redirects, retries 503 and
        raises the typed error. ACCEPTs whose answer was lost with the connection get a
        ``MesosConnectionError``: the master may or may not have them."""
        bodies = [calls.accept(o, [calls.launch_operation(i)], r) for o, i, r in launches]
        results: list[MesosError | None] = [None] * len(bodies)
        if not bodies:
            return results
        with self._call_lock:
            endpoint, stream_id, framework_id = self._subscription("ACCEPT")
            self._launches = self._connection_to(endpoint, self._launches, "ACCEPT")
            framework = {"value": framework_id}
            contents = [_dump({**body, "framework_id": framework}) for body in bodies]
            try:
                statuses = self._launches.post_many(contents, self._pipeline_headers(stream_id))
            except PipelineError as exc:
                statuses = exc.statuses
                lost = MesosConnectionError(f"ACCEPT to {endpoint}: {exc}")
                for index in range(len(statuses), len(bodies)):
                    results[index] = lost
            for index, status in enumerate(statuses):
                if status != 202:
                    try:
                        self.call(bodies[index])
                    except MesosError as err:
                        results[index] = err
        return results

    def _subscription(self, what: str) -> tuple[str, str, str]:
        """The endpoint, stream id and framework id of the current subscription (call
        under ``_call_lock``); raises when the client is done or not subscribed."""
        if self._terminal is not None:
            raise self._terminal
        endpoint, stream_id, framework_id = self._endpoint, self._stream_id, self._framework.id
        if endpoint is None or stream_id is None or framework_id is None:
            raise NotSubscribedError(f"{what}: not subscribed to a Mesos master")
        return endpoint, stream_id, framework_id

    def _connection_to(
        self, endpoint: str, current: PipelinedConnection | None, what: str
    ) -> PipelinedConnection:
        """``current`` if it still goes to ``endpoint``, else a new pipelined connection."""
        if current is not None and current.endpoint == endpoint:
            return current
        if current is not None:
            current.close()
        try:
            context = self._tls_context() if endpoint.startswith("https:") else None
            return PipelinedConnection(endpoint, context, self._config.call_timeout)
        except PipelineError as exc:
            raise MesosConnectionError(f"{what}: {exc}") from None

    def _pipeline_headers(self, stream_id: str) -> dict[str, str]:
        headers = {"Content-Type": "application/json", "Mesos-Stream-Id": stream_id}
        if self._config.credentials is not None:
            headers["Authorization"] = self._config.credentials.basic_header()
        return headers

    def decline(self, offer_ids: Sequence[str], refuse_seconds: float | None = None) -> None:
        self.call(calls.decline(offer_ids, refuse_seconds))

    def revive(self, roles: Sequence[str] = ()) -> None:
        self.call(calls.revive(roles))

    def suppress(self, roles: Sequence[str] = ()) -> None:
        self.call(calls.suppress(roles))

    def kill(self, task_id: str, agent_id: str | None = None, grace_period: float | None = None) -> None:
        """KILL a task; ``grace_period`` (seconds) becomes kill_policy.grace_period."""
        self.call(calls.kill(task_id, agent_id, grace_period))

    def acknowledge(self, agent_id: str, task_id: str, uuid: str) -> None:
        """ACKNOWLEDGE an update; ``uuid`` is echoed exactly as received (base64)."""
        self.call(calls.acknowledge(agent_id, task_id, uuid))

    def acknowledge_many(self, acks: Sequence[tuple[str, str, str]]) -> int:
        """ACKNOWLEDGE many updates ((agent_id, task_id, uuid) each), HTTP/1.1-pipelined on
        one connection: a burst of 20,000 updates costs little CPU. Returns how many the
        master accepted (202); the rest are as if never sent (the master redelivers them)."""
        if not acks:
            return 0
        with self._ack_lock:
            with self._call_lock:  # a consistent endpoint, stream id and framework id
                endpoint, stream_id, framework_id = self._subscription("ACKNOWLEDGE")
            self._pipeline = self._connection_to(endpoint, self._pipeline, "ACKNOWLEDGE")
            headers = self._pipeline_headers(stream_id)
            framework = {"value": framework_id}
            bodies = [_dump({**calls.acknowledge(a, t, u), "framework_id": framework}) for a, t, u in acks]
            accepted = 0
            for start in range(0, len(bodies), 256):
                try:
                    statuses = self._pipeline.post_many(bodies[start : start + 256], headers)
                except PipelineError as exc:
                    accepted += sum(1 for s in exc.statuses if s == 202)
                    raise MesosConnectionError(
                        f"ACKNOWLEDGE: {exc} ({accepted} of {len(acks)} acknowledged)"
                    ) from None
                accepted += sum(1 for s in statuses if s == 202)
            return accepted

    def reconcile(self, tasks: Sequence[tuple[str, str | None]] = ()) -> None:
        """Explicit RECONCILE of (task_id, agent_id or None) pairs; empty means implicit."""
        self.call(calls.reconcile(tasks))

    def _operator(self, call_type: str) -> JSON:
        """One call of the master's operator API (``/api/v1``, JSON) on the leader this client
        calls; its answer's body. Raises ``MesosError``."""
        with self._call_lock:
            endpoint, _, _ = self._subscription(call_type)
            assert self._calls is not None
            url = operator_url(endpoint)
            try:
                resp = self._calls.post(
                    url,
                    content=_dump({"type": call_type}),
                    headers={"Content-Type": "application/json", "Accept": "application/json"},
                )
            except httpx.HTTPError as exc:
                raise MesosConnectionError(f"{call_type} to {url}: {type(exc).__name__}: {exc}") from exc
        return operator_answer(resp, call_type)

    def get_agents(self) -> list[JSON]:
        """The master's agents (operator API ``GET_AGENTS`` on the leader this client calls):
        each with ``agent_info`` and ``total_resources``. Raises ``MesosError``."""
        return agents_of(self._operator("GET_AGENTS"))

    def get_quota(self) -> dict[str, dict[str, float]]:
        """Each role's quota limits (operator API ``GET_QUOTA``): role -> {resource: limit}.
        Masters of 1.9 and later list ``configs`` with ``limits`` (``UPDATE_QUOTA``); before,
        a quota was a guarantee that was also its role's limit (``infos``' ``guarantee``).
        Raises ``MesosError``."""
        body = self._operator("GET_QUOTA")
        try:
            status = body["get_quota"].get("status") or {}
            out: dict[str, dict[str, float]] = {}
            for config in status.get("configs") or []:
                limits = config.get("limits") or {}
                out[str(config["role"])] = {str(k): float(v["value"]) for k, v in limits.items()}
            for info in status.get("infos") or []:
                if str(info["role"]) in out or not info.get("guarantee"):
                    continue
                scalars = [r for r in info["guarantee"] if r.get("type") == "SCALAR"]
                out[str(info["role"])] = {str(r["name"]): float(r["scalar"]["value"]) for r in scalars}
        except (KeyError, TypeError, AttributeError, ValueError) as exc:
            raise ProtocolError(f"GET_QUOTA: an answer that is not a quota status ({exc})") from None
        return out

    def update_framework(self, info: FrameworkInfo, suppressed_roles: Sequence[str] = ()) -> None:
        """UPDATE_FRAMEWORK (synchronous, 200). Info and suppressed roles are also used on re-subscribe."""
        with self._call_lock:
            info = info.with_id(self._framework.id)
            self.call(calls.update_framework(info, suppressed_roles), expect=(200,))
            self._framework, self._suppressed_roles = info, tuple(suppressed_roles)

    def resubscribe(self, info: FrameworkInfo) -> None:
        """SUBSCRIBE again, as the same framework, with ``info``: how masters before 1.9 (no
        UPDATE_FRAMEWORK) take a changed FrameworkInfo. The stream is dropped and the new
        SUBSCRIBE goes out at once; ``subscribed`` is called again."""
        with self._call_lock:
            self._framework = info.with_id(self._framework.id)
        self._abort_stream("subscribing again with a changed FrameworkInfo")
        self._wake.set()

    def teardown(self) -> None:
        """TEARDOWN: the master kills every task and forgets the framework. Then stop()."""
        with self._call_lock:  # the stream thread cannot re-subscribe before _stop is set
            self.call(calls.teardown())
            self._stop.set()
        log.warning("framework %s torn down", self._framework.id)
        self.stop()

    # ---------------------------------------------------------------- stream

    def _run(self) -> None:
        redirects = 0
        while not self._stop.is_set():
            endpoint = self._leader if self._zk is not None else self._endpoint
            if endpoint is None:  # ZooKeeper knows no leader (yet)
                self._sleep(self._config.backoff_cap)
                continue
            self._endpoint = endpoint  # the calls of this subscription go where it goes
            reason = "stream ended"
            try:
                reason = self._subscribe_once(endpoint)
            except _Redirect as redirect:
                if self._zk is not None:
                    # ZooKeeper names the leader. One that still redirects has not yet seen its
                    # own election (its watch fires after ours) and points at the old leader,
                    # often a stopped one: following it would leave us there, since ZooKeeper
                    # then has no change left to tell. Ask the named leader again after a
                    # backoff, as upstream's scheduler library does; a change of leader wakes us.
                    reason = f"{endpoint} does not lead yet (it redirects to {redirect.location})"
                    log.info("SUBSCRIBE: %s", reason)
                else:
                    redirects += 1
                    try:
                        self._endpoint = resolve_redirect(endpoint, redirect.location)
                        log.info("SUBSCRIBE redirected to %s", self._endpoint)
                    except ConfigError as exc:
                        self._failed(exc)
                    if redirects <= self._config.max_redirects:
                        continue
            except TerminalError as exc:
                if isinstance(exc, SubscribeRefusedError):
                    self._failed(exc.cause)
                self._end_stream(str(exc))
                self._enter_terminal(exc)
                return
            except MesosError as exc:
                reason = str(exc)
                self._failed(exc)
            except httpx.HTTPError as exc:
                reason = f"{type(exc).__name__}: {exc}"
                self._failed(MesosConnectionError(f"SUBSCRIBE to {endpoint}: {reason}"))
                if self._candidates:  # next configured master (also undoes a redirect)
                    self._candidate = (self._candidate + 1) % len(self._candidates)
                    self._endpoint = self._candidates[self._candidate]
            except Exception:
                log.exception("unexpected error on the Mesos event stream")
                reason = "internal error"
            redirects = 0
            self._end_stream(reason)
            if not self._stop.is_set():
                delay = self._backoff.next()
                log.info("re-subscribing in %.2fs", delay)
                self._sleep(delay)

    def _subscribe_once(self, endpoint: str) -> str:
        """One SUBSCRIBE and its stream, dispatched until it ends. Returns why it ended."""
        assert self._streams is not None
        body = _dump(calls.subscribe(self._framework, self._suppressed_roles))
        headers = {
            "Content-Type": "application/json",
            "Accept": "application/json",
            "Accept-Encoding": "identity",
            "Connection": "close",
        }
        log.debug("SUBSCRIBE to %s (framework id %s)", endpoint, self._framework.id)
        with self._streams.stream("POST", endpoint, content=body, headers=headers) as resp:
            if resp.status_code == 307:
                raise _Redirect(resp.headers.get("Location"))
            if resp.status_code != 200:
                error = error_for_status(resp.status_code, self._read_text(resp), "SUBSCRIBE")
                if resp.status_code in (401, 403):  # an operator must act: never retried
                    raise SubscribeRefusedError(error)
                raise error
            stream_id = resp.headers.get("Mesos-Stream-Id")
            if not stream_id:
                raise ProtocolError("the SUBSCRIBE response has no Mesos-Stream-Id header")
            self._attach(resp)
            decoder = RecordIODecoder(self._config.max_record_size)
            try:
                for chunk in resp.iter_raw():
                    self._idle_since = _BUSY
                    for record in decoder.feed(chunk):
                        if self._stop.is_set():
                            return "client stopped"
                        self._dispatch(decode_event(record), stream_id)
                    self._idle_since = time.monotonic()
                decoder.close()
            except httpx.HTTPError as exc:
                if self._abort_reason is None:
                    raise
                log.debug("stream aborted (%s): %s", self._abort_reason, exc)
            finally:
                aborted = self._detach()
            if aborted is not None:
                if aborted.startswith("heartbeat"):
                    raise MesosConnectionError(aborted)
                return aborted
            return "the master closed the stream"

    @staticmethod
    def _read_text(resp: httpx.Response) -> str:
        data = b""
        for chunk in resp.iter_bytes():
            data += chunk
            if len(data) >= _ERROR_TEXT_LIMIT:
                break
        return data.decode("utf-8", "replace")

    def _attach(self, resp: httpx.Response) -> None:
        stream = resp.extensions.get("network_stream")
        sock = stream.get_extra_info("socket") if stream is not None else None
        with self._state:
            self._sock = sock if isinstance(sock, socket.socket) else None
            self._abort_reason = None
            self._idle_since = time.monotonic()
            self._stream_timeout = self._config.subscribe_timeout
        if self._sock is None:
            log.warning("no socket handle for the event stream: the heartbeat watchdog cannot act")
        if self._stop.is_set():
            self._abort_stream("client stopped")

    def _detach(self) -> str | None:
        with self._state:
            self._sock = None
            self._stream_timeout = None
            reason, self._abort_reason = self._abort_reason, None
            return reason

    def _abort_stream(self, reason: str) -> None:
        """Make the stream thread's blocking read return (from any thread)."""
        with self._state:
            sock, self._stream_timeout = self._sock, None
            if sock is None:
                return
            if self._abort_reason is None:
                self._abort_reason = reason
        try:
            sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass

    def _watch(self) -> None:
        while not self._stop.is_set() and self._terminal is None:
            with self._state:
                timeout, idle_since = self._stream_timeout, self._idle_since
            tick = 0.5 if timeout is None else max(0.005, min(0.5, timeout / 10))
            if timeout is not None and time.monotonic() - idle_since > timeout:
                log.warning("no bytes from the Mesos master for %.2fs: dropping the stream", timeout)
                self._abort_stream(f"heartbeat timeout: no bytes for {timeout:g}s")
            self._stop.wait(tick)

    def _sleep(self, delay: float) -> None:
        """Wait ``delay``, or less if stop() or a leader change sets ``_wake``."""
        self._wake.wait(delay)
        self._wake.clear()

    def _set_leader(self, endpoint: str | None) -> None:
        """Leader detection says the leader is now ``endpoint`` (None: no leader)."""
        if endpoint == self._leader:
            return
        self._leader = self._endpoint = endpoint
        self._abort_stream("the leading master changed")
        self._wake.set()

    def _failed(self, exc: MesosError) -> None:
        log.warning("Mesos subscription failed: %s", exc)
        self._last_error = exc

    def _end_stream(self, reason: str) -> None:
        with self._call_lock:  # no call is in flight with the old stream id after this
            self._stream_id = None
        with self._ack_lock:
            pass  # nor any acknowledgement
        with self._state:
            was, self._subscribed = self._subscribed, False
        if was:
            log.warning("disconnected from the Mesos master: %s", reason)
            self._callback("disconnected", reason)

    def _enter_terminal(self, exc: TerminalError) -> None:
        log.error("the Mesos client gives up: %s", exc)
        with self._state:
            self._terminal = exc
            self._state.notify_all()
        self._callback("terminated", exc)

    # --------------------------------------------------------------- events

    def _callback(self, name: str, *args: Any) -> bool:
        try:
            getattr(self._handler, name)(*args)
        except Exception:
            log.exception("the scheduler handler's %s() raised; continuing", name)
            return False
        return True

    def _dispatch(self, event: JSON, stream_id: str) -> None:
        kind = event.get("type")
        if kind == "HEARTBEAT":
            return
        if kind == "SUBSCRIBED":
            self._on_subscribed(event.get("subscribed") or {}, stream_id)
        elif kind == "ERROR":
            error = event.get("error")
            message = str((error if isinstance(error, dict) else event).get("message", ""))
            log.error("ERROR event from the Mesos master: %s", message)
            self._callback("error", message)
            if "Framework has been removed" in message:
                raise FrameworkRemovedError(message)
            if "Framework failed over" in message:
                raise FrameworkFailedOverError(message)
            raise MasterErrorEvent(message)
        elif not self._subscribed:
            log.warning("ignoring a %s event received before SUBSCRIBED", kind)
        elif kind == "OFFERS":
            offers = []
            for raw in (event.get("offers") or {}).get("offers") or []:
                try:
                    offers.append(Offer.from_json(raw))
                except ProtocolError as exc:
                    log.warning("ignoring a malformed offer: %s", exc)
            self._callback("offers", offers)
        elif kind == "RESCIND":
            offer_id = id_value((event.get("rescind") or {}).get("offer_id"))
            if offer_id is not None:
                self._callback("rescind", offer_id)
        elif kind == "UPDATE":
            self._on_update((event.get("update") or {}).get("status") or {})
        elif kind == "FAILURE":
            failure = event.get("failure") or {}
            status = failure.get("status")
            self._callback(
                "failure",
                id_value(failure.get("agent_id")),
                id_value(failure.get("executor_id")),
                status if isinstance(status, int) else None,
            )
        else:
            self._callback("other", event)

    def _on_subscribed(self, body: JSON, stream_id: str) -> None:
        framework_id = id_value(body.get("framework_id"))
        if framework_id is None:
            raise ProtocolError("SUBSCRIBED without a framework_id")
        interval = float(body.get("heartbeat_interval_seconds") or 15.0)
        with self._call_lock:
            self._framework = self._framework.with_id(framework_id)
            self._stream_id = stream_id
        with self._state:
            self._subscribed = True
            self._last_error = None
            self._stream_timeout = interval * self._config.heartbeat_miss_factor
            self._state.notify_all()
        self._backoff.reset()
        log.info("subscribed to %s as framework %s (heartbeat %gs)", self._endpoint, framework_id, interval)
        self._callback("subscribed", framework_id, interval, body.get("master_info") or {})

    def _on_update(self, raw: JSON) -> None:
        try:
            status = TaskStatus.from_json(raw)
        except ProtocolError as exc:
            log.warning("ignoring a malformed UPDATE: %s", exc)
            return
        if not self._callback("update", status):
            log.warning("not acknowledging the update of task %s: the master will resend it", status.task_id)
            return
        if status.uuid is None or not self._config.auto_acknowledge:
            return  # master-generated (never acknowledged), or the owner acknowledges
        if status.agent_id is None:
            log.warning("cannot acknowledge the update of task %s: no agent_id", status.task_id)
            return
        try:
            self.acknowledge(status.agent_id, status.task_id, status.uuid)
        except MesosError as exc:
            log.warning("ACKNOWLEDGE of task %s failed (the master will resend): %s", status.task_id, exc)
