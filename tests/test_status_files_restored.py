"""A status file the daemon wrote and that is gone from the folder (deleted by hand, or a fresh
volume mounted over the status folder) is written again while the job does not change: the
pass writes the files of the jobs it changed, and then those of every job it wrote that are no
longer there (``StatusWriter.write_missing``). The real daemon in folder mode, a real task
process, a real tmpfs."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from tests.components import missing
from tests.conftest import cli
from tests.test_daemon import CONFIG, Daemon, job, status, wait_until

pytestmark = pytest.mark.e2e


def test_a_deleted_status_file_of_a_steady_job_is_written_again(tmp_path: Path) -> None:
    project = tmp_path
    (project / "tfdeclare.yaml").write_text(CONFIG)
    for name in "ab":
        (project / "specs" / f"{name}-out").mkdir(parents=True)
        (project / "specs" / f"{name}.yaml").write_text(job(name))
    daemon = Daemon(project, "--specs", "specs", "--interval", "1")
    mounted = False
    try:
        wait_until(
            lambda: all((status(project, n) or {}).get("phase") == "Running" for n in "ab"), timeout=60
        )
        before = status(project, "a")
        passes = daemon.passes()
        (project / "status" / "a.yaml").unlink()
        wait_until(lambda: daemon.passes() >= passes + 2)  # the resync passes: "a" has not changed
        assert status(project, "a") == before, daemon.text()[-3000:]

        # a fresh, empty volume over the status folder: both files come back on it
        done = subprocess.run(
            ["mount", "-t", "tmpfs", "-o", "size=1m,mode=0755", "tmpfs", str(project / "status")], check=False
        )
        if done.returncode != 0:
            missing("cannot mount a tmpfs here (not root)")
        mounted = True
        wait_until(
            lambda: (project / "status" / "a.yaml").exists() and (project / "status" / "b.yaml").exists()
        )
        assert (status(project, "b") or {}).get("phase") == "Running"
        code, health = daemon.get("/healthz")
        assert code == 200 and health["writeFailures"] == {}, health
        assert "Traceback" not in daemon.text()
    finally:
        daemon.stop()
        if mounted:
            subprocess.run(["umount", "-l", str(project / "status")], check=False)
        cli("delete", "--all", cwd=project)
