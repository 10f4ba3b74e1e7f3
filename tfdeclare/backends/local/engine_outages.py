"""When the Docker engine was seen away, and whether a container ended with it: pure.

The engine stops every container it runs when it stops (SIGTERM or the container's stop
signal, its own grace, SIGKILL) and then closes its API, so a container that ended with it
ended with a signal (a restart, an upgrade, a crash): a platform event
(``EndCause.ENGINE_RESTART``), not the job's failure. The driver tells ``EngineOutages`` each
time it asked the engine and whether it answered (its listing, every pass and every 0.3 s while
a watching controller has containers running); an outage is the span from the last answer
before a failed ask to the first answer after it.

What the engine says about itself decides, in its own order. A stopping engine keeps answering
while it stops its containers (Debian's dockerd: some 10 s after its SIGTERM, up to its
shutdown timeout) and closes its API only after the last one ended, so a listing in that
window sees a container ended by a signal with the engine "up". Such an end (an exit code
above 128 that the engine's inspect does not explain: not the kernel's OOM kill) is not
judged on first sight: ``verdict`` holds it back (``WAIT``) until the engine has answered
``HOLD_S`` past the end (then it is the job's: the engine stayed) or stopped answering within
``HOLD_S`` of it (then it ended with the engine). ``HOLD_S`` bounds the wait: a real signal
(an operator's ``docker kill``, a task's own) is the job's ``HOLD_S`` late, never lost. Any
other end lies in an outage (with ``SLACK_S`` for the clocks) or is the job's at once; so is a
container found removed after an outage that ended after it started. What no controller
watched (no ask failed: the engine restarted between two asks, or while no controller ran) is
not known and stays the job's.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass
from enum import Enum

KEEP = 16  # outages remembered (a container's end is looked at within a pass or two)
SLACK_S = 1.0  # clock skew between the engine's times and ours, and the engine's own shutdown
# How long past a signal's end the engine must go on answering before the end is the job's:
# more than a stopping engine takes from its first container's end to closing its API (its
# shutdown timeout, 15 s by default, then its kills; a container's own stop timeout, 10 s
# by default, within it).
HOLD_S = 20.0


class Verdict(Enum):
    """Whether a container's end was the engine's (``ENGINE``), the job's (``JOB``), or is
    not known yet (``WAIT``: look again; ``EngineOutages.ripe`` says when)."""

    ENGINE = "engine"
    JOB = "job"
    WAIT = "wait"


@dataclass(frozen=True, slots=True)
class Outage:
    """The engine answered at ``last_up``, then did not, and answered again at ``back``
    (None: it still does not)."""

    last_up: float | None  # None: it never answered this controller before
    back: float | None

    def covers(self, at: float, before_s: float = SLACK_S) -> bool:
        """Whether ``at`` lies in it, or up to ``before_s`` before it began (the engine went
        away that soon after)."""
        after = self.last_up is None or at >= self.last_up - before_s
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

    def verdict(self, finished_at: float | None, signalled: bool) -> Verdict:
        """Whose end a container's was that ended (non-zero) at ``finished_at``; one that
        ``signalled`` is held back until the engine has answered ``HOLD_S`` past it."""
        if finished_at is None:
            return Verdict.JOB
        if not signalled:
            return Verdict.ENGINE if self.ended_with_engine(finished_at) else Verdict.JOB
        if any(o.covers(finished_at, HOLD_S) for o in self.outages()):
            return Verdict.ENGINE  # it went away within HOLD_S of the end: it was stopping
        return Verdict.JOB if self.ripe(finished_at) else Verdict.WAIT

    def ripe(self, finished_at: float) -> bool:
        """Whether the engine has answered ``HOLD_S`` past ``finished_at`` and answers now."""
        return self._down is None and self._last_up is not None and self._last_up >= finished_at + HOLD_S

    def away_since(self, started_at: float | None) -> bool:
        """Whether the engine was away after ``started_at`` (a container found removed then
        went with it: an engine that restarts with an emptied data root, say)."""
        if started_at is None:
            return False
        return any(o.back is None or o.back >= started_at for o in self.outages())
