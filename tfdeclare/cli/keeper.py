"""The background controller's process (``python -m tfdeclare.cli.keeper --state-dir DIR ...``).

Started detached by ``cli.background`` after a command; it takes the state folder's lock (or
exits when a controller holds it: a look at the lock, which holds it for an instant, does not
make it give way, ``background.acquire_past_probes``), then runs reconcile passes, woken by
the backend's watch as the daemon's loop is, until no job needs a controller
(``core.run.keeping``) or it is asked to yield (SIGTERM: the pass under way finishes, the
lock is let go). What it does goes to ``controller.log`` in the state folder, moved aside
when it passes ``LOG_LIMIT_BYTES``.
A SIGKILL leaves nothing to clean: the kernel drops the lock and the next command adopts the
tasks, as after any controller's crash.
"""

from __future__ import annotations

import argparse
import logging
import os
import signal
import sys
import threading
import time
from pathlib import Path
from types import FrameType

from tfdeclare.backends.base import BackendError
from tfdeclare.cli import background
from tfdeclare.cli.common import settings_from
from tfdeclare.cli.logformat import LineFormatter
from tfdeclare.cli.wiring import controller_for
from tfdeclare.core.enums import Phase
from tfdeclare.core.run.keeping import any_needs_controller
from tfdeclare.shell.lock import ControllerLock, LockHeld, StateFolderRefused
from tfdeclare.shell.store import StateError

log = logging.getLogger("tfdeclare.keeper")
_PASS_S = 1.0  # at most this long between passes without a wake-up


class _Log:
    """Lines to the log (the process's stdout and stderr are the same file), moved aside
    whenever it grows past the limit."""

    def __init__(self, state_dir: str) -> None:
        self.path = background.log_path(Path(state_dir))

    def rotate(self) -> None:
        try:
            if os.fstat(2).st_size <= background.LOG_LIMIT_BYTES:
                return
        except OSError:
            return
        fd = background.open_log(self.path)
        os.dup2(fd, 1)
        os.dup2(fd, 2)
        os.close(fd)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="tfdeclare-keeper")
    parser.add_argument("--state-dir", required=True)
    parser.add_argument("--status-dir", required=True)
    parser.add_argument("--backend", required=True)
    parser.add_argument("--config")
    args = parser.parse_args(argv)
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(LineFormatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    logging.basicConfig(level=logging.INFO, handlers=[handler])
    out = _Log(args.state_dir)
    stop = threading.Event()
    wake = threading.Event()

    def asked(signum: int, _frame: FrameType | None) -> None:
        stop.set()
        wake.set()

    for signum in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(signum, asked)
    settings = settings_from(args)
    lock = ControllerLock(settings.state_dir)
    try:
        background.acquire_past_probes(lock, background.PURPOSE, log=str(out.path))
    except LockHeld as err:
        log.info("not started: %s", err)
        return 0
    except StateFolderRefused as err:
        log.error("not started: %s", err)
        return 1
    log.info("pid %d keeps the jobs of %s", os.getpid(), settings.state_dir)
    try:
        with controller_for(settings) as controller:
            controller.backend.watch(wake.set)
            phases: dict[str, str] = {}
            told: set[str] = set()  # the last pass's errors, as logged (once per change)
            while not stop.is_set():
                out.rotate()
                wake_at: float | None = None
                try:  # an unreachable engine or master is each job's lastError: the pass goes on
                    result = controller.reconcile()
                    told = _log_changes(told, [str(error) for error in result.errors])
                    wake_at = result.wake_at
                    records = controller.store.records()
                except (BackendError, OSError, StateError) as err:
                    told = _log_changes(told, [f"a pass could not finish, retrying: {err}"])
                    wake.wait(5.0)
                    wake.clear()
                    continue
                for name, record in records.items():
                    now = (Phase.DELETING if record.deleting else record.phase).value
                    if phases.get(name) != now:
                        log.info("%s: %s %s", name, now, record.message)
                        phases[name] = now
                if not any_needs_controller(records.values()):
                    log.info("no job needs a controller; exiting")
                    break
                pause = _PASS_S if wake_at is None else max(0.05, min(_PASS_S, wake_at - time.time()))
                if result.unobserved or any(e.terminal and e.job is None for e in result.errors):
                    pause = 5.0  # a cluster it cannot reach or act on: as after a failed pass
                wake.wait(pause)
                wake.clear()
            if stop.is_set():
                log.info("asked to yield; exiting")
    except Exception:  # a bug: the next command adopts the jobs and starts another
        log.exception("internal error (a bug; please report it); exiting")
        return 3
    finally:
        lock.release()
    return 0


def _log_changes(told: set[str], errors: list[str]) -> set[str]:
    """Each error not logged by the last pass, and each of those gone: a pass may come every
    second while an engine is away, its log one line per change."""
    now = set(errors)
    for error in errors:
        if error not in told:
            log.error("%s", error)
    for error in sorted(told - now):
        log.info("cleared: %s", error)
    return now


if __name__ == "__main__":
    sys.exit(main())
