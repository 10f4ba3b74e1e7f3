"""``Daemon``: the level-triggered loop. Anything may ask for a pass (``request_pass``,
``request_sync``, ``on_file_event``): that only tells the schedule (``schedule.Schedule``, pure,
which owns every timing rule: resync every ``interval``, sync requests coalesced, file events
debounced, the wake-up a pass asks for). The loop waits on one condition until the schedule
says a pass is due, then fetches when told, applies, reconciles and publishes. A pass that
cannot read the source keeps the last applied state running and says so (log, /healthz,
metrics); the newest revision always supersedes an older one. A pass that could not write
(a full or read-only state or status disk) holds the next back for ``write_retry_s``, whatever
asks sooner, and its write errors are logged when they change, not every pass.

Files are seen while they are written, so the daemon plans with a settle time: a change that
stops or restarts tasks is made once the files have said the same for ``settle`` seconds (the
planner's settle rule; the daemon keeps its sightings from pass to pass and wakes when one
settles). A git source is applied as checked out: its snapshot is written whole before it
becomes current (``Source.whole``), so a git revision is applied at once: no settle time.
Jobs the plan keeps as applied for a reason (an unreadable listing, a file without a job,
the prune-everything guard) are logged as a warning whenever that set changes.

After each pass the daemon records the standing *source problems* (``core.plan.problems``:
each file that cannot be applied, a failed fetch, an unverified head) in ``Shown.problems``, which
the endpoints answer from (``/healthz``, ``/jobs``, ``/metrics``, the page); when they change it
logs each that appeared or cleared, posts it to the webhooks and writes them to
``<state-dir>/problems.json`` for ``tfdeclare status`` (``shell.problems``).

**What the endpoints show** comes from one frozen ``Shown`` the loop publishes once per pass
(a reference swap): the ``View`` (the status documents it wrote and the records they came
from), the recent events, the problems, the revision, the source error and what could not be
written. An HTTP thread reads one pass's state whole and never reads a file or waits for a
pass: a pass over 10,000 jobs or a 100,000-task job leaves ``/``, ``/jobs`` and ``/healthz``
answering. Until the first pass has ended, the view is what the status files said when the
daemon was made. ``/jobs`` lists at most ``JOBS_TASKS`` tasks over all jobs
(each job's document as its status file has it until then; past it ``tasks`` is empty and
``tasksTruncated`` says so); ``job`` pages one job's tasks.
"""

from __future__ import annotations

import bisect
import json
import logging
import threading
import time
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Protocol
from urllib.parse import quote

from tfdeclare.backends.base import BackendError, LogChunk, LogOffsetError
from tfdeclare.controller import Controller
from tfdeclare.core.config import WebhookConfig
from tfdeclare.core.diagnostics import Code, Diagnostic
from tfdeclare.core.enums import Phase, Reason
from tfdeclare.core.errors import UNREACHABLE_REPORT_S, ErrorCode, RuntimeProblem
from tfdeclare.core.plan.planner import Action, Plan, PlanCache, PlanOptions, Sighting, plan
from tfdeclare.core.plan.problems import (
    BranchFailure,
    Problem,
    bounded,
    changes,
    counts,
    held_back,
    standing,
)
from tfdeclare.core.plan.scope import PruneScope
from tfdeclare.core.run import status
from tfdeclare.core.run.record import JobRecord, Revision
from tfdeclare.core.spec.keys import ORDER, TaskKey
from tfdeclare.core.spec.model import fingerprint
from tfdeclare.core.spec.names import is_job_name
from tfdeclare.core.spec.policy import Quota
from tfdeclare.daemon import page, schedule
from tfdeclare.daemon.alerts import Alert, HealthReason
from tfdeclare.daemon.fetcher import Fetcher
from tfdeclare.daemon.history import History
from tfdeclare.daemon.httpguard import INT64_MAX, BadRequest
from tfdeclare.daemon.metrics import Metrics
from tfdeclare.daemon.schedule import Schedule
from tfdeclare.daemon.sources import GitSource, SourceError
from tfdeclare.daemon.webhooks import Notifier, PhaseChange, ProblemChange
from tfdeclare.files import failed_write
from tfdeclare.shell import problems as problems_file
from tfdeclare.shell import statedirs
from tfdeclare.shell.sources import SpecFiles
from tfdeclare.shell.writable import folder_problem

log = logging.getLogger("tfdeclare.daemon")


class Source(Protocol):
    """Where desired state comes from (``FolderSource``, ``GitSource``). ``sync`` brings the
    files up to date (a no-op for a folder) and names the revision; ``watch`` reports paths
    changed between syncs (a git checkout changes only at ``sync``, so it reports none);
    ``write_status`` publishes the status folder (a no-op for a folder, which is its own)."""

    @property
    def description(self) -> str: ...

    @property
    def specs_path(self) -> Path: ...

    def sync(self) -> Revision | None: ...

    def watch(self, on_change: Callable[[list[str]], None]) -> None: ...

    def write_status(self, status_dir: Path, revision: Revision | None) -> None: ...

    def close(self) -> None: ...

    rejected: tuple[str, str] | None  # (commit, why) of a fetched head not applied (signatures)
    whole: bool  # its revisions are read whole (git snapshots): no settle time for them

    @property
    def kept(self) -> Mapping[str, list[str]]:
        """Unused revision snapshots kept for files tasks wrote into them: commit -> those files."""


@dataclass(frozen=True, slots=True)
class DaemonOptions:
    interval_s: float = 30.0
    debounce_s: float = 0.05
    prune: bool = False
    allow_empty: bool = False
    settle_s: float = 3.0
    webhooks: tuple[WebhookConfig, ...] = ()
    quotas: tuple[Quota, ...] = ()  # the config's policy.quotas
    max_jobs: int | None = None  # the config's policy.maxJobs (None: not bounded)
    scope: PruneScope | None = None  # the jobs it may prune: those applied from its own source
    min_sync_interval_s: float = 1.0  # POST /sync fetches at most this often (the rest coalesce)


RECENT_EVENTS = 50  # phase changes the status page shows
WRITE_RETRY_S = 5.0  # a pass that could not write: the next waits this long (at most the interval)
WRITE_ERRORS = frozenset({ErrorCode.STATE_WRITE_FAILED, ErrorCode.STATUS_WRITE_FAILED})
JOBS_TASKS = 100_000  # tasks /jobs lists at most, over all its jobs (the rest: /jobs/NAME)


@dataclass(frozen=True, slots=True)
class View:
    """What the endpoints show, as of a pass: each job's status document (in name order) and
    the record it came from (to page tasks past those the document lists)."""

    documents: tuple[dict[str, Any], ...]
    records: Mapping[str, JobRecord]
    texts: tuple[str, ...] | None = None  # the documents as JSON, when known

    def document(self, name: str) -> dict[str, Any] | None:
        """The job's document (a bisection: the documents are in name order)."""
        at = bisect.bisect_left(self.documents, name, key=lambda d: str(d["name"]))
        found = self.documents[at] if at < len(self.documents) else None
        return found if found is not None and found["name"] == name else None


TAIL_BUDGET_S = 1.0  # time the page may spend reading its jobs' log tails
TAIL_ROLES = ("chief", "worker", "evaluator", "ps", "tensorboard")  # whose log a card shows


def _hiding(text: str | None, url: str | None, shown: str) -> str | None:
    """``text`` with the source's URL, which may hold credentials, as problems show it."""
    return text.replace(url, shown) if text is not None and url else text


@dataclass(frozen=True, slots=True)
class Shown:
    """What the endpoints answer from, as of the last pass: the loop publishes a new one once
    per pass (one reference swap), so an HTTP thread reads one pass's state whole, never a
    field the loop is writing. ``view`` is the status files' until the first pass has ended."""

    view: View
    started_at: float
    problems: tuple[Problem, ...] = ()  # the standing source problems (``bounded``: those shown)
    problems_omitted: int = 0  # how many more stand, not shown
    events: tuple[PhaseChange, ...] = ()  # newest first, at most RECENT_EVENTS
    revision: Revision | None = None
    source_error: str | None = None
    # What could not be written, shown in /healthz, /metrics and the page until it can be:
    # job -> "PATH (why)" from the last pass, the folders that cannot take a write now
    # ("state"/"status" -> why), and a pass that failed on a write outside any one job.
    write_failures: Mapping[str, str] = field(default_factory=dict)
    folder_problems: Mapping[str, str] = field(default_factory=dict)
    pass_write_error: str | None = None
    status_branch: BranchFailure | None = None  # git mode: the status branch not written or pushed
    not_started: Mapping[str, str] = field(default_factory=dict)  # job -> why: under another state folder
    # What the last pass met, each with its code (``core.errors``); a job's is also its lastError
    pass_errors: tuple[RuntimeProblem, ...] = ()
    last_pass_at: float | None = None
    # Since when passes have met an unreachable cluster or engine (``ErrorCode.unreachable``),
    # without a pass between that did not: reported once it has stood ``UNREACHABLE_REPORT_S``
    unreachable_since: float | None = None
    source_read: bool = True  # False until a git source's first fetch has been applied
    fetching_since: float | None = None  # when the fetch running now started (git mode)


class Daemon:
    """The loop (``run``: wait for the schedule, fetch, apply, reconcile, publish) and the
    endpoints' answers (from ``shown``). Three kinds of thread call it: the loop, the source's
    and the backend's watches (``on_file_event``, ``request_pass``: they only tell the
    schedule) and the HTTP workers (they only read ``shown``, and ask for a fetch)."""

    def __init__(
        self,
        source: Source,
        controller: Controller,
        spec_files: SpecFiles,
        status_dir: Path,
        options: DaemonOptions,
        *,
        clock: Callable[[], float] = time.time,
        monotonic: Callable[[], float] = time.monotonic,
        problems_path: Path | None = None,
    ) -> None:
        self.source = source
        self.controller = controller
        self.spec_files = spec_files
        self.status_dir = status_dir
        self.options = options
        self.clock = clock  # the records' time (the controller's), the wake-ups passes ask for
        self.monotonic = monotonic  # the schedule's
        self.metrics = Metrics()
        self.notifier = Notifier(options.webhooks, lambda result: self.metrics.count_webhook(result.value))
        self.history = History(controller.state_root)  # the revisions acted on (`tfdeclare history`)
        # The timing (``schedule.Schedule``), told what happens under ``_wake``, which the loop
        # waits on; ``_stopping`` is set under it too.
        self._schedule = Schedule(options.interval_s, options.debounce_s, options.min_sync_interval_s)
        self._wake = threading.Condition()
        self._stopping = False
        # The standing source problems are persisted in ``problems_path`` when given (the
        # daemon's state folder); ``_problems_saved`` is False while that file cannot be written.
        self.problems_path = problems_path
        self._problems_saved = True
        # What the loop remembers from pass to pass (only the loop reads or writes these).
        self._phases: dict[str, Phase] | None = None  # as last seen; None until the first pass
        self._diagnostics: tuple[Diagnostic, ...] = ()  # as last logged
        self._plans = PlanCache()
        self._sightings: Mapping[str, Sighting] = {}
        self._held: Mapping[str, tuple[Reason, str]] = {}  # jobs kept as applied, as last logged
        self._not_applied: Mapping[str, str] = {}  # jobs whose change could not be written, as logged
        self._not_started: Mapping[str, Diagnostic] = {}  # jobs refused: running under another state folder
        # What the endpoints answer from: ``shown``, published once per pass from ``_draft``,
        # which the loop builds during the pass. Until the first pass, the status files' view.
        first = View(tuple(controller.status_files()), {})
        # A git fetch runs beside the passes (``fetcher``); its end only asks for a pass.
        self._fetcher = (
            Fetcher(source.fetch, self.request_pass, clock) if isinstance(source, GitSource) else None
        )
        stored = self._load_problems()
        self.shown = Shown(
            first,
            clock(),
            stored.problems,
            problems_omitted=stored.omitted,
            status_branch=stored.status_branch,
            source_read=self._fetcher is None,
        )
        self._all_problems = stored.problems  # every standing problem, the shown and the omitted
        self._draft = self.shown
        self.metrics.set_problems(counts(self.shown.problems))

    # ---- asking for passes (any thread) ---------------------------------------------------

    def _tell(self, event: schedule.Event) -> bool:
        with self._wake:
            taken = self._schedule.on(event)
            self._wake.notify_all()
        return taken

    def request_pass(self) -> None:
        self._tell(schedule.PassRequest(self.monotonic()))

    def request_sync(self) -> bool:
        """Fetch the source and run a pass soon; False when this joins a request still pending.
        A request within ``min_sync_interval_s`` of the last fetch waits for it to pass."""
        return self._tell(schedule.SyncRequest(self.monotonic()))

    def on_file_event(self, paths: list[str]) -> None:
        self._tell(schedule.FileEvent(self.monotonic(), tuple(paths)))

    def stop(self) -> None:
        """Stop after the pass in flight; the git commands running now are killed, whole (a
        fetch or push that hangs keeps nothing waiting)."""
        with self._wake:
            self._stopping = True
            self._wake.notify_all()
        if isinstance(self.source, GitSource):
            self.source.close()

    # ---- the loop -------------------------------------------------------------------------

    def run(self) -> None:
        """Wait until a pass is due or asked for, fetch when the schedule says so, apply,
        reconcile, publish; until ``stop``."""
        self.source.watch(self.on_file_event)
        self.controller.watch(self.request_pass)
        while (step := self._next_step()) is not None:
            if step.sync and self._fetcher is not None:
                self._fetcher.start()  # beside the passes: this one goes on with the last snapshot
            elif step.sync:
                self._sync(self.source.sync)
            new_revision = self._take_fetched()
            wake_at, applied = self._pass(None if new_revision else step.changes)  # a new snapshot: read all
            now = self.monotonic()
            wake = None if wake_at is None else now + (wake_at - self.clock())  # onto the schedule's clock
            hold = self.write_retry_s if write_failed(self.shown) else 0.0
            self._tell(schedule.PassDone(now, wake, applied, hold))
        if self._fetcher is not None:
            self._fetcher.join(timeout=10.0)  # its git was killed by ``stop``
        self.history.stop(self.clock())
        self.notifier.close()

    def _next_step(self) -> schedule.Step | None:
        """The next pass to run, once it is due (the one wait of the loop); None: stopping."""
        with self._wake:
            while not self._stopping:
                step = self._schedule.next(self.monotonic())
                if step.run:
                    return step
                self._wake.wait(max(0.0, step.wake_at - self.monotonic()))
        return None

    def _take_fetched(self) -> bool:
        """Git mode: what the fetch that ended since the last pass found, made current
        (``GitSource.apply_fetched``: local, quick) or its error kept; whether that changed the
        revision (the pass then reads every file of the new snapshot)."""
        if self._fetcher is None:
            return False
        fetched = self._fetcher.take()
        self._draft = replace(self._draft, fetching_since=self._fetcher.since)
        if fetched is None:
            return False
        was = self._draft.revision
        if fetched.error is not None:
            self._source_failed(fetched.error)
        elif isinstance(self.source, GitSource):
            self._sync(self.source.apply_fetched)
        now = self._draft.revision
        return (was.commit if was else None) != (now.commit if now else None)

    def _sync(self, read: Callable[[], Revision | None] | None = None) -> None:
        """Read the source (``read``, default ``Source.sync``); an error leaves the last applied
        state running."""
        was = self._draft
        try:
            revision = (read or self.source.sync)()
        except SourceError as err:
            self._source_failed(err)
            return
        if was.source_error is not None:
            log.info("source available again: %s", self.source.description)
        if revision is not None and (was.revision is None or revision.commit != was.revision.commit):
            log.info("revision %s by %s: %s", revision.commit[:12], revision.author, revision.subject)
        self._draft = replace(was, source_error=None, revision=revision, source_read=True)

    def _source_failed(self, err: SourceError) -> None:
        if self._draft.source_error != str(err) and not self._stopping:
            log.error("source unavailable, the last applied state keeps running: %s", err)
        self._draft = replace(self._draft, source_error=str(err))
        self.metrics.source_errors += 1

    def _pass(self, changes: frozenset[str] | None = None) -> tuple[float | None, bool]:
        """One pass: apply what the files say (re-reading ``changes``; None: every file),
        reconcile, then publish ``shown``. Returns when it wants another (on ``clock``; None:
        at the resync) and whether it read ``changes``. A write error or a bug is logged and
        retried soon: it must not take the controller of every job down with it."""
        started = self.monotonic()
        wake_at: float | None
        applied = False
        try:
            wake_at, applied = self._reconcile(changes, started)
            self._draft = replace(self._draft, pass_write_error=None)
        except OSError as err:  # e.g. the state disk is full: nothing to report as a bug
            self._draft = replace(self._draft, pass_write_error=failed_write(err))
            if self.shown.pass_write_error != self._draft.pass_write_error:
                log.error("a pass could not finish: cannot write %s; retrying", self._draft.pass_write_error)
            self.metrics.pass_errors += 1
            self._check_folders()
            wake_at = self.clock() + self.write_retry_s
        except Exception:
            log.exception("internal error in a reconcile pass (a bug; please report it); retrying")
            self.metrics.pass_errors += 1
            wake_at = self.clock() + min(self.options.interval_s, 5.0)
        self.shown = self._draft  # published: one reference swap
        return wake_at, applied

    def _reconcile(self, changes: frozenset[str] | None, started: float) -> tuple[float | None, bool]:
        if self._phases is None:  # what the records said before this daemon: no notice for those
            self._phases = {
                n: Phase.DELETING if r.deleting else r.phase for n, r in self.controller.records().items()
            }
        readable = self._draft.source_error is None and self._draft.source_read
        current = self._apply_desired(changes) if readable else None
        apply_failures = dict(self.controller.apply_failures) if current is not None else {}
        self._record_problems(current)
        applied = current is not None
        try:  # a cluster or engine that does not answer is each job's lastError: the pass goes on
            result = self.controller.reconcile()  # it logs what it does
        except BackendError as err:  # the backend cannot be used at all: try again next pass
            self._met_errors((err.problem(),), "backend unavailable, the jobs keep running: ")
            self._check_folders()
            self._draft = replace(self._draft, last_pass_at=self.clock())
            self.metrics.observe_pass(self.monotonic() - started, self.clock(), 0, 0, 1)
            return None, applied
        self._met_errors(tuple(result.errors))
        self._draft = replace(self._draft, write_failures={**apply_failures, **result.write_failures})
        self._check_folders()
        records = self.controller.records()
        self._phase_changes(result.phases, records)
        documents, texts = self.controller.status_documents(records)
        names = sorted(documents)
        view = View(tuple(documents[n] for n in names), dict(records), tuple(texts[n] for n in names))
        self._draft = replace(self._draft, view=view)
        tasks = Counter(t.state.value for r in records.values() for t in r.tasks)
        self.metrics.set_jobs(
            {n: p.value for n, p in result.phases.items()},
            tasks,
            {n: r.restarts for n, r in records.items()},
            {n: r.preemptions for n, r in records.items()},
            {n: r.suspensions for n, r in records.items()},
            {n: r.progress for n, r in records.items() if r.progress is not None},
            {n: r.platform_restarts for n, r in records.items()},
        )
        if readable:
            try:
                self.source.write_status(self.status_dir, self._draft.revision)
            except SourceError as err:
                if not self._stopping:  # a push killed by the stop is no error
                    self.metrics.source_errors += 1
                    self._status_branch(str(err))
            else:
                self._status_branch(None)
        self._draft = replace(self._draft, last_pass_at=self.clock())
        self.metrics.observe_pass(
            self.monotonic() - started, self.clock(), result.launched, result.stopped, len(result.errors)
        )
        wakes = [at for at in (result.wake_at, current.wake_at if current else None) if at is not None]
        return (min(wakes) if wakes else None), applied

    @property
    def write_retry_s(self) -> float:
        """How long a pass that could not write holds the next back (``schedule``)."""
        return min(self.options.interval_s, WRITE_RETRY_S)

    def _status_branch(self, failure: str | None) -> None:
        """Git mode: what the status branch's write (and push) said this pass (None: written);
        a change is logged, shown in /healthz, /metrics and the page, and kept for ``status``
        in the problems file. The source tries again, backing off, until it is written."""
        was = self._draft.status_branch
        if failure == (was.message if was else None):
            return
        branch = self.source.settings.status_branch if isinstance(self.source, GitSource) else "status"
        now = self.clock()
        if failure is None:
            log.info("the status branch %s is written again", branch)
            standing_failure = None
        else:
            log.error("%s; tried again with back-off, the jobs keep running", failure)
            standing_failure = BranchFailure(branch, failure, was.since if was else now)
        self._draft = replace(self._draft, status_branch=standing_failure)
        self._save_problems(self._draft.problems, self._draft.problems_omitted, now)
        self._count_write_failures()

    def _count_write_failures(self) -> None:
        shown = self._draft
        self.metrics.set_storage(
            {kind: kind not in shown.folder_problems for kind in ("state", "status")},
            len(shown.write_failures)
            + (shown.pass_write_error is not None)
            + (shown.status_branch is not None),
        )

    def _check_folders(self) -> None:
        """Whether the state and status folders can take a write now (``shell.writable``);
        a change is logged once, the state is shown in /healthz, /metrics and the page."""
        folders = {"state": self.controller.state_root, "status": self.status_dir}
        problems = {kind: why for kind, folder in folders.items() if (why := folder_problem(folder))}
        was = self._draft.folder_problems
        for kind, why in sorted(problems.items()):
            if was.get(kind) != why:
                log.error("the %s folder cannot take a write: %s", kind, why)
        for kind in sorted(was.keys() - problems.keys()):
            log.info("the %s folder can be written again", kind)
        self._draft = replace(self._draft, folder_problems=problems)
        self._count_write_failures()

    def _met_errors(self, errors: tuple[RuntimeProblem, ...], lead: str = "") -> None:
        """This pass's errors: logged when they were not the last pass's (one line each per
        change, not one per pass: a pass may come every second while an engine is away), a
        cleared one said once; kept for the endpoints, with since when an unreachable cluster
        or engine has stood (``unreachable_since``: ``/healthz`` and
        ``tfdeclare_backend_connected`` report it once it has stood ``UNREACHABLE_REPORT_S``)."""
        was = self._draft
        for error in errors:
            if error not in was.pass_errors:
                log.error("%s%s", lead, error)
        for error in was.pass_errors:
            if error not in errors:
                log.info("cleared: %s", error)
        since = was.unreachable_since if unreachable_problems(errors) else None
        if since is None and unreachable_problems(errors):
            since = self.clock()
        self._draft = replace(was, pass_errors=errors, unreachable_since=since)
        reached = not reported_unreachable(self._draft, self.clock())
        self.metrics.set_backend_connected(self.controller.backend_name, reached)

    def _apply_desired(self, changes: frozenset[str] | None) -> Plan:
        """Plan and apply what the files say; returns the plan as made (its problems; its
        ``wake_at``: when the next pending change settles)."""
        desired = self.spec_files.load(changes)
        options = PlanOptions(
            prune=self.options.prune,
            allow_empty=self.options.allow_empty,
            backend=self.controller.backend_name,
            settle_s=0.0 if getattr(self.source, "whole", False) else self.options.settle_s,
            quotas=self.options.quotas,
            max_jobs=self.options.max_jobs,
            scope=self.options.scope,
        )
        current = plan(
            desired,
            self.controller.observed(),
            options,
            self._plans,
            now=self.clock(),
            sightings=self._sightings,
        )
        self._sightings = current.sightings
        if current.diagnostics != self._diagnostics:  # the files' and the quotas'
            self._diagnostics = current.diagnostics
            for diagnostic in current.diagnostics:
                log.warning("%s", diagnostic.format())
        self._log_held(current)
        revision = self._draft.revision
        applying = self._without_second_copies(current)
        for line in self.controller.apply(applying, revision, self.source.rejected):
            log.info("applied %s", line)
        failures = dict(self.controller.apply_failures)
        for name, why in sorted(failures.items()):
            if self._not_applied.get(name) != why:  # once per change, not every pass
                log.error("%s: not applied: cannot write %s; retrying", name, why)
        self._not_applied = failures
        records = self.controller.records
        not_applied = {name: f"cannot write {why}" for name, why in failures.items()}
        self.history.after_pass(applying, revision, self.source.rejected, records, self.clock(), not_applied)
        commit = revision.commit if revision else None
        self.metrics.attempted_revision = commit
        if not current.has_errors:
            self.metrics.applied_revision = commit
        return current

    def _without_second_copies(self, current: Plan) -> Plan:
        """``current`` less the creates of jobs that exist under another state folder of this
        user (``shell.statedirs``, read-only): one job never runs twice. They are named in
        /healthz and logged when that set changes, and created once gone from there."""
        creates = {
            job.name: fingerprint(current.desired[job.name])
            for job in current.jobs
            if job.action is Action.CREATE and job.name in current.desired
        }
        found, problems = statedirs.elsewhere(creates, self.controller.state_root)
        for problem in problems:
            log.warning("cannot look for new jobs under other state folders: %s", problem)
        refused = {
            e.name: f"not started: it exists under {e.describe()}; delete it there first "
            f"(`tfdeclare delete {e.name} --state-dir {e.state_dir}`)"
            for e in found
            if e.live
        }
        sources = {job.name: job.source for job in current.jobs}
        self._not_started = {  # a problem of the job's file while it stands (``_record_problems``)
            name: Diagnostic(
                where.file if (where := sources.get(name)) else self.source.description,
                where.line if where else None,
                None,
                f"{name}: {why}",
                None,
                Code.ELSEWHERE,
            )
            for name, why in refused.items()
        }
        if refused != self._draft.not_started:
            for name, why in sorted(refused.items()):
                log.error("%s: %s", name, why)
        self._draft = replace(self._draft, not_started=refused)
        if not refused:
            return current
        return replace(current, jobs=tuple(job for job in current.jobs if job.name not in refused))

    # ---- source problems ------------------------------------------------------------------

    def _load_problems(self) -> problems_file.Stored:
        """Those the last daemon left, and its status branch failure (they keep their ``since``
        while they stand; the branch is tried again at the first pass)."""
        if self.problems_path is None:
            return problems_file.Stored((), None)
        try:
            return problems_file.read(self.problems_path)
        except problems_file.ProblemsUnreadable as err:
            log.warning("the problems of the last daemon are not used: %s", err)
            return problems_file.Stored((), None)

    def _save_problems(self, problems: tuple[Problem, ...], omitted: int, now: float) -> None:
        """``problems`` (and how many more stand) and the status branch's failure into the
        problems file for ``status`` (a failure is logged once, and the write tried again
        after each pass)."""
        if self.problems_path is None:
            return
        try:
            problems_file.save(
                self.problems_path, problems, now, omitted=omitted, status_branch=self._draft.status_branch
            )
            self._problems_saved = True
        except OSError as err:
            if self._problems_saved:
                log.error("cannot write %s (%s); retrying after each pass", self.problems_path, err)
            self._problems_saved = False

    def _record_problems(self, current: Plan | None) -> None:
        """The problems standing after this pass (``current``: its plan; None: the source could
        not be read, the files' stand as last read): shown, logged, posted and written when
        they changed."""
        was = self._draft
        source_path = getattr(self.source, "problem_path", self.source.description)
        url = self.source.settings.url if isinstance(self.source, GitSource) else None
        rejected = self.source.rejected
        now = self.clock()
        every = standing(
            current.diagnostics if current is not None else None,
            source=source_path,
            source_error=_hiding(was.source_error, url, source_path),
            fetch=url is not None,
            rejected=(rejected[0], _hiding(rejected[1], url, source_path) or "") if rejected else None,
            revision=was.revision.commit if was.revision else None,
            now=now,
            previous=self._all_problems,
            held=held_back(current) if current is not None and current.has_errors else None,
            not_started=self._not_started if current is not None else None,
        )
        found, omitted = bounded(every, (source_path,))
        if every != self._all_problems:
            self.metrics.set_problems(counts(every))  # all of them, not only those shown
        self._all_problems = every
        if found == was.problems and omitted == was.problems_omitted and self._problems_saved:
            return
        self._save_problems(found, omitted, now)  # first, so that status agrees once the endpoints do
        changed = changes(was.problems, found)
        self._draft = replace(was, problems=found, problems_omitted=omitted)
        for problem in changed.appeared:
            jobs = f" (holds back {', '.join(problem.jobs)})" if problem.jobs else ""
            log.warning("problem %s: %s%s", problem.kind.value, problem.message, jobs)
            self.notifier.notify_problem(ProblemChange(problem, False, now))
        for problem in changed.cleared:
            log.info("problem cleared (%s): %s", problem.kind.value, problem.path)
            self.notifier.notify_problem(ProblemChange(problem, True, now))

    def _phase_changes(self, phases: Mapping[str, Phase], records: Mapping[str, JobRecord]) -> None:
        """Each job that entered a phase since the last pass: a recent event and a notice."""
        seen = self._phases or {}
        now = self.clock()
        events = self._draft.events
        for name, phase in sorted(phases.items()):
            if seen.get(name) is phase:
                continue
            record = records.get(name)
            change = PhaseChange(
                name,
                phase,
                seen.get(name),
                now,
                record.revision if record else None,
                record.restarts if record else 0,
                record.message if record else "",
            )
            events = (change, *events)[:RECENT_EVENTS]
            self.notifier.notify(change)
        self._draft = replace(self._draft, events=events)
        # a job a pass skipped (an error) keeps its phase; a job whose record is gone is forgotten
        self._phases = {**{n: p for n, p in seen.items() if n in records}, **phases}

    def _log_held(self, current: Plan) -> None:
        """One line per reason, naming the jobs, when the jobs kept as applied change."""
        held = {job.name: job.not_synced for job in current.jobs if job.not_synced is not None}
        if held == self._held:
            return
        self._held = held
        by_reason: dict[Reason, list[str]] = {}
        for name, (reason, _) in sorted(held.items()):
            by_reason.setdefault(reason, []).append(name)
        for reason, names in by_reason.items():
            level = logging.INFO if reason is Reason.NOT_SETTLED else logging.WARNING
            log.log(level, "kept as applied (%s): %s — %s", reason.value, ", ".join(names), held[names[0]][1])

    # ---- what the HTTP endpoints show (from ``shown``, read once per answer) ---------------

    def health(self) -> tuple[bool, dict[str, Any]]:
        """Healthy once a pass has ended and passes keep coming on time with the source read.
        Until the first pass ends the status is ``starting`` (for as long as a pass may take:
        after that it is overdue, a hang)."""
        return self._health(self.shown)

    def _late(self, shown: Shown) -> bool:
        """Whether a pass is overdue (a hang)."""
        overdue = max(3 * self.options.interval_s, 60.0)
        since = shown.last_pass_at if shown.last_pass_at is not None else shown.started_at
        return self.clock() - since > overdue

    def _health(self, shown: Shown) -> tuple[bool, dict[str, Any]]:
        late = self._late(shown)
        # until the first pass has ended, and in git mode until the first fetch is applied
        waiting = shown.last_pass_at is None or (not shown.source_read and shown.source_error is None)
        starting = waiting and not late
        reasons = alerts(shown, late, self.clock())
        healthy = not waiting and not reasons
        return healthy, {
            "status": "ok" if healthy else "starting" if starting else "degraded",
            "reasons": [alert.text for alert in reasons],
            "source": self.source.description,
            "sourceError": shown.source_error,
            # git mode: when the fetch running now started (the passes go on meanwhile)
            "fetchingSince": shown.fetching_since,
            # the state or status folder that cannot take a write (read-only, full), and the
            # files the last pass could not write, by job: our own state is not kept, a real
            # readiness problem (503), though the jobs keep running
            "storage": {
                "state": shown.folder_problems.get("state"),
                "status": shown.folder_problems.get("status"),
            },
            "writeFailures": dict(shown.write_failures),
            # git mode: the status branch that could not be written or pushed (tried again
            # with back-off), null while it is
            "statusBranch": shown.status_branch.to_json() if shown.status_branch else None,
            # jobs of the files not started: they exist under another state folder of this user
            "notStarted": dict(shown.not_started),
            "revision": shown.revision.commit if shown.revision else None,
            "lastPassAt": shown.last_pass_at,
            "passOverdue": late,
            # What cannot be applied now (a user's file: readiness is not failed for it)
            "problems": [p.to_json() for p in shown.problems],
            # how many more stand than are listed (at most 200 are: the source's own, then
            # those holding back jobs, then unreadable files, then the others)
            "problemsOmitted": shown.problems_omitted,
            # What the last pass met, with codes; a terminal one is not retried (docs/reference.md)
            "passErrors": [p.to_json() for p in shown.pass_errors],
            # git snapshots no job uses, kept for the files tasks wrote in them (`tfdeclare gc`)
            "keptSnapshots": {
                commit: {"files": len(files), "examples": files[:5]}
                for commit, files in self.source.kept.items()
            },
        }

    def jobs(self) -> list[dict[str, Any]]:
        """Every job's status document, at most ``JOBS_TASKS`` tasks over all of them, each
        with the standing problems that hold it back (``problems``, empty when none)."""
        return [json.loads(text) for text in self._jobs_texts()]

    def jobs_json(self) -> str:
        """``jobs`` as a JSON text, joined from each document's own (``View.texts``)."""
        return "[" + ", ".join(self._jobs_texts()) + "]"

    def _jobs_texts(self) -> list[str]:
        shown = self.shown
        view = shown.view
        texts = view.texts or tuple(json.dumps(d) for d in view.documents)
        held: dict[str, list[dict[str, Any]]] = {}
        for problem in shown.problems:
            for name in problem.jobs:
                held.setdefault(name, []).append(problem.to_json())
        budget = JOBS_TASKS
        out = []
        for document, own in zip(view.documents, texts, strict=True):
            tasks = document.get("tasks") or []
            text = own
            if len(tasks) > budget:
                total = int(document.get("taskCount", len(tasks)))
                text = json.dumps(_with_tasks(document, tasks[:budget], total))
            budget = max(0, budget - len(tasks))
            # the document's own text with "problems" added last (its closing brace replaced)
            problems = json.dumps(held.get(document["name"], []))
            out.append(f'{text[:-1]}, "problems": {problems}}}')
        return out

    def job(self, name: str, offset: int = 0, limit: int | None = None) -> dict[str, Any] | None:
        """One job's status document with its tasks from ``offset``, at most ``limit`` (default
        ``status.TASKS_LISTED``); None when there is no such job."""
        view = self.shown.view
        limit = status.TASKS_LISTED if limit is None else limit
        document = view.document(name)
        if document is None:
            return None
        listed = document.get("tasks") or []
        total = int(document.get("taskCount", len(listed)))
        end = min(total, offset + limit)
        record = view.records.get(name)
        if end <= len(listed) or record is None:
            page, total = listed[offset:end], (total if end <= len(listed) else len(listed))
        else:
            page = status.task_entries(record, offset, limit)
        paged = _with_tasks(document, page, total)
        if offset:
            paged["tasksOffset"] = offset
        return paged

    def problem_list(self) -> list[dict[str, Any]]:
        """The standing source problems listed (``GET /jobs?problems=true``)."""
        return [p.to_json() for p in self.shown.problems]

    def problems_omitted(self) -> int:
        """How many more stand than ``problem_list`` lists."""
        return self.shown.problems_omitted

    def metrics_text(self) -> str:
        # whether the backend reaches its cluster or engine: as /healthz says it now (the
        # bound may have passed since the last pass)
        reached = not reported_unreachable(self.shown, self.clock())
        self.metrics.set_backend_connected(self.controller.backend_name, reached)
        return self.metrics.render()

    def page_html(self, refresh: int, jobs_offset: int = 0) -> str:
        """The page (``page.render``): the jobs from ``jobs_offset``, ``page.PAGE_JOBS`` of them."""
        shown = self.shown
        view = shown.view
        listed = view.documents[jobs_offset : jobs_offset + page.PAGE_JOBS]
        specs = {
            d["name"]: page.details(view.records[d["name"]].spec) for d in listed if d["name"] in view.records
        }
        return page.render(
            view.documents,
            shown.events,
            self._health(shown)[1],
            refresh,
            alerts=alerts(
                shown, self._late(shown), self.clock()
            ),  # what /healthz's reasons say, with their kind
            now=self.clock(),
            specs=specs,
            tails=self._log_tails(listed),
            jobs_offset=jobs_offset,
            history=(self.history.recent, self.history.error),
        )

    def _log_tails(self, jobs: Sequence[Mapping[str, Any]]) -> dict[str, page.LogTail]:
        """The end of one task's log per job (``page.LogTail``), read while ``TAIL_BUDGET_S``
        lasts: a slow backend (a Mesos agent far away) costs the page its tails, not its
        answer. A log that cannot be read has no tail."""
        tails: dict[str, page.LogTail] = {}
        streams = self.controller.log_streams
        deadline = self.monotonic() + TAIL_BUDGET_S
        for job in jobs:
            if self.monotonic() > deadline:
                break
            started = sorted(
                (t for t in job.get("tasks") or [] if t.get("id")),
                key=lambda t: (TAIL_ROLES.index(t["role"]) if t["role"] in TAIL_ROLES else 9, t["index"]),
            )
            if not started:
                continue
            task = started[0]
            try:
                if streams:  # stdout and stderr apart: a running task's stderr shows too
                    out, err = (self._log_end(task["id"], stream) for stream in streams)
                    text = page.streams_tail_text(out, err)
                else:
                    text = page.tail_text(self._log_end(task["id"], None))
            except (BackendError, LogOffsetError):
                continue
            if text:
                name = f"{task['role']}-{task['index']}"
                href = f"/jobs/{quote(job['name'])}/logs?task={quote(name)}"
                stderr = f"{href}&stream={streams[-1]}" if streams else None
                tails[job["name"]] = page.LogTail(name, text, href, stderr)
        return tails

    def _log_end(self, task_id: str, stream: str | None) -> bytes:
        """The last ``page.TAIL_BYTES`` of a task's log, or of one of its ``stream``s (the
        backend names the size when asked for an offset past the end)."""
        try:
            return self.controller.read_log(task_id, INT64_MAX, 1, stream).data  # past any real log
        except LogOffsetError as err:
            size = err.size
        start = max(0, size - page.TAIL_BYTES)
        return self.controller.read_log(task_id, start, size - start, stream).data if size else b""

    def task_log(self, name: str, task: str | None, offset: int, stream: str | None = None) -> LogChunk:
        """A page of the output of ``task`` (``worker-0``, or the alias ``worker:0``; default:
        the job's first task that started) of job ``name``: its one log, or with ``stream``
        its stdout or stderr alone (``base.log_streams``; ``BadRequest`` where the backend has
        one log only). Raises ``LookupError`` naming what is not there (a ``task`` that is no
        task name too: no such log), ``BackendError`` when the backend cannot read it."""
        if stream is not None and stream not in self.controller.log_streams:
            raise BadRequest(
                f"the {self.controller.backend_name} backend's task log holds stdout and stderr as "
                "written: leave out stream"
            )
        view = self.shown.view
        document = view.document(name) if is_job_name(name) else None
        if document is None:
            raise LookupError(f"no job named {name!r}")
        record = view.records.get(name)
        started: list[dict[str, Any]]
        if record is not None:  # every task, also those past the document's list
            started = [
                {"id": t.task_id, "role": t.key.role.value, "index": t.key.index}
                for t in sorted(record.tasks, key=lambda t: ORDER(t.key))
                if t.task_id
            ]
        else:
            started = [t for t in document["tasks"] if t["id"]]
        if task is not None:
            try:
                key = TaskKey.parse(task)
            except ValueError as err:
                raise LookupError(str(err)) from None
            task = key.name
            started = [t for t in started if (t["role"], t["index"]) == (key.role.value, key.index)]
        if not started:
            raise LookupError(f"job {name} has no task {task + ' ' if task else ''}that has started")
        return self.controller.read_log(started[0]["id"], offset, page.LOG_PAGE_BYTES, stream)


def unreachable_problems(errors: Sequence[RuntimeProblem]) -> list[RuntimeProblem]:
    """The pass errors that say the backend cannot work with its cluster or engine at all
    (``ErrorCode.backend_down``: it does not answer, it refuses our credentials, it removed
    our framework), once a code: each job it holds has it too, and the backend's own report
    (its name first: "mesos: ...") is kept first."""
    found: dict[str, RuntimeProblem] = {}
    for problem in sorted(errors, key=lambda p: p.job is not None):  # the backend's own first
        if problem.code.backend_down:
            found.setdefault(problem.code.value, replace(problem, job=None))
    return list(found.values())


def reported_unreachable(shown: Shown, now: float) -> list[RuntimeProblem]:
    """What readiness reports of those: an unreachable cluster or engine
    (``ErrorCode.unreachable``) once passes have met it for ``UNREACHABLE_REPORT_S`` (a blip
    heals within it), the others (refused credentials, a removed framework) at once; the jobs
    are left as they are, their tasks run on without us. The Mesos and the local backend
    alike (one rule, here)."""
    since = shown.unreachable_since
    settled = since is not None and now - since >= UNREACHABLE_REPORT_S
    return [p for p in unreachable_problems(shown.pass_errors) if settled or not p.code.unreachable]


def write_failed(shown: Shown) -> bool:
    """Did the pass ``shown`` comes from fail to write something (a job's record or status
    file, the pass's own files)?"""
    return (
        bool(shown.write_failures)
        or shown.pass_write_error is not None
        or any(p.code in WRITE_ERRORS for p in shown.pass_errors)
    )


def alerts(shown: Shown, late: bool, now: float) -> list[Alert]:
    """Every reason the daemon is not ok as of ``shown`` at ``now`` (``late``: a pass is
    overdue), in the order ``/healthz`` lists them; none when it is."""
    return [
        *([Alert(HealthReason.OVERDUE, "a pass is overdue (a hang?)")] if late else []),
        *(
            [
                Alert(
                    HealthReason.SOURCE_NOT_READ, f"the source has not been read yet: {_fetching(shown, now)}"
                )
            ]
            if not shown.source_read
            else []
        ),
        *(
            [Alert(HealthReason.SOURCE_UNREADABLE, f"the source cannot be read: {shown.source_error}")]
            if shown.source_error
            else []
        ),
        *write_problems(shown),
        *(
            Alert(HealthReason.BACKEND_UNREACHABLE, f"{p.code.value}: {p.detail}", p.job)
            for p in reported_unreachable(shown, now)
        ),
        *(
            Alert(HealthReason.NOT_STARTED, f"job {name}: {why}", name)
            for name, why in sorted(shown.not_started.items())
        ),
    ]


def _fetching(shown: Shown, now: float) -> str:
    since = shown.fetching_since
    return f"fetching for {now - since:.0f} s" if since is not None else "waiting for its first fetch"


def write_problems(shown: Shown) -> list[Alert]:
    """One each for what tfdeclare cannot write now (folders, then jobs' files)."""
    return [
        *(
            Alert(HealthReason.FOLDER_UNWRITABLE, f"the {kind} folder cannot take a write: {why}")
            for kind, why in sorted(shown.folder_problems.items())
        ),
        *(
            Alert(HealthReason.JOB_WRITE_FAILED, f"job {job}: cannot write {why}", job)
            for job, why in sorted(shown.write_failures.items())
        ),
        *(
            [
                Alert(
                    HealthReason.UNFINISHED,
                    f"a pass could not finish: cannot write {shown.pass_write_error}",
                )
            ]
            if shown.pass_write_error
            else []
        ),
        *(
            [
                Alert(
                    HealthReason.STATUS_BRANCH,
                    f"the status branch {shown.status_branch.branch} is not written or pushed: "
                    f"{shown.status_branch.message}",
                )
            ]
            if shown.status_branch
            else []
        ),
    ]


def _with_tasks(document: Mapping[str, Any], tasks: list[dict[str, Any]], total: int) -> dict[str, Any]:
    """``document`` with ``tasks`` in place of its own, followed by ``tasksTruncated`` and
    ``taskCount`` when they are not all ``total`` of the job's."""
    out: dict[str, Any] = {}
    for key, value in document.items():
        if key == "tasks":
            out["tasks"] = tasks
            if len(tasks) < total:
                out.update(tasksTruncated=True, taskCount=total)
        elif key not in ("tasksTruncated", "taskCount"):
            out[key] = value
    return out
