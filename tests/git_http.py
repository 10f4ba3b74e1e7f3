"""Git over HTTP for tests, as a git host serves it: ``GitHttpServer`` runs git's own
``git http-backend`` (smart HTTP, fetch and push) behind HTTP Basic authentication, on
127.0.0.1 in a thread (``hang`` set: it takes requests and never answers them, a host that
hangs); ``SilentServer`` accepts connections and never answers (a host that
hangs). Both stop with ``close()`` (or as context managers)."""

from __future__ import annotations

import base64
import os
import socket
import subprocess
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from types import TracebackType
from typing import Any
from urllib.parse import urlsplit

BACKEND = "http-backend"


class GitHttpServer:
    """Serves the bare repositories under ``root`` at ``http://USER:PASSWORD@127.0.0.1:PORT/NAME``."""

    def __init__(self, root: Path, user: str, password: str) -> None:
        self.root = root
        self.credentials = f"{user}:{password}"
        self.hang = threading.Event()  # set: requests are read and never answered
        self._closed = threading.Event()
        expected = "Basic " + base64.b64encode(self.credentials.encode()).decode()
        served = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, format: str, *args: Any) -> None:
                """Quiet."""

            def do_GET(self) -> None:
                self._backend()

            def do_POST(self) -> None:
                self._backend()

            def _backend(self) -> None:
                if served.hang.is_set():
                    served._closed.wait()
                    return
                if self.headers.get("Authorization") != expected:
                    self.send_response(401)
                    self.send_header("WWW-Authenticate", 'Basic realm="git"')
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                    return
                parts = urlsplit(self.path)
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length) if length else b""
                env = {
                    "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
                    "GIT_PROJECT_ROOT": str(served.root),
                    "GIT_HTTP_EXPORT_ALL": "1",
                    "REMOTE_USER": user,
                    "REQUEST_METHOD": self.command,
                    "PATH_INFO": parts.path,
                    "QUERY_STRING": parts.query,
                    "CONTENT_TYPE": self.headers.get("Content-Type", ""),
                    "CONTENT_LENGTH": str(len(body)),
                    "HTTP_CONTENT_ENCODING": self.headers.get("Content-Encoding", ""),
                    "GIT_PROTOCOL": self.headers.get("Git-Protocol", ""),
                }
                done = subprocess.run(["git", BACKEND], input=body, env=env, capture_output=True, check=False)
                head, _, payload = done.stdout.partition(b"\r\n\r\n")
                if not _:
                    head, _, payload = done.stdout.partition(b"\n\n")
                headers = [line.split(":", 1) for line in head.decode("latin-1").splitlines() if ":" in line]
                code = next((int(v.split()[0]) for k, v in headers if k.lower() == "status"), 200)
                self.send_response(code)
                for key, value in headers:
                    if key.lower() != "status":
                        self.send_header(key, value.strip())
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self.port = self._server.server_address[1]
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()

    def url(self, name: str) -> str:
        return f"http://{self.credentials}@127.0.0.1:{self.port}/{name}"

    def close(self) -> None:
        self._closed.set()
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)

    def __enter__(self) -> GitHttpServer:
        return self

    def __exit__(self, *exc: type[BaseException] | BaseException | TracebackType | None) -> None:
        self.close()


class SilentServer:
    """Accepts TCP connections on 127.0.0.1 and never says a word (nor closes them) until closed."""

    def __init__(self) -> None:
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port = self._listener.getsockname()[1]
        self.accepted: list[socket.socket] = []
        self._thread = threading.Thread(target=self._accept, daemon=True)
        self._thread.start()

    def _accept(self) -> None:
        while True:
            try:
                connection, _ = self._listener.accept()
            except OSError:
                return
            self.accepted.append(connection)

    def close(self) -> None:
        self._listener.shutdown(socket.SHUT_RDWR)  # wakes the accept
        self._listener.close()
        for connection in self.accepted:
            connection.close()
        self._thread.join(timeout=5)

    def __enter__(self) -> SilentServer:
        return self

    def __exit__(self, *exc: type[BaseException] | BaseException | TracebackType | None) -> None:
        self.close()
