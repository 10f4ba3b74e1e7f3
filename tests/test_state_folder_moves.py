"""A state folder never changes silently (issue 29, finding 9): a ``--config`` elsewhere (or
``TFDECLARE_STATE_DIR``) moves it, and ``plan``/``apply`` say which one they use and why; a job
running under another state folder of this user is found (``tfdeclare.shell.statedirs``):
``plan`` warns, naming that folder and its backend, and ``apply`` refuses to start a second
copy, naming how to go on. The other folder is only read: its lock is never taken. Real CLI
processes and real task processes."""

from __future__ import annotations

import fcntl
import html
import json
import os
import urllib.request
from pathlib import Path

import pytest

from tests.chaos import local_tasks
from tests.conftest import cli
from tests.test_daemon import Daemon, wait_until
from tests.test_e2e_local import CONFIG, project, spec
from tfdeclare.shell.store import StateStore

__all__ = ["project"]  # the fixture

pytestmark = pytest.mark.e2e


def _other_config(project: Path, body: str) -> str:
    (project / "other").mkdir(exist_ok=True)
    (project / "other" / "tfdeclare.yaml").write_text(body)
    return "other/tfdeclare.yaml"


def test_a_config_elsewhere_moves_the_state_folder_visibly_and_never_starts_a_second_copy(
    project: Path, state_folder_registry: Path
) -> None:
    (project / "specs" / "a.yaml").write_text(spec("a", {"worker": (1, "serve")}))
    first = cli("apply", "specs", cwd=project)
    assert first.returncode == 0, first.stdout + first.stderr
    assert "note: state folder" not in first.stderr, "the default folder needs no note"
    registry = json.loads((state_folder_registry / "state-dirs.json").read_text())
    assert [e["path"] for e in registry["stateDirs"]] == [os.path.realpath(project / ".tfdeclare")]
    assert (state_folder_registry.stat().st_mode & 0o777) == 0o700

    # as a new user would: another config, another backend, the same specs
    other = _other_config(project, "backend: mesos\nmesos: {master: 'http://127.0.0.1:9'}\n")
    moved = project / "other" / ".tfdeclare"
    default = project / ".tfdeclare"
    with open(default / "lock", "rb") as held:  # a controller holds it: it must not matter
        fcntl.flock(held, fcntl.LOCK_EX | fcntl.LOCK_NB)
        planned = cli("plan", "specs", "--config", other, cwd=project)
        applied = cli("apply", "specs", "--config", other, cwd=project)
    assert planned.returncode == 0, planned.stdout + planned.stderr
    assert "+ a will be created" in planned.stdout
    assert f"note: state folder {moved} (from --config {other}: its stateDir (.tfdeclare) is relative" in (
        planned.stderr
    )
    assert (
        f"warning: job a would be created under state folder {moved}, but it exists under state folder "
        f"{os.path.realpath(default)} (backend local, Running): a second copy; would be refused by apply"
    ) in planned.stderr, planned.stderr
    assert applied.returncode == 1, applied.stdout + applied.stderr
    assert "error: nothing applied: a already exist under another state folder" in applied.stderr
    assert f"`tfdeclare delete a --state-dir {os.path.realpath(default)}` first" in applied.stderr
    assert "Traceback" not in applied.stderr and "holds the state folder lock" not in applied.stderr
    assert "a" not in StateStore(moved).names(), "nothing applied under the other folder"
    assert len([t for t in local_tasks(project) if t[0] == "a"]) == 1, "one copy runs"

    # the environment moves it too, and says so
    env_moved = cli("plan", "specs", cwd=project, env={"TFDECLARE_STATE_DIR": str(project / "elsewhere")})
    assert f"note: state folder {project / 'elsewhere'} (from TFDECLARE_STATE_DIR)" in env_moved.stderr
    assert "exists under state folder" in env_moved.stderr

    # once it is deleted where it runs, the other folder may have it
    assert cli("delete", "a", cwd=project).returncode == 0
    local = _other_config(project, CONFIG)
    again = cli("apply", "specs", "--config", local, cwd=project)
    assert again.returncode == 0, again.stdout + again.stderr
    assert "exists under" not in again.stderr
    assert "a" in StateStore(moved).names()
    assert cli("delete", "--all", "--config", local, cwd=project).returncode == 0


def test_a_job_finished_elsewhere_with_the_same_spec_is_a_warning_only(project: Path) -> None:
    (project / "specs" / "done.yaml").write_text(spec("done", {"worker": (1, "exit=0")}))
    assert cli("apply", "specs", "--wait", "--timeout", "60", cwd=project).returncode == 0
    other = _other_config(project, CONFIG)
    planned = cli("plan", "specs", "--config", other, cwd=project)
    assert "warning: job done already finished with this very spec under state folder" in planned.stderr
    assert "(backend local, Succeeded); creating it under" in planned.stderr
    assert "would be refused" not in planned.stderr
    applied = cli("apply", "specs", "--config", other, "--wait", "--timeout", "60", cwd=project)
    assert applied.returncode == 0, applied.stdout + applied.stderr
    assert cli("delete", "--all", "--config", other, cwd=project).returncode == 0


def test_a_registry_that_is_a_link_or_not_ours_is_not_used(
    project: Path, state_folder_registry: Path
) -> None:
    target = project / "elsewhere-registry"
    target.mkdir()
    state_folder_registry.parent.mkdir(parents=True, exist_ok=True)
    state_folder_registry.symlink_to(target)
    (project / "specs" / "a.yaml").write_text(spec("a", {"worker": (1, "serve")}))
    applied = cli("apply", "specs", cwd=project)
    assert applied.returncode == 0, applied.stdout + applied.stderr
    assert (
        f"cannot record this state folder for other commands to find: {state_folder_registry} is a link"
        in (applied.stderr)
    )
    assert list(target.iterdir()) == []


def test_a_daemon_under_another_state_folder_does_not_start_a_second_copy(project: Path) -> None:
    (project / "specs" / "a.yaml").write_text(spec("a", {"worker": (1, "serve")}))
    assert cli("apply", "specs", cwd=project).returncode == 0
    other = _other_config(project, CONFIG)
    daemon = Daemon(project, "--specs", "specs", "--config", other, "--interval", "1")
    try:
        wait_until(lambda: daemon.get("/healthz")[1]["lastPassAt"] is not None)
        code, health = daemon.get("/healthz")
        assert code == 503 and health["status"] == "degraded", health
        why = health["notStarted"]["a"]
        assert why.startswith(
            f"not started: it exists under state folder {os.path.realpath(project / '.tfdeclare')}"
        )
        assert "state folder" in daemon.text() and "(from --config other/tfdeclare.yaml" in daemon.text()
        # a problem of its file, wherever problems show, until it is resolved
        _, listed = daemon.get("/jobs?problems=true")
        (problem,) = listed["problems"]
        assert problem["kind"] == "not-started" and problem["jobs"] == ["a"], problem
        assert problem["path"].endswith("specs/a.yaml") and why in problem["message"], problem
        assert 'tfdeclare_source_problems{kind="not-started"} 1' in daemon.get("/metrics")[1]
        shown = cli("status", "--config", other, cwd=project)
        assert "a.yaml: not-started (holds back a)" in shown.stdout, shown.stdout + shown.stderr
        with urllib.request.urlopen(daemon.url + "/", timeout=5) as answer:
            text = html.unescape(answer.read().decode())
        assert '<p class="Failed alert" role="alert" data-reason="notStarted">Job a: not started' in text
        for _ in range(2):  # passes go on (one a second): still one copy
            last = daemon.get("/healthz")[1]["lastPassAt"]
            wait_until(
                lambda last=last: daemon.get("/healthz")[1]["lastPassAt"] != last, 30, what="another pass"
            )
        assert len([t for t in local_tasks(project) if t[0] == "a"]) == 1

        assert cli("delete", "a", cwd=project).returncode == 0  # where it ran: now the daemon may
        wait_until(lambda: daemon.get("/healthz")[0] == 200, timeout=30)
        assert daemon.get("/jobs?problems=true")[1]["problems"] == []
        assert 'tfdeclare_source_problems{kind="not-started"} 0' in daemon.get("/metrics")[1]
        wait_until(lambda: len([t for t in local_tasks(project) if t[0] == "a"]) == 1)
        assert "a" in StateStore(project / "other" / ".tfdeclare").names()
    finally:
        daemon.stop()
    assert cli("delete", "--all", "--config", other, cwd=project).returncode == 0
