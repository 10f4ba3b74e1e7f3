"""A full or read-only disk under the state or status folder is named where users look (issue
29, findings 7 and 8): every error names the file and the job, never a bare errno; a job whose
status file cannot be written or read stays in ``tfdeclare status`` (from its record); a state or
status folder that cannot take a write makes the daemon's ``/healthz`` degraded (503) with the reason,
shows in ``/metrics`` and on its page. Real CLI and daemon processes on real tmpfs mounts."""

from __future__ import annotations

import json
import subprocess
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.components import missing
from tests.conftest import cli
from tests.test_daemon import Daemon, job, wait_until
from tests.test_e2e_local import CONFIG, spec
from tfdeclare.shell.store import StateStore

pytestmark = pytest.mark.e2e


def mount_tmpfs(folder: Path, size: str) -> None:
    """A small tmpfs at ``folder``, its root 0755 (a tmpfs's default, 1777, is a folder anyone
    may write: a state folder so made is refused, docs/security.md)."""
    folder.mkdir(parents=True, exist_ok=True)
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={size},mode=0755", "tmpfs", str(folder)], check=False
    )
    if mounted.returncode != 0:
        missing("cannot mount a tmpfs here (not root)")  # CI runs as root


def fill(folder: Path) -> None:
    """Write ``folder/filler`` until its disk is full."""
    try:
        with open(folder / "filler", "wb") as handle:
            while True:
                handle.write(b"\0" * 4096)
                handle.flush()
    except OSError:
        pass  # full


def _write_job(project: Path, name: str) -> None:
    (project / "specs" / f"{name}-out").mkdir(parents=True, exist_ok=True)
    (project / "specs" / f"{name}.yaml").write_text(spec(name, {"worker": (1, "serve")}, out=f"{name}-out"))


@pytest.fixture
def on_tmpfs(tmp_path: Path) -> Iterator[Path]:
    """A project whose whole folder (specs, state, status) is a 512 KiB tmpfs."""
    project = tmp_path / "project"
    mount_tmpfs(project, "512k")
    (project / "specs").mkdir()
    (project / "tfdeclare.yaml").write_text(CONFIG)
    try:
        yield project
    finally:
        (project / "filler").unlink(missing_ok=True)
        cli("delete", "--all", cwd=project)
        subprocess.run(["umount", "-l", str(project)], check=False)


def test_a_full_state_disk_names_the_job_and_the_file_and_applies_the_rest_later(on_tmpfs: Path) -> None:
    project = on_tmpfs
    _write_job(project, "a")
    _write_job(project, "b")
    assert cli("apply", "specs/a.yaml", cwd=project).returncode == 0
    fill(project)
    applied = cli("apply", "specs", "--timeout", "20", cwd=project)
    told = applied.stderr
    assert applied.returncode == 1, applied.stdout + told
    assert "Traceback" not in told and "[Errno" not in told and "internal error" not in told, told
    record = project / ".tfdeclare" / "records.sqlite"
    assert f"job b: not applied: cannot write {record} (No space left on device)" in told, told
    assert "b                        deleted" not in applied.stdout, "a job never made is not 'deleted'"
    listed = cli("status", cwd=project)
    assert listed.returncode == 0 and listed.stdout.split()[6] == "a", listed.stdout + listed.stderr
    deleted = cli("delete", "a", cwd=project)
    assert deleted.returncode == 1 and "Traceback" not in deleted.stderr, deleted.stderr
    assert (
        f"error: job a: cannot write {project / '.tfdeclare' / 'records.sqlite'} (No space left on device); "
        "it was not marked for deletion; free the disk and run the command again"
    ) in deleted.stderr, deleted.stderr

    (project / "filler").unlink()
    again = cli("apply", "specs", cwd=project)
    assert again.returncode == 0, again.stdout + again.stderr
    assert "+ b will be created" in again.stdout


@pytest.fixture
def full_status(tmp_path: Path) -> Iterator[Path]:
    """A project on the ordinary disk with its status folder a 64 KiB tmpfs."""
    project = tmp_path
    (project / "specs").mkdir()
    (project / "tfdeclare.yaml").write_text(CONFIG)
    mount_tmpfs(project / "status", "64k")
    try:
        yield project
    finally:
        (project / "status" / "filler").unlink(missing_ok=True)
        cli("delete", "--all", cwd=project)
        subprocess.run(["umount", "-l", str(project / "status")], check=False)


def test_a_job_whose_status_file_cannot_be_written_or_read_stays_in_status(full_status: Path) -> None:
    project = full_status
    _write_job(project, "a")
    assert cli("apply", "specs", cwd=project).returncode == 0
    fill(project / "status")
    _write_job(project, "b")  # its record is written, its status file cannot be
    applied = cli("apply", "specs", "--timeout", "20", cwd=project)
    assert applied.returncode == 1, applied.stdout + applied.stderr
    assert f"b: cannot write {project / 'status' / 'b.yaml'} (No space left on device)" in applied.stderr
    assert not (project / "status" / "b.yaml").exists()

    listed = cli("status", cwd=project)
    assert listed.returncode == 0, listed.stderr
    names = [line.split()[0] for line in listed.stdout.splitlines()[1:]]
    assert names == ["a", "b"], listed.stdout
    assert "b: no readable status file; shown from its record in the state folder" in listed.stderr
    documents = json.loads(cli("status", "-o", "json", cwd=project).stdout)
    assert [d["name"] for d in documents] == ["a", "b"]
    one = cli("status", "b", cwd=project)
    assert one.returncode == 0 and one.stdout.startswith("b: "), one.stdout + one.stderr

    (project / "status" / "filler").unlink()
    (project / "status" / "a.yaml").write_text("{ this is: [not yaml\n")  # damaged
    listed = cli("status", cwd=project)
    assert listed.returncode == 0 and "Traceback" not in listed.stderr, listed.stderr
    assert [line.split()[0] for line in listed.stdout.splitlines()[1:]] == ["a", "b"], listed.stdout
    assert f"{project / 'status' / 'a.yaml'}: not a readable status document" in listed.stderr


def test_a_read_only_status_folder_makes_healthz_degraded_with_the_reason(tmp_path: Path) -> None:
    project = tmp_path
    (project / "tfdeclare.yaml").write_text(CONFIG)
    (project / "specs").mkdir()
    (project / "specs" / "a-out").mkdir()
    (project / "specs" / "a.yaml").write_text(job("a"))
    status = project / "status"
    mount_tmpfs(status, "1m")
    daemon = Daemon(project, "--specs", "specs", "--interval", "1")
    try:
        wait_until(lambda: daemon.get("/healthz")[0] == 200 and (status / "a.yaml").exists())
        subprocess.run(["mount", "-o", "remount,ro", str(status)], check=True)
        try:
            wait_until(lambda: daemon.get("/healthz")[0] == 503)
            code, health = daemon.get("/healthz")
            assert code == 503 and health["status"] == "degraded", health
            assert health["storage"]["status"] == f"{status} is on a read-only file system", health
            assert health["storage"]["state"] is None
            assert (
                f"the status folder cannot take a write: {status} is on a read-only file system"
                in health["reasons"]
            )
            _, metrics = daemon.get("/metrics")
            assert 'tfdeclare_storage_writable{folder="status"} 0.0' in metrics, metrics
            assert 'tfdeclare_storage_writable{folder="state"} 1.0' in metrics
            with urllib.request.urlopen(daemon.url + "/", timeout=5) as page:
                html = page.read().decode()
            assert "The status folder cannot take a write" in html
            # a change the daemon must write: the job's file changes, its status cannot follow
            (project / "specs" / "a.yaml").write_text(job("a", count=2))
            wait_until(lambda: "a" in daemon.get("/healthz")[1]["writeFailures"], timeout=30)
            why = daemon.get("/healthz")[1]["writeFailures"]["a"]
            assert why == f"{status / 'a.yaml'} (Read-only file system)", why
            assert "tfdeclare_write_failures 1.0" in daemon.get("/metrics")[1]
        finally:
            subprocess.run(["mount", "-o", "remount,rw", str(status)], check=True)
        wait_until(lambda: daemon.get("/healthz")[0] == 200, timeout=30)
        assert daemon.get("/healthz")[1]["writeFailures"] == {}
        assert "Traceback" not in daemon.text()
    finally:
        daemon.stop()
        cli("delete", "--all", cwd=project)
        subprocess.run(["umount", "-l", str(status)], check=False)


def test_an_unwritable_or_full_state_folder_makes_healthz_degraded_with_the_reason(tmp_path: Path) -> None:
    project = tmp_path
    (project / "tfdeclare.yaml").write_text(CONFIG)
    (project / "specs").mkdir()
    (project / "specs" / "a-out").mkdir()
    (project / "specs" / "a.yaml").write_text(job("a"))
    state = project / ".tfdeclare"
    mount_tmpfs(state, "1m")
    daemon = Daemon(project, "--specs", "specs", "--interval", "1")
    try:
        wait_until(lambda: daemon.get("/healthz")[0] == 200 and "a" in StateStore(state).names())
        # made unwritable, even for root (`chattr +i`): the daemon's lock file, open, stays
        # writable, so the file system cannot be remounted read-only under it
        marked = subprocess.run(["chattr", "+i", str(state)], check=False, capture_output=True)
        if marked.returncode != 0:
            missing(f"chattr +i does not work here: {marked.stderr.decode().strip()}")
        try:
            wait_until(lambda: daemon.get("/healthz")[0] == 503)
            code, health = daemon.get("/healthz")
            assert code == 503 and health["status"] == "degraded", health
            assert health["storage"]["state"] == f"{state} is not writable (permission denied)", health
            assert health["storage"]["status"] is None
            assert (
                f"the state folder cannot take a write: {state} is not writable (permission denied)"
                in health["reasons"]
            ), health
            _, metrics = daemon.get("/metrics")
            assert 'tfdeclare_storage_writable{folder="state"} 0.0' in metrics, metrics
            assert 'tfdeclare_storage_writable{folder="status"} 1.0' in metrics
        finally:
            subprocess.run(["chattr", "-i", str(state)], check=True)
        wait_until(lambda: daemon.get("/healthz")[0] == 200, timeout=30)
        assert daemon.get("/healthz")[1]["storage"]["state"] is None

        fill(state)
        try:
            wait_until(lambda: daemon.get("/healthz")[0] == 503)
            code, health = daemon.get("/healthz")
            why = health["storage"]["state"]
            assert code == 503 and why.startswith(f"{state}: no space left on its disk ("), health
            assert f"the state folder cannot take a write: {why}" in health["reasons"], health
            assert 'tfdeclare_storage_writable{folder="state"} 0.0' in daemon.get("/metrics")[1]
        finally:
            (state / "filler").unlink()
        wait_until(lambda: daemon.get("/healthz")[0] == 200, timeout=30)
        assert "Traceback" not in daemon.text()
    finally:
        daemon.stop()
        cli("delete", "--all", cwd=project)
        subprocess.run(["umount", "-l", str(state)], check=False)
