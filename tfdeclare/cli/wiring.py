"""Building the pieces a command needs from its settings: backend, controller, lock."""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from tfdeclare.backends import registry
from tfdeclare.backends.base import Backend
from tfdeclare.cli import background
from tfdeclare.cli.common import Settings, UserError, engine_sockets, stderr_line
from tfdeclare.controller import Controller
from tfdeclare.controller.launchpaths import LaunchPaths
from tfdeclare.core.run.lifecycle import Backoff
from tfdeclare.core.run.record import JobRecord
from tfdeclare.core.urls import hide_credentials
from tfdeclare.shell import statedirs
from tfdeclare.shell.lock import ControllerLock, LockHeld, StateFolderRefused
from tfdeclare.shell.statuswriter import STATUS_INDEX, StatusWriter
from tfdeclare.shell.store import StateStore


def make_backend(settings: Settings) -> Backend:
    return settings.plugin.build(settings.state_dir, settings.backend_config)


def make_controller(settings: Settings, backend: Backend) -> Controller:
    def other_backend(name: str) -> Backend:  # a job moving away from it stops its tasks there
        return registry.plugin(name).build(settings.state_dir, settings.config_of(name))

    return Controller(
        StateStore(settings.state_dir, exclusive=True),  # the caller holds the lock
        backend,
        StatusWriter(settings.status_dir, index=settings.state_dir / STATUS_INDEX),
        backoff=Backoff(settings.config.backoff_initial_s, settings.config.backoff_max_s),
        other_backends=other_backend,
        secrets_dir=settings.config.secrets.dir,
        launch_paths=launch_paths(settings),
        non_preemptible=settings.config.policy.non_preemptible_priority,
        protected_classes=settings.config.policy.protected_classes,
    )


def launch_paths(settings: Settings) -> LaunchPaths:
    """What each launch's folders are checked against again (the policy's paths): the state
    and status folders, the engine sockets, ``policy.allowedHostPaths``."""
    reserved = dict.fromkeys(engine_sockets(), "the container engine's socket")
    own = (str(settings.state_dir), str(settings.status_dir))
    reserved.update(dict.fromkeys(own, "tfdeclare's own folder"))
    return LaunchPaths(reserved, settings.config.policy.allowed_host_paths)


# The records a command's controller left, by state folder, for ``locked`` to hand to
# ``background.start_if_needed`` as it lets go: that controller's store holds the lock and is
# the only writer, so reading all the files again (10,000 after an apply of 10,000 jobs: 5 % of
# its time) would tell nothing new. Emptied when a lock is taken.
_left: dict[Path, list[JobRecord]] = {}


@contextmanager
def controller_for(settings: Settings) -> Iterator[Controller]:
    """A controller on the chosen backend; its backends are closed (tasks keep running)."""
    backend = make_backend(settings)
    try:
        controller = make_controller(settings, backend)
        try:
            yield controller
        finally:
            left = controller.store.held()
            if left is not None:
                _left[settings.state_dir] = left
            controller.close()
    finally:
        backend.close()


def lock_error(err: LockHeld) -> UserError:
    holder = err.holder
    if holder.get("purpose") == "daemon":
        source = hide_credentials(str(holder.get("source", "its source")))  # one written before
        return UserError(
            f"a tfdeclare daemon (pid {holder.get('pid', '?')} on {holder.get('host', '?')}) manages this "
            f"state folder from {source}: change the jobs there (it applies them), or stop the daemon first. "
            "`tfdeclare plan` and `tfdeclare status` still work while it runs."
        )
    if background.is_background(holder):  # on another host, or it did not let go in time
        return UserError(
            f"{err}: it is not one this command can ask to yield (another host, or not tfdeclare's), or it "
            f"did not let go within {background.YIELD_TIMEOUT_S:.0f} s; see its log "
            f"{holder.get('log', 'controller.log in the state folder')} (one controller per state folder)"
        )
    return UserError(f"{err}; wait for it to finish (one controller per state folder)")


@contextmanager
def locked(settings: Settings, purpose: str, **details: Any) -> Iterator[ControllerLock]:
    lock = ControllerLock(settings.state_dir)
    try:  # a background controller is asked to yield, and started again after (cli.background)
        background.acquire_yielded(lock, purpose, **details)
    except LockHeld as err:
        raise lock_error(err) from None
    except StateFolderRefused as err:
        raise UserError(str(err)) from None
    _left.pop(settings.state_dir, None)
    try:  # so that a command under another state folder finds this one's jobs
        statedirs.remember(settings.state_dir, settings.backend, time.time())
    except statedirs.RegistryError as err:
        stderr_line(f"tfdeclare: warning: cannot record this state folder for other commands to find: {err}")
    try:
        yield lock
    finally:
        lock.release()
        left = _left.pop(settings.state_dir, None)
        if purpose not in background.NOT_AFTER:
            background.start_if_needed(settings, left)
