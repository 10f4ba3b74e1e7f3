"""A container task's launch record while its launcher runs (``launcher.py``): who launches
it (``launcher.json``) and how its image pull goes (``pull.jsonl``), in the task's folder.

``launcher.json`` (written once by the launcher, as it starts): its pid and start tick (to
tell it from a later process reusing its pid), when it started and the pull timeout it
keeps; the controller reads it to signal the launcher and to tell one past its timeout.

``pull.jsonl``: the launcher's ``PullEvent``\\ s, one JSON object a line, appended as the
engine sends them (appending changes the file, not the folder, so it wakes no pass by
itself). The launcher is the only writer; the controller reads what is new since its last
read (``PullView``: only complete lines), hands the events on to whoever shows pulls
(``backends/progress.py``) and keeps a summary for the task's status (bytes fetched of the
layers' sizes). A line that is not an event (a damaged file) is skipped. Both are read only
as regular files, never through a link (``files.read_regular``).
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tfdeclare.backends.progress import PullEvent, PullStep, size
from tfdeclare.files import read_regular, read_regular_at

LAUNCHER_FILE = "launcher.json"
PULL_LOG = "pull.jsonl"
LAUNCHER_MAX_BYTES = 64 << 10
READ_MAX_BYTES = 16 << 20  # of the pull log at a time (its lines are a few hundred bytes)
DONE_STATES = frozenset({"Verifying Checksum", "Download complete", "Extracting", "Pull complete"})


@dataclass(frozen=True, slots=True)
class LauncherInfo:
    """What ``launcher.json`` says."""

    pid: int
    ticks: int
    started_at: float  # unix time
    pull_timeout_s: float

    def to_json(self) -> dict[str, Any]:
        return {
            "pid": self.pid,
            "ticks": self.ticks,
            "startedAt": self.started_at,
            "pullTimeoutSeconds": self.pull_timeout_s,
        }

    @classmethod
    def read(cls, task_dir: Path) -> LauncherInfo | None:
        try:
            data = json.loads(read_regular(task_dir / LAUNCHER_FILE, LAUNCHER_MAX_BYTES))
            return cls(
                int(data["pid"]),
                int(data["ticks"]),
                float(data["startedAt"]),
                float(data["pullTimeoutSeconds"]),
            )
        except (OSError, ValueError, KeyError, TypeError):
            return None

    def overdue(self, now: float, slack_s: float) -> bool:
        """Past its pull timeout and ``slack_s`` more (the launcher ends itself at its timeout:
        one still there then is wedged)."""
        return now > self.started_at + self.pull_timeout_s + slack_s


def event_line(event: PullEvent, echo: bool = False) -> bytes:
    """One line of ``pull.jsonl``; ``echo``: a copy of what another task's log of the same
    launcher has (each task's log has the pull's every event, for its status; only one of
    them is handed on, so a pull is shown once)."""
    data = {
        "echo": echo,
        "step": event.step.value,
        "image": event.image,
        "job": event.job,
        "layer": event.layer,
        "status": event.status,
        "current": event.current,
        "total": event.total,
    }
    return json.dumps(data).encode() + b"\n"


def _event(line: bytes) -> tuple[PullEvent, bool] | None:
    try:
        data = json.loads(line)
        event = PullEvent(
            str(data["image"]),
            PullStep(data["step"]),
            str(data.get("job", "")),
            str(data.get("layer", "")),
            str(data.get("status", "")),
            data.get("current") if isinstance(data.get("current"), int) else None,
            data.get("total") if isinstance(data.get("total"), int) else None,
        )
        return event, data.get("echo") is True
    except (ValueError, KeyError, TypeError):
        return None


@dataclass(slots=True)
class _LayerBytes:
    current: int = 0
    total: int | None = None
    done: bool = False


@dataclass(slots=True)
class PullView:
    """The pull of one task as read so far from its ``pull.jsonl``."""

    path: Path
    offset: int = 0
    image: str = ""
    outcome: PullStep | None = None  # DONE or FAILED once the pull ended
    reason: str = ""
    layers: dict[str, _LayerBytes] = field(default_factory=dict)

    def read_new(self) -> list[PullEvent]:
        """Read the events written since the last read (complete lines only); those to hand
        on (not echoes)."""
        try:
            data, _ = read_regular_at(self.path, self.offset, READ_MAX_BYTES)
        except OSError:  # none yet, or not a regular file (never read through a link)
            return []
        complete = data[: data.rfind(b"\n") + 1]
        self.offset += len(complete)
        events = [e for e in map(_event, complete.splitlines()) if e is not None]
        for event, _ in events:
            self._update(event)
        return [event for event, echo in events if not echo]

    def _update(self, event: PullEvent) -> None:
        self.image = event.image
        if event.step is PullStep.STARTED:
            self.outcome, self.reason, self.layers = None, "", {}
        elif event.step is PullStep.DONE:
            self.outcome = PullStep.DONE
        elif event.step is PullStep.FAILED:
            self.outcome, self.reason = PullStep.FAILED, event.status
        elif event.step is PullStep.LAYER:
            if event.status == "Already exists":
                self.layers.pop(event.layer, None)
                return
            layer = self.layers.setdefault(event.layer, _LayerBytes())
            if event.status == "Downloading":
                layer.current = event.current or 0
                layer.total = event.total or layer.total
            elif event.status in DONE_STATES:
                layer.done = True

    def summary(self) -> str:
        """The pull in words, for the task's status ("" before it began)."""
        if not self.image:
            return ""
        if self.outcome is PullStep.DONE:
            return f"pulled {self.image}; making its container"
        if self.outcome is PullStep.FAILED:
            return f"cannot pull {self.image}: {self.reason}"
        if not self.layers:
            return f"pulling {self.image}: waiting for the registry"
        left = sum(not layer.done for layer in self.layers.values())
        return f"pulling {self.image}: {self.fetched_text()}, {left} of {len(self.layers)} layer(s) to go"

    def fetched_text(self) -> str:
        """How much was fetched, of how much once every layer's size is known."""
        if not self.layers:
            return "nothing fetched yet"
        fetched = sum(
            (layer.total or layer.current) if layer.done else layer.current for layer in self.layers.values()
        )
        sizes = [layer.total for layer in self.layers.values()]
        of = (
            f" of {size(sum(s for s in sizes if s is not None))}" if all(s is not None for s in sizes) else ""
        )
        return f"{size(fetched)}{of} fetched"


def pull_log_size(task_dir: Path) -> int:
    try:
        return os.stat(task_dir / PULL_LOG).st_size
    except OSError:
        return 0
