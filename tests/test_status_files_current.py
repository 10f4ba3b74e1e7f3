"""Status files stay current, or say they are not (docs/robustness.md). A status file the
daemon wrote and that is gone from the folder (deleted by hand, or a fresh volume mounted over
the status folder) is written again while the job does not change: the pass writes the files
of the jobs it changed, and then those of every job it wrote that are no longer there
(``StatusWriter.write_missing``). A status file that cannot be replaced (a read-only folder) is
stale: ``tfdeclare status`` shows the job from its record and says so, and never calls the
files current. The real daemon in folder mode, real task processes, a real tmpfs."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

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


def test_a_status_file_that_cannot_be_written_is_shown_stale_from_the_record(tmp_path: Path) -> None:
    project = tmp_path
    (project / "tfdeclare.yaml").write_text(CONFIG)
    (project / "specs" / "a-out").mkdir(parents=True)
    (project / "specs" / "a.yaml").write_text(job("a"))
    folder = project / "status"
    folder.mkdir()
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=1m,mode=0755", "tmpfs", str(folder)], check=False
    )
    if done.returncode != 0:
        missing("cannot mount a tmpfs here (not root)")
    daemon = Daemon(project, "--specs", "specs", "--interval", "1")
    try:
        wait_until(lambda: (status(project, "a") or {}).get("phase") == "Running", timeout=60)
        shown = cli("status", cwd=project)
        assert "(status files kept current by daemon" in shown.stderr, shown.stderr
        subprocess.run(["mount", "-o", "remount,ro", str(folder)], check=True)
        try:
            old = status(project, "a") or {}
            (project / "specs" / "a.yaml").write_text(job("a", count=2))  # its status must change
            wait_until(lambda: "a" in daemon.get("/healthz")[1]["writeFailures"], timeout=30)
            shown = cli("status", cwd=project)
            assert shown.returncode == 0, shown.stderr
            why = f"{folder / 'a.yaml'} (Read-only file system)"
            assert f"a: status file stale: cannot write {why}; shown from its record" in shown.stderr, (
                shown.stderr
            )
            assert "kept current" not in shown.stderr and "1 status file could not be written" in shown.stderr
            assert "a  " in shown.stdout  # its row, from its record

            def listed() -> dict[str, Any]:
                (document,) = json.loads(cli("status", "-o", "json", cwd=project).stdout)
                return document  # type: ignore[no-any-return]

            wait_until(lambda: listed()["replicas"]["worker"]["desired"] == 2)  # as the record says now
            assert listed()["specHash"] != old["specHash"] and status(project, "a") == old  # the file: stale
            one = cli("status", "a", cwd=project)
            assert "status file stale" in one.stderr and "kept current" not in one.stderr, one.stderr
        finally:
            subprocess.run(["mount", "-o", "remount,rw", str(folder)], check=True)
        wait_until(
            lambda: (status(project, "a") or {}).get("replicas", {}).get("worker", {}).get("desired") == 2
        )
        wait_until(lambda: "stale" not in cli("status", cwd=project).stderr, timeout=30)
        assert "(status files kept current by daemon" in cli("status", cwd=project).stderr
    finally:
        daemon.stop()
        subprocess.run(["umount", "-l", str(folder)], check=False)
        cli("delete", "--all", cwd=project)
