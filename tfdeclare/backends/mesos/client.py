"""The Mesos v1 scheduler client: subscription stream, calls, reconnects, acknowledgements.

This module owns ``SchedulerClient``, the facade its users hold, and its life cycle: it composes
the parts and starts and stops them. ``start()`` starts two daemon threads: the *stream* thread
(``stream.py``: SUBSCRIBE on its own connection, RecordIO decoding, dispatch to the owner's
``Handler`` by ``dispatch.py``, reconnect with capped exponential backoff) and the *watchdog*
(``watchdog.py``: drops the stream after ``heartbeat_miss_factor`` heartbeat intervals without
bytes). Calls (``caller.py``) go on a separate keep-alive connection (``transport.py``), are
serialised by one lock, carry the current ``Mesos-Stream-Id`` and may be made from any thread,
including from handler callbacks. What the parts share is a ``session.Session``. The settings
(``ClientConfig``, ``Backoff``) live in ``clientconfig.py`` and are re-exported here. Nothing
here sends TEARDOWN except ``teardown()``.
"""

from __future__ import annotations

import random
import threading
from collections.abc import Sequence
from typing import Any

import httpx

from tfdeclare.backends.mesos import calls
from tfdeclare.backends.mesos.caller import Caller
from tfdeclare.backends.mesos.clientconfig import Backoff, ClientConfig
from tfdeclare.backends.mesos.dispatch import Dispatcher
from tfdeclare.backends.mesos.errors import MesosError, TerminalError
from tfdeclare.backends.mesos.events import Handler
from tfdeclare.backends.mesos.info import FrameworkInfo
from tfdeclare.backends.mesos.leader import ZooKeeperDetector
from tfdeclare.backends.mesos.session import Session, log
from tfdeclare.backends.mesos.stream import Stream
from tfdeclare.backends.mesos.transport import Transport
from tfdeclare.backends.mesos.watchdog import Watchdog

__all__ = ["Backoff", "ClientConfig", "SchedulerClient"]

JSON = dict[str, Any]


class SchedulerClient:
    """A Mesos v1 HTTP scheduler. ``start()``, then use the call methods; ``stop()`` at the end.

    ``stop()`` only closes connections: the framework stays registered and its tasks keep
    running for ``failover_timeout``. Only ``teardown()`` removes the framework.
    """

    def __init__(self, config: ClientConfig, handler: Handler) -> None:
        self._config = config
        self._session = Session(config)
        backoff = Backoff(
            config.backoff_initial,
            config.backoff_cap,
            config.backoff_jitter,
            random.Random(config.backoff_seed),  # noqa: S311 (jitter, not crypto)
        )
        self._transport = Transport(config)
        self._watchdog = Watchdog(self._session)
        self._caller = Caller(self._session, self._transport)
        dispatcher = Dispatcher(self._session, self._watchdog, backoff, handler, self.acknowledge)
        self._stream = Stream(self._session, self._transport, self._watchdog, dispatcher, backoff)
        self._threads: list[threading.Thread] = []
        self._detector: ZooKeeperDetector | None = None
        self._started = False

    # ----------------------------------------------------------------- state

    @property
    def framework_id(self) -> str | None:
        return self._session.framework.id

    @property
    def connected(self) -> bool:
        """True between SUBSCRIBED and the end of that stream."""
        return self._session.subscribed

    @property
    def endpoint(self) -> str | None:
        """The scheduler endpoint in use (after redirects / leader detection)."""
        return self._session.endpoint

    @property
    def terminal_error(self) -> TerminalError | None:
        return self._session.terminal

    @property
    def last_error(self) -> MesosError | None:
        """The latest subscribe failure, cleared by the next SUBSCRIBED."""
        return self._session.last_error

    def unsubscribed_for(self) -> float | None:
        """Seconds since the last subscription ended (or the client started); None while
        subscribed."""
        return self._session.unsubscribed_for()

    def wait_subscribed(self, timeout: float) -> str:
        """Block until subscribed; return the framework id. Raises the terminal error if the
        client gave up, or SubscribeTimeoutError (with ``last_error``) after ``timeout``."""
        return self._session.wait_subscribed(timeout)

    # ------------------------------------------------------------- lifecycle

    def start(self) -> None:
        if self._started:
            raise RuntimeError("SchedulerClient.start() can only be called once")
        self._started = True
        if self._session.tls_expected():  # an https master: a bad CA file is an error now, not later
            self._transport.tls_context()
        self._transport.open()
        zookeeper = self._session.zookeeper
        if zookeeper is not None:
            self._detector = ZooKeeperDetector(
                zookeeper, self._stream.set_leader, self._config.zk_scheme, self._config.zk_timeout
            )
            try:
                self._detector.start()
            except Exception:
                self.stop()
                raise
        for name, target in (
            ("mesos-scheduler-stream", self._stream.run),
            ("mesos-heartbeat-watchdog", self._watchdog.watch),
        ):
            thread = threading.Thread(target=target, name=name, daemon=True)
            self._threads.append(thread)
            thread.start()

    def stop(self, timeout: float = 5.0) -> None:
        """Close the stream and connections without tearing the framework down."""
        self._session.stop.set()
        self._session.wake.set()
        self._watchdog.abort("client stopped")
        if self._detector is not None:
            self._detector.stop()
        for thread in self._threads:
            if thread is not threading.current_thread():
                thread.join(timeout)
        self._session.stopped()
        self._caller.close()

    def __enter__(self) -> SchedulerClient:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # ------------------------------------------------------------------ calls

    def call(self, body: JSON, expect: tuple[int, ...] = (202,)) -> httpx.Response:
        """Send one non-SUBSCRIBE call (framework id and stream id are added); follow 307s,
        retry 503 a few times; raise a typed MesosError for any other status."""
        return self._caller.call(body, expect)

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
        return self._caller.launch_many(launches)

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
        return self._caller.acknowledge_many(acks)

    def reconcile(self, tasks: Sequence[tuple[str, str | None]] = ()) -> None:
        """Explicit RECONCILE of (task_id, agent_id or None) pairs; empty means implicit."""
        self.call(calls.reconcile(tasks))

    def get_agents(self) -> list[JSON]:
        """The master's agents (operator API ``GET_AGENTS`` on the leader this client calls):
        each with ``agent_info`` and ``total_resources``. Raises ``MesosError``."""
        return self._caller.get_agents()

    def get_quota(self) -> dict[str, dict[str, float]]:
        """Each role's quota limits (operator API ``GET_QUOTA``): role -> {resource: limit}.
        Masters of 1.9 and later list ``configs`` with ``limits`` (``UPDATE_QUOTA``); before,
        a quota was a guarantee that was also its role's limit (``infos``' ``guarantee``).
        Raises ``MesosError``."""
        return self._caller.get_quota()

    def update_framework(self, info: FrameworkInfo, suppressed_roles: Sequence[str] = ()) -> None:
        """UPDATE_FRAMEWORK (synchronous, 200). Info and suppressed roles are also used on re-subscribe."""
        self._caller.update_framework(info, suppressed_roles)

    def resubscribe(self, info: FrameworkInfo) -> None:
        """SUBSCRIBE again, as the same framework, with ``info``: how masters before 1.9 (no
        UPDATE_FRAMEWORK) take a changed FrameworkInfo. The stream is dropped and the new
        SUBSCRIBE goes out at once; ``subscribed`` is called again."""
        with self._session.call_lock:
            self._session.set_framework(info.with_id(self._session.framework.id))
        self._watchdog.abort("subscribing again with a changed FrameworkInfo")
        self._session.wake.set()

    def teardown(self) -> None:
        """TEARDOWN: the master kills every task and forgets the framework. Then stop()."""
        with self._session.call_lock:  # the stream thread cannot re-subscribe before stop is set
            self.call(calls.teardown())
            self._session.stop.set()
        log.warning("framework %s torn down", self._session.framework.id)
        self.stop()
