"""The job's phase as real task processes on the local backend make it (stub Python tasks, no
TensorFlow): Succeeded as soon as the chief exits 0, while the evaluator still finishes its
final evaluation; Restarting while a worker restarted alone is down, Running again once it
runs, its restarts shown beside the job's."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import cli, kill_leftovers, worker_ports
from tests.test_e2e_local import pids_alive, records, status_of
from tests.waiting import wait_until

pytestmark = pytest.mark.e2e  # real CLI processes running real jobs

PORTS = worker_ports()
# A backoff long enough for a test to see a task restarting alone down.
CONFIG = f"""\
restartBackoff: {{initialSeconds: 2, maxSeconds: 4}}
local: {{cpus: 8, mem: 8Gi, gpus: 0, portRange: {{first: {PORTS[0]}, last: {PORTS[1]}}}}}
"""

# Each task records itself in OUT (role-index.N.json, N: its restarts alone), then: the chief
# exits 0 after a while; worker-1 exits 1 in its first two runs (with FAIL_TWICE set); the
# rest serve until the file OUT/done exists (then exit 0), or until SIGTERM (then exit 143).
TASK = """\
import json, os, signal, sys, time
signal.signal(signal.SIGTERM, lambda *a: sys.exit(143))
role, index = os.environ["TFDECLARE_ROLE"], os.environ["TFDECLARE_INDEX"]
runs = int(os.environ.get("TFDECLARE_TASK_RESTARTS", "0"))
out = os.path.join(os.environ["OUT"], f"{role}-{index}.{runs}.json")
with open(out + ".tmp", "w") as handle:
    json.dump({"pid": os.getpid()}, handle)
os.rename(out + ".tmp", out)
if role == "chief":
    time.sleep(2)
    sys.exit(0)
if role == "worker" and index == "1" and os.environ.get("FAIL_TWICE") and runs < 2:
    time.sleep(0.5)
    sys.exit(1)
while not os.path.exists(os.path.join(os.environ["OUT"], "done")):
    time.sleep(0.1)
"""


def job(project: Path, name: str, replicas: list[str], env: str = "", extra: str = "") -> str:
    roles = "".join(
        f"    {role}: {{count: {count}, resources: {{cpus: 0.1, mem: 64}}}}\n"
        for role, count in (r.split("=") for r in replicas)
    )
    return (
        f"apiVersion: tfdeclare/v1\nkind: TFJob\nmetadata: {{name: {name}}}\nspec:\n"
        f"  command: [{sys.executable}, {project / 'specs' / 'task.py'}]\n"
        f"  env: {{OUT: {project / 'specs' / 'out'}{env}}}\n{extra}  replicas:\n{roles}"
    )


@pytest.fixture
def project(tmp_path: Path) -> Iterator[Path]:
    (tmp_path / "specs" / "out").mkdir(parents=True)
    (tmp_path / "specs" / "task.py").write_text(TASK)
    (tmp_path / "tfdeclare.yaml").write_text(CONFIG)
    yield tmp_path
    cli("delete", "--all", cwd=tmp_path)
    assert kill_leftovers(tmp_path) == [], "a task outlived its job"


def applying(project: Path) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "tfdeclare", "apply", "specs", "--wait", "--timeout", "90"],
        cwd=project,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )


def seen(project: Path, name: str, wanted: Any, apply: subprocess.Popen[str], what: str) -> dict[str, Any]:
    def look() -> dict[str, Any] | None:
        path = project / "status" / f"{name}.yaml"
        document = status_of(project, name) if path.exists() else None
        return document if document is not None and wanted(document) else None

    return wait_until(look, 60, what=what, stop=lambda: None if apply.poll() is None else "apply ended")


def finished(apply: subprocess.Popen[str]) -> str:
    try:
        output, _ = apply.communicate(timeout=90)
    finally:
        if apply.poll() is None:
            apply.kill()
            apply.communicate()
    assert apply.returncode == 0, output
    return output


def test_the_job_succeeds_when_the_chief_exits_0_while_the_evaluator_finishes(project: Path) -> None:
    replicas = ["chief=1", "ps=1", "worker=2", "evaluator=1"]
    (project / "specs" / "job.yaml").write_text(
        job(project, "comp", replicas, extra="  evaluatorGraceSeconds: 8\n")
    )
    apply = applying(project)
    try:
        done = seen(
            project, "comp", lambda d: d["phase"] != "Running" and d["phase"] != "Pending", apply, "done"
        )
        tasks = {t["role"]: t["state"] for t in done["tasks"]}
        assert done["phase"] == "Succeeded", done["message"]
        assert tasks["chief"] == "succeeded" and tasks["evaluator"] == "running", tasks
        assert "the evaluator finishes its final evaluation (up to 8 s" in done["message"]
        ready = {c["type"]: c for c in done["conditions"]}["Ready"]
        assert ready["status"] == "False" and "finishes its final evaluation" in ready["message"]
        completed = done["completionTime"]
        assert completed is not None
    finally:
        output = finished(apply)
    document = status_of(project, "comp")
    assert document["phase"] == "Succeeded" and document["completionTime"] == completed, output
    assert "the evaluator was stopped after evaluatorGraceSeconds" in document["message"]
    pids = [int(r["pid"]) for r in records(project).values()]  # type: ignore[call-overload]
    assert pids_alive(pids) == [], "ps, workers and evaluator were stopped"


def test_a_worker_restarted_alone_makes_the_job_restarting_until_it_runs_again(project: Path) -> None:
    (project / "specs" / "job.yaml").write_text(
        job(project, "tfail", ["ps=1", "worker=2"], ", FAIL_TWICE: '1'", "  backoffLimit: 2\n")
    )
    apply = applying(project)
    try:
        down = seen(project, "tfail", lambda d: d["phase"] == "Restarting", apply, "Restarting")
        assert "worker-1" in down["message"] and "backoffLimit 2" in down["message"], down["message"]
        assert down["restarts"] == 0 and down["taskRestarts"][0]["task"] == "worker-1"
        ready = {c["type"]: c for c in down["conditions"]}["Ready"]
        assert ready["status"] == "False"
        back = seen(
            project,
            "tfail",
            lambda d: d["phase"] == "Running" and d["taskRestarts"][0]["restarts"] == 2,
            apply,
            "Running after two restarts of worker-1 alone",
        )
        assert back["restarts"] == 0 and back["message"] == "3 task(s) running"
        table = cli("status", cwd=project).stdout
        (row,) = [line for line in table.splitlines() if line.startswith("tfail")]
        assert " Running " in row and " 0 (+2 alone) " in row, table
    finally:
        (project / "specs" / "out" / "done").write_text("")  # every task exits 0: the job Succeeds
        finished(apply)
    document = status_of(project, "tfail")
    assert document["phase"] == "Succeeded" and document["restarts"] == 0
    assert sorted(p.name for p in (project / "specs" / "out").glob("worker-1.*.json")) == [
        "worker-1.0.json",
        "worker-1.1.json",
        "worker-1.2.json",
    ]
