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
import json
import sys
import time
from typing import Any

from tfdeclare.cli import terminal
from tfdeclare.cli.common import EXIT_OK, Settings, UserError, settings_from, stderr_line, stdout_write
from tfdeclare.core.enums import Phase
from tfdeclare.core.run import status
from tfdeclare.core.tone import PHASE_TONES, Painter, Tone, plain
from tfdeclare.shell.lock import ControllerLock
from tfdeclare.shell.statuswriter import STATUS_INDEX, StatusWriter
from tfdeclare.shell.store import StateError, StateStore


def _refresh(settings: Settings) -> None:
    """One reconcile pass (``status --refresh``): adopt tasks, notice the ones that ended."""
    from tfdeclare.cli import pulls
    from tfdeclare.cli.wiring import controller_for, locked

    if not StateStore(settings.state_dir).jobs_dir.is_dir():
        return
    with (
        locked(settings, "status --refresh"),
        controller_for(settings) as controller,
        pulls.shown_on(sys.stderr),
    ):
        result = controller.reconcile()
    for error in result.errors:
        stderr_line(f"tfdeclare: {error}")


def _freshness(settings: Settings) -> str:
    """Who keeps the status files current, for a note under the table."""
    holder = ControllerLock(settings.state_dir).holder()
    if holder is not None:
        who = holder.get("purpose", "a controller")
        return f"status files kept current by {who} (pid {holder.get('pid', '?')})"
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


def _status_table(summaries: list[dict[str, Any]], paint: Painter = plain) -> str:
    """One line a job, from its summary (``core.run.status.summary``)."""
    rows = [("NAME", "PHASE", "TASKS", "RESTARTS", "AGE", "MESSAGE")]
    for job in summaries:
        done = job.get("succeeded", 0)
        counts = f"{job.get('running', 0)}/{job.get('tasks', 0)}" + (f" ({done} done)" if done else "")
        rows.append(
            (
                str(job["name"]),
                str(job["phase"]),
                counts,
                str(job.get("restarts", 0)),
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


def _status_detail(doc: dict[str, Any], paint: Painter = plain) -> str:
    lines = [f"{paint(doc['name'], Tone.STRONG)}: {_phase(doc['phase'], paint)} — {doc.get('message', '')}"]
    if doc.get("source"):
        lines.append(f"  source:    {doc['source']['file']}:{doc['source']['line']}")
    lines.append(f"  spec hash: {doc['specHash'][:16]}   revision: {doc.get('revision') or '-'}")
    lines.append(f"  attempt {doc.get('attempt', 0)}, restarts {doc.get('restarts', 0)}")
    for role, scope in (doc.get("restartScopes") or {}).items():
        what = "alone" if scope["scope"] == "Task" else "the whole job"
        lines.append(f"  a failed {role} restarts {what} (restartScope {scope['scope']}: {scope['message']})")
    for each in doc.get("taskRestarts") or []:
        waiting = f", relaunch pending (from {each['nextLaunchTime']})" if each.get("pending") else ""
        fell = each.get("jobRestartsForItsAddress") or 0
        back = f", {fell} whole-job restart(s) for want of its address" if fell else ""
        lines.append(
            f"  {each['task']} restarted alone {each['restarts']}/{each['backoffLimit']}: "
            f"{each['message']} ({each['lastRestartTime']}){waiting}{back}"
        )
    lines.append(f"  started {doc.get('startTime') or '-'}, completed {doc.get('completionTime') or '-'}")
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


def cmd_status(args: argparse.Namespace) -> int:
    settings = settings_from(args)
    if args.refresh:
        _refresh(settings)
    statuses = StatusWriter(settings.status_dir, index=settings.state_dir / STATUS_INDEX)
    if args.name:
        document = statuses.read(args.name)
        if document is None:
            raise UserError(f"no job named {args.name!r} (no status file in {settings.status_dir})")
        told = args.tasks is not None or args.tasks_offset > 0
        limit = None if args.tasks == -1 else DETAIL_TASKS if args.tasks is None else args.tasks  # -1: all
        if args.output == "json" and not told:
            stdout_write(json.dumps(document, indent=2) + "\n")  # the status file as it is
        elif args.output == "json":
            paged = _paged(
                document, settings, args.tasks_offset, None if args.tasks in (None, -1) else args.tasks
            )
            stdout_write(json.dumps(paged, indent=2) + "\n")
        else:
            paged = _paged(document, settings, args.tasks_offset, limit)
            stdout_write(_status_detail(paged, terminal.painter(sys.stdout)))
    elif args.tasks is not None or args.tasks_offset:
        raise UserError("--tasks and --tasks-offset list the tasks of one job: name it")
    elif args.output == "json":
        documents = [d for d in (statuses.read(n) for n in statuses.names()) if d is not None]
        stdout_write(json.dumps(documents, indent=2) + "\n")
        return EXIT_OK
    elif summaries := statuses.summaries():
        stdout_write(_status_table(summaries, terminal.painter(sys.stdout)))
    else:
        stdout_write("No jobs.\n")
        return EXIT_OK
    if args.output != "json":
        stderr_line(f"({_freshness(settings)})")
    return EXIT_OK
