"""The command executor's health checks (``TaskInfo.health_check``), as upstream runs them.

Upstream: ``src/checks/health_checker.cpp`` and ``src/launcher/executor.cpp`` (1.11). After
``delay_seconds`` a check runs every ``interval_seconds``: ``TCP`` connects to
``127.0.0.1:port``, ``COMMAND`` runs its CommandInfo (``shell`` as the task's; the check's own
environment over the task's, in the sandbox), each bounded by ``timeout_seconds``. A failure
within ``grace_period_seconds`` of the launch, before any success, is ignored. The first
success, and the first success after failures, send ``TASK_RUNNING`` with ``healthy: true``;
the first failure sends ``healthy: false`` (reason ``REASON_TASK_HEALTH_CHECK_STATUS_UPDATED``
on both); at ``consecutive_failures`` failures in a row the update is sent and the executor
kills the task (its kill policy), whose terminal update then carries ``healthy: false``.

Checks run for tasks of the command executor (processes); the probes run on threads, the
results and timers on the emulator's loop and clock.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

from .clock import Clock, Handle

REASON = "REASON_TASK_HEALTH_CHECK_STATUS_UPDATED"


def _tcp(port: int, timeout: float) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=timeout):
            return True
    except OSError:
        return False


def _command(command: dict[str, Any], env: dict[str, str], cwd: Path, timeout: float) -> bool:
    if command.get("shell", True):
        executable, argv = "/bin/sh", ["sh", "-c", command.get("value", "")]
    else:
        argv = list(command.get("arguments", [])) or [command.get("value", "")]
        executable = command.get("value", argv[0])
    full = dict(env)
    for variable in command.get("environment", {}).get("variables", []):
        if "value" in variable:
            full[variable["name"]] = variable["value"]
    try:
        child = subprocess.Popen(
            argv,
            executable=executable,
            cwd=cwd,
            env=full,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )
    except OSError:
        return False
    try:
        return child.wait(timeout=timeout) == 0
    except subprocess.TimeoutExpired:
        with contextlib.suppress(OSError):
            os.killpg(child.pid, signal.SIGKILL)
        child.wait()
        return False


class HealthChecker:
    """One task's checks. ``update(healthy)`` sends a TASK_RUNNING update; ``kill()`` asks the
    executor to kill the task (after which ``unhealthy`` is true)."""

    def __init__(
        self,
        check: dict[str, Any],
        *,
        clock: Clock,
        post: Callable[[Callable[[], None]], None],
        env: dict[str, str],
        sandbox: Path,
        update: Callable[[bool], None],
        kill: Callable[[], None],
        alive: Callable[[], bool],
    ) -> None:
        self.check = check
        self.clock = clock
        self.post = post  # runs a callable on the loop thread
        self.env = env
        self.sandbox = sandbox
        self.update = update
        self.kill = kill
        self.alive = alive  # false once the task ended or its agent died: checks stop
        self.started = clock.now()
        self.initializing = True
        self.failures = 0
        self.healthy: bool | None = None
        self.unhealthy = False
        self.stopped = False
        self._timer: Handle | None = None

    def start(self) -> None:
        self._schedule(float(self.check.get("delay_seconds", 15.0)))

    def stop(self) -> None:
        self.stopped = True
        if self._timer is not None:
            self._timer.cancel()

    def _schedule(self, delay: float) -> None:
        if not self.stopped:
            self._timer = self.clock.call_later(delay, self._run)

    def _run(self) -> None:
        if self.stopped or not self.alive():
            self.stopped = True
            return
        timeout = float(self.check.get("timeout_seconds", 20.0))
        kind = self.check.get("type")

        def probe() -> None:
            if kind == "TCP":
                ok = _tcp(int(self.check["tcp"]["port"]), timeout)
            elif kind == "COMMAND":
                ok = _command(self.check["command"], self.env, self.sandbox, timeout)
            else:
                ok = True  # HTTP is not emulated: never fails
            self.post(lambda: self._result(ok))

        threading.Thread(target=probe, name="emulator-health-check", daemon=True).start()

    def _result(self, ok: bool) -> None:
        if self.stopped:
            return
        interval = float(self.check.get("interval_seconds", 10.0))
        if ok:
            self.initializing = False
            if self.healthy is not True:
                self.update(True)
            self.healthy, self.failures = True, 0
            self._schedule(interval)
            return
        grace = float(self.check.get("grace_period_seconds", 10.0))
        if self.initializing and self.clock.now() - self.started < grace:
            self._schedule(interval)  # ignored: still starting
            return
        self.failures += 1
        killing = self.failures >= int(self.check.get("consecutive_failures", 3))
        if self.failures == 1 or killing:
            self.update(False)
        self.healthy = False
        if killing:
            self.unhealthy = True
            self.stop()
            self.kill()
            return
        self._schedule(interval)
