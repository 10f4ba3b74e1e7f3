"""The daemon's HTTP endpoints under hostile requests: the real server on a real socket, in
front of a small stand-in for the daemon (what it answers does not matter here), and the real
daemon loop for the coalescing of ``POST /sync``. Each test waits on answers or conditions."""

from __future__ import annotations

import http.client
import json
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import cli
from tests.controller_world import World, daemon_running, job_text
from tests.mesos_fixtures import eventually
from tests.waiting import wait_until
from tfdeclare.cli.common import UserError
from tfdeclare.cli.daemon_command import access_policy
from tfdeclare.core.config import DaemonConfig
from tfdeclare.core.run.record import Revision
from tfdeclare.daemon.httpguard import AccessPolicy
from tfdeclare.daemon.server import MAX_CONNECTIONS, WORKERS, DaemonServer
from tfdeclare.daemon.service import DaemonOptions
from tfdeclare.daemon.sources import FolderSource

TOKEN = "t0ken-for-the-tests-0123456789"


class Endpoints:
    def __init__(self) -> None:
        self.syncs = 0

    def health(self) -> tuple[bool, dict[str, Any]]:
        return True, {"ok": True}

    def metrics_text(self) -> str:
        return "tfdeclare_up 1\n"

    def jobs(self) -> list[dict[str, Any]]:
        return [{"name": "secret-project"}]

    def jobs_json(self) -> str:
        return json.dumps(self.jobs())

    def request_sync(self) -> bool:
        self.syncs += 1
        return True


def serve(access: AccessPolicy) -> tuple[DaemonServer, Endpoints]:
    endpoints = Endpoints()
    server = DaemonServer("127.0.0.1", 0, endpoints, access)
    server.start()
    return server, endpoints


@pytest.fixture
def open_server() -> Iterator[tuple[DaemonServer, Endpoints]]:
    server, endpoints = serve(AccessPolicy(frozenset({"tfd.example"})))
    yield server, endpoints
    server.close()


@pytest.fixture
def token_server() -> Iterator[tuple[DaemonServer, Endpoints]]:
    server, endpoints = serve(AccessPolicy(frozenset(), TOKEN, token_for_reads=True))
    yield server, endpoints
    server.close()


def ask(server: DaemonServer, method: str, path: str, headers: dict[str, str] | None = None) -> int:
    host, port = server.address
    connection = http.client.HTTPConnection(host, port, timeout=10)
    try:
        given = {"Host": f"127.0.0.1:{port}", **(headers or {})}
        connection.putrequest(method, path, skip_host=True, skip_accept_encoding=True)
        for name, value in given.items():
            connection.putheader(name, value)
        connection.endheaders()
        response = connection.getresponse()
        response.read()
        return response.status
    finally:
        connection.close()


def test_the_host_must_be_one_the_daemon_serves(open_server: tuple[DaemonServer, Endpoints]) -> None:
    server, _ = open_server
    port = server.address[1]
    for host in (
        f"127.0.0.1:{port}",
        f"localhost:{port}",
        "LOCALHOST",
        "[::1]:1",
        "10.1.2.3",
        "tfd.example:80",
    ):
        assert ask(server, "GET", "/jobs", {"Host": host}) == 200, host
    rebinding = (
        "evil.example",
        f"evil.example:{port}",
        "127.0.0.1.evil.example",
        "localhost.evil.example",
        "",
    )
    for host in rebinding:
        assert ask(server, "GET", "/jobs", {"Host": host}) == 421, host
    with socket.create_connection(server.address) as raw:  # HTTP/1.0 without a Host header
        raw.sendall(b"GET /jobs HTTP/1.0\r\n\r\n")
        assert raw.recv(100).startswith(b"HTTP/1.0 421")


def test_cross_origin_posts_are_refused(open_server: tuple[DaemonServer, Endpoints]) -> None:
    server, endpoints = open_server
    port = server.address[1]
    for origin in (
        "http://evil.example",
        f"http://evil.example:{port}",
        "http://127.0.0.1:8000",
        "null",
        "file://",
    ):
        assert ask(server, "POST", "/sync", {"Origin": origin}) == 403, origin
    assert endpoints.syncs == 0
    assert ask(server, "POST", "/sync", {"Origin": f"http://127.0.0.1:{port}"}) == 202
    assert ask(server, "POST", "/sync") == 202  # curl sends no Origin
    assert endpoints.syncs == 2


def test_a_token_guards_sync_and_if_asked_the_reads(token_server: tuple[DaemonServer, Endpoints]) -> None:
    server, endpoints = token_server
    for given in (
        {},
        {"Authorization": "Bearer wrong"},
        {"Authorization": TOKEN},
        {"Authorization": f"Basic {TOKEN}"},
    ):
        assert ask(server, "POST", "/sync", given) == 401, given
        assert ask(server, "GET", "/jobs", given) == 401, given
        assert ask(server, "GET", "/metrics", given) == 401, given
        assert ask(server, "GET", "/", given) == 401, given  # the status page
        assert ask(server, "GET", "/jobs/a/logs?task=worker:0", given) == 401, given
    assert endpoints.syncs == 0
    assert ask(server, "GET", "/healthz") == 200  # probes need no token
    good = {"Authorization": f"Bearer {TOKEN}"}
    assert ask(server, "POST", "/sync", good) == 202 and ask(server, "GET", "/jobs", good) == 200


def test_request_bodies_are_bounded(open_server: tuple[DaemonServer, Endpoints]) -> None:
    server, endpoints = open_server
    assert ask(server, "POST", "/sync", {"Content-Length": "1000000"}) == 413
    assert ask(server, "POST", "/sync", {"Transfer-Encoding": "chunked"}) == 413
    assert endpoints.syncs == 0


def test_a_flood_of_idle_connections_is_bounded(open_server: tuple[DaemonServer, Endpoints]) -> None:
    server, _ = open_server
    before = threading.active_count()
    idle = [socket.create_connection(server.address) for _ in range(MAX_CONNECTIONS + 44)]
    try:
        wait_until(lambda: server.evicted >= 44, 10, what="44 evictions", interval=0.01)  # the backlog
        # the oldest made room for the newest; a probe gets in past all of them
        assert server.evicted == 44 and server.turned_away == 0
        idle[0].settimeout(10)
        assert idle[0].recv(1) == b""
        assert ask(server, "GET", "/healthz") == 200
        assert threading.active_count() <= before + WORKERS  # a silent client holds no thread
        assert server.timed_out == 0  # the default request deadline (5 s) is not over yet
    finally:
        for connection in idle:
            connection.close()
    assert ask(server, "GET", "/healthz") == 200


def test_silent_connections_are_dropped_after_the_request_deadline() -> None:
    """The same server with a deadline of a fraction of a second (the daemon's is
    ``REQUEST_DEADLINE_S``), so that the test waits that long, not 5 s."""
    deadline_s = 0.3
    server = DaemonServer("127.0.0.1", 0, Endpoints(), request_deadline_s=deadline_s)
    server.start()
    opened = time.monotonic()
    idle = [socket.create_connection(server.address) for _ in range(50)]
    try:
        for connection in idle:
            connection.settimeout(deadline_s + 10)
            assert connection.recv(1) == b""  # closed by the server, with no answer
        assert time.monotonic() - opened >= deadline_s  # not before the deadline
        assert server.timed_out == 50
        assert eventually(lambda: server.open_connections() == 0, timeout=10)
        assert ask(server, "GET", "/healthz") == 200
    finally:
        for connection in idle:
            connection.close()
        server.close()


def test_the_daemon_refuses_to_listen_beyond_loopback_without_a_token(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "specs").mkdir()
    result = cli("daemon", "--specs", "specs", "--host", "0.0.0.0", cwd=tmp_path, timeout=30)
    assert result.returncode == 1
    assert "refusing to serve the HTTP endpoints on 0.0.0.0 without a token" in result.stderr
    assert not (tmp_path / ".tfdeclare" / "lock").exists()  # refused before anything started
    monkeypatch.setenv("TFD_SHORT", "abc")
    with pytest.raises(UserError, match="too short"):
        access_policy(DaemonConfig(token_env="TFD_SHORT"), "0.0.0.0")
    (tmp_path / "token").write_text(TOKEN + "\n")
    policy = access_policy(
        DaemonConfig(token_file=str(tmp_path / "token"), server_names=("TFD.example",)), "::"
    )
    assert policy.token == TOKEN and "tfd.example" in policy.names and TOKEN not in repr(policy)
    assert access_policy(DaemonConfig(), "127.0.0.1").token is None
    # the rule the config schema's daemon.host states: loopback, or a token, or a webhook secret
    for loopback in ("localhost", "127.3.2.1", "::1", "[::1]"):
        assert access_policy(DaemonConfig(), loopback).token is None
    monkeypatch.setenv("TFD_HOOK", TOKEN)
    hooked = access_policy(DaemonConfig(webhook_secret_env="TFD_HOOK"), "0.0.0.0")
    assert hooked.token is None and hooked.webhook is not None
    with pytest.raises(UserError, match="without a token"):
        access_policy(DaemonConfig(), "tfd.example")


class CountingSource(FolderSource):
    def __init__(self, *args: Any) -> None:
        super().__init__(*args)
        self.synced_at: list[float] = []  # monotonic

    def sync(self) -> Revision | None:
        self.synced_at.append(time.monotonic())
        return super().sync()


def test_sync_requests_are_coalesced(tmp_path: Path) -> None:
    """POST /sync over HTTP reaches the schedule: every request is accepted, they are
    coalesced, and the last is honoured (the rule's timing: test_daemon_schedule.py)."""
    world = World(tmp_path)
    world.write("a", job_text("a"))
    source = CountingSource(world.specs, [tmp_path / "state", world.status_dir])
    options = DaemonOptions(interval_s=3600, debounce_s=0.0, settle_s=0.0, min_sync_interval_s=0.5)
    with daemon_running(world, source, options) as daemon:
        server = DaemonServer("127.0.0.1", 0, daemon)
        server.start()
        try:
            world.controller.wait_for_pass(0)  # the first pass fetched once
            answers = [ask(server, "POST", "/sync") for _ in range(200)]
            last = time.monotonic()
            assert answers == [202] * 200
            # the last request is honoured: a fetch after it, once the minimum interval is over
            world.controller.wait_for_pass(0, lambda: source.synced_at[-1] > last)
            # not one fetch each: they joined (how many, in virtual time: test_daemon_schedule)
            assert len(source.synced_at) < 200
        finally:
            server.close()
