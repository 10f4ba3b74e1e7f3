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
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable
from typing import Any

from tfdeclare.cli import terminal
from tfdeclare.cli.common import EXIT_ERROR, EXIT_INTERRUPTED, EXIT_OK, UserError, stderr_line, stdout_write
from tfdeclare.cli.output import is_document, yaml_text
from tfdeclare.core.enums import Phase
from tfdeclare.core.run.status import summary
from tfdeclare.core.tone import Painter
from tfdeclare.core.visible import json_line
from tfdeclare.shell.statuswriter import StatusUnreadable, StatusWriter

Key = tuple[object, ...]


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
) -> int:
    """Every job's row as it changes, until interrupted (``chosen``: the names ``-l`` picks
    now, None for every job)."""
    rows = _Rows(table, terminal.painter(sys.stdout))
    seen: dict[str, Key] = {}
    first = True
    try:
        while True:
            names = chosen()
            now = {s["name"]: s for s in statuses.summaries() if names is None or s["name"] in names}
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
            seen = {name: _key(job) for name, job in now.items()}
            first = False
            time.sleep(args.watch_interval)
    except KeyboardInterrupt:
        return EXIT_INTERRUPTED


def watch_one(
    args: argparse.Namespace, statuses: StatusWriter, table: Callable[[list[dict[str, Any]], Painter], str]
) -> int:
    """One job's row (``-o json``: its status document) as it changes, until it has Succeeded
    (exit 0) or Failed (exit 1), or is deleted (exit 1)."""
    rows = _Rows(table, terminal.painter(sys.stdout))
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
                try:
                    phase = Phase(str(document.get("phase")))
                except ValueError:
                    phase = Phase.PENDING
                if phase.terminal:
                    return EXIT_OK if phase is Phase.SUCCEEDED else EXIT_ERROR
            time.sleep(args.watch_interval)
    except KeyboardInterrupt:
        return EXIT_INTERRUPTED
