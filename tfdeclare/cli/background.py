"""The background controller's handover: start one after a command, ask it to yield before one.

With no daemon, ``apply``, ``delete`` and ``status --refresh`` leave a background controller
(``tfdeclare.cli.keeper``) running while a job still needs one (``core.run.keeping``): a
detached process in its own session, like the local backend's task supervisors, holding the
state folder's lock as any controller does, so there is still one controller per state folder.
A command that needs the lock while it runs asks it to yield (SIGTERM to the pid the lock file
names, only when that holder says it is a background controller of this host), waits for the
lock (at most ``YIELD_TIMEOUT_S``), and starts one again when it is done. A daemon asks the same
and does not start one after. The keeper logs to ``controller.log`` in the state folder.

Off with ``backgroundController: false`` in the config or ``TFDECLARE_BACKGROUND_CONTROLLER=off``.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from tfdeclare.cli.common import Settings, stderr_line
from tfdeclare.core.run.keeping import any_needs_controller
from tfdeclare.core.run.record import JobRecord
from tfdeclare.files import open_append
from tfdeclare.shell.lock import ControllerLock, LockHeld
from tfdeclare.shell.store import StateError, StateStore

PURPOSE = "background controller"
ENV = "TFDECLARE_BACKGROUND_CONTROLLER"
LOG_NAME = "controller.log"
KEEPER_MODULE = "tfdeclare.cli.keeper"
# How long a command waits for a background controller to finish its pass and let go
YIELD_TIMEOUT_S = 30.0
# How long a command waits for the one it started to hold the lock (so that ``status`` right
# after says who keeps the jobs)
STARTED_WAIT_S = 5.0
# The controllers after which none is started: a daemon keeps the jobs itself
NOT_AFTER = frozenset({"daemon", PURPOSE})


def enabled(settings: Settings) -> bool:
    value = os.environ.get(ENV, "").strip().lower()
    if value in ("0", "off", "false", "no"):
        return False
    return settings.config.background_controller


def log_path(state_dir: Path) -> Path:
    return state_dir / LOG_NAME


def is_background(holder: dict[str, Any]) -> bool:
    return holder.get("purpose") == PURPOSE


def ask_to_yield(holder: dict[str, Any]) -> bool:
    """Ask the background controller ``holder`` names to finish its pass and exit. Whether it
    was asked (a holder on another host, or one gone, cannot be)."""
    pid = holder.get("pid")
    if not is_background(holder) or holder.get("host") != socket.gethostname() or not isinstance(pid, int):
        return False
    if pid <= 1 or pid == os.getpid() or not _runs_keeper(pid):
        return False
    try:
        os.kill(pid, signal.SIGTERM)
    except (ProcessLookupError, PermissionError):
        return False
    return True


def _runs_keeper(pid: int) -> bool:
    """Whether ``pid`` runs ``tfdeclare.cli.keeper``: a lock file is evidence, and no other
    process is ever signalled on its word."""
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as handle:
            return KEEPER_MODULE.encode() in handle.read().split(b"\0")
    except OSError:
        return not Path("/proc/self").exists()  # no /proc to look in: the holder's word


def acquire_yielded(lock: ControllerLock, purpose: str, **details: Any) -> None:
    """Take ``lock`` for ``purpose``; a background controller holding it is asked to yield and
    waited for (``YIELD_TIMEOUT_S``). Raises ``LockHeld`` naming the holder otherwise."""
    try:
        lock.acquire(purpose, **details)
        return
    except LockHeld as err:
        if purpose == PURPOSE or not is_background(err.holder) or not ask_to_yield(err.holder):
            raise
        asked = err.holder
    deadline = time.monotonic() + YIELD_TIMEOUT_S
    while True:
        time.sleep(0.05)
        try:
            lock.acquire(purpose, **details)
            return
        except LockHeld as err:
            if not is_background(err.holder) or time.monotonic() >= deadline:
                raise
            if err.holder.get("pid") != asked.get("pid"):  # another one started meanwhile
                asked = err.holder
                ask_to_yield(asked)


# A look at who holds the lock (``ControllerLock.holder``: ``status``, ``logs --follow``, the
# command waiting for the controller it started) takes it for an instant: a background
# controller starting then tries again this many times, this far apart, before it gives way.
PROBE_TRIES = 5
PROBE_PAUSE_S = 0.05


def acquire_past_probes(
    lock: ControllerLock, purpose: str, sleep: Callable[[float], None] = time.sleep, **details: Any
) -> None:
    """Take ``lock`` for ``purpose``, not giving way to a look at it (``PROBE_TRIES``): a
    controller holds it through every try, a look for an instant. Raises ``LockHeld``."""
    for _ in range(PROBE_TRIES - 1):
        try:
            lock.acquire(purpose, **details)
            return
        except LockHeld:
            sleep(PROBE_PAUSE_S)
    lock.acquire(purpose, **details)


def start_if_needed(settings: Settings, records: Iterable[JobRecord] | None = None) -> int | None:
    """Start a background controller for ``settings``' state folder when a job needs one and no
    controller holds the lock; the pid it started, or None. ``records``: every record as the
    command that held the lock left them (its store was the only writer), else they are read."""
    if not enabled(settings) or not StateStore(settings.state_dir).exists():
        return None
    try:
        needed = any_needs_controller(
            records if records is not None else StateStore(settings.state_dir).records().values()
        )
    except StateError:
        needed = True  # it says, in its log and the status files, what cannot be read
    lock = ControllerLock(settings.state_dir)
    if not needed or lock.holder() is not None:
        return None
    command = [
        sys.executable,
        "-m",
        KEEPER_MODULE,
        "--state-dir",  # first: test teardown finds it by its state folder
        str(settings.state_dir),
        "--status-dir",
        str(settings.status_dir),
        "--backend",
        settings.backend,
    ]
    if settings.config_path is not None:
        command += ["--config", str(settings.config_path.absolute())]
    try:
        log = open_log(log_path(settings.state_dir))
        try:
            child = subprocess.Popen(
                command,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=log,
                start_new_session=True,
                close_fds=True,
            )
        finally:
            os.close(log)
    except OSError as err:
        stderr_line(
            f"tfdeclare: warning: cannot start a background controller ({err}); "
            "the jobs move on at the next `tfdeclare apply` or `status --refresh`"
        )
        return None
    deadline = time.monotonic() + STARTED_WAIT_S
    while time.monotonic() < deadline and child.poll() is None:
        holder = lock.holder()
        if holder is not None and holder.get("pid") == child.pid:
            break
        time.sleep(0.05)
    return child.pid


LOG_LIMIT_BYTES = 1 << 20  # then it is renamed to controller.log.1 (one old log kept)


def open_log(path: Path) -> int:
    """The log's descriptor for appending; a log over ``LOG_LIMIT_BYTES`` is moved aside first."""
    try:
        if path.stat().st_size > LOG_LIMIT_BYTES:
            os.replace(path, path.with_name(path.name + ".1"))
    except FileNotFoundError:
        pass
    return open_append(path, 0o600)
