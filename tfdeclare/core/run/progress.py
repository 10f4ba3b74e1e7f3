"""A job's training progress, derived from what it writes anyway (issue 34): its checkpoint
folder (``spec.checkpoint.dir``: the ``checkpoint`` state file that ``tf.train.Checkpoint``
and ``CheckpointManager`` keep, ``model_checkpoint_path: "ckpt-12"``, and its time) and the
TensorBoard event files of ``spec.tensorboard.logDir`` (each event's step and wall time).

Pure: the shell reads the files (``shell/progressfiles.py``) and hands over an
``Observation``; ``observe`` folds it into the job's last ``Progress`` (kept in its record):
the latest step and when it was reached, steps per second over at least ``RATE_SPAN_S``, the
latest checkpoint (its step, name and time) and an estimated completion time when
``totalSteps`` is declared. Every value a task wrote is bounded here: a step is an int64, a
wall time after the controller's clock is taken as the time it was read.

``since_checkpoint`` is what a restart or a preemption loses: the work since the latest
checkpoint that the running tasks made (since they started when they made none); the planner
and the preemption choice use it.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from tfdeclare.core.run.tfevents import Event

RATE_SPAN_S = 30.0  # steps per second are measured over at least this long
FUTURE_SLACK_S = 60.0  # a wall time this far after the clock is not believed
MAX_NAME = 200  # a checkpoint's name as shown
STATE_FILE = "checkpoint"  # tf.train.CheckpointManager's state file
MAX_STATE_FILE = 64 * 1024  # a state file lists the kept checkpoints: a few hundred bytes

_PATH_LINE = re.compile(rb'^\s*model_checkpoint_path\s*:\s*"((?:[^"\\\n]|\\.){0,4096})"\s*$', re.M)
_STEP = re.compile(r"-(\d{1,19})$")


@dataclass(frozen=True, slots=True)
class Checkpoint:
    """The latest checkpoint: its name (``ckpt-12``), its step (the number its name ends in;
    None when it ends in none) and when it was written (its state file's time)."""

    name: str
    step: int | None
    at: float

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "step": self.step, "at": self.at}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Checkpoint:
        return cls(str(data["name"]), data.get("step"), float(data["at"]))


@dataclass(frozen=True, slots=True)
class Sample:
    step: int
    at: float


@dataclass(frozen=True, slots=True)
class Observation:
    """What the shell read this time, at ``at`` (the controller's clock): the checkpoint named
    by the state file (None: none, or no folder), the new events, and what could not be read
    (``problems``, in words)."""

    at: float
    checkpoint: Checkpoint | None = None
    events: Sequence[Event] = ()
    problems: tuple[str, ...] = ()
    events_read: bool = False  # event files were looked at: checkpoints are then no samples
    started_at: float | None = None  # the running tasks' start: samples before it are an earlier run


@dataclass(frozen=True, slots=True)
class Progress:
    step: int | None = None
    step_at: float | None = None  # when ``step`` was reached (the event's wall time)
    steps_per_second: float | None = None
    base: Sample | None = None  # the earlier sample the rate is measured from
    total_steps: int | None = None
    checkpoint: Checkpoint | None = None
    message: str = ""  # what could not be read, in words ("" when all was)

    @property
    def estimated_completion(self) -> float | None:
        """When ``total_steps`` will be reached at the present rate (None: not known)."""
        if self.total_steps is None or self.step is None or self.step_at is None:
            return None
        if self.step >= self.total_steps:
            return self.step_at
        if not self.steps_per_second:
            return None
        return self.step_at + (self.total_steps - self.step) / self.steps_per_second

    def to_json(self) -> dict[str, Any]:
        return {
            "step": self.step,
            "stepAt": self.step_at,
            "stepsPerSecond": self.steps_per_second,
            "base": [self.base.step, self.base.at] if self.base else None,
            "totalSteps": self.total_steps,
            "checkpoint": self.checkpoint.to_json() if self.checkpoint else None,
            "message": self.message,
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Progress:
        base = data.get("base")
        checkpoint = data.get("checkpoint")
        return cls(
            step=data.get("step"),
            step_at=data.get("stepAt"),
            steps_per_second=data.get("stepsPerSecond"),
            base=Sample(int(base[0]), float(base[1])) if base else None,
            total_steps=data.get("totalSteps"),
            checkpoint=Checkpoint.from_json(checkpoint) if checkpoint else None,
            message=str(data.get("message", "")),
        )


def checkpoint_name(state: bytes) -> str | None:
    """The latest checkpoint a ``checkpoint`` state file names (``model_checkpoint_path``),
    as its last path part; None when it names none. Only the first ``MAX_STATE_FILE`` bytes
    count."""
    found = _PATH_LINE.search(state[:MAX_STATE_FILE])
    if found is None:
        return None
    text = found.group(1).decode("utf-8", "replace").replace('\\"', '"')
    name = text.rstrip("/").rpartition("/")[2]
    return name[:MAX_NAME] or None


def checkpoint_step(name: str) -> int | None:
    """The step a checkpoint's name ends in (``ckpt-12`` -> 12; what ``CheckpointManager``
    writes with ``checkpoint_number`` or the save counter)."""
    found = _STEP.search(name)
    if found is None:
        return None
    step = int(found.group(1))
    return step if step < 1 << 63 else None


def _sane_step(step: int | None) -> int | None:
    return step if step is not None and 0 <= step < 1 << 63 else None


def _time_of(wall: float | None, now: float) -> float:
    return wall if wall is not None and 0 < wall <= now + FUTURE_SLACK_S else now


def observe(previous: Progress | None, seen: Observation, total_steps: int | None) -> Progress:
    """``previous`` with what was read now (module docstring)."""
    prev = previous or Progress()
    now = seen.at
    samples: list[Sample] = []
    if prev.base is not None:
        samples.append(prev.base)
    if prev.step is not None and prev.step_at is not None:
        samples.append(Sample(prev.step, prev.step_at))
    fresh = [
        Sample(step, _time_of(e.wall_time, now))
        for e in seen.events
        if (step := _sane_step(e.step)) is not None
    ]
    checkpoint = seen.checkpoint if seen.checkpoint is not None else prev.checkpoint
    fresh_checkpoint = checkpoint is not None and checkpoint != prev.checkpoint
    if not seen.events_read and fresh_checkpoint and checkpoint is not None and checkpoint.step is not None:
        fresh.append(Sample(checkpoint.step, min(checkpoint.at, now)))
    samples.extend(fresh)
    if seen.started_at is not None:  # an earlier run's samples count only while this one has none
        current = [s for s in samples if s.at >= seen.started_at]
        samples = current or samples
    if not samples:
        return Progress(total_steps=total_steps, checkpoint=checkpoint, message=_words(seen.problems))
    latest = max(samples, key=lambda s: (s.step, s.at))
    earlier = [s for s in samples if s.at <= latest.at - RATE_SPAN_S and s.step <= latest.step]
    base = max(earlier, key=lambda s: s.at) if earlier else min(samples, key=lambda s: s.at)
    span = latest.at - base.at
    rate = round((latest.step - base.step) / span, 4) if span > 0 else prev.steps_per_second
    return Progress(
        step=latest.step,
        step_at=latest.at,
        steps_per_second=rate,
        base=base if base != latest else None,
        total_steps=total_steps,
        checkpoint=checkpoint,
        message=_words(seen.problems),
    )


def _words(problems: Sequence[str]) -> str:
    return "; ".join(problems)


def with_total(progress: Progress | None, total_steps: int | None) -> Progress | None:
    """The progress with a (changed) ``totalSteps`` of the spec."""
    if progress is None or progress.total_steps == total_steps:
        return progress
    return replace(progress, total_steps=total_steps)


def since_checkpoint(progress: Progress | None, started_at: float | None) -> tuple[int | None, float | None]:
    """(the checkpoint a restart resumes from: its step, or None; the time since which work is
    lost): the latest checkpoint when it was written after the running tasks started (an older
    one was their starting point: what they did since they started is lost), else their
    start. (None, None) when neither is known."""
    checkpoint = progress.checkpoint if progress is not None else None
    if checkpoint is not None and (started_at is None or checkpoint.at >= started_at):
        return checkpoint.step, checkpoint.at
    return None, started_at


def duration(seconds: float) -> str:
    """A span in words, as a plan or a status shows it: ``45 s``, ``3 min``, ``2 h 5 min``."""
    seconds = max(0.0, seconds)
    if seconds < 90:
        return f"{seconds:.0f} s"
    minutes = round(seconds / 60)
    if minutes < 120:
        return f"{minutes} min"
    return f"{minutes // 60} h {minutes % 60} min"


def restart_cost(checkpoint_step: int | None, since: float | None, now: float, *, declared: bool) -> str:
    """What stopping a running job's tasks now loses, in words: "resumes from the checkpoint
    at step 12,000, 3 min of work since" or "no checkpoint: 12 min of work since its tasks
    started" (``declared``: the job declares a checkpoint folder)."""
    lost = duration(now - since) if since is not None else None
    if checkpoint_step is not None and since is not None:
        return f"resumes from the checkpoint at step {checkpoint_step:,}, {lost} of work since"
    if since is not None and lost is not None:
        return f"no checkpoint{'' if declared else ' known'}: {lost} of work since its tasks started"
    return "no checkpoint yet"
