"""The daemon's part of the history of revisions: after each pass it hands what the pass saw to
the pure recorder (``core/plan/history.observe``) and appends what that returns to the log
(``shell/history.HistoryLog``). An entry the log cannot take (a full disk) is kept and tried
again next pass, logged once, and shown on the status page until it is written; the passes go
on regardless. The status page's History section reads ``recent``.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from pathlib import Path

from tfdeclare.core.plan.history import HistoryEntry, PassFacts, RecorderState, flush, newest_first, observe
from tfdeclare.core.plan.planner import Plan
from tfdeclare.core.run.record import JobRecord, Revision
from tfdeclare.shell.history import HistoryLog

log = logging.getLogger("tfdeclare.daemon")

RECENT = 10  # entries the status page shows
UNWRITTEN_MAX = 100  # entries kept in memory while the log cannot take them


class History:
    def __init__(self, state_dir: Path) -> None:
        self.error: str | None = None  # why the last entries could not be written, until they are
        self._unwritten: list[HistoryEntry] = []
        try:
            self._log: HistoryLog | None = HistoryLog(state_dir)
            entries = self._log.entries
        except OSError as err:
            self._log, entries = None, []
            self.error = f"cannot read {state_dir / 'history.jsonl'}: {err}"
            log.error("history: %s; recording starts afresh", self.error)
        self._state = RecorderState.after(entries)
        self.recent: tuple[HistoryEntry, ...] = tuple(newest_first(entries, limit=RECENT))  # replaced whole
        self._state_dir = state_dir

    def after_pass(
        self,
        plan: Plan,
        revision: Revision | None,
        rejected: tuple[str, str] | None,
        records: Callable[[], Mapping[str, JobRecord]],
        now: float,
        not_applied: Mapping[str, str] | None = None,
    ) -> None:
        """After ``plan`` was applied: ``records`` are the job records then (read only when
        a job changed, for its attempt); ``not_applied``: job -> why its change could not be
        written (a full state disk: recorded as not applied, once)."""
        read: list[Mapping[str, JobRecord]] = []

        def attempt(name: str) -> int | None:
            if not read:
                read.append(records())
            record = read[0].get(name)
            return record.attempt if record is not None else None

        facts = PassFacts(now, plan, revision, rejected, attempt, dict(not_applied or {}))
        self._state, made = observe(self._state, facts)
        self._write(made)

    def stop(self, now: float) -> None:
        """Record a revision still waiting for its jobs to settle, as it stands."""
        self._state, made = flush(self._state, now)
        self._write(made)

    def _write(self, made: list[HistoryEntry]) -> None:
        for entry in made:
            log.info("history: %s — %s", entry.what, entry.outcome_text)
        if made:
            self.recent = (*reversed(made), *self.recent)[:RECENT]
        self._unwritten = [*self._unwritten, *made][-UNWRITTEN_MAX:]
        if not self._unwritten:
            return
        try:
            if self._log is None:
                self._log = HistoryLog(self._state_dir)
            while self._unwritten:
                self._log.append(self._unwritten[0])
                self._unwritten.pop(0)
        except OSError as err:
            if self.error is None:
                log.error(
                    "history: cannot write %s (%s); retrying each pass",
                    self._state_dir / "history.jsonl",
                    err,
                )
            self.error = f"{len(self._unwritten)} entries not written yet: {err}"
            return
        if self.error is not None:
            log.info("history: written again")
        self.error = None
