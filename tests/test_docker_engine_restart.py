"""A real engine restart under running container jobs, as systemd does it: Debian's dockerd
gets SIGTERM, removes its socket but goes on answering on the connections it has while it
stops its containers (one ends at once, exit 143; one that ignores SIGTERM is killed after
the stop timeout, 137), and closes them after the last one; the test starts it again on the
same data.

The backend, looking as a controller's passes do, never judges the 143 while the engine still
answers (where its inspect of the container answers too, the task is reported running, saying
why: ``engine_outages.HOLD_S``); once the engine is back, both ends are EngineRestart. (Here
the engine's inspect fails in that window, its listing not, so the old driver met the window
only when an inspect got through: ``tests/test_local_docker.py`` has the window for certain,
through a proxy.)

A daemon: while the engine is away the job stays Running with ``lastError`` EngineUnreachable in its status file
and, once that has stood 20 s, ``/healthz`` is degraded naming it and
``tfdeclare_backend_connected{backend="local"}`` is 0. Once it is back, both ends are the
engine's (EngineRestart, a platform restart), not the job's: ``restarts`` stays 0 although the
chief's 143 was seen with the engine up, and everything clears. A private engine of this test
(``tests/private_dockerd.py``): the shared one is never stopped."""

from __future__ import annotations

import re
import signal
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests import docker_env
from tests.backend_conformance import Harness, gang, launches, look, place_soon, wait_for
from tests.conftest import cli, worker_ports
from tests.private_dockerd import PrivateEngine
from tests.test_daemon import Daemon, wait_until
from tfdeclare.backends.base import BackendError
from tfdeclare.backends.local.backend import LocalBackend, LocalCapacity
from tfdeclare.backends.local.config import LocalRuntime
from tfdeclare.core.enums import EndCause, TaskState
from tfdeclare.core.errors import UNREACHABLE_REPORT_S

pytestmark = [pytest.mark.docker, pytest.mark.e2e, pytest.mark.slow]

IGNORES_TERM = (
    "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); print('ready', flush=True); "
    "time.sleep(600)"
)


@pytest.fixture
def engine(monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[PrivateEngine, str]]:
    engine = PrivateEngine()
    try:
        engine.start()
        client = engine.client()
        try:
            image = docker_env.base_image(client)  # imported from the cached root filesystem
        finally:
            client.close()
        monkeypatch.setenv("DOCKER_HOST", engine.address)
        yield engine, image
    finally:
        engine.close()


def test_a_signals_end_seen_while_the_engine_stops_is_the_engines(
    tmp_path: Path, engine: tuple[PrivateEngine, str]
) -> None:
    dockerd, image = engine
    first, last = worker_ports()
    capacity = LocalCapacity(cpus=4, mem_mib=4096, gpus=0, port_first=first, port_last=last)
    harness = Harness(
        lambda: LocalBackend(tmp_path / "state", capacity, runtime=LocalRuntime.DOCKER),
        tmp_path,
        image=image,
        python="python3",
    )
    backend = harness.make()  # no watch thread: one connection to the engine, as in one pass
    try:
        quick = place_soon(backend, gang("quick", 1))
        (ends,) = launches(harness, quick, harness.sleeper)  # SIGTERM ends it: 143
        backend.launch(quick, [ends])
        slow = place_soon(backend, gang("slow", 1))
        (killed,) = launches(harness, slow, ["python3", "-c", IGNORES_TERM])  # killed: 137
        backend.launch(slow, [killed])
        wait_for(
            backend, lambda ts: all(ts[t.task_id].state is TaskState.RUNNING for t in (ends, killed)), 60
        )
        wait_until(lambda: b"ready" in backend.read_log(killed.task_id).data, 60)  # SIGTERM ignored now

        assert dockerd.process is not None
        dockerd.process.send_signal(signal.SIGTERM)  # as systemd stops it
        held: list[str] = []
        while dockerd.process.poll() is None:
            try:
                seen = {t.task_id: t for t in look(backend)}
            except BackendError:  # it has closed its API (or a call of the look found it so)
                time.sleep(0.3)
                continue
            task = seen[ends.task_id]
            assert not task.state.ended, f"judged on first sight with the engine up: {task}"
            if "said once the Docker engine has answered" in task.message:
                held.append(task.message)
            time.sleep(0.3)
        assert all("exit code 143" in message for message in held), held
        with pytest.raises(BackendError):  # a controller goes on looking: the engine is away
            look(backend)

        dockerd.start()  # on the same data: both containers there, ended
        seen = wait_for(backend, lambda ts: all(ts[t.task_id].state.ended for t in (ends, killed)), 60)
        for task in (ends, killed):
            assert seen[task.task_id].state is TaskState.FAILED
            assert seen[task.task_id].cause is EndCause.ENGINE_RESTART, seen[task.task_id]
        assert seen[ends.task_id].exit_code == 143 and seen[killed.task_id].exit_code == 137
    finally:
        backend.close()


def _job(image: str) -> str:
    spec = {
        "image": image,
        "restartPolicy": "OnFailure",
        "backoffLimit": 4,
        "replicas": {
            "chief": {"count": 1, "resources": {"cpus": 0.1, "mem": 64}, "command": ["sleep", "600"]},
            "worker": {
                "count": 1,
                "resources": {"cpus": 0.1, "mem": 64},
                "command": ["python3", "-c", IGNORES_TERM],
            },
        },
    }
    document = {"apiVersion": "tfdeclare/v1", "kind": "TFJob", "metadata": {"name": "e"}, "spec": spec}
    return yaml.safe_dump(document, sort_keys=False)


def _status(workdir: Path) -> dict[str, Any]:
    path = workdir / "status" / "e.yaml"
    return (yaml.safe_load(path.read_text()) or {}) if path.exists() else {}


def _connected(daemon: Daemon) -> float | None:
    found = re.search(
        r'^tfdeclare_backend_connected\{backend="local"\} (\S+)$', daemon.get("/metrics")[1], re.M
    )
    return float(found.group(1)) if found else None


def _running(workdir: Path) -> bool:
    status = _status(workdir)
    tasks = status.get("tasks") or []
    return (
        status.get("phase") == "Running" and len(tasks) == 2 and all(t["state"] == "running" for t in tasks)
    )


def test_an_engine_stopped_and_started_again_is_a_platform_event_shown_meanwhile(
    tmp_path: Path, engine: tuple[PrivateEngine, str]
) -> None:
    dockerd, image = engine
    (tmp_path / "specs").mkdir()
    (tmp_path / "specs" / "e.yaml").write_text(_job(image))
    daemon = Daemon(tmp_path, "--specs", "specs", "--interval", "1")
    try:
        wait_until(lambda: _running(tmp_path), 120)
        worker = ["logs", "e", "--task", "worker-0"]
        wait_until(lambda: "ready" in cli(*worker, cwd=tmp_path).stdout, 60)  # SIGTERM ignored now
        first = {t["role"]: t["id"] for t in _status(tmp_path)["tasks"]}

        dockerd.stop()  # SIGTERM: the chief ends at once, the worker after the stop timeout
        wait_until(lambda: (_status(tmp_path).get("lastError") or {}).get("code") == "EngineUnreachable", 30)
        away = _status(tmp_path)
        assert away["phase"] == "Running" and away["restarts"] == 0, away
        wait_until(lambda: daemon.get("/healthz")[0] == 503, UNREACHABLE_REPORT_S + 15)
        health = daemon.get("/healthz")[1]
        assert [r for r in health["reasons"] if r.startswith("EngineUnreachable: ")], health["reasons"]
        assert _connected(daemon) == 0

        dockerd.start()  # on the same data: the containers are there, ended
        wait_until(
            lambda: _running(tmp_path) and _status(tmp_path)["tasks"][0]["id"] not in first.values(), 120
        )
        after = _status(tmp_path)
        assert after["restarts"] == 0, after  # not counted against backoffLimit
        assert after["platformRestarts"] >= 1, after
        assert "its container ended with the Docker engine" in daemon.text(), daemon.text()[-4000:]
        wait_until(lambda: daemon.get("/healthz")[0] == 200, 30)
        assert _status(tmp_path)["lastError"] is None and _connected(daemon) == 1
        assert daemon.text().count("no Docker engine answers") <= 6, daemon.text()
    finally:
        daemon.stop()
