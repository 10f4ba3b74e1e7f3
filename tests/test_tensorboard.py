"""The TensorBoard task (``spec.tensorboard``) with the controller in-process and the fake
backend: it runs beside the job, outside the TF cluster, restarts alone, survives the job's
restarts, stops with the job, and changing it restarts nothing else. Its address is in the
status file."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

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


# What a left-out and a written ``resources`` give, and the spec hashes every release so far
# gave these jobs: the schema may word its defaults anew, never change them (a running job's
# plan never changes for an upgrade: docs/reference.md#job-semantics).
BOARD_RESOURCES = [
    (
        BOARD,
        {"cpus": 0.5, "mem": 1024, "gpus": 0},
        "2f93fe748019e798a0b7a4d9b1c5424f3f6bf8b2caec2a1434337d36821d0495",
    ),
    (
        "tensorboard: {logDir: /data/runs/t, resources: {gpus: 0}}",
        {"cpus": 1, "mem": 2048, "gpus": 0},
        "591dcb151a5543fb590744b15f0121a455655134f64933a1afdab18ce174c6ac",
    ),
    (
        "tensorboard: {logDir: /data/runs/t, resources: {cpus: 2}}",
        {"cpus": 2, "mem": 2048, "gpus": 0},
        "f3f969e5249e80e0eeeab2bea40d28e1d0db4f44c06650c08daf01097de4c4fe",
    ),
]


@pytest.mark.parametrize(("extra", "resources", "spec_hash"), BOARD_RESOURCES)
def test_its_resources_defaults_and_hashes_stay_as_running_jobs_have_them(
    extra: str, resources: dict[str, object], spec_hash: str
) -> None:
    job = load_file("job.yaml", job_text("t", extra=extra).encode()).jobs[0]
    assert job.canonical["spec"]["tensorboard"]["resources"] == resources
    assert job.spec_hash == spec_hash


def _object_defaults() -> list[tuple[str, dict[str, Any], dict[str, Any]]]:
    """(path, the object's default, its fields' schemas) of every property whose default is an
    object, $refs followed (the job schema's own definitions)."""
    schema = json.loads((REPO / "schemas" / "job.schema.json").read_text())
    found: list[tuple[str, dict[str, Any], dict[str, Any]]] = []

    def walk(node: object, path: str) -> None:
        if not isinstance(node, dict):
            return
        target = node
        if isinstance(node.get("$ref"), str):
            target = schema["$defs"][node["$ref"].rsplit("/", 1)[1]]
        for key, sub in (target.get("properties") or {}).items():
            ref = sub.get("$ref") if isinstance(sub, dict) else None
            fields = schema["$defs"][ref.rsplit("/", 1)[1]] if isinstance(ref, str) else sub
            if isinstance(sub, dict) and isinstance(sub.get("default"), dict) and "properties" in fields:
                found.append((f"{path}.{key}", sub["default"], fields["properties"]))
            if path.count(".") < 4:
                walk(sub, f"{path}.{key}")

    walk(schema, "$")
    return found


def test_a_field_whose_default_differs_where_its_object_is_left_out_says_both() -> None:
    """``spec.tensorboard.resources`` left out gives 0.5 CPUs and 1Gi, written without a field
    that field's own default (1 CPU, 2Gi): each field's description (what `explain` and
    docs/reference.md show) must say both, never only one of them."""
    checked = 0
    for path, whole, fields in _object_defaults():
        for key, value in whole.items():
            own = fields[key].get("default")
            if own == value:
                continue
            checked += 1
            words = fields[key]["description"]
            assert "left out" in words, (path, key, words)
            for shown in (value, own):
                said = f"{shown:g}" if isinstance(shown, float | int) else str(shown)
                assert said in words, (path, key, said, words)
    assert checked >= 2  # cpus and mem of spec.tensorboard.resources
