"""``Daemon``: the level-triggered loop. Anything may ask for a pass (``request_pass``); the
loop runs one pass at a time, at least every ``interval`` (resync; git fetch), sooner when a
job wants a look (backoff expiry), after file events once they have been quiet for
``debounce``. A pass that cannot read the source keeps the last applied state running and
says so (log, /healthz, metrics); the newest revision always supersedes an older one.

Files are seen while they are written, so the daemon plans with a settle time: a change that
stops or restarts tasks is made once the files have said the same for ``settle`` seconds (the
planner's settle rule; the daemon keeps its sightings from pass to pass and wakes when one
settles).
Jobs the plan keeps as applied for a reason (an unreadable listing, a file without a job,
the prune-everything guard) are logged as a warning whenever that set changes.

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
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol
from urllib.parse import quote

from tfdeclare.backends.base import BackendError, LogChunk, LogOffsetError
from tfdeclare.controller import Controller
from tfdeclare.core.config import WebhookConfig
from tfdeclare.core.diagnostics import Diagnostic
from tfdeclare.core.enums import Phase, Reason
from tfdeclare.core.plan.planner import Plan, PlanCache, PlanOptions, Sighting, plan
from tfdeclare.core.run import status
from tfdeclare.core.run.record import JobRecord, Revision
from tfdeclare.core.spec.keys import ORDER, TaskKey
from tfdeclare.core.spec.names import is_job_name
from tfdeclare.core.spec.policy import Quota
from tfdeclare.daemon import page
from tfdeclare.daemon.httpguard import INT64_MAX
from tfdeclare.daemon.metrics import Metrics
from tfdeclare.daemon.sources import SourceError
from tfdeclare.daemon.webhooks import Notifier, PhaseChange
from tfdeclare.shell.sources import SpecFiles

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
        self.last_pass_at: float | None = None
        self.started_at = clock()

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
            except OSError as err:  # e.g. the state disk is full: nothing to report as a bug
                log.error("cannot write the state folder (%s); retrying", err)
                self.metrics.pass_errors += 1
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
        settles_at = self._apply_desired() if self.source_error is None else None
        try:
            result = self.controller.reconcile()  # it logs what it does
        except BackendError as err:  # the cluster is unreachable: try again next pass
            log.error("backend unavailable, the jobs keep running: %s", err)
            self.last_pass_at = self.clock()
            self.metrics.observe_pass(time.monotonic() - started, self.last_pass_at, 0, 0, 1)
            return None
        for error in result.errors:
            log.error("%s", error)
        records = self.controller.store.records()
        self._phase_changes(result.phases, records)
        self._view = self._view_of(records)
        tasks = Counter(t.state.value for r in records.values() for t in r.tasks)
        self.metrics.set_jobs(
            {n: p.value for n, p in result.phases.items()}, tasks, {n: r.restarts for n, r in records.items()}
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

    def _apply_desired(self) -> float | None:
        """Plan and apply what the files say; returns when the next pending change settles."""
        with self._changes_lock:
            changed, self._changes = self._changes, set()
        desired = self.spec_files.load(changed)
        options = PlanOptions(
            prune=self.options.prune,
            allow_empty=self.options.allow_empty,
            backend=self.controller.backend.name,
            settle_s=self.options.settle_s,
            quotas=self.options.quotas,
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
        if current.diagnostics != self._diagnostics:  # the files' and the quotas'
            self._diagnostics = current.diagnostics
            for diagnostic in current.diagnostics:
                log.warning("%s", diagnostic.format())
        self._log_held(current)
        for line in self.controller.apply(current, self.revision, self.source.rejected):
            log.info("applied %s", line)
        revision = self.revision.commit if self.revision else None
        self.metrics.attempted_revision = revision
        if not current.has_errors:
            self.metrics.applied_revision = revision
        return current.wake_at

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
        healthy = not late and not starting and self.source_error is None
        return healthy, {
            "status": "ok" if healthy else "starting" if starting else "degraded",
            "source": self.source.description,
            "sourceError": self.source_error,
            "revision": self.revision.commit if self.revision else None,
            "lastPassAt": self.last_pass_at,
            "passOverdue": late,
            # git snapshots no job uses, kept for the files tasks wrote in them (`tfdeclare gc`)
            "keptSnapshots": {
                commit: {"files": len(files), "examples": files[:5]}
                for commit, files in self.source.kept.items()
            },
        }

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
        """Every job's status document, at most ``JOBS_TASKS`` tasks over all of them."""
        return [json.loads(text) for text in self._jobs_texts()]

    def jobs_json(self) -> str:
        """``jobs`` as a JSON text, joined from each document's own (``View.texts``)."""
        return "[" + ", ".join(self._jobs_texts()) + "]"

    def _jobs_texts(self) -> list[str]:
        view = self.view()
        texts = view.texts or tuple(json.dumps(d) for d in view.documents)
        budget = JOBS_TASKS
        out = []
        for document, text in zip(view.documents, texts, strict=True):
            tasks = document.get("tasks") or []
            if len(tasks) <= budget:
                out.append(text)
                budget -= len(tasks)
                continue
            total = int(document.get("taskCount", len(tasks)))
            out.append(json.dumps(_with_tasks(document, tasks[:budget], total)))
            budget = 0
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
