"""The status page the daemon serves at ``/`` (and the Mesos framework's ``webui_url``):
server-rendered HTML from ``templates/page.html`` through Jinja2 with autoescaping on, so
every value a spec, a task or a message brings is escaped. No script and no outside asset:
minimal inline CSS (a responsive layout, no horizontal scrolling at phone widths; file paths
break only after a ``/``).

Under the header, each reason the daemon is not ok (``alerts``: the lines of ``/healthz``'s
``reasons``, from the same list) and the last pass's other errors. Cards come problems first,
coloured by meaning (``page_look``). Each job's card shows its last error (``lastError``), its
phase, age, labels, the resources it asks for (per role and in all), its tasks (TensorBoard's
among them, counted like the others) with their ages, and the tail of one task's log (the
chief's, else worker 0's, else the first that started); `code` spans of its messages are
shown as code. The page reloads itself every ``REFRESH_DEFAULT`` seconds (``<meta
refresh>``); ``/?refresh=SECONDS`` changes that and ``/?refresh=0`` turns it off, remembered
by the browser in a cookie.

**Bounded.** The page shows the count of jobs by phase over every job, then the cards of
``PAGE_JOBS`` jobs from ``?jobsOffset=`` (default 0; links to the pages before and after),
each with at most ``CARD_TASKS`` tasks and a link to the JSON of the rest
(``/jobs/NAME?tasksOffset=``); its task counts are over every task (``status.summary``). So
the page of 10,000 jobs or of a 100,000-task job costs what a page of ``PAGE_JOBS`` small
ones does.

Where the backend reads a task's stdout and stderr apart (``base.log_streams``: Mesos, whose
one log has a running task's stdout alone), a card shows the last lines of each
(``streams_tail_text``, ``TAIL_BYTES`` read of each) and links to the stderr alone.

Also the bounds of the read-only log endpoint ``/jobs/<name>/logs?task=ROLE-INDEX&offset=N``
(``&stream=stdout|stderr``: one of the two alone, as it grows, where the backend reads them
apart): at most ``LOG_PAGE_BYTES`` from ``offset`` (default 0); the answer's
``X-Tfdeclare-Next-Offset`` header is where the next page starts.
"""

from __future__ import annotations

import calendar
import functools
import http.cookies
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import jinja2
import markupsafe

from tfdeclare import __version__
from tfdeclare.backends.base import STDERR_HEADER
from tfdeclare.core.enums import Role
from tfdeclare.core.plan.history import HistoryEntry
from tfdeclare.core.run import status
from tfdeclare.core.run.record import rfc3339
from tfdeclare.core.spec.model import JobSpec
from tfdeclare.core.spec.resources import Resources
from tfdeclare.daemon.alerts import MEANING, Alert
from tfdeclare.daemon.httpguard import BadRequest, number
from tfdeclare.daemon.page_look import (
    PROBLEM_FREE,
    card_order,
    condition_tone,
    inline_markdown,
    phase_tone,
    problem_rank,
)
from tfdeclare.daemon.webhooks import PhaseChange

LOG_PAGE_BYTES = 256 * 1024
REFRESH_DEFAULT = 10  # seconds; ?refresh=0 turns it off (remembered in a cookie)
REFRESH_MIN, REFRESH_MAX = 2, 3600
REFRESH_CHOICES = (5, 10, 30, 60)
REFRESH_COOKIE = "tfdeclare-refresh"
# Inline styles only; nothing else may load, run or be framed.
CONTENT_SECURITY_POLICY = (
    "default-src 'none'; style-src 'unsafe-inline'; base-uri 'none'; form-action 'none'; "
    "frame-ancestors 'none'"
)


PAGE_JOBS = 100  # job cards a page shows (``?jobsOffset=`` pages them)
CARD_TASKS = 50  # tasks a card lists (the rest: ``/jobs/NAME?tasksOffset=CARD_TASKS``)
TAIL_BYTES = 4096  # of a job's log shown on its card
TAIL_LINES = 8


@dataclass(frozen=True, slots=True)
class LogTail:
    """The end of one task's log, for a job's card."""

    task: str  # ROLE:INDEX
    text: str  # its last lines, decoded
    href: str  # the whole log
    stderr_href: str | None = None  # its stderr alone, where the backend reads it apart


def details(spec: JobSpec) -> dict[str, Any]:
    """What a card shows of a job's spec: its labels and what it asks for."""
    rows = [(r.role.value, r.count, r.resources) for r in spec.replicas]
    if spec.tensorboard is not None:
        rows.append((Role.TENSORBOARD.value, 1, spec.tensorboard.resources))
    total = Resources(0.0, 0, 0)
    for _, count, each in rows:
        total = total + each.scaled(count)
    return {
        "labels": [{"name": k, "value": v} for k, v in spec.labels],
        "resources": [{"role": role, "count": count, "each": _resources(each)} for role, count, each in rows],
        "total": _resources(total),
        "tasks": sum(count for _, count, _ in rows),
    }


def _resources(resources: Resources) -> str:
    mem = resources.mem_mib
    memory = f"{mem // 1024} GiB" if mem >= 1024 and mem % 1024 == 0 else f"{mem} MiB"
    text = f"{resources.cpus:g} CPU, {memory}"
    return f"{text}, {resources.gpus} GPU" if resources.gpus else text


def tail_text(data: bytes) -> str:
    """The last ``TAIL_LINES`` lines of the bytes read from a log's end (a partial first line
    is dropped when there are more)."""
    lines = data.decode("utf-8", "replace").splitlines()
    if len(data) >= TAIL_BYTES and len(lines) > 1:
        lines = lines[1:]  # it started mid-line
    return "\n".join(lines[-TAIL_LINES:])


def streams_tail_text(stdout: bytes, stderr: bytes) -> str:
    """The end of a task whose stdout and stderr are read apart (``base.log_streams``: a
    running Mesos task's stderr, where TensorFlow logs, is not in its one log yet): the last
    lines of each (``tail_text``), stderr's after the header ``tfdeclare logs`` prints."""
    out, err = tail_text(stdout), tail_text(stderr)
    if not err:
        return out
    header = STDERR_HEADER.decode()  # a blank line before it, as after stdout's last newline
    return out + "\n" + header + err if out else header.lstrip("\n") + err


def age(then: str | None, now: float) -> str:
    """How long ago an RFC 3339 time (as status files write them) was: "5 s", "3 min", "2 h
    10 min", "4 d 3 h"; empty when unknown."""
    if not then:
        return ""
    try:
        seconds = max(0, int(now - calendar.timegm(time.strptime(then, "%Y-%m-%dT%H:%M:%SZ"))))
    except ValueError:
        return ""
    if seconds < 60:
        return f"{seconds} s"
    if seconds < 3600:
        return f"{seconds // 60} min"
    if seconds < 86400:
        hours, minutes = divmod(seconds // 60, 60)
        return f"{hours} h {minutes} min" if minutes else f"{hours} h"
    days, hours = divmod(seconds // 3600, 24)
    return f"{days} d {hours} h" if hours else f"{days} d"


def path_breaks(value: object) -> markupsafe.Markup:
    """A file path, escaped, as one unbreakable box per ``/``-ended segment (``span.seg``,
    an inline-block): a line wraps only after a ``/``, unless one segment alone is wider
    than the line."""
    text = "" if value is None else str(value)
    segments = [part + "/" for part in text.split("/")]
    segments[-1] = segments[-1][:-1]
    template = markupsafe.Markup('<span class="seg">{}</span>')
    return markupsafe.Markup("").join(template.format(part) for part in segments if part)


@functools.cache
def _environment() -> jinja2.Environment:
    environment = jinja2.Environment(
        loader=jinja2.PackageLoader("tfdeclare.daemon", "templates"),
        autoescape=True,
        # A status file written by an earlier release may lack a newer field: shown empty.
        undefined=jinja2.ChainableUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
    )
    environment.filters["path"] = path_breaks
    environment.filters["md"] = inline_markdown  # escapes, then adds <code> for `code` spans
    environment.globals.update(phase_tone=phase_tone, condition_tone=condition_tone)
    return environment


def render(
    jobs: Sequence[Mapping[str, Any]],
    events: Iterable[PhaseChange],
    health: Mapping[str, Any],
    refresh: int,
    *,
    now: float | None = None,
    specs: Mapping[str, Mapping[str, Any]] | None = None,
    tails: Mapping[str, LogTail] | None = None,
    jobs_offset: int = 0,
    history: tuple[Sequence[HistoryEntry], str | None] = ((), None),
    alerts: Sequence[Alert] = (),
) -> str:
    """The page: the jobs by phase, the cards of ``PAGE_JOBS`` of the jobs' status documents
    from ``jobs_offset``, each with what ``details`` says of its spec (by name, when known)
    and its log's tail, the recent phase changes, the daemon's health, the newest revisions
    acted on (``history``: entries newest first, and why the log cannot be written, if so);
    ``refresh``: seconds between reloads, 0 for none. ``alerts``: why the daemon is not ok
    (``service.alerts``, the lines of ``/healthz``'s ``reasons``), each shown with what it
    means; the last pass's other errors (``health["passErrors"]``) are listed after them."""
    now = time.time() if now is None else now
    phases: dict[str, int] = {}
    ordered = sorted(jobs, key=card_order)  # problems first (page_look), then by name
    for job in jobs:
        phases[job["phase"]] = phases.get(job["phase"], 0) + 1
    cards = []
    for job in ordered[jobs_offset : jobs_offset + PAGE_JOBS]:
        tasks = (job.get("tasks") or [])[:CARD_TASKS]
        counts = status.summary(job)
        cards.append(
            {
                "job": job,
                "spec": (specs or {}).get(job["name"]),
                "tail": (tails or {}).get(job["name"]),
                "age": age(job.get("startTime"), now),
                "running": counts["running"],
                "count": counts["tasks"],
                "problem": problem_rank(job) < PROBLEM_FREE,  # marked on its card
                "tasks": [{**t, "age": age(t.get("startTime"), now)} for t in tasks],
                "more": counts["tasks"] - len(tasks),
                "progress": status.progress_lines(job.get("progress"), now),
            }
        )
    names = {job["name"] for job in ordered[jobs_offset : jobs_offset + PAGE_JOBS]}
    before = max(0, jobs_offset - PAGE_JOBS) if jobs_offset else None
    after = jobs_offset + PAGE_JOBS if jobs_offset + PAGE_JOBS < len(jobs) else None
    return (
        _environment()
        .get_template("page.html")
        .render(
            version=__version__,
            jobs=jobs,
            cards=cards,
            first=jobs_offset + 1,
            last=jobs_offset + len(cards),
            before=before,
            after=after,
            card_tasks=CARD_TASKS,
            refresh_default=REFRESH_DEFAULT,
            phases=sorted(phases.items()),
            events=[
                {
                    "time": rfc3339(e.at),
                    "job": e.job,
                    "phase": e.phase.value,
                    "previous": e.previous,
                    "message": e.message,
                }
                for e in events
            ],
            history=[_history_row(entry) for entry in history[0]],
            history_error=history[1],
            health=health,
            alerts=[
                {
                    "reason": a.reason.value,
                    "text": a.text,
                    "meaning": MEANING[a.reason],
                    "job": a.job if a.job in names else None,  # linked to its card, when it has one
                }
                for a in alerts
            ],
            pass_errors=_other_errors(health.get("passErrors") or (), alerts),
            last_pass=rfc3339(health.get("lastPassAt")),
            last_pass_age=age(rfc3339(health.get("lastPassAt")), now),
            refresh=refresh,
            refresh_choices=REFRESH_CHOICES,
        )
    )


def _other_errors(errors: Iterable[Mapping[str, Any]], alerts: Sequence[Alert]) -> list[Mapping[str, Any]]:
    """The last pass's errors (``/healthz``'s ``passErrors``) that no alert says already."""
    said = {a.text for a in alerts}
    return [e for e in errors if f"{e.get('code')}: {e.get('detail')}" not in said]


def _history_row(entry: HistoryEntry) -> dict[str, Any]:
    return {
        "time": rfc3339(entry.at),
        "commit": entry.revision.commit if entry.revision else None,
        "what": entry.what,
        "outcome": entry.outcome.value,
        "outcome_text": entry.outcome_text,
        "jobs": ", ".join(f"{j.action.symbol} {j.name}" for j in entry.jobs if j.made),
        "summary": entry.summary,
    }


def refresh_from(query: Mapping[str, list[str]]) -> int | None:
    """``?refresh=N``: seconds between reloads, 0 (off) or 2 to 3600; None when not given.
    ``BadRequest`` (400) for anything else."""
    if "refresh" not in query:
        return None
    seconds = number(query, "refresh", REFRESH_DEFAULT, 0, REFRESH_MAX)
    if seconds == 1:
        raise BadRequest(f"refresh must be 0 (off) or from {REFRESH_MIN} to {REFRESH_MAX} seconds")
    return seconds


def refresh_from_cookie(header: str | None) -> int:
    """The choice a browser remembers (``REFRESH_COOKIE``); the default without a valid one."""
    cookie = http.cookies.SimpleCookie()
    try:
        cookie.load(header or "")
    except http.cookies.CookieError:
        return REFRESH_DEFAULT
    morsel = cookie.get(REFRESH_COOKIE)
    if morsel is None:
        return REFRESH_DEFAULT
    try:
        return refresh_from({"refresh": [morsel.value]}) or 0
    except BadRequest:
        return REFRESH_DEFAULT


def refresh_cookie(seconds: int) -> str:
    """The ``Set-Cookie`` value that remembers ``?refresh=`` for a year (this page only)."""
    return f"{REFRESH_COOKIE}={seconds}; Path=/; Max-Age=31536000; HttpOnly; SameSite=Strict"
