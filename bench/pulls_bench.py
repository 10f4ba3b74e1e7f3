"""Issue 29's target for image pulls (``make bench-pulls``, needs a Docker engine): the time
from ``apply`` to job B running (its status file says so) while job A's image is being
pulled from a slow registry, B's image already on the engine.

The registry is the tests' (``tests/registry_server.py``, Debian's ``docker-registry``)
behind the tests' trickling proxy (``tests/slow_registry.py``): A's one layer of its own
(256 kB) comes at 32 kB/s, an 8 s pull (a huge image on a slow link is the same, longer).
With ``AGAINST=DIR`` (a checkout of another commit, ``PULLS_AGAINST`` here) that version's
``apply`` takes turns with this one's, run by run, on the same engine and registry: a ratio
side by side. Each run starts with A's image off the engine; ``apply`` is interrupted once B
runs (its tasks keep running), then ``delete --all`` clears up.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import yaml

from bench.common import REPO, Result, cleaned_up, wait_for
from bench.docker_bench import apply_ten

LAYER_BYTES = 262_144
RATE = 32_768.0


def _cli(checkout: Path) -> tuple[list[str], dict[str, str]]:
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "PYTHONPATH": str(checkout)}
    return [sys.executable, "-m", "tfdeclare"], env


def _job(name: str, image: str, command: list[str]) -> str:
    spec = {
        "image": image,
        "command": command,
        "backoffLimit": 0,
        "replicas": {"worker": {"count": 1, "resources": {"cpus": 0.1, "mem": 64}}},
    }
    document = {"apiVersion": "tfdeclare/v1", "kind": "TFJob", "metadata": {"name": name}, "spec": spec}
    return yaml.safe_dump(document, sort_keys=False)


def _b_running(workdir: Path) -> bool:
    path = workdir / "status" / "b-ready.yaml"
    try:
        tasks = (yaml.safe_load(path.read_text()) or {}).get("tasks") or []
    except (OSError, yaml.YAMLError):
        return False
    return bool(tasks) and tasks[0].get("state") == "running"


def _push(client: Any, registry: str, base: str) -> str:
    repository = f"{registry}/bench/slow"
    command = ["sh", "-c", f"head -c {LAYER_BYTES} /dev/urandom > /payload"]
    container = client.containers.create(base, command, network_mode="none")
    try:
        container.start()
        container.wait(timeout=120)
        container.commit(repository=repository, tag="v1")
    finally:
        container.remove(force=True)
    for event in client.api.push(repository, tag="v1", stream=True, decode=True):
        if "error" in event:
            raise RuntimeError(str(event))
    client.api.remove_image(f"{repository}:v1")
    return "bench/slow:v1"


def _once(checkout: Path, client: Any, slow: str, base: str, proxy: Any) -> float:
    import docker.errors

    with contextlib.suppress(docker.errors.ImageNotFound):
        client.images.remove(slow, force=True)
    cli, env = _cli(checkout)
    with tempfile.TemporaryDirectory() as tmp, cleaned_up(Path(tmp), cli, env=env) as workdir:
        (workdir / "specs").mkdir()
        (workdir / "specs" / "a.yaml").write_text(_job("a-slow", slow, ["sleep", "60"]))
        (workdir / "specs" / "b.yaml").write_text(_job("b-ready", base, ["sleep", "60"]))
        started = time.perf_counter()
        apply = subprocess.Popen(
            [*cli, "apply", "specs"],
            cwd=workdir,
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        try:
            wait_for(lambda: _b_running(workdir), timeout=60, poll=0.02)
            seconds = time.perf_counter() - started
        except TimeoutError:
            print(f"{checkout}: proxy: {proxy.trickled} {proxy.sending} {proxy.sent}", flush=True)
            for name in ("a-slow", "b-ready"):
                path = workdir / "status" / f"{name}.yaml"
                print(f"{checkout}: {name}:", path.read_text() if path.exists() else "no status", flush=True)
            raise
        finally:
            apply.send_signal(signal.SIGINT)
            apply.wait(60)
    with contextlib.suppress(docker.errors.ImageNotFound):
        client.images.remove(slow, force=True)
    return seconds


def _ten(checkout: Path, client: Any, base: str) -> float:
    """``docker_bench.apply_ten`` once, with the ``tfdeclare`` of ``checkout``."""
    before = os.environ.get("PYTHONPATH")
    os.environ["PYTHONPATH"] = str(checkout)
    try:
        with tempfile.TemporaryDirectory() as tmp, cleaned_up(Path(tmp)) as workdir:
            return apply_ten(client, base, workdir, 1).samples[0]
    finally:
        if before is None:
            del os.environ["PYTHONPATH"]
        else:
            os.environ["PYTHONPATH"] = before


def main(results: list[Result], quick: bool) -> None:
    from tests import docker_env

    try:
        host = docker_env.acquire()
    except RuntimeError as err:
        docker_env.release()
        print(f"pulls: no engine ({err}); nothing measured", flush=True)
        return
    try:
        _measure(results, quick, host)
    finally:
        docker_env.release()


def _measure(results: list[Result], quick: bool, host: str) -> None:
    import docker

    from tests import docker_env
    from tests.registry_server import registry_server
    from tests.slow_registry import TrickleProxy

    os.environ["DOCKER_HOST"] = host
    client = docker.DockerClient(base_url=host, timeout=600)
    base = docker_env.base_image(client)
    against = os.environ.get("PULLS_AGAINST")
    runs = 3 if quick else 5
    ours: list[float] = []
    theirs: list[float] = []
    with tempfile.TemporaryDirectory() as storage, registry_server(Path(storage)) as registry:
        pushed = _push(client, registry, base)
        with TrickleProxy(registry, rate=RATE) as proxy:
            slow = f"{proxy.address}/{pushed}"
            for _ in range(runs):
                if against:
                    theirs.append(_once(Path(against), client, slow, base, proxy))
                ours.append(_once(REPO, client, slow, base, proxy))
    ten_ours: list[float] = []
    ten_theirs: list[float] = []
    for _ in range(runs):  # the launch path changed: a 10-task job, its image present
        if against:
            ten_theirs.append(_ten(Path(against), client, base))
        ten_ours.append(_ten(REPO, client, base))
    client.close()
    what = (
        f"`apply`: job B running while job A's image pulls ({LAYER_BYTES // 1024} kB at {RATE / 1024:g} kB/s)"
    )
    if theirs:
        results.append(Result(f"{what}, before (`AGAINST`)", "", theirs))
    note = f"before: median {sorted(theirs)[len(theirs) // 2]:.2f} s" if theirs else ""
    results.append(Result(what, "≤ 2 s (one pass)", ours, limit=2.0, note=note))
    ten = "`apply` of a 10-task job with an image until all 10 containers run (image present)"
    if ten_theirs:
        results.append(Result(f"{ten}, before (`AGAINST`)", "", ten_theirs))
    note = f"before: median {sorted(ten_theirs)[len(ten_theirs) // 2]:.2f} s" if ten_theirs else ""
    results.append(Result(ten, "≤ 2 s", ten_ours, limit=2.0, note=note))
