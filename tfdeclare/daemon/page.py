"""The status page the daemon serves at ``/`` (and the Mesos framework's ``webui_url``):
server-rendered HTML from ``templates/page.html`` through Jinja2 with autoescaping on, so
every value a spec, a task or a message brings is escaped. No script and no outside asset:
minimal inline CSS (a responsive layout, no horizontal scrolling at phone widths), an
optional ``<meta refresh>`` (``/?refresh=SECONDS``).

Also the bounds of the read-only log endpoint ``/jobs/<name>/logs?task=ROLE:INDEX&offset=N``:
at most ``LOG_PAGE_BYTES`` from ``offset`` (default 0); the answer's ``X-Tfdeclare-Next-Offset``
header is where the next page starts.
"""

from __future__ import annotations

import functools
import http.cookies
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import jinja2

from tfdeclare import __version__
from tfdeclare.core.run.record import rfc3339
from tfdeclare.daemon.httpguard import BadRequest, number
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


@functools.cache
def _environment() -> jinja2.Environment:
    return jinja2.Environment(
        loader=jinja2.PackageLoader("tfdeclare.daemon", "templates"),
        autoescape=True,
        # A status file written by an earlier release may lack a newer field: shown empty.
        undefined=jinja2.ChainableUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
    )


def render(
    jobs: Sequence[Mapping[str, Any]],
    events: Iterable[PhaseChange],
    health: Mapping[str, Any],
    refresh: int | None,
) -> str:
    """The page: every job's status document, the recent phase changes, the daemon's health."""
    phases: dict[str, int] = {}
    for job in jobs:
        phases[job["phase"]] = phases.get(job["phase"], 0) + 1
    return (
        _environment()
        .get_template("page.html")
        .render(
            version=__version__,
            jobs=jobs,
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
            health=health,
            last_pass=rfc3339(health.get("lastPassAt")),
            refresh=refresh,
            refresh_choices=REFRESH_CHOICES,
        )
    )


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
