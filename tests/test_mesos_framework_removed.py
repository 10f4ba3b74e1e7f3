"""A framework the Mesos master removed (its failover timeout ran out while no controller ran)
reaches the user's surfaces like any backend error: ``apply`` exits 1 and ``apply -o json``
still writes its document, with the FrameworkRefused problem; the job's status file has it as
``lastError`` and the job is Restarting (the master killed its tasks), never Running; nothing
is launched while policy ``onFrameworkRemoved`` is ``fail``; the daemon keeps running, its
``/healthz`` degraded with the reason. Once an operator sets ``newFramework`` the job runs
again under a new framework id. The emulator's master over real HTTP, real task processes,
the real CLI and daemon."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.conftest import cli, job_yaml
from tests.mesos_emulator import Emulator
from tests.mesos_fixtures import config_yaml, emulated_project, eventually, running_on_agents, start_emulator
from tests.test_daemon import Daemon

pytestmark = pytest.mark.slow  # real task processes behind the emulator, a CLI and a daemon


@pytest.fixture
def project(tmp_path: Path) -> Iterator[tuple[Path, Emulator]]:
    emulator = start_emulator(tmp_path)
    with emulated_project(tmp_path, emulator) as project:
        yield project


def framework_id(root: Path) -> str:
    return str(json.loads((root / ".tfdeclare" / "mesos" / "framework.json").read_text())["frameworkId"])


def removed_while_away(root: Path, emulator: Emulator, job: str) -> tuple[str, set[str]]:
    """``job`` applied and running, then its framework removed by the master while no
    controller runs (the failover timeout ran out). Its framework id and every task id the
    emulator ever saw."""
    (root / "specs" / f"{job}.yaml").write_text(job_yaml(job, command="[sleep, '300']"))
    applied = cli("apply", "specs", cwd=root)
    assert applied.returncode == 0, applied.stderr
    eventually(lambda: len(running_on_agents(emulator)) == 1, timeout=30)
    old = framework_id(root)
    eventually(lambda: emulator.expire_failover(old))  # no controller runs: it is disconnected
    eventually(lambda: not running_on_agents(emulator))  # the master killed its tasks
    return old, set(emulator.tasks())


def status_of(root: Path, job: str) -> dict[str, Any]:
    document = yaml.safe_load((root / "status" / f"{job}.yaml").read_text())
    assert isinstance(document, dict)
    return document


def test_apply_reports_a_removed_framework_in_its_document_and_the_status_file(
    project: tuple[Path, Emulator],
) -> None:
    root, emulator = project
    old, seen = removed_while_away(root, emulator, "fwgone")

    result = cli("apply", "specs", "-o", "json", cwd=root)
    assert result.returncode == 1, result.stdout + result.stderr
    assert "Traceback" not in result.stderr
    outcome = json.loads(result.stdout)  # the document is written, as for any backend error
    codes = {(p["code"], p.get("job")) for p in outcome["problems"]}
    assert ("FrameworkRefused", "fwgone") in codes, outcome["problems"]
    assert all(p["terminal"] for p in outcome["problems"] if p["code"] == "FrameworkRefused")
    [job] = outcome["jobs"]
    # its tasks were killed with the framework: not Running; it waits to restart
    assert job["phase"] == "Restarting" and "FrameworkRefused" in job["message"], job
    document = status_of(root, "fwgone")
    assert document["phase"] == "Restarting"
    assert document["lastError"]["code"] == "FrameworkRefused" and document["lastError"]["terminal"]
    assert f"removed framework {old}" in document["lastError"]["detail"]
    assert [t["state"] for t in document["tasks"]] != ["running"]
    # one job never runs twice: with policy fail nothing is launched, and the id is kept
    assert set(emulator.tasks()) == seen and not running_on_agents(emulator)
    assert framework_id(root) == old
    plain = cli("apply", "specs", cwd=root)
    assert plain.returncode == 1 and "removed framework" in plain.stderr and "Traceback" not in plain.stderr
    refreshed = cli("status", "--refresh", cwd=root)
    assert refreshed.returncode == 1 and "removed framework" in refreshed.stderr, refreshed.stderr
    assert "Traceback" not in refreshed.stderr

    # the operator's choice: a new framework; the job restarts under it
    (root / "tfdeclare.yaml").write_text(config_yaml(emulator.url, onFrameworkRemoved="newFramework"))
    again = cli("apply", "specs", cwd=root)
    assert again.returncode == 0, again.stderr
    eventually(lambda: len(running_on_agents(emulator)) == 1, timeout=30)
    assert framework_id(root) != old
    assert not set(running_on_agents(emulator)) & seen  # a new task, not an old one
    eventually(lambda: status_of(root, "fwgone")["phase"] == "Running", timeout=30)
    assert status_of(root, "fwgone")["lastError"] is None


def test_the_daemon_stays_up_and_healthz_says_the_framework_was_removed(
    project: tuple[Path, Emulator],
) -> None:
    root, emulator = project
    old, seen = removed_while_away(root, emulator, "fwdaemon")
    daemon = Daemon(root, "--specs", "specs", "--interval", "1")
    try:
        eventually(lambda: daemon.get("/healthz")[0] == 503, timeout=30)
        passes = daemon.passes()
        eventually(lambda: daemon.passes() >= passes + 2, timeout=30)  # it goes on passing
        code, body = daemon.get("/healthz")
        assert code == 503 and body["status"] == "degraded"
        reasons = [r for r in body["reasons"] if r.startswith("FrameworkRefused: ")]
        assert len(reasons) == 1 and f"removed framework {old}" in reasons[0], body["reasons"]
        assert "FrameworkRefused" in {e["code"] for e in body["passErrors"]}
        assert daemon.proc.poll() is None, "no crash loop: the daemon runs on"
        assert "internal error" not in daemon.text()
        _, listing = daemon.get("/jobs")
        [job] = [j for j in listing if j["name"] == "fwdaemon"]
        assert job["lastError"]["code"] == "FrameworkRefused" and job["phase"] == "Restarting"
        assert set(emulator.tasks()) == seen and not running_on_agents(emulator)
    finally:
        assert daemon.stop() == 0
