"""A plan of many new jobs shares what jobs of one shape have alike (issue 33: ``plan`` of
10,000 files against a bare YAML loop): their task keys, their restart scopes and those words,
a created job's spec lines without walking a value that holds no ``env``. Each shortcut must
give what the long way gives, job by job, whatever the mix of shapes."""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import cli, job_yaml
from tfdeclare.core.plan import render
from tfdeclare.core.plan.planner import RoleScope, _said, created_scopes
from tfdeclare.core.spec.keys import TaskKey
from tfdeclare.core.spec.model import ROLE_NAMES, restart_scopes_of, task_keys_of


def _canonical(rng: random.Random) -> dict[str, Any]:
    replicas: dict[str, Any] = {}
    for _, name in ROLE_NAMES:
        if name != "tensorboard" and rng.random() < 0.5:
            entry: dict[str, Any] = {"count": rng.choice([1, 2, 3, 70])}
            if rng.random() < 0.3:
                entry["restartScope"] = rng.choice(["Task", "Job"])
            replicas[name] = entry
    spec: dict[str, Any] = {"replicas": replicas}
    if rng.random() < 0.3:
        spec["restartScope"] = rng.choice(["Task", "Job"])
    if rng.random() < 0.2:
        spec["tensorboard"] = {"logDir": "logs"}
    return {"spec": spec}


def _keys_the_long_way(canonical: dict[str, Any]) -> tuple[TaskKey, ...]:
    replicas = canonical["spec"]["replicas"]
    keys = tuple(
        TaskKey(role, i)
        for role, name in ROLE_NAMES
        if name in replicas
        for i in range(replicas[name]["count"])
    )
    return (*keys, TaskKey.parse("tensorboard")) if canonical["spec"].get("tensorboard") else keys


def test_shared_task_keys_and_scopes_are_each_jobs_own() -> None:
    rng = random.Random(33)
    for _ in range(500):
        canonical = _canonical(rng)
        assert task_keys_of(canonical) == _keys_the_long_way(canonical)
        assert created_scopes(canonical) == _said(tuple(RoleScope(*s) for s in restart_scopes_of(canonical)))


def test_jobs_of_one_small_shape_share_one_tuple_a_big_job_its_own() -> None:
    small = {"spec": {"replicas": {"worker": {"count": 3}}}}
    assert task_keys_of(small) is task_keys_of({"spec": {"replicas": {"worker": {"count": 3}}}})
    big = {"spec": {"replicas": {"worker": {"count": 500}}}}
    assert task_keys_of(big) is not task_keys_of({"spec": {"replicas": {"worker": {"count": 500}}}})
    assert len(task_keys_of(big)) == 500


@pytest.mark.parametrize(
    "value",
    [
        {"count": 1, "resources": {"cpus": 2, "mem": 64, "gpus": 0}},
        {"count": 1, "env": {"DB_PASSWORD": "hunter2", "MODE": "fast"}},
        {"count": 1, "healthCheck": {"env": {"API_TOKEN": "x" * 40}}},  # env at any depth
        {"team": 'say "env": hi', "env": "prod"},  # the text, quoted, and a key env with no mapping
        {"owner": "a" * 120},  # cut at the limit
        ["python", "train.py"],
        "registry.example.com/tf:2.21.0",
        3,
    ],
)
def test_a_spec_lines_value_is_the_text_of_its_redacted_value(value: Any) -> None:
    assert render._spec_value_text(value, False) == render._value_text(render._redacted(value, False), 100)


def test_text_plan_of_mixed_shapes_says_each_jobs_own_tasks_and_scopes(workdir: Path) -> None:
    """Jobs of one shape between jobs of others: each block's tasks and scopes are its own."""
    shapes = {
        "a": "worker: {count: 2, resources: {cpus: 0.1, mem: 64}}",
        "b": "{ps: {count: 1, resources: {cpus: 0.1, mem: 64}}, worker: {count: 3, resources: {cpus: 0.1, mem: 64}}}",
        "c": "worker: {count: 2, resources: {cpus: 0.1, mem: 64}}",
        "d": "{ps: {count: 1, resources: {cpus: 0.1, mem: 64}}, worker: {count: 3, resources: {cpus: 0.1, mem: 64}}}",
    }
    for name, roles in shapes.items():
        (workdir / "specs" / f"{name}.yaml").write_text(job_yaml(name, roles=roles))
    result = cli("plan", "specs", cwd=workdir)
    assert result.returncode == 0, result.stderr
    blocks = {b.split()[1]: b for b in result.stdout.split("\n\n") if b.startswith("  + ")}
    for name in ("a", "c"):
        assert "starts: worker-0..1" in blocks[name] and "on failure" not in blocks[name]
    for name in ("b", "d"):
        assert "starts: ps-0, worker-0..2" in blocks[name]
        assert "on failure: worker restarts alone (restartScope Task" in blocks[name]
