"""Kubeflow ``kubeflow.org/v1`` TFJob manifests read as they are: the public examples in
``tests/kubeflow/`` each validate (warnings allowed) and plan; every field maps, maps onto a
spec extension, or is a warning at its own line; errors keep our ``PATH:LINE:COL`` form."""

from __future__ import annotations

import copy
import json
import os
import sys
import textwrap
from functools import partial
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.conftest import cli
from tfdeclare.backends.mesos.config import MesosConfig
from tfdeclare.backends.mesos.plugin import check_job as mesos_check
from tfdeclare.core.diagnostics import Code, Severity
from tfdeclare.core.enums import RestartPolicy, Role
from tfdeclare.core.plan.planner import PlanOptions, plan
from tfdeclare.core.spec.kubeflow import translate
from tfdeclare.core.spec.kubequantity import parse_cpu, parse_memory_mib
from tfdeclare.core.spec.loader import FileResult, load_file
from tfdeclare.shell.convert import convert_text
from tfdeclare.shell.sources import SpecFiles

EXAMPLES = Path(__file__).parent / "kubeflow"
PUBLIC = sorted(EXAMPLES.glob("*.yaml"))


def test_there_are_at_least_eleven_public_examples_each_naming_its_source() -> None:
    assert len(PUBLIC) >= 11
    for path in PUBLIC:
        header = path.read_text().splitlines()[:3]
        assert header[1].startswith("# Source: github.com/kubeflow/"), path
        assert "Apache-2.0" in header[2] or "CC-BY-4.0" in header[2], path  # the website's


# The website's GPU example runs its images' entrypoint in a workingDir: the Mesos
# containerizer cannot (an error saying what works); the Docker containerizer can.
CONTAINERIZER = {"website-gpu": "docker"}


@pytest.mark.parametrize("path", PUBLIC, ids=lambda p: p.stem)
def test_each_public_example_loads_with_the_mesos_checks_and_plans_a_create(path: Path) -> None:
    checks = (partial(mesos_check, MesosConfig(containerizer=CONTAINERIZER.get(path.stem, "mesos"))),)
    desired = SpecFiles([path], checks=checks).load()
    assert not any(d.is_error for d in desired.diagnostics), [d.format() for d in desired.diagnostics]
    assert any(d.severity is Severity.NOTE for d in desired.diagnostics)
    result = plan(desired, {}, PlanOptions(backend="mesos"))
    assert [j.action.value for j in result.jobs] == ["create"]


@pytest.mark.slow
@pytest.mark.parametrize("path", PUBLIC, ids=lambda p: p.stem)
def test_each_public_example_validates_and_plans_through_the_cli(path: Path, tmp_path: Path) -> None:
    if path.stem in CONTAINERIZER:
        (tmp_path / "tfdeclare.yaml").write_text(f"mesos: {{containerizer: {CONTAINERIZER[path.stem]}}}\n")
    common = (
        "--backend",
        "mesos",
        "--state-dir",
        str(tmp_path / "state"),
        "--status-dir",
        str(tmp_path / "st"),
    )
    validated = cli("validate", str(path), *common, cwd=tmp_path)
    assert validated.returncode == 0, validated.stderr
    assert f"{path}:4:13: note: read as a Kubeflow kubeflow.org/v1 TFJob" in validated.stderr
    assert "error" not in validated.stderr
    planned = cli("plan", str(path), *common, "--detailed-exitcode", cwd=tmp_path)
    assert planned.returncode == 2, planned.stdout + planned.stderr
    assert "will be created" in planned.stdout


def load(text: str) -> FileResult:
    return load_file("tf.yaml", textwrap.dedent(text).encode())


def messages(result: FileResult, severity: Severity) -> list[str]:
    return [d.format() for d in result.diagnostics if d.severity is severity]


def test_dist_mnist_maps_roles_counts_image_entrypoint_and_kubeflows_defaults() -> None:
    result = load_file(str(EXAMPLES / "dist-mnist.yaml"), (EXAMPLES / "dist-mnist.yaml").read_bytes())
    (job,) = result.jobs
    spec = job.canonical["spec"]
    assert spec["image"] == "kubeflow/tf-dist-mnist-test:1.0" and spec["command"] is None
    assert {r: e["count"] for r, e in spec["replicas"].items()} == {"ps": 2, "worker": 4}
    assert spec["restartPolicy"] == "Never" and spec["successPolicy"] == "Worker0"
    assert job.spec.runs_entrypoint(Role.WORKER)


EVERYTHING = """\
    apiVersion: kubeflow.org/v1
    kind: TFJob
    metadata:
      generateName: big-
      namespace: team
      labels: {team: vision}
      annotations: {owner: me}
    spec:
      successPolicy: AllWorkers
      runPolicy:
        backoffLimit: 5
        activeDeadlineSeconds: 3600
        ttlSecondsAfterFinished: 600
        cleanPodPolicy: Running
        schedulingPolicy: {minAvailable: 3}
      tfReplicaSpecs:
        Master:
          replicas: 1
          restartPolicy: ExitCode
          template:
            spec:
              nodeSelector: {zone: a}
              containers:
                - name: tensorflow
                  image: tf:gpu
                  command: [python, train.py]
                  args: [--role, chief]
                  workingDir: /src
                  ports: [{containerPort: 2222, name: tfjob-port}, {containerPort: 6006}]
                  env:
                    - {name: LR, value: "0.1"}
                    - name: TOKEN
                      valueFrom: {secretKeyRef: {name: creds, key: token}}
                    - name: POD
                      valueFrom: {fieldRef: {fieldPath: metadata.name}}
                  resources:
                    requests: {cpu: 2500m, memory: 4Gi}
                    limits: {cpu: "4", memory: 4Gi, nvidia.com/gpu: 1}
                  volumeMounts:
                    - {name: data, mountPath: /data, readOnly: true}
                    - {name: ckpt, mountPath: /ckpt}
                - name: istio-proxy
                  image: istio/proxy
              initContainers: [{name: fetch, image: busybox}]
              volumes:
                - {name: data, hostPath: {path: /mnt/data}}
                - {name: ckpt, persistentVolumeClaim: {claimName: ckpt}}
        PS:
          replicas: 2
          template:
            spec:
              nodeSelector: {zone: a}
              containers:
                - name: tensorflow
                  image: tf:cpu
                  command: [python, train.py]
                  resources: {limits: {memory: 1G, cpu: 0.5}}
                  volumeMounts: [{name: data, mountPath: /data, readOnly: true}]
              volumes: [{name: data, hostPath: {path: /mnt/data}}]
        Evaluator:
          replicas: 1
          restartPolicy: ExitCode
          template:
            spec:
              nodeSelector: {zone: a}
              containers:
                - {name: tensorflow, image: tf:cpu, command: [python, train.py]}
    """


def test_every_kind_of_field_is_mapped_extended_or_warned() -> None:
    translation = translate(__import__("yaml").safe_load(textwrap.dedent(EVERYTHING)))
    native: dict[str, Any] = translation.native
    spec = native["spec"]
    assert native["metadata"] == {"name": "big", "labels": {"team": "vision"}}
    assert spec["command"] == ["python", "train.py"], "the same in every role: the job's"
    assert spec["replicas"]["chief"] == {
        "count": 1,
        "restartPolicy": "ExitCode",
        "image": "tf:gpu",
        "args": ["--role", "chief"],
        "workingDir": "/src",
        "env": {"LR": "0.1", "TOKEN": {"secretRef": {"name": "creds", "key": "token"}}},
        "resources": {"cpus": 2.5, "mem": "4Gi", "gpus": 1},
    }
    assert spec["replicas"]["ps"] == {
        "count": 2,
        "restartPolicy": "Never",
        "image": "tf:cpu",
        "resources": {"mem": 954, "cpus": 0.5},
    }
    assert spec["successPolicy"] == "AllWorkers"
    assert (spec["backoffLimit"], spec["activeDeadlineSeconds"], spec["ttlSecondsAfterFinished"]) == (
        5,
        3600,
        600,
    )
    assert spec["volumes"] == [{"hostPath": "/mnt/data", "containerPath": "/data", "mode": "ro"}]
    assert spec["placement"] == {"constraints": [{"attribute": "zone", "operator": "In", "values": ["a"]}]}
    warned = {".".join(map(str, path)) for path, _ in translation.warnings}
    assert warned == {
        "metadata.generateName",
        "metadata.namespace",
        "metadata.annotations",
        "spec.runPolicy.schedulingPolicy",
        "spec.tfReplicaSpecs",  # the evaluator mounts no /data: every role gets it
        "spec.tfReplicaSpecs.Master.template.spec.containers.0.ports.1",
        "spec.tfReplicaSpecs.Master.template.spec.containers.0.env.2.valueFrom",
        "spec.tfReplicaSpecs.Master.template.spec.containers.0.resources.limits.cpu",
        "spec.tfReplicaSpecs.Master.template.spec.containers.1",
        "spec.tfReplicaSpecs.Master.template.spec.initContainers",
        "spec.tfReplicaSpecs.Master.template.spec.volumes.1.persistentVolumeClaim",
        # no requests: what it reserves is said (Kubernetes would reserve nothing); and where
        # it runs (an image without workingDir)
        "spec.tfReplicaSpecs.Evaluator.template.spec.containers.0",
        "spec.tfReplicaSpecs.PS.template.spec.containers.0",
    }
    assert translation.errors == []


def test_warnings_carry_file_line_and_json_path() -> None:
    result = load(EVERYTHING)
    warnings = messages(result, Severity.WARNING)
    assert "tf.yaml:5:14: warning: namespace has no equivalent" in warnings[1]
    assert any(
        w.startswith("tf.yaml:44:11: warning: initContainers are not run")
        and w.endswith("(at $.spec.tfReplicaSpecs.Master.template.spec.initContainers)")
        for w in warnings
    ), warnings
    assert all(d.code in (Code.KUBEFLOW, Code.KUBEFLOW_UNMAPPED, Code.SCHEMA) for d in result.diagnostics)


def test_a_kubeflow_restart_policy_per_role_and_defaults_reach_the_model() -> None:
    text = EVERYTHING.replace("TOKEN\n", "TOKEN_UNUSED\n").replace(
        "valueFrom: {secretKeyRef: {name: creds, key: token}}", "value: t"
    )
    (job,) = load(text).jobs
    assert job.spec.restart_policy_for(Role.CHIEF) is RestartPolicy.EXIT_CODE
    assert job.spec.restart_policy_for(Role.PS) is RestartPolicy.NEVER, "Kubeflow's default"
    assert job.spec.command_for(Role.CHIEF) == ("python", "train.py", "--role", "chief")
    assert job.spec.image_for(Role.PS) == "tf:cpu" and job.spec.working_dir_for(Role.CHIEF) == "/src"
    assert job.spec.ttl_after_finished_s == 600


@pytest.mark.parametrize(
    ("change", "expected"),
    [
        (
            ("kubeflow.org/v1\n", "kubeflow.org/v1alpha1\n"),
            "tf.yaml:1:13: error: kubeflow.org/v1alpha1 TFJobs are not read: their spec.replicaSpecs list",
        ),
        (
            ("kubeflow.org/v1\n", "kubeflow.org/v3\n"),
            "tf.yaml:1:13: error: apiVersion kubeflow.org/v3 is not a TFJob version tfdeclare reads",
        ),
        (
            ("kind: TFJob", "kind: PyTorchJob"),
            "tf.yaml:2:7: error: kind 'PyTorchJob' of kubeflow.org/v1 is not",
        ),
        (("PS:\n", "Launcher:\n"), "tf.yaml:48:5: error: unknown replica type 'Launcher'"),
        (("Evaluator:\n", "Chief:\n"), "tf.yaml:60:5: error: 'Chief' is a second chief"),
        (
            ("- {name: tensorflow, image: tf:cpu", "- {name: main, image: tf:cpu"),
            "tf.yaml:66:11: error: no container",
        ),
        (("replicas: 2\n", "replicas: -2\n"), "tf.yaml:49:17: error: must be at least 0"),
        (("cpu: 0.5}", "cpu: lots}"), "tf.yaml:57:53: error: cpu 'lots' is not a Kubernetes quantity"),
        (
            ("{name: LR, value", "{name: TF_CONFIG, value"),
            "tf.yaml:31:19: error: name 'TF_CONFIG': must be a valid environment variable name",
        ),
    ],
)
def test_errors_point_at_the_manifests_own_lines(change: tuple[str, str], expected: str) -> None:
    text = textwrap.dedent(EVERYTHING).replace(*change)
    text = text.replace("valueFrom: {secretKeyRef: {name: creds, key: token}}", "value: t")
    result = load_file("tf.yaml", text.encode())
    errors = messages(result, Severity.ERROR)
    assert result.jobs == () and errors, errors
    assert errors[0].startswith(expected), errors


def test_a_native_spec_is_not_touched_by_the_kubeflow_reader() -> None:
    result = load(
        "apiVersion: tfdeclare/v1\nkind: TFJob\nmetadata: {name: a}\nspec: {command: [t], replicas: {worker: {}}}\n"
    )
    assert result.diagnostics == () and len(result.jobs) == 1


@pytest.mark.parametrize(
    ("value", "cores"),
    [("2500m", 2.5), ("1", 1), (2, 2), (0.5, 0.5), ("100m", 0.1), ("1e3m", 1), ("x", None)],
)
def test_kubernetes_cpu_quantities(value: object, cores: float | None) -> None:
    assert parse_cpu(value) == cores


@pytest.mark.parametrize(
    ("value", "mib"),
    [
        ("4Gi", 4096),
        ("512Mi", 512),
        ("1G", 954),
        ("1M", 1),
        ("129e6", 124),
        (134217728, 128),
        ("1.5Gi", 1536),
        ("0", None),
    ],
)
def test_kubernetes_memory_quantities_in_mib_rounded_up(value: object, mib: int | None) -> None:
    assert parse_memory_mib(value) == mib


def _paths(value: Any, path: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    found = [path]
    if isinstance(value, dict):
        found += [p for key, item in value.items() for p in _paths(item, (*path, key))]
    elif isinstance(value, list):
        found += [p for index, item in enumerate(value) for p in _paths(item, (*path, index))]
    return found


ODD_VALUES = [None, -1, 7, "x", "tensorflow", "2500m", [], {}, [1], {"a": 1}, [{"name": 1}], True, 1.5]


@settings(max_examples=int(os.environ.get("TFDECLARE_FUZZ_EXAMPLES", "100")), deadline=None)
@given(
    st.sampled_from([*PUBLIC, None]),
    st.lists(st.tuples(st.integers(min_value=0), st.sampled_from(ODD_VALUES)), min_size=1, max_size=3),
)
def test_any_manifest_shape_gives_diagnostics_never_a_crash(path: Path | None, changes: list[Any]) -> None:
    """A field of the wrong type anywhere in a manifest is a diagnostic (found by this fuzzer:
    a list where Kubernetes has a mapping crashed the translation)."""
    document = yaml.safe_load(path.read_text() if path else textwrap.dedent(EVERYTHING))
    for index, value in changes:
        where = _paths(document)[1:]
        *parents, last = where[index % len(where)]
        node = document
        for part in parents:
            node = node[part]
        node[last] = copy.deepcopy(value)
    text = yaml.safe_dump(document, sort_keys=False)
    result = load_file("fuzz.yaml", text.encode())
    assert all(d.format() for d in result.diagnostics)
    if not result.has_errors:
        assert "apiVersion: tfdeclare/v1" in convert_text(text).text


def test_a_secret_key_ref_becomes_a_secret_reference_never_a_value() -> None:
    from tfdeclare.core.spec.secrets import SecretRef, SecretSource

    result = load(EVERYTHING)
    assert messages(result, Severity.ERROR) == []
    (job,) = result.jobs
    token = job.spec.env_for(Role.CHIEF)["TOKEN"]
    assert token == SecretRef(SecretSource.NAME, "creds", "token")


# ---- issue 20 finding 12 and issue 22 finding 3, entry by entry ---------------------------------

ENV = """\
    apiVersion: kubeflow.org/v1
    kind: TFJob
    metadata: {name: env}
    spec:
      tfReplicaSpecs:
        Worker:
          template:
            spec:
              containers:
                - name: tensorflow
                  image: tf:2
                  env:
                    - name: PLAIN
                      value: "1"
                    - name: TOKEN
                      valueFrom:
                        secretKeyRef:
                          name: creds
                          key: token
    """


@pytest.mark.parametrize(
    ("change", "expected"),
    [
        (  # a secretKeyRef without its key: once, at the entry's own secretKeyRef
            ("      key: token\n", ""),
            "tf.yaml:17:21: error: env TOKEN: secretKeyRef needs a name and a key (strings) "
            "(at $.spec.tfReplicaSpecs.Worker.template.spec.containers[0].env[1].valueFrom.secretKeyRef)",
        ),
        (  # a name the secret reference refuses: once, at the name's own line
            ("name: creds", "name: 'bad name'"),
            "tf.yaml:18:29: error: must match the pattern",
        ),
    ],
)
def test_an_env_entry_is_judged_once_at_its_own_line(change: tuple[str, str], expected: str) -> None:
    text = textwrap.dedent(ENV).replace(*change)
    result = load_file("tf.yaml", text.encode())
    errors = messages(result, Severity.ERROR)
    assert len(errors) == 1 and errors[0].startswith(expected), errors


def test_an_empty_value_beside_value_from_is_allowed_as_kubernetes_allows_it() -> None:
    text = textwrap.dedent(ENV).replace("valueFrom:\n", 'value: ""\n' + " " * 18 + "valueFrom:\n")
    (job,) = load_file("tf.yaml", text.encode()).jobs
    assert job.spec.env_for(Role.WORKER)["TOKEN"] != ""


def test_an_env_value_with_value_from_is_an_error_at_that_entry() -> None:
    text = textwrap.dedent(ENV).replace(
        'value: "1"\n', 'value: "1"\n' + " " * 18 + "valueFrom: {fieldRef: {}}\n"
    )
    errors = messages(load_file("tf.yaml", text.encode()), Severity.ERROR)
    assert errors == [
        "tf.yaml:13:19: error: env PLAIN has both value and valueFrom (Kubernetes refuses that): keep one "
        "(at $.spec.tfReplicaSpecs.Worker.template.spec.containers[0].env[0])"
    ]


BUNDLE = """\
    apiVersion: v1
    kind: PersistentVolumeClaim
    metadata: {name: data}
    spec: {accessModes: [ReadWriteOnce], resources: {requests: {storage: 10Gi}}}
    ---
    apiVersion: v1
    kind: ConfigMap
    metadata: {name: settings}
    data: {lr: "0.1"}
    ---
    # the job itself
    apiVersion: kubeflow.org/v1
    kind: TFJob
    metadata: {name: bundled}
    spec:
      tfReplicaSpecs:
        Worker:
          template:
            spec:
              containers:
                - {name: tensorflow, image: tf:2}
    ---
    apiVersion: v1
    kind: Service
    metadata: {name: tensorboard}
    spec: {ports: [{port: 6006}]}
    """

BUNDLE_WARNINGS = [
    "tf.yaml:2:7: warning: PersistentVolumeClaim 'data' (v1) is not a TFJob: not run "
    "(tfdeclare runs only the TFJobs of a file) (at $.kind)",
    "tf.yaml:7:7: warning: ConfigMap 'settings' (v1) is not a TFJob: not run "
    "(tfdeclare runs only the TFJobs of a file) (at $.kind)",
    "tf.yaml:24:7: warning: Service 'tensorboard' (v1) is not a TFJob: not run "
    "(tfdeclare runs only the TFJobs of a file) (at $.kind)",
]


def test_other_kubernetes_documents_are_one_warning_each_and_the_tfjob_is_read() -> None:
    result = load(BUNDLE)
    assert [d.format() for d in result.diagnostics if d.code is Code.NOT_A_JOB] == BUNDLE_WARNINGS
    assert messages(result, Severity.ERROR) == []
    assert [job.name for job in result.jobs] == ["bundled"] and [n for n, _ in result.named] == ["bundled"]
    converted = convert_text(textwrap.dedent(BUNDLE)).text
    assert converted.count("apiVersion: v1\n") == 3 and "apiVersion: tfdeclare/v1" in converted
    assert load_file("c.yaml", converted.encode()).jobs[0].spec_hash == result.jobs[0].spec_hash


def test_a_tfjob_of_another_group_is_still_judged_as_a_job() -> None:
    result = load("apiVersion: v1\nkind: TFJob\nmetadata: {name: x}\nspec: {}\n")
    assert result.jobs == () and messages(result, Severity.ERROR), result.diagnostics


@pytest.mark.slow
def test_every_entry_warns_about_other_documents_and_reads_the_tfjob(tmp_path: Path) -> None:
    spec = tmp_path / "bundle.yaml"
    command = f"command: [{json.dumps(sys.executable)}, -c, pass]"
    spec.write_text(textwrap.dedent(BUNDLE).replace("image: tf:2", command))
    lines = [w.replace("tf.yaml", str(spec)).replace(" (at $.kind)", "") for w in BUNDLE_WARNINGS]
    common = ("--state-dir", str(tmp_path / "state"), "--status-dir", str(tmp_path / "st"))
    entries = (("validate",), ("plan", "--detailed-exitcode"), ("convert",), ("apply", "--wait"))
    for entry in entries:
        done = cli(*entry, str(spec), *common[: 0 if entry[0] == "convert" else 4], cwd=tmp_path)
        assert done.returncode == (2 if entry[0] == "plan" else 0), done.stdout + done.stderr
        for line in lines:
            assert line in done.stderr, (entry, done.stderr)
    status = yaml.safe_load((tmp_path / "st" / "bundled.yaml").read_text())
    assert status["phase"] == "Succeeded", status
    assert sorted(p.name for p in (tmp_path / "st").iterdir()) == ["bundled.yaml"], "nothing else ran"


V1 = EXAMPLES / "dist-mnist.yaml"


@pytest.mark.parametrize("version", ["v1beta2", "v1beta1", "v1alpha2"])
def test_earlier_versions_with_v1s_fields_are_read_as_v1(version: str) -> None:
    text = V1.read_text().replace('"kubeflow.org/v1"', f'"kubeflow.org/{version}"')
    result = load_file("tf.yaml", text.encode())
    (job,) = result.jobs
    assert job.spec_hash == load_file("v1.yaml", V1.read_bytes()).jobs[0].spec_hash
    (note,) = [d.format() for d in result.diagnostics if d.severity is Severity.NOTE]
    assert note.startswith(
        f"tf.yaml:4:13: note: read as a Kubeflow kubeflow.org/{version} TFJob "
        "(its fields are those of kubeflow.org/v1)"
    )
    assert f"kubeflow.org/{version}" in convert_text(text).text.splitlines()[0]


def test_v1alpha2s_eval_replica_is_the_evaluator() -> None:
    text = textwrap.dedent(EVERYTHING).replace("kubeflow.org/v1\n", "kubeflow.org/v1alpha2\n")
    text = text.replace("Evaluator:", "Eval:")
    (job,) = load_file("tf.yaml", text.encode()).jobs
    assert "evaluator" in job.canonical["spec"]["replicas"]
    v1 = text.replace("kubeflow.org/v1alpha2\n", "kubeflow.org/v1\n")
    assert load_file("tf.yaml", v1.encode()).jobs == (), "Eval is v1alpha2's name only"


@pytest.mark.parametrize(
    ("version", "expected"),
    [
        (
            "v1alpha1",
            "kubeflow.org/v1alpha1 TFJobs are not read: their spec.replicaSpecs list (tfReplicaType, "
            "tfPort) became the spec.tfReplicaSpecs mapping in v1alpha2; rewrite it as kubeflow.org/v1",
        ),
        (
            "v2",
            "apiVersion kubeflow.org/v2 is not a TFJob version tfdeclare reads (kubeflow.org/v1, and "
            "v1beta2, v1beta1, v1alpha2, whose fields are v1's): if its fields are v1's, change "
            "apiVersion to kubeflow.org/v1",
        ),
    ],
)
def test_other_versions_are_one_error_naming_the_version_and_no_note(version: str, expected: str) -> None:
    text = V1.read_text().replace('"kubeflow.org/v1"', f'"kubeflow.org/{version}"')
    result = load_file("tf.yaml", text.encode())
    assert [d.format() for d in result.diagnostics] == [
        d
        for d in [d.format() for d in result.diagnostics]
        if d.startswith(f"tf.yaml:4:13: error: {expected}")
    ]
    assert len(result.diagnostics) == 1 and "read as" not in result.diagnostics[0].message


WEBSITE_GPU = EXAMPLES / "website-gpu.yaml"


def test_the_websites_gpu_example_gets_through_on_mesos() -> None:
    """Issue 22: it dead-ended (docker refused its GPUs, mesos its entrypoint's workingDir)."""
    data = WEBSITE_GPU.read_bytes()
    docker = load_file("gpu.yaml", data, (partial(mesos_check, MesosConfig(containerizer="docker")),))
    (job,) = docker.jobs
    assert messages(docker, Severity.ERROR) == []
    (gpus,) = [d.format() for d in docker.diagnostics if d.code is Code.BACKEND]
    assert gpus.startswith("gpu.yaml:63:35: warning: the Docker containerizer (mesos.containerizer: docker)")
    assert job.spec.runs_entrypoint(Role.WORKER) and job.spec.working_dir_for(Role.WORKER)
    assert job.spec.resources_for(Role.WORKER).gpus == 1

    mesos = load_file("gpu.yaml", data, (partial(mesos_check, MesosConfig()),))
    (error,) = messages(mesos, Severity.ERROR)
    assert error.startswith("gpu.yaml:36:27: error: role ps runs its image's entrypoint (no command)")
    assert "to the first of the args ('python'), leaving the rest as args" in error
    assert "or use mesos.containerizer: docker" in error
    # the other path it offers: python as the command, the rest as args
    fixed = data.replace(
        b"- args:\n                - python\n", b"- command: [python]\n              args:\n"
    )
    assert fixed.count(b"command: [python]") == 2
    result = load_file("gpu.yaml", fixed, (partial(mesos_check, MesosConfig()),))
    assert messages(result, Severity.ERROR) == [] and len(result.jobs) == 1
    assert result.jobs[0].spec.command_for(Role.WORKER)[:2] == ("python", "tf_cnn_benchmarks.py")


# ---- one check per finding (issue 20 #12, issue 22 #3), as filed ---------------------------------

KF = """\
apiVersion: kubeflow.org/v1
kind: TFJob
metadata:
  name: f
  annotations:
    # keep istio's sidecar out of the TF cluster
    sidecar.istio.io/inject: "false"
spec:
  tfReplicaSpecs:
    Worker:
      replicas: 2
      template:
        spec:
          containers:
            - name: tensorflow
              image: tf:2
              env:
                - {name: A, value: "1"}
"""
NATIVE = """\
apiVersion: tfdeclare/v1
kind: TFJob
metadata: {name: n}
spec:
  command: [python, t.py]
  replicas:
    chief: {count: 1}
  worker: {count: 2}
"""


def _errors(text: str, *checks: Any) -> list[str]:
    return messages(load_file("f.yaml", text.encode(), checks), Severity.ERROR)


FINDINGS: dict[str, Any] = {
    "20.12 value with valueFrom is an error at that entry": lambda: (
        _errors(KF.replace('value: "1"}', 'value: "1", valueFrom: {secretKeyRef: {name: s, key: k}}}'))
        == [
            "f.yaml:18:19: error: env A has both value and valueFrom (Kubernetes refuses that): keep one "
            "(at $.spec.tfReplicaSpecs.Worker.template.spec.containers[0].env[0])"
        ]
    ),
    "20.12 a bad secretKeyRef is one error at its entry": lambda: (
        _errors(KF.replace('value: "1"}', "valueFrom: {secretKeyRef: {name: 'no good'}}}"))
        == [
            "f.yaml:18:41: error: env A: secretKeyRef needs a name and a key (strings) "
            "(at $.spec.tfReplicaSpecs.Worker.template.spec.containers[0].env[0].valueFrom.secretKeyRef)"
        ]
    ),
    "22.3 other Kubernetes documents are a warning each, the TFJob is read": lambda: (
        (
            r := load_file(
                "f.yaml", f"apiVersion: v1\nkind: ConfigMap\nmetadata: {{name: c}}\n---\n{KF}".encode()
            )
        )
        and [j.name for j in r.jobs] == ["f"]
        and [d.format() for d in r.diagnostics if d.code is Code.NOT_A_JOB]
        == [
            "f.yaml:2:7: warning: ConfigMap 'c' (v1) is not a TFJob: not run "
            "(tfdeclare runs only the TFJobs of a file) (at $.kind)"
        ]
    ),
    "22.3 v1beta1 is read, with a note naming it": lambda: (
        (r := load_file("f.yaml", KF.replace("kubeflow.org/v1\n", "kubeflow.org/v1beta1\n").encode()))
        and len(r.jobs) == 1
        and "read as a Kubeflow kubeflow.org/v1beta1 TFJob" in r.diagnostics[0].message
    ),
    "22.3 an unknown version is one error and no note": lambda: (
        [d.severity for d in load_file("f.yaml", KF.replace("org/v1\n", "org/v9\n").encode()).diagnostics]
        == [Severity.ERROR]
    ),
    "22.3 convert drops the istio comment with the annotation": lambda: (
        "istio" not in (out := convert_text(KF).text.split("kind: TFJob\n", 1)[1])
        and "  replicas:\n    worker:\n      count: 2\n" in out
    ),
    "22.3 a mis-indented worker gets no 'did you mean workingDir'": lambda: (
        _errors(NATIVE)
        == [
            "f.yaml:8:3: error: unknown field 'worker' (a field of spec.replicas: is it indented right?); "
            "allowed: activeDeadlineSeconds, args, backoffLimit, checkpoint, clusterSpec, command, env, "
            "evaluatorGraceSeconds, healthCheck, image, imagePullPolicy, placement, platformRestartLimit, priority, priorityClassName, replicas, restartPolicy, restartScope, "
            "successPolicy, suspend, tensorboard, terminationGracePeriodSeconds, ttlSecondsAfterFinished, volumes, workingDir (at "
            "$.spec.worker)"
        ]
    ),
    "22.3 GPUs under the Docker containerizer": lambda: (
        _errors(
            KF.replace("image: tf:2", "image: tf:2\n              resources: {limits: {nvidia.com/gpu: 1}}"),
            partial(mesos_check, MesosConfig(containerizer="docker")),
        )
        == []
    ),
    "22.3 an entrypoint with a workingDir: docker runs it, mesos says what works": lambda: (
        _errors(
            (wd := KF.replace("image: tf:2", "image: tf:2\n              workingDir: /w")),
            partial(mesos_check, MesosConfig(containerizer="docker")),
        )
        == []
        and "or use mesos.containerizer: docker" in _errors(wd, partial(mesos_check, MesosConfig()))[0]
    ),
    "22.3 the website's GPU example gets through on Mesos": lambda: (
        _errors(WEBSITE_GPU.read_text(), partial(mesos_check, MesosConfig(containerizer="docker"))) == []
    ),
}


@pytest.mark.parametrize("finding", FINDINGS)
def test_each_finding_is_fixed(finding: str) -> None:
    assert FINDINGS[finding](), finding


SUSPENDED = """\
    apiVersion: kubeflow.org/v1
    kind: TFJob
    metadata: {name: paused}
    spec:
      runPolicy: {suspend: true}
      tfReplicaSpecs:
        Worker:
          replicas: 2
          template:
            spec:
              containers: [{name: tensorflow, image: tf:2.21, command: [python, train.py]}]
    """


def test_run_policy_suspend_is_spec_suspend() -> None:
    result = load(SUSPENDED)
    assert not any(d.is_error for d in result.diagnostics), [d.format() for d in result.diagnostics]
    assert not any("suspend" in d.message for d in result.diagnostics)  # mapped, not warned about
    job = result.jobs[0]
    assert job.spec.suspend is True and job.canonical["spec"]["suspend"] is True
    running = load(SUSPENDED.replace("{suspend: true}", "{suspend: false}")).jobs[0]
    assert running.spec.suspend is False and "suspend" not in running.canonical["spec"]
