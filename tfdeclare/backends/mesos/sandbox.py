"""Task output from the agents' sandboxes, over the agent HTTP API.

This module owns reading a task's log: the agent's ``/state`` (at the offer's ``url``, e.g.
``http://10.0.0.7:5051/slave(1)/state``) names the executor's sandbox directory, and
``/files/read?path=DIR/stdout&offset=N&length=L`` returns ``{"data": ..., "offset": N}``
(the raw file bytes inside a JSON string; ``offset=-1`` gives the size).

A task's log, as ``read_log`` offers it, is its ``stdout``; once the task has ended (both
files final) it continues with a ``--- stderr ---`` line and the ``stderr`` file, so
tracebacks are not lost and offsets stay stable.

Each call to an agent is one ``plainhttp.request``, bounded in all (``timeout_s``): an agent
that answers slowly costs ``tfdeclare logs`` and the daemon's page that long at most, never
longer (with httpx each read was bounded, and an agent sending a byte at a time held them).
"""

from __future__ import annotations

import json
import ssl
import urllib.parse
from dataclasses import dataclass
from typing import Any

from tfdeclare.backends.errors import LogOffsetError
from tfdeclare.backends.mesos.auth import Credentials
from tfdeclare.backends.mesos.plainhttp import Failure, PlainAnswer, request

STDERR_HEADER = b"\n--- stderr ---\n"


class SandboxError(Exception):
    """The agent could not be asked (unreachable, no such sandbox)."""


def _base(agent_url: str) -> str:
    parts = urllib.parse.urlsplit(agent_url)
    return f"{parts.scheme}://{parts.netloc}"


def _find_directory(state: dict[str, Any], task_id: str) -> str | None:
    for framework in [*state.get("frameworks", []), *state.get("completed_frameworks", [])]:
        for executor in [*framework.get("executors", []), *framework.get("completed_executors", [])]:
            tasks = [*executor.get("tasks", []), *executor.get("completed_tasks", [])]
            if executor.get("id") == task_id or any(t.get("id") == task_id for t in tasks):
                directory = executor.get("directory")
                if isinstance(directory, str) and directory:
                    return directory
    return None


@dataclass(frozen=True, slots=True)
class Piece:
    data: bytes
    next_offset: int
    complete: bool


class SandboxReader:
    def __init__(
        self,
        verify: bool | ssl.SSLContext = True,
        credentials: Credentials | None = None,
        timeout: float = 10.0,
    ) -> None:
        self._verify, self._timeout = verify, timeout
        self._headers = {"Authorization": credentials.basic_header()} if credentials is not None else {}
        self._directories: dict[str, str] = {}

    def close(self) -> None:
        """Nothing is held between calls (one connection a call)."""

    def forget(self, task_id: str) -> None:
        self._directories.pop(task_id, None)

    def _get(self, url: str, params: dict[str, str] | None = None) -> PlainAnswer:
        if params:
            url = f"{url}?{urllib.parse.urlencode(params)}"
        try:
            response = request(
                "GET", url, timeout_s=self._timeout, verify=self._verify, headers=self._headers
            )
        except Failure as err:
            raise SandboxError(f"cannot reach the agent at {_base(url)}: {type(err).__name__}") from err
        if response.status_code == 404:
            raise SandboxError("the agent has no such sandbox file (the sandbox may have been removed)")
        if response.status_code != 200:
            raise SandboxError(f"the agent answered HTTP {response.status_code}")
        return response

    def directory(self, agent_url: str, task_id: str) -> str:
        cached = self._directories.get(task_id)
        if cached is not None:
            return cached
        response = self._get(agent_url.rstrip("/") + "/state")
        try:
            state = response.json()
        except ValueError as err:
            raise SandboxError("the agent's /state is not JSON") from err
        directory = _find_directory(state, task_id)
        if directory is None:
            raise SandboxError(f"the agent does not know task {task_id} (its sandbox may have been removed)")
        self._directories[task_id] = directory
        return directory

    def _read(self, agent_url: str, path: str, offset: int, length: int) -> tuple[bytes, int]:
        response = self._get(
            _base(agent_url) + "/files/read",
            {"path": path, "offset": str(offset), "length": str(length)},
        )
        try:
            # Raw file bytes inside a JSON string: keep any byte that is not UTF-8 as is.
            body = json.loads(response.content.decode("utf-8", "surrogateescape"))
            data = str(body["data"]).encode("utf-8", "surrogateescape")
            return data, int(body["offset"])
        except (ValueError, KeyError, TypeError) as err:
            raise SandboxError("the agent's /files/read answer is not understood") from err

    def size(self, agent_url: str, path: str) -> int:
        _, size = self._read(agent_url, path, -1, 0)
        return size

    def read(self, agent_url: str, task_id: str, offset: int, limit: int, ended: bool) -> Piece:
        """``limit`` bytes of the task's log from ``offset`` (see the module docstring)."""
        directory = self.directory(agent_url, task_id)
        stdout = f"{directory}/stdout"
        if not ended:
            data, _ = self._read(agent_url, stdout, offset, limit)
            if not data and offset > 0 and offset > (size := self.size(agent_url, stdout)):
                raise LogOffsetError(offset, size)
            return Piece(data, offset + len(data), False)
        out_size = self.size(agent_url, stdout)
        if offset < out_size:
            data, _ = self._read(agent_url, stdout, offset, min(limit, out_size - offset))
            return Piece(data, offset + len(data), False)
        stderr = f"{directory}/stderr"
        try:
            err_size = self.size(agent_url, stderr)
        except SandboxError:
            err_size = 0
        if err_size == 0:
            if offset > out_size:
                raise LogOffsetError(offset, out_size)
            return Piece(b"", offset, True)
        header_end = out_size + len(STDERR_HEADER)
        if offset > header_end + err_size:
            raise LogOffsetError(offset, header_end + err_size)
        data = b""
        position = offset
        if position < header_end:
            data = STDERR_HEADER[position - out_size :]
            position = header_end
        want = limit - len(data)
        if want > 0 and position - header_end < err_size:
            chunk, _ = self._read(agent_url, stderr, position - header_end, want)
            data += chunk
            position += len(chunk)
        return Piece(data, position, position >= header_end + err_size)
