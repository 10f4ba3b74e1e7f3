"""An image pull never holds up the other jobs, the daemon's stop, or the next daemon: it runs
in the task's own detached launcher (``backends/local/launcher.py``), beside the passes.

A real registry (``tests/registry_server.py``) behind a proxy that trickles the one layer of
the test's image (``tests/slow_registry.py``), or a registry that accepts and never answers;
the real Docker engine; the real ``tfdeclare daemon`` and ``apply`` as processes. The layer
is small (256 kB) and trickles at 2 kB/s: a pull of minutes, until the test lets it through
at full speed."""

from __future__ import annotations

import json
import signal
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.conftest import cli
from tests.registry_server import registry_server
from tests.slow_registry import SilentRegistry, TrickleProxy
from tests.test_daemon import Daemon, wait_until
from tfdeclare.backends.local.docker_runtime import owner_of

pytestmark = [pytest.mark.docker, pytest.mark.e2e]

LAYER_BYTES = 262_144


@pytest.fixture(scope="module")
def registry(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    with registry_server(tmp_path_factory.mktemp("registry")) as address:
        yield address


@pytest.fixture(scope="module")
def pushed(registry: str, docker_client: Any, base_image: str) -> Iterator[str]:
    """``tfdeclare-test/slow:v1`` in the registry (its repository and tag): the base image and
    a layer of random bytes; not on the engine afterwards."""
    repository = f"{registry}/tfdeclare-test/slow"
    command = ["sh", "-c", f"head -c {LAYER_BYTES} /dev/urandom > /payload"]
    container = docker_client.containers.create(base_image, command, network_mode="none")
    try:
        container.start()
        assert container.wait(timeout=120)["StatusCode"] == 0
        container.commit(repository=repository, tag="v1")
    finally:
        container.remove(force=True)
    for event in docker_client.api.push(repository, tag="v1", stream=True, decode=True):
        assert "error" not in event, event
    docker_client.api.remove_image(f"{repository}:v1")
    yield "tfdeclare-test/slow:v1"


@pytest.fixture
def proxy(registry: str, pushed: str, docker_client: Any, workdir: Path) -> Iterator[TrickleProxy]:
    with TrickleProxy(registry, rate=2048.0) as trickle:
        try:
            yield trickle
        finally:
            trickle.rate = None
            _clean(docker_client, workdir, f"{trickle.address}/{pushed}")


def _clean(docker_client: Any, workdir: Path, image: str) -> None:
    import docker.errors

    ours = {"label": [f"tfdeclare.owner={owner_of(workdir / '.tfdeclare' / 'local')}"]}
    for container in docker_client.containers.list(ignore_removed=True, all=True, filters=ours):
        container.remove(force=True)
    try:
        docker_client.images.remove(image, force=True)
    except docker.errors.ImageNotFound:
        pass


def _job(name: str, image: str, command: list[str], count: int = 1) -> str:
    spec = {
        "image": image,
        "command": command,
        "backoffLimit": 0,
        "replicas": {"worker": {"count": count, "resources": {"cpus": 0.1, "mem": 64}}},
    }
    document = {"apiVersion": "tfdeclare/v1", "kind": "TFJob", "metadata": {"name": name}, "spec": spec}
    return yaml.safe_dump(document, sort_keys=False)


def _task(workdir: Path, name: str) -> dict[str, Any]:
    """The job's first task in its status file ({} while there is none)."""
    path = workdir / "status" / f"{name}.yaml"
    if not path.exists():
        return {}
    tasks: list[dict[str, Any]] = (yaml.safe_load(path.read_text()) or {}).get("tasks") or [{}]
    return tasks[0]


def _phase(workdir: Path, name: str) -> str:
    path = workdir / "status" / f"{name}.yaml"
    return str((yaml.safe_load(path.read_text()) or {}).get("phase")) if path.exists() else ""


def _launcher_pid(workdir: Path, prefix: str = "a.") -> int:
    """The pid of the launcher of the tasks whose ids start with ``prefix`` (one for them all)."""
    folders = [p for p in (workdir / ".tfdeclare" / "local" / "tasks").iterdir() if p.name.startswith(prefix)]
    (pid,) = {int(json.loads((folder / "launcher.json").read_text())["pid"]) for folder in folders}
    return pid


def test_a_slow_pull_holds_up_no_other_job_no_stop_and_is_adopted_by_the_next_daemon(
    workdir: Path, proxy: TrickleProxy, pushed: str, base_image: str, docker_client: Any
) -> None:
    slow = f"{proxy.address}/{pushed}"
    (workdir / "specs" / "a.yaml").write_text(_job("a", slow, ["sh", "-c", "test -s /payload && echo a-ran"]))
    (workdir / "specs" / "b.yaml").write_text(_job("b", base_image, ["sleep", "300"]))
    daemon = Daemon(workdir, "--specs", "specs")
    try:
        # B runs while A pulls, and A's status says how far its pull is.
        wait_until(lambda: _task(workdir, "b").get("state") == "running", timeout=20)
        assert proxy.sending == 1 and proxy.sent < LAYER_BYTES, "A is still pulling"
        wait_until(lambda: "kB fetched" in str(_task(workdir, "a").get("message")), timeout=20)
        a = _task(workdir, "a")
        assert a["state"] == "starting", a
        assert a["message"].startswith(f"pulling {slow}: ") and " kB of 26" in a["message"], a["message"]
        assert a["message"].endswith(" kB fetched, 1 of 1 layer(s) to go"), a["message"]
        launcher = _launcher_pid(workdir)

        # SIGTERM: the daemon ends at once, the pull goes on.
        # (Daemon.stop fails after 45 s: the trickled pull would take 128 s)
        assert daemon.stop(signal.SIGTERM) == 0, daemon.text()
        time.sleep(1)
        assert proxy.sending == 1, "the pull outlives the daemon"

        # SIGKILL of the next daemon mid-pull, then a third: the one pull is adopted.
        second = Daemon(workdir, "--specs", "specs")
        time.sleep(1.5)
        second.stop(signal.SIGKILL)
        daemon = Daemon(workdir, "--specs", "specs")
        time.sleep(1.5)
        assert _launcher_pid(workdir) == launcher, "adopted, not started again"
        assert proxy.sending == 1 and list(proxy.trickled.values()) == [1], proxy.trickled
        before = proxy.sent
        wait_until(lambda: proxy.sent > before, timeout=10)  # still pulling, the same download
        proxy.rate = None  # the registry is fast again
        wait_until(lambda: _phase(workdir, "a") == "Succeeded", timeout=60)
        assert list(proxy.trickled.values()) == [1], "the engine pulled the layer once"
        assert _phase(workdir, "b") == "Running"
    finally:
        daemon.stop(signal.SIGTERM)
    logs = cli("logs", "a", cwd=workdir)
    assert "a-ran" in logs.stdout, logs.stdout + logs.stderr
    deleted = cli("delete", "--all", cwd=workdir, timeout=60)
    assert deleted.returncode == 0, deleted.stdout + deleted.stderr


def test_a_pull_past_its_timeout_fails_its_task_and_apply_runs_the_other_jobs_meanwhile(
    workdir: Path, base_image: str, docker_client: Any
) -> None:
    (workdir / "tfdeclare.yaml").write_text("local:\n  pullTimeoutSeconds: 4\n")
    with SilentRegistry() as silent:
        image = f"{silent.address}/tfdeclare-test/never:v1"
        (workdir / "specs" / "a.yaml").write_text(_job("a", image, ["true"], count=2))
        (workdir / "specs" / "b.yaml").write_text(_job("b", base_image, ["sh", "-c", "sleep 1; echo b-ran"]))
        try:
            applied = cli("apply", "specs", "--wait", "--timeout", "60", cwd=workdir, timeout=90)
            assert applied.returncode == 1, applied.stdout + applied.stderr  # a failed
            assert silent.accepted >= 1
        finally:
            _clean(docker_client, workdir, image)
    a, b = _task(workdir, "a"), _task(workdir, "b")
    assert _phase(workdir, "a") == "Failed" and _phase(workdir, "b") == "Succeeded"
    reason = f"cannot pull image {image}: not done within 4 s (local.pullTimeoutSeconds)"
    assert a["message"] == f"{reason}; nothing fetched yet", a
    job = yaml.safe_load((workdir / "status" / "a.yaml").read_text())
    assert reason in job["message"], job["message"]  # the job's own status says why
    shown = f"tfdeclare: cannot pull {image}: not done within 4 s (local.pullTimeoutSeconds)"
    assert applied.stderr.count(shown) == 1, applied.stderr  # one launch, one pull: shown once
    assert "Traceback" not in applied.stderr
    # B ran and ended while A's pull was still waiting for its registry.
    assert b["finishTime"] < a["finishTime"], (a, b)


def test_plain_apply_leaves_a_slow_pull_to_its_launcher_which_makes_the_container_on_its_own(
    workdir: Path, proxy: TrickleProxy, pushed: str, base_image: str, docker_client: Any
) -> None:
    slow = f"{proxy.address}/{pushed}"
    (workdir / "specs" / "a.yaml").write_text(_job("a", slow, ["sh", "-c", "echo a-ran; sleep 300"], count=2))
    (workdir / "specs" / "b.yaml").write_text(_job("b", base_image, ["sleep", "300"]))
    asked = time.monotonic()
    applied = cli("apply", "specs", cwd=workdir, timeout=60)
    assert applied.returncode == 0, applied.stdout + applied.stderr
    assert applied.stderr.count(f"tfdeclare: pulling {slow} for job a") == 1, (
        "one pull for both tasks, shown once"
    )
    # A bound that is the behaviour, generous for a loaded machine: apply waits STARTING_GRACE_S
    # (10 s) for a starting task, not for the pull (LAYER_BYTES at 2 kB/s: 128 s)
    assert time.monotonic() - asked < 60, "apply waits STARTING_GRACE_S for a starting task, no more"
    assert _task(workdir, "b")["state"] == "running"
    a = _task(workdir, "a")
    assert a["state"] == "starting" and a["message"].startswith(f"pulling {slow}: "), a
    assert proxy.sending == 1, "the pull goes on after apply returned"

    # No controller runs now: the launcher makes and starts A's container once its image is in.
    proxy.rate = None
    ours = {"label": [f"tfdeclare.owner={owner_of(workdir / '.tfdeclare' / 'local')}", "tfdeclare.job=a"]}
    wait_until(lambda: len(docker_client.containers.list(ignore_removed=True, filters=ours)) == 2, 60)
    again = cli("apply", "specs", cwd=workdir, timeout=60)
    assert again.returncode == 0, again.stdout + again.stderr
    assert _task(workdir, "a")["state"] == "running", _task(workdir, "a")
    assert list(proxy.trickled.values()) == [1], "pulled once"
    assert "pulling" not in again.stderr, again.stderr
    deleted = cli("delete", "--all", cwd=workdir, timeout=60)
    assert deleted.returncode == 0, deleted.stdout + deleted.stderr


def test_deleting_a_job_mid_pull_gives_its_launch_up_and_the_engine_cancels_the_pull(
    workdir: Path, proxy: TrickleProxy, pushed: str, docker_client: Any
) -> None:
    slow = f"{proxy.address}/{pushed}"
    (workdir / "specs" / "a.yaml").write_text(_job("a", slow, ["sleep", "300"], count=2))
    daemon = Daemon(workdir, "--specs", "specs")
    try:
        wait_until(lambda: "kB fetched" in str(_task(workdir, "a").get("message")), timeout=30)
        launcher = _launcher_pid(workdir, "a.")
    finally:
        daemon.stop(signal.SIGTERM)
    asked = time.monotonic()
    deleted = cli("delete", "a", cwd=workdir, timeout=60)
    assert deleted.returncode == 0, deleted.stdout + deleted.stderr
    assert time.monotonic() - asked < 60, "no wait for the pull"  # which would take 128 s: a generous bound
    wait_until(lambda: proxy.sending == 0, timeout=10)  # the engine let go of the registry
    assert (
        not Path(f"/proc/{launcher}").exists()
        or b"launcher" not in Path(f"/proc/{launcher}/cmdline").read_bytes()
    )
    ours = {"label": [f"tfdeclare.owner={owner_of(workdir / '.tfdeclare' / 'local')}"]}
    assert docker_client.containers.list(ignore_removed=True, all=True, filters=ours) == []
    assert not (workdir / "status" / "a.yaml").exists()
