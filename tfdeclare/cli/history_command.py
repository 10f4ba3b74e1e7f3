"""``tfdeclare history [JOB] [-o text|json|yaml] [--limit N]``: the revisions the daemon (and
``apply``) acted on and their outcome, newest first, from ``<state-dir>/history.jsonl``
(``shell/history.py``). Read-only: it never takes the lock and works with or without a
daemon running. With a JOB, only the entries that touched it, each with what it did to the
job and the attempt that started. Rollback stays a ``git revert``, and the text says so.
"""

from __future__ import annotations

import argparse
import errno
import sys

from tfdeclare.cli import terminal
from tfdeclare.cli.common import EXIT_OK, UserError, check_state, settings_from, stderr_line, stdout_write
from tfdeclare.cli.output import document_text, is_document
from tfdeclare.core.plan.history import ROLLBACK, HistoryEntry, JobEntry, Outcome, newest_first
from tfdeclare.core.tone import Painter, Tone
from tfdeclare.shell import history

SHOWN_PROBLEMS = 3  # per entry in the text table (all of the entry's in -o json)

_TONES = {
    Outcome.APPLIED: Tone.GOOD,
    Outcome.NOTHING_TO_DO: Tone.MUTED,
    Outcome.REFUSED: Tone.BAD,
    Outcome.PARTLY_APPLIED: Tone.WARN,
    Outcome.NOT_APPLIED: Tone.BAD,
}


def cmd_history(args: argparse.Namespace) -> int:
    settings = settings_from(args)
    check_state(settings)  # read without the lock: only a folder of this user's alone
    path = history.log_path(settings.state_dir)
    try:
        parsed = history.read(settings.state_dir)
    except OSError as err:
        why = (
            "it is a symbolic link, which is not followed"
            if err.errno == errno.ELOOP
            else err.strerror or err
        )
        raise UserError(f"cannot read the history {path}: {why}") from err
    entries = newest_first(parsed.entries, args.job, args.limit)
    if is_document(args.output):  # -o json or yaml: the same documents
        stdout_write(document_text([_document(e, args.job) for e in entries], args.output))
    elif entries:
        stdout_write(_table(entries, args.job, terminal.painter(sys.stdout)))
        commit = next((e.revision.commit for e in entries if e.rollback and e.revision), None)
        if commit is not None:
            stderr_line(f"({ROLLBACK.format(commit=commit[:12])})")
    elif args.job:
        stdout_write(f"No history of job {args.job} yet (the daemon records it).\n")
    else:
        stdout_write("No history yet (the daemon records it).\n")
    if parsed.skipped:
        stderr_line(f"tfdeclare: warning: skipped {parsed.skipped} unreadable line(s) of {path}")
    return EXIT_OK


def _document(entry: HistoryEntry, job: str | None) -> dict[str, object]:
    document = entry.to_json()
    del document["digest"]  # the recorder's, not the reader's
    if job is not None:
        touched = entry.job(job)
        document["job"] = touched.to_json() if touched else None
    return document


def _jobs_text(entry: HistoryEntry, job: str | None) -> str:
    if job is not None:
        touched = entry.job(job)
        return _job_text(touched) if touched else ""
    changed = [j for j in entry.jobs if j.made]
    kept = len(entry.jobs) - len(changed) + entry.jobs_omitted
    text = ", ".join(f"{j.action.symbol} {j.name}" for j in changed[:5])
    if len(changed) > 5:
        text += f" and {len(changed) - 5} more"
    if kept:
        text += ("; " if text else "") + f"{kept} kept as applied"
    return text


def _job_text(job: JobEntry) -> str:
    if job.made:
        attempt = f" (attempt {job.attempt})" if job.attempt is not None else ""
        return f"{job.action.symbol} {job.action.value}{attempt}: {job.message}"
    return f"kept as applied ({job.reason}): {job.message}"


def _table(entries: list[HistoryEntry], job: str | None, paint: Painter) -> str:
    rows = [("TIME", "REVISION", "OUTCOME", "JOB" if job else "JOBS")]
    rows += [(e.to_json()["time"], _clip(e.what, 48), e.outcome_text, _jobs_text(e, job)) for e in entries]
    widths = [max(len(r[i]) for r in rows) for i in range(3)]
    lines = [
        paint(
            "  ".join(c.ljust(w) for c, w in zip(rows[0], widths, strict=False)) + "  " + rows[0][3],
            Tone.STRONG,
        )
    ]
    for entry, row in zip(entries, rows[1:], strict=True):
        outcome = paint(row[2], _TONES[entry.outcome]) + " " * (widths[2] - len(row[2]))
        lines.append(f"{row[0].ljust(widths[0])}  {row[1].ljust(widths[1])}  {outcome}  {row[3]}")
        for problem in entry.diagnostics[:SHOWN_PROBLEMS]:
            lines.append("    " + paint(problem, Tone.BAD))
        more = entry.problems - min(len(entry.diagnostics), SHOWN_PROBLEMS)
        if more > 0:
            lines.append(paint(f"    and {more} more (-o json)", Tone.MUTED))
    return "".join(line.rstrip() + "\n" for line in lines)


def _clip(text: str, width: int) -> str:
    return text if len(text) <= width else text[: width - 3] + "..."
