"""The agents' HTTP server: sandbox files and ``/state``, shared by all emulated agents.

Owns what a scheduler reads from an agent to show task logs, as a real agent serves it:

* ``GET /files/read?path=P&offset=N&length=L`` -> ``{"data": "<raw bytes>", "offset": N}``
  (``offset=-1`` returns the file size; reads are capped at 16 pages; 404 for unknown
  paths, 400 for directories). ``P`` is a real sandbox path or the virtual
  ``/frameworks/<fw>/executors/<executor>/runs/latest/...`` form.
* ``GET /slave(N)/state`` -> agent N's state with ``frameworks[].executors[].directory``
  (its sandbox); ``GET /state`` -> the same shape, merged over all agents (one real agent
  per port would answer only for itself; here all agents share the server).
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .jsonenc import json_bytes_string
from .wire import EventStream, Request, Response, StreamStarter

if TYPE_CHECKING:
    from .agent import Agent
    from .emulator import Cluster

MAX_READ = os.sysconf("SC_PAGE_SIZE") * 16 if hasattr(os, "sysconf") else 65536
_AGENT_PATH = re.compile(r"^/slave\((\d+)\)(/.*)?$")
_VIRTUAL = re.compile(r"^/frameworks/([^/]+)/executors/([^/]+)/runs/(latest|[^/]+)(/.*)?$")


class AgentEndpoints:
    def __init__(self, cluster: Cluster) -> None:
        self.cluster = cluster

    async def handle(self, request: Request, start_stream: StreamStarter) -> Response | EventStream:
        path = request.path
        agent: Agent | None = None
        match = _AGENT_PATH.match(path)
        if match:
            agent = self.cluster.agent_by_index(int(match.group(1)))
            if agent is None or not agent.alive:
                return Response.text(404)
            path = match.group(2) or "/"
        if request.method != "GET":
            return Response.text(405, "Expecting one of { 'GET' }", Allow="GET")
        if path in ("/files/read", "/files/read.json"):
            return self._read(request)
        if path in ("/state", "/state.json"):
            agents = [agent] if agent is not None else self.cluster.live_agents()
            return Response.json(200, json.dumps(_state(agents, self.cluster.agent_port)).encode())
        if path == "/health":
            return Response(200)
        return Response.text(404)

    def _resolve(self, raw: str) -> Path | None:
        match = _VIRTUAL.match(raw)
        if match:
            fid, executor_id, _run, rest = match.groups()
            for agent in self.cluster.live_agents():
                directory = agent.executor_directory(fid, executor_id)
                if directory is not None:
                    return directory / (rest or "/").lstrip("/")
            return None
        root = self.cluster.sandbox_root.resolve()
        try:
            candidate = Path(raw).resolve()
        except (OSError, RuntimeError):
            return None
        return candidate if candidate.is_relative_to(root) else None

    def _read(self, request: Request) -> Response:
        query = request.query
        raw_path = query.get("path")
        if not raw_path:
            return Response.text(400, "Expecting 'path=value' in query.\n")
        try:
            offset = int(query.get("offset", "-1"))
        except ValueError:
            return Response.text(400, "Failed to parse offset.\n")
        if offset < -1:
            return Response.text(400, f"Negative offset provided: {offset}.\n")
        length: int | None = None
        if "length" in query:
            try:
                parsed = int(query["length"])
            except ValueError:
                return Response.text(400, "Failed to parse length.\n")
            if parsed < -1:
                return Response.text(400, f"Negative length provided: {parsed}.\n")
            length = parsed if parsed > -1 else None
        path = self._resolve(raw_path)
        if path is None or not path.exists():
            return Response(404)
        if path.is_dir():
            return Response.text(400, "Cannot read a directory.\n")
        start = offset
        if offset == -1:
            start, length = 0, 0
        with path.open("rb") as handle:
            size = handle.seek(0, os.SEEK_END)
            data = b""
            if start < size and length != 0:
                handle.seek(start)
                data = handle.read(min(length if length is not None else size - start, MAX_READ))
        reported = size if offset == -1 else offset
        body = b'{"data":' + json_bytes_string(data) + b',"offset":%d}' % reported
        return Response.json(200, body)


def _resources_json(agent: Agent) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for name, value in agent.resources:
        if isinstance(value, int):
            out[name] = value / 1000.0
        elif isinstance(value, tuple):
            out[name] = "[" + ", ".join(f"{b}-{e}" for b, e in value) + "]"
        else:
            out[name] = "{" + ", ".join(sorted(value)) + "}"
    return out


def _state(agents: list[Agent], port: int) -> dict[str, Any]:
    frameworks: dict[str, dict[str, Any]] = {}
    for agent in agents:
        for task, completed in agent.each_task():
            info = agent.frameworks.get(task.framework_id, {})
            framework = frameworks.setdefault(
                task.framework_id,
                {
                    "id": task.framework_id,
                    "name": info.get("name", ""),
                    "user": info.get("user", ""),
                    "executors": [],
                    "completed_executors": [],
                },
            )
            executor = {
                "id": task.executor_id,
                "name": f"Command Executor (Task: {task.task_id})",
                "source": task.task_id,
                "container": task.container_id,
                "directory": str(task.sandbox),
                "agent_id": agent.id,
                "tasks": [] if completed else [_task_json(task, agent)],
                "completed_tasks": [_task_json(task, agent)] if completed else [],
            }
            key = "completed_executors" if completed else "executors"
            framework[key].append(executor)
    first = agents[0] if len(agents) == 1 else None
    return {
        "version": "1.11.0",
        "id": first.id if first else "",
        "pid": f"{first.pid_path}@{first.hostname}:{port}" if first else "",
        "hostname": first.hostname if first else "127.0.0.1",
        "resources": _resources_json(first) if first else {},
        "attributes": {a["name"]: a.get("text", a.get("scalar", {})).get("value") for a in first.attributes}
        if first
        else {},
        "frameworks": list(frameworks.values()),
        "completed_frameworks": [],
    }


def _task_json(task: Any, agent: Agent) -> dict[str, Any]:
    return {
        "id": task.task_id,
        "name": task.info.get("name", ""),
        "framework_id": task.framework_id,
        "executor_id": task.executor_id,
        "slave_id": agent.id,
        "state": task.state,
    }
