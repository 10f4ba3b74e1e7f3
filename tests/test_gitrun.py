"""The git source's git commands (``daemon.gitrun``, ``daemon.sources``): real git, real
``file://`` repositories. Running out of descriptors is never taken for a corrupt clone."""

from __future__ import annotations

import os
import resource
import subprocess
from pathlib import Path

import pytest

from tfdeclare.daemon.gitrun import GitError
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
