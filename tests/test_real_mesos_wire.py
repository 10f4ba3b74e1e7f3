"""Out-of-band cluster delivery (``mesos.clusterServer``) on a real Apache Mesos 1.11.0 master
and agent: the MultiWorkerMirroredStrategy example of specs/ through ``tfdeclare apply --wait``,
each worker started by the real agent (``mesos-containerizer launch``, the command executor)
as ``python3 -c <bootstrap> python mwms_train.py``; the bootstrap fetches the worker's
TF_CONFIG from ``apply``'s cluster server, and both workers end with identical weights.
What the agent checkpoints of each task holds no address of the job."""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path

import pytest
import yaml

from tests.real_mesos import RealMesos
from tests.test_real_mesos_tensorflow import train_mwms
from tfdeclare.backends.mesos.bootstrap import FETCH_ENV

pytestmark = [pytest.mark.real_mesos, pytest.mark.tf, pytest.mark.e2e, pytest.mark.slow]


def test_a_mwms_job_fetches_its_cluster_and_trains_on_the_real_master(
    tmp_path: Path, real_mesos: Callable[..., RealMesos]
) -> None:
    train_mwms(tmp_path, real_mesos, clusterServer="{minBytes: 0}")
    document = yaml.safe_load((tmp_path / "status" / "mnist-mwms.yaml").read_text())
    # What the agent checkpointed of each task (executor.info, task.info, task.updates): the
    # key, URL with its token, no TF_CONFIG and no address of the job
    ports = [str(t["port"]) for t in document["tasks"]]
    checkpoints = [
        f
        for folder in (tmp_path / "cluster0").rglob("executors/mnist-mwms.*")
        for f in folder.rglob("*")
        if f.is_file() and "/meta/" in str(f)
    ]
    assert len([f for f in checkpoints if f.name == "executor.info"]) == 2
    for checkpoint in checkpoints:
        data = checkpoint.read_bytes()
        assert b'{"cluster"' not in data and not any(f"127.0.0.1:{port}".encode() in data for port in ports)
    # the bootstrap's variable: key, URL with token, the task's four TFDECLARE_* values
    fetch = re.compile(
        rb"%s\x12.[\w-]{22} http://\S+/[\w-]{22} mnist-mwms worker \d \d" % FETCH_ENV.encode(), re.S
    )
    assert any(fetch.search(f.read_bytes()) for f in checkpoints)
