"""``backends/mesos/plainhttp.py``: one request bounded in all, as ``plan`` asks the master and
the agents' sandboxes are read (``tfdeclare logs``, the daemon's page). Real sockets: a peer
that answers a byte at a time is cut off when the call's time is up (each read alone was
bounded before, so such a peer held the caller for as long as it liked); an answer too large
is refused; a plain answer is read whole."""

from __future__ import annotations

import contextlib
import socket
import threading
import time
from collections.abc import Iterator

import pytest

from tfdeclare.backends.mesos import plainhttp
from tfdeclare.backends.mesos.sandbox import SandboxError, SandboxReader


@contextlib.contextmanager
def peer(answer: bytes, pause_s: float) -> Iterator[str]:
    """A server on 127.0.0.1 that reads one request and sends ``answer``, a byte every
    ``pause_s`` seconds (0: at once); its base URL."""
    stop = threading.Event()
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(1)

    def serve() -> None:
        with contextlib.suppress(OSError):
            conn, _ = server.accept()
            with conn:
                conn.recv(65536)
                if not pause_s:
                    conn.sendall(answer)
                    return
                for byte in answer:
                    if stop.wait(pause_s):
                        return
                    conn.sendall(bytes([byte]))

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.getsockname()[1]}"
    finally:
        stop.set()
        server.close()
        thread.join(5)


SLOW = b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nX-Slow: " + b"x" * 200 + b"\r\n\r\n{}"


def test_an_agent_answering_a_byte_at_a_time_costs_a_log_read_its_bound() -> None:
    with peer(SLOW, 0.3) as url:
        started = time.monotonic()
        with pytest.raises(SandboxError, match="cannot reach the agent"):
            SandboxReader(timeout=1.0).read(f"{url}/slave(1)", "t.0", 0, 100, ended=False)
        took = time.monotonic() - started
    assert took < 20, took  # the bound is 1 s; the answer as sent takes 70 s


def test_an_answer_over_the_limit_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(plainhttp, "MAX_ANSWER_BYTES", 10)
    body = b'{"data": "0123456789abcdef", "offset": 0}'
    answer = b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body)
    with peer(answer, 0) as url, pytest.raises(plainhttp.Failure):
        plainhttp.request("GET", f"{url}/files/read", timeout_s=5, verify=True)


def test_a_plain_answer_is_read_whole_with_its_location() -> None:
    answer = (
        b"HTTP/1.1 307 Temporary Redirect\r\nLocation: //leader:5050/api/v1\r\nContent-Length: 2\r\n\r\nok"
    )
    with peer(answer, 0) as url:
        got = plainhttp.request("POST", f"{url}/api/v1", timeout_s=5, verify=True, body=b"{}")
    assert (got.status_code, got.location, got.content) == (307, "//leader:5050/api/v1", b"ok")
