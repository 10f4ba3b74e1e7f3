"""One real TensorFlow job on a real Apache Mesos 1.11.0 master and agent (issue 21): the
MultiWorkerMirroredStrategy example of specs/ (two workers) through ``tfdeclare apply --wait``
with the mesos backend; the agent runs each worker through ``mesos-containerizer launch`` and
the command executor; both end with identical weights.

One agent, because every agent here is 127.0.0.1 with the same port range: two agents would
offer the same ports, and two workers bound on one host would collide (a real cluster's
agents are different hosts)."""

from __future__ import annotations

import json
import os
import re
import shutil
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
import yaml

from tests.conftest import REPO, cli
from tests.mesos_fixtures import config_yaml
from tests.real_mesos import RealMesos

pytestmark = [
    pytest.mark.real_mesos,
    pytest.mark.tf,
    pytest.mark.e2e,
    pytest.mark.slow,
]


def train_mwms(tmp_path: Path, real_mesos: Callable[..., RealMesos], **mesos_config: object) -> RealMesos:
    """specs/ MultiWorkerMirroredStrategy example applied with ``--wait`` on a fresh real cluster
    of one agent (the project's ``mesos`` settings with ``mesos_config``): it succeeds, and both
    workers' logs end with the same weights. Returns the cluster."""
    # An agent's executors (and so their tasks) do not inherit its environment: PATH is the
    # host's default unless --executor_environment_variables sets it (upstream
    # executorEnvironment, slave.cpp). ``python`` must be this one, with TensorFlow.
    path = f"{Path(sys.executable).parent}{os.pathsep}/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
    mesos = real_mesos(
        agents=1,
        resources="cpus:4;mem:16384;ports:[31000-31099]",
        flags={"EXECUTOR_ENVIRONMENT_VARIABLES": json.dumps({"PATH": path})},
    )
    (tmp_path / "specs").mkdir()
    for name in ("mnist-mwms.yaml", "mwms_train.py"):
        shutil.copy(REPO / "specs" / name, tmp_path / "specs" / name)
    (tmp_path / "tfdeclare.yaml").write_text(config_yaml(mesos.url, **mesos_config))
    result = cli(
        "apply", "specs", "--wait", "--backend", "mesos", "--timeout", "400", cwd=tmp_path, timeout=450
    )
    assert result.returncode == 0, result.stdout + result.stderr
    document = yaml.safe_load((tmp_path / "status" / "mnist-mwms.yaml").read_text())
    assert document["phase"] == "Succeeded", document["message"]

    def log(task: str) -> str:
        shown = cli("logs", "mnist-mwms", "--task", task, cwd=tmp_path)
        assert shown.returncode == 0, shown.stderr
        return shown.stdout

    hashes = [re.findall(r"^FINAL_WEIGHTS_SHA256 ([0-9a-f]{64})$", log(f"worker:{i}"), re.M) for i in (0, 1)]
    assert hashes[0] and hashes[0] == hashes[1], "both workers end with identical weights"
    return mesos


def test_a_mwms_job_trains_to_identical_weights_on_the_real_master(
    tmp_path: Path, real_mesos: Callable[..., RealMesos]
) -> None:
    mesos = train_mwms(tmp_path, real_mesos)
    finished = {i: t["state"] for i, t in mesos.tasks().items() if i.startswith("mnist-mwms.")}
    assert sorted(finished.values()) == ["TASK_FINISHED", "TASK_FINISHED"], finished
