"""What the machine offers at the moment is a runtime condition of a container job, never a
verdict on its spec file: a daemon started while no Docker engine answers keeps the job
waiting (Pending, ``lastError`` EngineUnreachable, in its status file and ``/jobs``, the
code in ``/healthz``'s ``passErrors``; no file problem) and launches it on the first pass
that finds the engine, the file untouched; an image under ``imagePullPolicy: Never`` that is
not there is ``lastError`` ImageMissing until it is (a ``docker tag`` here, as a ``docker
load`` would bring it). The engine's absence is a proxy socket with nothing behind it
(``tests/engine_proxy.py``), then a proxy to the real engine at the same address. A real
daemon process, real containers."""

from __future__ import annotations

import contextlib
import os
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.conftest import cli
from tests.engine_proxy import EngineProxy
from tests.test_daemon import Daemon, wait_until
from tfdeclare.backends.local.docker_runtime import owner_of
from tfdeclare.shell.lock import ControllerLock

pytestmark = [pytest.mark.docker, pytest.mark.e2e]


def _job(name: str, image: str, extra: dict[str, Any] | None = None) -> str:
    spec = {
        "image": image,
        "command": ["sleep", "300"],
        "replicas": {"worker": {"count": 1, "resources": {"cpus": 0.1, "mem": 64}}},
        **(extra or {}),
    }
    document = {"apiVersion": "tfdeclare/v1", "kind": "TFJob", "metadata": {"name": name}, "spec": spec}
    return yaml.safe_dump(document, sort_keys=False)


def _status(workdir: Path, name: str) -> dict[str, Any]:
    path = workdir / "status" / f"{name}.yaml"
    return (yaml.safe_load(path.read_text()) or {}) if path.exists() else {}


def _error(workdir: Path, name: str) -> str | None:
    error = _status(workdir, name).get("lastError")
    return error["code"] if error else None


@pytest.fixture
def workdir(tmp_path: Path, docker_client: Any) -> Iterator[Path]:
    (tmp_path / "specs").mkdir()
    yield tmp_path
    ours = {"label": [f"tfdeclare.owner={owner_of(tmp_path / '.tfdeclare' / 'local')}"]}
    for container in docker_client.containers.list(ignore_removed=True, all=True, filters=ours):
        container.remove(force=True)


def test_a_daemon_started_without_an_engine_launches_its_jobs_once_one_answers(
    workdir: Path, docker_client: Any, base_image: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    engine = os.environ["DOCKER_HOST"].removeprefix("unix://")
    address = workdir / "engine.sock"  # nothing answers there yet
    monkeypatch.setenv("DOCKER_HOST", f"unix://{address}")
    never = f"tfdeclare-test-never:{uuid.uuid4().hex[:12]}"
    (workdir / "specs" / "g.yaml").write_text(_job("g", base_image))
    (workdir / "specs" / "n.yaml").write_text(_job("n", never, {"imagePullPolicy": "Never"}))
    daemon = Daemon(workdir, "--specs", "specs", "--interval", "1")
    proxy: EngineProxy | None = None
    try:
        wait_until(lambda: _error(workdir, "g") == "EngineUnreachable", 60)
        assert _status(workdir, "g")["phase"] == "Pending"
        assert "no Docker engine answers" in _status(workdir, "g")["lastError"]["detail"]
        health = daemon.get("/healthz")[1]
        assert health["problems"] == [], "not a verdict on the file"
        assert "EngineUnreachable" in [e["code"] for e in health["passErrors"]]
        jobs = {job["name"]: job for job in daemon.get("/jobs")[1]}
        assert jobs["g"]["lastError"]["code"] == "EngineUnreachable" and jobs["g"]["problems"] == []

        proxy = EngineProxy(engine, address)  # the engine answers now; no file was touched
        wait_until(lambda: _status(workdir, "g").get("phase") == "Running", 120)
        assert _status(workdir, "g")["lastError"] is None
        wait_until(lambda: _error(workdir, "n") == "ImageMissing", 60)
        assert _status(workdir, "n")["phase"] == "Pending"
        assert not _status(workdir, "n")["lastError"]["terminal"]

        repository, tag = never.split(":")
        docker_client.images.get(base_image).tag(repository, tag)  # as a `docker load` would
        wait_until(lambda: _status(workdir, "n").get("phase") == "Running", 120)
        assert _status(workdir, "n")["lastError"] is None
        assert daemon.get("/healthz")[1]["passErrors"] == []
        assert "Problems" not in cli("status", cwd=workdir).stdout
    finally:
        daemon.stop()
        if proxy is not None:
            proxy.close()
        import docker.errors

        with contextlib.suppress(docker.errors.ImageNotFound):  # tagged only when it got that far
            docker_client.images.remove(never)


def test_the_background_controller_shows_an_engine_gone_under_its_jobs(
    workdir: Path, docker_client: Any, base_image: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``apply`` leaves its jobs to a background controller: when the engine goes away under
    them, each status file keeps its phase with ``lastError`` EngineUnreachable, and its log
    (controller.log) says so once, not every pass; all clear once it answers again."""
    engine = os.environ["DOCKER_HOST"].removeprefix("unix://")
    address = workdir / "engine.sock"
    proxy = EngineProxy(engine, address)
    monkeypatch.setenv("DOCKER_HOST", proxy.address)
    monkeypatch.setenv("TFDECLARE_BACKGROUND_CONTROLLER", "on")
    (workdir / "specs" / "g.yaml").write_text(_job("g", base_image))
    try:
        applied = cli("apply", "specs", cwd=workdir)
        assert applied.returncode == 0, applied.stderr
        wait_until(lambda: _status(workdir, "g").get("phase") == "Running", 120)
        proxy.close()
        wait_until(lambda: _error(workdir, "g") == "EngineUnreachable", 30)
        assert _status(workdir, "g")["phase"] == "Running"
        log = workdir / ".tfdeclare" / "controller.log"
        wait_until(lambda: f"unix://{address}" in log.read_text(), 30)
        proxy = EngineProxy(engine, address)
        wait_until(lambda: _error(workdir, "g") is None, 60)
        assert _status(workdir, "g")["phase"] == "Running"
        text = log.read_text()
        # what it said of the engine (the controller's lines name its socket) and of the job's
        # error (whichever engine call met the outage first: the listing, an inspect)
        said = [
            line.split(" ", 2)[2]
            for line in text.splitlines()
            if f"unix://{address}" in line or "ERROR tfdeclare.keeper: g: " in line or "cleared: g: " in line
        ]
        assert any(line.startswith("ERROR tfdeclare.keeper: g: ") for line in said), text
        assert len(said) == len(set(said)), text  # each line once, not every pass
        assert any("cleared: g: " in line for line in said), text
    finally:
        proxy.close()
        proxy = EngineProxy(engine, address)  # the engine there, to stop the task
        cli("delete", "--all", cwd=workdir)  # its controller stops the task, then exits
        held = ControllerLock(workdir / ".tfdeclare")
        wait_until(lambda: (held.holder() or {}).get("purpose") != "background controller", 60)
        proxy.close()
