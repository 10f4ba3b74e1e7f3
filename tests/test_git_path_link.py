"""A pusher commits the ``--path`` folder as a link out of the repository (docs/security.md): a
real ``tfdeclare daemon --git file://... --path jobs --prune`` with local processes. The folder
is refused as ``unreadable`` at ``jobs``, nothing is pruned, no job is read from where the link
leads, no value of a file there is quoted; once the repository is fixed the problem clears.
A job an earlier release applied through such a link is the repository's to prune."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.conftest import cli
from tests.test_daemon import Daemon, alive, commit, cwd, git, job, pids, repo, status, wait_until
from tfdeclare.core.run.record import Revision

pytestmark = pytest.mark.e2e

__all__ = ["cwd", "repo"]  # the fixtures of test_daemon


def spec(name: str, outputs: Path) -> str:
    return job(name).replace(f"env: {{OUT: {name}-out}}", f"env: {{OUT: '{outputs}'}}")


def link_jobs_to(work: Path, target: Path) -> str:
    """Commit ``jobs`` as a link to ``target`` and push it."""
    git(work, "rm", "-q", "-r", "jobs")
    (work / "jobs").symlink_to(target)
    git(work, "add", "-A")
    git(work, "commit", "-q", "-m", "jobs elsewhere")
    git(work, "push", "-q", "origin", "HEAD:main", "--force")
    return git(work, "rev-parse", "HEAD")


def test_a_path_committed_as_a_link_out_of_the_repository_is_refused(
    cwd: Path, repo: tuple[Path, Path]
) -> None:
    remote, work = repo
    a_out, evil_out = cwd / "a-out", cwd / "evil-out"
    a_out.mkdir()
    evil_out.mkdir()
    first = commit(work, "add a", {"a.yaml": spec("a", a_out)})
    outside = cwd / "outside"
    outside.mkdir()
    secret = "s3cr3t-value-from-the-daemon-machine"
    (outside / "evil.yaml").write_text(spec("evil", evil_out) + f"  labels: {{x: {secret}}}\n")
    (outside / "bad.yaml").write_text(f"not: [valid\n# {secret}\n")
    daemon = Daemon(cwd, "--git", f"file://{remote}", "--path", "jobs", "--interval", "0.5", "--prune")
    try:
        wait_until(lambda: len(pids(a_out)) == 1 and (status(cwd, "a") or {}).get("revision") == first)
        running = pids(a_out)[0]
        linked = link_jobs_to(work, outside)
        wait_until(lambda: any(p["path"] == "jobs" for p in daemon.get("/healthz")[1]["problems"]))
        wait_until(lambda: (status(cwd, "a") or {}).get("lastAttemptedRevision") == linked)
        (problem,) = daemon.get("/healthz")[1]["problems"]
        assert problem["kind"] == "unreadable" and str(outside) in problem["message"], problem
        assert "outside the repository" in problem["message"]
        assert alive(running) and status(cwd, "a")["revision"] == first, "nothing pruned"  # type: ignore[index]
        assert status(cwd, "evil") is None and pids(evil_out) == [], "no job read from the link's target"
        history = cli("history", "-o", "json", cwd=cwd).stdout
        for shown in (str(daemon.get("/healthz")[1]), history, daemon.get("/jobs")[1].__repr__()):
            assert secret not in shown and "bad.yaml" not in shown

        git(work, "rm", "-q", "jobs")
        (work / "jobs").mkdir()
        fixed = commit(work, "jobs back", {"a.yaml": spec("a", a_out)})
        wait_until(lambda: (status(cwd, "a") or {}).get("revision") == fixed)
        wait_until(lambda: daemon.get("/healthz")[1]["problems"] == [])
        assert pids(a_out) == [running] and alive(running), "the same job, never restarted"
    finally:
        daemon.stop()


def test_a_job_applied_through_such_a_link_before_is_pruned_by_the_repository(
    cwd: Path, repo: tuple[Path, Path]
) -> None:
    """The state an earlier release left: ``evil`` recorded as applied from a revision, its file
    outside the repository's snapshots. The repository's ``--prune`` now reaches it."""
    remote, work = repo
    a_out, evil_out = cwd / "a-out", cwd / "evil-out"
    a_out.mkdir()
    evil_out.mkdir()
    outside = cwd / "outside"
    outside.mkdir()
    (outside / "evil.yaml").write_text(spec("evil", evil_out))
    assert cli("apply", "outside", cwd=cwd).returncode == 0
    wait_until(lambda: len(pids(evil_out)) == 1)
    evil = pids(evil_out)[0]
    # what an earlier daemon recorded: applied from a revision (its record names the commit)
    head = commit(work, "add a", {"a.yaml": spec("a", a_out)})
    _record_revision(cwd / ".tfdeclare", "evil", Revision(head, "Ada <ada@example.com>", 0.0, "add a"))
    daemon = Daemon(cwd, "--git", f"file://{remote}", "--path", "jobs", "--interval", "0.5", "--prune")
    try:
        wait_until(lambda: len(pids(a_out)) == 1)
        wait_until(lambda: not alive(evil) and status(cwd, "evil") is None)
    finally:
        daemon.stop()


def _record_revision(state: Path, name: str, revision: Revision) -> None:
    """Mark ``name``'s record as applied from ``revision`` (as a git daemon writes it)."""
    from tfdeclare.shell.store import StateStore

    store = StateStore(state)
    record = store.load(name)
    assert record is not None and record.source_dir is not None
    assert os.path.realpath(record.source_dir).startswith(str(state.parent / "outside"))
    store.save(record.evolve(revision=revision.commit, revision_info=revision.to_json()))
