"""Issue 20, finding 6: in git mode a task running as root can write into the revision snapshot
it runs from (read-only by mode only). When a new commit leaves that snapshot unused, the
daemon keeps it and says so (path and count) instead of deleting the file with it; a snapshot
holding only its commit's files is removed as before; ``tfdeclare gc`` removes a kept one when
the operator asks (``--dry-run`` first); the daemon's ``/healthz`` lists what it keeps."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest

from tests.conftest import cli
from tests.controller_world import World
from tests.test_git_security import Repo
from tfdeclare.daemon import page
from tfdeclare.daemon.service import Daemon, DaemonOptions
from tfdeclare.daemon.sources import GitSettings, GitSource

JOB = "apiVersion: tfdeclare/v1\nkind: TFJob\nmetadata: {name: a}\nspec:\n  command: [x]\n  replicas: {worker: {count: 1}}\n"


def test_a_snapshot_holding_a_file_a_task_wrote_is_kept_and_gc_removes_it(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    repo = Repo(tmp_path)
    first = repo.commit({"a.yaml": JOB})
    source = GitSource(GitSettings(repo.url), tmp_path / ".tfdeclare" / "git")
    source.in_use = list  # no job uses any snapshot
    assert source.sync().commit == first
    snapshot = source.revisions_dir / first
    # what a task running as root does: write into its source folder (read-only modes ignored)
    (snapshot / "jobs").chmod(0o755)
    (snapshot / "jobs" / "checkpoint.ckpt").write_text("weeks of training")
    (snapshot / "jobs" / "a.yaml").chmod(0o644)
    (snapshot / "jobs" / "a.yaml").write_text(JOB + "# changed\n")

    second = repo.commit({"b.yaml": JOB.replace("name: a", "name: b")})
    with caplog.at_level(logging.INFO, logger="tfdeclare.daemon"):
        assert source.sync().commit == second
        third = repo.commit({"c.yaml": JOB.replace("name: a", "name: c")})
        assert source.sync().commit == third  # asked again: said once, still kept
    assert (snapshot / "jobs" / "checkpoint.ckpt").read_text() == "weeks of training"
    assert not (source.revisions_dir / second).exists(), "an unchanged unused snapshot is removed"
    kept = [r.getMessage() for r in caplog.records if "keeping the snapshot" in r.getMessage()]
    assert len(kept) == 1 and str(snapshot) in kept[0] and "2 file(s)" in kept[0], kept
    assert sorted(source.kept[first]) == ["jobs/a.yaml", "jobs/checkpoint.ckpt"]
    world = World(tmp_path / "world")  # the daemon's /healthz (and page) says so too
    daemon = Daemon(
        source, world.controller, world.files, world.status_dir, DaemonOptions(), clock=world.clock
    )
    try:
        (kept_now,) = daemon.health()[1]["keptSnapshots"].items()
        assert kept_now[0] == first and kept_now[1]["files"] == 2, kept_now
        text = page.render([], [], daemon.health()[1], 0)
        assert f'<code title="{first}">{first[:12]}</code> is no longer used but kept' in text
        assert "tasks wrote 2 file(s) into it" in text
    finally:
        daemon.notifier.close()

    dry = cli("gc", "--dry-run", "-o", "json", cwd=tmp_path)
    assert dry.returncode == 0, dry.stderr
    (entry,) = json.loads(dry.stdout)["removed"]
    assert entry["revision"] == first and sorted(entry["foreignFiles"]) == [
        "jobs/a.yaml",
        "jobs/checkpoint.ckpt",
    ]
    assert snapshot.exists()
    removed = cli("gc", cwd=tmp_path)
    assert removed.returncode == 0 and f"removed the snapshot of revision {first[:12]}" in removed.stdout
    assert "2 file(s) its commit does not have" in removed.stdout
    assert not snapshot.exists() and (source.revisions_dir / third).exists(), "the current one stays"
    assert "No unused git snapshots." in cli("gc", cwd=tmp_path).stdout
