"""Task output from the agents' sandboxes, over the agent HTTP API.

This module owns reading a task's log: the agent's ``/state`` (at the offer's ``url``, e.g.
``http://10.0.0.7:5051/slave(1)/state``) names the executor's sandbox directory, and
``/files/read?path=DIR/stdout&offset=N&length=L`` returns ``{"data": ..., "offset": N}``
(the raw file bytes inside a JSON string; ``offset=-1`` gives the size).

A task's log, as ``read_log`` offers it, is its ``stdout``; once the task has ended (both
files final) it continues with a ``--- stderr ---`` line and the ``stderr`` file, so
tracebacks are not lost and offsets stay stable. ``read_file`` reads either file alone, as it
grows (``tfdeclare logs`` reads both in turn, so a running task's stderr shows too).

Whether a task has ended is the caller's word (the backend's task table) or the agent's: a
process that does not run the scheduler (``tfdeclare logs`` beside the controller) has a
table that never hears of the end, so once the caller's word says running and a file has
nothing more, the agent's ``/state`` is asked (at most once every ``STATE_FRESH_S`` an agent,
``ended``): a task among its completed tasks or in a terminal state has written its last.

Each call to an agent is one ``plainhttp.request``, bounded in all (``timeout_s``): an agent
that answers slowly costs ``tfdeclare logs`` and the daemon's page that long at most, never
longer (with httpx each read was bounded, and an agent sending a byte at a time held them).
"""

from __future__ import annotations

import json
import ssl
import threading
import time
import urllib.parse
from dataclasses import dataclass
from typing import Any

from tfdeclare.backends.base import STDERR_HEADER, STREAMS
from tfdeclare.backends.errors import LogOffsetError
from tfdeclare.backends.mesos.auth import Credentials
from tfdeclare.backends.mesos.plainhttp import Failure, PlainAnswer, request
from tfdeclare.backends.mesos.taskstate import is_terminal

STATE_FRESH_S = 1.0  # an agent's /state, asked whether tasks have ended, is used this long


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


def _has_ended(state: dict[str, Any], task_id: str) -> bool:
    """Whether the agent's ``state`` shows the task ended: among an executor's completed tasks,
    its executor or framework among the completed ones, or in a terminal state (a real agent
    keeps a task among the running ones until its last update is acknowledged)."""
    frameworks = [(False, f) for f in state.get("frameworks", [])]
    frameworks += [(True, f) for f in state.get("completed_frameworks", [])]
    for gone, framework in frameworks:
        executors = [(gone, e) for e in framework.get("executors", [])]
        executors += [(True, e) for e in framework.get("completed_executors", [])]
        for over, executor in executors:
            if any(t.get("id") == task_id for t in executor.get("completed_tasks", [])):
                return True
            for task in [*executor.get("tasks", []), *executor.get("queued_tasks", [])]:
                if task.get("id") == task_id:
                    return over or is_terminal(task.get("state"))
    return False


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
        self._ended: set[str] = set()  # tasks an agent has shown ended (for good)
        self._states: dict[str, tuple[float, dict[str, Any]]] = {}  # agent -> (when asked, /state)
        self._lock = threading.Lock()  # the daemon's page threads share the reader

    def close(self) -> None:
        """Nothing is held between calls (one connection a call)."""

    def forget(self, task_id: str) -> None:
        self._directories.pop(task_id, None)
        self._ended.discard(task_id)

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
        directory = _find_directory(self._state(agent_url, fresh=False), task_id)
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

    def _state(self, agent_url: str, fresh: bool) -> dict[str, Any]:
        """The agent's ``/state``: one asked less than ``STATE_FRESH_S`` ago when ``fresh``, else
        asked now (one bounded call)."""
        with self._lock:
            kept = self._states.get(agent_url)
        if fresh and kept is not None and time.monotonic() - kept[0] < STATE_FRESH_S:
            return kept[1]
        asked = time.monotonic()
        response = self._get(agent_url.rstrip("/") + "/state")
        try:
            state = response.json()
        except ValueError as err:
            raise SandboxError("the agent's /state is not JSON") from err
        if not isinstance(state, dict):
            raise SandboxError("the agent's /state is not understood")
        with self._lock:
            self._states = {
                url: seen for url, seen in self._states.items() if asked - seen[0] < STATE_FRESH_S
            }
            self._states[agent_url] = (asked, state)
        return state

    def ended(self, agent_url: str, task_id: str) -> bool:
        """Whether the agent shows the task ended (its files are final): asked at most once every
        ``STATE_FRESH_S`` an agent, and once seen ended, never again."""
        if task_id in self._ended:
            return True
        if _has_ended(self._state(agent_url, fresh=True), task_id):
            self._ended.add(task_id)
            return True
        return False

    def size(self, agent_url: str, path: str) -> int:
        _, size = self._read(agent_url, path, -1, 0)
        return size

    def read(self, agent_url: str, task_id: str, offset: int, limit: int, ended: bool) -> Piece:
        """``limit`` bytes of the task's log from ``offset`` (see the module docstring)."""
        directory = self.directory(agent_url, task_id)
        stdout = f"{directory}/stdout"
        if not ended:
            data, _ = self._read(agent_url, stdout, offset, limit)
            if data or not self.ended(agent_url, task_id):
                if not data and offset > 0 and offset > (size := self.size(agent_url, stdout)):
                    raise LogOffsetError(offset, size)
                return Piece(data, offset + len(data), False)
            # ended since that read: the files are final now, read as those of an ended task
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

    def read_file(
        self, agent_url: str, task_id: str, name: str, offset: int, limit: int, ended: bool
    ) -> Piece:
        """``limit`` bytes of one of the task's files (``STREAMS``) from ``offset``, as it is now;
        complete once the task has ended (``ended``, or the agent says so) and all is read."""
        if name not in STREAMS:
            raise SandboxError(f"a task's output is its {' or '.join(STREAMS)}, not {name!r}")
        path = f"{self.directory(agent_url, task_id)}/{name}"
        data, _ = self._read(agent_url, path, offset, limit)
        if data:
            return Piece(data, offset + len(data), False)
        if not ended and self.ended(agent_url, task_id):
            data, _ = self._read(agent_url, path, offset, limit)  # what came before it ended
            if data:
                return Piece(data, offset + len(data), False)
            ended = True
        if offset > 0 and offset > (size := self.size(agent_url, path)):
            raise LogOffsetError(offset, size)
        return Piece(b"", offset, ended)
