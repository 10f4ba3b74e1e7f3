"""``imagePullPolicy`` in the spec: its canonical form, the task identity, the plan, the Kubeflow
field it comes from, and what the Mesos backend makes of it."""

from __future__ import annotations

from collections.abc import Mapping
from functools import partial
from typing import Any

import pytest
import yaml

from tfdeclare.backends import registry
from tfdeclare.backends.mesos.config import MesosConfig
from tfdeclare.backends.mesos.taskinfo import task_info
from tfdeclare.core.enums import ImagePullPolicy, Role
from tfdeclare.core.plan.planner import Effect, field_changes
from tfdeclare.core.run.clusterspec import symbolic_addresses, task_configs
from tfdeclare.core.run.tasks import Slot, TaskLaunch
from tfdeclare.core.spec.keys import TaskKey
from tfdeclare.core.spec.loader import load_file
from tfdeclare.core.spec.model import JobSpec
from tfdeclare.core.spec.resources import Resources


def _job(job_policy: str | None = None, worker_policy: str | None = None) -> dict[str, object]:
    worker: dict[str, object] = {"count": 2}
    if worker_policy is not None:
        worker["imagePullPolicy"] = worker_policy
    spec: dict[str, object] = {
        "image": "tf:2.21",
        "command": ["python", "train.py"],
        "replicas": {"chief": {"count": 1}, "worker": worker},
    }
    if job_policy is not None:
        spec["imagePullPolicy"] = job_policy
    return {"apiVersion": "tfdeclare/v1", "kind": "TFJob", "metadata": {"name": "gpt"}, "spec": spec}


def _load(document: dict[str, object]) -> tuple[Mapping[str, Any], str]:
    result = load_file("gpt.yaml", yaml.safe_dump(document).encode())
    assert not result.diagnostics, [d.format() for d in result.diagnostics]
    return result.jobs[0].canonical, result.jobs[0].spec_hash


def test_the_default_leaves_the_canonical_form_and_its_hash_as_they_were() -> None:
    unset, unset_hash = _load(_job())
    _, explicit_hash = _load(_job("IfNotPresent"))
    assert "imagePullPolicy" not in unset["spec"]
    assert explicit_hash == unset_hash
    always, always_hash = _load(_job("Always"))
    assert always["spec"]["imagePullPolicy"] == "Always"
    assert always_hash != unset_hash


def test_a_role_inherits_the_jobs_policy_unless_it_names_its_own() -> None:
    canonical, _ = _load(_job("Always", "Never"))
    spec = JobSpec.from_canonical(canonical)
    assert spec.image_pull_policy_for(Role.CHIEF) is ImagePullPolicy.ALWAYS
    assert spec.image_pull_policy_for(Role.WORKER) is ImagePullPolicy.NEVER
    default = JobSpec.from_canonical(_load(_job())[0])
    assert default.image_pull_policy_for(Role.WORKER) is ImagePullPolicy.IF_NOT_PRESENT


def test_a_change_of_the_policy_alone_is_an_update_in_place_and_keeps_every_task() -> None:
    old, _ = _load(_job())
    new, _ = _load(_job("Never", "Always"))
    changes = field_changes(old, new)
    assert {c.path for c in changes} == {
        ("spec", "imagePullPolicy"),
        ("spec", "replicas", "worker", "imagePullPolicy"),
    }
    assert {c.effect for c in changes} == {Effect.IN_PLACE}
    before, after = JobSpec.from_canonical(old), JobSpec.from_canonical(new)
    hashes = [
        {k: c.config_hash for k, c in task_configs(s, symbolic_addresses(s), 0).items()}
        for s in (before, after)
    ]
    assert hashes[0] == hashes[1]


def test_an_unknown_policy_is_a_schema_error_naming_the_choices() -> None:
    result = load_file("gpt.yaml", yaml.safe_dump(_job("IfMissing")).encode())
    assert not result.jobs
    (problem,) = result.diagnostics
    assert "IfNotPresent" in problem.message and problem.json_path == "$.spec.imagePullPolicy"


def _kubeflow(chief_policy: str, worker_policy: str) -> bytes:
    def replica(policy: str) -> dict[str, object]:
        container = {
            "name": "tensorflow",
            "image": "tf:2.21",
            "imagePullPolicy": policy,
            "command": ["python"],
            "resources": {"requests": {"cpu": 1, "memory": "1Gi"}},  # none: a warning says what is reserved
        }
        return {"replicas": 1, "template": {"spec": {"containers": [container]}}}

    document = {
        "apiVersion": "kubeflow.org/v1",
        "kind": "TFJob",
        "metadata": {"name": "gpt"},
        "spec": {"tfReplicaSpecs": {"Chief": replica(chief_policy), "Worker": replica(worker_policy)}},
    }
    return yaml.safe_dump(document, sort_keys=False).encode()


def test_kubeflows_container_image_pull_policy_maps_onto_ours() -> None:
    same = load_file("tfjob.yaml", _kubeflow("Always", "Always"))
    said = [d for d in same.diagnostics if "WORKDIR" not in d.message]  # its containers have no workingDir
    assert [d.severity.value for d in said] == ["note"], [d.format() for d in same.diagnostics]
    assert same.jobs[0].canonical["spec"]["imagePullPolicy"] == "Always"
    mixed = load_file("tfjob.yaml", _kubeflow("Never", "IfNotPresent"))
    spec = JobSpec.from_canonical(mixed.jobs[0].canonical)
    assert spec.image_pull_policy_for(Role.CHIEF) is ImagePullPolicy.NEVER
    assert spec.image_pull_policy_for(Role.WORKER) is ImagePullPolicy.IF_NOT_PRESENT
    wrong = load_file("tfjob.yaml", _kubeflow("Sometimes", "Always"))
    assert not wrong.jobs
    (error,) = [d for d in wrong.diagnostics if d.is_error]
    assert error.format() == (  # at the manifest's own line
        'tfjob.yaml:14:30: error: must be one of IfNotPresent, Always, Never; got "Sometimes" '
        "(at $.spec.tfReplicaSpecs.Chief.template.spec.containers[0].imagePullPolicy)"
    )


def _launch(policy: ImagePullPolicy) -> TaskLaunch:
    key = TaskKey(Role.WORKER, 0)
    return TaskLaunch(
        task_id="gpt.ab12.worker-0.1",
        job="gpt",
        key=key,
        attempt=0,
        spec_hash="s" * 64,
        config_hash="c" * 16,
        argv=("python", "train.py"),
        env=(),
        resources=Resources(1, 512, 0),
        slot=Slot(key, "node1", 31005, "A-S0"),
        image="tf:2.21",
        image_pull_policy=policy,
    )


@pytest.mark.parametrize("containerizer", ["mesos", "docker"])
def test_on_mesos_always_makes_the_agent_pull_and_the_default_leaves_it_to_its_cache(
    containerizer: str,
) -> None:
    def pulls(policy: ImagePullPolicy) -> dict[str, Any]:
        container = task_info(_launch(policy), "A-S0", {}, containerizer=containerizer)["container"]
        return dict(container["docker"]) if containerizer == "docker" else dict(container["mesos"]["image"])

    default = pulls(ImagePullPolicy.IF_NOT_PRESENT)
    assert "force_pull_image" not in default and "cached" not in default  # the TaskInfo of before
    always = pulls(ImagePullPolicy.ALWAYS)
    assert (
        always == {**default, "force_pull_image": True}
        if containerizer == "docker"
        else {**default, "cached": False}
    )


def test_on_mesos_never_is_refused_at_its_field() -> None:
    mesos = registry.plugin("mesos")
    for document, where in (
        (_job("Never"), "$.spec.imagePullPolicy"),
        (_job(None, "Never"), "$.spec.replicas.worker.imagePullPolicy"),
    ):
        result = load_file(
            "gpt.yaml", yaml.safe_dump(document).encode(), [partial(mesos.check_job, MesosConfig())]
        )
        (problem,) = result.diagnostics
        assert problem.is_error and problem.json_path == where, problem.format()
        assert "imagePullPolicy Never cannot be honoured on Mesos" in problem.message
    fine = load_file(
        "gpt.yaml", yaml.safe_dump(_job("Always")).encode(), [partial(mesos.check_job, MesosConfig())]
    )
    assert fine.jobs and not fine.diagnostics
