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
stays reserved meanwhile, since the container may still run.

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
from collections.abc import Sequence
from typing import Protocol

RETRY_S = 1.0  # an engine that did not answer is asked again after this long


class _Engine(Protocol):
    def wait_stopped(self, name: str) -> None: ...


def _hold_one(engine: _Engine, name: str, fd: int) -> None:
    from tfdeclare.backends.local.docker_runtime import EngineError

    try:
        while True:
            try:
                engine.wait_stopped(name)
                return
            except EngineError:
                time.sleep(RETRY_S)
    finally:
        with contextlib.suppress(OSError):
            os.close(fd)


def hold(engine: _Engine, holds: Sequence[tuple[str, int]]) -> None:
    """Hold each (container name, reservation descriptor) until that container is not
    running any more, closing each descriptor then; returns once all are closed."""
    threads = [
        threading.Thread(target=_hold_one, args=(engine, name, fd), name=f"hold-{name}", daemon=True)
        for name, fd in holds
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
