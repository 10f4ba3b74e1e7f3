"""The spec fields added for Kubeflow parity (per-role image, args, workingDir and
restartPolicy; successPolicy, ttlSecondsAfterFinished, evaluatorGraceSeconds): what each task
runs, that specs without them keep their hash and their tasks' identity, and how the planner
classifies a change of each."""

from __future__ import annotations

import textwrap

import pytest

from tfdeclare.core.enums import RestartPolicy, Role
from tfdeclare.core.plan.planner import Effect, field_changes
from tfdeclare.core.run.clusterspec import symbolic_addresses, task_configs
from tfdeclare.core.run.tasks import TaskKey
from tfdeclare.core.spec.loader import FileResult, load_file

BASE = """\
apiVersion: tfdeclare/v1
kind: TFJob
metadata: {name: j}
spec:
"""


def load(body: str) -> FileResult:
    return load_file("j.yaml", (BASE + textwrap.indent(textwrap.dedent(body), "  ")).encode())


def only_job(body: str):  # type: ignore[no-untyped-def]
    result = load(body)
    assert not result.diagnostics, [d.format() for d in result.diagnostics]
    return result.jobs[0]


def test_args_follow_the_command_and_a_role_may_replace_them() -> None:
    job = only_job(
        """\
        command: [python, train.py]
        args: [--epochs, "3"]
        replicas:
          ps: {count: 1, args: [--serve]}
          worker: {count: 1}
        """
    )
    configs = task_configs(job.spec, symbolic_addresses(job.spec), 0)
    assert configs[TaskKey(Role.WORKER, 0)].argv == ("python", "train.py", "--epochs", "3")
    assert configs[TaskKey(Role.PS, 0)].argv == ("python", "train.py", "--serve")
    assert not configs[TaskKey(Role.WORKER, 0)].entrypoint


def test_per_role_image_working_dir_and_the_images_entrypoint() -> None:
    job = only_job(
        """\
        image: tf:cpu
        workingDir: /workspace
        replicas:
          ps: {count: 1}
          worker: {count: 1, image: tf:gpu, workingDir: /gpu, args: [--gpus, "1"]}
        """
    )
    configs = task_configs(job.spec, symbolic_addresses(job.spec), 0)
    ps, worker = configs[TaskKey(Role.PS, 0)], configs[TaskKey(Role.WORKER, 0)]
    assert (ps.image, ps.working_dir, ps.argv, ps.entrypoint) == ("tf:cpu", "/workspace", (), True)
    assert (worker.image, worker.working_dir, worker.argv) == ("tf:gpu", "/gpu", ("--gpus", "1"))
    assert job.spec.images == ("tf:cpu", "tf:gpu")


def test_a_role_without_command_or_image_is_still_an_error() -> None:
    result = load("replicas: {worker: {count: 1, args: [--x]}}\n")
    assert [d.code.value for d in result.diagnostics] == ["missing-command"]
    assert "or an image" in result.diagnostics[0].message


def test_restart_policy_per_role_falls_back_to_the_jobs() -> None:
    job = only_job(
        """\
        command: [t]
        restartPolicy: ExitCode
        replicas: {ps: {count: 1, restartPolicy: Always}, worker: {count: 1}}
        """
    )
    assert job.spec.restart_policy_for(Role.PS) is RestartPolicy.ALWAYS
    assert job.spec.restart_policy_for(Role.WORKER) is RestartPolicy.EXIT_CODE


def test_unset_new_fields_keep_the_canonical_form_and_the_task_identity() -> None:
    plain = only_job("command: [t]\nreplicas: {worker: {count: 2}}\n")
    assert set(plain.canonical["spec"]) == {
        "command", "env", "image", "workingDir", "replicas", "restartPolicy", "backoffLimit",
        "activeDeadlineSeconds", "terminationGracePeriodSeconds", "clusterSpec", "placement", "volumes",
    }  # fmt: skip
    assert set(plain.canonical["spec"]["replicas"]["worker"]) == {"count", "resources"}
    # (tests/test_upgrade.py checks that tasks of earlier releases keep their config hash)


@pytest.mark.parametrize(
    ("change", "effect"),
    [
        ("successPolicy: Worker0\n", Effect.IN_PLACE),
        ("ttlSecondsAfterFinished: 600\n", Effect.IN_PLACE),
        ("evaluatorGraceSeconds: 5\n", Effect.IN_PLACE),
        ("args: [--more]\n", Effect.RESTART),
    ],
)
def test_planner_classifies_the_new_job_fields(change: str, effect: Effect) -> None:
    before = only_job("command: [t]\nreplicas: {worker: {count: 1}}\n")
    after = only_job("command: [t]\nreplicas: {worker: {count: 1}}\n" + change)
    assert {c.effect for c in field_changes(before.canonical, after.canonical)} == {effect}


@pytest.mark.parametrize(
    ("field", "effect"),
    [
        ("restartPolicy: Never", Effect.IN_PLACE),
        ("image: other", Effect.RESTART),
        ("args: [--x]", Effect.RESTART),
    ],
)
def test_planner_classifies_the_new_role_fields(field: str, effect: Effect) -> None:
    before = only_job("image: tf\nreplicas: {worker: {count: 1}}\n")
    after = only_job(f"image: tf\nreplicas: {{worker: {{count: 1, {field}}}}}\n")
    assert {c.effect for c in field_changes(before.canonical, after.canonical)} == {effect}
