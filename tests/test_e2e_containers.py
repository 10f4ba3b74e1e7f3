"""Real distributed TensorFlow in containers on the local backend, through the CLI: the example
MultiWorkerMirroredStrategy job of specs/ with ``image:`` set to the test TensorFlow image runs
as two containers (host networking, the spec folder mounted read-only, TF_CONFIG from
tfdeclare), ``logs --follow`` streams a worker's output from the engine until it ends, and both
workers end with identical weights."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.conftest import REPO, cli
from tests.waiting import wait_until
from tfdeclare.backends.local.docker_runtime import owner_of

pytestmark = [pytest.mark.tf, pytest.mark.docker, pytest.mark.e2e]


def test_mwms_job_trains_in_containers_to_identical_weights(
    tmp_path: Path, docker_client: Any, tensorflow_image: str
) -> None:
    specs = tmp_path / "specs"
    specs.mkdir()
    shutil.copy(REPO / "specs" / "mwms_train.py", specs)
    spec = yaml.safe_load((REPO / "specs" / "mnist-mwms.yaml").read_text())
    spec["spec"]["image"] = tensorflow_image
    spec["spec"]["replicas"]["worker"]["resources"] = {"cpus": 1, "mem": "2Gi"}
    (specs / "mnist-mwms.yaml").write_text(yaml.safe_dump(spec))

    ours = {
        "label": [
            "tfdeclare.job=mnist-mwms",
            f"tfdeclare.owner={owner_of(tmp_path / '.tfdeclare' / 'local')}",
        ]
    }
    try:
        _train(tmp_path, docker_client, tensorflow_image, ours)
    finally:
        for container in docker_client.containers.list(ignore_removed=True, all=True, filters=ours):
            container.remove(force=True)


def _train(tmp_path: Path, docker_client: Any, tensorflow_image: str, ours: dict[str, Any]) -> None:
    applied = cli("apply", "specs", cwd=tmp_path)
    assert applied.returncode == 0, applied.stdout + applied.stderr
    seen: set[str] = set()

    def both() -> bool:  # both workers are containers of the image
        for container in docker_client.containers.list(ignore_removed=True, filters=ours):
            if (
                container.image.tags == [tensorflow_image]
                and container.attrs["HostConfig"]["NetworkMode"] == "host"
            ):
                seen.add(container.labels["tfdeclare.role"] + container.labels["tfdeclare.index"])
        return len(seen) >= 2

    wait_until(both, 120, what=lambda: f"both workers' containers; seen {seen}", interval=0.2)
    assert seen == {"worker0", "worker1"}

    follow = subprocess.run(
        [sys.executable, "-m", "tfdeclare", "logs", "mnist-mwms", "--task", "worker:0", "--follow"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=400,
        check=False,
    )
    assert follow.returncode == 0, follow.stderr
    assert re.search(r"^FINAL_WEIGHTS_SHA256 [0-9a-f]{64}$", follow.stdout, re.M), follow.stdout[-3000:]

    waited = cli("apply", "specs", "--wait", "--timeout", "300", cwd=tmp_path, timeout=350)
    assert waited.returncode == 0, waited.stdout + waited.stderr
    status = yaml.safe_load((tmp_path / "status" / "mnist-mwms.yaml").read_text())
    assert status["phase"] == "Succeeded", status["message"]
    hashes = [
        re.findall(
            r"^FINAL_WEIGHTS_SHA256 ([0-9a-f]{64})$",
            cli("logs", "mnist-mwms", "--task", f"worker:{i}", cwd=tmp_path).stdout,
            re.M,
        )
        for i in (0, 1)
    ]
    assert hashes[0] and hashes[0] == hashes[1], "both MWMS workers end with identical weights"
    assert docker_client.containers.list(ignore_removed=True, all=True, filters=ours) == [], (
        "ended containers are removed once recorded"
    )
