"""When the Docker engine was seen away, and whether a container ended then: pure.

The engine stops every container it runs when it stops (SIGTERM, its own grace, SIGKILL) and
closes its API first, so a container that ended while the engine did not answer ended with it
(a restart, an upgrade, a crash): a platform event (``EndCause.ENGINE_RESTART``), not the
job's failure. The driver tells ``EngineOutages`` each time it asked the engine and whether it
answered (its listing, every pass and every 0.3 s while a watching controller has containers
running); an outage is the span from the last answer before a failed ask to the first answer
after it. A container whose end (the engine's ``FinishedAt``) lies in one ended with the
engine; so did one found removed after an outage that ended after it started. What no
controller watched (no ask failed: the engine restarted between two asks, or while no
controller ran) is not known and stays the job's.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass

KEEP = 16  # outages remembered (a container's end is looked at within a pass or two)
SLACK_S = 1.0  # clock skew between the engine's times and ours, and the engine's own shutdown


@dataclass(frozen=True, slots=True)
class Outage:
    """The engine answered at ``last_up``, then did not, and answered again at ``back``
    (None: it still does not)."""

    last_up: float | None  # None: it never answered this controller before
    back: float | None

    def covers(self, at: float) -> bool:
        after = self.last_up is None or at >= self.last_up - SLACK_S
        return after and (self.back is None or at <= self.back + SLACK_S)


class EngineOutages:
    """The engine's outages as one controller saw them (times in unix seconds)."""

    def __init__(self) -> None:
        self._last_up: float | None = None
        self._down: Outage | None = None  # under way
        self._past: deque[Outage] = deque(maxlen=KEEP)

    def saw(self, answered: bool, at: float) -> None:
        """The engine was asked at ``at`` and ``answered`` (or not)."""
        if not answered:
            if self._down is None:
                self._down = Outage(self._last_up, None)
            return
        if self._down is not None:
            self._past.append(Outage(self._down.last_up, at))
            self._down = None
        self._last_up = at

    def outages(self) -> tuple[Outage, ...]:
        current = () if self._down is None else (self._down,)
        return (*self._past, *current)

    def ended_with_engine(self, finished_at: float | None) -> bool:
        """Whether a container that ended at ``finished_at`` ended while the engine was away."""
        return finished_at is not None and any(o.covers(finished_at) for o in self.outages())

    def away_since(self, started_at: float | None) -> bool:
        """Whether the engine was away after ``started_at`` (a container found removed then
        went with it: an engine that restarts with an emptied data root, say)."""
        if started_at is None:
            return False
        return any(o.back is None or o.back >= started_at for o in self.outages())
