"""The local backend's health checks (``healthCheck``): probes run by this controller.

One thread schedules, a small pool of threads probes: the scheduler asks the pure
``tfdeclare.core.run.health`` when each running task's next probe is due, hands it to the pool
and records each result as it comes; nothing here is ever waited for by a pass (``verdicts``
only reads what the probes found so far) and a probe never waits for another beyond the pool's
bound. A probe is bounded by its ``timeoutSeconds``: a TCP connect with that timeout, a command
(an argv list, in the task's working folder with its environment, in a session of its own,
killed with its group when it runs over), or a ``stat`` of the watched file (``progress``); one
that still has not answered counts as failed (``health.expire``). When a task turns unhealthy
the backend's watchers are notified, so a pass comes at once and stops and restarts it.

A task in a container (the Docker runtime) runs its ``exec`` check in its container, through
the engine (``in_container``: ``DockerDriver.health_exec``), as ``docker exec`` would; its
``progress`` path is the container's, looked at through the task's mounts
(``docker_runtime.host_path``): a path no mount holds is a failed probe, never a file of this
machine.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from tfdeclare.backends.local.docker_runtime import host_path
from tfdeclare.backends.local.record import LocalTask, TaskRuntime
from tfdeclare.core.run import health
from tfdeclare.core.spec.health import HealthCheck, HealthCheckKind

PROBE_WORKERS = 4  # probes at once, over all tasks
IDLE_WAKE_S = 5.0  # the scheduler looks at least this often
OUTPUT_KEPT = 200  # characters of a failed command's output kept in the message


@dataclass(slots=True)
class _Probed:
    task: LocalTask
    check: HealthCheck
    state: health.ProbeState
    future: Future[str | None] | None = None


def _tcp(task: LocalTask, check: HealthCheck) -> str | None:
    if task.port is None:
        return "the task has no port"
    try:
        with socket.create_connection((task.host, task.port), timeout=check.timeout_s):
            return None
    except OSError as err:
        return f"{task.host}:{task.port}: {err.strerror or err}"


def _exec(task: LocalTask, check: HealthCheck) -> str | None:
    try:
        child = subprocess.Popen(
            list(check.command),
            cwd=task.cwd,
            env=dict(task.env),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    except OSError as err:
        return f"cannot run {check.command[0]}: {err.strerror or err}"
    try:
        output, _ = child.communicate(timeout=check.timeout_s)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(OSError):
            os.killpg(child.pid, signal.SIGKILL)
        child.communicate()
        return f"still running after {check.timeout_s:g} s (timeoutSeconds)"
    if child.returncode == 0:
        return None
    tail = output.decode("utf-8", "replace").strip()[-OUTPUT_KEPT:]
    return f"exited {child.returncode}" + (f": {tail}" if tail else "")


def _progress(task: LocalTask, check: HealthCheck, now: float) -> str | None:
    if check.path is None:
        path, what = task.log_path, "its log"
    elif task.runtime is TaskRuntime.DOCKER:  # the container's path, looked at through its mounts
        found = host_path(task, check.path)
        if found is None:
            return (
                f"{check.path} is not in a folder the container shares with this machine (its "
                "working folder or a volume): it cannot be watched"
            )
        path, what = Path(found), check.path
    else:
        path = Path(check.path)
        if not path.is_absolute():
            path = Path(task.cwd or task.work_dir or ".") / path
        what = check.path
    try:
        modified: float | None = path.stat().st_mtime
    except OSError:
        modified = None
    return health.progress_failure(modified, now, check.stalled_s, what)


InContainer = Callable[[LocalTask, Sequence[str], float], str | None]


def probe(
    task: LocalTask,
    check: HealthCheck,
    clock: Callable[[], float] = time.time,
    in_container: InContainer | None = None,
) -> str | None:
    """One probe of ``task``: None when it passes, else why not."""
    if check.kind is HealthCheckKind.TCP:
        return _tcp(task, check)
    if check.kind is HealthCheckKind.EXEC:
        if task.runtime is TaskRuntime.DOCKER:
            if in_container is None:
                return "no container engine to run it in"
            return in_container(task, check.command, check.timeout_s)
        return _exec(task, check)
    return _progress(task, check, clock())


class Prober:
    """The probes of the running tasks ``track`` was last given; ``verdicts`` says which are
    unhealthy. ``notify`` is called (from the scheduler's thread) when one turns unhealthy."""

    def __init__(
        self,
        notify: Callable[[], None],
        clock: Callable[[], float] = time.time,
        workers: int = PROBE_WORKERS,
        in_container: InContainer | None = None,
    ) -> None:
        self._notify = notify
        self._in_container = in_container
        self._clock = clock
        self._workers = workers
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._closed = False
        self._probed: dict[str, _Probed] = {}
        self._unhealthy: dict[str, str] = {}  # task id -> its verdict, once unhealthy
        self._thread: threading.Thread | None = None
        self._pool: ThreadPoolExecutor | None = None

    def track(self, running: Iterable[tuple[LocalTask, float]]) -> dict[str, str]:
        """Probe these tasks (each with when it started, unix seconds), and no others; the
        verdicts so far of the unhealthy ones (task id -> why)."""
        added = False
        with self._lock:
            keep: dict[str, _Probed] = {}
            for task, started_at in running:
                check = task.health_check
                if check is None:
                    continue
                probed = self._probed.get(task.task_id)
                if probed is None:
                    probed = _Probed(task, check, health.begin(check, started_at))
                    added = True
                keep[task.task_id] = probed
            self._probed = keep
            self._unhealthy = {i: why for i, why in self._unhealthy.items() if i in keep}
            verdicts = dict(self._unhealthy)
            start = added and self._thread is None and not self._closed
            if start:
                self._pool = ThreadPoolExecutor(self._workers, thread_name_prefix="tfdeclare-probe")
                self._thread = threading.Thread(target=self._run, name="tfdeclare-prober", daemon=True)
        if start and self._thread is not None:
            self._thread.start()
        if added:
            self._wake.set()
        return verdicts

    def _run(self) -> None:
        while True:
            self._wake.clear()
            with self._lock:
                if self._closed:
                    return
                turned, wake = self._round(self._clock())
            if turned:
                self._notify()
            delay = IDLE_WAKE_S if wake is None else min(IDLE_WAKE_S, max(0.0, wake - self._clock()))
            self._wake.wait(delay)

    def _round(self, now: float) -> tuple[bool, float | None]:
        """Record finished probes, expire late ones, start due ones (under the lock)."""
        turned = False
        wakes = []
        for probed in self._probed.values():
            if probed.state.unhealthy:
                continue  # judged for good
            if probed.future is not None and probed.future.done():
                try:
                    failure = probed.future.result()
                except Exception as err:  # a probe's own error is its failure
                    failure = f"the probe failed: {err}"
                probed.state = health.finished(probed.state, probed.check, failure, now)
                probed.future = None
            elif probed.future is not None:
                probed.state = health.expire(probed.state, probed.check, now)
                if probed.state.in_flight_since is None:
                    probed.future = None  # it counted as failed; its thread ends by its own timeout
            if health.due(probed.state, now) and self._pool is not None:
                probed.state = health.started(probed.state, now)
                probed.future = self._pool.submit(
                    probe, probed.task, probed.check, self._clock, self._in_container
                )
                probed.future.add_done_callback(lambda _: self._wake.set())
            if probed.state.unhealthy:
                turned = True
                self._unhealthy[probed.task.task_id] = health.verdict(probed.state, probed.check) or ""
            wake = health.wake_at(probed.state, probed.check)
            if wake is not None:
                wakes.append(wake)
        return turned, min(wakes, default=None)

    def close(self) -> None:
        with self._lock:
            self._closed = True
            self._probed.clear()
            thread, pool = self._thread, self._pool
        self._wake.set()
        if thread is not None:
            thread.join(timeout=1)
        if pool is not None:
            pool.shutdown(wait=False, cancel_futures=True)
