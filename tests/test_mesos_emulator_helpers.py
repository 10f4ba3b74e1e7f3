"""Test-side helpers for the emulator conformance suite: a minimal raw subscriber.

This is deliberately *not* a Mesos client library: it is the smallest thing that drives
the wire protocol from tests (httpx streaming + a bytes RecordIO reader), so that the
suite checks the emulator, not a client. tfdeclare's real client lives in
``tfdeclare/backends/mesos``.
"""

from __future__ import annotations

import base64
import contextlib
import getpass
import json
import socket
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import httpx
import pytest

from tests.mesos_emulator import Emulator

FAST = {
    "heartbeat_interval": 0.2,
    "allocation_interval": 0.02,
    "update_retry_interval": 0.2,
    "update_retry_max": 0.4,
    "agent_ping_timeout": 0.05,
    "max_agent_ping_timeouts": 3,
    "kill_grace_period": 1.0,
    "agent_resources": "cpus:4;mem:8192;disk:1024;ports:[31000-31009]",
}


def records(chunks: Iterator[bytes]) -> Iterator[bytes]:
    """Split a de-chunked byte stream into RecordIO payloads (bytes, never text)."""
    buf = bytearray()
    for chunk in chunks:
        buf += chunk
        while (newline := buf.find(b"\n")) >= 0:
            end = newline + 1 + int(buf[:newline])
            if len(buf) < end:
                break
            yield bytes(buf[newline + 1 : end])
            del buf[:end]


# Tasks run as the framework's user, which must exist on the (emulated) agents: this machine's.
TEST_USER = getpass.getuser()


def framework_info(name: str = "test", **extra: Any) -> dict[str, Any]:
    info: dict[str, Any] = {"user": TEST_USER, "name": name}
    capabilities = extra.pop("capabilities", None)
    if capabilities:
        info["capabilities"] = [{"type": c} for c in capabilities]
    info.update(extra)
    return info


class Subscriber:
    """One subscription stream plus a call client; events are kept for assertions."""

    def __init__(self, url: str, info: dict[str, Any], auth: tuple[str, str] | None = None) -> None:
        self.url = url.rstrip("/") + "/api/v1/scheduler"
        self.info = info
        self.auth = auth
        self.events: list[dict[str, Any]] = []
        self.raw: list[bytes] = []
        self._taken: set[int] = set()
        self._cond = threading.Condition()
        self.closed = False
        self.stream_id: str | None = None
        self.framework_id: str | None = info.get("id", {}).get("value")
        self.response_headers: httpx.Headers | None = None
        self.status_code: int | None = None
        self.body: bytes = b""
        self.calls = httpx.Client(timeout=5.0, auth=auth)
        self._stream_client: httpx.Client | None = None
        self._thread: threading.Thread | None = None
        self._socket: socket.socket | None = None

    # -- subscription ---------------------------------------------------------------
    def subscribe(
        self, *, headers: dict[str, str] | None = None, body: dict[str, Any] | None = None
    ) -> Subscriber:
        call = body or {"type": "SUBSCRIBE", "subscribe": {"framework_info": self.info}}
        if body is None and "id" in self.info:
            call["framework_id"] = self.info["id"]
        ready = threading.Event()
        self._stream_client = httpx.Client(timeout=httpx.Timeout(5.0, read=30.0), auth=self.auth)
        request_headers = {"Accept": "application/json", **(headers or {})}

        def run() -> None:
            assert self._stream_client is not None
            try:
                with self._stream_client.stream(
                    "POST", self.url, json=call, headers=request_headers
                ) as response:
                    self._socket = response.extensions["network_stream"].get_extra_info("socket")
                    self.status_code = response.status_code
                    self.response_headers = response.headers
                    self.stream_id = response.headers.get("Mesos-Stream-Id")
                    if response.status_code != 200:
                        self.body = response.read()
                        ready.set()
                        return
                    ready.set()
                    for payload in records(response.iter_raw()):
                        event = json.loads(payload.decode("utf-8"))
                        with self._cond:
                            self.raw.append(payload)
                            self.events.append(event)
                            if event.get("type") == "SUBSCRIBED":
                                self.framework_id = event["subscribed"]["framework_id"]["value"]
                            self._cond.notify_all()
            except (httpx.HTTPError, OSError):
                pass
            finally:
                ready.set()
                with self._cond:
                    self.closed = True
                    self._cond.notify_all()

        self._thread = threading.Thread(target=run, daemon=True)
        self._thread.start()
        assert ready.wait(5.0), "no response to SUBSCRIBE"
        return self

    def close(self) -> None:
        if self._socket is not None:
            with contextlib.suppress(OSError):
                self._socket.shutdown(socket.SHUT_RDWR)
        if self._stream_client is not None:
            self._stream_client.close()
        if self._thread is not None:
            self._thread.join(timeout=5.0)
        self.calls.close()

    def wait_closed(self, timeout: float = 3.0) -> None:
        with self._cond:
            assert self._cond.wait_for(lambda: self.closed, timeout), "stream did not close"

    # -- events -----------------------------------------------------------------------
    def next(
        self,
        kind: str | None = None,
        predicate: Callable[[dict[str, Any]], bool] | None = None,
        timeout: float = 3.0,
    ) -> dict[str, Any]:
        """The first not-yet-taken event of ``kind`` matching ``predicate``."""

        def find() -> int | None:
            for index, event in enumerate(self.events):
                if index in self._taken:
                    continue
                if kind is not None and event.get("type") != kind:
                    continue
                if predicate is not None and not predicate(event):
                    continue
                return index
            return None

        with self._cond:
            found: list[int] = []

            def ready() -> bool:
                index = find()
                if index is not None:
                    found.append(index)
                    return True
                return False

            if not self._cond.wait_for(ready, timeout):
                seen = [e.get("type") for e in self.events]
                raise AssertionError(f"no {kind} event within {timeout}s; saw {seen}")
            self._taken.add(found[0])
            return self.events[found[0]]

    def update(self, task_id: str, state: str | None = None, timeout: float = 5.0) -> dict[str, Any]:
        """Next UPDATE status for a task (optionally in a given state)."""

        def match(event: dict[str, Any]) -> bool:
            status = event["update"]["status"]
            return status["task_id"]["value"] == task_id and (state is None or status["state"] == state)

        return dict(self.next("UPDATE", match, timeout)["update"]["status"])

    def all(self, kind: str) -> list[dict[str, Any]]:
        with self._cond:
            return [e for e in self.events if e.get("type") == kind]

    def offers(self, count: int = 1, timeout: float = 3.0) -> list[dict[str, Any]]:
        """Collect at least ``count`` offers from OFFERS events."""
        out: list[dict[str, Any]] = []
        deadline = time.monotonic() + timeout
        while len(out) < count:
            remaining = max(0.01, deadline - time.monotonic())
            out.extend(self.next("OFFERS", timeout=remaining)["offers"]["offers"])
        return out

    def no_event(
        self, kind: str, within: float, predicate: Callable[[dict[str, Any]], bool] | None = None
    ) -> None:
        try:
            event = self.next(kind, predicate, timeout=within)
        except AssertionError:
            return
        raise AssertionError(f"unexpected {kind} event: {event}")

    # -- calls --------------------------------------------------------------------------
    def call(
        self,
        kind: str,
        body: dict[str, Any] | None = None,
        *,
        stream_id: str | bool | None = True,
        framework_id: str | bool | None = True,
        headers: dict[str, str] | None = None,
    ) -> httpx.Response:
        payload: dict[str, Any] = {"type": kind}
        fid = self.framework_id if framework_id is True else framework_id
        if fid:
            payload["framework_id"] = {"value": fid}
        if body is not None:
            payload[kind.lower()] = body
        request_headers = dict(headers or {})
        sid = self.stream_id if stream_id is True else stream_id
        if sid:
            request_headers["Mesos-Stream-Id"] = str(sid)
        return self.calls.post(self.url, json=payload, headers=request_headers)

    def accept(
        self,
        offer_ids: list[str],
        tasks: list[dict[str, Any]] | None = None,
        refuse_seconds: float | None = None,
        operations: list[dict[str, Any]] | None = None,
    ) -> httpx.Response:
        body: dict[str, Any] = {"offer_ids": [{"value": o} for o in offer_ids]}
        if operations is not None:
            body["operations"] = operations
        elif tasks is not None:
            body["operations"] = [{"type": "LAUNCH", "launch": {"task_infos": tasks}}]
        if refuse_seconds is not None:
            body["filters"] = {"refuse_seconds": refuse_seconds}
        response = self.call("ACCEPT", body)
        assert response.status_code == 202, response.text
        return response

    def decline(self, offer_ids: list[str], refuse_seconds: float | None = None) -> None:
        body: dict[str, Any] = {"offer_ids": [{"value": o} for o in offer_ids]}
        if refuse_seconds is not None:
            body["filters"] = {"refuse_seconds": refuse_seconds}
        response = self.call("DECLINE", body)
        assert response.status_code == 202, response.text

    def ack(self, status: dict[str, Any]) -> None:
        assert "uuid" in status, "master-generated updates must not be acknowledged"
        response = self.call(
            "ACKNOWLEDGE",
            {"agent_id": status["agent_id"], "task_id": status["task_id"], "uuid": status["uuid"]},
        )
        assert response.status_code == 202, response.text

    def kill(self, task_id: str, agent_id: str | None = None, grace: float | None = None) -> None:
        body: dict[str, Any] = {"task_id": {"value": task_id}}
        if agent_id is not None:
            body["agent_id"] = {"value": agent_id}
        if grace is not None:
            body["kill_policy"] = {"grace_period": {"nanoseconds": int(grace * 1e9)}}
        response = self.call("KILL", body)
        assert response.status_code == 202, response.text

    def reconcile(self, tasks: list[tuple[str, str | None]]) -> None:
        entries = []
        for task_id, agent_id in tasks:
            entry: dict[str, Any] = {"task_id": {"value": task_id}}
            if agent_id is not None:
                entry["agent_id"] = {"value": agent_id}
            entries.append(entry)
        response = self.call("RECONCILE", {"tasks": entries})
        assert response.status_code == 202, response.text


def command_task(
    task_id: str,
    offer: dict[str, Any],
    command: str = "true",
    *,
    cpus: float = 0.5,
    mem: float = 64,
    ports: list[int] | None = None,
    gpus: float | None = None,
    shell: bool = True,
    arguments: list[str] | None = None,
    env: dict[str, str] | None = None,
    labels: dict[str, str] | None = None,
    extra: dict[str, Any] | None = None,
) -> dict[str, Any]:
    resources: list[dict[str, Any]] = [
        {"name": "cpus", "type": "SCALAR", "scalar": {"value": cpus}},
        {"name": "mem", "type": "SCALAR", "scalar": {"value": mem}},
    ]
    if gpus is not None:
        resources.append({"name": "gpus", "type": "SCALAR", "scalar": {"value": gpus}})
    if ports:
        resources.append(
            {"name": "ports", "type": "RANGES", "ranges": {"range": [{"begin": p, "end": p} for p in ports]}}
        )
    cmd: dict[str, Any] = {"shell": shell, "value": command}
    if arguments is not None:
        cmd["arguments"] = arguments
    if env:
        cmd["environment"] = {"variables": [{"name": k, "value": v} for k, v in env.items()]}
    task: dict[str, Any] = {
        "name": f"task {task_id}",
        "task_id": {"value": task_id},
        "agent_id": offer["agent_id"],
        "resources": resources,
        "command": cmd,
    }
    if labels:
        task["labels"] = {"labels": [{"key": k, "value": v} for k, v in labels.items()]}
    task.update(extra or {})
    return task


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


@pytest.fixture
def emulator() -> Iterator[Emulator]:
    with Emulator(**FAST) as emu:
        yield emu
        assert emu.check_invariants() == []


@pytest.fixture
def subscribers(emulator: Emulator) -> Iterator[list[Subscriber]]:
    made: list[Subscriber] = []
    yield made
    for sub in made:
        sub.close()


def subscribe(emulator: Emulator, made: list[Subscriber], name: str = "test", **info: Any) -> Subscriber:
    sub = Subscriber(emulator.url, framework_info(name, **info)).subscribe()
    made.append(sub)
    sub.next("SUBSCRIBED")
    return sub
