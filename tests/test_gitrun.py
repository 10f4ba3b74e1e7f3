"""The git source's git commands (``daemon.gitrun``, ``daemon.sources``): real git, real
``file://`` repositories and HTTP hosts (tests/git_http.py). Running out of descriptors is
never taken for a corrupt clone; a host that never answers times out, and git with every
helper it started is killed; closing the source kills a fetch that hangs; git never prompts."""

from __future__ import annotations

import os
import resource
import subprocess
import threading
import time
from pathlib import Path

import pytest

from tests.git_http import GitHttpServer, SilentServer
from tests.waiting import wait_until
from tfdeclare.daemon.gitrun import Git, GitError
from tfdeclare.daemon.sources import GitSettings, GitSource, SourceError, _corrupt


def git(cwd: Path, *args: str) -> str:
    env = {**os.environ, "GIT_AUTHOR_NAME": "Ada", "GIT_AUTHOR_EMAIL": "ada@example.com"}
    env.update(GIT_COMMITTER_NAME="Ada", GIT_COMMITTER_EMAIL="ada@example.com")
    return subprocess.run(
        ["git", *args], cwd=cwd, check=True, capture_output=True, text=True, env=env
    ).stdout.strip()


@pytest.fixture
def remote(tmp_path: Path) -> Path:
    bare = tmp_path / "remote.git"
    git(tmp_path, "init", "-q", "--bare", "--initial-branch=main", str(bare))
    work = tmp_path / "work"
    git(tmp_path, "clone", "-q", str(bare), str(work))
    (work / "jobs").mkdir()
    (work / "jobs" / "a.yaml").write_text("# nothing yet\n")
    git(work, "add", "-A")
    git(work, "commit", "-q", "-m", "first line\n\nthe body")
    git(work, "push", "-q", "origin", "HEAD:main")
    return bare


def test_a_sync_names_the_commit_as_the_records_do(tmp_path: Path, remote: Path) -> None:
    source = GitSource(GitSettings(f"file://{remote}"), tmp_path / "state")
    revision = source.sync()
    assert revision.commit == git(remote, "rev-parse", "main")
    assert (revision.author, revision.subject) == ("Ada <ada@example.com>", "first line")
    assert (source.specs_path / "jobs" / "a.yaml").read_text() == "# nothing yet\n"


def test_too_many_open_files_is_not_a_corrupt_clone(tmp_path: Path, remote: Path) -> None:
    source = GitSource(GitSettings(f"file://{remote}"), tmp_path / "state")
    first = source.sync()
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    opened = len(os.listdir("/proc/self/fd"))
    resource.setrlimit(resource.RLIMIT_NOFILE, (opened + 1, hard))  # no room for git's pipes
    try:
        with pytest.raises(SourceError, match="Too many open files"):
            source.sync()
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
    assert not list((tmp_path / "state").glob("corrupt-*")), "the clone was not set aside"
    assert source.sync() == first


@pytest.mark.parametrize(
    ("said", "corrupt"),
    [
        ("not a git repository: '/s/git/checkout/.git'", True),
        ("bad object refs/remotes/origin/main", True),
        ("loose object 3f1c is corrupt", True),
        ("unable to read tree 3f1c", True),
        ("unable to read 3f1c: Too many open files", False),
        ("unable to write new index file: No space left on device", False),
        ("cannot run git: Too many open files", False),
        ("Needed a single revision", False),
    ],
)
def test_only_what_git_says_of_a_damaged_clone_sets_it_aside(said: str, corrupt: bool) -> None:
    assert _corrupt(GitError(said)) is corrupt
    assert not _corrupt(GitError(said, timed_out=True)), "a slow disk is not a corrupt clone"


def processes_naming(text: str) -> list[str]:
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


def test_a_host_that_never_answers_times_out_and_leaves_no_process(tmp_path: Path) -> None:
    with SilentServer() as silent:
        url = f"http://alice:s3cret@127.0.0.1:{silent.port}/x.git"
        source = GitSource(GitSettings(url, timeout_s=2), tmp_path / "state")
        started = time.monotonic()
        with pytest.raises(SourceError) as raised:
            source.sync()
        assert time.monotonic() - started < 10
        assert str(raised.value) == f"git clone http://127.0.0.1:{silent.port}/x.git: timed out after 2 s"
        assert silent.accepted, "git did reach the host"
        assert processes_naming(f"127.0.0.1:{silent.port}") == [], "git-remote-http is killed with git"
    assert not (tmp_path / "state" / "checkout").exists() and not list((tmp_path / "state").glob("corrupt-*"))


def test_close_kills_a_fetch_that_hangs_at_once(tmp_path: Path) -> None:
    with SilentServer() as silent:
        source = GitSource(
            GitSettings(f"http://127.0.0.1:{silent.port}/x.git", timeout_s=600), tmp_path / "s"
        )
        errors: list[SourceError] = []

        def sync() -> None:
            try:
                source.sync()
            except SourceError as err:
                errors.append(err)

        thread = threading.Thread(target=sync)
        thread.start()
        wait_until(lambda: processes_naming(f"127.0.0.1:{silent.port}") != [])
        source.close()
        thread.join(timeout=10)
        assert not thread.is_alive() and len(errors) == 1
        assert processes_naming(f"127.0.0.1:{silent.port}") == []
        with pytest.raises(SourceError, match="stopped"):
            source.sync()  # nothing starts after close


def test_git_never_asks_for_a_password(tmp_path: Path, remote: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    asked = tmp_path / "asked"
    askpass = tmp_path / "askpass"
    askpass.write_text(f'#!/bin/sh\necho "$@" >> {asked}\necho guess\n')
    askpass.chmod(0o755)
    monkeypatch.setenv("GIT_ASKPASS", str(askpass))
    monkeypatch.setenv("SSH_ASKPASS", str(askpass))
    monkeypatch.setenv("GIT_TERMINAL_PROMPT", "1")
    with GitHttpServer(remote.parent, "alice", "right") as server:
        source = GitSource(GitSettings(f"http://127.0.0.1:{server.port}/{remote.name}"), tmp_path / "state")
        with pytest.raises(SourceError) as raised:
            source.sync()
    assert str(raised.value) == (
        f"git clone http://127.0.0.1:{server.port}/{remote.name}: could not read Username for "
        f"'http://127.0.0.1:{server.port}': terminal prompts disabled"
    )
    assert not asked.exists(), "no askpass program was run"


@pytest.mark.parametrize(
    ("variables", "config", "batch"),
    [
        ({}, None, True),
        ({"GIT_SSH_COMMAND": "ssh -i /k"}, None, False),
        ({"GIT_SSH": "/usr/bin/my-ssh"}, None, False),
        ({}, "ssh -i /k", False),
    ],
)
def test_ssh_runs_in_batch_mode_unless_the_user_chose_their_own(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    variables: dict[str, str],
    config: str | None,
    batch: bool,
) -> None:
    for name in ("GIT_SSH_COMMAND", "GIT_SSH"):
        monkeypatch.delenv(name, raising=False)
    for name, value in variables.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setenv("GIT_CONFIG_NOSYSTEM", "1")
    if config is not None:
        git(tmp_path, "config", "--global", "core.sshCommand", config)
    env = Git(tmp_path / "x.git", 5)._env
    assert ("BatchMode=yes" in env.get("GIT_SSH_COMMAND", "")) is batch
    assert env["GIT_TERMINAL_PROMPT"] == "0" and env["GIT_ASKPASS"] == "" and env["SSH_ASKPASS"] == ""
    assert {k: env.get(k) for k in variables} == variables, "the user's own are kept"
