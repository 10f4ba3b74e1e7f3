"""Kubeflow manifests keep Kubernetes' meaning, or say at their line where they cannot (issue
32): pull policies default as the kubelet's, quantities are Kubernetes' (decimal ``G``,
millicores), a container without requests says what it reserves, ``emptyDir`` and ``secret``
volumes name their natural equivalents, and each warning is listed once. The manifest with
every case is ``tests/golden/convert/kubernetes-meaning/`` (its convert output is a golden
file of ``test_convert_golden``)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.conftest import cli
from tfdeclare.core.diagnostics import Severity
from tfdeclare.core.enums import Phase
from tfdeclare.core.plan.desired import assemble
from tfdeclare.core.plan.observed import ObservedJob
from tfdeclare.core.plan.planner import Action, PlanOptions, plan
from tfdeclare.core.spec.kubeflow import DEFAULT_CPUS, DEFAULT_MEM, pulls_always, translate
from tfdeclare.core.spec.kubequantity import parse_cpu, parse_gpus, parse_memory_mib
from tfdeclare.core.spec.loader import load_file
from tfdeclare.core.spec.model import fingerprint
from tfdeclare.shell.convert import convert_text

ROOT = Path(__file__).parent
MANIFEST = ROOT / "golden" / "convert" / "kubernetes-meaning" / "manifest.yaml"
PUBLIC = sorted((ROOT / "kubeflow").glob("*.yaml"))
SCHEMA = json.loads((ROOT.parent / "schemas" / "job.schema.json").read_text())


def _tfjob(container: str) -> str:
    head = "apiVersion: kubeflow.org/v1\nkind: TFJob\nmetadata: {name: t}\nspec:\n  tfReplicaSpecs:\n"
    return (
        head
        + "    Worker:\n      template:\n        spec:\n          containers:\n            - "
        + container
        + "\n"
    )


@pytest.mark.parametrize(
    ("image", "always"),
    [
        ("tensorflow/tensorflow", True),
        ("tensorflow/tensorflow:latest", True),
        ("tensorflow/tensorflow:2.15.0", False),
        ("registry.example.com:5000/tf/train", True),  # a registry's port is not a tag
        ("registry.example.com:5000/tf/train:latest", True),
        ("registry.example.com:5000/tf/train:v1", False),
        ("tf/train@sha256:" + "0" * 64, False),  # pinned by its digest
        ("tf/train:latest@sha256:" + "0" * 64, False),
        ("busybox", True),
        ("busybox:latest-gpu", False),  # only exactly latest
    ],
)
def test_kubernetes_default_pull_policy(image: str, always: bool) -> None:
    assert pulls_always(image) is always
    translation = translate(
        _yaml_of(
            _tfjob(
                f"{{name: tensorflow, image: '{image}', resources: {{requests: {{cpu: 1, memory: 1Gi}}}}}}"
            )
        )
    )
    assert translation.native["spec"].get("imagePullPolicy") == ("Always" if always else None)
    assert [m for _, m in translation.notes if "imagePullPolicy Always" in m] == (
        [translation.notes[0][1]] if always else []
    )


@pytest.mark.parametrize("policy", ["IfNotPresent", "Never", "Always"])
def test_the_containers_own_pull_policy_wins(policy: str) -> None:
    translation = translate(
        _yaml_of(_tfjob(f"{{name: tensorflow, image: tf:latest, imagePullPolicy: {policy}}}"))
    )
    assert translation.native["spec"]["imagePullPolicy"] == policy
    assert translation.notes == []


@pytest.mark.parametrize(
    ("value", "cores"),
    [
        ("500m", 0.5),
        ("1m", 0.001),
        ("2", 2),
        ("1.5", 1.5),
        ("1k", 1000),
        ("250000u", 0.25),
        ("500000000n", 0.5),
        ("100u", 0.001),  # rounded up to a millicore, as Kubernetes does
        ("0", None),
        ("-1", None),
        ("1Gx", None),
        (True, None),
    ],
)
def test_cpu_quantities_in_millicores(value: object, cores: float | None) -> None:
    assert parse_cpu(value) == cores


@pytest.mark.parametrize(
    ("value", "mib"),
    [
        ("16G", 15259),  # 16 x 10^9 bytes, rounded up: not 16 GiB
        ("16Gi", 16384),
        ("1T", 953675),
        ("1Ti", 1048576),
        ("1Pi", 2**30),
        ("1E", 953674316407),
        ("1Ei", 2**40),
        ("500M", 477),
        ("1500k", 2),
        ("2048Ki", 2),
        ("1Mi", 1),
        ("1e9", 954),
        ("123", 1),  # bytes
        ("16GB", None),
        ("16 Gi", None),
        ("-1Gi", None),
    ],
)
def test_memory_quantities_decimal_and_binary(value: object, mib: int | None) -> None:
    assert parse_memory_mib(value) == mib


@pytest.mark.parametrize(
    ("value", "gpus"), [(1, 1), ("2", 2), ("0", 0), (0, 0), ("1k", 1000), ("0.5", None), ("x", None)]
)
def test_gpu_quantities_are_whole(value: object, gpus: int | None) -> None:
    assert parse_gpus(value) == gpus


def test_a_quantity_that_cannot_map_is_an_error_at_its_line_with_the_fix() -> None:
    for resource, value, expected in [
        ("cpu", "0", "cpu '0' is not a Kubernetes quantity more than 0, such as 2, 0.5 or 2500m"),
        ("memory", "16GB", "memory '16GB' is not a Kubernetes quantity such as 4Gi, 512Mi or 1G"),
        ("nvidia.com/gpu", "0.5", "nvidia.com/gpu '0.5' is not a whole number of GPUs such as 1 or 2"),
    ]:
        text = _tfjob(f"{{name: tensorflow, image: tf:1, resources: {{limits: {{{resource}: '{value}'}}}}}}")
        result = load_file("tf.yaml", text.encode())
        errors = [d.format() for d in result.diagnostics if d.is_error]
        assert result.jobs == () and len(errors) == 1, errors
        assert errors[0].startswith("tf.yaml:10:"), errors  # the container's line
        assert expected in errors[0], errors


def test_the_reserved_defaults_are_the_schemas() -> None:
    resources = SCHEMA["$defs"]["Resources"]["properties"]
    assert (resources["cpus"]["default"], resources["mem"]["default"]) == (DEFAULT_CPUS, DEFAULT_MEM)


# A container with an image and no workingDir: where it runs is said at its line.
WORKDIR = "image {} runs in its task folder (TFDECLARE_WORK_DIR: writable, kept across restarts)"
# Every diagnostic of the manifest with each case: (line, severity, the start of its message).
EXPECTED = [
    (2, Severity.NOTE, "read as a Kubeflow kubeflow.org/v1 TFJob"),
    (13, Severity.WARNING, WORKDIR.format("registry.example.com:5000/tf/ps")),
    (
        14,
        Severity.NOTE,
        "image registry.example.com:5000/tf/ps is pulled at every launch (imagePullPolicy Always)",
    ),
    (23, Severity.WARNING, WORKDIR.format("tensorflow/tensorflow:latest")),
    (
        24,
        Severity.NOTE,
        "image tensorflow/tensorflow:latest is pulled at every launch (imagePullPolicy Always)",
    ),
    (
        32,
        Severity.WARNING,
        "volume 'scratch' (emptyDir) is not mounted at /scratch: each task has a writable",
    ),
    (
        34,
        Severity.WARNING,
        "volume 'creds' (secret s3) is not mounted at /etc/creds: tfdeclare does not mount",
    ),
    (42, Severity.WARNING, WORKDIR.format("tf/eval:2.15")),
    (42, Severity.WARNING, "no cpu or memory request: Kubernetes reserves nothing (BestEffort) for it"),
    (46, Severity.WARNING, "sidecar container 'sidecar' is not run"),
    (53, Severity.WARNING, WORKDIR.format("tf/chief@sha256:" + "0123456789abcdef" * 4)),
    (56, Severity.WARNING, "no memory request: Kubernetes reserves no memory for it"),
    (58, Severity.WARNING, "sidecar container 'sidecar' is not run"),
]


def test_each_case_is_kept_or_said_at_its_line() -> None:
    result = load_file(str(MANIFEST), MANIFEST.read_bytes())
    found = [(d.line, d.severity, d.message) for d in result.diagnostics]
    assert len(found) == len(EXPECTED), [d.format() for d in result.diagnostics]
    for (line, severity, message), (want_line, want_severity, start) in zip(found, EXPECTED, strict=True):
        assert (line, severity) == (want_line, want_severity) and message.startswith(start), (line, message)
    messages = {d.message for d in result.diagnostics}
    assert any("reserves 1 CPU and 2Gi of memory" in m for m in messages)
    assert any("reserves 2Gi of memory (tfdeclare's default)" in m for m in messages)
    assert any("write to a relative path there (such as 'scratch/')" in m for m in messages)
    assert any("env: {NAME: {secretRef: {name: s3, key: secret}}}" in m for m in messages)
    (job,) = result.jobs
    replicas = job.canonical["spec"]["replicas"]
    assert replicas["ps"]["imagePullPolicy"] == "Always"  # untagged
    assert replicas["worker"]["imagePullPolicy"] == "Always"  # :latest
    assert replicas["evaluator"]["imagePullPolicy"] == "Always"  # its own
    assert "imagePullPolicy" not in replicas["chief"]  # a digest: IfNotPresent, our default
    assert replicas["ps"]["resources"] == {"cpus": 0.5, "mem": 15259, "gpus": 0}  # 16G decimal
    assert replicas["worker"]["resources"] == {"cpus": 2, "mem": 4096, "gpus": 1}  # limits: requests
    assert replicas["evaluator"]["resources"] == {"cpus": 1, "mem": 2048, "gpus": 0}  # said at 42
    assert replicas["chief"]["resources"] == {"cpus": 1, "mem": 2048, "gpus": 0}  # said at 56


@pytest.mark.parametrize("path", [*PUBLIC, MANIFEST], ids=lambda p: p.parent.name + "/" + p.stem)
def test_convert_lists_each_warning_once(path: Path) -> None:
    text = path.read_text()
    header = [line for line in convert_text(text).text.splitlines() if line.startswith("# - ")]
    assert len(header) == len(set(header)), header
    result = load_file(str(path), text.encode())
    places = [(d.line, d.column, d.message) for d in result.diagnostics]
    assert len(places) == len(set(places)), places
    warned = {d.message for d in result.diagnostics if d.severity is Severity.WARNING}
    assert {line.removeprefix("# - ") for line in header} == warned


def test_the_same_warning_of_two_roles_is_one_header_line_and_two_diagnostics() -> None:
    path = ROOT / "kubeflow" / "website-gpu.yaml"  # both roles' pods set restartPolicy
    result = load_file(str(path), path.read_bytes())
    ignored = [d for d in result.diagnostics if "the pod's restartPolicy is ignored" in d.message]
    assert len({d.line for d in ignored}) == 2
    header = [
        line
        for line in convert_text(path.read_text()).text.splitlines()
        if "restartPolicy is ignored" in line
    ]
    assert len(header) == 1


def test_an_applied_job_of_the_old_pull_policy_plans_an_update_that_restarts_nothing() -> None:
    """The upgrade's one change to a running job applied from a Kubeflow manifest with a
    ``:latest`` or untagged image: ``imagePullPolicy`` Always, in place (the next launch pulls;
    no running task restarts)."""
    desired = assemble([load_file(str(MANIFEST), MANIFEST.read_bytes())])
    job = desired.jobs["k8s-meaning"]
    old = json.loads(json.dumps(job.canonical))
    for role in ("ps", "worker"):  # what the translation gave before: no pull policy
        del old["spec"]["replicas"][role]["imagePullPolicy"]
    observed = ObservedJob(
        "k8s-meaning", old, fingerprint(old), Phase.RUNNING, job.source, running=tuple(job.spec.task_keys())
    )
    planned = plan(desired, {"k8s-meaning": observed}, PlanOptions()).job("k8s-meaning")
    assert planned.action is Action.UPDATE, planned
    assert {c.dotted for c in planned.changes} == {
        "spec.replicas.ps.imagePullPolicy",
        "spec.replicas.worker.imagePullPolicy",
    }


def test_validate_and_plan_show_each_case_at_its_line(tmp_path: Path) -> None:
    common = ("--state-dir", str(tmp_path / "state"), "--status-dir", str(tmp_path / "st"))
    validated = cli("validate", str(MANIFEST), *common, cwd=tmp_path)
    assert validated.returncode == 0, validated.stderr
    planned = cli("plan", str(MANIFEST), *common, "--detailed-exitcode", cwd=tmp_path)
    assert planned.returncode == 2, planned.stdout + planned.stderr
    assert "k8s-meaning will be created" in planned.stdout
    for run in (validated, planned):
        for line, severity, start in EXPECTED:
            wanted = f"{MANIFEST}:{line}:"
            assert any(
                row.startswith(wanted) and f"{severity.value}: {start}" in row
                for row in run.stderr.splitlines()
            ), (line, start, run.stderr)
        rows = [row for row in run.stderr.splitlines() if row.startswith(str(MANIFEST))]
        assert len(rows) == len(set(rows)), rows


def _yaml_of(text: str) -> dict[str, object]:
    import yaml

    value = yaml.safe_load(text)
    assert isinstance(value, dict)
    return value
