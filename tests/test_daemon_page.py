"""The status page and the log endpoint in-process over HTTP (``tfdeclare/daemon/page.py``,
``server.py``): the real server, controller and status files, the fake backend. The browser
test (``test_status_page.py``) checks layout; this one checks escaping, headers and the
log endpoint's answers."""

from __future__ import annotations

import html
import json
import re
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest

from tests.controller_world import World, job_text
from tfdeclare.backends.base import BackendError, LogChunk
from tfdeclare.core.enums import Phase, Role
from tfdeclare.core.errors import ErrorCode, RuntimeProblem
from tfdeclare.core.plan.problems import BranchFailure
from tfdeclare.daemon import page
from tfdeclare.daemon.alerts import HealthReason
from tfdeclare.daemon.server import DaemonServer
from tfdeclare.daemon.service import Daemon, DaemonOptions, alerts
from tfdeclare.daemon.sources import FolderSource
from tfdeclare.daemon.webhooks import PhaseChange


class Served:
    def __init__(self, world: World) -> None:
        self.world = world
        source = FolderSource(world.specs, [world.root / "state", world.status_dir])
        self.daemon = Daemon(source, world.controller, world.files, world.status_dir, DaemonOptions())
        self.server = DaemonServer("127.0.0.1", 0, self.daemon)
        self.server.start()
        host, port = self.server.address
        self.url = f"http://{host}:{port}"

    def get(self, path: str, headers: dict[str, str] | None = None) -> tuple[int, dict[str, str], bytes]:
        try:
            asked = urllib.request.Request(self.url + path, headers=headers or {})
            with urllib.request.urlopen(asked, timeout=5) as response:
                return response.status, dict(response.headers), response.read()
        except urllib.error.HTTPError as err:
            return err.code, dict(err.headers), err.read()

    def close(self) -> None:
        self.server.close()
        self.daemon.notifier.close()
        self.daemon.source.close()


@pytest.fixture
def served(tmp_path: Path) -> Iterator[Served]:
    world = World(tmp_path)
    world.write("a", job_text("a"))
    world.apply()
    world.settle()
    made = Served(world)
    yield made
    made.close()


def test_the_page_escapes_what_jobs_and_events_bring(served: Served) -> None:
    event = PhaseChange("a", Phase.FAILED, Phase.RUNNING, 1796280000.0, None, 1, "<script>alert(1)</script>")
    served.daemon.shown = replace(served.daemon.shown, events=(event,))  # as a pass publishes it
    code, headers, body = served.get("/")
    text = body.decode()
    assert code == 200 and headers["Content-Type"] == "text/html; charset=utf-8"
    assert headers["Content-Security-Policy"] == page.CONTENT_SECURITY_POLICY
    assert "<script>" not in text and "&lt;script&gt;alert(1)&lt;/script&gt;" in text
    assert 'id="job-a"' in text and 'href="/jobs/a/logs?task=worker-1"' in text
    assert '<meta name="viewport"' in text


def test_a_status_file_of_an_earlier_release_still_shows(served: Served) -> None:
    path = served.world.statuses.path("a")
    path.write_text(
        "\n".join(line for line in path.read_text().splitlines() if not line.startswith("tensorboard:"))
    )
    code, _, body = served.get("/")
    assert code == 200 and 'id="job-a"' in body.decode()


def refresh_of(text: str) -> str | None:
    found = re.search(r'<meta http-equiv="refresh" content="(\d+)">', text)
    return found.group(1) if found else None


def test_refresh_is_on_by_default_and_an_opt_out_is_remembered(served: Served) -> None:
    assert refresh_of(served.get("/")[2].decode()) == str(page.REFRESH_DEFAULT)
    code, headers, body = served.get("/?refresh=0")
    assert code == 200 and refresh_of(body.decode()) is None
    cookie = headers["Set-Cookie"]
    assert (
        cookie.startswith(f"{page.REFRESH_COOKIE}=0;")
        and "HttpOnly" in cookie
        and "SameSite=Strict" in cookie
    )
    remembered = {"Cookie": cookie.split(";", 1)[0]}
    code, headers, body = served.get("/", remembered)  # a later visit without ?refresh
    assert refresh_of(body.decode()) is None and "Set-Cookie" not in headers
    assert refresh_of(served.get("/?refresh=30", remembered)[2].decode()) == "30"
    for garbage in ("tfdeclare-refresh=1", "tfdeclare-refresh=abc", 'tfdeclare-refresh="', "=;=;"):
        assert refresh_of(served.get("/", {"Cookie": garbage})[2].decode()) == str(page.REFRESH_DEFAULT)


def test_the_log_endpoint_pages_and_refuses_what_is_not_there(served: Served) -> None:
    task_id = served.world.task("a", Role.WORKER, 1).task_id
    served.world.backend.write_log(task_id, b"x" * page.LOG_PAGE_BYTES + b"tail\n")
    code, headers, body = served.get("/jobs/a/logs?task=worker:1")
    assert code == 200 and body == b"x" * page.LOG_PAGE_BYTES
    assert (
        headers["Content-Type"] == "text/plain; charset=utf-8"
        and headers["X-Content-Type-Options"] == "nosniff"
    )
    assert headers["X-Tfdeclare-Next-Offset"] == str(page.LOG_PAGE_BYTES)
    code, headers, body = served.get(f"/jobs/a/logs?task=worker:1&offset={page.LOG_PAGE_BYTES}")
    assert (code, body) == (200, b"tail\n")
    assert served.get("/jobs/b/logs")[0] == 404
    assert served.get("/jobs/..%2F..%2Fetc%2Fpasswd/logs")[0] == 404
    assert served.get("/jobs/a/logs?task=worker:7")[0] == 404
    assert served.get("/jobs/a/logs?offset=-1")[0] == 400
    code, _, body = served.get("/jobs/a/logs?task=worker:1&stream=stderr")  # one log, both streams in it
    assert code == 400 and b"holds stdout and stderr as written" in body


@pytest.mark.parametrize(
    ("stdout", "stderr", "shown"),
    [
        (b"a\nb\n", b"", "a\nb"),
        (b"", b"warn\n", "--- stderr ---\nwarn"),
        (b"a\n", b"warn\nlast", "a\n\n--- stderr ---\nwarn\nlast"),
        (b"", b"", ""),
        (
            b"x" * page.TAIL_BYTES + b"\n" + b"o\n" * 20,
            b"e\n" * 20,
            "\n".join(["o"] * 8 + ["", "--- stderr ---"] + ["e"] * 8),
        ),
    ],
)
def test_a_card_of_two_streams_shows_the_end_of_each(stdout: bytes, stderr: bytes, shown: str) -> None:
    assert page.streams_tail_text(stdout, stderr) == shown


def test_each_card_shows_the_end_of_a_log_and_a_log_that_fails_costs_only_its_tail(served: Served) -> None:
    task_id = served.world.task("a", Role.WORKER, 0).task_id
    served.world.backend.write_log(task_id, b"".join(b"line %d\n" % i for i in range(5000)))
    text = served.get("/")[2].decode()
    tail = re.search(r'<div class="tail">.*?<pre>(.*?)</pre>', text, re.S)
    assert tail is not None and tail.group(1).splitlines() == [f"line {i}" for i in range(4992, 5000)]
    assert 'href="/jobs/a/logs?task=worker-0">whole log' in text and "stream=" not in text

    def broken(*args: object, **kwargs: object) -> LogChunk:
        raise BackendError("the agent is away")

    served.world.backend.read_log = broken  # type: ignore[method-assign]
    code, _, body = served.get("/")
    assert code == 200 and 'id="job-a"' in body.decode() and 'class="tail"' not in body.decode()


def test_every_reason_healthz_gives_is_on_the_page_and_a_card_shows_its_last_error(served: Served) -> None:
    """The page's alerts are /healthz's reasons (``service.alerts``): each kind, each line."""

    def refusing(*args: object, **kwargs: object) -> None:
        raise BackendError("the cluster refused it")

    served.world.backend.launch = refusing  # type: ignore[method-assign]
    served.world.write("b", job_text("b"))
    served.daemon._pass()  # b is applied; its launch fails: its lastError
    (b,) = [d for d in json.loads(served.get("/jobs")[2]) if d["name"] == "b"]
    assert b["lastError"]["detail"] == "the cluster refused it", b
    served.daemon.shown = replace(
        served.daemon.shown,
        last_pass_at=time.time() - 3600,  # overdue
        source_error="the folder specs cannot be read (permission denied)",
        folder_problems={
            "state": "/s is on a read-only file system",
            "status": "/t: no space left on its disk",
        },
        write_failures={"a": "/t/a.yaml (No space left on device)"},
        pass_write_error="/s/jobs.db (No space left on device)",
        pass_errors=(
            RuntimeProblem(ErrorCode.MASTER_UNREACHABLE, "not subscribed to http://10.0.0.9:5050: HTTP 503"),
            RuntimeProblem(ErrorCode.LAUNCH_FAILED, "<b>no room</b> on the agent", "b"),
        ),
        not_started={"c": "not started: it exists under state folder /elsewhere/.tfdeclare"},
        unreachable_since=time.time() - 3600,
        source_read=False,  # git mode: the first fetch not applied yet
        fetching_since=time.time() - 5,  # an unreachable master stood past the bound
        status_branch=BranchFailure("tfdeclare-status", "push refused (pre-receive hook declined)", 0.0),
    )
    given = alerts(served.daemon.shown, True, served.daemon.clock())
    assert {a.reason for a in given} == set(HealthReason), "a reason kind this test does not make"
    code, health = served.get("/healthz")[0], json.loads(served.get("/healthz")[2])
    assert code == 503 and health["status"] == "degraded"
    assert health["reasons"] == [a.text for a in given]
    body = served.get("/")[2].decode()
    text = html.unescape(body)
    for reason in HealthReason:
        assert f'data-reason="{reason.value}"' in body, reason
    for line in health["reasons"]:
        assert line[:1].upper() + line[1:] in text, line
    assert "<b>no room</b>" not in body and "LaunchFailed" in text and "<b>no room</b> on the agent" in text
    card = re.search(r'<section class="job[^"]*" id="job-b">.*?</section>', body, re.S)
    assert card is not None and "last error: BackendFailed (retried each pass" in card.group(0), body
    assert "the cluster refused it" in card.group(0)
