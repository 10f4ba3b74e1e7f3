"""A unix socket in front of the test Docker engine, for what the engine cannot be made to do
on purpose: refuse one kind of request (as it refuses, a 500 with its JSON message) or go away
while a client holds its address.

Each request is forwarded whole to the engine, one per connection (``Connection: close`` is
asked of the engine, which then closes once it has answered); nothing is changed in
either direction but that header.
"""

from __future__ import annotations

import contextlib
import json
import socket
import threading
from collections.abc import Callable
from pathlib import Path


class EngineProxy:
    def __init__(self, engine_socket: str, path: Path) -> None:
        self.engine_socket = engine_socket
        self.path = path
        self.refuse: Callable[[bytes], bool] = lambda request_line: False
        self._server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self._server.bind(str(path))
        self._server.listen(64)
        self._closed = False
        threading.Thread(target=self._accept, name="engine-proxy", daemon=True).start()

    @property
    def address(self) -> str:
        return f"unix://{self.path}"

    def close(self) -> None:
        """The engine is gone: nothing answers at the address any more."""
        self._closed = True
        with contextlib.suppress(OSError):
            self._server.shutdown(socket.SHUT_RDWR)
        self._server.close()
        with contextlib.suppress(FileNotFoundError):
            self.path.unlink()

    def _accept(self) -> None:
        while not self._closed:
            try:
                client, _ = self._server.accept()
            except OSError:
                return
            threading.Thread(target=self._serve, args=(client,), daemon=True).start()

    def _serve(self, client: socket.socket) -> None:
        with client:
            head = b""
            while b"\r\n\r\n" not in head:
                data = client.recv(65536)
                if not data:
                    return
                head += data
            head, _, rest = head.partition(b"\r\n\r\n")
            lines = head.split(b"\r\n")
            if self.refuse(lines[0]):
                body = json.dumps({"message": "cannot stop container: refused (test engine proxy)"}).encode()
                client.sendall(
                    b"HTTP/1.1 500 Internal Server Error\r\nContent-Type: application/json\r\n"
                    + f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n".encode()
                    + body
                )
                return
            kept = [line for line in lines if not line.lower().startswith(b"connection:")]
            upstream = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            with upstream:
                upstream.connect(self.engine_socket)
                upstream.sendall(b"\r\n".join([*kept, b"Connection: close"]) + b"\r\n\r\n" + rest)
                threading.Thread(target=_pipe, args=(client, upstream), daemon=True).start()
                _pipe(upstream, client)


def _pipe(source: socket.socket, sink: socket.socket) -> None:
    with contextlib.suppress(OSError):
        while data := source.recv(65536):
            sink.sendall(data)
    with contextlib.suppress(OSError):
        sink.shutdown(socket.SHUT_WR)
