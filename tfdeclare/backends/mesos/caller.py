"""The scheduler client's calls to the master: the scheduler API and the operator API.

This module owns ``Caller``: one call at a time on the keep-alive connection (framework id and
``Mesos-Stream-Id`` added, 307s followed, 503 retried a few times, any other status a typed
error of ``errors.py``), bursts of ACCEPTs and of ACKNOWLEDGEs HTTP/1.1-pipelined on their own
connections (each under its own lock, so neither holds up the other), and the operator API's
``GET_AGENTS`` and ``GET_QUOTA`` on the leader the calls go to. Calls may be made from any
thread, handler callbacks included.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import httpx

from tfdeclare.backends.mesos import calls
from tfdeclare.backends.mesos.errors import (
    ClientStoppedError,
    MesosConnectionError,
    MesosError,
    NotSubscribedError,
    TooManyRedirectsError,
    error_for_status,
)
from tfdeclare.backends.mesos.info import FrameworkInfo
from tfdeclare.backends.mesos.leader import resolve_redirect
from tfdeclare.backends.mesos.pipeline import PipelinedConnection, PipelineError
from tfdeclare.backends.mesos.readonly import agents_of, operator_answer, operator_url, quota_of
from tfdeclare.backends.mesos.session import Session, log
from tfdeclare.backends.mesos.transport import Transport, dump

JSON = dict[str, Any]


class Caller:
    """The calls of one client (see the module docstring); ``SchedulerClient`` exposes them."""

    def __init__(self, session: Session, transport: Transport) -> None:
        self._session = session
        self._transport = transport
        self._pipeline: PipelinedConnection | None = None  # ACKNOWLEDGEs (under ack_lock)
        self._launches: PipelinedConnection | None = None  # ACCEPTs (under call_lock)

    def close(self) -> None:
        """Close the connections, each after the call or acknowledgement in flight on it."""
        session = self._session
        with session.call_lock:
            self._transport.close()
            if self._launches is not None:
                self._launches.close()
        with session.ack_lock:
            if self._pipeline is not None:
                self._pipeline.close()

    def call(self, body: JSON, expect: tuple[int, ...] = (202,)) -> httpx.Response:
        """Send one non-SUBSCRIBE call (framework id and stream id are added); follow 307s,
        retry 503 a few times; raise a typed MesosError for any other status."""
        session, config = self._session, self._session.config
        call_type = str(body.get("type"))
        with session.call_lock:
            if session.terminal is not None:
                raise session.terminal
            stream_id, framework_id = session.stream_id, session.framework.id
            client = self._transport.calls
            if stream_id is None or framework_id is None or client is None:
                raise NotSubscribedError(f"{call_type}: not subscribed to a Mesos master")
            content = dump({**body, "framework_id": {"value": framework_id}})
            headers = {"Content-Type": "application/json", "Mesos-Stream-Id": stream_id}
            redirects = retries = 0
            while True:
                endpoint = session.endpoint
                if endpoint is None:
                    raise NotSubscribedError(f"{call_type}: no leading master known")
                try:
                    resp = client.post(endpoint, content=content, headers=headers)
                except httpx.HTTPError as exc:
                    raise MesosConnectionError(
                        f"{call_type} to {endpoint}: {type(exc).__name__}: {exc}"
                    ) from exc
                if resp.status_code in expect:
                    return resp
                if resp.status_code == 307:
                    redirects += 1
                    if redirects > config.max_redirects:
                        raise TooManyRedirectsError(307, "too many redirects", call_type)
                    session.move_to(resolve_redirect(endpoint, resp.headers.get("Location")))
                    log.info("%s redirected to %s", call_type, session.endpoint)
                    continue
                if resp.status_code == 503 and retries < config.call_503_retries:
                    delay = min(config.backoff_cap, config.backoff_initial * 2**retries)
                    retries += 1
                    log.warning(
                        "%s: master unavailable (503 %s); retrying in %.2fs", call_type, resp.text, delay
                    )
                    if session.stop.wait(delay):
                        raise ClientStoppedError(f"{call_type}: the client was stopped")
                    continue
                raise error_for_status(resp.status_code, resp.text, call_type)

    def launch_many(
        self, launches: Sequence[tuple[Sequence[str], Sequence[JSON], float | None]]
    ) -> list[MesosError | None]:
        """ACCEPTs with one LAUNCH each, pipelined; see ``SchedulerClient.launch_many``."""
        bodies = [calls.accept(o, [calls.launch_operation(i)], r) for o, i, r in launches]
        results: list[MesosError | None] = [None] * len(bodies)
        if not bodies:
            return results
        with self._session.call_lock:
            endpoint, stream_id, framework_id = self._session.subscription("ACCEPT")
            self._launches = self._transport.connection_to(endpoint, self._launches, "ACCEPT")
            framework = {"value": framework_id}
            contents = [dump({**body, "framework_id": framework}) for body in bodies]
            try:
                statuses = self._launches.post_many(contents, self._transport.pipeline_headers(stream_id))
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

    def acknowledge_many(self, acks: Sequence[tuple[str, str, str]]) -> int:
        """ACKNOWLEDGEs, pipelined 256 at a time; see ``SchedulerClient.acknowledge_many``."""
        if not acks:
            return 0
        session = self._session
        with session.ack_lock:
            with session.call_lock:  # a consistent endpoint, stream id and framework id
                endpoint, stream_id, framework_id = session.subscription("ACKNOWLEDGE")
            self._pipeline = self._transport.connection_to(endpoint, self._pipeline, "ACKNOWLEDGE")
            headers = self._transport.pipeline_headers(stream_id)
            framework = {"value": framework_id}
            bodies = [dump({**calls.acknowledge(a, t, u), "framework_id": framework}) for a, t, u in acks]
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

    def update_framework(self, info: FrameworkInfo, suppressed_roles: Sequence[str]) -> None:
        """UPDATE_FRAMEWORK (synchronous, 200); the info and roles of the next SUBSCRIBE too."""
        session = self._session
        with session.call_lock:
            info = info.with_id(session.framework.id)
            self.call(calls.update_framework(info, suppressed_roles), expect=(200,))
            session.set_framework(info, tuple(suppressed_roles))

    def get_agents(self) -> list[JSON]:
        return agents_of(self._operator("GET_AGENTS"))

    def get_quota(self) -> dict[str, dict[str, float]]:
        return quota_of(self._operator("GET_QUOTA"))

    def _operator(self, call_type: str) -> JSON:
        """One call of the master's operator API (``/api/v1``, JSON) on the leader this client
        calls; its answer's body. Raises ``MesosError``."""
        with self._session.call_lock:
            endpoint, _, _ = self._session.subscription(call_type)
            client = self._transport.calls
            assert client is not None
            url = operator_url(endpoint)
            try:
                resp = client.post(
                    url,
                    content=dump({"type": call_type}),
                    headers={"Content-Type": "application/json", "Accept": "application/json"},
                )
            except httpx.HTTPError as exc:
                raise MesosConnectionError(f"{call_type} to {url}: {type(exc).__name__}: {exc}") from exc
        return operator_answer(resp, call_type)
