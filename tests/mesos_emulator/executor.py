"""Task runners: the built-in command executor as real processes, or a simulation.

Owns what happens to one task on an agent once it is launched:

* ``ProcessRunner`` — the command executor: ``shell: true`` runs ``/bin/sh -c value``,
  ``shell: false`` runs ``value`` with ``arguments`` as argv; each task is a new process
  group (session) in its sandbox, with stdout/stderr to the sandbox's ``stdout`` and
  ``stderr`` files. Kill: SIGTERM to the group, SIGKILL after the grace period. The exit
  is reported with Mesos' ``WSTRINGIFY`` wording ("Command exited with status 3",
  "Command terminated with signal Terminated").
* ``SimulatedRunner`` — no process: the task runs until killed, or finishes after the
  number of seconds in its ``emulator.duration`` label with ``emulator.exit_code``.
* launch-time checks that the agent/containerizer (not the master) does: Docker network
  and port mapping rules, image pull failures (a test knob), URI fetching.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import shutil
import signal
import subprocess
import tarfile
import threading
import urllib.parse
import urllib.request
import zipfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from .clock import Clock, Handle
from .docker_run import docker_network_error, mesos_image_error

log = logging.getLogger("mesos_emulator.executor")


class RunnerEvents(Protocol):
    """What a runner reports back to its agent."""

    def running(self, ip_address: str | None = None) -> None: ...

    def exited(self, state: str, message: str, reason: str | None) -> None: ...


@dataclass
class LaunchSpec:
    task: dict[str, Any]
    sandbox: Path
    env: dict[str, str]
    kill_grace_default: float
    killing_state: bool


def labels_of(task: dict[str, Any]) -> dict[str, str]:
    return {label["key"]: label.get("value", "") for label in task.get("labels", {}).get("labels", [])}


def describe_wait_status(returncode: int) -> str:
    """``"Command " + WSTRINGIFY(status)`` for a ``subprocess`` return code."""
    if returncode >= 0:
        return f"Command exited with status {returncode}"
    signum = -returncode
    name = signal.strsignal(signum) or f"Unknown signal {signum}"
    return f"Command terminated with signal {name}"


def command_argv(command: dict[str, Any]) -> tuple[str, list[str]]:
    """(executable, argv) as the command executor execs them.

    With ``shell: false`` Mesos execs ``value`` with ``arguments`` as the *whole* argv
    (``arguments[0]`` is argv[0]), like ``execvp(value, arguments)``.
    """
    if command.get("shell", True):
        return "/bin/sh", ["sh", "-c", command.get("value", "")]
    arguments = list(command.get("arguments", []))
    value = command.get("value") or (arguments[0] if arguments else "")
    return value, arguments or [value]


def container_launch_error(task: dict[str, Any], failing_images: set[str]) -> str | None:
    """Errors the docker/mesos containerizer reports at launch (``TASK_FAILED``)."""
    container = task.get("container")
    if container is None:
        return None
    image: str | None = None
    if container.get("type") == "DOCKER":
        docker = container.get("docker", {})
        image = docker.get("image")
        error = docker_network_error(container, docker, task.get("resources", []))
        if error:
            return error
    elif "mesos" in container and "image" in container["mesos"]:
        spec = container["mesos"]["image"]
        error = mesos_image_error(spec)
        if error:
            return error
        image = spec.get("docker", spec.get("appc", {})).get("name")
    if image is not None and (image in failing_images or "*" in failing_images):
        return f"Failed to pull image '{image}': emulated image pull failure"
    return None


# --------------------------------------------------------------------------------------
# fetching


def fetch_uris(uris: list[dict[str, Any]], sandbox: Path) -> str | None:
    """Fetch CommandInfo URIs into the sandbox (blocking); returns an error or None."""
    for uri in uris:
        value = uri["value"]
        parsed = urllib.parse.urlparse(value)
        name = uri.get("output_file") or Path(parsed.path).name or "download"
        target = sandbox / name
        try:
            if parsed.scheme in ("http", "https"):
                with urllib.request.urlopen(value, timeout=30) as response, target.open("wb") as out:
                    shutil.copyfileobj(response, out)
            elif parsed.scheme in ("", "file"):
                shutil.copyfile(parsed.path if parsed.scheme == "file" else value, target)
            else:
                return f"unsupported URI scheme in '{value}'"
            if uri.get("executable", False):
                target.chmod(0o755)
            elif uri.get("extract", True):
                _extract(target, sandbox)
        except (OSError, ValueError, tarfile.TarError, zipfile.BadZipFile) as exc:
            return f"failed to fetch '{value}': {exc}"
    return None


def _extract(path: Path, sandbox: Path) -> None:
    name = path.name
    if name.endswith((".tar", ".tar.gz", ".tgz", ".tar.bz2", ".tbz2", ".tar.xz", ".txz")):
        with tarfile.open(path) as archive:
            archive.extractall(sandbox, filter="data")
    elif name.endswith(".zip"):
        with zipfile.ZipFile(path) as archive:
            for member in archive.namelist():
                resolved = (sandbox / member).resolve()
                if not resolved.is_relative_to(sandbox.resolve()):
                    raise ValueError(f"unsafe path {member!r} in archive")
            archive.extractall(sandbox)


# --------------------------------------------------------------------------------------
# runners


class Runner:
    """Common kill / max-completion-time bookkeeping."""

    def __init__(self, spec: LaunchSpec, events: RunnerEvents, clock: Clock) -> None:
        self.spec = spec
        self.events = events
        self.clock = clock
        self.killed = False
        self.finished = False
        self.killed_by_completion_timer = False
        self._timers: list[Handle] = []
        completion = spec.task.get("max_completion_time")
        if completion is not None:
            delay = completion["nanoseconds"] / 1e9
            self._timers.append(clock.call_later(delay, self._completion_timeout))

    def _completion_timeout(self) -> None:
        if not self.finished and not self.killed:
            self.killed_by_completion_timer = True
            self.kill(0.0)

    def grace_period(self, override: dict[str, Any] | None) -> float:
        policy = override or self.spec.task.get("kill_policy")
        if policy and "grace_period" in policy:
            return max(0.0, float(policy["grace_period"]["nanoseconds"]) / 1e9)
        return self.spec.kill_grace_default

    def _finish(self, state: str, message: str) -> None:
        if self.finished:
            return
        self.finished = True
        for timer in self._timers:
            timer.cancel()
        reason = None
        if self.killed_by_completion_timer:
            state, reason = "TASK_FAILED", "REASON_MAX_COMPLETION_TIME_REACHED"
        self.events.exited(state, message, reason)

    def launch(self) -> None:
        raise NotImplementedError

    def kill(self, grace: float) -> None:
        raise NotImplementedError

    def destroy(self) -> None:
        """Stop immediately without reporting (agent death, emulator shutdown)."""
        self.finished = True
        for timer in self._timers:
            timer.cancel()


class ProcessRunner(Runner):
    def __init__(
        self,
        spec: LaunchSpec,
        events: RunnerEvents,
        clock: Clock,
        loop: asyncio.AbstractEventLoop,
        on_process: Callable[[int, bool], None],
    ) -> None:
        super().__init__(spec, events, clock)
        self.loop = loop
        self.process: subprocess.Popen[bytes] | None = None
        self._on_process = on_process

    def launch(self) -> None:
        command = self.spec.task.get("command", {})
        executable, argv = command_argv(command)
        sandbox = self.spec.sandbox
        with (sandbox / "stdout").open("ab") as out, (sandbox / "stderr").open("ab") as err:
            try:
                self.process = subprocess.Popen(
                    argv,
                    executable=executable,
                    cwd=sandbox,
                    env=self.spec.env,
                    stdin=subprocess.DEVNULL,
                    stdout=out,
                    stderr=err,
                    start_new_session=True,
                    close_fds=True,
                )
            except (OSError, ValueError) as exc:
                err.write(f"Failed to execute '{executable}': {exc}\n".encode())
                self.events.running()
                self._finish("TASK_FAILED", describe_wait_status(1))
                return
        self._on_process(self.process.pid, True)
        self.events.running()
        threading.Thread(target=self._wait, name=f"task-wait-{self.process.pid}", daemon=True).start()

    def _wait(self) -> None:
        assert self.process is not None
        code = self.process.wait()
        with contextlib.suppress(RuntimeError):
            self.loop.call_soon_threadsafe(self._exited, code)

    def _exited(self, code: int) -> None:
        assert self.process is not None
        self._on_process(self.process.pid, False)
        if self.finished:
            return
        state = "TASK_FINISHED" if code == 0 else "TASK_FAILED"
        if self.killed:
            state = "TASK_KILLED"
        self._finish(state, self.describe_exit(code))

    def describe_exit(self, code: int) -> str:
        return describe_wait_status(code)

    def _signal(self, signum: int) -> None:
        if self.process is None or self.process.returncode is not None:
            return
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.process.pid, signum)

    def kill(self, grace: float) -> None:
        if self.finished or self.killed:
            return
        self.killed = True
        self._signal(signal.SIGTERM)
        if grace <= 0:
            self._signal(signal.SIGKILL)
        else:
            self._timers.append(self.clock.call_later(grace, lambda: self._signal(signal.SIGKILL)))

    def destroy(self) -> None:
        super().destroy()
        self._signal(signal.SIGKILL)


class SimulatedRunner(Runner):
    def launch(self) -> None:
        labels = labels_of(self.spec.task)
        self.events.running()
        duration = labels.get("emulator.duration")
        if duration is not None:
            code = int(labels.get("emulator.exit_code", "0"))
            self._timers.append(self.clock.call_later(float(duration), lambda: self._exit(code)))

    def _exit(self, code: int) -> None:
        self._finish("TASK_FINISHED" if code == 0 else "TASK_FAILED", describe_wait_status(code))

    def kill(self, grace: float) -> None:
        if self.finished or self.killed:
            return
        self.killed = True
        self._timers.append(
            self.clock.call_later(
                0.0,
                lambda: self._finish("TASK_KILLED", describe_wait_status(-signal.SIGTERM)),
            )
        )


def kill_process_group(pid: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, signal.SIGKILL)
