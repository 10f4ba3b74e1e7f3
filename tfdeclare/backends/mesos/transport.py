"""The scheduler client's HTTP plumbing: its connections to the master and their TLS.

This module owns the two httpx clients of a ``SchedulerClient`` (the calls on one keep-alive
connection, each SUBSCRIBE stream on a connection of its own), the TLS context of https masters
(made on first use: an ``http://`` master never pays for loading a CA bundle), the HTTP/1.1
pipelined connections that carry bursts of ACCEPTs and ACKNOWLEDGEs, and the bytes of a body.
"""

from __future__ import annotations

import json
import logging
import ssl
import threading
from collections.abc import Callable
from typing import Any

import httpx

from tfdeclare.backends.mesos.clientconfig import ClientConfig
from tfdeclare.backends.mesos.errors import ConfigError, MesosConnectionError
from tfdeclare.backends.mesos.pipeline import PipelinedConnection, PipelineError
from tfdeclare.backends.mesos.tls import ssl_context, tls_verify

log = logging.getLogger("tfdeclare.backends.mesos.client")  # the client's parts log as the client

JSON = dict[str, Any]
_ERROR_TEXT_LIMIT = 64 * 1024


def dump(body: JSON) -> bytes:
    """A call's body as the master reads it: compact UTF-8 JSON."""
    return json.dumps(body, ensure_ascii=False, separators=(",", ":")).encode("utf-8")


def read_text(resp: httpx.Response) -> str:
    """The start of a streamed answer's body (at most 64 KiB), for an error message."""
    data = b""
    for chunk in resp.iter_bytes():
        data += chunk
        if len(data) >= _ERROR_TEXT_LIMIT:
            break
    return data.decode("utf-8", "replace")


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


class Transport:
    """The connections of one client to the master: ``open()`` them, ``close()`` at the end."""

    def __init__(self, config: ClientConfig) -> None:
        self._config = config
        self._calls: httpx.Client | None = None
        self._streams: httpx.Client | None = None
        self._ssl_context: ssl.SSLContext | None = None  # https only: made on first use
        self._tls_lock = threading.Lock()

    @property
    def calls(self) -> httpx.Client | None:
        """The client of the calls (keep-alive, ``call_timeout``); None before ``open()``."""
        return self._calls

    @property
    def streams(self) -> httpx.Client | None:
        """The client of the SUBSCRIBE streams (``subscribe_timeout``); None before ``open()``."""
        return self._streams

    @property
    def ssl_context(self) -> ssl.SSLContext | None:
        """The TLS context, once an https master needed one."""
        return self._ssl_context

    def open(self) -> None:
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

    def close(self) -> None:
        for client in (self._calls, self._streams):
            if client is not None:
                client.close()

    def tls_context(self) -> ssl.SSLContext:
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
            self._ssl_context = ssl_context(verify)
            return self._ssl_context

    def _http_client(
        self, timeout: httpx.Timeout, limits: httpx.Limits, auth: httpx.Auth | None
    ) -> httpx.Client:
        """An httpx client whose https transport (and TLS context) is made on its first
        https request. The plain transport's own context is never used: https goes to the
        mounted one."""

        def https() -> httpx.BaseTransport:
            return httpx.HTTPTransport(verify=self.tls_context(), limits=limits)

        return httpx.Client(
            auth=auth,
            timeout=timeout,
            transport=httpx.HTTPTransport(verify=False, limits=limits),
            mounts={"https://": _LazyTransport(https)},
        )

    def connection_to(
        self, endpoint: str, current: PipelinedConnection | None, what: str
    ) -> PipelinedConnection:
        """``current`` if it still goes to ``endpoint``, else a new pipelined connection."""
        if current is not None and current.endpoint == endpoint:
            return current
        if current is not None:
            current.close()
        try:
            context = self.tls_context() if endpoint.startswith("https:") else None
            return PipelinedConnection(endpoint, context, self._config.call_timeout)
        except PipelineError as exc:
            raise MesosConnectionError(f"{what}: {exc}") from None

    def pipeline_headers(self, stream_id: str) -> dict[str, str]:
        headers = {"Content-Type": "application/json", "Mesos-Stream-Id": stream_id}
        if self._config.credentials is not None:
            headers["Authorization"] = self._config.credentials.basic_header()
        return headers
