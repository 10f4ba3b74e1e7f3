"""Git-host webhooks end to end: a real ``tfdeclare daemon`` on a real git repository
(``file://``) with ``daemon.webhookSecretFile``, fetching only when told (an interval of an
hour): a signed push to the watched branch makes it apply the new commit; a wrong or missing
signature, a push elsewhere and a ping do nothing; the bearer token still syncs."""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import cli, kill_leftovers
from tests.git_host_deliveries import github_ping, github_push, gitlab_push
from tests.test_daemon import CONFIG, Daemon, commit, git, job, status, wait_until

pytestmark = pytest.mark.e2e  # the daemon as a process, a real job, a git repository

SECRET = "0f3c9a7e5b1d2468ace13579bdf02468"
TOKEN = "t0ken-for-the-tests-0123456789"


@pytest.fixture
def cwd(tmp_path: Path) -> Iterator[Path]:
    (tmp_path / "hook-secret").write_text(SECRET + "\n")
    (tmp_path / "token").write_text(TOKEN + "\n")
    daemon = "daemon: {webhookSecretFile: hook-secret, tokenFile: token}\n"
    (tmp_path / "tfdeclare.yaml").write_text(CONFIG + daemon)
    yield tmp_path
    deleted = cli("delete", "--all", cwd=tmp_path)
    assert kill_leftovers(tmp_path) == [], f"a task outlived its job; delete --all said: {deleted.stderr}"


def deliver(
    daemon: Daemon, headers: dict[str, str], body: bytes = b"", method: str = "POST"
) -> tuple[int, Any]:
    request = urllib.request.Request(daemon.url + "/sync", data=body or None, headers=headers, method=method)
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as err:
        return err.code, json.loads(err.read())


def revision(cwd: Path) -> str | None:
    return (status(cwd, "w") or {}).get("revision")


def test_a_signed_push_applies_the_commit_and_a_wrong_signature_does_nothing(cwd: Path) -> None:
    remote = cwd / "remote.git"
    git(cwd, "init", "--bare", "--initial-branch=main", str(remote))
    work = cwd / "work"
    git(cwd, "clone", str(remote), str(work))
    (work / "jobs").mkdir()
    spec = job("w").replace("env: {OUT: w-out}", f"env: {{OUT: {cwd / 'w-out'}}}")
    (cwd / "w-out").mkdir()
    first = commit(work, "add w", {"w.yaml": spec})
    daemon = Daemon(
        cwd, "--git", f"file://{remote}", "--branch", "main", "--path", "jobs", "--interval", "3600"
    )
    try:
        wait_until(lambda: revision(cwd) == first)
        second = commit(work, "w may restart more", {"w.yaml": spec + "  backoffLimit: 5\n"})

        code, answer = deliver(
            daemon, *github_push("refs/heads/main", second).signed("a-wrong-secret-0123456789")
        )
        assert (code, answer["error"]) == (401, "wrong X-Hub-Signature-256")
        assert deliver(daemon, *github_push("refs/heads/main", second).unsigned())[0] == 401
        assert deliver(daemon, {"Content-Type": "application/json"}, b"{}")[0] == 401  # no token either
        code, answer = deliver(daemon, *github_push("refs/heads/feature", second).signed(SECRET))
        assert (
            code == 202 and answer["ignored"] == "a push to refs/heads/feature, not the watched branch main"
        )
        code, answer = deliver(daemon, *github_ping().signed(SECRET))
        assert (code, answer["ping"]) == (200, "ok")
        code, answer = deliver(daemon, {}, method="GET")
        assert code == 405 and answer["error"] == "/sync answers POST, not GET"
        time.sleep(3)  # a sync would have fetched and applied the second commit by now
        assert revision(cwd) == first, "nothing was fetched"

        code, answer = deliver(daemon, *github_push("refs/heads/main", second).signed(SECRET))
        assert (code, answer["sync"], answer["host"], answer["event"]) == (202, "requested", "github", "push")
        wait_until(lambda: revision(cwd) == second, timeout=20)

        third = commit(work, "w may restart even more", {"w.yaml": spec + "  backoffLimit: 6\n"})
        code, answer = deliver(daemon, *gitlab_push("refs/heads/main", third).signed(SECRET))
        assert code == 202 and answer["host"] == "gitlab"
        wait_until(lambda: revision(cwd) == third, timeout=20)

        fourth = commit(work, "w may restart once", {"w.yaml": spec + "  backoffLimit: 1\n"})
        assert deliver(daemon, {"Authorization": f"Bearer {TOKEN}"})[0] == 202  # a script, no body
        wait_until(lambda: revision(cwd) == fourth, timeout=20)
    finally:
        daemon.stop()
    log = daemon.text()
    assert "wrong X-Hub-Signature-256" in log and SECRET not in log and TOKEN not in log
