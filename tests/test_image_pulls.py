"""Images pulled by ``apply`` from a real registry (Debian's ``docker-registry`` on a loopback
port, ``tests/registry_server.py``) into the real Docker engine, as ``imagePullPolicy`` says.

The image pushed there is the test base image with one layer of its own (random bytes, so
the engine has that layer only while it has the image): removed from the engine before each
test, so ``apply`` really fetches it. Jobs run through the CLI as real processes."""

from __future__ import annotations

import os
import pty
import re
import select
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.conftest import cli
from tests.registry_server import registry_server
from tfdeclare.backends.local.docker_runtime import owner_of

pytestmark = [pytest.mark.docker, pytest.mark.e2e]

PAYLOAD_BYTES = 24_000_000  # a layer big enough for the engine to report its download's progress


@pytest.fixture(scope="module")
def registry(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    with registry_server(tmp_path_factory.mktemp("registry")) as address:
        yield address


@pytest.fixture(scope="module")
def pushed(registry: str, docker_client: Any, base_image: str) -> Iterator[str]:
    """``REGISTRY/tfdeclare-test/payload:v1`` in the registry: the base image and a layer
    with ``/payload``; not on the engine afterwards."""
    image = f"{registry}/tfdeclare-test/payload:v1"
    command = ["sh", "-c", f"head -c {PAYLOAD_BYTES} /dev/urandom > /payload"]
    container = docker_client.containers.create(base_image, command, network_mode="none")
    try:
        container.start()
        assert container.wait(timeout=120)["StatusCode"] == 0
        repository, tag = image.rsplit(":", 1)
        container.commit(repository=repository, tag=tag)
    finally:
        container.remove(force=True)
    try:
        for event in docker_client.api.push(repository, tag=tag, stream=True, decode=True):
            assert "error" not in event, event
        docker_client.images.remove(image)
        yield image
    finally:
        _remove(docker_client, image)


def _remove(docker_client: Any, image: str) -> None:
    import docker.errors

    try:
        docker_client.images.remove(image, force=True)
    except docker.errors.ImageNotFound:
        pass


@pytest.fixture
def absent(pushed: str, docker_client: Any, workdir: Path) -> Iterator[str]:
    """The pushed image, not on the engine; the test's containers and the pulled image are
    removed after it."""
    _remove(docker_client, pushed)
    try:
        yield pushed
    finally:
        _remove_containers(docker_client, workdir)
        _remove(docker_client, pushed)


def _remove_containers(docker_client: Any, workdir: Path) -> None:
    """The containers of the test's state folder, should a failed test leave any."""
    ours = {"label": [f"tfdeclare.owner={owner_of(workdir / '.tfdeclare' / 'local')}"]}
    for container in docker_client.containers.list(ignore_removed=True, all=True, filters=ours):
        container.remove(force=True)


def _job(
    name: str, image: str, *, policy: str | None = None, script: str = "test -s /payload && echo payload-here"
) -> str:
    spec: dict[str, Any] = {
        "image": image,
        "command": ["sh", "-c", script],
        "backoffLimit": 0,
        "replicas": {"worker": {"count": 1, "resources": {"cpus": 0.1, "mem": 64}}},
    }
    if policy is not None:
        spec["imagePullPolicy"] = policy
    document = {"apiVersion": "tfdeclare/v1", "kind": "TFJob", "metadata": {"name": name}, "spec": spec}
    return yaml.safe_dump(document, sort_keys=False)


def _status(workdir: Path, name: str) -> dict[str, Any]:
    document: dict[str, Any] = yaml.safe_load((workdir / "status" / f"{name}.yaml").read_text())
    return document


def test_apply_pulls_a_missing_image_and_a_wrong_tag_fails_only_its_job(
    workdir: Path, absent: str, docker_client: Any
) -> None:
    wrong = absent.replace(":v1", ":no-such-tag")
    (workdir / "specs" / "good.yaml").write_text(_job("good", absent))
    (workdir / "specs" / "bad.yaml").write_text(_job("bad", wrong))
    planned = cli("plan", "specs", cwd=workdir)
    assert planned.returncode == 0, planned.stderr
    assert f"specs/good.yaml:6:10: warning: will pull {absent} at apply" in planned.stderr, planned.stderr
    assert f"specs/bad.yaml:6:10: warning: will pull {wrong} at apply" in planned.stderr

    applied = cli("apply", "specs", "--wait", "--timeout", "120", cwd=workdir, timeout=180)
    assert applied.returncode == 1, applied.stdout + applied.stderr  # bad failed
    assert _status(workdir, "good")["phase"] == "Succeeded", applied.stdout + applied.stderr
    bad = _status(workdir, "bad")
    assert bad["phase"] == "Failed"
    reason = f"cannot pull image {wrong}: manifest for {wrong} not found"
    assert reason in bad["message"], bad["message"]
    # Not a terminal: plain lines, when the pull starts, per layer, and how it ended.
    err = applied.stderr
    assert f"tfdeclare: pulling {absent} for job good" in err, err
    assert re.search(rf"tfdeclare: {re.escape(absent)}: layer [0-9a-f]{{12}} pulled, 2\d\.\d MB", err), err
    assert re.search(rf"tfdeclare: pulled {re.escape(absent)}: \d+ layer\(s\), 2\d\.\d MB fetched in", err), (
        err
    )
    assert f"tfdeclare: cannot pull {wrong}: manifest for {wrong} not found" in err, err
    assert "Traceback" not in err and "APIError" not in err
    logs = cli("logs", "good", cwd=workdir)
    assert "payload-here" in logs.stdout, logs.stdout + logs.stderr
    assert docker_client.images.get(absent)  # it is on the engine now

    # Present now: IfNotPresent pulls nothing; a plan has nothing to say about it.
    (workdir / "specs" / "bad.yaml").unlink()
    (workdir / "specs" / "good.yaml").write_text(_job("good", absent, script="echo again"))
    again = cli("apply", "specs", "--wait", "--timeout", "120", cwd=workdir, timeout=180)
    assert again.returncode == 0, again.stdout + again.stderr
    assert "pulling" not in again.stderr, again.stderr


def test_always_pulls_an_image_the_engine_has(workdir: Path, absent: str, docker_client: Any) -> None:
    for event in docker_client.api.pull(absent.rsplit(":", 1)[0], tag="v1", stream=True, decode=True):
        assert "error" not in event, event
    (workdir / "specs" / "j.yaml").write_text(_job("j", absent, policy="Always"))
    applied = cli("apply", "specs", "--wait", "--timeout", "120", cwd=workdir, timeout=180)
    assert applied.returncode == 0, applied.stdout + applied.stderr
    assert f"tfdeclare: pulling {absent} for job j" in applied.stderr, applied.stderr
    assert f"tfdeclare: pulled {absent}" in applied.stderr


def test_never_with_a_missing_image_is_an_error_at_apply(
    workdir: Path, absent: str, docker_client: Any
) -> None:
    (workdir / "specs" / "j.yaml").write_text(_job("j", absent, policy="Never"))
    applied = cli("apply", "specs", cwd=workdir)
    assert applied.returncode == 1, applied.stdout
    assert (
        f"specs/j.yaml:6:10: error: the Docker engine has no image {absent}, and imagePullPolicy is Never"
        in applied.stderr
    ), applied.stderr
    assert "nothing applied" in applied.stderr
    assert not (workdir / "status" / "j.yaml").exists()
    assert not docker_client.images.list(name=absent.rsplit(":", 1)[0])  # nothing was pulled


def test_apply_on_a_terminal_shows_each_layers_bytes(workdir: Path, absent: str) -> None:
    """On a real pty the block is redrawn in place (cursor up, line erased), each layer with
    the bytes done of its size."""
    (workdir / "specs" / "j.yaml").write_text(_job("j", absent))
    controller, terminal = pty.openpty()
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "TERM": "xterm", "NO_COLOR": "1"}
    process = subprocess.Popen(
        [sys.executable, "-m", "tfdeclare", "apply", "specs", "--wait", "--timeout", "120"],
        cwd=workdir,
        stdin=subprocess.DEVNULL,
        stdout=terminal,
        stderr=terminal,
        env=env,
    )
    os.close(terminal)
    shown = bytearray()
    deadline = time.monotonic() + 180
    try:
        while time.monotonic() < deadline:
            ready, _, _ = select.select([controller], [], [], 1.0)
            if ready:
                try:
                    chunk = os.read(controller, 65536)
                except OSError:  # EIO: the other side closed
                    break
                if not chunk:
                    break
                shown += chunk
            elif process.poll() is not None:
                break
        assert process.wait(30) == 0, shown.decode(errors="replace")
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
        os.close(controller)
    text = shown.decode(errors="replace")
    assert "\x1b[2K" in text and re.search(r"\x1b\[\d+F", text), text  # redrawn in place
    assert re.search(r"[0-9a-f]{12}  Downloading\s+\d+(\.\d)? [kM]?B / 2\d\.\d MB", text), text
    assert re.search(r"[0-9a-f]{12}  Pull complete\s+2\d\.\d MB", text), text
    assert f"pulled {absent}: " in text


def test_credentials_come_from_the_docker_client_config(
    workdir: Path, tmp_path_factory: pytest.TempPathFactory, docker_client: Any, base_image: str
) -> None:
    """A registry that asks for a password: apply pulls with the login of the client's config
    (``DOCKER_CONFIG``/config.json, as ``docker login`` writes it); without one, the job fails
    with the registry's reason."""
    import base64
    import json

    with registry_server(tmp_path_factory.mktemp("private"), users={"trainer": "s3cret-pw"}) as address:
        image = f"{address}/team/private:v1"
        repository = image.rsplit(":", 1)[0]
        docker_client.api.tag(base_image, repository, "v1")
        try:
            login = {"username": "trainer", "password": "s3cret-pw"}
            for event in docker_client.api.push(
                repository, tag="v1", stream=True, decode=True, auth_config=login
            ):
                assert "error" not in event, event
            docker_client.api.remove_image(image)  # only the tag: the base image keeps its layers
            (workdir / "specs" / "j.yaml").write_text(_job("j", image, script="echo logged-in"))

            nobody = workdir / "no-login"
            nobody.mkdir()
            (nobody / "config.json").write_text("{}")
            refused = cli(
                "apply", "specs", "--wait", "--timeout", "60", cwd=workdir, env={"DOCKER_CONFIG": str(nobody)}
            )
            assert refused.returncode == 1, refused.stdout + refused.stderr
            message = _status(workdir, "j")["message"]
            assert f"cannot pull image {image}: " in message and "no basic auth credentials" in message, (
                message
            )

            logged_in = workdir / "login"
            logged_in.mkdir()
            token = base64.b64encode(b"trainer:s3cret-pw").decode()
            (logged_in / "config.json").write_text(json.dumps({"auths": {address: {"auth": token}}}))
            (workdir / "specs" / "j.yaml").write_text(_job("j", image, script="echo logged-in again"))
            applied = cli(
                "apply",
                "specs",
                "--wait",
                "--timeout",
                "60",
                cwd=workdir,
                env={"DOCKER_CONFIG": str(logged_in)},
            )
            assert applied.returncode == 0, applied.stdout + applied.stderr
            assert f"tfdeclare: pulled {image}" in applied.stderr
            assert "s3cret" not in applied.stdout + applied.stderr
        finally:
            _remove_containers(docker_client, workdir)
            _remove(docker_client, image)
