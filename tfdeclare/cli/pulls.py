"""Image pull progress as ``apply`` shows it (``backends/progress.py`` sends the events).

On a terminal, one block redrawn in place while images are pulled: a line per image and, under
it, a line per layer with the bytes done of its size. Otherwise (a log, a pipe, a CI job) plain
lines: when a pull starts, one per layer as it is done, and how it ended. The events come from
the backend's launch threads (one per task), so both take a lock.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import TextIO

from tfdeclare.backends import progress
from tfdeclare.backends.progress import PullEvent, PullStep, size

REDRAW_S = 0.1  # bytes are redrawn at most ten times a second (each new state of a layer always)
_DONE = frozenset({"Pull complete", "Already exists"})


@dataclass
class _Layer:
    status: str = ""
    current: int | None = None
    total: int | None = None  # the size it was downloaded with (compressed), once known

    def line(self, layer: str) -> str:
        text = f"  {layer[:12]:<12}  {self.status:<18}"
        if self.status in ("Downloading", "Extracting") and self.current is not None:
            return f"{text} {size(self.current)} / {size(self.total)}"
        if self.total is not None and self.status not in ("Already exists", "Waiting", "Pulling fs layer"):
            return f"{text} {size(self.total)}"
        return text.rstrip()


@dataclass
class _Pull:
    image: str
    job: str
    started: float = field(default_factory=time.monotonic)
    layers: dict[str, _Layer] = field(default_factory=dict)
    outcome: str = ""  # "" while under way

    def update(self, event: PullEvent) -> _Layer | None:
        if event.step is PullStep.LAYER:
            layer = self.layers.setdefault(event.layer, _Layer())
            layer.status = event.status
            if event.total and (event.status == "Downloading" or layer.total is None):
                layer.total = event.total  # the download's size (Extracting's when not downloaded)
            if event.status in ("Downloading", "Extracting"):
                layer.current = event.current
            return layer
        if event.step is PullStep.DONE:
            self.outcome = f"pulled {self.image}: {self.summary()}"
        elif event.step is PullStep.FAILED:
            self.outcome = f"cannot pull {self.image}: {event.status}"
        return None

    def summary(self) -> str:
        fetched = [layer.total for layer in self.layers.values() if layer.total is not None]
        took = time.monotonic() - self.started
        total = f", {size(sum(fetched))} fetched" if fetched else ""
        return f"{len(self.layers)} layer(s){total} in {took:.1f} s"

    def head(self) -> str:
        for_job = f" for job {self.job}" if self.job else ""
        return self.outcome or f"pulling {self.image}{for_job}"


class PlainPulls:
    """A line per step worth a line; ``emit`` writes one (stderr, or the daemon's log)."""

    def __init__(self, emit: Callable[[str], None]) -> None:
        self._emit = emit
        self._lock = threading.Lock()
        self._pulls: dict[str, _Pull] = {}

    def __call__(self, event: PullEvent) -> None:
        with self._lock:
            if event.step is PullStep.STARTED:
                self._pulls[event.image] = pull = _Pull(event.image, event.job)
                self._emit(pull.head())
                return
            pull = self._pulls.setdefault(event.image, _Pull(event.image, event.job))
            layer = pull.update(event)
            if layer is not None and event.status in _DONE:
                how = (
                    "already present" if event.status == "Already exists" else f"pulled, {size(layer.total)}"
                )
                self._emit(f"{event.image}: layer {event.layer[:12]} {how}")
            elif event.step in (PullStep.DONE, PullStep.FAILED):
                self._emit(pull.outcome)
                del self._pulls[event.image]


class LivePulls:
    """One block on a terminal, redrawn in place: each image's line and its layers' lines."""

    def __init__(self, stream: TextIO) -> None:
        self._stream = stream
        self._lock = threading.Lock()
        self._pulls: dict[str, _Pull] = {}
        self._drawn = 0  # lines of the block on the screen now
        self._last = 0.0

    def __call__(self, event: PullEvent) -> None:
        with self._lock:
            if event.step is PullStep.STARTED:
                self._pulls[event.image] = _Pull(event.image, event.job)
            pull = self._pulls.setdefault(event.image, _Pull(event.image, event.job))
            before = pull.layers[event.layer].status if event.layer in pull.layers else None
            layer = pull.update(event)
            # Each new state of a layer is drawn (its first bytes too); bytes between, at most
            # every REDRAW_S.
            moment = layer is None or layer.status != before
            now = time.monotonic()
            if moment or now - self._last >= REDRAW_S:
                self._draw()
                self._last = now
            if all(p.outcome for p in self._pulls.values()):  # the block stays as it is on the screen
                self._pulls.clear()
                self._drawn = 0

    def _draw(self) -> None:
        lines = []
        for pull in self._pulls.values():
            lines.append(pull.head())
            lines.extend(layer.line(name) for name, layer in pull.layers.items())
        up = f"\x1b[{self._drawn}F" if self._drawn else ""
        self._stream.write(up + "".join(f"\x1b[2K{line}\n" for line in lines))
        self._stream.flush()
        self._drawn = len(lines)


def is_live(stream: TextIO) -> bool:
    """A terminal that can redraw lines in place (not ``TERM=dumb``)."""
    if os.environ.get("TERM") == "dumb":
        return False
    try:
        return stream.isatty()
    except (AttributeError, ValueError):  # replaced or closed streams
        return False


def receiver_for(stream: TextIO) -> progress.Receiver:
    """Live on a terminal, plain lines otherwise."""
    if is_live(stream):
        return LivePulls(stream)

    def emit(line: str) -> None:
        stream.write(f"tfdeclare: {line}\n")
        stream.flush()

    return PlainPulls(emit)


@contextmanager
def shown_on(stream: TextIO) -> Iterator[None]:
    """Pull progress goes to ``stream`` while the block runs."""
    previous = progress.set_receiver(receiver_for(stream))
    try:
        yield
    finally:
        progress.set_receiver(previous)
