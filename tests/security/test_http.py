"""Issue 20, findings 9-11: the daemon's HTTP side under hostile or unlucky clients. Real
servers on real sockets: the endpoints in front of the real daemon loop (fake backend) for the
log offsets, a stand-in where what it answers does not matter, and the real CLI for a taken
port. Every test waits on answers or conditions, never on a fixed sleep."""

from __future__ import annotations

import fcntl
import http.client
import logging
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pytest

from tests.conftest import cli
from tests.controller_world import World, job_text
from tests.test_daemon import Daemon as CliDaemon
from tests.waiting import wait_until
from tfdeclare.core.enums import Role
from tfdeclare.daemon.server import MAX_CONNECTIONS, DaemonServer, ListenError
from tfdeclare.daemon.service import Daemon, DaemonOptions
from tfdeclare.daemon.sources import FolderSource


def request(
    server: DaemonServer, method: str, path: str, headers: dict[str, str] | None = None
) -> tuple[int, dict[str, str], bytes]:
    host, port = server.address
    connection = http.client.HTTPConnection(host, port, timeout=10)
    try:
        connection.putrequest(method, path, skip_host=True, skip_accept_encoding=True)
        for name, value in {"Host": f"127.0.0.1:{port}", **(headers or {})}.items():
            connection.putheader(name, value)
        connection.endheaders()
        response = connection.getresponse()
        return response.status, dict(response.getheaders()), response.read()
    finally:
        connection.close()


def started_since(before: set[threading.Thread]) -> list[threading.Thread]:
    """The threads alive now that were not in ``before``: those the test started and left
    running. (Not a count: a thread of an earlier test in this process that ends meanwhile
    must not hide one, nor fail the test.)"""
    return [thread for thread in threading.enumerate() if thread not in before]


# ---- finding 9: numbers in query parameters -----------------------------------------------


@pytest.fixture
def served(tmp_path: Path) -> Iterator[tuple[DaemonServer, World, int]]:
    """The real daemon's endpoints with one job whose worker 0 wrote a 1,000-byte log."""
    world = World(tmp_path)
    world.write("a", job_text("a"))
    world.apply()
    world.settle()
    task_id = world.task("a", Role.WORKER, 0).task_id
    world.backend.write_log(task_id, b"0123456789" * 100)
    source = FolderSource(world.specs, [world.root / "state", world.status_dir])
    daemon = Daemon(source, world.controller, world.files, world.status_dir, DaemonOptions())
    server = DaemonServer("127.0.0.1", 0, daemon)
    server.start()
    yield server, world, 1000
    server.close()
    daemon.notifier.close()
    source.close()


NOT_A_BYTE_COUNT = [
    "99999999999999999999999",  # beyond int64: seek() raised OverflowError, the connection dropped
    str(2**63),
    "9" * 5000,  # beyond Python's int() digit limit
    "-5",
    "+5",
    " 5",
    "5 ",
    "0x10",
    "1e3",
    "5.0",
    "\u0663",  # ARABIC-INDIC DIGIT THREE: str.isdigit() says yes
    "\xb2",  # SUPERSCRIPT TWO: so does it here
    "",
    "\x00",
]


@pytest.mark.parametrize("offset", NOT_A_BYTE_COUNT)
def test_an_offset_that_is_not_a_byte_count_is_400(
    served: tuple[DaemonServer, World, int], offset: str, caplog: pytest.LogCaptureFixture
) -> None:
    server, _, _ = served
    with caplog.at_level(logging.DEBUG, logger="tfdeclare"):
        code, headers, body = request(server, "GET", f"/jobs/a/logs?task=worker:0&offset={quote(offset)}")
    assert code == 400, body
    assert headers["Content-Type"] == "application/json" and b"offset must be a whole number" in body
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING], "no traceback, no error logged"


def test_an_offset_beyond_the_log_is_400_and_its_end_is_not(
    served: tuple[DaemonServer, World, int], caplog: pytest.LogCaptureFixture
) -> None:
    server, _, size = served
    with caplog.at_level(logging.DEBUG, logger="tfdeclare"):
        for offset in (size + 1, 10**12, 2**63 - 1):  # int64, but past the end of the file
            code, _, body = request(server, "GET", f"/jobs/a/logs?task=worker:0&offset={offset}")
            assert code == 400 and f"beyond the end of the log ({size} bytes so far)".encode() in body
        code, headers, body = request(server, "GET", f"/jobs/a/logs?task=worker:0&offset={size}")
        assert (code, body, headers["X-Tfdeclare-Next-Offset"]) == (200, b"", str(size))
        code, _, body = request(server, "GET", "/jobs/a/logs?task=worker:0&offset=990")
        assert (code, body) == (200, b"0123456789")
        code, _, body = request(server, "GET", "/jobs/a/logs?task=worker:0&offset=1&offset=2")
        assert code == 400 and b"offset is given 2 times" in body
        code, _, body = request(server, "GET", "/jobs/a/logs?task=worker:0&task=worker:1")
        assert code == 400 and b"task is given 2 times" in body
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]


@pytest.mark.parametrize("refresh", ["1", "3601", "-1", "x", "", "99999999999999999999999", "\u0663"])
def test_a_refresh_that_is_not_a_number_of_seconds_is_400(
    served: tuple[DaemonServer, World, int], refresh: str
) -> None:
    server, _, _ = served
    code, headers, body = request(server, "GET", f"/?refresh={quote(refresh)}")
    assert code == 400 and b"refresh must be" in body
    assert "Set-Cookie" not in headers, "a refused value is not remembered"


def test_numbers_in_headers_and_too_many_parameters_are_refused_with_a_status(
    served: tuple[DaemonServer, World, int],
) -> None:
    server, _, _ = served
    for length in ("9" * 5000, "-1", "\xb2", "1e3"):
        assert request(server, "POST", "/sync", {"Content-Length": length})[0] == 413, length
    many = "&".join(f"p{i}=1" for i in range(50))
    code, _, body = request(server, "GET", f"/jobs/a/logs?{many}")
    assert code == 400 and b"query parameters" in body


class Broken:
    """Endpoints with a bug: every answer raises."""

    def health(self) -> tuple[bool, dict[str, Any]]:
        raise RuntimeError("a bug")

    def metrics_text(self) -> str:
        raise RuntimeError("a bug")

    def jobs(self) -> list[dict[str, Any]]:
        raise RuntimeError("a bug")

    def jobs_json(self) -> str:
        raise RuntimeError("a bug")

    def request_sync(self) -> bool:
        raise RuntimeError("a bug")

    def page_html(self, refresh: int) -> str:
        raise RuntimeError("a bug")

    def task_log(self, name: str, task: str | None, offset: int, stream: str | None = None) -> Any:
        raise RuntimeError("a bug")


def test_an_endpoint_that_fails_answers_500_instead_of_hanging_up(caplog: pytest.LogCaptureFixture) -> None:
    server = DaemonServer("127.0.0.1", 0, Broken())
    server.start()
    try:
        with caplog.at_level(logging.ERROR, logger="tfdeclare"):
            code, _, body = request(server, "GET", "/jobs")
        assert code == 500 and b"internal error" in body
        assert [r.exc_info is not None for r in caplog.records] == [True], "a bug is logged once"
    finally:
        server.close()


# ---- finding 10: a port that is taken ---------------------------------------------------


def test_a_taken_port_is_one_clear_line_and_nothing_is_left_started() -> None:
    with socket.create_server(("127.0.0.1", 0)) as holder:
        port = holder.getsockname()[1]
        before = set(threading.enumerate())
        with pytest.raises(ListenError) as refused:
            DaemonServer("127.0.0.1", port)
        assert not started_since(before)
    message = str(refused.value)
    assert "\n" not in message and f"127.0.0.1:{port}" in message and "already in use" in message
    assert "--port" in message and "daemon.port" in message
    for port_number in (-1, 65536, 99999999999999999999):
        with pytest.raises(ListenError, match="ports are 0 to 65535"):
            DaemonServer("127.0.0.1", port_number)
    with pytest.raises(ListenError, match="no interface of this machine has that address"):
        DaemonServer("192.0.2.1", 0)  # TEST-NET-1: on no interface here
    server = DaemonServer("127.0.0.1", port)  # the port is free again: served
    server.close()


@pytest.mark.slow
@pytest.mark.e2e
def test_a_second_daemon_on_a_taken_port_exits_1_with_one_line(tmp_path: Path) -> None:
    first_project, second_project = tmp_path / "one", tmp_path / "two"
    for project in (first_project, second_project):
        (project / "specs").mkdir(parents=True)
    first = CliDaemon(first_project, "--specs", "specs")
    try:
        port = int(first.url.rsplit(":", 1)[1].strip("/"))
        (second_project / "tfdeclare.yaml").write_text(f"daemon: {{port: {port}}}\n")
        result = cli("daemon", "--specs", "specs", cwd=second_project, timeout=60)
        assert result.returncode == 1, result.stderr
        lines = result.stderr.strip().splitlines()
        assert len(lines) == 1 and "Traceback" not in result.stderr, result.stderr
        assert f"127.0.0.1:{port}" in lines[0] and "already in use" in lines[0]
        assert "--port or daemon.port in the config" in lines[0]
        lock = second_project / ".tfdeclare" / "lock"
        if lock.exists():  # if it was made at all, nobody holds it
            with open(lock) as handle:
                fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        assert first.get("/healthz")[0] in (200, 503), "the first daemon is untouched"
    finally:
        assert first.stop() == 0


# ---- finding 11: slow clients -------------------------------------------------------------


class Quick:
    def health(self) -> tuple[bool, dict[str, Any]]:
        return True, {"status": "ok"}

    def metrics_text(self) -> str:
        return ""

    def jobs(self) -> list[dict[str, Any]]:
        return []

    def jobs_json(self) -> str:
        return "[]"

    def request_sync(self) -> bool:
        return True

    def page_html(self, refresh: int) -> str:
        return ""

    def task_log(self, name: str, task: str | None, offset: int, stream: str | None = None) -> Any:
        raise LookupError("none")


TRICKLERS = 64
TRICKLE = b"GET /jobs HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: " + b"a" * 100
# The server's request deadline here (the daemon's is REQUEST_DEADLINE_S, 5 s), and how often
# a trickler sends a byte: well within it, so only the whole request's deadline cuts it off.
TRICKLE_DEADLINE_S = 1.0
TRICKLE_EVERY_S = TRICKLE_DEADLINE_S / 4


class Tricklers:
    """``TRICKLERS`` connections, each sending one byte of a never-ending request every
    ``TRICKLE_EVERY_S``;
    one the server closes is opened again at once (a patient attacker). Counts the closes."""

    def __init__(self, address: tuple[str, int]) -> None:
        self.address = address
        self.stopping = threading.Event()
        self.closed_by_server = 0
        self.lock = threading.Lock()
        self.threads = [threading.Thread(target=self._trickle, daemon=True) for _ in range(TRICKLERS)]
        self.connected = threading.Semaphore(0)

    def __enter__(self) -> Tricklers:
        for thread in self.threads:
            thread.start()
        for _ in self.threads:
            assert self.connected.acquire(timeout=30), "a trickler could not connect"
        return self

    def __exit__(self, *exc: object) -> None:
        self.stopping.set()
        for thread in self.threads:
            thread.join(timeout=30)

    def _trickle(self) -> None:
        first = True
        while not self.stopping.is_set():
            with socket.create_connection(self.address, timeout=30) as connection:
                if first:
                    self.connected.release()
                    first = False
                for byte in TRICKLE:
                    try:
                        connection.sendall(bytes([byte]))
                    except OSError:
                        break
                    if self._closed(connection, within=TRICKLE_EVERY_S):
                        break
                with self.lock:
                    self.closed_by_server += 1

    def _closed(self, connection: socket.socket, within: float) -> bool:
        """Waits ``within`` seconds (or until stopping) for the server to answer or close."""
        connection.settimeout(within)
        try:
            return connection.recv(4096) != b"" or True
        except TimeoutError:
            return self.stopping.is_set()
        except OSError:
            return True


@pytest.mark.slow
def test_slow_clients_cannot_starve_the_probe(caplog: pytest.LogCaptureFixture) -> None:
    server = DaemonServer("127.0.0.1", 0, Quick(), request_deadline_s=TRICKLE_DEADLINE_S)
    server.start()
    waits: list[float] = []
    try:
        with caplog.at_level(logging.WARNING), Tricklers(server.address) as tricklers:
            until = time.monotonic() + TRICKLE_DEADLINE_S * 2 + 2  # past the first round of cut-offs
            while time.monotonic() < until:
                started = time.monotonic()
                code, _, _ = request(server, "GET", "/healthz")
                waits.append(time.monotonic() - started)
                assert code == 200
            # each trickler was cut off at the request deadline, not served or left hanging
            assert tricklers.closed_by_server >= TRICKLERS, tricklers.closed_by_server
            assert server.timed_out >= TRICKLERS
    finally:
        server.close()
    assert max(waits) < 1.0, f"/healthz took {max(waits):.3f} s while {TRICKLERS} clients trickled"
    assert not caplog.records, "cutting slow clients off is no error"


def test_closing_with_connections_open_ends_them_and_every_thread_quietly(
    caplog: pytest.LogCaptureFixture,
) -> None:
    before = set(threading.enumerate())
    server = DaemonServer("127.0.0.1", 0, Quick())
    server.start()
    with caplog.at_level(logging.DEBUG, logger="tfdeclare"), caplog.at_level(logging.WARNING):
        assert request(server, "GET", "/healthz")[0] == 200  # a worker thread has started
        clients = [socket.create_connection(server.address, timeout=10) for _ in range(MAX_CONNECTIONS + 5)]
        # until every one is accepted: 5 made room for the last 5
        wait_until(lambda: server.evicted >= 5, 10, what="5 evictions", interval=0.01)
        assert server.evicted == 5
        for client in clients[-3:]:
            client.sendall(b"GET /jobs HTTP/1.1\r\nHost: 127.0.0.1\r\n")  # half a request
        server.close()
        for client in clients:
            assert client.recv(1) == b""  # closed by the server, not left hanging
            client.close()
    assert not started_since(before)
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING], caplog.text
    with pytest.raises(ConnectionRefusedError):
        socket.create_connection(server.address, timeout=10)


class Big(Quick):
    def task_log(self, name: str, task: str | None, offset: int, stream: str | None = None) -> Any:
        from tfdeclare.backends.base import LogChunk

        return LogChunk(b"x" * (32 << 20), 32 << 20, True)


def test_a_client_that_does_not_read_its_answer_is_dropped_after_the_response_deadline() -> None:
    server = DaemonServer("127.0.0.1", 0, Big(), response_deadline_s=1.0)
    server.start()
    try:
        reader = socket.socket()
        reader.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        reader.connect(server.address)
        reader.sendall(b"GET /jobs/a/logs HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
        assert reader.recv(16) == b"HTTP/1.0 200 OK\r"  # the answer has started
        assert request(server, "GET", "/healthz")[0] == 200  # meanwhile others are served
        received = 16
        reader.settimeout(10)
        # It reads nothing for a while (a client stuck): the server lets go of it...
        wait_until(lambda: server.open_connections() == 0, 10, what="the stuck reader let go")
        # ...and when it reads at last, the rest is not there.
        try:
            while chunk := reader.recv(1 << 20):
                received += len(chunk)
        except ConnectionResetError:
            pass
        reader.close()
        assert received < 32 << 20, "the whole answer went out to a client that did not read it"
    finally:
        server.close()
