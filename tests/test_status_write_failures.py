"""A status or state write that fails (a full disk, a path in the way) is reported, retried
next pass, and never stops the other jobs, never leaves a resize half-done, never ends in a
traceback (issue 12, item 8)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.chaos import local_tasks
from tests.components import missing
from tests.conftest import cli
from tests.test_e2e_local import project, spec, status_of, wait_until

__all__ = ["project"]  # the fixture


def _started(project: Path, job: str) -> set[str]:
    """The tasks of ``job`` that have run (each writes ``specs/<job>-out/<task>.json``)."""
    return {p.stem for p in (project / "specs" / f"{job}-out").glob("*.json")}


def _cluster_sizes(project: Path, job: str) -> dict[str, int]:
    """How many workers each task of ``job`` was told the cluster has."""
    sizes = {}
    for path in (project / "specs" / f"{job}-out").glob("*.json"):
        try:
            sizes[path.stem] = len(json.loads(path.read_text())["tfConfig"]["cluster"]["worker"])
        except (OSError, ValueError):
            continue
    return sizes


def _two_jobs(project: Path, count: int) -> None:
    for job in ("a", "b"):
        (project / "specs" / f"{job}-out").mkdir(exist_ok=True)
        (project / "specs" / f"{job}.yaml").write_text(
            spec(job, {"worker": (count, "serve")}, out=f"{job}-out")
        )


def test_a_status_file_that_cannot_be_written_stops_no_other_job(project: Path) -> None:
    _two_jobs(project, 1)
    (project / "status" / "a.yaml").mkdir(parents=True)  # in the way of a's status file
    applied = cli("apply", "specs", cwd=project)
    assert applied.returncode == 1, applied.stdout + applied.stderr
    assert "tfdeclare: a: cannot write" in applied.stderr and "a.yaml (Is a directory)" in applied.stderr
    assert "Traceback" not in applied.stderr and applied.stderr.count("cannot write") == 1
    assert status_of(project, "b")["phase"] in ("Pending", "Running")
    for job in ("a", "b"):  # both jobs' tasks run
        wait_until(lambda job=job: _started(project, job) == {"worker-0.0"})

    (project / "status" / "a.yaml").rmdir()
    refreshed = cli("status", "--refresh", cwd=project)
    assert refreshed.returncode == 0, refreshed.stderr
    assert status_of(project, "a")["phase"] in ("Pending", "Running")


@pytest.fixture
def full_status_disk(project: Path) -> Iterator[Path]:
    """A real full disk: a 64 KiB tmpfs as the status folder (needs root to mount)."""
    status = project / "status"
    status.mkdir(exist_ok=True)
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", str(status)], check=False)
    if mounted.returncode != 0:
        missing("cannot mount a tmpfs here (not root)")  # CI runs as root
    try:
        yield status
    finally:
        subprocess.run(["umount", "-l", str(status)], check=False)


def _fill(folder: Path) -> None:
    try:
        with open(folder / "filler", "wb") as handle:
            while True:
                handle.write(b"\0" * 4096)
                handle.flush()
    except OSError:
        pass  # full


def test_a_full_status_disk_leaves_no_resize_half_done(project: Path, full_status_disk: Path) -> None:
    _two_jobs(project, 1)
    assert cli("apply", "specs", cwd=project).returncode == 0
    for job in ("a", "b"):
        wait_until(lambda job=job: _started(project, job) == {"worker-0.0"})

    _fill(full_status_disk)
    _two_jobs(project, 2)
    applied = cli("apply", "specs", "--timeout", "30", cwd=project)
    assert "Traceback" not in applied.stderr and "internal error" not in applied.stderr
    assert applied.returncode == 1 and "No space left on device" in applied.stderr
    # both resizes went through: every task of both jobs' new cluster started (a resize that
    # changes the cluster is a new run of the job: attempt 1)
    for job in ("a", "b"):
        wait_until(
            lambda job=job: (
                _cluster_sizes(project, job) == {"worker-0.0": 1, "worker-0.1": 2, "worker-1.1": 2}
            )
        )

    os.unlink(full_status_disk / "filler")
    refreshed = cli("status", "--refresh", cwd=project)
    assert refreshed.returncode == 0, refreshed.stderr
    for name in ("a", "b"):
        document = status_of(project, name)
        assert document["replicas"]["worker"]["desired"] == 2
    assert shutil.disk_usage(full_status_disk).free > 0


def test_a_job_deleted_while_its_status_file_cannot_be_removed_does_not_leave_it_behind(
    project: Path, full_status_disk: Path
) -> None:
    """Found by the chaos suite: the record went first, so a status file that could not be
    removed (a read-only folder) stayed for good, showing a job that no longer exists."""
    _two_jobs(project, 1)
    assert cli("apply", "specs", cwd=project).returncode == 0
    (project / "specs" / "b.yaml").unlink()
    subprocess.run(["mount", "-o", "remount,ro", str(full_status_disk)], check=True)
    try:
        pruned = cli("apply", "specs", "--prune", "--timeout", "30", cwd=project)
        wait_until(lambda: not [t for t in local_tasks(project) if t[0] == "b"])
        refreshed = cli("status", "--refresh", cwd=project)  # the pass that forgets the job
    finally:
        subprocess.run(["mount", "-o", "remount,rw", str(full_status_disk)], check=True)
    assert pruned.returncode == 1 and "Read-only file system" in pruned.stderr, pruned.stdout + pruned.stderr
    assert "Traceback" not in pruned.stderr + refreshed.stderr
    again = cli("apply", "specs", "--prune", cwd=project)
    assert again.returncode == 0, again.stdout + again.stderr
    assert sorted(p.name for p in full_status_disk.glob("*.yaml")) == ["a.yaml"]


def test_a_failed_status_write_is_tried_again_and_not_taken_as_written(tmp_path: Path) -> None:
    """A write that failed leaves the writer not believing the file holds what it last wrote,
    so the next pass writes again and fails visibly again (the daemon's ``writeFailures`` once
    went quiet after one pass while the status file stayed stale)."""
    from tfdeclare.shell.statuswriter import StatusWriter

    folder = tmp_path / "status"
    folder.mkdir()
    writer = StatusWriter(folder)
    first = {"name": "a", "phase": "Running", "updatedAt": "1"}
    assert writer.write(first) and writer.written("a")
    folder.rename(tmp_path / "aside")
    folder.write_text("not a folder")  # every write into it fails (also as root)
    with pytest.raises(OSError):
        writer.write({**first, "phase": "Restarting"})
    assert not writer.written("a"), "a failed write must be tried again by the next pass"
    folder.unlink()
    (tmp_path / "aside").rename(folder)
    assert writer.write({**first, "phase": "Restarting", "updatedAt": "2"})
    assert "Restarting" in (folder / "a.yaml").read_text()
