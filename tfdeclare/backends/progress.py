"""Progress of what a backend does for a while on this machine (pulling an image), for
whoever shows it: ``apply`` on the terminal, the daemon in its log.

A backend reports ``PullEvent``\\ s with ``report``; the command that runs the controller
chooses who receives them with ``set_receiver`` (nobody by default). Events come from the
backend's launch threads, so a receiver must be thread-safe.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass
from enum import StrEnum


class PullStep(StrEnum):
    STARTED = "started"  # the pull of ``image`` began (for ``job``)
    LAYER = "layer"  # a layer's state: ``status``, bytes ``current`` of ``total``
    DONE = "done"  # the image is there
    FAILED = "failed"  # it could not be pulled: ``status`` says why


@dataclass(frozen=True, slots=True)
class PullEvent:
    image: str
    step: PullStep
    job: str = ""
    layer: str = ""
    status: str = ""  # the engine's words for the layer ("Downloading", "Pull complete") or why it failed
    current: int | None = None
    total: int | None = None


def size(n: int | None) -> str:
    """Bytes as the engine's own client shows them (decimal units)."""
    if n is None:
        return "?"
    value = float(n)
    for unit in ("B", "kB", "MB", "GB"):
        if value < 1000 or unit == "GB":
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1000
    raise AssertionError  # the loop returns at GB


Receiver = Callable[[PullEvent], None]

_lock = threading.Lock()
_receiver: Receiver | None = None


def set_receiver(receiver: Receiver | None) -> Receiver | None:
    """Send every later event to ``receiver`` (None: to nobody); returns the previous one."""
    global _receiver
    with _lock:
        previous, _receiver = _receiver, receiver
    return previous


def report(event: PullEvent) -> None:
    with _lock:
        receiver = _receiver
    if receiver is not None:
        receiver(event)
