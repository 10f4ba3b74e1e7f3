"""Issue 29, finding 5: what a task running as root writes into its git snapshot keeps the
snapshot, whatever git would hide from ``git status`` (a ``.git`` folder at the top or nested,
an ignored file, what lies under a submodule's path, a name git refuses, a changed executable
bit, a link, an empty folder, a FIFO): the snapshot folder is compared with its commit's tree.
A snapshot holding exactly its commit (a submodule, a link, an executable, line endings
converted by ``.gitattributes`` included) is still removed. Real repositories over
``file://``, the daemon's source as it runs, ``tfdeclare gc`` for its report."""

from __future__ import annotations

import json
import os
import stat
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.conftest import cli
from tests.test_git_security import Repo, git
from tfdeclare.daemon.sources import GitSettings, GitSource

Change = Callable[[Path], None]
JOB_A = "apiVersion: tfdeclare/v1\nkind: TFJob\nmetadata: {name: a}\nspec:\n  command: [x]\n  replicas: {worker: {count: 1}}\n"


def writable(path: Path) -> Path:
    """What a task running as root does anyway: the snapshot's read-only modes do not stop it."""
    for folder in [path, *path.parents]:
        if folder.is_dir() and not folder.is_symlink():
            folder.chmod(folder.stat().st_mode | stat.S_IWUSR)
        if folder.name.startswith("revisions"):
            break
    return path


def write(relative: str, text: str = "weeks of training") -> Change:
    def change(snapshot: Path) -> None:
        path = snapshot / relative
        writable(path.parent)
        path.parent.mkdir(parents=True, exist_ok=True)
        writable(path.parent)
        path.write_text(text)

    return change


def chmod_x(snapshot: Path) -> None:
    path = snapshot / "jobs" / "a.yaml"
    path.chmod(path.stat().st_mode | stat.S_IXUSR)


def retarget(snapshot: Path) -> None:
    link = snapshot / "jobs" / "link"
    writable(link.parent)
    link.unlink()
    link.symlink_to("b.yaml")


def new_link(snapshot: Path) -> None:
    writable(snapshot / "jobs")
    (snapshot / "jobs" / "secrets").symlink_to("/etc/passwd")


def empty_folder(snapshot: Path) -> None:
    writable(snapshot / "jobs")
    (snapshot / "jobs" / "empty").mkdir()


def fifo(snapshot: Path) -> None:
    writable(snapshot / "jobs")
    os.mkfifo(snapshot / "jobs" / "pipe")


def odd_name(snapshot: Path) -> None:
    writable(snapshot / "jobs")
    (Path(os.fsdecode(bytes(snapshot / "jobs") + b"/\xff.bin"))).write_text("x")


CASES: dict[str, tuple[Change, list[str]]] = {
    "a .git folder at the top": (write(".git/config"), [".git/config"]),
    "a nested .git folder": (write("jobs/deep/.git/HEAD"), ["jobs/deep/.git/HEAD"]),
    "a file .gitignore ignores": (write("jobs/model.ckpt"), ["jobs/model.ckpt"]),
    "a folder .gitignore ignores": (write("logs/run/events.out"), ["logs/run/events.out"]),
    "a file info/exclude ignores": (write("jobs/weights.bin"), ["jobs/weights.bin"]),
    "a file under a submodule's path": (write("vendor/sub/weights.h5"), ["vendor/sub/weights.h5"]),
    "a nested repository's file": (write("jobs/nested/.git/x", "x"), ["jobs/nested/.git/x"]),
    "a .git file": (write("jobs/.git", "gitdir: elsewhere"), ["jobs/.git"]),
    "a .GIT file": (write("jobs/.GIT"), ["jobs/.GIT"]),
    "a name that is not UTF-8": (odd_name, ["jobs/\\xff.bin"]),
    "an executable bit set": (chmod_x, ["jobs/a.yaml"]),
    "a link retargeted": (retarget, ["jobs/link"]),
    "a new link": (new_link, ["jobs/secrets"]),
    "an empty folder": (empty_folder, ["jobs/empty/"]),
    "a FIFO": (fifo, ["jobs/pipe"]),
    "a changed file": (write("jobs/a.yaml", JOB_A + "# changed\n"), ["jobs/a.yaml"]),
}


def hostile_repo(root: Path) -> tuple[Repo, str]:
    """A repository whose commit has what git treats specially: ignore rules, a submodule, an
    executable, a link, a file whose line endings the checkout converts."""
    repo = Repo(root)
    work = repo.work
    (work / ".gitignore").write_text("*.ckpt\nlogs/\n")
    (work / ".gitattributes").write_text("*.txt text eol=crlf\n")
    (work / "notes.txt").write_text("line one\nline two\n")
    (work / "jobs" / "run.sh").write_text("#!/bin/sh\necho hi\n")
    (work / "jobs" / "run.sh").chmod(0o755)
    (work / "jobs" / "b.yaml").write_text(JOB_A.replace("name: a", "name: b"))
    (work / "jobs" / "link").symlink_to("a.yaml")
    sub = "0123456789abcdef0123456789abcdef01234567"  # a submodule commit: never fetched
    (work / ".gitmodules").write_text('[submodule "sub"]\n\tpath = vendor/sub\n\turl = ./sub\n')
    (work / "jobs" / "a.yaml").write_text(JOB_A)
    git(work, "add", "-A")
    git(work, "update-index", "--add", "--cacheinfo", f"160000,{sub},vendor/sub")
    git(work, "commit", "-q", "-m", "hostile")
    git(work, "push", "-q", "origin", "HEAD:main")
    first = git(work, "rev-parse", "HEAD")
    assert "160000" in git(work, "ls-tree", "-r", "HEAD", "vendor")
    return repo, first


@pytest.fixture
def synced(tmp_path: Path) -> tuple[Repo, GitSource, str]:
    repo, first = hostile_repo(tmp_path)
    source = GitSource(GitSettings(repo.url), tmp_path / ".tfdeclare" / "git")
    source.in_use = list  # no job uses any snapshot
    assert source.sync().commit == first
    exclude = source.clone_dir / ".git" / "info" / "exclude"
    exclude.parent.mkdir(exist_ok=True)
    exclude.write_text("*.bin\n")
    return repo, source, first


def test_an_untouched_snapshot_of_a_hostile_commit_holds_nothing_foreign_and_goes(
    synced: tuple[Repo, GitSource, str],
) -> None:
    repo, source, first = synced
    snapshot = source.revisions_dir / first
    assert (snapshot / "vendor" / "sub").is_dir() and (snapshot / "jobs" / "link").is_symlink()
    assert b"\r\n" in (snapshot / "notes.txt").read_bytes(), "the checkout converted line endings"
    assert source.foreign_files(first) == []
    second = repo.commit({"c.yaml": JOB_A.replace("name: a", "name: c")})
    assert source.sync().commit == second
    assert not snapshot.exists()


@pytest.mark.parametrize("case", list(CASES))
def test_what_git_hides_keeps_the_snapshot(synced: tuple[Repo, GitSource, str], case: str) -> None:
    repo, source, first = synced
    snapshot = source.revisions_dir / first
    change, expected = CASES[case]
    change(snapshot)

    second = repo.commit({"c.yaml": JOB_A.replace("name: a", "name: c")})
    assert source.sync().commit == second
    assert snapshot.is_dir(), "kept: it holds what a task wrote"
    assert source.kept[first] == expected


def test_a_removed_file_is_named_and_gc_reports_what_git_hides(
    tmp_path: Path, synced: tuple[Repo, GitSource, str]
) -> None:
    repo, source, first = synced
    snapshot = source.revisions_dir / first
    writable(snapshot / "jobs")
    (snapshot / "jobs" / "b.yaml").unlink()
    write("jobs/deep/.git/HEAD")(snapshot)
    repo.commit({"c.yaml": JOB_A.replace("name: a", "name: c")})
    source.sync()
    assert source.kept[first] == ["jobs/b.yaml", "jobs/deep/.git/HEAD"]

    dry = cli("gc", "--dry-run", "-o", "json", cwd=tmp_path)
    assert dry.returncode == 0, dry.stderr
    (entry,) = json.loads(dry.stdout)["removed"]
    assert entry == {"revision": first, "foreignFiles": ["jobs/b.yaml", "jobs/deep/.git/HEAD"]}
    assert snapshot.exists()
