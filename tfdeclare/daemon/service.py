"""``Daemon``: the level-triggered loop. Anything may ask for a pass (``request_pass``); the
loop runs one pass at a time, at least every ``interval`` (resync; git fetch), sooner when a
job wants a look (backoff expiry), after file events once they have been quiet for
``debounce``. A pass that cannot read the source keeps the last applied state running and
says so (log, /healthz, metrics); the newest revision always supersedes an older one.

Files are seen while they are written, so the daemon plans with a settle time: a change that
stops or restarts tasks is made once the files have said the same for ``settle`` seconds (the
planner's settle rule; the daemon keeps its sightings from pass to pass and wakes when one
settles). A git source is applied as checked out: its snapshot is written whole before it
becomes current (``Source.whole``), so a git revision is applied at once: no settle time.
Jobs the plan keeps as applied for a reason (an unreadable listing, a file without a job,
the prune-everything guard) are logged as a warning whenever that set changes.

After each pass the daemon records the standing *source problems* (``core.plan.problems``:
each file that cannot be applied, a failed fetch, an unverified head) in ``problems``, which
the endpoints answer from (``/healthz``, ``/jobs``, ``/metrics``, the page); when they change it
logs each that appeared or cleared, posts it to the webhooks and writes them to
``<state-dir>/problems.json`` for ``tfdeclare status`` (``shell.problems``).

**What the endpoints show** comes from a ``View`` the loop publishes after each pass (the
status documents it wrote and the records they came from), replaced whole, so an HTTP thread
never reads a file or waits for a pass: a pass over 10,000 jobs or a 100,000-task job leaves
``/``, ``/jobs`` and ``/healthz`` answering. Until the first pass has ended, the view is what
the status files say (read once). ``/jobs`` lists at most ``JOBS_TASKS`` tasks over all jobs
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
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Protocol
from urllib.parse import quote

from tfdeclare.backends.base import BackendError, LogChunk, LogOffsetError
from tfdeclare.controller import Controller
from tfdeclare.core.config import WebhookConfig
from tfdeclare.core.diagnostics import Diagnostic
from tfdeclare.core.enums import Phase, Reason
from tfdeclare.core.plan.planner import Action, Plan, PlanCache, PlanOptions, Sighting, plan
from tfdeclare.core.plan.problems import Problem, changes, counts, held_back, standing
from tfdeclare.core.plan.scope import PruneScope
from tfdeclare.core.run import status
from tfdeclare.core.run.record import JobRecord, Revision
from tfdeclare.core.spec.keys import ORDER, TaskKey
from tfdeclare.core.spec.model import fingerprint
from tfdeclare.core.spec.names import is_job_name
from tfdeclare.core.spec.policy import Quota
from tfdeclare.daemon import page
from tfdeclare.daemon.history import History
from tfdeclare.daemon.httpguard import INT64_MAX
from tfdeclare.daemon.metrics import Metrics
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
    scope: PruneScope | None = None  # the jobs it may prune: those applied from its own source
    min_sync_interval_s: float = 1.0  # POST /sync fetches at most this often (the rest coalesce)


RECENT_EVENTS = 50  # phase changes the status page shows
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


class Daemon:
    def __init__(
        self,
        source: Source,
        controller: Controller,
        spec_files: SpecFiles,
        status_dir: Path,
        options: DaemonOptions,
        *,
        clock: Callable[[], float] = time.time,
        problems_path: Path | None = None,
    ) -> None:
        self.source = source
        self.controller = controller
        self.spec_files = spec_files
        self.status_dir = status_dir
        self.options = options
        self.clock = clock
        self.metrics = Metrics()
        self.notifier = Notifier(options.webhooks, lambda result: self.metrics.count_webhook(result.value))
        self.events: tuple[PhaseChange, ...] = ()  # newest first; replaced whole (HTTP threads read it)
        self._view: View | None = None  # replaced whole after each pass (HTTP threads read it)
        self._first_view_lock = threading.Lock()
        self._phases: dict[str, Phase] | None = None  # as last seen; None until the first pass
        self._trigger = threading.Event()
        self._sync_requested = threading.Event()
        self._stopping = threading.Event()
        self._last_event = 0.0
        self._last_sync = float("-inf")  # monotonic time of the last fetch
        self._changes: set[str] | None = None  # paths changed since the last pass; None: read all
        self._changes_lock = threading.Lock()
        self._diagnostics: tuple[Diagnostic, ...] = ()
        self._plans = PlanCache()
        self._sightings: Mapping[str, Sighting] = {}
        self._held: Mapping[str, tuple[Reason, str]] = {}  # jobs kept as applied, as last logged
        self.revision: Revision | None = None
        self.source_error: str | None = None
        # What could not be written, shown in /healthz, /metrics and the page until it can be:
        # job -> "PATH (why)" from the last pass, the folders that cannot take a write now
        # ("state"/"status" -> why), and a pass that failed on a write outside any one job.
        self.write_failures: Mapping[str, str] = {}
        self.records: Mapping[str, JobRecord] = {}  # as of the last pass
        self.not_started: Mapping[str, str] = {}  # job -> why: it runs under another state folder
        self.folder_problems: Mapping[str, str] = {}
        self.pass_write_error: str | None = None
        self.last_pass_at: float | None = None
        self.started_at = clock()
        self.history = History(controller.store.root)  # the revisions acted on (`tfdeclare history`)
        # The standing source problems, replaced whole after a pass (HTTP threads read them);
        # persisted in ``problems_path`` when given (the daemon's state folder).
        self.problems_path = problems_path
        self.problems: tuple[Problem, ...] = self._load_problems()
        self._plan: Plan | None = None  # this pass's, for the problems
        self._problems_saved = True  # False while the file could not be written: retried
        self.metrics.set_problems(counts(self.problems))

    # ---- asking for passes ----------------------------------------------------------------

    def request_pass(self) -> None:
        self._trigger.set()

    def request_sync(self) -> bool:
        """Fetch the source and run a pass soon; False when this joins a request still pending.
        A request within ``min_sync_interval_s`` of the last fetch waits for it to pass."""
        with self._changes_lock:
            if self._sync_requested.is_set():
                return False
            self._sync_requested.set()
        wait = self._last_sync + self.options.min_sync_interval_s - time.monotonic()
        if wait <= 0:
            self._trigger.set()
        else:  # the loop may be asleep until the next resync: wake it when the fetch is due
            timer = threading.Timer(wait, self._trigger.set)
            timer.daemon = True
            timer.start()
        return True

    def on_file_event(self, paths: list[str]) -> None:
        with self._changes_lock:
            if self._changes is not None:  # None: the next pass reads everything anyway
                self._changes.update(paths)
        self._last_event = time.monotonic()
        self._trigger.set()

    def stop(self) -> None:
        self._stopping.set()
        self._trigger.set()

    # ---- the loop -------------------------------------------------------------------------

    def run(self) -> None:
        self.source.watch(self.on_file_event)
        self.controller.backend.watch(self.request_pass)
        next_sync = 0.0
        while not self._stopping.is_set():
            now = time.monotonic()
            sync_due = self._last_sync + self.options.min_sync_interval_s
            if (self._sync_requested.is_set() and now >= sync_due) or now >= next_sync:
                self._sync_requested.clear()
                self._last_sync = time.monotonic()
                self._sync()
                next_sync = time.monotonic() + self.options.interval_s
                with self._changes_lock:
                    self._changes = None  # a resync reads every file, whatever events said
            try:
                wake_at = self._pass()
                self.pass_write_error = None
            except OSError as err:  # e.g. the state disk is full: nothing to report as a bug
                self.pass_write_error = failed_write(err)
                log.error("a pass could not finish: cannot write %s; retrying", self.pass_write_error)
                self.metrics.pass_errors += 1
                self._check_folders()
                wake_at = self.clock() + min(self.options.interval_s, 5.0)
            except Exception:  # a bug must not take the controller of every job down with it
                log.exception("internal error in a reconcile pass (a bug; please report it); retrying")
                self.metrics.pass_errors += 1
                wake_at = self.clock() + min(self.options.interval_s, 5.0)
            timeout = next_sync - time.monotonic()
            if self._sync_requested.is_set():  # one that came too soon after the last fetch
                timeout = min(timeout, self._last_sync + self.options.min_sync_interval_s - time.monotonic())
            if wake_at is not None:
                timeout = min(timeout, wake_at - self.clock())
            self._trigger.wait(max(0.01, timeout))
            self._trigger.clear()
            self._debounce()
        self.history.stop(self.clock())
        self.notifier.close()

    def _debounce(self) -> None:
        """After file events, wait until they have been quiet for ``debounce`` (at most 1 s)."""
        started = time.monotonic()
        while not self._stopping.is_set():
            quiet = time.monotonic() - self._last_event
            if quiet >= self.options.debounce_s or time.monotonic() - started > 1.0:
                return
            time.sleep(self.options.debounce_s - quiet)

    def _sync(self) -> None:
        try:
            revision = self.source.sync()
        except SourceError as err:
            if self.source_error != str(err):
                log.error("source unavailable, the last applied state keeps running: %s", err)
            self.source_error = str(err)
            self.metrics.source_errors += 1
            return
        if self.source_error is not None:
            log.info("source available again: %s", self.source.description)
        self.source_error = None
        if revision is not None and (self.revision is None or revision.commit != self.revision.commit):
            log.info("revision %s by %s: %s", revision.commit[:12], revision.author, revision.subject)
        self.revision = revision

    def _pass(self) -> float | None:
        started = time.monotonic()
        if self._phases is None:  # what the records said before this daemon: no notice for those
            self._phases = {
                n: Phase.DELETING if r.deleting else r.phase
                for n, r in self.controller.store.records().items()
            }
        self.controller.apply_failures = {}
        self._plan = None
        settles_at = self._apply_desired() if self.source_error is None else None
        self._record_problems()
        try:
            result = self.controller.reconcile()  # it logs what it does
        except BackendError as err:  # the cluster is unreachable: try again next pass
            log.error("backend unavailable, the jobs keep running: %s", err)
            self._check_folders()
            self.last_pass_at = self.clock()
            self.metrics.observe_pass(time.monotonic() - started, self.last_pass_at, 0, 0, 1)
            return None
        for error in result.errors:
            log.error("%s", error)
        self.write_failures = {**self.controller.apply_failures, **result.write_failures}
        self._check_folders()
        records = self.controller.store.records()
        self.records = dict(records)  # replaced whole: the HTTP threads read it
        self._phase_changes(result.phases, records)
        self._view = self._view_of(records)
        tasks = Counter(t.state.value for r in records.values() for t in r.tasks)
        self.metrics.set_jobs(
            {n: p.value for n, p in result.phases.items()},
            tasks,
            {n: r.restarts for n, r in records.items()},
            {n: r.preemptions for n, r in records.items()},
            {n: r.suspensions for n, r in records.items()},
            {n: r.platform_restarts for n, r in records.items()},
        )
        if self.source_error is None:
            try:
                self.source.write_status(self.status_dir, self.revision)
            except SourceError as err:
                log.error("%s", err)
                self.metrics.source_errors += 1
        self.last_pass_at = self.clock()
        self.metrics.observe_pass(
            time.monotonic() - started, self.last_pass_at, result.launched, result.stopped, len(result.errors)
        )
        wakes = [at for at in (result.wake_at, settles_at) if at is not None]
        return min(wakes) if wakes else None

    def _check_folders(self) -> None:
        """Whether the state and status folders can take a write now (``shell.writable``);
        a change is logged once, the state is shown in /healthz, /metrics and the page."""
        folders = {"state": self.controller.store.root, "status": self.status_dir}
        problems = {kind: why for kind, folder in folders.items() if (why := folder_problem(folder))}
        for kind, why in sorted(problems.items()):
            if self.folder_problems.get(kind) != why:
                log.error("the %s folder cannot take a write: %s", kind, why)
        for kind in sorted(self.folder_problems.keys() - problems.keys()):
            log.info("the %s folder can be written again", kind)
        self.folder_problems = problems
        self.metrics.set_storage(
            {kind: kind not in problems for kind in folders},
            len(self.write_failures) + (self.pass_write_error is not None),
        )

    def _apply_desired(self) -> float | None:
        """Plan and apply what the files say; returns when the next pending change settles."""
        with self._changes_lock:
            changed, self._changes = self._changes, set()
        desired = self.spec_files.load(changed)
        options = PlanOptions(
            prune=self.options.prune,
            allow_empty=self.options.allow_empty,
            backend=self.controller.backend.name,
            settle_s=0.0 if getattr(self.source, "whole", False) else self.options.settle_s,
            quotas=self.options.quotas,
            scope=self.options.scope,
        )
        current = plan(
            desired,
            self.controller.store.observed(),
            options,
            self._plans,
            now=self.clock(),
            sightings=self._sightings,
        )
        self._sightings = current.sightings
        self._plan = current
        if current.diagnostics != self._diagnostics:  # the files' and the quotas'
            self._diagnostics = current.diagnostics
            for diagnostic in current.diagnostics:
                log.warning("%s", diagnostic.format())
        self._log_held(current)
        current = self._without_second_copies(current)
        for line in self.controller.apply(current, self.revision, self.source.rejected):
            log.info("applied %s", line)
        for name, why in sorted(self.controller.apply_failures.items()):
            log.error("%s: not applied: cannot write %s; retrying next pass", name, why)
        records = self.controller.store.records
        self.history.after_pass(current, self.revision, self.source.rejected, records, self.clock())
        revision = self.revision.commit if self.revision else None
        self.metrics.attempted_revision = revision
        if not current.has_errors:
            self.metrics.applied_revision = revision
        return current.wake_at

    def _without_second_copies(self, current: Plan) -> Plan:
        """``current`` less the creates of jobs that exist under another state folder of this
        user (``shell.statedirs``, read-only): one job never runs twice. They are named in
        /healthz and logged when that set changes, and created once gone from there."""
        creates = {
            job.name: fingerprint(current.desired[job.name])
            for job in current.jobs
            if job.action is Action.CREATE and job.name in current.desired
        }
        found, problems = statedirs.elsewhere(creates, self.controller.store.root)
        for problem in problems:
            log.warning("cannot look for new jobs under other state folders: %s", problem)
        refused = {
            e.name: f"not started: it exists under {e.describe()}; delete it there first "
            f"(`tfdeclare delete {e.name} --state-dir {e.state_dir}`)"
            for e in found
            if e.live
        }
        if refused != self.not_started:
            for name, why in sorted(refused.items()):
                log.error("%s: %s", name, why)
        self.not_started = refused
        if not refused:
            return current
        return replace(current, jobs=tuple(job for job in current.jobs if job.name not in refused))

    # ---- source problems ------------------------------------------------------------------

    def _load_problems(self) -> tuple[Problem, ...]:
        """Those the last daemon left (they keep their ``since`` while they stand)."""
        if self.problems_path is None:
            return ()
        try:
            return problems_file.load(self.problems_path)[0]
        except problems_file.ProblemsUnreadable as err:
            log.warning("the problems of the last daemon are not used: %s", err)
            return ()

    def _record_problems(self) -> None:
        """The problems standing after this pass: shown, logged, posted and written when they
        changed. The files' stand as last read while the source cannot be read."""
        current = self._plan
        source_path = getattr(self.source, "problem_path", self.source.description)
        url = self.source.settings.url if isinstance(self.source, GitSource) else None
        rejected = self.source.rejected
        now = self.clock()
        found = standing(
            current.diagnostics if current is not None else None,
            source=source_path,
            source_error=_hiding(self.source_error, url, source_path),
            fetch=url is not None,
            rejected=(rejected[0], _hiding(rejected[1], url, source_path) or "") if rejected else None,
            revision=self.revision.commit if self.revision else None,
            now=now,
            previous=self.problems,
            held=held_back(current) if current is not None and current.has_errors else None,
        )
        if found == self.problems and self._problems_saved:
            return
        if self.problems_path is not None:  # first, so that status agrees once the endpoints do
            try:
                problems_file.save(self.problems_path, found, now)
                self._problems_saved = True
            except OSError as err:
                if self._problems_saved:
                    log.error("cannot write %s (%s); retrying after each pass", self.problems_path, err)
                self._problems_saved = False
        changed = changes(self.problems, found)
        self.problems = found
        self.metrics.set_problems(counts(found))
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
            self.events = (change, *self.events)[:RECENT_EVENTS]
            self.notifier.notify(change)
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

    # ---- what the HTTP endpoints show -----------------------------------------------------

    def health(self) -> tuple[bool, dict[str, Any]]:
        """Healthy once a pass has ended and passes keep coming on time with the source read.
        Until the first pass ends the status is ``starting`` (for as long as a pass may take:
        after that it is overdue, a hang)."""
        overdue = max(3 * self.options.interval_s, 60.0)
        since = self.last_pass_at if self.last_pass_at is not None else self.started_at
        late = self.clock() - since > overdue
        starting = self.last_pass_at is None and not late
        cannot_write = self.write_problems()
        healthy = (
            not late
            and not starting
            and self.source_error is None
            and not cannot_write
            and not self.not_started
        )
        reasons = [
            *(["a pass is overdue (a hang?)"] if late else []),
            *([f"the source cannot be read: {self.source_error}"] if self.source_error else []),
            *cannot_write,
            *(f"job {name}: {why}" for name, why in sorted(self.not_started.items())),
        ]
        return healthy, {
            "status": "ok" if healthy else "starting" if starting else "degraded",
            "reasons": reasons,
            "source": self.source.description,
            "sourceError": self.source_error,
            # the state or status folder that cannot take a write (read-only, full), and the
            # files the last pass could not write, by job: our own state is not kept, a real
            # readiness problem (503), though the jobs keep running
            "storage": {
                "state": self.folder_problems.get("state"),
                "status": self.folder_problems.get("status"),
            },
            "writeFailures": dict(self.write_failures),
            # jobs of the files not started: they exist under another state folder of this user
            "notStarted": dict(self.not_started),
            "revision": self.revision.commit if self.revision else None,
            "lastPassAt": self.last_pass_at,
            "passOverdue": late,
            # What cannot be applied now (a user's file: readiness is not failed for it)
            "problems": [p.to_json() for p in self.problems],
            # git snapshots no job uses, kept for the files tasks wrote in them (`tfdeclare gc`)
            "keptSnapshots": {
                commit: {"files": len(files), "examples": files[:5]}
                for commit, files in self.source.kept.items()
            },
        }

    def write_problems(self) -> list[str]:
        """One line each for what tfdeclare cannot write now (folders, then jobs' files)."""
        return [
            *(
                f"the {kind} folder cannot take a write: {why}"
                for kind, why in sorted(self.folder_problems.items())
            ),
            *(f"job {job}: cannot write {why}" for job, why in sorted(self.write_failures.items())),
            *(
                [f"a pass could not finish: cannot write {self.pass_write_error}"]
                if self.pass_write_error
                else []
            ),
        ]

    def _view_of(self, records: Mapping[str, JobRecord]) -> View:
        """What this pass wrote, and the status files of jobs whose record cannot be read
        (their last word, as before: the pass leaves them alone)."""
        statuses = self.controller.statuses
        written = statuses.documents()
        texts = statuses.json_documents()
        for name in self.controller.store.unreadable.keys() - written.keys():
            document = statuses.read(name)
            if document is not None:
                written[name] = document
                texts[name] = json.dumps(document)
        now = self.clock()
        for name in records.keys() - written.keys():  # its status file could not be written
            written[name] = status.status_document(records[name], now)
            texts[name] = json.dumps(written[name])
        names = sorted(written)
        return View(tuple(written[n] for n in names), dict(records), tuple(texts[n] for n in names))

    def view(self) -> View:
        """The last pass's view; before the first pass has ended, the status files' (read once)."""
        view = self._view
        if view is not None:
            return view
        with self._first_view_lock:
            if self._view is None:
                statuses = self.controller.statuses
                documents = (statuses.read(name) for name in statuses.names())
                self._view = View(tuple(d for d in documents if d is not None), {})
            return self._view

    def jobs(self) -> list[dict[str, Any]]:
        """Every job's status document, at most ``JOBS_TASKS`` tasks over all of them, each
        with the standing problems that hold it back (``problems``, empty when none)."""
        return [json.loads(text) for text in self._jobs_texts()]

    def jobs_json(self) -> str:
        """``jobs`` as a JSON text, joined from each document's own (``View.texts``)."""
        return "[" + ", ".join(self._jobs_texts()) + "]"

    def _jobs_texts(self) -> list[str]:
        view = self.view()
        texts = view.texts or tuple(json.dumps(d) for d in view.documents)
        held: dict[str, list[dict[str, Any]]] = {}
        for problem in self.problems:
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
        view = self.view()
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
        """The standing source problems (``GET /jobs?problems=true``)."""
        return [p.to_json() for p in self.problems]

    def metrics_text(self) -> str:
        return self.metrics.render()

    def page_html(self, refresh: int, jobs_offset: int = 0) -> str:
        """The page (``page.render``): the jobs from ``jobs_offset``, ``page.PAGE_JOBS`` of them."""
        view = self.view()
        shown = view.documents[jobs_offset : jobs_offset + page.PAGE_JOBS]
        specs = {
            d["name"]: page.details(view.records[d["name"]].spec) for d in shown if d["name"] in view.records
        }
        return page.render(
            view.documents,
            self.events,
            self.health()[1],
            refresh,
            now=self.clock(),
            specs=specs,
            tails=self._log_tails(shown),
            jobs_offset=jobs_offset,
            history=(self.history.recent, self.history.error),
        )

    def _log_tails(self, jobs: Sequence[Mapping[str, Any]]) -> dict[str, page.LogTail]:
        """The end of one task's log per job (``page.LogTail``), read while ``TAIL_BUDGET_S``
        lasts: a slow backend (a Mesos agent far away) costs the page its tails, not its
        answer. A log that cannot be read has no tail."""
        tails: dict[str, page.LogTail] = {}
        deadline = time.monotonic() + TAIL_BUDGET_S
        for job in jobs:
            if time.monotonic() > deadline:
                break
            started = sorted(
                (t for t in job.get("tasks") or [] if t.get("id")),
                key=lambda t: (TAIL_ROLES.index(t["role"]) if t["role"] in TAIL_ROLES else 9, t["index"]),
            )
            if not started:
                continue
            task = started[0]
            try:
                data = self._log_end(task["id"])
            except (BackendError, LogOffsetError):
                continue
            if data:
                name = f"{task['role']}-{task['index']}"
                href = f"/jobs/{quote(job['name'])}/logs?task={quote(name)}"
                tails[job["name"]] = page.LogTail(name, page.tail_text(data), href)
        return tails

    def _log_end(self, task_id: str) -> bytes:
        """The last ``page.TAIL_BYTES`` of a task's log (the backend names the size when asked
        for an offset past the end)."""
        backend = self.controller.backend
        try:
            return backend.read_log(task_id, INT64_MAX, 1).data  # past any real log
        except LogOffsetError as err:
            size = err.size
        start = max(0, size - page.TAIL_BYTES)
        return backend.read_log(task_id, start, size - start).data

    def task_log(self, name: str, task: str | None, offset: int) -> LogChunk:
        """A page of the output of ``task`` (``worker-0``, or the alias ``worker:0``; default:
        the job's first task that started) of job ``name``. Raises ``LookupError`` naming what
        is not there (a ``task`` that is no task name too: no such log), ``BackendError`` when
        the backend cannot read it."""
        view = self.view()
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
        return self.controller.backend.read_log(started[0]["id"], offset, page.LOG_PAGE_BYTES)


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
