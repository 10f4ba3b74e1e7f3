"""Out-of-band cluster delivery (``mesos.clusterServer``) end to end: the real CLI and Mesos
backend against the master emulator, whose agents run the tasks as real processes. Every task
of a job gets, through the bootstrap, the TF_CONFIG and legacy flags it gets in band, no
TaskInfo carries an address of the job, and ``apply`` without ``--wait`` returns only once
its tasks have fetched their cluster (the server is gone afterwards). With real TensorFlow:
the example MultiWorkerMirroredStrategy and legacy-flags jobs train to Succeeded."""

from __future__ import annotations

import json
import os
import re
import shutil
import socket
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from tests.conftest import REPO, cli
from tests.mesos_emulator import Emulator
from tests.mesos_fixtures import PY, config_yaml, emulated_project, start_emulator
from tests.test_daemon import Daemon
from tests.waiting import wait_until
from tfdeclare.backends.mesos.bootstrap import BOOTSTRAPS, FETCH_ENV
from tfdeclare.core.enums import ClusterSpecStyle

# Each task writes what it sees (TF_CONFIG, argv) to OUT/<role>-<index>.json, then idles.
TASK = (
    "import json,os,sys,time;p=os.path.join(os.environ['OUT'],os.environ['TFDECLARE_ROLE']+'-'"
    "+os.environ['TFDECLARE_INDEX']+'.json');open(p+'.tmp','w').write(json.dumps("
    "[os.environ.get('TF_CONFIG'),sys.argv[1:],'" + FETCH_ENV + "' in os.environ]));os.rename(p+'.tmp',p);"
    "time.sleep(float(sys.argv[-1]))"
)


@pytest.fixture
def project(tmp_path: Path) -> Iterator[tuple[Path, Emulator]]:
    emulator = start_emulator(tmp_path, agents=2, agent_resources="cpus:4;mem:4096;ports:[31000-31099]")
    with emulated_project(tmp_path, emulator, clusterServer="{minBytes: 0, fetchWaitSeconds: 60}") as project:
        yield project


def accepted_task_infos(emulator: Emulator) -> list[dict[str, object]]:
    return [
        info
        for call in emulator.calls("ACCEPT")
        for operation in call["call"]["accept"]["operations"]
        for info in operation.get("launch", {}).get("task_infos", [])
    ]


@pytest.mark.slow
def test_every_task_fetches_what_it_gets_in_band(project: tuple[Path, Emulator]) -> None:
    root, emulator = project
    out = root / "out"
    out.mkdir()
    command = [PY, "-c", TASK, "--ps={ps_hosts}", "--workers={worker_hosts}", "{job_name}:{task_index}", "2"]
    (root / "specs" / "job.yaml").write_text(
        "apiVersion: tfdeclare/v1\nkind: TFJob\nmetadata: {name: wired}\nspec:\n"
        f"  command: {json.dumps(command)}\n  env: {{OUT: {out}}}\n  clusterSpec: both\n"
        "  replicas:\n"
        "    chief: {count: 1, resources: {cpus: 0.1, mem: 32}}\n"
        "    ps: {count: 1, resources: {cpus: 0.1, mem: 32}}\n"
        "    worker: {count: 2, resources: {cpus: 0.1, mem: 32}}\n"
        "    evaluator: {count: 1, resources: {cpus: 0.1, mem: 32}}\n"
    )
    applied = cli("apply", "specs", "--backend", "mesos", cwd=root, timeout=120)  # no --wait
    assert applied.returncode == 0, applied.stdout + applied.stderr
    names = ["chief-0", "ps-0", "worker-0", "worker-1", "evaluator-0"]
    # apply returned once every task had fetched: each wrote what it saw before apply's end
    seen = {name: json.loads((out / f"{name}.json").read_text()) for name in names}
    status = yaml.safe_load((root / "status" / "wired.yaml").read_text())
    address = {f"{t['role']}-{t['index']}": f"{t['host']}:{t['port']}" for t in status["tasks"]}
    training = {"chief": [address["chief-0"]], "ps": [address["ps-0"]]}
    training["worker"] = [address["worker-0"], address["worker-1"]]
    for name, (tf_config, argv, url_seen) in seen.items():
        role, index = name.split("-")
        cluster = {**training, "evaluator": [address["evaluator-0"]]} if role == "evaluator" else training
        expected = json.dumps(
            {"cluster": cluster, "task": {"type": role, "index": int(index)}}, separators=(",", ":")
        )
        assert tf_config == expected, name
        workers = ",".join(training["worker"])
        assert argv == [f"--ps={address['ps-0']}", f"--workers={workers}", f"{role}:{index}", "2"]
        assert not url_seen
    infos = accepted_task_infos(emulator)
    assert len(infos) == 5
    for info in infos:
        variables = info["command"]["environment"]["variables"]  # type: ignore[index]
        assert "TF_CONFIG" not in {v["name"] for v in variables}
        assert address["worker-1"] not in json.dumps(info)
        arguments = info["command"]["arguments"]  # type: ignore[index]
        bootstrap = BOOTSTRAPS[ClusterSpecStyle.BOTH]
        at = arguments.index(bootstrap)  # after the working directory's `sh -c 'cd ...'`
        assert arguments[at - 2 : at + 2] == ["python3", "-c", bootstrap, PY]
    waited = cli("apply", "specs", "--backend", "mesos", "--wait", "--timeout", "60", cwd=root, timeout=90)
    assert waited.returncode == 0, waited.stdout + waited.stderr
    assert yaml.safe_load((root / "status" / "wired.yaml").read_text())["phase"] == "Succeeded"


@pytest.mark.slow
def test_a_program_that_exits_86_after_its_fetch_fails_its_job(project: tuple[Path, Emulator]) -> None:
    """86 is also the bootstrap's code for a failed fetch. A task the server answered runs its
    program, whose exit 86 is its own: the job fails by ``backoffLimit: 0`` (it was taken
    for the platform event ``ClusterUndelivered`` and the job restarted, up to
    ``platformRestartLimit``)."""
    root, _ = project
    command = [PY, "-c", "import sys; sys.exit(86)"]
    (root / "specs" / "job.yaml").write_text(
        "apiVersion: tfdeclare/v1\nkind: TFJob\nmetadata: {name: exits}\nspec:\n"
        f"  command: {json.dumps(command)}\n  backoffLimit: 0\n"
        "  replicas: {worker: {count: 2, resources: {cpus: 0.1, mem: 32}}}\n"
    )
    waited = cli("apply", "specs", "--backend", "mesos", "--wait", "--timeout", "60", cwd=root, timeout=90)
    assert waited.returncode == 1, waited.stdout + waited.stderr  # a job Failed under --wait
    status = yaml.safe_load((root / "status" / "exits.yaml").read_text())
    assert status["phase"] == "Failed", status
    assert status.get("platformRestarts", 0) == 0 and not status.get("platformEvents"), status
    assert {t["exitCode"] for t in status["tasks"] if t.get("exitCode") is not None} == {86}, status


@pytest.mark.tf
@pytest.mark.e2e
def test_tensorflow_jobs_train_with_their_cluster_fetched(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """specs/mnist-mwms.yaml (TF_CONFIG, MultiWorkerMirroredStrategy) and legacy-flags.yaml
    (TF1 flags) as Mesos tasks whose cluster every task fetches."""
    monkeypatch.setenv("PATH", f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}")
    emulator = start_emulator(
        tmp_path, agents=2, agent_resources="cpus:4;mem:16384;ports:[31000-31099]", kill_grace_period=3.0
    )
    with emulated_project(tmp_path, emulator, clusterServer="{minBytes: 0}") as (root, _):
        for name in ("mnist-mwms.yaml", "mwms_train.py", "legacy-flags.yaml", "legacy_train.py"):
            shutil.copy(REPO / "specs" / name, root / "specs" / name)
        result = cli(
            "apply", "specs", "--wait", "--backend", "mesos", "--timeout", "400", cwd=root, timeout=450
        )
        assert result.returncode == 0, result.stdout + result.stderr
        for name in ("mnist-mwms", "legacy-flags"):
            document = yaml.safe_load((root / "status" / f"{name}.yaml").read_text())
            assert document["phase"] == "Succeeded", (name, document["message"])

        def log(job: str, task: str) -> str:
            shown = cli("logs", job, "--task", task, cwd=root)
            assert shown.returncode == 0, shown.stderr
            return shown.stdout

        hashes = [
            re.findall(r"^FINAL_WEIGHTS_SHA256 ([0-9a-f]{64})$", log("mnist-mwms", f"worker:{i}"), re.M)
            for i in (0, 1)
        ]
        assert hashes[0] and hashes[0] == hashes[1], "both workers end with identical weights"
        for index in (0, 1):
            steps = re.findall(r"^FINAL_GLOBAL_STEP (\d+)", log("legacy-flags", f"worker:{index}"), re.M)
            assert steps and int(steps[0]) >= 200
        infos = accepted_task_infos(emulator)
        assert infos and all('"TF_CONFIG"' not in json.dumps(info) for info in infos)


@pytest.mark.slow
@pytest.mark.parametrize("kept", [True, False])
def test_the_next_daemon_serves_the_clusters_its_predecessor_handed_out(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, kept: bool
) -> None:
    """The daemon stops (after ``fetchWaitSeconds``: 1) before the tasks it launched fetch
    their cluster (``python3`` on the agents' PATH is a wrapper that waits 4 s in attempt 0).
    The next daemon serves the same generations, secrets and port (``clusters.json`` in the
    state folder; ``listen`` left at port 0): the tasks fetch their cluster from it and the
    job runs on, never restarted. With that file lost (``kept`` False; a fixed port), their
    tokens are stale: 403, exit 86, and the next daemon counts that as the platform event
    ``ClusterUndelivered`` (not against ``backoffLimit: 0``) and restarts the job, whose tasks
    then fetch their cluster from it."""
    wrappers = tmp_path / "bin"
    wrappers.mkdir()
    python3 = wrappers / "python3"
    # before the bootstrap: the attempt is the last word of its variable (bootstrap.fetch_value)
    python3.write_text(f'#!/bin/sh\n[ "${{{FETCH_ENV}##* }}" = 0 ] && sleep 4\nexec {PY} "$@"\n')
    python3.chmod(0o755)
    monkeypatch.setenv("PATH", f"{wrappers}{os.pathsep}{os.environ['PATH']}")
    listen = ""
    if not kept:
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            listen = f"listen: '127.0.0.1:{probe.getsockname()[1]}', "
    emulator = start_emulator(tmp_path, agents=1)
    settings = f"{{{listen}minBytes: 0, fetchWaitSeconds: 1}}"
    with emulated_project(tmp_path, emulator, clusterServer=settings) as (root, _):
        out = root / "out"
        out.mkdir()
        command = [PY, "-c", TASK, "600"]
        (root / "specs" / "job.yaml").write_text(
            "apiVersion: tfdeclare/v1\nkind: TFJob\nmetadata: {name: wired}\nspec:\n"
            f"  command: {json.dumps(command)}\n  env: {{OUT: {out}}}\n  backoffLimit: 0\n"
            "  replicas: {worker: {count: 2, resources: {cpus: 0.1, mem: 32}}}\n"
        )
        first = Daemon(root, "--specs", "specs", "--interval", "1")
        try:
            wait_until(lambda: len(accepted_task_infos(emulator)) == 2, timeout=60)
        finally:
            first.stop()  # its server closes after fetchWaitSeconds: the tasks have not fetched
        handed = root / ".tfdeclare" / "mesos" / "clusters.json"
        assert handed.stat().st_mode & 0o777 == 0o600
        (secret,) = [g["secret"] for g in json.loads(handed.read_text())["generations"]]
        if not kept:
            handed.unlink()
        second = Daemon(root, "--specs", "specs", "--interval", "1")
        try:

            def fetched() -> dict[str, object] | None:
                path = root / "status" / "wired.yaml"
                doc = yaml.safe_load(path.read_text()) if path.exists() else None
                ok = doc and doc["phase"] == "Running" and doc.get("platformRestarts") == (0 if kept else 1)
                return (
                    doc
                    if ok and (out / "worker-1.json").exists() and (out / "worker-0.json").exists()
                    else None
                )

            doc = wait_until(fetched, timeout=90)
            assert doc["restarts"] == 0  # type: ignore[index]
            for index in (0, 1):
                tf_config = json.loads((out / f"worker-{index}.json").read_text())[0]
                assert json.loads(tf_config)["task"] == {"type": "worker", "index": index}
            said = [f.read_text() for f in (tmp_path / "sandboxes").rglob("stderr")]
            failed = [text for text in said if "tfdeclare: cannot fetch the cluster: HTTP Error 403" in text]
            if kept:
                assert not failed and doc.get("platformEvents") in (None, [])  # type: ignore[union-attr]
                assert len(accepted_task_infos(emulator)) == 2  # the first launch runs on
            else:
                assert [e["cause"] for e in doc["platformEvents"]] == ["ClusterUndelivered"]  # type: ignore[index]
                assert failed, said  # the first to fail restarts the job: the other may be stopped first
        finally:
            second.stop()
        shown = first.text() + second.text() + "".join(p.read_text() for p in (root / "status").iterdir())
        assert secret not in shown  # the generation's secret is in no log and no status


@pytest.mark.docker
@pytest.mark.slow
@pytest.mark.e2e
@pytest.mark.parametrize("containerizer", ["docker", "mesos"])
def test_tasks_in_containers_fetch_their_cluster(
    docker_client: object, base_image: str, tmp_path: Path, containerizer: str
) -> None:
    """The image's ``python3`` runs the bootstrap (host networking: the framework's loopback
    server is reachable), under the Docker containerizer and the Mesos one."""
    from tests.container_jobs import PS_AND_TWO_WORKERS, allowed_host_paths, boxed_job

    emulator = start_emulator(tmp_path, agents=2, containerizers=("docker", "mesos"))
    try:
        root = tmp_path / "project"
        out = tmp_path / "out"
        (root / "specs").mkdir(parents=True)
        out.mkdir()
        config = config_yaml(emulator.url, containerizer=containerizer, clusterServer="{minBytes: 0}")
        (root / "tfdeclare.yaml").write_text(config + allowed_host_paths(REPO, tmp_path))
        (root / "specs" / "boxed.yaml").write_text(boxed_job("boxed", base_image, out, PS_AND_TWO_WORKERS))
        result = cli("apply", "specs", "--wait", "--backend", "mesos", "--timeout", "90", cwd=root)
        assert result.returncode == 0, result.stdout + result.stderr
        document = yaml.safe_load((root / "status" / "boxed.yaml").read_text())
        assert document["phase"] == "Succeeded"
        address = {f"{t['role']}-{t['index']}": f"{t['host']}:{t['port']}" for t in document["tasks"]}
        cluster = {"ps": [address["ps-0"]], "worker": [address["worker-0"], address["worker-1"]]}
        records = {path.stem: json.loads(path.read_text()) for path in out.glob("*.json")}
        assert sorted(records) == ["ps-0.0", "worker-0.0", "worker-1.0"]
        for name, record in records.items():
            role, index = name.split(".")[0].split("-")
            assert record["tfConfig"] == {"cluster": cluster, "task": {"type": role, "index": int(index)}}
            assert FETCH_ENV not in record["env"]
        infos = accepted_task_infos(emulator)
        assert len(infos) == 3 and all(address["worker-1"] not in json.dumps(info) for info in infos)
        assert cli("delete", "boxed", cwd=root).returncode == 0
    finally:
        emulator.stop()


@pytest.mark.slow
@pytest.mark.parametrize(
    ("wrapper", "waits_out"),
    [
        ("exit 3", False),  # the tasks end before they fetch: apply does not wait for them
        ("sleep 30", True),  # they neither fetch nor end: apply waits fetchWaitSeconds, then says so
    ],
)
def test_apply_waits_for_the_fetches_of_live_tasks_only(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, wrapper: str, waits_out: bool
) -> None:
    wrappers = tmp_path / "bin"
    wrappers.mkdir()
    (wrappers / "python3").write_text(f"#!/bin/sh\n{wrapper}\n")
    (wrappers / "python3").chmod(0o755)
    monkeypatch.setenv("PATH", f"{wrappers}{os.pathsep}{os.environ['PATH']}")
    emulator = start_emulator(tmp_path, agents=1)
    with emulated_project(tmp_path, emulator, clusterServer="{minBytes: 0, fetchWaitSeconds: 2}") as (
        root,
        _,
    ):
        (root / "specs" / "job.yaml").write_text(
            "apiVersion: tfdeclare/v1\nkind: TFJob\nmetadata: {name: wired}\nspec:\n"
            f"  command: [{PY}, -c, pass]\n  backoffLimit: 0\n"
            "  replicas: {worker: {count: 2, resources: {cpus: 0.1, mem: 32}}}\n"
        )
        if not waits_out:  # the first pass after their end sees them failed: wait for that here
            applied = cli(
                "apply", "specs", "--backend", "mesos", "--wait", "--timeout", "60", cwd=root, timeout=90
            )
            assert applied.returncode != 0 and "wired" in applied.stdout + applied.stderr
        else:
            applied = cli("apply", "specs", "--backend", "mesos", cwd=root, timeout=90)
            assert applied.returncode == 0, applied.stdout + applied.stderr
        said = "closing the cluster server before 2 task(s) fetched their cluster"
        assert (said in applied.stderr) is waits_out, applied.stderr
