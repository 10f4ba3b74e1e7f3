"""``--prune`` reaches only what it was pointed at: ``apply PATH --prune`` and ``plan PATH
--prune`` delete only the jobs last applied from files under PATH (a file, a folder, standard
input), and the daemon prunes within its own source. The other jobs of the state folder are
listed as outside the paths given, never as "not in the files any more". Real CLI processes,
real local tasks."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import cli, job_yaml, kill_leftovers
from tests.test_daemon import CONFIG, Daemon, status, wait_until

pytestmark = pytest.mark.e2e


@pytest.fixture
def here(tmp_path: Path) -> Iterator[Path]:
    (tmp_path / "tfdeclare.yaml").write_text(CONFIG)
    (tmp_path / "jobs").mkdir()
    yield tmp_path
    cli("delete", "--all", cwd=tmp_path)
    kill_leftovers(tmp_path)


def _names(cwd: Path) -> set[str]:
    """The jobs of the state folder that are not being deleted (a plain apply leaves a
    deleted job's tasks stopping)."""
    shown = json.loads(cli("status", "-o", "json", cwd=cwd).stdout)
    return {job["name"] for job in shown if job["phase"] != "Deleting"}


def _applied(cwd: Path, *args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    if stdin is None:
        done = cli("apply", *args, cwd=cwd)
    else:
        done = subprocess.run(
            [sys.executable, "-m", "tfdeclare", "apply", *args],
            cwd=cwd, input=stdin, capture_output=True, text=True, timeout=120, check=False,
        )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    return done


def test_apply_of_one_file_prunes_only_the_jobs_of_that_file(here: Path) -> None:
    one, two = here / "jobs" / "one.yaml", here / "jobs" / "two.yaml"
    one.write_text(job_yaml("one") + "---\n" + job_yaml("one-old"))
    two.write_text(job_yaml("next-door"))
    _applied(here, "jobs")
    one.write_text(job_yaml("one"))
    planned = cli("plan", "jobs/one.yaml", "--prune", "-o", "json", cwd=here)
    actions = {j["name"]: (j["action"], j["reasons"]) for j in json.loads(planned.stdout)["jobs"]}
    assert actions["one-old"] == ("delete", ["RemovedFromSource"])
    assert actions["next-door"] == ("no-op", ["OutsideScope"])
    assert json.loads(planned.stdout)["options"]["pruneScope"] == {"paths": ["jobs/one.yaml"], "stdin": False}
    text = cli("plan", "jobs/one.yaml", "--prune", cwd=here).stdout
    assert "Prune scope: only jobs last applied from jobs/one.yaml may be deleted." in text
    assert f"= next-door (Running): last applied from {two.resolve()}, outside the paths given" in text
    assert "not in the files any more" not in text.split("Outside the paths given")[1]
    done = _applied(here, "jobs/one.yaml", "--prune")
    assert "- one-old will be deleted" in done.stdout and "next-door will be deleted" not in done.stdout
    assert _names(here) == {"one", "next-door"}
    without = cli("plan", "jobs/one.yaml", cwd=here).stdout  # without --prune: not called an orphan either
    assert "? next-door" not in without and "1 outside the paths given" in without


def test_apply_of_a_folder_prunes_only_below_it_and_the_daemon_only_its_own_folder(here: Path) -> None:
    (here / "jobs" / "a").mkdir()
    (here / "jobs" / "b").mkdir()
    (here / "jobs" / "a" / "x.yaml").write_text(job_yaml("x"))
    (here / "jobs" / "a" / "x2.yaml").write_text(job_yaml("x2"))
    (here / "jobs" / "b" / "y.yaml").write_text(job_yaml("y"))
    _applied(here, "jobs")
    (here / "jobs" / "a" / "x2.yaml").unlink()
    (here / "jobs" / "b" / "y.yaml").unlink()  # gone too, but not below the folder given
    done = _applied(here, "jobs/a", "--prune")
    assert "- x2 will be deleted" in done.stdout and "y will be deleted" not in done.stdout
    assert _names(here) == {"x", "y"}
    # the daemon on jobs/a with --prune: y (applied from jobs/b) is not its to prune
    (here / "jobs" / "a" / "z.yaml").write_text(job_yaml("z"))
    daemon = Daemon(here, "--specs", "jobs/a", "--prune", "--interval", "0.5")
    try:
        wait_until(lambda: status(here, "z") is not None)
        (here / "jobs" / "a" / "z.yaml").unlink()
        wait_until(lambda: status(here, "z") is None, timeout=30)  # its own: pruned after the settle time

        def listed() -> set[str]:
            code, jobs = daemon.get("/jobs")
            assert code == 200
            return {job["name"] for job in (jobs["jobs"] if isinstance(jobs, dict) else jobs)}

        # /jobs shows the pass's snapshot, published when the pass that pruned z ends
        wait_until(lambda: "z" not in listed(), timeout=30)
        assert {"x", "y"} <= listed()
    finally:
        daemon.stop()
    assert "y" in _names(here)


def test_apply_from_stdin_prunes_only_jobs_last_applied_from_stdin(here: Path) -> None:
    (here / "jobs" / "f.yaml").write_text(job_yaml("from-file"))
    _applied(here, "jobs")
    _applied(here, "-", stdin=job_yaml("piped") + "---\n" + job_yaml("piped-old"))
    done = _applied(here, "-", "--prune", stdin=job_yaml("piped"))
    assert "- piped-old will be deleted" in done.stdout and "from-file will be deleted" not in done.stdout
    assert _names(here) == {"from-file", "piped"}
    done = _applied(here, "jobs", "--prune")  # and a folder's prune leaves the piped job alone
    assert "will be deleted" not in done.stdout
    assert _names(here) == {"from-file", "piped"}
