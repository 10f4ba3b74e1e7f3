"""``tfdeclare status``: the status files, read-only (``--refresh`` runs one pass first).

Kept apart from ``run_commands`` so that it imports no planner, backend or controller unless
``--refresh`` asks for one: the table of 10,000 jobs is mostly start-up otherwise. Without a
name it prints one line a job from the summaries' index (``StatusWriter.summaries``); with one,
that job's status file with a page of its tasks (``DETAIL_TASKS``, ``--tasks``,
``--tasks-offset``: past those the file lists, from the job's record).
"""

from __future__ import annotations

import argparse
import calendar
import sys
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tfdeclare.backends.errors import BackendError
from tfdeclare.cli import background, terminal
from tfdeclare.cli.common import (
    EXIT_OK,
    Origin,
    Settings,
    UserError,
    check_state,
    chosen_folders,
    settings_from,
    stderr_line,
    stdout_write,
)
from tfdeclare.cli.output import document_text, is_document
from tfdeclare.cli.selection import selected_names, selector_of
from tfdeclare.core.enums import Phase
from tfdeclare.core.plan.problems import BranchFailure, Problem
from tfdeclare.core.run import status
from tfdeclare.core.run.record import JobRecord, rfc3339
from tfdeclare.core.run.status import progress_lines
from tfdeclare.core.spec.selector import Selector
from tfdeclare.core.tone import PHASE_TONES, Painter, Tone, plain
from tfdeclare.core.visible import visible, visible_data
from tfdeclare.shell import problems as problems_file
from tfdeclare.shell.lock import ControllerLock
from tfdeclare.shell.statuswriter import STATUS_INDEX, StatusWriter
from tfdeclare.shell.store import StateError, StateStore


def _refresh(settings: Settings) -> None:
    """One reconcile pass (``status --refresh``): adopt tasks, notice the ones that ended."""
    from tfdeclare.cli import pulls
    from tfdeclare.cli.wiring import controller_for, locked

    if not StateStore(settings.state_dir).exists():
        return
    with (
        locked(settings, "status --refresh"),
        controller_for(settings) as controller,
        pulls.shown_on(sys.stderr),
    ):
        result = controller.reconcile()
    # a backend it cannot observe or act on at all (its cluster unreachable, the framework
    # refused): exit 1, as before; its jobs' lastError says so in the files just written
    blocking = [p for _, p in sorted(result.unobserved.items())] or [
        e for e in result.errors if e.code.backend_down
    ]
    for error in result.errors:
        if error not in blocking:
            stderr_line(f"tfdeclare: {error}")
    if blocking:
        raise BackendError(blocking[0].detail, code=blocking[0].code)


def _freshness(settings: Settings, stale: int = 0) -> str:
    """Who keeps the status files current, for a note under the table; with ``stale`` files
    that could not be written, those instead (never said to be current)."""
    holder = ControllerLock(settings.state_dir).holder()
    if holder is not None and background.is_background(holder):
        who = (
            f"a background controller (pid {holder.get('pid', '?')}, "
            f"log {holder.get('log', background.LOG_NAME)})"
        )
    elif holder is not None:
        who = f"{holder.get('purpose', 'a controller')} (pid {holder.get('pid', '?')})"
    else:
        who = None
    if stale:
        files = "status file" if stale == 1 else "status files"
        retried = f"{who} tries again each pass" if who else "no controller is running to try again"
        return (
            f"{stale} {files} could not be written and {'is' if stale == 1 else 'are'} stale: "
            f"shown from the records in the state folder; {retried}"
        )
    if who is not None:
        return f"status files kept current by {who}"
    return (
        "as of the last reconcile pass; no controller is running: `tfdeclare status --refresh` updates them"
    )


def _age(timestamp: str | None) -> str:
    if not timestamp:
        return "-"
    then = calendar.timegm(time.strptime(timestamp, "%Y-%m-%dT%H:%M:%SZ"))  # UTC, whatever the DST
    seconds = max(0, int(time.time() - then))
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size:
            return f"{seconds // size}{unit}"
    return f"{seconds}s"


def _phase(phase: str, paint: Painter, width: int = 0) -> str:
    try:
        tone = PHASE_TONES[Phase(phase)]
    except ValueError:
        return phase.ljust(width)
    return paint(phase, tone) + " " * (width - len(phase))


def _restarts_cell(job: dict[str, Any]) -> str:
    """The RESTARTS cell: the whole job's restarts (against ``backoffLimit``), then, where
    tasks were restarted alone (``restartScope: Task``), their restarts: ``0 (+2 alone)``."""
    alone = job.get("taskRestarts") or 0
    return f"{job.get('restarts', 0)}" + (f" (+{alone} alone)" if alone else "")


def _status_table(summaries: list[dict[str, Any]], paint: Painter = plain) -> str:
    """One line a job, from its summary (``core.run.status.summary``); what it quotes (a
    message, a file name) written ``visible``."""
    summaries = visible_data(summaries)
    rows = [("NAME", "PHASE", "TASKS", "RESTARTS", "AGE", "MESSAGE")]
    for job in summaries:
        done = job.get("succeeded", 0)
        counts = f"{job.get('running', 0)}/{job.get('tasks', 0)}" + (f" ({done} done)" if done else "")
        rows.append(
            (
                str(job["name"]),
                str(job["phase"]),
                counts,
                _restarts_cell(job),
                _age(job.get("startTime")),
                str(job.get("message", "")),
            )
        )
    widths = [max(len(r[i]) for r in rows) for i in range(5)]
    header = "  ".join(c.ljust(w) for c, w in zip(rows[0][:5], widths, strict=True)) + "  " + rows[0][5]
    lines = [paint(header, Tone.STRONG)]
    for r in rows[1:]:
        cells = [r[0].ljust(widths[0]), _phase(r[1], paint, widths[1])]
        cells.extend(c.ljust(w) for c, w in zip(r[2:5], widths[2:], strict=True))
        lines.append("  ".join(cells) + "  " + r[5])
    return "".join(line.rstrip() + "\n" for line in lines)


def _last_error(doc: dict[str, Any]) -> list[str]:
    """The line of its ``lastError`` (its code, whether terminal, since when), if any."""
    error = doc.get("lastError")
    if not error:
        return []
    kind = "terminal, not retried" if error.get("terminal") else "retried each pass"
    return [f"  last error: {error['code']} ({kind}, since {error.get('time') or '-'}): {error['detail']}"]


def _status_detail(doc: dict[str, Any], paint: Painter = plain) -> str:
    """A job's status as text; what it quotes (messages, file names, a spec's values) written
    ``visible``: the document as data (``-o json``) keeps them exact."""
    doc = visible_data(doc)
    lines = [f"{paint(doc['name'], Tone.STRONG)}: {_phase(doc['phase'], paint)} — {doc.get('message', '')}"]
    if doc.get("source"):
        lines.append(f"  source:    {doc['source']['file']}:{doc['source']['line']}")
    lines.append(f"  spec hash: {doc['specHash'][:16]}   revision: {doc.get('revision') or '-'}")
    lines.append(f"  attempt {doc.get('attempt', 0)}, restarts {doc.get('restarts', 0)}")
    lines.extend(_last_error(doc))
    lines.extend(_interruptions(doc))
    lines.extend(_platform_restarts(doc))
    for role, scope in (doc.get("restartScopes") or {}).items():
        what = "alone" if scope["scope"] == "Task" else "the whole job"
        lines.append(f"  a failed {role} restarts {what} (restartScope {scope['scope']}: {scope['message']})")
    for each in doc.get("taskRestarts") or []:
        waiting = f", relaunch pending (from {each['nextLaunchTime']})" if each.get("pending") else ""
        fell = each.get("jobRestartsForItsAddress") or 0
        back = f", {fell} whole-job restart(s) for want of its address" if fell else ""
        taken = each.get("platformRestarts") or 0
        platform = f" (+{taken} for platform events)" if taken else ""
        lines.append(
            f"  {each['task']} restarted alone {each['restarts']}/{each['backoffLimit']}{platform}: "
            f"{each['message']} ({each['lastRestartTime']}){waiting}{back}"
        )
    lines.append(f"  started {doc.get('startTime') or '-'}, completed {doc.get('completionTime') or '-'}")
    for line in progress_lines(doc.get("progress"), time.time()):
        lines.append(f"  progress: {line}")
    lines.append("  conditions:")
    for c in doc.get("conditions", []):
        lines.append(f"    {c['type']:<12} {c['status']:<6} {c['reason']}: {c['message']}")
    tasks = doc.get("tasks", [])
    offset = int(doc.get("tasksOffset", 0))
    total = int(doc.get("taskCount", offset + len(tasks)))
    whole = not offset and len(tasks) == total
    lines.append("  tasks:" if whole else f"  tasks ({total} in all):")
    for t in tasks:
        where = f"{t['host']}:{t['port']}" if t.get("host") else "-"
        code = "" if t.get("exitCode") is None else f" exit {t['exitCode']}"
        name = f"{t['role']}-{t['index']}"
        lines.append(f"    {name:<12} {t['state']:<10} {where:<21}{code} {t.get('message', '')}".rstrip())
    if not whole:
        shown = f"tasks {offset + 1}-{offset + len(tasks)}" if tasks else "no task"
        following = total - offset - len(tasks)
        more = (
            f"; {following} more: `tfdeclare status {doc['name']} --tasks-offset {offset + len(tasks)}`"
            if following > 0
            else ""
        )
        lines.append(f"    ({shown} of {total} listed{more}, or `--tasks all`)")
    return "\n".join(lines) + "\n"


def _folders_read(args: argparse.Namespace, settings: Settings) -> str:
    """``state folder X (status folder Y)``, each with where it came from unless the default:
    what ``status`` says when it finds nothing, so that a wrong folder shows."""
    chosen = chosen_folders(args, settings.config, settings.config_path)

    def named(what: str, dest: str, path: Path) -> str:
        origin = chosen[dest]
        return f"{what} {path}" + ("" if origin.origin is Origin.DEFAULT else f", from {origin.via}")

    state = named("state folder", "state_dir", settings.state_dir)
    return f"{state} ({named('status folder', 'status_dir', settings.status_dir)})"


def _interruptions(doc: dict[str, Any]) -> list[str]:
    """Preemptions and suspensions, apart from restarts (they never count as restarts): the
    counters, the current one and the last few ended ones."""
    preempted, suspended = doc.get("preemptions") or 0, doc.get("suspensions") or 0
    current, history = doc.get("suspension"), doc.get("suspensionHistory") or []
    if not (preempted or suspended or current):
        return []
    lines = [f"  preemptions {preempted}, suspensions {suspended} (not counted as restarts)"]
    for entry, now in [*((e, False) for e in history[-5:]), *([(current, True)] if current else [])]:
        by = f" by {entry['preemptedBy']}" if entry.get("preemptedBy") else ""
        why = f" ({entry['message']})" if entry.get("message") else ""
        until = "still" if now else f"resumed {entry.get('resumeTime') or '-'}"
        lines.append(
            f"  {entry['reason'].lower()}{by} at {entry['time']}{why}, {entry['tasks']} task(s); {until}"
        )
    return lines


def _platform_restarts(doc: dict[str, Any]) -> list[str]:
    """Restarts for the platform's own events (lost or drained agents, maintenance, ...), apart
    from ``restarts``: the counter against its limit and the last few events."""
    used, events = doc.get("platformRestarts") or 0, doc.get("platformEvents") or []
    if not (used or events):
        return []
    limit = doc.get("platformRestartLimit")
    lines = [f"  platform restarts {used} of {limit} (not counted against backoffLimit)"]
    for event in events[-5:]:
        tasks = ", ".join(event.get("tasks") or [])
        lines.append(f"  {event['cause']} at {event['time']}: {tasks}")
    return lines


def _standing_problems(settings: Settings) -> problems_file.Stored:
    """The source problems the daemon last recorded (none without a file), and its status
    branch failure; a file that cannot be read is said on stderr, and shows none."""
    try:
        return problems_file.read(problems_file.path_in(settings.state_dir))
    except problems_file.ProblemsUnreadable as err:
        stderr_line(f"tfdeclare: warning: the source problems cannot be shown: {err}")
        return problems_file.Stored((), None)


def _branch_footer(branch: BranchFailure, paint: Painter) -> str:
    """Git mode: the status branch the daemon could not write or push."""
    since = rfc3339(branch.since)
    line = f"Status branch {visible(branch.branch)}: not written or pushed since {since}, tried again"
    return f"\n{paint(line, Tone.BAD)}\n  {visible(branch.message)}\n"


def _problems_footer(
    problems: tuple[Problem, ...], as_of: str | None, paint: Painter, omitted: int = 0
) -> str:
    """Each file that cannot be applied and its first error (what holds which job back), and
    how many more stand than the daemon lists."""
    when = f", as of {as_of}" if as_of else ""
    many = f"{len(problems)} of {len(problems) + omitted}" if omitted else f"{len(problems)}"
    lines = [
        "",
        paint(f"Problems ({many}{when}): not applied, the jobs named keep running as applied", Tone.BAD),
    ]
    for problem in problems:
        held = f" (holds back {', '.join(problem.jobs)})" if problem.jobs else ""
        lines.append(f"  {visible(problem.path)}: {problem.kind.value}{held}, since {problem.since_text}")
        lines.append(f"    {visible(problem.message)}")
        more = problem.diagnostic_count - 1
        if more > 0:
            lines.append(f"    ... and {more} more error{'s' if more > 1 else ''}")
    if omitted:
        lines.append(
            f"  ... and {omitted} more problem{'s' if omitted > 1 else ''} not listed (those holding back "
            "jobs are listed first; `tfdeclare validate` names every one)"
        )
    return "\n".join(lines) + "\n"


DETAIL_TASKS = 20  # tasks `tfdeclare status NAME` lists unless told (--tasks)


def _paged(doc: dict[str, Any], settings: Settings, offset: int, limit: int | None) -> dict[str, Any]:
    """The document with its tasks from ``offset``, at most ``limit`` (None: all). Tasks past
    those its status file lists (a big job's) come from the job's record, when there is one
    with the same spec and attempt; else only those listed."""
    listed = doc.get("tasks") or []
    total = int(doc.get("taskCount", len(listed)))
    end = total if limit is None else min(total, offset + limit)
    if end <= len(listed):
        page = listed[offset:end]
    else:
        try:
            record = StateStore(settings.state_dir).load(doc["name"])
        except StateError:
            record = None
        same = record is not None and (record.spec_hash, record.attempt) == (
            doc.get("specHash"),
            doc.get("attempt", 0),
        )
        if record is not None and same:
            page = status.task_entries(record, offset, None if limit is None else end - offset)
            total = status.task_count(record)
        else:
            page = listed[offset:end]
            stderr_line(
                f"tfdeclare: job {doc['name']}'s status file lists its first {len(listed)} of {total} "
                f"tasks and the state folder ({settings.state_dir}) has no record of this run of it "
                "to list the others"
            )
    paged = {k: v for k, v in doc.items() if k not in ("tasks", "tasksTruncated", "taskCount", "updatedAt")}
    paged["tasks"] = page
    if offset or len(page) < total:
        paged.update(tasksTruncated=True, taskCount=total, tasksOffset=offset)
    paged["updatedAt"] = doc.get("updatedAt")
    return paged


def _none_found(selector: Selector) -> str:
    return f"job matches -l {selector}" if selector else "jobs"


@dataclass(slots=True)
class _Reading:
    """What ``status`` reads: the status files and, for a job without a readable one, its
    record (read-only: never the lock). What could not be read is said on stderr."""

    settings: Settings
    statuses: StatusWriter
    store: StateStore
    unreadable: list[str] = field(default_factory=list)
    stale: dict[str, str] | None = None  # job -> why its status file could not be written

    def unwritten(self) -> dict[str, str]:
        """The jobs whose status file the controller could not write (read once)."""
        if self.stale is None:
            self.stale = self.statuses.unwritten()
        return self.stale

    def record_of(self, name: str) -> JobRecord | None:  # only for a job without a readable status file
        try:
            return self.store.load(name)
        except StateError as err:
            self.unreadable.append(f"{name}: its record cannot be read either: {err}")
            return None

    def documents(self, names: Iterable[str], only: list[str] | None) -> list[dict[str, Any]]:
        """The status documents of ``names`` (or of ``only``), warning of what is unreadable."""
        found, notes = self.statuses.shown_documents(
            names, self.record_of, time.time(), only, self.unwritten()
        )
        for note in [*notes, *self.unreadable]:
            stderr_line(f"tfdeclare: warning: {note}")
        return found


def cmd_status(args: argparse.Namespace) -> int:
    settings = settings_from(args)
    check_state(settings)  # read without the lock: only a folder of this user's alone
    if args.refresh:
        _refresh(settings)
    store = StateStore(settings.state_dir)  # read-only: never the lock
    reading = _Reading(
        settings, StatusWriter(settings.status_dir, index=settings.state_dir / STATUS_INDEX), store
    )
    if (args.tasks is not None or args.tasks_offset) and not args.name:
        raise UserError("--tasks and --tasks-offset list the tasks of one job: name it")
    selector = selector_of(args)
    chosen = set(selected_names(store, selector)) if selector else None  # None: every job
    if args.name and chosen is not None and args.name not in chosen:
        raise UserError(f"job {args.name} does not match -l {selector}")
    if args.watch:
        return _watch(args, reading, selector)
    stored = _standing_problems(settings)
    problems, as_of, branch, omitted = (
        stored.problems,
        stored.updated_at,
        stored.status_branch,
        stored.omitted,
    )
    paint = terminal.painter(sys.stdout)
    if args.name:
        problems = tuple(p for p in problems if args.name in p.jobs)
        documents = _show_one(args, reading, problems, paint)
    elif is_document(args.output):
        _print_documents(args, reading, chosen, selector, problems, branch, omitted)
        return EXIT_OK
    else:
        documents = _show_table(args, reading, chosen, selector, paint)
    if is_document(args.output):
        return EXIT_OK
    if problems:
        stdout_write(_problems_footer(problems, as_of, paint, 0 if args.name else omitted))
    if branch is not None and not args.name:
        stdout_write(_branch_footer(branch, paint))
    if documents:
        shown = {d["name"] for d in documents}
        stderr_line(f"({_freshness(settings, len(shown & reading.unwritten().keys()))})")
    return EXIT_OK


def _watch(args: argparse.Namespace, reading: _Reading, selector: Selector) -> int:
    """``status --watch``: a row per change, of one job or of every (selected) one."""
    from tfdeclare.cli import watch_command

    if args.tasks is not None or args.tasks_offset or args.problems or args.refresh:
        raise UserError("--watch shows rows as they change: not with --tasks, --problems or --refresh")
    problems = _WatchedProblems(reading.settings)
    if args.name:
        return watch_command.watch_one(args, reading.statuses, _status_table, problems)
    store = reading.store
    return watch_command.watch_all(
        args,
        reading.statuses,
        lambda: set(selected_names(store, selector)) if selector else None,
        _status_table,
        problems,
    )


class _WatchedProblems:
    """The standing source problems, read again at each look (``status --watch``); a file
    that cannot be read is said once and the problems stand as last read."""

    def __init__(self, settings: Settings) -> None:
        self.path = problems_file.path_in(settings.state_dir)
        self.last: tuple[Problem, ...] = ()
        self.unreadable: str | None = None

    def __call__(self) -> tuple[Problem, ...]:
        try:
            self.last = problems_file.load(self.path)[0]
            self.unreadable = None
        except problems_file.ProblemsUnreadable as err:
            if str(err) != self.unreadable:
                stderr_line(f"tfdeclare: warning: the source problems cannot be shown: {err}")
            self.unreadable = str(err)
        return self.last


def _show_one(
    args: argparse.Namespace, reading: _Reading, problems: Sequence[Problem], paint: Painter
) -> list[dict[str, Any]]:
    """``status NAME``: its status file as it is (or a page of its tasks) for ``-o json|yaml``,
    else its detail with the first ``--tasks`` of its tasks."""
    settings = reading.settings
    documents = reading.documents((), [args.name])
    if not documents:
        raise UserError(f"no job named {args.name!r} in {_folders_read(args, settings)}")
    if not is_document(args.output):
        limit = None if args.tasks == -1 else DETAIL_TASKS if args.tasks is None else args.tasks  # -1: all
        stdout_write(_status_detail(_paged(documents[0], settings, args.tasks_offset, limit), paint))
        return documents
    document = documents[0]  # the status file as it is, unless a page of tasks is asked for
    if args.tasks is not None or args.tasks_offset > 0:
        document = _paged(
            document, settings, args.tasks_offset, None if args.tasks in (None, -1) else args.tasks
        )
    if args.problems:
        document = {**document, "problems": [p.to_json() for p in problems]}
    stdout_write(document_text(document, args.output))
    return documents


def _print_documents(
    args: argparse.Namespace,
    reading: _Reading,
    chosen: set[str] | None,
    selector: Selector,
    problems: Sequence[Problem],
    branch: BranchFailure | None = None,
    omitted: int = 0,
) -> None:
    """``status -o json|yaml``: the list of every (selected) job's document; with
    ``--problems`` an object holding it and the standing problems (and ``statusBranch`` while
    the daemon cannot write or push it), else those on stderr."""
    documents = reading.documents(reading.store.names(), None if chosen is None else sorted(chosen))
    listed: Any = documents
    if args.problems:
        listed = {"jobs": documents, "problems": [p.to_json() for p in problems], "problemsOmitted": omitted}
        if branch is not None:
            listed["statusBranch"] = branch.to_json()
    stdout_write(document_text(listed, args.output))
    if not args.problems:  # the list (or document) scripts read, as before: the problems go to stderr
        for problem in problems:
            stderr_line(f"tfdeclare: problem ({problem.kind.value}): {visible(problem.message)}")
        if omitted:
            stderr_line(f"tfdeclare: ... and {omitted} more problem(s) not listed")
        if branch is not None:
            stderr_line(f"tfdeclare: status branch {visible(branch.branch)}: {visible(branch.message)}")
    if not documents:  # the list stays a list (scripts count it); where it looked, aside
        stderr_line(f"tfdeclare: no {_none_found(selector)} in {_folders_read(args, reading.settings)}")


def _show_table(
    args: argparse.Namespace, reading: _Reading, chosen: set[str] | None, selector: Selector, paint: Painter
) -> list[dict[str, Any]]:
    """``status``: a row per (selected) job, from the status index; a job whose status file
    could not be written or read is shown from its record."""
    unreadable: dict[str, str] = {}
    stale: dict[str, str] = {}
    documents = [
        d
        for d in reading.statuses.summaries(unreadable, stale)
        if (chosen is None or d["name"] in chosen) and d["name"] not in stale  # stale: from its record
    ]
    reading.stale = stale
    shown = {d["name"] for d in documents}
    names = reading.store.names() if chosen is None else sorted(chosen)
    missing = [n for n in names if n not in shown]
    for name, line in sorted(unreadable.items()):  # those of jobs shown from their records: said below
        if name not in missing and (chosen is None or name in chosen):
            stderr_line(f"tfdeclare: warning: {line}")
    if missing:
        extra = reading.documents((), missing)
        documents = sorted([*documents, *(status.summary(d) for d in extra)], key=lambda d: str(d["name"]))
    if documents:
        stdout_write(_status_table(documents, paint))
    else:
        stdout_write(f"No {_none_found(selector)} in {_folders_read(args, reading.settings)}.\n")
    return documents
