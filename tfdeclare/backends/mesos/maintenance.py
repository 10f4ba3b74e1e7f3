"""Maintenance windows and inverse offers: pure decisions, table-tested.

Mesos' maintenance primitives (upstream docs, "Maintenance Primitives"): an operator posts a
schedule of windows (machines, an ``Unavailability``: start and optional duration). From then
on the machines are *draining*: their offers carry ``unavailability``, and every framework
using resources on them gets *inverse offers* asking for those resources back, which it
accepts (a best-effort promise to be off by the window's start) or declines (it cannot, or
not yet; a filter says when to ask again). The operator then takes the machines down, and
whatever still runs there is lost. A drain (``DRAIN_AGENT``, Mesos 1.9+) needs nothing of the
scheduler: the agent gets no more offers and kills its tasks with their kill policy's grace,
reason ``REASON_AGENT_DRAINING`` (``taskstate.cause_of``).

This module owns:

- ``window_of``: an ``Unavailability`` (JSON) as a ``Window`` in seconds;
- ``cuts_in``: whether an agent's window concerns a gang placed now: any window that has not
  ended does, since a training job's run has no known end (placement then prefers agents
  outside every window, and uses one inside only when nothing else fits);
- ``answer``: what to do with an inverse offer for an agent where ``tasks`` of ours run.
  None of ours there: accept. Otherwise move them (stop them the graceful way, each with its
  grace period, so a job using ``PreemptionCheckpointHandler`` saves its step; the controller
  restarts it elsewhere as a platform event, not counted against ``backoffLimit``) once the
  window is near enough that they would end within their grace plus ``MARGIN_S`` of its
  start, and decline meanwhile with a filter until then (the master asks again). When no
  agent outside every window is known (from the offers: every agent offered lately is in
  one), moving is impossible (the job would come back to an agent going down, and again, its
  platform budget spent for nothing): decline, asked again after ``CANNOT_MOVE_REFUSE_S``
  (seen on a real master whose agents share one machine id, so one window covers them all).
  Once they
  are being moved, the inverse offer is held (the master sends no other for the agent while
  one is outstanding) and accepted as soon as nothing of ours runs there.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

MARGIN_S = 60.0  # tasks on an agent going into maintenance end this long before the window
ASK_AGAIN_S = 5.0  # the shortest filter of a decline: the master asks again no sooner
MAX_REFUSE_S = 3600.0  # a window far ahead: asked again at least hourly (it may move)
CANNOT_MOVE_REFUSE_S = 60.0  # no agent outside a window known: asked again after this


@dataclass(frozen=True, slots=True)
class Window:
    start: float  # unix seconds
    end: float | None = None  # None: no duration given (unavailable from start on)

    def __str__(self) -> str:
        length = "indefinitely" if self.end is None else f"for {self.end - self.start:.0f} s"
        return f"from {self.start:.0f} {length}"


def _seconds(raw: Any) -> float | None:
    if isinstance(raw, Mapping):
        value = raw.get("nanoseconds")
        if isinstance(value, int | float) and not isinstance(value, bool):
            return float(value) / 1e9
    return None


def window_of(raw: Any) -> Window | None:
    """``{"start": {"nanoseconds": N}, "duration": {"nanoseconds": D}}`` -> a Window."""
    if not isinstance(raw, Mapping):
        return None
    start = _seconds(raw.get("start"))
    if start is None:
        return None
    duration = _seconds(raw.get("duration"))
    return Window(start, None if duration is None else start + max(0.0, duration))


def cuts_in(window: Window | None, now: float) -> bool:
    """A gang placed now would still run when the window comes (it has not ended)."""
    return window is not None and (window.end is None or window.end > now)


@dataclass(frozen=True, slots=True)
class OurTask:
    """A task of ours alive on the agent an inverse offer asks back."""

    task_id: str
    grace_s: float
    moving: bool = False  # already asked to stop (for this or for anything else)


@dataclass(frozen=True, slots=True)
class Answer:
    accept: bool
    move: tuple[str, ...] = ()  # task ids to stop now, cause Maintenance
    refuse_s: float = ASK_AGAIN_S  # a decline's filter: when the master asks again
    why: str = ""
    hold: bool = False  # neither: answered (accepted) once the moved tasks have ended


def answer(window: Window | None, tasks: Sequence[OurTask], now: float, elsewhere: bool = True) -> Answer:
    """The answer to one inverse offer (see the module doc); ``elsewhere``: an agent outside
    every maintenance window is known."""
    if not tasks:
        return Answer(True, why="nothing of ours runs there")
    longest = max(t.grace_s for t in tasks)
    move_at = (window.start if window is not None else now) - longest - MARGIN_S
    if now < move_at:
        wait = min(MAX_REFUSE_S, max(ASK_AGAIN_S, move_at - now))
        return Answer(
            False, refuse_s=wait, why=f"{len(tasks)} task(s) move off {move_at - now:.0f} s from now"
        )
    if not elsewhere:
        why = "no agent outside a maintenance window is known: it cannot move"
        return Answer(False, refuse_s=CANNOT_MOVE_REFUSE_S, why=why)
    moving = tuple(t.task_id for t in tasks if not t.moving)
    return Answer(False, move=moving, why=f"moving {len(tasks)} task(s) off before the window", hold=True)
