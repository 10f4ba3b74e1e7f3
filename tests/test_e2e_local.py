"""End to end on the local backend, as a user runs it: real CLI processes, real task
processes, real signals. TensorFlow itself is exercised in test_e2e_tensorflow.py."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import jsonschema
import pytest
import yaml

from tests.conftest import REPO, cli, kill_leftovers, worker_ports
from tests.records_db import delete_row, put_row
from tests.waiting import wait_until
from tfdeclare.core.spec.schema import schema_text

pytestmark = pytest.mark.e2e  # real CLI processes running real jobs

TASK = str(REPO / "tests" / "e2e_task.py")
PORTS = worker_ports()
CONFIG = f"""\
restartBackoff: {{initialSeconds: 0.2, maxSeconds: 1}}
local: {{cpus: 8, mem: 8Gi, gpus: 0, portRange: {{first: {PORTS[0]}, last: {PORTS[1]}}}}}
"""


def spec(
    name: str,
    replicas: dict[str, tuple[int, str]],
    *,
    extra: str = "",
    legacy: bool = False,
    out: str = "out",
) -> str:
    lines = [
        "apiVersion: tfdeclare/v1",
        "kind: TFJob",
        f"metadata: {{name: {name}}}",
        "spec:",
        f"  env: {{OUT: {out}}}",
        "  workingDir: .",
    ]
    if legacy:
        lines.append("  clusterSpec: legacy_flags")
    lines.append("  replicas:")
    for role, (count, mode) in replicas.items():
        flags = (
            ", '--ps_hosts={ps_hosts}', '--worker_hosts={worker_hosts}', '--job_name={job_name}', '--task_index={task_index}'"
            if legacy
            else ""
        )
        lines.append(
            f"    {role}: {{count: {count}, resources: {{cpus: 0.1, mem: 64}}, command: [python, {TASK}, '{mode}'{flags}]}}"
        )
    return "\n".join(lines) + "\n" + extra


@pytest.fixture
def project(tmp_path: Path) -> Iterator[Path]:
    (tmp_path / "specs").mkdir()
    (tmp_path / "specs" / "out").mkdir()
    (tmp_path / "tfdeclare.yaml").write_text(CONFIG)
    yield tmp_path
    cli("delete", "--all", cwd=tmp_path)
    assert kill_leftovers(tmp_path) == [], "a task outlived its job"


def records(project: Path) -> dict[str, dict[str, object]]:
    return {p.stem: json.loads(p.read_text()) for p in (project / "specs" / "out").glob("*.json")}


def status_of(project: Path, name: str) -> dict[str, object]:
    document = yaml.safe_load((project / "status" / f"{name}.yaml").read_text())
    jsonschema.validate(document, json.loads(schema_text("status")))
    return document  # type: ignore[no-any-return]


def pids_alive(pids: list[int]) -> list[int]:
    alive = []
    for pid in pids:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            continue
        with open(f"/proc/{pid}/stat", "rb") as handle:
            if handle.read().split(b") ")[1][:1] != b"Z":
                alive.append(pid)
    return alive


def test_every_role_gets_its_cluster_and_completion_stops_the_rest(project: Path) -> None:
    (project / "specs" / "job.yaml").write_text(
        spec(
            "roles",
            {"chief": (1, "wait=5"), "ps": (1, "serve"), "worker": (2, "serve"), "evaluator": (1, "serve")},
            extra="  evaluatorGraceSeconds: 1\n",  # this evaluator never ends: stopped after its grace
        )
    )
    result = cli("apply", "specs", "--wait", "--timeout", "60", cwd=project)
    assert result.returncode == 0, result.stdout + result.stderr
    seen = records(project)
    assert set(seen) == {"chief-0.0", "ps-0.0", "worker-0.0", "worker-1.0", "evaluator-0.0"}
    training = [seen[n]["tfConfig"] for n in ("chief-0.0", "ps-0.0", "worker-0.0", "worker-1.0")]
    clusters = [c["cluster"] for c in training]  # type: ignore[index]
    assert all(c == clusters[0] for c in clusters), "every training task sees the same cluster"
    assert set(clusters[0]) == {"chief", "ps", "worker"}, "the evaluator is kept out of the training cluster"
    assert [c["task"] for c in training] == [  # type: ignore[index]
        {"type": "chief", "index": 0},
        {"type": "ps", "index": 0},
        {"type": "worker", "index": 0},
        {"type": "worker", "index": 1},
    ]
    evaluator = seen["evaluator-0.0"]["tfConfig"]
    assert evaluator["task"] == {"type": "evaluator", "index": 0}  # type: ignore[index]
    assert set(evaluator["cluster"]) == {"chief", "ps", "worker", "evaluator"}  # type: ignore[index]
    addresses = [a for c in evaluator["cluster"].values() for a in c]  # type: ignore[index]
    assert len(set(addresses)) == 5
    assert pids_alive([int(r["pid"]) for r in seen.values()]) == [], "ps, workers and evaluator were stopped"
    document = status_of(project, "roles")
    assert document["phase"] == "Succeeded"
    assert "the evaluator was stopped after evaluatorGraceSeconds" in str(document["message"])
    assert {t["role"]: t["state"] for t in document["tasks"]}["chief"] == "succeeded"  # type: ignore[index, union-attr]


def test_legacy_flags_are_substituted(project: Path) -> None:
    (project / "specs" / "job.yaml").write_text(
        spec("legacy", {"ps": (1, "serve"), "worker": (2, "wait=3")}, legacy=True)
    )
    result = cli("apply", "specs", "--wait", "--timeout", "60", cwd=project)
    assert result.returncode == 0, result.stdout + result.stderr
    seen = records(project)
    worker1 = seen["worker-1.0"]["argv"]
    ps_hosts = worker1[2].removeprefix("--ps_hosts=")  # type: ignore[index]
    worker_hosts = worker1[3].removeprefix("--worker_hosts=").split(",")  # type: ignore[index]
    assert worker1[4:] == ["--job_name=worker", "--task_index=1"]  # type: ignore[index]
    assert len(worker_hosts) == 2 and ps_hosts.count(":") == 1
    assert seen["ps-0.0"]["argv"][4:] == ["--job_name=ps", "--task_index=0"]  # type: ignore[index]
    assert seen["worker-1.0"]["tfConfig"] is None


def test_a_task_that_fails_once_restarts_the_job_on_the_same_ports(project: Path) -> None:
    (project / "specs" / "job.yaml").write_text(spec("flaky", {"worker": (2, "fail-once")}))
    result = cli("apply", "specs", "--wait", "--timeout", "60", cwd=project)
    assert result.returncode == 0, result.stdout + result.stderr
    document = status_of(project, "flaky")
    assert document["phase"] == "Succeeded" and document["restarts"] == 1 and document["attempt"] == 1
    seen = records(project)
    assert seen["worker-0.1"]["env"]["TFDECLARE_ATTEMPT"] == "1"  # type: ignore[index]
    assert seen["worker-0.0"]["tfConfig"]["cluster"] == seen["worker-0.1"]["tfConfig"]["cluster"]  # type: ignore[index]


def test_a_job_that_fails_for_good_exits_1_and_leaves_no_process(project: Path) -> None:
    (project / "specs" / "job.yaml").write_text(
        spec(
            "doomed",
            {"chief": (1, "exit=2"), "ps": (1, "serve"), "worker": (1, "serve")},
            extra="  backoffLimit: 1\n  restartPolicy: OnFailure\n",
        )
    )
    result = cli("apply", "specs", "--wait", "--timeout", "60", cwd=project)
    assert result.returncode == 1
    assert "failed: doomed" in result.stderr
    document = status_of(project, "doomed")
    assert document["phase"] == "Failed" and document["restarts"] == 1
    reasons = {c["type"]: c["reason"] for c in document["conditions"]}  # type: ignore[union-attr]
    assert reasons["Stalled"] == "BackoffLimitExceeded"
    wait_until(lambda: pids_alive([int(r["pid"]) for r in records(project).values()]) == [])


def test_killed_from_outside_is_restarted_per_policy(project: Path) -> None:
    (project / "specs" / "job.yaml").write_text(spec("victim", {"worker": (1, "serve")}))
    assert cli("apply", "specs", cwd=project).returncode == 0
    wait_until(lambda: "worker-0.0" in records(project))
    os.kill(int(records(project)["worker-0.0"]["pid"]), signal.SIGKILL)  # type: ignore[call-overload]
    wait_until(
        lambda: (cli("status", "--refresh", cwd=project), "worker-0.1" in records(project))[1], timeout=30
    )
    document = status_of(project, "victim")
    assert document["restarts"] == 1
    assert cli("delete", "victim", cwd=project).returncode == 0
    wait_until(lambda: pids_alive([int(r["pid"]) for r in records(project).values()]) == [])


def test_cli_killed_during_apply_then_run_again_launches_no_duplicates(project: Path) -> None:
    (project / "specs" / "job.yaml").write_text(
        spec("survivor", {"ps": (1, "serve"), "worker": (2, "serve")})
    )
    first = subprocess.Popen(
        [sys.executable, "-m", "tfdeclare", "apply", "specs", "--wait"],
        cwd=project,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    wait_until(lambda: len(records(project)) == 3)
    first.kill()
    first.wait()
    pids = sorted(int(r["pid"]) for r in records(project).values())
    again = cli("apply", "specs", cwd=project)
    assert again.returncode == 0, again.stderr
    assert "No changes" in again.stdout
    launched = list((project / ".tfdeclare" / "local" / "tasks").iterdir())  # one folder per launch
    assert len(launched) == 3 and len(records(project)) == 3, "nothing was launched twice"
    assert pids_alive(pids) == pids, "the running tasks were adopted, not replaced"
    document = status_of(project, "survivor")
    assert document["phase"] == "Running"
    assert cli("delete", "survivor", cwd=project).returncode == 0
    assert pids_alive(pids) == []
    assert not (project / "status" / "survivor.yaml").exists()


def test_lock_names_the_holder_and_a_dead_holder_frees_it(project: Path) -> None:
    (project / "specs" / "job.yaml").write_text(spec("long", {"worker": (1, "serve")}))
    holder = subprocess.Popen(
        [sys.executable, "-m", "tfdeclare", "apply", "specs", "--wait"],
        cwd=project,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    wait_until(lambda: len(records(project)) == 1)
    second = cli("apply", "specs", cwd=project)
    assert second.returncode == 1
    assert f"pid {holder.pid}" in second.stderr and "holds the state folder lock" in second.stderr
    holder.kill()
    holder.wait()
    third = cli("apply", "specs", cwd=project)  # the kernel released the dead holder's lock
    assert third.returncode == 0, third.stderr
    assert cli("delete", "long", cwd=project).returncode == 0


def test_apply_without_wait_returns_and_status_notices_completion(project: Path) -> None:
    (project / "specs" / "job.yaml").write_text(spec("quick", {"worker": (2, "until=go")}))
    result = cli("apply", "specs", cwd=project)  # returns although its tasks cannot end yet
    assert result.returncode == 0, result.stderr
    assert status_of(project, "quick")["phase"] in ("Pending", "Running")
    (project / "specs" / "out" / "go").touch()
    wait_until(
        lambda: (
            cli("status", "--refresh", cwd=project),
            status_of(project, "quick")["phase"] == "Succeeded",
        )[1]
    )
    shown = cli("status", "quick", cwd=project)
    assert "quick: Succeeded" in shown.stdout
    as_json = json.loads(cli("status", "-o", "json", cwd=project).stdout)
    assert [d["name"] for d in as_json] == ["quick"]
    logs = cli("logs", "quick", "--task", "worker:1", cwd=project)
    assert logs.returncode == 0


def test_saved_plan_is_refused_when_stale(project: Path) -> None:
    (project / "specs" / "job.yaml").write_text(spec("planned", {"worker": (1, "serve")}))
    assert cli("plan", "specs", "--out", "plan.json", cwd=project).returncode == 0
    assert cli("apply", "specs", cwd=project).returncode == 0  # the state moves on
    stale = cli("apply", "plan.json", cwd=project)
    assert stale.returncode == 1 and "is stale" in stale.stderr
    (project / "specs" / "job.yaml").write_text(
        spec("planned", {"worker": (1, "serve")}, extra="  backoffLimit: 7\n")
    )
    assert cli("plan", "specs", "--out", "plan2.json", cwd=project).returncode == 0
    applied = cli("apply", "plan2.json", cwd=project)
    assert applied.returncode == 0, applied.stderr
    assert "planned will be updated in place" in applied.stdout
    assert cli("delete", "planned", cwd=project).returncode == 0


def test_adding_an_evaluator_restarts_nothing_else(project: Path) -> None:
    (project / "specs" / "job.yaml").write_text(spec("grow", {"chief": (1, "serve"), "worker": (1, "serve")}))
    assert cli("apply", "specs", cwd=project).returncode == 0
    wait_until(lambda: len(records(project)) == 2)
    before = {n: r["pid"] for n, r in records(project).items()}
    (project / "specs" / "job.yaml").write_text(
        spec("grow", {"chief": (1, "serve"), "worker": (1, "serve"), "evaluator": (1, "serve")})
    )
    planned = cli("plan", "specs", cwd=project)
    assert "± grow will be resized" in planned.stdout and "starts: evaluator-0" in planned.stdout
    assert "restarts:" not in planned.stdout
    assert cli("apply", "specs", cwd=project).returncode == 0
    wait_until(lambda: len(records(project)) == 3)
    after = records(project)
    assert {n: after[n]["pid"] for n in before} == before
    assert pids_alive([int(p) for p in before.values()]) == [int(p) for p in before.values()]
    assert cli("delete", "grow", cwd=project).returncode == 0


def test_a_resize_is_a_new_run_of_the_job(project: Path) -> None:
    """Every task restarts with the new cluster: the attempt moves on, as TFDECLARE_ATTEMPT."""
    (project / "specs" / "job.yaml").write_text(spec("rs", {"worker": (1, "serve")}))
    assert cli("apply", "specs", cwd=project).returncode == 0
    wait_until(lambda: "worker-0.0" in records(project))
    (project / "specs" / "job.yaml").write_text(spec("rs", {"worker": (2, "serve")}))
    assert cli("apply", "specs", cwd=project).returncode == 0
    wait_until(lambda: {"worker-0.1", "worker-1.1"} <= set(records(project)))
    seen = records(project)
    assert set(seen) == {"worker-0.0", "worker-0.1", "worker-1.1"}, "nothing ran as attempt 0 after it"
    assert [seen[n]["env"]["TFDECLARE_ATTEMPT"] for n in ("worker-0.1", "worker-1.1")] == ["1", "1"]  # type: ignore[index]
    wait_until(lambda: status_of(project, "rs")["phase"] == "Running")
    document = status_of(project, "rs")
    assert (document["attempt"], document["restarts"]) == (1, 0), "a resize is a new run, not a failure"
    assert cli("delete", "rs", cwd=project).returncode == 0


def test_a_failed_run_stays_visible_while_the_job_backs_off(project: Path) -> None:
    """During the backoff before a whole-job restart the status says which task failed and
    how, and `logs` (also --task, --previous, --follow) prints that run's output."""
    (project / "tfdeclare.yaml").write_text(
        CONFIG.replace("initialSeconds: 0.2, maxSeconds: 1", "initialSeconds: 12")
    )
    program = "import os,sys; a=os.environ['TFDECLARE_ATTEMPT']; print('attempt', a, flush=True); sys.exit(5 if a == '0' else 0)"
    (project / "specs" / "job.yaml").write_text(
        "apiVersion: tfdeclare/v1\nkind: TFJob\nmetadata: {name: bo}\nspec:\n"
        f"  command: [python, -c, {json.dumps(program)}]\n"
        "  replicas: {worker: {count: 1, resources: {cpus: 0.1, mem: 64}}}\n"
    )
    assert cli("apply", "specs", cwd=project).returncode == 0
    wait_until(
        lambda: status_of(project, "bo")["restarts"] == 1 and status_of(project, "bo")["tasks"][0]["id"]
    )  # type: ignore[index]
    document = status_of(project, "bo")
    assert document["phase"] == "Restarting"
    assert str(document["message"]).startswith("worker-0 exited 5; restart 1 of 3 in ")
    (entry,) = document["tasks"]  # type: ignore[misc]
    assert (entry["state"], entry["exitCode"], entry["attempt"]) == ("failed", 5, 0)
    for extra in ((), ("-p",), ("--task", "worker-0"), ("--task", "worker-0", "-p")):
        shown = cli("logs", "bo", *extra, cwd=project)
        assert shown.returncode == 0, shown.stderr
        assert shown.stdout.replace("worker-0 | ", "") == "attempt 0\n"
        # "restarts in N s" while the backoff runs, "restarts next" once it is over (a slow
        # machine may take the 12 s on the commands above)
        assert re.search(r"worker-0: exited 5; restarts (in \d+ s|next)", shown.stderr), shown.stderr
    following = subprocess.Popen(  # it waits for a controller (as for the background one)
        [sys.executable, "-m", "tfdeclare", "logs", "bo", "--follow"],
        cwd=project,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "TFDECLARE_BACKGROUND_CONTROLLER": "on"},
    )
    assert following.stdout is not None
    assert following.stdout.readline() == "worker-0 | attempt 0\n"  # the failed run, at once
    assert cli("apply", "specs", "--wait", "--timeout", "60", cwd=project).returncode == 0
    rest, err = following.communicate(timeout=60)
    assert following.returncode == 0 and rest == "worker-0 | attempt 1\n", err  # then the next run
    assert status_of(project, "bo")["phase"] == "Succeeded"


def test_an_invalid_file_keeps_its_job_running(project: Path) -> None:
    (project / "specs" / "job.yaml").write_text(spec("steady", {"worker": (1, "serve")}))
    assert cli("apply", "specs", cwd=project).returncode == 0
    wait_until(lambda: len(records(project)) == 1)
    (project / "specs" / "job.yaml").write_text(
        "apiVersion: tfdeclare/v1\nkind: TFJob\nmetadata: {name: steady\n"
    )
    result = cli("apply", "specs", "--prune", cwd=project)
    assert result.returncode == 1 and "specs/job.yaml:4:1: error:" in result.stderr
    assert pids_alive([int(records(project)["worker-0.0"]["pid"])])
    assert cli("delete", "steady", cwd=project).returncode == 0


def test_a_damaged_record_leaves_its_job_alone_and_the_others_managed(project: Path) -> None:
    (project / "specs" / "a.yaml").write_text(spec("hurt", {"worker": (1, "serve")}))
    (project / "specs" / "fine-out").mkdir()
    (project / "specs" / "b.yaml").write_text(spec("fine", {"worker": (1, "sleep=1")}, out="fine-out"))
    assert cli("apply", "specs", cwd=project).returncode == 0
    wait_until(lambda: len(records(project)) == 1)
    put_row(project / ".tfdeclare", "hurt", "{not json")
    shown = cli("status", "--refresh", cwd=project)
    assert shown.returncode == 0
    assert "hurt: its record cannot be read, so it is left alone" in shown.stderr
    wait_until(
        lambda: (cli("status", "--refresh", cwd=project), status_of(project, "fine")["phase"] == "Succeeded")[
            1
        ]
    )
    assert pids_alive([int(records(project)["worker-0.0"]["pid"])]), "the damaged job's task was not stopped"
    delete_row(project / ".tfdeclare", "hurt")
    cli("status", "--refresh", cwd=project)  # now its task belongs to no job and is stopped
    wait_until(lambda: pids_alive([int(records(project)["worker-0.0"]["pid"])]) == [])


def test_gpu_tasks_get_exactly_their_own_devices(project: Path) -> None:
    (project / "tfdeclare.yaml").write_text(CONFIG.replace("gpus: 0", "gpus: 2"))
    replicas = "\n".join(
        [
            "  replicas:",
            f"    chief: {{count: 1, resources: {{cpus: 0.1, mem: 64}}, command: [python, {TASK}, serve]}}",
            f"    worker: {{count: 2, resources: {{cpus: 0.1, mem: 64, gpus: 1}}, command: [python, {TASK}, serve]}}",
        ]
    )
    (project / "specs" / "gpu.yaml").write_text(
        "apiVersion: tfdeclare/v1\nkind: TFJob\nmetadata: {name: gpu}\nspec:\n  env: {OUT: out}\n  workingDir: .\n"
        + replicas
        + "\n"
    )
    (project / "specs" / "more-out").mkdir()
    (project / "specs" / "more.yaml").write_text(
        spec("more", {"worker": (1, "serve")}, out="more-out").replace("mem: 64}", "mem: 64, gpus: 1}")
    )
    assert cli("apply", "specs/gpu.yaml", cwd=project).returncode == 0
    wait_until(lambda: len(records(project)) == 3)
    seen = records(project)
    devices = sorted(seen[f"worker-{i}.0"]["env"]["CUDA_VISIBLE_DEVICES"] for i in (0, 1))  # type: ignore[index]
    assert devices == ["0", "1"], "each GPU task sees exactly its own device"
    assert seen["chief-0.0"]["env"]["CUDA_VISIBLE_DEVICES"] == "", "a CPU task on a GPU machine sees none"
    assert cli("apply", "specs", cwd=project).returncode == 0
    document = status_of(project, "more")
    assert document["phase"] == "Pending"
    assert {c["type"]: c["reason"] for c in document["conditions"]}["Reconciling"] == "WaitingForGPUs"  # type: ignore[union-attr]
    # The first job holds both GPUs until it goes (it serves until stopped: no race with its end)
    assert cli("delete", "gpu", cwd=project).returncode == 0
    wait_until(
        lambda: (cli("status", "--refresh", cwd=project), status_of(project, "more")["phase"] == "Running")[1]
    )
    more = json.loads(next((project / "specs" / "more-out").glob("worker-0.*.json")).read_text())
    assert more["env"]["CUDA_VISIBLE_DEVICES"] in ("0", "1"), (
        "the second job got a GPU once the first one went"
    )
    assert cli("delete", "--all", cwd=project).returncode == 0


def test_labels_of_a_finished_job_change_in_place_without_a_rerun(project: Path) -> None:
    (project / "specs" / "job.yaml").write_text(spec("done", {"worker": (1, "exit=0")}))
    assert cli("apply", "specs", "--wait", cwd=project).returncode == 0
    (project / "specs" / "job.yaml").write_text(
        spec("done", {"worker": (1, "exit=0")}).replace(
            "metadata: {name: done}", "metadata: {name: done, labels: {team: ml}}"
        )
    )
    planned = cli("plan", "specs", cwd=project)
    assert "~ done will be updated in place" in planned.stdout
    assert cli("apply", "specs", "--wait", cwd=project).returncode == 0
    assert status_of(project, "done")["phase"] == "Succeeded"
    assert sorted(records(project)) == ["worker-0.0"], "nothing ran again"


def test_a_restart_driven_from_another_folder_keeps_the_spec_folder_as_source(project: Path) -> None:
    (project / "specs" / "job.yaml").write_text(spec("moved", {"worker": (1, "fail-once")}))
    assert cli("apply", "specs", cwd=project).returncode == 0
    elsewhere = project / "elsewhere"
    elsewhere.mkdir()
    dirs = [
        "--state-dir",
        str(project / ".tfdeclare"),
        "--status-dir",
        str(project / "status"),
        "--config",
        str(project / "tfdeclare.yaml"),
    ]
    wait_until(
        lambda: (cli("status", "--refresh", *dirs, cwd=elsewhere), "worker-0.1" in records(project))[1]
    )
    seen = records(project)["worker-0.1"]
    assert seen["env"]["TFDECLARE_SOURCE_DIR"] == str((project / "specs").resolve())  # type: ignore[index]
    assert seen["cwd"] == str(project / ".tfdeclare" / "local" / "work" / "moved" / "worker-0")


def test_logs_follow_prints_until_the_task_ends(project: Path) -> None:
    (project / "specs" / "talk.yaml").write_text(
        "apiVersion: tfdeclare/v1\nkind: TFJob\nmetadata: {name: talk}\nspec:\n"
        f"  command: [sh, -c, 'echo one; while [ ! -e {project}/go ]; do sleep 0.1; done; echo two']\n"
        "  replicas: {worker: {count: 1, resources: {cpus: 0.1, mem: 64}}}\n"
    )  # "two" only once the test says so (go): after logs --follow has printed "one"
    assert cli("apply", "specs", cwd=project).returncode == 0
    following = subprocess.Popen(
        [sys.executable, "-m", "tfdeclare", "logs", "talk", "--follow"],
        cwd=project,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert following.stdout is not None
    assert following.stdout.readline() == "worker-0 | one\n"  # it follows the task as it runs
    (project / "go").touch()
    rest, err = following.communicate(timeout=60)
    assert following.returncode == 0 and rest == "worker-0 | two\n", err  # and waited for its end
    assert cli("logs", "talk", "--task", "ps:0", cwd=project).returncode == 1
    assert cli("logs", "nope", cwd=project).returncode == 1


CHECKPOINTING = """\
import os, sys
from pathlib import Path
attempt = os.environ["TFDECLARE_ATTEMPT"]
Path("checkpoints").mkdir(exist_ok=True)
Path("checkpoints", "ckpt-" + attempt).write_text(attempt)
Path("seen-" + attempt).write_text(",".join(sorted(os.listdir("checkpoints"))))
sys.exit(1 if attempt == "0" else 0)
"""


def test_a_task_writes_into_its_own_working_folder_which_outlives_restarts_and_the_job(
    project: Path,
) -> None:
    specs = project / "specs"
    (specs / "ckpt.py").write_text(CHECKPOINTING)
    (specs / "ck.yaml").write_text(
        "apiVersion: tfdeclare/v1\nkind: TFJob\nmetadata: {name: ck}\nspec:\n"
        "  command: [python, ckpt.py]\n"
        "  replicas: {worker: {count: 1, resources: {cpus: 0.1, mem: 64}}}\n"
    )
    applied = cli("apply", "specs", "--wait", cwd=project)
    assert applied.returncode == 0, applied.stdout + applied.stderr
    work = project / ".tfdeclare" / "local" / "work" / "ck" / "worker-0"
    assert (work / "seen-1").read_text() == "ckpt-0,ckpt-1", "the restart found the first checkpoint"
    assert (work / "ckpt.py").is_symlink() and (work / "ckpt.py").resolve() == (specs / "ckpt.py").resolve()
    assert not (specs / "checkpoints").exists(), "nothing is written into the spec folder"
    assert cli("delete", "ck", cwd=project).returncode == 0
    wait_until(lambda: not (project / "status" / "ck.yaml").exists())
    assert sorted(p.name for p in (work / "checkpoints").iterdir()) == ["ckpt-0", "ckpt-1"], "never deleted"
