"""mesos-executor: the command executor for realmesos' agents, over the v1 executor HTTP API.

Upstream's command executor (``src/launcher/executor.cpp``, Mesos 1.11) is a program of its
own, not part of libmesos; this module owns a rewrite of its behaviour in Python (standard
library only), for agents started with ``--http_command_executor``:

- subscribes to the agent (``POST /<agent id>/api/v1/executor`` at ``MESOS_SLAVE_PID``),
  re-subscribing with its unacknowledged updates and task after a disconnection while the
  framework checkpoints (within ``MESOS_RECOVERY_TIMEOUT``), else shutting down; an UPDATE
  the agent did not take (it answers 503 while it recovers) is sent again every 0.5 s, and
  updates made while a SUBSCRIBE was on its way are sent once it is answered;
- on LAUNCH sends TASK_STARTING, starts the task through ``mesos-containerizer launch
  --launch_info=...`` in a session of its own (environment: its own, then
  ``--task_environment``, then the command's; ``MESOS_ALLOCATION_ROLE``), sends TASK_RUNNING;
  a second task is TASK_FAILED "Attempted to run multiple tasks using a "command" executor";
- on KILL (the event's kill policy over the task's, else 3 s): TASK_KILLING when the framework
  has TASK_KILLING_STATE, SIGTERM to the task's process trees, sessions and groups, SIGKILL when
  the grace period ends; a later kill may only shorten it;
- ``max_completion_time``: killed at once, TASK_FAILED REASON_MAX_COMPLETION_TIME_REACHED;
- when the task ends: TASK_FINISHED, TASK_FAILED or TASK_KILLED, message ``Command exited
  with status N`` / ``Command terminated with signal <strsignal>``; exits once the terminal
  update is acknowledged, or fails after 60 s without the acknowledgement;
- SHUTDOWN: kills the task with ``MESOS_EXECUTOR_SHUTDOWN_GRACE_PERIOD`` less 2 s.

The task's output goes where the executor's goes: the sandbox's stdout and stderr files.
A real agent opens them for the executor (its SandboxContainerLogger); agents started by
``mesos::internal::local::launch``, as realmesos' are, let containers inherit the agent's
own stdio instead (upstream ``src/slave/containerizer/mesos/io/switchboard.cpp``: "In local
mode, the container will inherit agent's stdio"), so this executor then opens them itself
(``sandbox_stdio``), as the agent would have. Health and general checks are not
implemented (nothing here sends them).
"""

from __future__ import annotations

import base64
import http.client
import json
import os
import queue
import signal
import subprocess
import sys
import threading
import time
import uuid
from typing import Any

TERMINAL = {
    "TASK_FINISHED",
    "TASK_FAILED",
    "TASK_KILLED",
    "TASK_ERROR",
    "TASK_LOST",
    "TASK_DROPPED",
    "TASK_GONE",
}


def log(message: str) -> None:
    now = time.time()
    stamp = time.strftime("%m%d %H:%M:%S", time.localtime(now)) + f".{int(now % 1 * 1e6):06d}"
    sys.stderr.write(f"I{stamp} {os.getpid()} executor.py] {message}\n")
    sys.stderr.flush()


def duration(text: str) -> float:
    """A stout Duration as the agent writes it in the environment ("5secs", "15mins", "3ns")."""
    units = {"ns": 1e-9, "us": 1e-6, "ms": 1e-3, "secs": 1.0, "mins": 60.0, "hrs": 3600.0, "days": 86400.0}
    for unit in sorted(units, key=len, reverse=True):
        if text.endswith(unit):
            return float(text[: -len(unit)]) * units[unit]
    return float(text)


def flags(argv: list[str]) -> dict[str, str]:
    out = {}
    for arg in argv:
        if arg.startswith("--") and "=" in arg:
            name, _, value = arg[2:].partition("=")
            out[name] = value
    return out


def sandbox_stdio() -> None:
    """Write stdout and stderr to the sandbox's files unless they already go there."""
    directory = os.environ.get("MESOS_DIRECTORY")
    if not directory:
        return
    for fd, name in ((1, "stdout"), (2, "stderr")):
        path = os.path.join(directory, name)
        try:
            target = os.stat(path)
            current = os.fstat(fd)
        except OSError:
            current = None
            target = None
        if target is not None and current is not None and os.path.samestat(target, current):
            continue
        opened = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        os.dup2(opened, fd)
        os.close(opened)


class Executor:
    def __init__(self, argv: list[str]) -> None:
        self.flags = flags(argv)
        self.framework_id = {"value": os.environ["MESOS_FRAMEWORK_ID"]}
        self.executor_id = {"value": os.environ["MESOS_EXECUTOR_ID"]}
        pid = os.environ["MESOS_SLAVE_PID"]  # slave(1)@127.0.0.1:5051
        agent, _, address = pid.partition("@")
        self.host, _, port = address.rpartition(":")
        self.port = int(port)
        self.path = f"/{agent}/api/v1/executor"
        self.checkpoint = os.environ.get("MESOS_CHECKPOINT") == "1"
        self.recovery_timeout = duration(os.environ.get("MESOS_RECOVERY_TIMEOUT", "15mins"))
        self.shutdown_grace = duration(os.environ.get("MESOS_EXECUTOR_SHUTDOWN_GRACE_PERIOD", "5secs"))
        self.launcher_dir = self.flags.get("launcher_dir", os.path.dirname(os.path.abspath(__file__)))
        self.events: queue.Queue[tuple[str, Any]] = queue.Queue()
        self.framework_info: dict[str, Any] = {}
        self.task: dict[str, Any] | None = None
        self.unacknowledged: dict[str, dict[str, Any]] = {}  # uuid (base64) -> update
        self.process: subprocess.Popen[bytes] | None = None
        self.killed = False
        self.killed_by_max_completion = False
        self.terminated = False
        self.kill_started: float | None = None
        self.kill_deadline: float | None = None
        self.completion_deadline: float | None = None
        self.ack_deadline: float | None = None
        self.subscribed = False
        self.disconnected_since: float | None = None
        self.done = False
        self.in_subscribe: set[str] = set()  # the updates the last SUBSCRIBE carried
        self.resend_at: float | None = None  # when to send the unacknowledged updates again

    # ---- the connection ------------------------------------------------------------------

    def subscribe(self) -> None:
        self.in_subscribe = set(self.unacknowledged)
        subscribe: dict[str, Any] = {"unacknowledged_updates": list(self.unacknowledged.values())}
        if self.task is not None:
            subscribe["unacknowledged_tasks"] = [self.task]
        body = json.dumps(
            {
                "type": "SUBSCRIBE",
                "framework_id": self.framework_id,
                "executor_id": self.executor_id,
                "subscribe": subscribe,
            }
        )
        threading.Thread(target=self.read_stream, args=(body,), daemon=True).start()

    def read_stream(self, body: str) -> None:
        try:
            connection = http.client.HTTPConnection(self.host, self.port, timeout=None)
            connection.request(
                "POST",
                self.path,
                body=body,
                headers={"Content-Type": "application/json", "Accept": "application/json"},
            )
            response = connection.getresponse()
            if response.status != 200:
                self.events.put(("disconnected", f"SUBSCRIBE: {response.status} {response.read()[:200]!r}"))
                return
            while True:
                size = b""
                while not size.endswith(b"\n"):
                    byte = response.read(1)
                    if not byte:
                        self.events.put(("disconnected", "the agent closed the stream"))
                        return
                    size += byte
                record = response.read(int(size))
                self.events.put(("event", json.loads(record)))
        except (OSError, http.client.HTTPException, ValueError) as error:
            self.events.put(("disconnected", str(error)))

    def send(self, call: dict[str, Any]) -> bool:
        """POST one call; whether the agent took it (202). A failed UPDATE is sent again
        (``resend``): an agent that is recovering answers 503 until it has recovered."""
        call = {"framework_id": self.framework_id, "executor_id": self.executor_id, **call}
        try:
            connection = http.client.HTTPConnection(self.host, self.port, timeout=30)
            connection.request(
                "POST", self.path, body=json.dumps(call), headers={"Content-Type": "application/json"}
            )
            response = connection.getresponse()
            response.read()
            connection.close()
            if response.status == 202:
                return True
            log(f"{call['type']} answered {response.status}")
        except (OSError, http.client.HTTPException) as error:
            log(f"{call['type']} not sent ({error})")
        if call["type"] == "UPDATE":
            self.resend_at = time.monotonic() + 0.5
        return False

    def resend(self) -> None:
        """Send the unacknowledged updates again (after a failed UPDATE, once subscribed)."""
        self.resend_at = None
        for update in list(self.unacknowledged.values()):
            if not self.send({"type": "UPDATE", "update": update}):
                return

    # ---- status updates ------------------------------------------------------------------

    def forward(self, state: str, message: str | None = None, reason: str | None = None) -> None:
        assert self.task is not None
        status: dict[str, Any] = {
            "task_id": self.task["task_id"],
            "state": state,
            "source": "SOURCE_EXECUTOR",
            "executor_id": self.executor_id,
            "timestamp": time.time(),
            "uuid": base64.b64encode(uuid.uuid4().bytes).decode(),
        }
        if reason is not None:
            status["reason"] = reason
        if message is not None:
            status["message"] = message
        update = {"status": status}
        self.unacknowledged[status["uuid"]] = update
        self.send({"type": "UPDATE", "update": update})

    # ---- the task ------------------------------------------------------------------------

    def launch(self, task: dict[str, Any]) -> None:
        if self.task is not None:
            self.send_failed_second(task)
            return
        self.task = task
        self.forward("TASK_STARTING")
        command = task.get("command", {})
        if "task_command" in self.flags:
            command = json.loads(self.flags["task_command"])
        environment = {
            name: {"name": name, "type": "VALUE", "value": value} for name, value in os.environ.items()
        }
        extra = json.loads(self.flags["task_environment"]) if "task_environment" in self.flags else {}
        for source in (extra, command.get("environment", {})):
            for variable in source.get("variables", []):
                if variable.get("type", "VALUE") != "SECRET":
                    environment[variable["name"]] = variable
        resources = task.get("resources") or [{}]
        role = resources[0].get("allocation_info", {}).get("role", "")
        environment["MESOS_ALLOCATION_ROLE"] = {
            "name": "MESOS_ALLOCATION_ROLE",
            "type": "VALUE",
            "value": role,
        }
        launch_info: dict[str, Any] = {
            "command": command,
            "environment": {"variables": list(environment.values())},
        }
        if "task_launch_info" in self.flags:  # what isolators prepared (mounts into a rootfs...)
            prepared = json.loads(self.flags["task_launch_info"])
            for key in ("mounts", "file_operations", "pre_exec_commands", "clone_namespaces"):
                if prepared.get(key):
                    launch_info[key] = prepared[key]
        if "user" in self.flags:
            launch_info["user"] = self.flags["user"]
        if "rootfs" in self.flags:
            launch_info["rootfs"] = self.flags["rootfs"]
            launch_info["working_directory"] = self.flags.get(
                "working_directory", self.flags.get("sandbox_directory", "/")
            )
        argv = ["mesos-containerizer", "launch", f"--launch_info={json.dumps(launch_info)}"]
        if "rootfs" in self.flags:
            argv.append("--unshare_namespace_mnt=true")
        seconds = int(task.get("max_completion_time", {}).get("nanoseconds", 0)) / 1e9
        if seconds > 0:
            self.completion_deadline = time.monotonic() + seconds
        log(f"Starting task {task['task_id']['value']}")
        self.process = subprocess.Popen(
            argv, executable=os.path.join(self.launcher_dir, "mesos-containerizer"), start_new_session=True
        )
        log(f"Forked command at {self.process.pid}")
        threading.Thread(target=self.reap, args=(self.process,), daemon=True).start()
        self.forward("TASK_RUNNING")

    def send_failed_second(self, task: dict[str, Any]) -> None:
        status = {
            "task_id": task["task_id"],
            "state": "TASK_FAILED",
            "source": "SOURCE_EXECUTOR",
            "executor_id": self.executor_id,
            "timestamp": time.time(),
            "uuid": base64.b64encode(uuid.uuid4().bytes).decode(),
            "message": 'Attempted to run multiple tasks using a "command" executor',
        }
        self.unacknowledged[status["uuid"]] = {"status": status}
        self.send({"type": "UPDATE", "update": {"status": status}})

    def reap(self, process: subprocess.Popen[bytes]) -> None:
        self.events.put(("reaped", process.wait()))

    def tree(self, root: int) -> list[int]:
        """The task's processes: its descendants and everything in its session or group
        (upstream's os::killtree(pid, signal, groups=true, sessions=true))."""
        parents: dict[int, int] = {}
        sessions: dict[int, tuple[int, int]] = {}
        for entry in os.listdir("/proc"):
            if not entry.isdigit():
                continue
            try:
                with open(f"/proc/{entry}/stat") as stat:
                    fields = stat.read().rpartition(")")[2].split()
            except OSError:
                continue
            pid = int(entry)
            parents[pid] = int(fields[1])
            sessions[pid] = (int(fields[2]), int(fields[3]))  # group, session
        found = {root}
        changed = True
        while changed:
            changed = False
            for pid, parent in parents.items():
                group, session = sessions[pid]
                if pid not in found and (parent in found or root in (session, group)):
                    found.add(pid)
                    changed = True
        return sorted(found)

    def signal_tree(self, signum: int) -> None:
        if self.process is None:
            return
        for pid in self.tree(self.process.pid):
            try:
                os.kill(pid, signum)
            except ProcessLookupError:
                pass

    def kill(self, grace: float) -> None:
        if self.terminated or self.process is None:
            return
        now = time.monotonic()
        if self.killed:
            if self.kill_started is None or self.kill_deadline is None:  # SIGKILL already sent
                return
            # The grace period may only be shortened (upstream: "increased grace period is a no-op").
            self.kill_deadline = min(self.kill_deadline, self.kill_started + grace)
            return
        capabilities = {c.get("type") for c in self.framework_info.get("capabilities", [])}
        if not self.killed_by_max_completion and "TASK_KILLING_STATE" in capabilities:
            self.forward("TASK_KILLING")
        log(f"Sending SIGTERM to process tree at pid {self.process.pid}")
        self.signal_tree(signal.SIGTERM)
        self.killed = True
        self.kill_started = now
        self.kill_deadline = now + max(0.0, grace)
        self.completion_deadline = None

    def reaped(self, status: int) -> None:
        self.terminated = True
        reason = None
        if self.killed_by_max_completion:
            state, reason = "TASK_FAILED", "REASON_MAX_COMPLETION_TIME_REACHED"
        elif self.killed:
            state = "TASK_KILLED"
        elif status == 0:
            state = "TASK_FINISHED"
        else:
            state = "TASK_FAILED"
        if status >= 0:
            message = f"Command exited with status {status}"
        else:
            message = f"Command terminated with signal {signal.strsignal(-status) or -status}"
        log(f"{message} (pid: {self.process.pid if self.process else '?'})")
        self.forward(state, message, reason)
        self.ack_deadline = time.monotonic() + 60

    # ---- the loop ------------------------------------------------------------------------

    def other(self, kind: str, value: Any) -> None:
        """An event of a subclass's own (``docker_executor.py``); none here."""

    def handle(self, event: dict[str, Any]) -> None:
        kind = event.get("type")
        if kind == "SUBSCRIBED":
            self.framework_info = event["subscribed"].get("framework_info", {})
            self.subscribed = True
            self.disconnected_since = None
            log("Received SUBSCRIBED event")
            # Updates made while that SUBSCRIBE was on its way (the agent away: their UPDATE
            # failed) were not in it: send them now. Upstream's library re-sends SUBSCRIBE
            # with the current unacknowledged updates until it is answered, to the same end.
            for key, update in list(self.unacknowledged.items()):
                if key not in self.in_subscribe:
                    self.send({"type": "UPDATE", "update": update})
        elif kind == "LAUNCH":
            self.launch(event["launch"]["task"])
        elif kind == "LAUNCH_GROUP":
            log("LAUNCH_GROUP event is not supported")
            self.shutdown()
        elif kind == "KILL":
            policy = event["kill"].get("kill_policy") or (self.task or {}).get("kill_policy") or {}
            nanos = policy.get("grace_period", {}).get("nanoseconds")
            grace = int(nanos) / 1e9 if nanos is not None else 3.0
            log(
                f"Received kill for task {event['kill']['task_id']['value']} with grace period of {grace}secs"
            )
            self.kill(grace)
        elif kind == "ACKNOWLEDGED":
            update = self.unacknowledged.pop(event["acknowledged"]["uuid"], None)
            if update is not None and update["status"]["state"] in TERMINAL and self.terminated:
                self.done = True
        elif kind == "SHUTDOWN":
            self.shutdown()
        elif kind == "ERROR":
            log(f"Error: {event.get('error', {}).get('message')}")

    def shutdown(self) -> None:
        log("Shutting down")
        if self.process is None:
            self.done = True
        else:
            self.kill(self.shutdown_grace - 1.0 - 1.0)  # less MAX_REAP_INTERVAL and 1 s, as upstream

    def run(self) -> int:
        self.subscribe()
        while not self.done:
            now = time.monotonic()
            timers = (self.kill_deadline, self.completion_deadline, self.ack_deadline, self.resend_at)
            deadlines = [d for d in timers if d]
            timeout = max(0.0, min(deadlines) - now) if deadlines else 1.0
            try:
                kind, value = self.events.get(timeout=min(timeout, 1.0))
            except queue.Empty:
                kind, value = "tick", None
            now = time.monotonic()
            if kind == "event":
                self.handle(value)
            elif kind == "reaped":
                self.reaped(value)
            elif kind == "disconnected":
                self.subscribed = False
                if not self.checkpoint:
                    log(f"Disconnected from the agent ({value}), no checkpointing: shutting down")
                    self.signal_tree(signal.SIGKILL)
                    return 1
                self.disconnected_since = self.disconnected_since or now
                if now - self.disconnected_since > self.recovery_timeout:
                    log("The agent did not come back within the recovery timeout: shutting down")
                    self.signal_tree(signal.SIGKILL)
                    return 1
                time.sleep(1.0)
                self.subscribe()
            else:
                self.other(kind, value)
            if self.kill_deadline is not None and not self.terminated and now >= self.kill_deadline:
                log(f"Process {self.process.pid if self.process else '?'} did not terminate: sending SIGKILL")
                self.signal_tree(signal.SIGKILL)
                self.kill_deadline = None
            if self.completion_deadline is not None and not self.killed and now >= self.completion_deadline:
                log("Killing the task, which exceeded its maximum completion time")
                self.killed_by_max_completion = True
                self.kill(0.0)
            if self.resend_at is not None and now >= self.resend_at and self.subscribed:
                self.resend()
            if self.ack_deadline is not None and now >= self.ack_deadline and not self.done:
                log("Did not receive ACK for the terminal status update from the agent")
                return 1
        return 0


if __name__ == "__main__":
    sandbox_stdio()
    sys.exit(Executor(sys.argv[1:]).run())
