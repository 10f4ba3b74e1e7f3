"""Holding a container task's port reservation for as long as its container lives.

A process task's supervisor holds the descriptor of its port's machine-wide reservation
(``ports.py``) until the task ends. A container has no tfdeclare process beside it (the engine
supervises it), and the check that a port binds passes until the task's program binds it
(seconds after it starts, TensorFlow's import first): without a holder, another controller
(another state folder, another user) would hand out the same port meanwhile. So the process
that made the container, its launcher (``launcher.py``), keeps the descriptor it was given and
holds it until the engine says the container is no longer running (it ended, was removed, or
the engine does not know it), then closes it (``hold``): one thread per container, each
waiting on the engine (``DockerRuntime.wait_stopped``, answered as the container ends). An
engine that does not answer (stopped, restarting) is asked again every ``RETRY_S``: the port
stays reserved meanwhile, since the container may still run. It is let go without the
engine's word when the task's end is on record (``exit.json``: a controller saw it end) or
its folder is gone, and after ``GIVE_UP_S`` of an engine that does not answer at all (an
engine gone for good, or a ``DOCKER_HOST`` that no longer leads to it: by then a task that
still runs has long bound its port, and the bind check keeps it from being handed out).

The holder is detached from the controller, so a controller that dies (or an ``apply`` that
returns) leaves the reservation in place. A holder that dies itself (killed from outside), or
a container launched by a tfdeclare without holders, leaves its port unheld while the
container runs: the Docker driver sees that at its next look (``ports.held``) and starts a
holder for it (``launcher --hold``) with a new reservation, if nobody took the port meanwhile.
"""

from __future__ import annotations

import contextlib
import os
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Protocol

RETRY_S = 1.0  # an engine that did not answer is asked again after this long
GIVE_UP_S = 600.0  # an engine that answered nothing for this long: the reservation is let go


class _Engine(Protocol):
    def wait_stopped(self, name: str) -> None: ...


def _ended_on_record(folder: Path) -> bool:
    return not folder.is_dir() or (folder / "exit.json").exists()


def hold_one(
    engine: _Engine,
    name: str,
    fd: int,
    folder: Path,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
) -> None:
    """Hold the reservation ``fd`` of the container ``name`` (the task of ``folder``) until it
    is not running, then close it (see the module's note for when it is let go otherwise)."""
    from tfdeclare.backends.local.docker_runtime import EngineError

    away_since: float | None = None  # since when the engine has not answered
    try:
        while True:
            asked = clock()
            try:
                engine.wait_stopped(name)
                return
            except EngineError:
                now = clock()
                if now - asked > 2 * RETRY_S:
                    away_since = None  # it answered (it waited with us) until just now
                away_since = now if away_since is None else away_since
                if _ended_on_record(folder) or now - away_since >= GIVE_UP_S:
                    return
                sleep(RETRY_S)
    finally:
        with contextlib.suppress(OSError):
            os.close(fd)


def hold(engine: _Engine, holds: Sequence[tuple[str, int, Path]]) -> None:
    """Hold each (container name, reservation descriptor, task folder) until that container is
    not running any more, closing each descriptor then; returns once all are closed."""
    threads = [
        threading.Thread(target=hold_one, args=(engine, name, fd, folder), name=f"hold-{name}", daemon=True)
        for name, fd, folder in holds
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
