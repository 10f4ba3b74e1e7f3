"""Jobs with an image under the Docker containerizer of a real Mesos 1.11.0 agent (issue 33):
the agent runs ``mesos-docker-executor`` (ours, ``tools/realmesos/docker_executor.py``, over
the v1 executor API), which runs each task with ``docker run`` on the tests' private engine.

What is checked is what the task saw (its records), what the real master says and what the
engine holds, never what the backend believes it did.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.components import missing
from tests.conftest import REPO, cli
from tests.container_jobs import PS_AND_TWO_WORKERS, TASK, allowed_host_paths, boxed_job, mwms_job
from tests.mesos_fixtures import config_yaml, eventually
from tests.real_mesos import SIBLING_CONTAINER_GONE, RealMesos

pytestmark = [pytest.mark.real_mesos, pytest.mark.docker, pytest.mark.slow]

Start = Callable[..., RealMesos]
RESOURCES = "cpus:4;mem:4096;ports:[31000-31099]"


def engine_socket(docker_client: Any) -> str:
    host = os.environ.get("DOCKER_HOST", "")
    if not host.startswith("unix://"):
        missing(f"the agent's Docker containerizer needs a unix socket, not {host!r}")
    return host.removeprefix("unix://")


@dataclass(frozen=True)
class DockerCluster:
    """A real cluster whose agent runs tasks through the tests' engine, a project folder
    configured for it, and the folder the tasks write their records to (``/out`` in them)."""

    mesos: RealMesos
    root: Path
    out: Path

    def apply(
        self, name: str, spec: str, *options: str, timeout: float = 120
    ) -> subprocess.CompletedProcess[str]:
        """Writes ``spec`` as ``NAME.yaml`` in the project and applies it with ``options``."""
        (self.root / f"{name}.yaml").write_text(spec)
        return cli("apply", f"{name}.yaml", *options, cwd=self.root, timeout=timeout)

    def status(self, name: str) -> dict[str, Any]:
        document: dict[str, Any] = yaml.safe_load((self.root / "status" / f"{name}.yaml").read_text())
        return document

    def tasks(self, job_name: str) -> dict[str, dict[str, Any]]:
        """The master's tasks of this job, by task id."""
        return {i: t for i, t in self.mesos.tasks().items() if i.startswith(f"{job_name}.")}

    def completed_task(self, job_name: str) -> dict[str, Any]:
        """The master's one completed task of this job (with all its statuses)."""
        answer = self.mesos.operator({"type": "GET_TASKS"})["get_tasks"]
        (task,) = [
            t for t in answer.get("completed_tasks", []) if t["task_id"]["value"].startswith(f"{job_name}.")
        ]
        return dict(task)


def docker_cluster(
    real_mesos: Start, docker_client: Any, tmp_path: Path, resources: str = RESOURCES, *folders: Path
) -> DockerCluster:
    """Starts a real cluster of one agent with the Docker containerizer on the engine's socket,
    and a project whose volumes may mount ``folders`` (the repository and ``tmp_path`` by default)."""
    mesos = real_mesos(agents=1, resources=resources, docker_socket=engine_socket(docker_client))
    out = tmp_path / "out"
    out.mkdir()
    root = tmp_path / "project"
    root.mkdir()
    policy = allowed_host_paths(*(folders or (REPO, tmp_path)))
    (root / "tfdeclare.yaml").write_text(config_yaml(mesos.url, containerizer="docker") + policy)
    return DockerCluster(mesos, root, out)


def test_a_job_with_an_image_runs_in_docker_containers_with_tf_config_and_its_ps_is_killed(
    real_mesos: Start, docker_client: Any, base_image: str, tmp_path: Path
) -> None:
    """A ps and two workers as ``docker run`` containers on the real agent: every task sees the
    same TF_CONFIG, the relative workingDir under the sandbox's mount point and the volumes;
    the workers finish (TASK_FINISHED), the ps is then killed through ``docker stop`` (TASK_KILLED
    on the master, 143 in the status: SIGTERM reached it through --init)."""
    cluster = docker_cluster(real_mesos, docker_client, tmp_path)
    spec = boxed_job("boxed", base_image, cluster.out, PS_AND_TWO_WORKERS)
    result = cluster.apply("boxed", spec, "--wait", "--timeout", "120", timeout=180)
    assert result.returncode == 0, result.stdout + result.stderr + cluster.mesos.log_tail()
    document = cluster.status("boxed")
    assert document["phase"] == "Succeeded"
    records = {path.stem: json.loads(path.read_text()) for path in cluster.out.glob("*.json")}
    assert sorted(records) == ["ps-0.0", "worker-0.0", "worker-1.0"]
    clusters = [record["tfConfig"]["cluster"] for record in records.values()]
    assert clusters[0] == clusters[1] == clusters[2]
    assert sorted(clusters[0]) == ["ps", "worker"] and len(clusters[0]["worker"]) == 2
    assert {(r["tfConfig"]["task"]["type"], r["tfConfig"]["task"]["index"]) for r in records.values()} == {
        ("ps", 0),
        ("worker", 0),
        ("worker", 1),
    }
    for record in records.values():
        assert record["cwd"] == "/mnt/mesos/sandbox/scratch", record
    (ps,) = [t for t in document["tasks"] if t["role"] == "ps"]
    assert (ps["state"], ps["exitCode"]) == ("stopped", 143), ps
    states = eventually(
        lambda: (
            (s := {i: t["state"] for i, t in cluster.tasks("boxed").items()})
            and "TASK_RUNNING" not in s.values()
            and s
        ),
        timeout=60,
    )
    assert sorted(states.values()) == ["TASK_FINISHED", "TASK_FINISHED", "TASK_KILLED"], states
    assert len(cluster.mesos.containers()) == 3  # each task was a container of the engine
    assert cluster.mesos.containers(running=True) == []


def test_an_exit_code_and_a_delete_reach_the_status_through_the_docker_executor(
    real_mesos: Start, docker_client: Any, base_image: str, tmp_path: Path
) -> None:
    """A task exiting 3 is TASK_FAILED "Container exited with status 3" and exit code 3 in the
    status; a serving task stopped by ``delete`` is TASK_KILLED and its container is gone from
    the running ones."""
    cluster = docker_cluster(real_mesos, docker_client, tmp_path)

    spec = boxed_job(
        "exits",
        base_image,
        cluster.out,
        [f"worker: {{count: 1, resources: {{cpus: 0.5, mem: 64}}, command: [python3, {TASK}, exit=3]}}"],
        "  backoffLimit: 0\n",
    )
    failed = cluster.apply("exits", spec, "--wait", "--timeout", "120", timeout=180)
    assert failed.returncode != 0, failed.stdout + failed.stderr
    document = cluster.status("exits")
    assert document["phase"] == "Failed", document
    (worker,) = document["tasks"]
    assert worker["exitCode"] == 3, worker
    assert [t["state"] for t in cluster.tasks("exits").values()] == ["TASK_FAILED"]
    failed_task = cluster.completed_task("exits")
    messages = [s.get("message") for s in failed_task["statuses"]]
    assert messages[-1] == "Container exited with status 3", failed_task["statuses"]

    served = tmp_path / "served"
    served.mkdir()
    spec = boxed_job(
        "serves",
        base_image,
        served,
        [f"worker: {{count: 1, resources: {{cpus: 0.5, mem: 64}}, command: [python3, {TASK}, serve]}}"],
    )
    assert cluster.apply("serves", spec).returncode == 0
    eventually(
        lambda: (served / "worker-0.0.json").exists() and len(cluster.mesos.containers(running=True)) == 1,
        timeout=90,
    )
    deleted = cli("delete", "serves", cwd=cluster.root)
    assert deleted.returncode == 0, deleted.stderr
    eventually(lambda: [t["state"] for t in cluster.tasks("serves").values()] == ["TASK_KILLED"], timeout=60)
    assert cluster.mesos.containers(running=True) == []


def test_a_task_that_ignores_sigterm_is_killed_after_its_grace_period(
    real_mesos: Start, docker_client: Any, base_image: str, tmp_path: Path
) -> None:
    """KILL with the task's kill policy: TASK_KILLING, ``docker stop`` sends SIGTERM, which the
    task ignores, and SIGKILL once ``terminationGracePeriodSeconds`` (2 s) has passed: the
    master has TASK_KILLED no earlier, and the status says 137."""
    cluster = docker_cluster(real_mesos, docker_client, tmp_path)
    stubborn = "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); open('/out/up', 'w'); time.sleep(600)"
    spec = boxed_job(
        "stubborn",
        base_image,
        cluster.out,
        [f'worker: {{count: 1, resources: {{cpus: 0.5, mem: 64}}, command: [python3, -c, "{stubborn}"]}}'],
        "  terminationGracePeriodSeconds: 2\n",
    )
    assert cluster.apply("stubborn", spec).returncode == 0
    eventually(lambda: (cluster.out / "up").exists(), timeout=90)
    deleted = cli("delete", "stubborn", cwd=cluster.root, timeout=120)
    assert deleted.returncode == 0, deleted.stdout + deleted.stderr
    ended = eventually(
        lambda: (t := list(cluster.tasks("stubborn").values())) and t[0]["state"] == "TASK_KILLED" and t[0],
        timeout=60,
    )
    when = {s["state"]: s["timestamp"] for s in ended["statuses"]}
    assert {"TASK_STARTING", "TASK_RUNNING", "TASK_KILLING"} <= set(when), ended["statuses"]
    assert when["TASK_KILLED"] - when["TASK_KILLING"] >= 1.9, when  # not before the grace period
    task = cluster.completed_task("stubborn")
    assert task["statuses"][-1].get("message") == "Container exited with status 137", task["statuses"]
    assert cluster.mesos.containers(running=True) == []


@pytest.mark.tf
def test_the_mwms_example_in_the_tensorflow_image_ends_with_identical_weights(
    real_mesos: Start, docker_client: Any, tensorflow_image: str, tmp_path: Path
) -> None:
    """specs/mnist-mwms.yaml's training (MultiWorkerMirroredStrategy), two workers as Docker
    containers of the real agent, TF_CONFIG from tfdeclare: both end with the same weights."""
    cluster = docker_cluster(
        real_mesos, docker_client, tmp_path, "cpus:4;mem:16384;ports:[31000-31099]", REPO
    )
    spec = mwms_job(tensorflow_image, "TF_ENABLE_ONEDNN_OPTS: '0'")
    result = cluster.apply("mwms", spec, "--wait", "--timeout", "300", timeout=360)
    assert result.returncode == 0, result.stdout + result.stderr
    hashes = []
    for index in (0, 1):
        shown = cli("logs", "mwms", "--task", f"worker:{index}", cwd=cluster.root)
        assert shown.returncode == 0, shown.stderr
        hashes.append(re.findall(r"^FINAL_WEIGHTS_SHA256 ([0-9a-f]{64})$", shown.stdout, re.M))
    assert hashes[0] and hashes[0] == hashes[1], hashes
    assert sorted(t["state"] for t in cluster.tasks("mwms").values()) == ["TASK_FINISHED"] * 2


def test_a_cluster_starts_again_when_another_clusters_container_goes_while_its_agent_recovers(
    real_mesos: Start, docker_client: Any, tmp_path: Path
) -> None:
    """The tests' clusters share one engine: a "mesos-" container removed between the starting
    agent's ``docker ps -a`` and its ``docker inspect`` of it fails the agent's recovery and the
    cluster exits (tests/real_mesos.py, ``SIBLING_CONTAINER_GONE``). The harness starts it again.
    Staged with a ``docker`` that lists such a container once."""
    real = shutil.which("docker")
    assert real is not None
    listed_once = tmp_path / "listed-once"
    wrapper = tmp_path / "docker"
    wrapper.write_text(
        "#!/bin/sh\n"
        f'if [ "$3" = ps ] && [ ! -e {listed_once} ]; then\n'
        f"  : > {listed_once}\n"
        f'  {real} "$@" || exit\n'
        '  echo "0123456789ab   img   \\"true\\"   1 second ago   Exited (0) 1 second ago   '
        'mesos-00000000-0000-0000-0000-000000000000"\n'
        "  exit 0\n"
        "fi\n"
        f'exec {real} "$@"\n'
    )
    wrapper.chmod(0o755)
    mesos = real_mesos(agents=1, docker_socket=engine_socket(docker_client), flags={"DOCKER": str(wrapper)})
    assert listed_once.exists()
    assert SIBLING_CONTAINER_GONE.search(mesos.log.read_text()), mesos.log_tail()
    assert len(mesos.state()["slaves"]) == 1
