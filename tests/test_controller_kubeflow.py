"""The controller with the fake backend and an injected clock: a Kubeflow TFJob manifest
applied as it is, the evaluator's final evaluation after training, and the cleanup of a
finished job after ``ttlSecondsAfterFinished`` (its status stays)."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from tests.controller_world import World, job_text
from tfdeclare.core.enums import Phase, Reason, Role

MANIFEST = """\
    apiVersion: kubeflow.org/v1
    kind: TFJob
    metadata: {name: kf, namespace: ml}
    spec:
      runPolicy: {ttlSecondsAfterFinished: 600}
      tfReplicaSpecs:
        PS:
          replicas: 1
          restartPolicy: Always
          template:
            spec:
              containers:
                - {name: tensorflow, command: [python, train.py], resources: {requests: {cpu: 500m, memory: 64Mi}}}
        Worker:
          replicas: 2
          restartPolicy: OnFailure
          template:
            spec:
              containers:
                - name: tensorflow
                  command: [python, train.py]
                  args: [--epochs, "3"]
                  resources: {requests: {cpu: 500m, memory: 64Mi}}
    """


@pytest.fixture
def world(tmp_path: Path) -> World:
    return World(tmp_path)


def test_a_kubeflow_manifest_runs_by_kubeflows_rules(world: World) -> None:
    world.write("kf", textwrap.dedent(MANIFEST))
    assert world.apply() == ["+ kf: new job"]
    world.settle()
    tasks = world.tasks("kf")
    assert set(tasks) == {"ps-0", "worker-0", "worker-1"}
    launches = {name: world.backend.cluster.tasks[task.task_id].launch for name, task in tasks.items()}
    assert launches["worker-1"].argv == ("python", "train.py", "--epochs", "3")
    assert launches["ps-0"].argv == ("python", "train.py")
    assert (launches["ps-0"].resources.cpus, launches["ps-0"].resources.mem_mib) == (0.5, 64)
    # Kubeflow's default success policy: worker 0 decides (the other worker is then stopped).
    world.backend.finish(tasks["worker-0"].task_id, 0)
    world.settle()
    record = world.record("kf")
    assert (record.phase, record.reason) == (Phase.SUCCEEDED, Reason.WORKER0_SUCCEEDED)
    assert world.tasks("kf") == {}


def test_the_evaluator_finishes_after_training_within_its_grace(world: World) -> None:
    replicas = (
        "chief: {count: 1, resources: {cpus: 0.5, mem: 64}}, worker: {count: 1, resources: {cpus: 0.5, mem: 64}}, "
        "evaluator: {count: 1, resources: {cpus: 0.5, mem: 64}}"
    )
    world.write("e", job_text("e", replicas, extra="evaluatorGraceSeconds: 300"))
    world.apply()
    world.settle()
    world.backend.finish(world.task("e", Role.CHIEF).task_id, 0)
    world.settle()
    record = world.record("e")
    assert (record.phase, record.reason) == (Phase.SUCCEEDED, Reason.CHIEF_SUCCEEDED)
    finished = record.completion_time
    assert "the evaluator finishes its final evaluation" in record.message
    assert set(world.tasks("e")) == {"evaluator-0"}, "the worker stopped; the evaluator goes on"
    assert world.status("e")["phase"] == "Succeeded"  # type: ignore[index]
    world.clock.advance(120)
    world.backend.finish(world.task("e", Role.EVALUATOR).task_id, 0)
    world.settle()
    record = world.record("e")
    assert (record.phase, record.reason) == (Phase.SUCCEEDED, Reason.CHIEF_SUCCEEDED)
    assert "evaluator-0 exited 0" in record.message and record.completion_time == finished


def test_a_finished_job_is_cleaned_up_after_its_ttl_and_its_status_stays(world: World) -> None:
    world.write("t", job_text("t", extra="ttlSecondsAfterFinished: 600"))
    world.apply()
    world.settle()
    ids = [t.task_id for t in world.tasks("t").values()]
    world.backend.write_log(ids[0], b"epoch 1\n")
    for task_id in ids:
        world.backend.finish(task_id, 0)
    world.settle()
    assert world.record("t").phase is Phase.SUCCEEDED
    assert ids[0] in world.backend.cluster.logs
    world.clock.advance(599)
    world.settle()
    assert ids[0] in world.backend.cluster.logs and world.record("t").cleaned_at is None
    world.clock.advance(2)
    world.settle()
    assert ids[0] not in world.backend.cluster.logs, "its logs went with its tasks"
    assert world.tasks("t", alive=False) == {}
    record = world.record("t")
    assert record.phase is Phase.SUCCEEDED and record.cleaned_at is not None
    status = world.status("t")
    assert status is not None and status["phase"] == "Succeeded" and status["cleanupTime"] is not None
    launched = len(world.backend.cluster.launched)
    world.clock.advance(3600)
    world.settle()
    assert len(world.backend.cluster.launched) == launched, "a cleaned job is not run again"
