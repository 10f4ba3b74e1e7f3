"""The Mesos backend's framework record: who it is to the master, and whether it may act.

This module owns ``FrameworkRecord``: the framework file (``journal.FrameworkStore``: the id
the master assigned, saved before anything acts on it; this state folder's instance id; whether
GPU offers were asked for), the capabilities it subscribes with (``info``), the credentials
(loaded on first use), and its two end states: *fatal* (the master removed the framework and
policy ``onFrameworkRemoved`` is ``fail``: its tasks are gone, ``removed_for_good``; or the
client stopped for good: every call raises the error) and *read-only* (another scheduler
took the framework over: nothing is recorded, acknowledged or sent any more), both one
field, ``fatal``: the error every call raises, its type saying which (``FrameworkGone``,
``TakenOver``). The loop thread writes it; callers read ``fatal`` only.
"""

from __future__ import annotations

import getpass
import logging
import socket
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

from tfdeclare.backends.base import BackendError
from tfdeclare.backends.mesos.auth import Credentials
from tfdeclare.backends.mesos.config import MesosConfig
from tfdeclare.backends.mesos.errors import (
    ClientStoppedError,
    FrameworkFailedOverError,
    FrameworkRemovedError,
    SubscribeRefusedError,
    TerminalError,
)
from tfdeclare.backends.mesos.info import Capability, FrameworkInfo
from tfdeclare.backends.mesos.journal import FrameworkState, FrameworkStore
from tfdeclare.backends.mesos.taskinfo import LABEL_PREFIX
from tfdeclare.core.errors import ErrorCode

log = logging.getLogger("tfdeclare.mesos")


class FrameworkGone(BackendError):
    """Fatal: the master removed our framework and policy ``onFrameworkRemoved`` is ``fail``."""


class TakenOver(BackendError):
    """Fatal and read-only: another scheduler subscribed as our framework."""


def older_than(version: str, than: tuple[int, int]) -> bool:
    """``version`` ("1.8.0", "1.8.1-rc2") is below ``than``; False when it cannot be read."""
    parts = version.split(".")
    try:
        major, minor = int(parts[0]), int(parts[1].split("-")[0])
    except (IndexError, ValueError):
        return False
    return (major, minor) < than


class FrameworkRecord:
    """See the module docstring. ``gpu_wanted``: the journal holds a live GPU task."""

    def __init__(
        self,
        root: Path,
        config: MesosConfig,
        load_credentials: Callable[[], Credentials | None],
        gpu_wanted: bool,
    ) -> None:
        self.config = config
        self.store = FrameworkStore(root)
        self.state: FrameworkState = self.store.load()  # raises JournalError
        self._load_credentials = load_credentials
        self._credentials: Credentials | None = None
        self._gpu_wanted = gpu_wanted
        self.fatal: BackendError | None = None  # written by the loop, read by callers

    @property
    def gpu_enabled(self) -> bool:
        """Subscribe with GPU_RESOURCES: configured, asked for once (framework.json), or a
        live GPU task in the journal."""
        return self.config.gpu_resources or self.state.gpu_resources or self._gpu_wanted

    @property
    def removed_for_good(self) -> bool:
        """The master removed the framework and policy ``onFrameworkRemoved`` is ``fail``: its
        tasks are gone (the task table says so), nothing is subscribed or launched."""
        return isinstance(self.fatal, FrameworkGone)

    @property
    def read_only(self) -> bool:
        """Another scheduler took the framework over: nothing is recorded, acknowledged or
        sent any more."""
        return isinstance(self.fatal, TakenOver)

    @property
    def owner(self) -> str:
        return f"{self.config.framework_name}/{self.state.instance_id}"

    def usable(self) -> None:
        if self.fatal is not None:
            raise self.fatal

    def credentials(self) -> Credentials | None:
        """The credentials, loaded on first use (on the loop)."""
        if self._credentials is None:
            self._credentials = self._load_credentials()
        return self._credentials

    def info(self, gpu: bool | None = None) -> FrameworkInfo:
        config = self.config
        capabilities = [Capability.PARTITION_AWARE, Capability.TASK_KILLING_STATE]
        if self.gpu_enabled if gpu is None else gpu:
            capabilities.append(Capability.GPU_RESOURCES)
        return FrameworkInfo(
            user=config.user or getpass.getuser(),
            name=config.framework_name,
            id=self.state.framework_id,
            failover_timeout=config.failover_timeout_s,
            checkpoint=config.checkpoint,
            roles=tuple(config.roles),
            principal=config.principal,
            hostname=config.hostname or socket.gethostname(),
            webui_url=config.webui_url,
            capabilities=tuple(capabilities),
            labels={f"{LABEL_PREFIX}instance": self.state.instance_id},
        )

    # ---- changes (on the loop) ------------------------------------------------------------------

    def subscribed(self, framework_id: str) -> None:
        """Save the id the master assigned before anything acts on it."""
        if framework_id != self.state.framework_id:
            self.state = replace(self.state, framework_id=framework_id)
            self.store.save(self.state)

    def enable_gpu(self) -> None:
        """GPU_RESOURCES from now on (remembered in framework.json)."""
        self.state = replace(self.state, gpu_resources=True)
        self.store.save(self.state)

    def removed(self, now: float) -> str | None:
        """The master refused our framework id for good: its tasks were killed, so they are
        to be taken as gone now (the id removed is returned; None: handled already). Then
        fatal (policy ``fail``: the id is kept, nothing is subscribed or launched until an
        operator chooses), or the id is archived and the next subscription starts a new
        framework (``newFramework``)."""
        framework_id = self.state.framework_id
        if framework_id is None or isinstance(self.fatal, FrameworkGone):
            # handled already (the client's terminal event and the connecting caller both
            # report it): archived (no id now), or fatal
            return None
        if self.config.on_framework_removed != "newFramework":
            self.fatal = FrameworkGone(
                f"the Mesos master removed framework {framework_id} (its failover timeout ran out, or it "
                "was torn down), so its tasks were killed; nothing starts again until an operator chooses. "
                f"To start a new framework, move {self.store.path} away (or set mesos.onFrameworkRemoved: "
                "newFramework); the jobs then restart per their restart policy.",
                code=ErrorCode.FRAMEWORK_REFUSED,
            )
            log.error("%s", self.fatal)
            return framework_id
        archived = self.store.archive(f"removed-{int(now)}")
        log.error(
            "the Mesos master removed framework %s; starting a new framework (old id kept in %s)",
            framework_id,
            archived,
        )
        self.state = FrameworkState(None, self.state.instance_id, self.state.gpu_resources)
        self.store.save(self.state)
        return framework_id

    def terminated(self, error: TerminalError) -> None:
        """The client stopped for a reason other than a removed framework or refused
        credentials (those the caller handles): read-only, or fatal."""
        if isinstance(error, ClientStoppedError | FrameworkRemovedError | SubscribeRefusedError):
            return
        if isinstance(error, FrameworkFailedOverError):
            self.fatal = TakenOver(
                f"another scheduler subscribed as framework {self.state.framework_id} and took "
                "over; this controller stops acting (is the same state folder used elsewhere?)",
                code=ErrorCode.FRAMEWORK_REFUSED,
            )
            log.error("%s", self.fatal)
        else:
            self.fatal = BackendError(f"the Mesos client stopped: {error}", code=ErrorCode.CLIENT_STOPPED)
