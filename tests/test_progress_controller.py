"""Progress through the real controller, in-process (fake backend with real task folders,
injected clock): the status shows the checkpoint the job's folder names; a preemption chooses
by the work since each victim's last checkpoint; the plan says what a restart costs."""

from __future__ import annotations

import json
import os
from pathlib import Path

import jsonschema

from tests.controller_world import World, job_text
from tests.fake_backend import FakeCluster
from tfdeclare.core.enums import Phase
from tfdeclare.core.plan.planner import PlanOptions, plan
from tfdeclare.core.plan.render import render_text
from tfdeclare.core.run.tasks import TaskKey
from tfdeclare.core.spec.resources import Resources

STATUS_SCHEMA = json.loads((Path(__file__).parent.parent / "schemas" / "status.schema.json").read_text())


def job(name: str, cpus: float, *, priority: int = 0, version: str = "1") -> str:
    return job_text(
        name,
        f"worker: {{count: 1, resources: {{cpus: {cpus}, mem: 64}}}}",
        extra=f"priority: {priority}\nenv: {{V: '{version}'}}\ncheckpoint: {{dir: ckpt, totalSteps: 100}}",
    )


def world(tmp_path: Path) -> World:
    w = World(tmp_path, FakeCluster(capacity=Resources(4, 4096, 0)))
    work = tmp_path / "work"

    def task_folder(job: str, key: TaskKey) -> str:
        return str(work / job / key.name)

    w.backend.task_folder = task_folder  # type: ignore[attr-defined]  # as the local backend has
    w.controller.progress.reserved = {str(tmp_path / "state"): "tfdeclare's own folder"}
    return w


def save_checkpoint(w: World, job: str, step: int) -> None:
    """What tf.train.CheckpointManager leaves: its state file, written now (the clock's now)."""
    folder = w.root / "work" / job / "worker-0" / "ckpt"
    folder.mkdir(parents=True, exist_ok=True)
    (folder / f"ckpt-{step}.index").write_bytes(b"")
    state = folder / "checkpoint"
    state.write_text(f'model_checkpoint_path: "ckpt-{step}"\nall_model_checkpoint_paths: "ckpt-{step}"\n')
    os.utime(state, (w.clock(), w.clock()))


def test_the_status_shows_the_latest_checkpoint_and_preemption_loses_the_least(tmp_path: Path) -> None:
    w = world(tmp_path)
    w.write("old", job("old", 2))
    w.apply()
    w.settle()
    status = w.status("old")
    assert status is not None and status["progress"]["checkpoint"] is None
    assert "does not exist (yet)" in status["progress"]["message"]
    w.clock.advance(1000)
    w.write("young", job("young", 2))
    w.apply()
    w.settle()
    w.clock.advance(3)
    save_checkpoint(w, "old", 40)
    w.clock.advance(10)
    w.settle()  # its files are read again (every 10 s while it runs)
    status = w.status("old")
    assert status is not None
    progress = status["progress"]
    assert progress["checkpoint"]["name"] == "ckpt-40" and progress["checkpoint"]["step"] == 40
    assert progress["step"] == 40 and progress["totalSteps"] == 100 and progress["message"] == ""
    assert w.record("old").progress is not None
    jsonschema.validate(status, STATUS_SCHEMA)

    # old has run 1013 s but saved 10 s ago; young has run 13 s and never saved: old loses less
    w.write("urgent", job("urgent", 2, priority=1))
    w.apply()
    result = w.reconcile()
    assert w.record("old").phase is Phase.SUSPENDED, result.events
    assert w.record("young").phase is Phase.RUNNING
    assert any("old: preempted by urgent" in e and "10 task-seconds" in e for e in result.events)


def test_the_plan_says_what_a_restart_costs(tmp_path: Path) -> None:
    w = world(tmp_path)
    w.write("gpt", job("gpt", 1))
    w.apply()
    w.settle()
    w.clock.advance(600)
    save_checkpoint(w, "gpt", 12000)
    w.clock.advance(180)
    w.settle()
    w.write("gpt", job("gpt", 1, version="2"))
    made = plan(w.files.load(), w.store.observed(), PlanOptions(), now=w.clock())
    text = render_text(made)
    assert "costs: resumes from the checkpoint at step 12,000, 3 min of work since" in text, text


def test_a_backend_without_task_folders_says_why_nothing_is_read(tmp_path: Path) -> None:
    w = World(tmp_path, FakeCluster(capacity=Resources(4, 4096, 0)))
    w.write("a", job("a", 1))
    w.apply()
    w.settle()
    status = w.status("a")
    assert status is not None
    assert "cannot read them" in status["progress"]["message"]
    assert status["progress"]["step"] is None
