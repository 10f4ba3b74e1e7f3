"""When the daemon runs a pass, and whether it fetches the source first: a pure scheduler.

``Schedule`` owns the daemon's timing and nothing else. It is told what happened, each with
the time it happened on one monotonic clock (``FileEvent``, ``SyncRequest``, ``PassRequest``,
``PassDone``), and answers ``next(now)``: a ``Step`` saying whether to run a pass now, whether
that pass fetches the source first, which paths it re-reads, and when to look again. It never
reads a clock, sleeps or starts a thread, so its rules are tested as tables in virtual time
(``tests/test_daemon_schedule.py``); the loop (``service.Daemon.run``) waits on one condition
until the step's time or until it is woken, and runs the pass.

The rules:

- **resync**: a pass fetches the source at least every ``interval_s`` (from the end of the last
  fetch's pass), and re-reads every file then, whatever the file events said;
- **sync requests** (``POST /sync``, a webhook delivery) fetch at most once per
  ``min_sync_interval_s``: a request while one is pending joins it (``on`` says False), one
  too soon after the last fetch waits for that interval to pass;
- **file events** are debounced: a pass waits until they have been quiet for ``debounce_s``,
  but not more than ``MAX_DEBOUNCE_S`` after the first of them (a folder written without
  pause is still applied); the pass re-reads only the paths they named;
- **wake-ups**: a pass asked for (``PassRequest``: a backend's watch, a test) runs at once; a
  pass may name when it wants another (a backoff's end, a change that settles), never sooner
  than ``MIN_WAIT_S`` after it ended.
- **write failures**: a pass that could not write what it decided (a full or read-only disk
  under the state or status folder) holds the next one back for ``hold_s`` (``PassDone``), whatever
  asks for it sooner (a restart due now that could not be recorded, a backend's watch seeing
  the files a failed write touched, file events): the passes wait for the disk at a bounded
  pace rather than spin on it.
"""

from __future__ import annotations

from dataclasses import dataclass

MAX_DEBOUNCE_S = 1.0  # file events written without pause delay a pass at most this long
MIN_WAIT_S = 0.01  # a pass that asks for another at once still gets this long between them


@dataclass(frozen=True, slots=True)
class FileEvent:
    """The source saw ``paths`` change (a folder's watch)."""

    at: float
    paths: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class SyncRequest:
    """Fetch the source and run a pass soon (``POST /sync``, a webhook delivery)."""

    at: float


@dataclass(frozen=True, slots=True)
class PassRequest:
    """Run a pass soon (a backend saw a task change)."""

    at: float


@dataclass(frozen=True, slots=True)
class PassDone:
    """The pass a ``Step`` started has ended: at ``at``; ``wake_at``: when it wants another
    (None: no sooner than the resync); ``applied``: whether it read the files it was given (a
    pass that could not read the source gives them back: the next reads every file);
    ``hold_s``: how long no pass may run after it, whatever asks (a write failure)."""

    at: float
    wake_at: float | None = None
    applied: bool = True
    hold_s: float = 0.0  # it could not write what it decided: no pass sooner than this after it


Event = FileEvent | SyncRequest | PassRequest | PassDone


@dataclass(frozen=True, slots=True)
class Step:
    """What to do now: run a pass (``run``), fetching the source first (``sync``), re-reading
    ``changes`` (None: every file), and ask again once it has ended (``wake_at`` is now); or
    nothing, and ask again at ``wake_at`` at the latest (sooner when told of an event)."""

    run: bool
    wake_at: float
    sync: bool = False
    changes: frozenset[str] | None = None


class Schedule:
    """The daemon's timing (see the module's docstring). Not thread-safe: the daemon calls it
    under its one lock."""

    def __init__(self, interval_s: float, debounce_s: float, min_sync_interval_s: float) -> None:
        self.interval_s = interval_s
        self.debounce_s = debounce_s
        self.min_sync_interval_s = min_sync_interval_s
        self._next_sync = float("-inf")  # the first pass fetches
        self._last_sync = float("-inf")
        self._synced = False  # the pass running now fetched
        self._sync_requested = False
        self._pass_requested = False
        self._pass_wake_at = float("inf")
        self._not_before = float("-inf")  # a pass that could not write holds the next back
        self._first_event: float | None = None  # of the burst not yet passed
        self._last_event = float("-inf")
        self._changes: set[str] | None = None  # paths changed since the last pass; None: every file

    def on(self, event: Event) -> bool:
        """Take ``event`` into account; False for a sync request that joins a pending one."""
        match event:
            case FileEvent(at, paths):
                if self._changes is not None:  # None: the next pass reads every file anyway
                    self._changes.update(paths)
                if self._first_event is None:
                    self._first_event = at
                self._last_event = max(self._last_event, at)
            case SyncRequest():
                if self._sync_requested:
                    return False
                self._sync_requested = True
            case PassRequest():
                self._pass_requested = True
            case PassDone(at, wake_at, applied, hold_s):
                self._not_before = at + hold_s if hold_s > 0 else float("-inf")
                if self._synced:
                    self._next_sync = at + self.interval_s
                    self._synced = False
                if not applied:
                    self._changes = None
                self._pass_wake_at = float("inf") if wake_at is None else max(wake_at, at + MIN_WAIT_S)
        return True

    def next(self, now: float) -> Step:
        """What to do at ``now``: a pass to run (its bookkeeping done: requests taken, the
        changed paths handed over), or nothing until ``wake_at``."""
        sync_due = self._last_sync + self.min_sync_interval_s
        fetch = now >= self._next_sync or (self._sync_requested and now >= sync_due)
        quiet_at = self._quiet_at()
        due = (
            fetch
            or self._pass_requested
            or now >= self._pass_wake_at
            or (self._first_event is not None and now >= quiet_at)
        )
        if not due or now < quiet_at:
            return Step(False, max(self._not_before, self._wake_at(quiet_at, sync_due)))
        if now < self._not_before:
            return Step(False, self._not_before)
        if fetch:
            self._sync_requested = False
            self._last_sync = now
            self._synced = True
            self._changes = None  # a resync reads every file, whatever events said
        changes, self._changes = self._changes, set()
        self._pass_requested = False
        self._pass_wake_at = float("inf")
        self._first_event = None
        return Step(True, now, fetch, None if changes is None else frozenset(changes))

    def _quiet_at(self) -> float:
        """When the file events not yet passed will have been quiet long enough (or waited
        for long enough); -inf when there are none."""
        if self._first_event is None:
            return float("-inf")
        return min(self._last_event + self.debounce_s, self._first_event + MAX_DEBOUNCE_S)

    def _wake_at(self, quiet_at: float, sync_due: float) -> float:
        """The earliest time something falls due: the resync, a pending sync request's turn,
        the wake-up a pass asked for, the end of a debounce."""
        times = [self._next_sync, self._pass_wake_at]
        if self._sync_requested:
            times.append(sync_due)
        if self._first_event is not None:
            times.append(quiet_at)
        return min(times)
