"""The scheduler client over real HTTP against a scripted master (tests/mesos_script_server.py).

Numbers in brackets refer to the invariants of the Mesos reference, section 6.3.
"""

from __future__ import annotations

import base64
import itertools
import logging
import random
import shutil
import ssl
import subprocess
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest

from tests.components import missing
from tests.mesos_script_server import Reply, Request, ScriptServer, Stream, new_uuid
from tests.waiting import wait_until
from tfdeclare.backends.mesos import (
    AuthenticationError,
    BadRequestError,
    BaseHandler,
    ClientConfig,
    ClientStoppedError,
    ForbiddenError,
    FrameworkInfo,
    FrameworkRemovedError,
    MesosConnectionError,
    MesosError,
    NotSubscribedError,
    Offer,
    SchedulerClient,
    ServerError,
    SubscribeRefusedError,
    SubscribeTimeoutError,
    TaskStatus,
    TerminalError,
    load_credentials,
)
from tfdeclare.backends.mesos import client as client_module
from tfdeclare.backends.mesos.errors import MethodNotAllowedError, NotFoundError, UnsupportedMediaTypeError

FAST: dict[str, Any] = {
    "backoff_initial": 0.05,
    "backoff_cap": 0.2,
    "backoff_jitter": 0.0,
    "connect_timeout": 2.0,
    "call_timeout": 5.0,
    "subscribe_timeout": 5.0,
}


class Recorder(BaseHandler):
    """Records every callback; optional hooks run inside the callbacks."""

    def __init__(self) -> None:
        self.events: list[tuple[str, tuple[Any, ...]]] = []
        self.cond = threading.Condition()
        self.on_update: Callable[[TaskStatus], None] | None = None
        self.on_subscribed: Callable[[str], None] | None = None

    def _add(self, name: str, *args: Any) -> None:
        with self.cond:
            self.events.append((name, args))
            self.cond.notify_all()

    def named(self, name: str) -> list[tuple[Any, ...]]:
        with self.cond:
            return [args for n, args in self.events if n == name]

    def wait(self, name: str, count: int = 1, timeout: float = 5.0) -> list[tuple[Any, ...]]:
        with self.cond:
            ok = self.cond.wait_for(lambda: len([n for n, _ in self.events if n == name]) >= count, timeout)
        assert ok, f"{name} x{count} not seen; events: {[n for n, _ in self.events]}"
        return self.named(name)

    def subscribed(self, framework_id: str, heartbeat_interval: float, master_info: dict[str, Any]) -> None:
        self._add("subscribed", framework_id, heartbeat_interval, master_info)
        if self.on_subscribed:
            self.on_subscribed(framework_id)

    def offers(self, offers: Sequence[Offer]) -> None:
        self._add("offers", list(offers))

    def rescind(self, offer_id: str) -> None:
        self._add("rescind", offer_id)

    def update(self, status: TaskStatus) -> None:
        if self.on_update:
            self.on_update(status)
        self._add("update", status)

    def failure(self, agent_id: str | None, executor_id: str | None, status: int | None) -> None:
        self._add("failure", agent_id, executor_id, status)

    def error(self, message: str) -> None:
        self._add("error", message)

    def disconnected(self, reason: str) -> None:
        self._add("disconnected", reason)

    def terminated(self, error: TerminalError) -> None:
        self._add("terminated", error)

    def other(self, event: dict[str, Any]) -> None:
        self._add("other", event)


@pytest.fixture
def server() -> Iterator[ScriptServer]:
    srv = ScriptServer()
    yield srv
    srv.close()


@pytest.fixture
def make_client() -> Iterator[Callable[..., tuple[SchedulerClient, Recorder]]]:
    clients: list[SchedulerClient] = []

    def make(
        master: str, framework: FrameworkInfo | None = None, **overrides: Any
    ) -> tuple[SchedulerClient, Recorder]:
        fw = framework or FrameworkInfo(user="svc", name="tfdeclare-test")
        handler = Recorder()
        client = SchedulerClient(ClientConfig(master=master, framework=fw, **{**FAST, **overrides}), handler)
        clients.append(client)
        client.start()
        return client, handler

    yield make
    for c in clients:
        c.stop()


def _gaps(reqs: list[Request]) -> list[float]:
    return [b.at - a.at for a, b in itertools.pairwise(reqs)]


# --------------------------------------------------------------- subscribe and calls


def test_subscribe_request_shape_and_resubscribe_with_id(server: ScriptServer, make_client: Any) -> None:
    """[2] no Mesos-Stream-Id on SUBSCRIBE; top-level framework_id == framework_info.id."""
    fw = FrameworkInfo(user="svc", name="tfd", roles=("ml",), principal="tfd", failover_timeout=3600.0)
    client, handler = make_client(server.url, fw)
    assert client.wait_subscribed(5) == "fw-1"
    first = server.subscribes()[0]
    assert first.method == "POST" and first.path == "/api/v1/scheduler"
    assert first.headers["accept"] == "application/json"
    assert first.headers["content-type"] == "application/json"
    assert "mesos-stream-id" not in first.headers
    body = first.json
    assert "framework_id" not in body and "id" not in body["subscribe"]["framework_info"]
    fi = body["subscribe"]["framework_info"]
    assert fi["user"] == "svc" and fi["roles"] == ["ml"] and fi["failover_timeout"] == 3600.0
    assert fi["checkpoint"] is True and {"type": "MULTI_ROLE"} in fi["capabilities"]
    assert handler.named("subscribed")[0][:2] == ("fw-1", 15.0)

    server.streams[0].abort()
    handler.wait("disconnected")
    client.wait_subscribed(5)
    second = server.subscribes()[1]
    assert "mesos-stream-id" not in second.headers
    assert (
        second.json["framework_id"] == second.json["subscribe"]["framework_info"]["id"] == {"value": "fw-1"}
    )
    assert second.conn != first.conn


def test_stream_id_on_every_call_on_a_separate_connection(server: ScriptServer, make_client: Any) -> None:
    """[1, 6] every call carries the current stream id and framework id, never on the stream's
    connection; after a re-subscribe only the new stream id is used."""
    client, handler = make_client(server.url)
    client.wait_subscribed(5)
    s1 = server.streams[0]
    client.revive(["ml"])
    client.suppress()
    client.reconcile()
    client.kill("t1", "agent-1", grace_period=1.5)
    first_calls = server.calls()
    assert [r.type for r in first_calls] == ["REVIVE", "SUPPRESS", "RECONCILE", "KILL"]
    for r in first_calls:
        assert r.headers["mesos-stream-id"] == s1.stream_id
        assert r.json["framework_id"] == {"value": "fw-1"}
        assert r.conn != s1.request.conn  # type: ignore[union-attr]
    assert len({r.conn for r in first_calls}) == 1  # one keep-alive connection
    assert first_calls[3].json["kill"]["kill_policy"] == {"grace_period": {"nanoseconds": 1_500_000_000}}

    # The second subscription is held open without SUBSCRIBED: calls are refused meanwhile.
    held = Stream()
    server.on_subscribe = lambda req: held
    s1.end()
    handler.wait("disconnected")
    server.wait_stream(2)
    with pytest.raises(NotSubscribedError):
        client.revive()
    assert not client.connected
    held.subscribed("fw-1").heartbeat()
    client.wait_subscribed(5)
    client.decline(["o1"], refuse_seconds=60)
    later = server.calls()[len(first_calls) :]
    assert [r.type for r in later] == ["DECLINE"]
    assert later[0].headers["mesos-stream-id"] == held.stream_id != s1.stream_id
    assert later[0].json["decline"]["filters"] == {"refuse_seconds": 60.0}


def test_events_are_dispatched_in_order(server: ScriptServer, make_client: Any) -> None:
    client, handler = make_client(server.url)
    client.wait_subscribed(5)
    offer = {"id": {"value": "o1"}, "agent_id": {"value": "a1"}, "hostname": "h1"}
    stream = server.streams[0]
    stream.event({"type": "OFFERS", "offers": {"offers": [{"hostname": "no-id"}, offer]}})
    stream.event({"type": "RESCIND", "rescind": {"offer_id": {"value": "o1"}}})
    stream.event({"type": "FAILURE", "failure": {"agent_id": {"value": "a1"}}})
    stream.event({"type": "MESSAGE", "message": {"data": "aGk="}})
    handler.wait("other")
    names = [n for n, _ in handler.events]
    assert names == ["subscribed", "offers", "rescind", "failure", "other"]
    assert [o.id for o in handler.named("offers")[0][0]] == ["o1"]  # the malformed one is skipped
    assert handler.named("rescind") == [("o1",)]
    assert handler.named("failure") == [("a1", None, None)]


@pytest.mark.parametrize("chunking", ["one-byte", "random", "coalesced"])
def test_non_ascii_events_under_any_http_chunking(
    server: ScriptServer, make_client: Any, chunking: str
) -> None:
    """[3] byte-exact RecordIO over a real chunked response, multi-byte UTF-8 payloads."""
    messages = ["Größe überschritten", "任务失败 ✗", "🚀" * 50, "plain"]
    stream = Stream()
    server.on_subscribe = lambda req: stream
    client, handler = make_client(server.url)
    server.wait_stream(1)
    from tests.mesos_script_server import record

    data = record(
        {
            "type": "SUBSCRIBED",
            "subscribed": {"framework_id": {"value": "fw-ü"}, "heartbeat_interval_seconds": 15},
        }
    )
    for i, msg in enumerate(messages):
        data += record(
            {
                "type": "UPDATE",
                "update": {"status": {"task_id": {"value": f"t{i}"}, "state": "TASK_FAILED", "message": msg}},
            }
        )
    if chunking == "one-byte":
        chunks = [data[i : i + 1] for i in range(len(data))]
    elif chunking == "random":
        rng = random.Random(7)
        cuts = sorted(rng.sample(range(1, len(data)), 40))
        chunks = [data[a:b] for a, b in zip([0, *cuts], [*cuts, len(data)], strict=True)]
        assert any(c[:1].isdigit() and b"\n" not in c[:3] for c in chunks)  # some split inside a prefix
    else:
        chunks = [data]
    stream.raw(*chunks)
    handler.wait("update", len(messages))
    assert client.framework_id == "fw-ü"
    assert [s[0].message for s in handler.named("update")] == messages
    assert not handler.named("disconnected")


# -------------------------------------------------------------- redirects and 503


def test_redirect_followed_for_subscribe_and_calls(server: ScriptServer, make_client: Any) -> None:
    """[5] 307 with a protocol-relative Location, on SUBSCRIBE and on calls."""
    standby = ScriptServer()
    third = ScriptServer()
    try:
        standby.on_subscribe = lambda req: Reply(307, headers={"Location": server.location})
        standby.on_call = lambda req: Reply(307, headers={"Location": server.location})
        client, _ = make_client(standby.url)
        client.wait_subscribed(5)
        assert len(standby.subscribes()) == 1 and len(server.subscribes()) == 1
        assert client.endpoint == server.url + "/api/v1/scheduler"
        client.revive()
        assert [r.type for r in server.calls()] == ["REVIVE"]

        third.on_subscribe = lambda req: Reply(500)
        server.on_call = lambda req: Reply(307, headers={"Location": third.location})
        client.suppress()
        assert [r.type for r in server.calls()] == ["REVIVE", "SUPPRESS"]
        (moved,) = third.calls()
        assert moved.type == "SUPPRESS"
        assert moved.headers["mesos-stream-id"] == server.streams[0].stream_id
        assert client.endpoint == third.url + "/api/v1/scheduler"
    finally:
        standby.close()
        third.close()


def test_503_on_subscribe_is_retried_with_backoff(server: ScriptServer, make_client: Any) -> None:
    answers = iter([Reply(503, b"No leader elected"), Reply(503, b"Master has not finished recovery")])
    server.on_subscribe = lambda req: next(answers, None) or server.default_subscribe(req)
    client, _ = make_client(server.url)
    client.wait_subscribed(5)
    subs = server.subscribes()
    assert len(subs) == 3
    gaps = _gaps(subs)
    assert gaps[0] >= 0.045 and gaps[1] >= 0.095  # 0.05 then 0.1: exponential, no tight loop
    assert client.last_error is None


def test_503_on_calls_retried_then_typed(server: ScriptServer, make_client: Any) -> None:
    client, _ = make_client(server.url, call_503_retries=2)
    client.wait_subscribed(5)
    answers = iter([Reply(503, b"No leader elected")])
    server.on_call = lambda req: next(answers, None) or Reply(202)
    client.revive()
    assert [r.type for r in server.calls()] == ["REVIVE", "REVIVE"]
    server.on_call = lambda req: Reply(503, b"No leader elected")
    with pytest.raises(ServerError, match="No leader elected") as info:
        client.revive()
    assert info.value.status == 503
    assert len(server.calls()) == 5  # 1 + 2 retries


def test_candidate_masters_are_tried_in_turn(server: ScriptServer, make_client: Any) -> None:
    dead = ScriptServer()
    dead_url = dead.url
    dead.close()
    client, _ = make_client(f"{dead_url},{server.url}")
    client.wait_subscribed(5)
    assert client.endpoint == server.url + "/api/v1/scheduler"


# ------------------------------------------------------------------- errors, auth


@pytest.mark.parametrize(
    ("status", "cls"),
    [
        (400, BadRequestError),
        (401, AuthenticationError),
        (403, ForbiddenError),
        (404, NotFoundError),
        (405, MethodNotAllowedError),
        (415, UnsupportedMediaTypeError),
        (500, ServerError),
    ],
)
def test_call_errors_are_typed(server: ScriptServer, make_client: Any, status: int, cls: type) -> None:
    client, _ = make_client(server.url)
    client.wait_subscribed(5)
    server.on_call = lambda req: Reply(status, b"Framework is not subscribed")
    with pytest.raises(cls, match=f"KILL: HTTP {status}: Framework is not subscribed"):
        client.kill("t1")


def test_basic_auth_on_every_request_and_secret_never_shown(
    server: ScriptServer, make_client: Any, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    secret = "pa55-w0rd-XYZ"
    encoded = base64.b64encode(f"tfd:{secret}".encode()).decode()
    monkeypatch.setenv("TFD_TEST_SECRET", secret)
    creds = load_credentials("tfd", secret_env="TFD_TEST_SECRET")
    caplog.set_level(logging.DEBUG)
    client, _ = make_client(server.url, credentials=creds)
    client.wait_subscribed(5)
    client.revive()
    client.acknowledge_many([("a", "t", new_uuid())])
    server.on_call = lambda req: Reply(401, b"")
    with pytest.raises(AuthenticationError) as info:
        client.revive()
    for req in server.requests:
        assert req.headers["authorization"] == f"Basic {encoded}"
    shown = caplog.text + repr(client._config) + str(info.value) + repr(info.value) + repr(client.last_error)
    assert secret not in shown and encoded not in shown
    assert "401" in str(info.value)  # the refused call says so, without the secret


@pytest.mark.parametrize(("status", "cls"), [(401, AuthenticationError), (403, ForbiddenError)])
def test_a_refused_subscribe_stops_the_client_at_once(
    server: ScriptServer, make_client: Any, status: int, cls: type
) -> None:
    """401 (credentials refused) and 403 (the principal may not register) never change by
    asking again: the client stops at once with the typed cause, instead of retrying until
    the subscribe timeout (issue 33: five retries, then a timeout)."""
    server.on_subscribe = lambda req: Reply(status, b"denied", {"WWW-Authenticate": 'Basic realm="x"'})
    client, _ = make_client(server.url)
    with pytest.raises(SubscribeRefusedError) as info:  # not SubscribeTimeoutError: not retried
        client.wait_subscribed(10)
    assert len(server.subscribes()) == 1, "asked once"
    assert isinstance(info.value.cause, cls) and info.value.cause.status == status
    assert isinstance(client.last_error, cls)
    assert len([r for r in server.requests if r.type == "SUBSCRIBE"]) == 1, "asked once"
    with pytest.raises(SubscribeRefusedError):
        client.revive()


# ------------------------------------------------------- watchdog, backoff, ERROR


def test_heartbeat_watchdog_drops_a_silent_stream(server: ScriptServer, make_client: Any) -> None:
    """[4] no bytes for k x heartbeat_interval: drop and re-subscribe, with backoff."""
    server.on_subscribe = lambda req: Stream().subscribed("fw-1", interval=0.05).heartbeat()
    client, handler = make_client(server.url, heartbeat_miss_factor=3.0)
    client.wait_subscribed(5)
    first = server.wait_stream(1)
    second = server.wait_stream(2)
    assert first.closed.wait(2)
    silence = second.request.at - first.last_write  # type: ignore[union-attr]
    assert silence >= 0.15 + 0.05 - 0.01  # 3 x 0.05 s of silence, then the first backoff step
    assert "heartbeat" in handler.named("disconnected")[0][0]
    assert second.request.json["framework_id"] == {"value": "fw-1"}  # type: ignore[union-attr]


def test_heartbeats_keep_the_stream(server: ScriptServer, make_client: Any) -> None:
    # Without heartbeats the stream would be dropped after 3 x 0.5 s; with one every 0.05 s a
    # loaded machine cannot make a gap of 1.5 s (with an interval of 0.1 s it could).
    def sub(req: Request) -> Stream:
        stream = Stream().subscribed("fw-1", interval=0.5).heartbeat()
        stream.heartbeats(0.05)
        return stream

    server.on_subscribe = sub
    client, handler = make_client(server.url, heartbeat_miss_factor=3.0)
    client.wait_subscribed(5)
    stream = server.wait_stream(1)
    # heartbeats sent for longer than the 1.5 s without a byte after which it would drop the stream
    wait_until(
        lambda: stream.last_write - stream.request.at >= 2.0,  # type: ignore[union-attr]
        stop=lambda: "the client dropped the stream" if stream.closed.is_set() else None,
    )
    assert len(server.subscribes()) == 1 and not handler.named("disconnected")


def test_slow_handler_does_not_trip_the_watchdog(server: ScriptServer, make_client: Any) -> None:
    server.on_subscribe = lambda req: Stream().subscribed("fw-1", interval=0.05)
    client, handler = make_client(server.url, heartbeat_miss_factor=2.0)
    client.wait_subscribed(5)
    released = threading.Event()
    handler.on_update = lambda status: released.wait(30)
    stream = server.streams[0]
    before = stream.last_write
    stream.update("t1", "TASK_RUNNING", None).heartbeat()
    # the handler returns once the stream has been silent for 4x the watchdog timeout (0.1 s)
    wait_until(lambda: stream.last_write > before and time.monotonic() - stream.last_write >= 0.4)
    released.set()
    handler.wait("update")
    assert len(server.subscribes()) == 1


def test_no_tight_loop_after_error_events(server: ScriptServer, make_client: Any) -> None:
    """[4] ERROR then close, again and again: re-subscribe with capped exponential backoff."""

    def refuse(req: Request) -> Stream:
        stream = Stream().error("Framework is not authorized to use role 'x'")
        stream.end()
        return stream

    server.on_subscribe = refuse
    client, handler = make_client(server.url)
    server.wait(lambda: len(server.subscribes()) >= 5, timeout=30)  # up to the cap of its backoff
    client.stop()
    subs = server.subscribes()
    gaps = _gaps(subs)
    assert all(g >= 0.045 for g in gaps) and max(gaps) >= 0.19  # 0.05, 0.1, 0.2, 0.2: no tight loop
    assert handler.named("error")[0] == ("Framework is not authorized to use role 'x'",)
    assert not handler.named("subscribed") and not handler.named("terminated")


def test_framework_removed_is_terminal(server: ScriptServer, make_client: Any) -> None:
    """[18] ERROR "Framework has been removed": no loop, a typed terminal condition."""

    def removed(req: Request) -> Stream:
        stream = Stream().error("Framework has been removed")
        stream.end()
        return stream

    server.on_subscribe = removed
    fw = FrameworkInfo(user="svc", name="tfd", id="old-0001")
    client, handler = make_client(server.url, fw)
    with pytest.raises(FrameworkRemovedError, match="Framework has been removed"):
        client.wait_subscribed(5)
    (terminated,) = handler.wait("terminated")
    assert isinstance(terminated[0], FrameworkRemovedError)
    assert isinstance(client.terminal_error, FrameworkRemovedError)
    with pytest.raises(FrameworkRemovedError):
        client.revive()
    (streaming,) = [t for t in client._threads if t.name == "mesos-scheduler-stream"]
    streaming.join(10)
    assert not streaming.is_alive(), "the stream's thread ended: it never subscribes again"
    assert len(server.subscribes()) == 1
    assert not server.calls()


# ------------------------------------------------------------------ acknowledgements


def test_ack_only_after_the_handler_returned(server: ScriptServer, make_client: Any) -> None:
    """[13] ACK after processing, the uuid echoed exactly, once per processed update."""
    client, handler = make_client(server.url)
    client.wait_subscribed(5)
    acks_seen_inside: list[int] = []
    handler.on_update = lambda status: acks_seen_inside.append(len(server.calls("ACKNOWLEDGE")))
    uid = new_uuid()
    stream = server.streams[0]
    stream.update("t1", "TASK_RUNNING", uid)
    server.wait(lambda: len(server.calls("ACKNOWLEDGE")) == 1)
    stream.update("t1", "TASK_RUNNING", uid)  # redelivery: processed again, acked again
    server.wait(lambda: len(server.calls("ACKNOWLEDGE")) == 2)
    assert acks_seen_inside == [0, 1]
    for ack in server.calls("ACKNOWLEDGE"):
        assert ack.json["acknowledge"] == {
            "agent_id": {"value": "agent-1"},
            "task_id": {"value": "t1"},
            "uuid": uid,
        }
        assert ack.headers["mesos-stream-id"] == stream.stream_id


def test_explicit_acknowledgement_leaves_acks_to_the_owner(server: ScriptServer, make_client: Any) -> None:
    """With auto_acknowledge=False the client never acks; the owner's ack goes out as sent."""
    client, handler = make_client(server.url, auto_acknowledge=False)
    client.wait_subscribed(5)
    uid = new_uuid()
    stream = server.streams[0]
    stream.update("t1", "TASK_RUNNING", uid)
    stream.update("t2", "TASK_RUNNING", None)  # barrier
    handler.wait("update", 2)
    # an automatic ACKNOWLEDGE of t1 is answered before the next update is handled
    assert server.calls("ACKNOWLEDGE") == []
    client.acknowledge("agent-1", "t1", uid)
    [ack] = server.calls("ACKNOWLEDGE")
    assert ack.json["acknowledge"]["uuid"] == uid


def test_acknowledge_many_pipelines_on_one_connection(server: ScriptServer, make_client: Any) -> None:
    """[13] Many acks in one burst: each echoes its uuid, carries the current stream id, and
    they share one connection (HTTP/1.1 pipelining)."""
    client, _ = make_client(server.url, auto_acknowledge=False)
    client.wait_subscribed(5)
    acks = [(f"agent-{i % 3}", f"t{i}", new_uuid()) for i in range(300)]
    assert client.acknowledge_many(acks) == 300
    seen = server.calls("ACKNOWLEDGE")
    assert [(a.json["acknowledge"]["task_id"]["value"], a.json["acknowledge"]["uuid"]) for a in seen] == [
        (t, u) for _, t, u in acks
    ]
    assert len({a.conn for a in seen}) == 1
    stream = server.streams[0]
    assert all(a.headers["mesos-stream-id"] == stream.stream_id for a in seen)
    assert all(a.json["framework_id"] == {"value": "fw-1"} for a in seen)
    server.on_call = lambda req: (
        Reply(400, b"bad uuid") if req.json["acknowledge"]["task_id"]["value"] == "x1" else Reply(202)
    )
    assert (
        client.acknowledge_many([("a", "x0", new_uuid()), ("a", "x1", new_uuid()), ("a", "x2", new_uuid())])
        == 2
    )


def test_acknowledge_many_survives_a_closed_connection(server: ScriptServer, make_client: Any) -> None:
    client, _ = make_client(server.url, auto_acknowledge=False)
    client.wait_subscribed(5)
    closing = iter([Reply(202), Reply(202, b"", {"Connection": "close"})])
    server.on_call = lambda req: next(closing, None) or Reply(202)
    with pytest.raises(MesosConnectionError, match="closed the connection"):
        client.acknowledge_many([("a", f"t{i}", new_uuid()) for i in range(5)])
    assert client.acknowledge_many([("a", "again", new_uuid())]) == 1  # a new connection


def test_pipelined_calls_skip_interim_answers(server: ScriptServer, make_client: Any) -> None:
    """A 1xx answer (100 Continue, 103 Early Hints) before the final one is skipped: each
    pipelined call is judged by its final answer, and the answers stay paired with their calls."""
    client, _ = make_client(server.url, auto_acknowledge=False)
    client.wait_subscribed(5)
    server.on_call = lambda req: (
        Reply(400, b"bad uuid", interim=(100,))
        if req.json["acknowledge"]["task_id"]["value"] == "t1"
        else Reply(202, interim=(100, 103))
    )
    acks = [("a", f"t{i}", new_uuid()) for i in range(4)]
    assert client.acknowledge_many(acks) == 3
    assert client.acknowledge_many([("a", "t9", new_uuid())]) == 1  # the connection is still in step
    assert len({a.conn for a in server.calls("ACKNOWLEDGE")}) == 1
    server.on_call = lambda req: Reply(202, interim=(100,))
    launches = [([f"o{i}"], [{"task_id": {"value": f"c{i}"}}], 0.0) for i in range(3)]
    assert client.launch_many(launches) == [None] * 3
    assert _accepted_tasks(server) == ["c0", "c1", "c2"]  # each sent once: no 1xx taken as final


def _accepted_tasks(server: ScriptServer) -> list[str]:
    return [
        info["task_id"]["value"]
        for call in server.calls("ACCEPT")
        for info in call.json["accept"]["operations"][0]["launch"]["task_infos"]
    ]


def test_launch_many_pipelines_in_order_and_types_each_answer(server: ScriptServer, make_client: Any) -> None:
    """A burst of ACCEPTs goes out in order on one connection with the stream id; an ACCEPT
    answered with anything but 202 is sent once more as a plain call and its typed error is
    returned for that launch alone; answers lost with the connection are connection errors."""
    client, _ = make_client(server.url)
    client.wait_subscribed(5)
    launches = [([f"offer-{i}"], [{"task_id": {"value": f"t{i}"}}], 0.0) for i in range(5)]
    assert client.launch_many(launches) == [None] * 5
    seen = server.calls("ACCEPT")
    assert _accepted_tasks(server) == [f"t{i}" for i in range(5)]
    assert len({c.conn for c in seen}) == 1
    assert all(c.headers["mesos-stream-id"] == server.streams[0].stream_id for c in seen)
    assert [c.json["accept"]["offer_ids"] for c in seen] == [[{"value": f"offer-{i}"}] for i in range(5)]

    server.requests.clear()
    server.on_call = lambda req: (
        Reply(400, b"Failed to validate") if "bad" in req.body.decode() else Reply(202)
    )
    mixed = [(["o1"], [{"task_id": {"value": "ok1"}}], 0.0), (["o2"], [{"task_id": {"value": "bad"}}], 0.0)]
    mixed.append((["o3"], [{"task_id": {"value": "ok2"}}], 0.0))
    results = client.launch_many(mixed)
    assert results[0] is None and results[2] is None
    assert isinstance(results[1], BadRequestError) and "Failed to validate" in str(results[1])
    assert _accepted_tasks(server) == ["ok1", "bad", "ok2", "bad"]  # the bad one sent once more

    server.requests.clear()
    closing = iter([Reply(202), Reply(202, b"", {"Connection": "close"})])
    server.on_call = lambda req: next(closing, None) or Reply(202)
    results = client.launch_many([([f"o{i}"], [{"task_id": {"value": f"c{i}"}}], 0.0) for i in range(4)])
    assert results[:2] == [None, None]
    assert all(isinstance(r, MesosConnectionError) for r in results[2:]), results
    assert client.launch_many([(["o9"], [{"task_id": {"value": "again"}}], 0.0)]) == [None]  # new connection


def test_updates_without_uuid_are_never_acknowledged(server: ScriptServer, make_client: Any) -> None:
    client, handler = make_client(server.url)
    client.wait_subscribed(5)
    stream = server.streams[0]
    stream.update("t1", "TASK_LOST", None, source="SOURCE_MASTER", reason="REASON_RECONCILIATION")
    stream.update("t2", "TASK_GONE", "")
    barrier = new_uuid()
    stream.update("t3", "TASK_RUNNING", barrier)
    handler.wait("update", 3)
    # acknowledgements go out in order: one for t1 or t2 would have come before the barrier's
    server.wait(lambda: any(a.json["acknowledge"]["uuid"] == barrier for a in server.calls("ACKNOWLEDGE")))
    assert [a.json["acknowledge"]["uuid"] for a in server.calls("ACKNOWLEDGE")] == [barrier]


def test_handler_exception_means_no_ack_and_no_teardown(server: ScriptServer, make_client: Any) -> None:
    client, handler = make_client(server.url)
    client.wait_subscribed(5)
    failures = iter([True])

    def flaky(status: TaskStatus) -> None:
        if next(failures, False):
            raise ValueError("database is down")

    handler.on_update = flaky
    uid = new_uuid()
    stream = server.streams[0]
    stream.update("t1", "TASK_FINISHED", uid)  # the handler raises: not acknowledged
    stream.update("t2", "TASK_RUNNING", None)  # barrier: the stream is still processed
    handler.wait("update")
    stream.update("t1", "TASK_FINISHED", uid)  # the master redelivers
    barrier = new_uuid()
    stream.update("t3", "TASK_RUNNING", barrier)  # acknowledged after whatever came before it
    server.wait(lambda: len(server.calls("ACKNOWLEDGE")) >= 2)
    assert [r.type for r in server.calls()] == ["ACKNOWLEDGE"] * 2
    assert [a.json["acknowledge"]["uuid"] for a in server.calls("ACKNOWLEDGE")] == [uid, barrier]
    assert client.connected and len(server.subscribes()) == 1


# -------------------------------------------------------------- lifecycle, leader


def test_stop_and_teardown(server: ScriptServer, make_client: Any) -> None:
    """[16] stop() sends nothing; TEARDOWN only through teardown()."""
    client, handler = make_client(server.url)
    client.wait_subscribed(5)
    client.stop()  # aborts the open stream: its threads end, none is left to its join timeout
    assert [t.name for t in client._threads if t.is_alive()] == []
    assert not server.calls()
    assert handler.named("disconnected")
    with pytest.raises(ClientStoppedError):
        client.revive()

    other, _ = make_client(server.url)
    other.wait_subscribed(5)
    other.teardown()
    assert [r.type for r in server.calls()] == ["TEARDOWN"]
    with pytest.raises(ClientStoppedError):
        other.wait_subscribed(1)


def test_calls_from_handler_callbacks(server: ScriptServer, make_client: Any) -> None:
    held = Stream()
    server.on_subscribe = lambda req: held
    client, handler = make_client(server.url)
    handler.on_subscribed = lambda fid: client.reconcile([("t1", "a1")])
    server.wait_stream(1).subscribed("fw-1")
    client.wait_subscribed(5)
    server.wait(lambda: len(server.calls("RECONCILE")) == 1)
    assert server.calls("RECONCILE")[0].json["reconcile"]["tasks"] == [
        {"task_id": {"value": "t1"}, "agent_id": {"value": "a1"}}
    ]


def test_zookeeper_leader_change_resubscribes(
    server: ScriptServer, make_client: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The leader-detection wiring, with a fake detector in place of kazoo."""
    detectors: list[Any] = []

    class FakeDetector:
        def __init__(self, zk: Any, on_leader: Callable[[str | None], None], *args: Any) -> None:
            self.on_leader = on_leader
            detectors.append(self)

        def start(self) -> None:
            self.on_leader(None)

        def stop(self) -> None:
            pass

    monkeypatch.setattr(client_module, "ZooKeeperDetector", FakeDetector)
    new_leader = ScriptServer()
    try:
        client, handler = make_client("zk://zk1:2181,zk2:2181/mesos")
        with pytest.raises(SubscribeTimeoutError):
            client.wait_subscribed(0.2)
        detectors[0].on_leader(server.url + "/api/v1/scheduler")
        client.wait_subscribed(5)
        detectors[0].on_leader(new_leader.url + "/api/v1/scheduler")
        handler.wait("disconnected")
        new_leader.wait(lambda: len(new_leader.subscribes()) == 1)
        client.wait_subscribed(5)
        assert new_leader.subscribes()[0].json["framework_id"] == {"value": "fw-1"}
        assert client.endpoint == new_leader.url + "/api/v1/scheduler"
    finally:
        new_leader.close()


# ------------------------------------------------------------------------------ TLS


@pytest.fixture(scope="module")
def tls_files(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    if shutil.which("openssl") is None:
        missing("openssl is not installed")
    d = tmp_path_factory.mktemp("tls")
    cert, key = d / "cert.pem", d / "key.pem"
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2", "-subj", "/CN=127.0.0.1",
         "-addext", "subjectAltName=IP:127.0.0.1", "-keyout", str(key), "-out", str(cert)],
        check=True,
        capture_output=True,
    )  # fmt: skip
    return cert, key


def test_tls_verified_by_default(tls_files: tuple[Path, Path], make_client: Any) -> None:
    cert, key = tls_files
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(cert, key)
    srv = ScriptServer(tls=ctx)
    try:
        untrusted, _ = make_client(srv.url)
        with pytest.raises(SubscribeTimeoutError) as info:
            untrusted.wait_subscribed(0.5)
        assert isinstance(info.value.last_error, MesosConnectionError)
        assert "CERTIFICATE_VERIFY_FAILED" in str(info.value.last_error)
        untrusted.stop()

        trusted, _ = make_client(srv.url, ca_file=str(cert))
        assert trusted.wait_subscribed(5) == "fw-1"
        trusted.revive()
        assert trusted.acknowledge_many([("a", "t", new_uuid())]) == 1  # pipelined, verified TLS
        insecure, _ = make_client(srv.url, insecure_skip_tls_verify=True)
        assert insecure.wait_subscribed(5) == "fw-1"
    finally:
        srv.close()


def _openssl(*args: str) -> None:
    subprocess.run(["openssl", *args], check=True, capture_output=True)


@pytest.fixture(scope="module")
def ca_chain(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A self-made CA, a second CA, and leaf certificates the first signed: one for
    127.0.0.1, one for another name only."""
    if shutil.which("openssl") is None:
        pytest.skip("openssl is not installed")
    d = tmp_path_factory.mktemp("ca")
    for ca in ("ca", "other-ca"):
        _openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2", "-subj", f"/CN=tfdeclare test {ca}",
                 "-addext", "basicConstraints=critical,CA:TRUE", "-addext", "keyUsage=critical,keyCertSign",
                 "-keyout", str(d / f"{ca}.key"), "-out", str(d / f"{ca}.pem"))  # fmt: skip
    for leaf, san in (("master", "IP:127.0.0.1"), ("wrong-name", "DNS:master.elsewhere.example")):
        _openssl("req", "-newkey", "rsa:2048", "-nodes", "-subj", f"/CN={leaf}", "-keyout", str(d / f"{leaf}.key"),
                 "-out", str(d / f"{leaf}.csr"))  # fmt: skip
        (d / f"{leaf}.ext").write_text(f"subjectAltName={san}\nbasicConstraints=CA:FALSE\n")
        _openssl("x509", "-req", "-in", str(d / f"{leaf}.csr"), "-CA", str(d / "ca.pem"), "-CAkey", str(d / "ca.key"),
                 "-CAcreateserial", "-days", "2", "-extfile", str(d / f"{leaf}.ext"), "-out", str(d / f"{leaf}.pem"))  # fmt: skip
    return d


def _tls_server(ca: Path, leaf: str) -> ScriptServer:
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(ca / f"{leaf}.pem", ca / f"{leaf}.key")
    return ScriptServer(tls=ctx)


def test_tls_is_verified_against_the_configured_ca_bundle(ca_chain: Path, make_client: Any) -> None:
    """A master whose certificate a self-made CA signed: trusted with that CA as caFile (the
    subscription and the pipelined calls), refused with another CA, with the system's CAs, and
    when the certificate names another host."""
    srv = _tls_server(ca_chain, "master")
    try:
        for ca_file in (None, str(ca_chain / "other-ca.pem")):
            refused, _ = make_client(srv.url, ca_file=ca_file)
            with pytest.raises(SubscribeTimeoutError) as info:
                refused.wait_subscribed(0.5)
            assert "CERTIFICATE_VERIFY_FAILED" in str(info.value.last_error)
            refused.stop()
        trusted, _ = make_client(srv.url, ca_file=str(ca_chain / "ca.pem"))
        assert trusted.wait_subscribed(5) == "fw-1"
        trusted.revive()
        assert trusted.acknowledge_many([("a", "t", new_uuid())]) == 1
    finally:
        srv.close()
    srv = _tls_server(ca_chain, "wrong-name")
    try:
        mismatch, _ = make_client(srv.url, ca_file=str(ca_chain / "ca.pem"))
        with pytest.raises(SubscribeTimeoutError) as info:
            mismatch.wait_subscribed(0.5)
        assert "CERTIFICATE_VERIFY_FAILED" in str(info.value.last_error)
        assert "127.0.0.1" in str(info.value.last_error)  # "IP address mismatch"
    finally:
        srv.close()


def test_no_tls_set_up_for_an_http_master(
    server: ScriptServer, make_client: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """TLS only for https: an ``http://`` master never costs a CA bundle loaded (issue 33),
    neither for the stream, the calls, nor the pipelined ACCEPTs and ACKNOWLEDGEs."""
    loaded: list[str] = []
    for name in ("load_verify_locations", "load_default_certs", "set_default_verify_paths"):
        original = getattr(ssl.SSLContext, name)

        def counting(
            self: ssl.SSLContext, *args: Any, _name: str = name, _f: Any = original, **kw: Any
        ) -> Any:
            loaded.append(_name)
            return _f(self, *args, **kw)

        monkeypatch.setattr(ssl.SSLContext, name, counting)
    client, _ = make_client(server.url)
    assert client.wait_subscribed(5) == "fw-1"
    client.revive()
    assert client.acknowledge_many([("a", "t", new_uuid())]) == 1
    assert client.launch_many([(["o1"], [], None)]) == [None]
    assert loaded == [] and client._transport.ssl_context is None
    monkeypatch.undo()


def test_errors_are_mesos_errors() -> None:
    for cls in (FrameworkRemovedError, ClientStoppedError, MesosConnectionError, NotSubscribedError):
        assert issubclass(cls, MesosError)


def test_update_framework_is_used_on_resubscribe(server: ScriptServer, make_client: Any) -> None:
    client, _ = make_client(server.url, FrameworkInfo(user="svc", name="old", roles=("a", "b")))
    client.wait_subscribed(5)
    server.on_call = lambda req: Reply(200 if req.type == "UPDATE_FRAMEWORK" else 202)
    client.update_framework(FrameworkInfo(user="svc", name="new", roles=("a", "b")), suppressed_roles=["b"])
    (upd,) = server.calls("UPDATE_FRAMEWORK")
    assert upd.json["update_framework"]["framework_info"]["id"] == {"value": "fw-1"}
    server.streams[0].abort()
    server.wait(lambda: len(server.subscribes()) == 2)
    sub = server.subscribes()[1].json["subscribe"]
    assert sub["framework_info"]["name"] == "new" and sub["suppressed_roles"] == ["b"]


def test_silence_before_subscribed_is_bounded(server: ScriptServer, make_client: Any) -> None:
    answers = iter([Stream()])  # headers, then nothing
    server.on_subscribe = lambda req: next(answers, None) or server.default_subscribe(req)
    client, handler = make_client(server.url, subscribe_timeout=0.2)
    assert client.wait_subscribed(5) == "fw-1"
    assert len(server.subscribes()) == 2
    assert not handler.named("disconnected")  # it was never subscribed
