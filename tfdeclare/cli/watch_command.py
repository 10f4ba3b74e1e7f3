"""``tfdeclare status --watch``: the status files, polled, a line per change (as ``kubectl get
-w``). Read-only like ``status``: whoever keeps the files current (the daemon, ``apply``,
``delete``, ``status --refresh``) is what moves it.

Without NAME: the table, then every ``--watch-interval`` (1 s) the summaries' index
(``StatusWriter.summaries``, cheap: no status file is read while its entry is current) and a
row for each job whose phase, task counts, restarts or message changed, ``NAME deleted`` for one
gone; until Ctrl-C (exit 130). With ``-l``, the jobs that match (their records read again each
time, so a job applied later that matches shows). With NAME: that job's row, then a row per
change, ending when it reaches a terminal phase: exit 0 Succeeded, 1 Failed (or deleted).
``-o json``: one JSON document a line per change (the summary; with NAME the whole status
document); ``-o yaml``: one YAML document each.

Problems too, as they appear and clear (those standing when it starts first): the source
problems the daemon or ``apply`` recorded (``<state-dir>/problems.json``: a file that cannot be
applied, a failed fetch, a job not started) and the status files that could not be written
(stale: ``StatusWriter.unwritten``, a read-only or full status folder); with NAME those of that
job. A line ``problem KIND: MESSAGE`` or ``problem cleared (KIND): PATH``; ``-o json|yaml``: a
document ``{"problem": {...}, "cleared": false|true}`` each.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from tfdeclare.cli import terminal
from tfdeclare.cli.common import EXIT_ERROR, EXIT_INTERRUPTED, EXIT_OK, UserError, stderr_line, stdout_write
from tfdeclare.cli.output import is_document, yaml_text
from tfdeclare.core.enums import Phase
from tfdeclare.core.plan.problems import Problem
from tfdeclare.core.run.status import summary
from tfdeclare.core.tone import Painter, Tone
from tfdeclare.core.visible import json_line, visible
from tfdeclare.shell.statuswriter import StatusUnreadable, StatusWriter

Key = tuple[object, ...]
STALE = "status-stale"  # the kind of a status file that could not be written

# What stands now, by (kind, path): each problem's JSON (``Problem.to_json``, or a stale file's)
Standing = dict[tuple[str, str], dict[str, Any]]


def standing(problems: Sequence[Problem], stale: Mapping[str, str], statuses: StatusWriter) -> Standing:
    """The source problems and the stale status files (job -> "PATH (why)"), by (kind, path)."""
    out: Standing = {(p.kind.value, p.path): p.to_json() for p in problems}
    for name, why in sorted(stale.items()):
        path = str(statuses.path(name))
        out[(STALE, path)] = {
            "path": path,
            "kind": STALE,
            "message": f"{name}: status file stale: cannot write {why}",
            "jobs": [name],
        }
    return out


class _Problems:
    """Says each problem that appeared or cleared since the last look (every standing one at
    the first)."""

    def __init__(self, output: str, paint: Painter) -> None:
        self.output = output
        self.paint = paint
        self.seen: Standing = {}

    def show(self, now: Standing) -> None:
        appeared = [now[k] for k in sorted(now.keys() - self.seen.keys())]
        cleared = [self.seen[k] for k in sorted(self.seen.keys() - now.keys())]
        self.seen = now
        for problem, gone in [*((p, False) for p in appeared), *((p, True) for p in cleared)]:
            if is_document(self.output):
                stdout_write(_document_line({"problem": problem, "cleared": gone}, self.output))
            elif gone:
                stdout_write(f"problem cleared ({problem['kind']}): {visible(problem['path'])}\n")
            else:
                jobs = problem.get("jobs") or []
                held = f" (holds back {', '.join(jobs)})" if jobs and problem["kind"] != STALE else ""
                line = f"problem {problem['kind']}: {visible(problem['message'])}{held}"
                stdout_write(self.paint(line, Tone.BAD) + "\n")


def _key(job: dict[str, Any]) -> Key:
    """What a change is: the phase, task counts, restarts (of the job or of tasks alone) or
    message (never the age)."""
    keys = ("phase", "tasks", "running", "succeeded", "restarts", "taskRestarts", "message")
    return tuple(job.get(k) for k in keys)


def _document_line(document: dict[str, Any], output: str) -> str:
    if output == "yaml":
        return yaml_text(document, start=True)
    return json_line(document, sort_keys=True) + "\n"


class _Rows:
    """Rows of the table, the first with the header; then one a change, the same columns."""

    def __init__(self, table: Callable[[list[dict[str, Any]], Painter], str], paint: Painter) -> None:
        self.table = table
        self.paint = paint
        self.header_shown = False

    def show(self, jobs: list[dict[str, Any]]) -> None:
        if not jobs:
            return
        lines = self.table(jobs, self.paint).splitlines(keepends=True)
        stdout_write("".join(lines if not self.header_shown else lines[1:]))
        self.header_shown = True


def watch_all(
    args: argparse.Namespace,
    statuses: StatusWriter,
    chosen: Callable[[], set[str] | None],
    table: Callable[[list[dict[str, Any]], Painter], str],
    problems: Callable[[], Sequence[Problem]] = tuple,
) -> int:
    """Every job's row as it changes, and each problem (``problems``: the standing source
    problems now) as it appears or clears, until interrupted (``chosen``: the names ``-l``
    picks now, None for every job)."""
    rows = _Rows(table, terminal.painter(sys.stdout))
    said = _Problems(args.output, rows.paint)
    seen: dict[str, Key] = {}
    first = True
    try:
        while True:
            names = chosen()
            stale: dict[str, str] = {}
            listed = statuses.summaries(stale=stale)
            now = {s["name"]: s for s in listed if names is None or s["name"] in names}
            changed = [job for name, job in sorted(now.items()) if seen.get(name) != _key(job)]
            gone = sorted(set(seen) - set(now))
            if is_document(args.output):
                for job in changed:
                    stdout_write(_document_line(job, args.output))
                for name in gone:
                    stdout_write(_document_line({"name": name, "deleted": True}, args.output))
            else:
                rows.show(changed)
                for name in gone:
                    stdout_write(f"{name}  deleted\n")
                if first and not changed:
                    stderr_line("tfdeclare: no jobs yet; watching for them (Ctrl-C to stop)")
            said.show(standing(problems(), stale, statuses))
            seen = {name: _key(job) for name, job in now.items()}
            first = False
            time.sleep(args.watch_interval)
    except KeyboardInterrupt:
        return EXIT_INTERRUPTED


def watch_one(
    args: argparse.Namespace,
    statuses: StatusWriter,
    table: Callable[[list[dict[str, Any]], Painter], str],
    problems: Callable[[], Sequence[Problem]] = tuple,
) -> int:
    """One job's row (``-o json``: its status document) as it changes, and each problem of
    that job as it appears or clears, until it has Succeeded (exit 0) or Failed (exit 1), or
    is deleted (exit 1)."""
    rows = _Rows(table, terminal.painter(sys.stdout))
    said = _Problems(args.output, rows.paint)
    seen: Key | None = None
    try:
        while True:
            try:
                document = statuses.read(args.name)
            except StatusUnreadable as err:  # said, and looked at again
                stderr_line(f"tfdeclare: warning: {err}")
                document = None if seen is None else {}
            if document is None:
                if seen is None:
                    raise UserError(f"no job named {args.name!r} has a status file to watch")
                stderr_line(f"tfdeclare: job {args.name} was deleted")
                return EXIT_ERROR
            if document:
                line = summary(document)
                if _key(line) != seen:
                    seen = _key(line)
                    if is_document(args.output):
                        stdout_write(_document_line(document, args.output))
                    else:
                        rows.show([line])
                stale = {k: v for k, v in statuses.unwritten().items() if k == args.name}
                said.show(standing([p for p in problems() if args.name in p.jobs], stale, statuses))
                try:
                    phase = Phase(str(document.get("phase")))
                except ValueError:
                    phase = Phase.PENDING
                if phase.terminal:
                    return EXIT_OK if phase is Phase.SUCCEEDED else EXIT_ERROR
            time.sleep(args.watch_interval)
    except KeyboardInterrupt:
        return EXIT_INTERRUPTED
