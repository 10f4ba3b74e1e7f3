"""The status branch when the remote refuses it (a protected branch: a real ``pre-receive``
hook in a real ``file://`` repository): the failure is shown in /healthz, /metrics, the page
and ``tfdeclare status``, tried again with back-off until the remote takes it, also after a
restart; a bad ``--status-branch`` name is refused at start."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from tests.conftest import cli
from tests.controller_world import job_text
from tests.test_daemon import Daemon, commit, cwd, git, job, repo, wait_until
from tfdeclare.daemon.sources import GitSettings, GitSource, SourceError, status_retry_s

pytestmark = pytest.mark.e2e

__all__ = ["cwd", "repo"]  # the fixtures of test_daemon

HOOK = """#!/bin/sh
echo tried >> "{log}"
while read old new ref; do
  case "$ref" in refs/heads/tfdeclare-status) echo "protected: $ref" >&2; exit 1;; esac
done
exit 0
"""


def protect(remote: Path, log: Path) -> Path:
    hook = remote / "hooks" / "pre-receive"
    hook.write_text(HOOK.format(log=log))
    hook.chmod(0o755)
    return hook


def remote_status(remote: Path) -> str:
    return git(remote, "branch", "--list", "tfdeclare-status")


def test_a_refused_status_branch_is_shown_and_pushed_once_the_remote_takes_it(
    cwd: Path, repo: tuple[Path, Path]
) -> None:
    remote, work = repo
    commit(work, "add s", {"s.yaml": job("s")})
    tries = cwd / "tries"
    hook = protect(remote, tries)
    args = ("--git", f"file://{remote}", "--path", "jobs", "--interval", "0.5", "--push-status")
    daemon = Daemon(cwd, *args)
    try:
        wait_until(lambda: (daemon.get("/healthz")[1].get("statusBranch") or {}).get("message"))
        code, health = daemon.get("/healthz")
        failure = health["statusBranch"]
        assert code == 503 and health["status"] == "degraded", health
        assert failure["branch"] == "tfdeclare-status" and "pre-receive hook declined" in failure["message"]
        assert any("status branch" in r for r in health["reasons"])
        assert re.search(r"^tfdeclare_write_failures 1", daemon.get("/metrics")[1], re.M)
        with __import__("urllib.request").request.urlopen(daemon.url, timeout=5) as page:
            assert "The status branch tfdeclare-status is not written or pushed: " in page.read().decode()
        shown = cli("status", cwd=cwd).stdout
        assert "Status branch tfdeclare-status: not written or pushed since" in shown, shown
        listed = json.loads(cli("status", "-o", "json", "--problems", cwd=cwd).stdout)
        assert "pre-receive hook declined" in listed["statusBranch"]["message"]
        wait_until(lambda: len(tries.read_text().splitlines()) >= 2)  # tried again, not once
        assert remote_status(remote) == ""
    finally:
        daemon.stop()
    # a restart: the local branch already holds the status, the remote does not: pushed then
    hook.unlink()
    daemon = Daemon(cwd, *args)
    try:
        wait_until(lambda: remote_status(remote) != "")
        wait_until(lambda: daemon.get("/healthz")[1].get("statusBranch", "absent") is None)
        assert daemon.get("/healthz")[0] == 200
        assert "Status branch" not in cli("status", cwd=cwd).stdout
    finally:
        daemon.stop()


def test_a_bad_status_branch_name_is_refused_at_start(cwd: Path, repo: tuple[Path, Path]) -> None:
    remote, work = repo
    commit(work, "add s", {"s.yaml": job("s")})
    for name in ("bad..name", "-x", "a b", "x.lock"):
        result = cli("daemon", "--git", f"file://{remote}", f"--status-branch={name}", "--port", "0", cwd=cwd)
        assert result.returncode == 1, result
        assert f"--status-branch {name!r}: not a valid branch name" in result.stderr, result.stderr
        assert "Traceback" not in result.stderr


def test_the_status_branch_backs_off_in_virtual_time(tmp_path: Path) -> None:
    """Each failed push waits longer before the next one (2, 4, 8, ... 300 s); in between a
    pass only says why; once the remote takes it, nothing more is pushed until it changes."""
    assert [status_retry_s(n) for n in (1, 2, 3, 4, 9, 50)] == [2.0, 4.0, 8.0, 16.0, 300.0, 300.0]
    remote, work = tmp_path / "remote.git", tmp_path / "work"
    git(tmp_path, "init", "-q", "--bare", "--initial-branch=main", str(remote))
    git(tmp_path, "clone", "-q", str(remote), str(work))
    (work / "jobs").mkdir()
    commit(work, "add s", {"s.yaml": job_text("s")})
    tries = tmp_path / "tries"
    hook = protect(remote, tries)
    now = [1000.0]
    source = GitSource(
        GitSettings(f"file://{remote}", push_status=True), tmp_path / "git", monotonic=lambda: now[0]
    )
    source.sync()
    status_dir = tmp_path / "status"
    status_dir.mkdir()
    (status_dir / "s.yaml").write_text("name: s\n")

    def attempts() -> int:
        return len(tries.read_text().splitlines()) if tries.exists() else 0

    for waited, tried in ((0.0, 1), (1.0, 1), (1.0, 2), (3.9, 2), (0.1, 3), (7.9, 3), (0.1, 4)):
        now[0] += waited
        with pytest.raises(
            SourceError, match=r"pushing branch tfdeclare-status: .*pre-receive hook declined"
        ):
            source.write_status(status_dir, None)
        assert attempts() == tried, (waited, tried)
    hook.unlink()
    now[0] += 16.0
    source.write_status(status_dir, None)
    assert source.status_error is None and remote_status(remote) != ""
    pushed = git(remote, "rev-parse", "tfdeclare-status")
    source.write_status(status_dir, None)  # unchanged: nothing to push
    (status_dir / "s.yaml").write_text("name: s\nphase: Running\n")
    source.write_status(status_dir, None)
    assert git(remote, "rev-parse", "tfdeclare-status") != pushed
