"""The Mesos backend's connection to the master, made in the caller's thread.

This module owns ``Connection``: connecting lazily, on first use (a ``SchedulerClient``
subscribed with the framework record's ``FrameworkInfo``; ``BackendError`` when no SUBSCRIBED
comes within ``subscribeTimeoutSeconds``, at once when the master refuses the credentials; a
framework the master removed is handled by policy ``onFrameworkRemoved``, then subscribed
anew), waiting until the loop took the new client as the one to call through, asking for GPU
offers (UPDATE_FRAMEWORK) the first time a job asks for GPUs, and TEARDOWN. Only these make
HTTP calls in the caller's thread; whatever they change of the backend's state goes through
the loop (``ask``, ``request``, ``post``). One lock serialises the callers that connect.
"""

from __future__ import annotations

import logging
import threading
from concurrent.futures import Future

from tfdeclare.backends.base import BackendError
from tfdeclare.backends.mesos import decide_messages as msg
from tfdeclare.backends.mesos.client import ClientConfig, SchedulerClient
from tfdeclare.backends.mesos.config import MesosConfig
from tfdeclare.backends.mesos.errors import (
    ConfigError,
    FrameworkRemovedError,
    MesosError,
    SubscribeRefusedError,
    SubscribeTimeoutError,
    TerminalError,
)
from tfdeclare.backends.mesos.framework import FrameworkRecord
from tfdeclare.backends.mesos.inbox import ClientDropped, EventHandler, Inbound
from tfdeclare.backends.mesos.loop import Effect, Loop
from tfdeclare.backends.mesos.scheduler import Scheduler
from tfdeclare.backends.mesos.sender import Sender
from tfdeclare.backends.mesos.tls import client_certificate_of
from tfdeclare.core.errors import ErrorCode

log = logging.getLogger("tfdeclare.mesos")


class Connection:
    """See the module docstring."""

    def __init__(
        self,
        config: MesosConfig,
        loop: Loop[Inbound],
        framework: FrameworkRecord,
        sender: Sender,
        scheduler: Scheduler,
    ) -> None:
        self._config, self._loop = config, loop
        self._framework, self._sender, self._scheduler = framework, sender, scheduler
        # Callers only: serialises connecting (re-entrant: connecting sends the loop messages).
        self._lock = threading.RLock()

    def client(self) -> SchedulerClient:
        """The subscribed client, connecting on first use (raises ``BackendError``)."""
        client = self._sender.client
        if client is not None and self._framework.fatal is None:
            return client
        config = self._config
        unreachable = (
            f"cannot reach the Mesos master at {config.master} within {config.subscribe_timeout_s:g} s"
        )
        with self._lock:
            self._framework.usable()
            if self._sender.client is not None:
                return self._sender.client
            for _ in range(2):  # a second time only to subscribe as a new framework
                client = self._new_client()
                client.start()
                try:
                    client.wait_subscribed(config.subscribe_timeout_s)
                except FrameworkRemovedError:
                    client.stop()
                    self._loop.run(self._scheduler.framework_removed)
                    self._framework.usable()
                    continue
                except SubscribeRefusedError as err:  # at once, not after the subscribe timeout
                    client.stop()
                    self.drop(client)
                    raise BackendError(
                        f"the Mesos master at {config.master} refused the framework: {err} "
                        "(check mesos.principal and its secret, and the master's ACLs)",
                        code=ErrorCode.CREDENTIALS_REFUSED,
                    ) from None
                except TerminalError as err:
                    client.stop()
                    self._framework.usable()
                    raise BackendError(
                        f"the Mesos client stopped: {err}", code=ErrorCode.CLIENT_STOPPED
                    ) from None
                except SubscribeTimeoutError as err:
                    client.stop()
                    self.drop(client)
                    detail = f": {err.last_error}" if err.last_error else " (no answer)"
                    raise BackendError(f"{unreachable}{detail}", code=ErrorCode.MASTER_UNREACHABLE) from None
                self._adopt(client, unreachable)
                return client
            raise BackendError(
                f"cannot subscribe a new framework at {config.master}", code=ErrorCode.FRAMEWORK_REFUSED
            )

    def _new_client(self) -> SchedulerClient:
        config = self._config
        try:
            framework, credentials = self._loop.ask(
                lambda: (self._framework.info(), self._framework.credentials())
            )
            handler = EventHandler(self._loop.post)
            client = SchedulerClient(
                ClientConfig(
                    master=config.master,
                    framework=framework,
                    credentials=credentials,
                    ca_file=config.ca_file,
                    insecure_skip_tls_verify=not config.tls_verify,
                    client_certificate=client_certificate_of(config),
                    auto_acknowledge=False,
                ),
                handler,
            )
        except (ConfigError, ValueError) as err:
            raise BackendError(
                f"the mesos settings are not usable: {err}", code=ErrorCode.SETTINGS_UNUSABLE
            ) from None
        handler.client = client
        return client

    def _adopt(self, client: SchedulerClient, unreachable: str) -> None:
        """Wait until the loop has handled this client's SUBSCRIBED (framework id saved, the
        client taken as the one to call through)."""
        deadline = self._loop.clock() + self._config.subscribe_timeout_s

        def start(future: Future[None]) -> Effect:
            def adopted(now: float) -> bool:
                if self._sender.client is client:
                    future.set_result(None)
                elif self._framework.fatal is not None:
                    future.set_exception(self._framework.fatal)
                elif now >= deadline:
                    why = f"{unreachable} (SUBSCRIBED was not handled)"
                    future.set_exception(BackendError(why, code=ErrorCode.MASTER_UNREACHABLE))
                else:
                    return False
                return True

            self._loop.keep_trying(future, adopted)
            return Effect.NONE

        self._loop.request(start)

    def drop(self, client: SchedulerClient) -> None:
        """Calls no longer go through ``client`` (it stopped)."""
        self._loop.send(ClientDropped(client))

    def enable_gpu_offers(self) -> None:
        """Add GPU_RESOURCES (UPDATE_FRAMEWORK) the first time a job asks for GPUs."""
        info = self._loop.ask(lambda: None if self._framework.gpu_enabled else self._framework.info(gpu=True))
        if info is None:
            return
        try:
            self.client().update_framework(info)
        except MesosError as err:
            raise BackendError(
                f"cannot ask the Mesos master for GPU offers (UPDATE_FRAMEWORK): {err}",
                code=ErrorCode.MASTER_CALL_FAILED,
            ) from err

        def asked() -> Effect:
            self._framework.enable_gpu()
            self._scheduler.policies.decide(msg.GpuOffersAsked())
            return Effect.TICK

        self._loop.run(asked)
        log.info("asked the master for offers from GPU agents (GPU_RESOURCES)")

    def teardown(self) -> None:
        """TEARDOWN: the master kills every task of the framework and forgets it."""
        client = self.client()
        client.teardown()
        self.drop(client)
