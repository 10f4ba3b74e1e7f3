"""The daemon in git mode against git over HTTP (``git http-backend`` behind Basic
authentication, tests/git_http.py): the real CLI as a process, real task processes. A URL's
credentials are shown nowhere."""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import time
import urllib.request
import uuid
from pathlib import Path

import pytest

from tests.components import missing
from tests.conftest import cli
from tests.git_http import GitHttpServer
from tests.test_daemon import Daemon, commit, cwd, git, job, repo, status, wait_until

pytestmark = pytest.mark.e2e  # the daemon as a process, real jobs, a git host

__all__ = ["cwd", "repo"]  # the fixtures of test_daemon


def served_repo(tmp_path: Path) -> tuple[Path, Path]:
    """A bare repository ``served/x.git`` and a clone of it to commit in."""
    served = tmp_path / "served"
    served.mkdir()
    git(tmp_path, "init", "-q", "--bare", "--initial-branch=main", str(served / "x.git"))
    work = tmp_path / "work"
    git(tmp_path, "clone", "-q", str(served / "x.git"), str(work))
    (work / "jobs").mkdir()
    return served, work


def read(url: str) -> str:
    try:
        with urllib.request.urlopen(url, timeout=5) as response:
            return str(response.read().decode())
    except urllib.error.HTTPError as err:
        return str(err.read().decode())


def test_credentials_in_the_git_url_are_shown_nowhere(cwd: Path, tmp_path: Path) -> None:
    secret = f"TOKEN-{uuid.uuid4().hex}"
    served, work = served_repo(tmp_path)
    outputs = cwd / "c-out"
    outputs.mkdir()
    commit(work, "add c", {"c.yaml": job("c").replace("env: {OUT: c-out}", f"env: {{OUT: {outputs}}}")})
    server = GitHttpServer(served, "alice", secret)
    url = server.url("x.git")
    shown_url = url.replace(f"alice:{secret}@", "")
    daemon = Daemon(cwd, "--git", url, "--path", "jobs", "--interval", "0.5", "--push-status")
    surfaces: dict[str, str] = {}
    try:
        wait_until(lambda: (status(cwd, "c") or {}).get("phase") == "Running", timeout=60)
        wait_until(lambda: "tfdeclare-status" in git(served / "x.git", "branch", "--list"))
        server.close()  # the host goes away: the fetch fails, its error is shown everywhere
        wait_until(lambda: daemon.get("/healthz")[1]["sourceError"] is not None)
        wait_until(lambda: daemon.get("/jobs?problems=true")[1]["problems"] != [])
        for path in ("/healthz", "/", "/jobs", "/jobs?problems=true", "/metrics", "/jobs/c"):
            surfaces[path] = read(daemon.url + path)
        surfaces["lock file"] = (cwd / ".tfdeclare" / "lock").read_text()
        surfaces["another command"] = cli("apply", "specs", cwd=cwd).stderr
        surfaces["history"] = cli("history", "-o", "json", cwd=cwd).stdout
        surfaces["status"] = cli("status", "-o", "json", cwd=cwd).stdout
        surfaces["status text"] = cli("status", cwd=cwd).stdout
        surfaces["status file"] = (cwd / "status" / "c.yaml").read_text()
        surfaces["problems file"] = (cwd / ".tfdeclare" / "problems.json").read_text()
    finally:
        daemon.stop()
        server.close()
    surfaces["log"] = daemon.text()
    surfaces["status branch"] = git(served / "x.git", "show", "tfdeclare-status:status/c.yaml")
    leaks = {name: re.findall(rf".{{0,80}}{secret}.{{0,20}}", text) for name, text in surfaces.items()}
    found = {name: texts for name, texts in leaks.items() if texts}
    assert not found, json.dumps(found, indent=1)
    assert "a tfdeclare daemon" in surfaces["another command"]
    assert f"git {shown_url} branch main path jobs" in surfaces["another command"]
    assert f"listening on http://127.0.0.1:{daemon.url.rsplit(':', 1)[1].rstrip('/')}" in surfaces["log"]
    assert json.loads(surfaces["/healthz"])["source"] == f"git {shown_url} branch main path jobs"
    assert shown_url in json.loads(surfaces["/healthz"])["sourceError"], surfaces["/healthz"]


def git_children(pid: int) -> list[str]:
    """The commands of ``pid``'s child processes that run git."""
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                stat = Path(f"/proc/{entry}/stat").read_text()
                cmdline = Path(f"/proc/{entry}/cmdline").read_bytes().split(b"\0")
            except OSError:
                continue
            if int(stat.rsplit(")", 1)[1].split()[1]) == pid and cmdline[0].endswith(b"git"):
                found.append(b" ".join(cmdline).decode())
    return found


def test_many_syncs_leave_no_git_process_nor_descriptor_behind(cwd: Path, repo: tuple[Path, Path]) -> None:
    remote, work = repo
    commit(work, "add c", {"c.yaml": job("c")})
    daemon = Daemon(
        cwd,
        "--git",
        f"file://{remote}",
        "--path",
        "jobs",
        "--interval",
        "0.1",
        "--push-status",
        "--allow-empty",
    )
    try:
        wait_until(lambda: daemon.passes() >= 2)
        first = daemon.passes()
        fds = len(os.listdir(f"/proc/{daemon.proc.pid}/fd"))
        samples = []
        while daemon.passes() < first + 60:  # each pass fetches and commits the status (2 syncs)
            samples.append(
                (len(git_children(daemon.proc.pid)), len(os.listdir(f"/proc/{daemon.proc.pid}/fd")))
            )
            time.sleep(0.2)
            assert daemon.proc.poll() is None, daemon.text()[-3000:]
        samples.append((len(git_children(daemon.proc.pid)), len(os.listdir(f"/proc/{daemon.proc.pid}/fd"))))
    finally:
        assert daemon.stop() == 0
    assert max(children for children, _ in samples) <= 2, samples  # one command at a time (and a fetch)
    assert max(count for _, count in samples) <= fds + 12, (fds, samples)
    assert not list((cwd / ".tfdeclare" / "git").glob("corrupt-*"))
    assert "unusable" not in daemon.text()


def processes_naming(text: str) -> list[str]:
    """The command lines of live processes that contain ``text`` (a port: git's helpers)."""
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit() and int(entry) != os.getpid():
            try:
                cmdline = Path(f"/proc/{entry}/cmdline").read_bytes().replace(b"\0", b" ").decode()
                state = Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()[0]
            except OSError:
                continue
            if text in cmdline and state != "Z":
                found.append(cmdline)
    return found


def test_a_host_that_hangs_holds_up_no_pass_and_no_stop(cwd: Path, tmp_path: Path) -> None:
    """The fetch runs beside the passes: a task that fails is restarted on time while a fetch
    hangs; the fetch times out after daemon.gitTimeoutSeconds, saying so with the URL (no
    credentials); SIGTERM stops the daemon at once, and nothing of git outlives it."""
    (cwd / "tfdeclare.yaml").write_text(
        (cwd / "tfdeclare.yaml").read_text() + "daemon: {gitTimeoutSeconds: 4}\n"
    )
    secret = f"TOKEN-{uuid.uuid4().hex}"
    served, work = served_repo(tmp_path)
    failing = job("f", "exit=1", extra="  backoffLimit: 1000\n")
    commit(work, "add f", {"f.yaml": failing})
    server = GitHttpServer(served, "alice", secret)
    shown_url = server.url("x.git").replace(f"alice:{secret}@", "")
    daemon = Daemon(cwd, "--git", server.url("x.git"), "--path", "jobs", "--interval", "0.5")
    try:
        wait_until(lambda: (status(cwd, "f") or {}).get("restarts", 0) >= 1, timeout=60)
        server.hang.set()  # from now on every fetch hangs
        wait_until(lambda: daemon.get("/healthz")[1]["fetchingSince"] is not None)
        restarts = status(cwd, "f")["restarts"]  # type: ignore[index]
        # the passes go on while the fetch hangs: the failed task is restarted, again and again
        wait_until(lambda: (status(cwd, "f") or {}).get("restarts", 0) >= restarts + 2, timeout=10)
        assert daemon.get("/healthz")[1]["sourceError"] is None, "the fetch still runs"
        wait_until(lambda: daemon.get("/healthz")[1]["sourceError"] is not None, timeout=30)
        code, health = daemon.get("/healthz")
        assert code == 503 and health["sourceError"] == f"git fetch {shown_url}: timed out after 4 s", health
        problems = daemon.get("/jobs?problems=true")[1]["problems"]
        assert [p["kind"] for p in problems] == ["fetch-failed"], problems
        assert problems[0]["message"].endswith(f": error: {health['sourceError']}"), problems
        wait_until(lambda: daemon.get("/healthz")[1]["fetchingSince"] is not None)  # the next one hangs too
        wait_until(lambda: processes_naming(f"127.0.0.1:{server.port}") != [])
        started = time.monotonic()
    finally:
        code = daemon.stop()
        server.close()
    assert code == 0
    assert time.monotonic() - started < 10, "SIGTERM stops the daemon though a fetch hangs"
    assert processes_naming(f"127.0.0.1:{server.port}") == [], "git and its helpers are gone"
    assert secret not in daemon.text()


def test_in_a_terminal_git_asks_nothing(cwd: Path, tmp_path: Path) -> None:
    """The daemon run in a terminal (a real pty, script(1)): a host that asks for a user name
    gets none, and nothing is asked on the daemon's terminal."""
    if shutil.which("script") is None:
        missing("needs script(1) for a terminal (util-linux)")
    served, _ = served_repo(tmp_path)
    with GitHttpServer(served, "alice", "right") as server:
        url = f"http://127.0.0.1:{server.port}/x.git"
        command = f"timeout -s TERM 8 {shlex.quote(sys.executable)} -m tfdeclare daemon --port 0 --git {url}"
        done = subprocess.run(
            ["script", "-qfec", command, "/dev/null"], cwd=cwd, capture_output=True, text=True, timeout=60
        )
    said = re.findall(r"Username for '[^']*'(.{0,27})", done.stdout)  # a prompt ends in ": "
    assert said and all(after == ": terminal prompts disabled" for after in said), done.stdout
    assert (
        f"git clone {url}: could not read Username for 'http://127.0.0.1:{server.port}': terminal prompts disabled"
        in done.stdout
    ), done.stdout
