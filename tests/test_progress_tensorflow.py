"""Progress from a real TensorFlow job on the local backend (issue 34): a chief that trains
with ``tf.train.CheckpointManager`` and ``tf.summary`` writes its checkpoints and event files;
``tfdeclare status`` then shows the step it reached, its rate and its latest checkpoint, read
by the controller without TensorFlow."""

from __future__ import annotations

import json
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import cli, kill_leftovers

pytestmark = [pytest.mark.tf, pytest.mark.e2e]

TRAIN = """\
import time
import tensorflow as tf

step = tf.Variable(0, dtype=tf.int64)
weight = tf.Variable(1.0)
checkpoint = tf.train.Checkpoint(step=step, weight=weight)
manager = tf.train.CheckpointManager(checkpoint, "ckpt", max_to_keep=2)
checkpoint.restore(manager.latest_checkpoint)
writer = tf.summary.create_file_writer("logs")
with writer.as_default():
    while int(step) < 60:
        step.assign_add(1)
        weight.assign(weight * 0.99)
        tf.summary.scalar("loss", weight, step=step)
        if int(step) % 25 == 0:
            manager.save(checkpoint_number=int(step))
            writer.flush()
        time.sleep(0.1)
writer.flush()
print("trained to step", int(step), flush=True)
"""

JOB = """\
apiVersion: tfdeclare/v1
kind: TFJob
metadata: {name: progress}
spec:
  command: [python, train.py]
  env: {TF_ENABLE_ONEDNN_OPTS: "0", TF_CPP_MIN_LOG_LEVEL: "2"}
  checkpoint: {dir: ckpt, totalSteps: 60}
  tensorboard:
    logDir: ../chief-0/logs
    command: [python, -m, tensorboard.main]
    resources: {cpus: 0.1, mem: 256}
  replicas:
    chief: {count: 1, resources: {cpus: 1, mem: 1024}}
"""


@pytest.fixture
def cwd(tmp_path: Path) -> Iterator[Path]:
    (tmp_path / "specs").mkdir()
    (tmp_path / "specs" / "train.py").write_text(TRAIN)
    (tmp_path / "specs" / "job.yaml").write_text(textwrap.dedent(JOB))
    yield tmp_path
    cli("delete", "--all", cwd=tmp_path)
    assert kill_leftovers(tmp_path) == [], "a task outlived its job"


def test_status_shows_the_step_and_checkpoint_of_a_real_tensorflow_job(cwd: Path) -> None:
    result = cli("apply", "specs", "--wait", "--timeout", "300", cwd=cwd, timeout=360)
    assert result.returncode == 0, result.stdout + result.stderr
    shown = cli("status", "progress", "-o", "json", cwd=cwd)
    assert shown.returncode == 0, shown.stderr
    document = json.loads(shown.stdout)
    assert document["phase"] == "Succeeded"
    progress = document["progress"]
    assert progress["step"] == 60, progress  # from the event files
    assert progress["checkpoint"]["name"] == "ckpt-50" and progress["checkpoint"]["step"] == 50, progress
    assert progress["stepsPerSecond"] and 0 < progress["stepsPerSecond"] < 100, progress
    assert progress["totalSteps"] == 60 and progress["estimatedCompletionTime"] == progress["stepTime"]
    assert progress["message"] == ""
    text = cli("status", "progress", cwd=cwd).stdout
    assert "progress: step 60 of 60 (100 %)" in text, text
    assert "progress: checkpoint ckpt-50 at step 50, saved" in text, text
