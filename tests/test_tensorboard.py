"""The TensorBoard task (``spec.tensorboard``) with the controller in-process and the fake
backend: it runs beside the job, outside the TF cluster, restarts alone, survives the job's
restarts, stops with the job, and changing it restarts nothing else. Its address is in the
status file."""

from __future__ import annotations

import json
from pathlib import Path

import jsonschema
import pytest

from tests.conftest import REPO
from tests.controller_world import BACKOFF, World, job_text
from tfdeclare.core.enums import Phase, Role
from tfdeclare.core.run.lifecycle import TENSORBOARD_RELAUNCH_S
from tfdeclare.core.spec.loader import load_file

CHIEF_AND_WORKERS = (
    "chief: {count: 1, resources: {cpus: 0.5, mem: 64}}, worker: {count: 2, resources: {cpus: 0.5, mem: 64}}"
)
BOARD = "tensorboard: {logDir: /data/runs/t}"


@pytest.fixture
def world(tmp_path: Path) -> World:
    return World(tmp_path)


def started(world: World, extra: str = BOARD) -> World:
    world.write("t", job_text("t", CHIEF_AND_WORKERS, extra=extra))
    world.apply()
    world.settle()
    return world


def status_schema() -> dict[str, object]:
    return json.loads((REPO / "schemas" / "status.schema.json").read_text())  # type: ignore[no-any-return]


def test_it_runs_beside_the_cluster_on_its_own_port_and_is_in_the_status(world: World) -> None:
    started(world)
    tasks = world.tasks("t")
    assert set(tasks) == {"chief-0", "worker-0", "worker-1", "tensorboard-0"}
    assert world.record("t").phase is Phase.RUNNING
    board = tasks["tensorboard-0"]
    launch = world.backend.cluster.tasks[board.task_id].launch
    address = f"{board.host}:{board.port}"
    assert launch.argv == (
        "tensorboard",
        "--logdir",
        "/data/runs/t",
        "--host",
        board.host,
        "--port",
        str(board.port),
    )
    assert "TF_CONFIG" not in dict(launch.env)
    assert launch.resources.cpus == 0.5 and launch.resources.mem_mib == 1024
    for name in ("chief-0", "worker-0", "worker-1"):
        cluster = world.tf_config(tasks[name].task_id)["cluster"]
        assert address not in json.dumps(cluster) and "tensorboard" not in cluster
    status = world.status("t")
    assert status is not None
    jsonschema.validate(status, status_schema())
    assert status["tensorboard"] == {
        "logDir": "/data/runs/t",
        "state": "running",
        "address": address,
        "url": f"http://{address}/",
    }
    assert "tensorboard" not in status["replicas"]
    assert any(t["role"] == "tensorboard" for t in status["tasks"])
    # one count: the message's running tasks are the running rows, TensorBoard included
    running_rows = [t for t in status["tasks"] if t["state"] == "running"]
    assert len(running_rows) == 4 and status["message"] == "4 task(s) running"


def test_its_end_restarts_only_itself_after_a_pause(world: World) -> None:
    started(world)
    board = world.task("t", Role.TENSORBOARD)
    others = {n: t.task_id for n, t in world.tasks("t").items() if n != "tensorboard-0"}
    ended_at = world.clock()
    world.backend.finish(board.task_id, 1)
    result = world.settle()
    record = world.record("t")
    assert (record.phase, record.restarts, record.attempt) == (Phase.RUNNING, 0, 0)
    assert "tensorboard-0" not in world.tasks("t")
    assert result.wake_at == ended_at + TENSORBOARD_RELAUNCH_S
    world.clock.advance(TENSORBOARD_RELAUNCH_S)
    world.settle()
    again = world.task("t", Role.TENSORBOARD)
    assert again.task_id != board.task_id and again.port == board.port, "relaunched on its port"
    assert {n: t.task_id for n, t in world.tasks("t").items() if n != "tensorboard-0"} == others
    assert board.task_id not in {t.task_id for t in world.backend.observe()}, "the ended copy is forgotten"


def test_a_restart_of_the_job_keeps_it_and_completion_stops_it(world: World) -> None:
    started(world)
    board = world.task("t", Role.TENSORBOARD)
    world.backend.finish(world.task("t", Role.WORKER, 1).task_id, 1)
    world.settle()
    assert world.record("t").phase is Phase.RESTARTING
    assert set(world.tasks("t")) == {"tensorboard-0"}, "the cluster stopped, TensorBoard did not"
    world.clock.advance(BACKOFF.delay(1))
    world.settle()
    assert world.record("t").attempt == 1 and len(world.tasks("t")) == 4
    assert world.task("t", Role.TENSORBOARD).task_id == board.task_id
    world.backend.finish(world.task("t", Role.CHIEF).task_id, 0)
    world.settle()
    assert world.record("t").phase is Phase.SUCCEEDED and world.tasks("t") == {}
    status = world.status("t")
    assert status is not None and status["tensorboard"]["url"] is None


def test_without_a_chief_it_does_not_count_for_completion(world: World) -> None:
    world.write("w", job_text("w", extra=BOARD))
    world.apply()
    world.settle()
    for index in (0, 1):
        world.backend.finish(world.task("w", Role.WORKER, index).task_id, 0)
    world.settle()
    assert world.record("w").phase is Phase.SUCCEEDED and world.tasks("w") == {}


def test_adding_changing_and_removing_it_restart_nothing_else(world: World) -> None:
    started(world, extra="")
    cluster = {n: t.task_id for n, t in world.tasks("t").items()}
    world.write("t", job_text("t", CHIEF_AND_WORKERS, extra=BOARD))
    assert world.apply() == ["± t: tensorboard added; no running task restarts"]
    world.settle()
    board = world.task("t", Role.TENSORBOARD)
    assert {n: t.task_id for n, t in world.tasks("t").items() if n != "tensorboard-0"} == cluster

    world.write("t", job_text("t", CHIEF_AND_WORKERS, extra="tensorboard: {logDir: /data/runs/t2}"))
    assert world.apply() == ["± t: tensorboard changed; 1 running task(s) restart"]
    world.settle()
    replaced = world.task("t", Role.TENSORBOARD)
    assert replaced.task_id != board.task_id
    assert "/data/runs/t2" in world.backend.cluster.tasks[replaced.task_id].launch.argv
    assert board.task_id not in {t.task_id for t in world.backend.observe() if t.state.alive}

    world.write("t", job_text("t", CHIEF_AND_WORKERS))
    assert world.apply() == ["± t: tensorboard removed; no running task restarts"]
    world.settle()
    assert {n: t.task_id for n, t in world.tasks("t").items()} == cluster
    assert world.record("t").attempt == 0 and world.status("t")["tensorboard"] is None  # type: ignore[index]


def test_delete_stops_it(world: World) -> None:
    started(world)
    world.controller.delete(["t"])
    world.settle()
    assert world.store.load("t") is None and world.tasks("t") == {}


@pytest.mark.parametrize(
    ("board", "line", "path", "message"),
    [
        ("tensorboard: {}", 7, "$.spec.tensorboard", "logDir"),
        ("tensorboard: {logDir: /r, port: 6006}", 7, "$.spec.tensorboard.port", "unknown field 'port'"),
        (
            "tensorboard: {logDir: /r, resources: {mem: 0Gi}}",
            7,
            "$.spec.tensorboard.resources.mem",
            "more than 0",
        ),
    ],
)
def test_its_spec_errors_point_at_the_field(board: str, line: int, path: str, message: str) -> None:
    text = job_text("t", extra=board)
    result = load_file("job.yaml", text.encode())
    shown = [(d.line, d.json_path, d.message) for d in result.diagnostics]
    assert len(shown) == 1 and shown[0][0] == line and shown[0][1] == path and message in shown[0][2], shown


def test_defaults_and_canonical_form() -> None:
    result = load_file("job.yaml", job_text("t", extra=BOARD).encode())
    (loaded,) = result.jobs
    assert loaded.canonical["spec"]["tensorboard"] == {
        "logDir": "/data/runs/t",
        "command": ["tensorboard"],
        "resources": {"cpus": 0.5, "mem": 1024, "gpus": 0},
    }
    plain = load_file("job.yaml", job_text("t").encode()).jobs[0]
    assert "tensorboard" not in plain.canonical["spec"], "unset: every other job's hash is unchanged"
