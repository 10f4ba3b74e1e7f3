"""What a reviewer found Kubeflow manifests lost or misread, each at its class: quantities said
as written and rounded as Kubernetes does, the resume hint naming the Kubeflow field."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tests.conftest import cli
from tfdeclare.core.diagnostics import Severity
from tfdeclare.core.run.lifecycle import RESUME_HINT
from tfdeclare.core.spec.kubeexpand import expand
from tfdeclare.core.spec.kubeflow import translate
from tfdeclare.core.spec.kubequantity import parse_cpu
from tfdeclare.core.spec.loader import FileResult, load_file
from tfdeclare.shell.convert import convert_text


def load(text: str) -> FileResult:
    return load_file("tf.yaml", textwrap.dedent(text).encode())


def errors(result: FileResult) -> list[str]:
    return [d.format() for d in result.diagnostics if d.severity is Severity.ERROR]


def warnings(result: FileResult) -> list[str]:
    return [d.format() for d in result.diagnostics if d.severity is Severity.WARNING]


def tfjob(container: str = "", pod: str = "", worker: str = "", spec: str = "") -> str:
    """A Kubeflow TFJob with one Worker; the parts are YAML lines at their own indentation."""
    return (
        "apiVersion: kubeflow.org/v1\nkind: TFJob\nmetadata: {name: t}\nspec:\n"
        + textwrap.indent(textwrap.dedent(spec), "  ")
        + "  tfReplicaSpecs:\n    Worker:\n"
        + textwrap.indent(textwrap.dedent(worker), "      ")
        + "      template:\n        spec:\n"
        + textwrap.indent(textwrap.dedent(pod), "          ")
        + "          containers:\n            - name: tensorflow\n              command: [python, t.py]\n"
        + "              resources: {requests: {cpu: 1, memory: 1Gi}}\n"
        + textwrap.indent(textwrap.dedent(container), "              ")
    )


# ---- 7: quantities ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "cores"),
    [("999u", 0.001), ("0.0005", 0.001), (0.0005, 0.001), ("1n", 0.001), ("1.0005", 1.001), ("100m", 0.1)],
)
def test_cpu_below_a_millicore_rounds_up_as_kubernetes_does(value: object, cores: float) -> None:
    assert parse_cpu(value) == cores


def test_a_memory_too_large_is_said_as_written() -> None:
    result = load(tfjob().replace("memory: 1Gi", "memory: 2Ei"))
    assert result.jobs == ()
    (error,) = errors(result)
    assert "memory '2Ei' is larger than 1 EiB" in error and error.startswith("tf.yaml:12:"), error
    assert "Gi'" not in error.replace("'2Ei'", "")


def test_the_resume_hint_names_the_kubeflow_field_too() -> None:
    assert "suspend: false" in RESUME_HINT and "runPolicy.suspend" in RESUME_HINT


# ---- 6: convert keeps a file's leading comments; links and standard input ----------------------

TFJOB = tfjob().replace("command: [python, t.py]", "image: 'tf:1'")
CONFIGMAP = "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: c}\n"
LICENSE = "# Copyright 2026 Example\n# Licensed under the Apache License 2.0\n\n"


@pytest.mark.parametrize(
    "text",
    [
        LICENSE + "---\n" + TFJOB,
        LICENSE + "---\n" + CONFIGMAP + "---\n" + TFJOB,
        LICENSE + "---\n" + CONFIGMAP + "...\n---\n" + TFJOB,
        LICENSE + "---\n" + TFJOB + "...\n---\n" + CONFIGMAP,
    ],
    ids=["tfjob", "configmap-first", "configmap-first-end-marker", "end-marker"],
)
def test_convert_keeps_the_comments_before_the_first_document_first(text: str) -> None:
    converted = convert_text(text)
    assert converted.kubeflow_documents == 1
    assert converted.text.startswith(LICENSE + "---\n"), converted.text
    assert converted.text.count("# Copyright") == 1
    loaded = load_file("c.yaml", converted.text.encode())
    assert [j.name for j in loaded.jobs] == ["t"] and not any(d.is_error for d in loaded.diagnostics)


def test_convert_write_of_a_link_rewrites_the_file_it_leads_to(tmp_path: Path) -> None:
    target = tmp_path / "manifests" / "tfjob.yaml"
    target.parent.mkdir()
    target.write_text(TFJOB)
    target.chmod(0o640)
    link = tmp_path / "tfjob.yaml"
    link.symlink_to(target)
    written = cli("convert", "--write", str(link), cwd=tmp_path)
    assert written.returncode == 0, written.stderr
    assert link.is_symlink() and link.resolve() == target, "the link stays a link"
    assert "apiVersion: tfdeclare/v1" in target.read_text() and target.stat().st_mode & 0o777 == 0o640
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    (tmp_path / "odd.yaml").symlink_to(fifo)
    refused = cli("convert", "--write", str(tmp_path / "odd.yaml"), cwd=tmp_path, timeout=30)
    assert refused.returncode == 1 and "not a regular file" in refused.stderr, refused.stderr


def test_convert_reads_standard_input_and_refuses_to_write_it(tmp_path: Path) -> None:
    run = subprocess.run(
        [sys.executable, "-m", "tfdeclare", "convert", "-"],
        input=LICENSE + "---\n" + TFJOB,
        capture_output=True,
        text=True,
        cwd=tmp_path,
        timeout=60,
        check=False,
    )
    assert run.returncode == 0, run.stderr
    assert run.stdout.startswith(LICENSE) and "apiVersion: tfdeclare/v1" in run.stdout
    refused = cli("convert", "--write", "-", cwd=tmp_path)
    assert refused.returncode == 1 and "--write cannot rewrite standard input" in refused.stderr


# ---- 3: an image's container without workingDir ---------------------------------------------


def test_an_image_without_working_dir_says_where_it_runs_at_the_containers_line() -> None:
    with_image = load(tfjob("image: 'tf:1'\n"))
    (warning,) = [w for w in warnings(with_image) if "WORKDIR" in w]
    assert warning.startswith("tf.yaml:10:15: warning: image tf:1 runs in its task folder"), warning
    assert "set workingDir" in warning and "containers[0]" in warning
    assert len(with_image.jobs) == 1, "a warning: the job is valid"
    set_dir = load(tfjob("image: 'tf:1'\nworkingDir: /app\n"))
    assert not [w for w in warnings(set_dir) if "WORKDIR" in w]
    no_image = load(tfjob())
    assert not [w for w in warnings(no_image) if "WORKDIR" in w]


# ---- 5: the pods' grace and priority class are the job's ------------------------------------


def two_roles(ps_pod: str, worker_pod: str, spec: str = "") -> str:
    text = tfjob(pod=worker_pod, spec=spec)
    ps = tfjob(pod=ps_pod).split("  tfReplicaSpecs:\n")[1].replace("    Worker:\n", "    PS:\n", 1)
    return text + ps


def test_the_largest_pod_grace_is_the_jobs_with_a_warning_naming_the_role_given_more() -> None:
    result = load(two_roles("terminationGracePeriodSeconds: 20\n", "terminationGracePeriodSeconds: 60\n"))
    (job,) = result.jobs
    assert job.canonical["spec"]["terminationGracePeriodSeconds"] == 60
    assert not [w for w in warnings(result) if "no tfdeclare equivalent" in w]
    (raised,) = [w for w in warnings(result) if "grace" in w]
    assert "PS's grace of 20 s is raised to 60 s" in raised and "PS.template.spec.terminationGrace" in raised
    alone = load(two_roles("", "terminationGracePeriodSeconds: 5\n"))
    assert alone.jobs[0].canonical["spec"]["terminationGracePeriodSeconds"] == 30  # Kubernetes' default
    assert any("Worker's grace of 5 s is raised to 30 s" in w for w in warnings(alone))
    same = load(two_roles("terminationGracePeriodSeconds: 45\n", "terminationGracePeriodSeconds: 45\n"))
    assert same.jobs[0].canonical["spec"]["terminationGracePeriodSeconds"] == 45 and not warnings(same)
    bad = load(tfjob(pod="terminationGracePeriodSeconds: soon\n"))
    assert bad.jobs == () and "terminationGracePeriodSeconds 'soon' must be a number" in errors(bad)[0]


def test_the_pods_priority_class_is_the_jobs_unless_the_scheduling_policy_says_another() -> None:
    result = load(two_roles("priorityClassName: batch\n", "priorityClassName: batch\n"))
    assert result.jobs[0].canonical["spec"]["priorityClassName"] == "batch" and not warnings(result)
    conflict = load(
        two_roles(
            "priorityClassName: batch\n",
            "priorityClassName: batch\n",
            spec="runPolicy: {schedulingPolicy: {priorityClass: urgent}}\n",
        )
    )
    assert conflict.jobs[0].canonical["spec"]["priorityClassName"] == "urgent"
    said = [w for w in warnings(conflict) if "differs from runPolicy.schedulingPolicy.priorityClass" in w]
    assert len(said) == 2 and all("the job's priority is 'urgent'" in w for w in said)
    differ = load(two_roles("priorityClassName: batch\n", ""))
    assert "priorityClassName" not in differ.jobs[0].canonical["spec"]
    assert any("priorityClassName differs between replica types" in w for w in warnings(differ))


# ---- 2: $(VAR) references are expanded as Kubernetes expands them -----------------------------


@pytest.mark.parametrize(
    ("text", "expanded", "left"),
    [
        ("$(A)", "1", []),
        ("x$(A)y$(A)", "x1y1", []),
        ("$$(A)", "$(A)", []),
        ("$$$(A)", "$1", []),
        ("a$$b", "a$b", []),
        ("$A $", "$A $", []),
        ("$(", "$(", []),
        ("$(A", "$(A", []),
        ("$(B)", "$(B)", ["B"]),
        ("$(S) $(A)", "$(S) 1", ["S"]),
        ("$()", "$()", [""]),
    ],
)
def test_expansion_follows_the_kubelets_rules(text: str, expanded: str, left: list[str]) -> None:
    assert expand(text, {"A": "1", "S": None}) == (expanded, left)


REFERENCES = """\
args: ["--data=$(DATA)/in", "$$(KEPT)", "cost: $5", "$(TOKEN)", "$(NOWHERE)", "$(", "a$$b"]
env:
  - {name: SCRIPT, value: train.py}
  - {name: EARLY, value: "$(DATA)"}
  - {name: DATA, value: /data}
  - {name: OUT, value: "$(DATA)/out"}
  - {name: TOKEN, valueFrom: {secretKeyRef: {name: creds, key: token}}}
"""


def test_references_to_literal_env_values_are_expanded_as_kubernetes_does() -> None:
    result = load(tfjob(REFERENCES).replace("[python, t.py]", '[python, "$(SCRIPT)"]'))
    (job,) = result.jobs
    spec = job.canonical["spec"]
    assert spec["command"] == ["python", "train.py"]
    assert spec["args"] == ["--data=/data/in", "$(KEPT)", "cost: $5", "$(TOKEN)", "$(NOWHERE)", "$(", "a$b"]
    env = spec["env"]
    assert env["OUT"] == "/data/out" and env["EARLY"] == "$(DATA)", "earlier entries only"
    said = warnings(result)
    token = [w for w in said if "$(TOKEN) is left as written" in w]
    assert len(token) == 1 and "valueFrom" in token[0] and "args[3]" in token[0], said
    assert any("$(NOWHERE) is left as written" in w and "args[4]" in w for w in said), said
    assert any("$(DATA) is left as written" in w and "env[1].value" in w for w in said), said
    assert not any("$(KEPT)" in w for w in said), "an escaped reference is no reference"


def test_the_earlier_reading_keeps_references_as_written() -> None:
    import yaml

    document = yaml.safe_load(tfjob(REFERENCES).replace("[python, t.py]", '[python, "$(SCRIPT)"]'))
    earlier = translate(document, earlier=True)
    spec = earlier.native["spec"]
    assert spec["command"] == ["python", "$(SCRIPT)"] and spec["args"][1] == "$$(KEPT)"
    assert earlier.reread == [] and translate(document).reread


# ---- 4: one path mounted twice ----------------------------------------------------------------

NATIVE_TWICE = """\
apiVersion: tfdeclare/v1
kind: TFJob
metadata: {name: n}
spec:
  image: tf:1
  command: [python, t.py]
  replicas: {worker: {}}
  volumes:
    - {hostPath: /srv/a, containerPath: /data, mode: ro}
    - {hostPath: /srv/b, containerPath: /data/, mode: rw}
"""


def test_a_native_spec_mounting_one_container_path_twice_is_refused_at_the_second() -> None:
    result = load(NATIVE_TWICE)
    assert result.jobs == ()
    (error,) = errors(result)
    assert error.startswith("tf.yaml:10:") and "(at $.spec.volumes[1].containerPath)" in error, error
    assert "containerPath /data/ is mounted already by spec.volumes[0]" in error


RESOURCES = "resources: {requests: {cpu: 1, memory: 1Gi}}\n"


def mounts(read_only: bool) -> str:
    flag = ", readOnly: true" if read_only else ""
    return f"volumeMounts: [{{name: data, mountPath: /data{flag}}}]\n" + " " * 14 + RESOURCES


def test_roles_mounting_one_folder_at_one_path_share_one_mount_read_only_only_if_all_are() -> None:
    volume = "volumes: [{name: data, hostPath: {path: /srv/data}}]\n"
    ps = tfjob(pod=volume).split("  tfReplicaSpecs:\n")[1].replace("    Worker:\n", "    PS:\n", 1)
    ps = ps.replace(RESOURCES, mounts(True), 1)
    text = tfjob(pod=volume).replace(RESOURCES, mounts(False), 1) + ps
    text = text.replace("command: [python, t.py]", "image: 'tf:1'\n              workingDir: /w")
    result = load(text)
    assert not errors(result), errors(result)
    (job,) = result.jobs
    assert job.canonical["spec"]["volumes"] == [
        {"hostPath": "/srv/data", "containerPath": "/data", "mode": "rw"}
    ]
    (lost,) = [w for w in warnings(result) if "read-only by ps" in w]
    assert (
        "so ps's is read-write" in lost and "PS.template.spec.containers[0].volumeMounts[0].readOnly" in lost
    )
    both_ro = load(text.replace("mountPath: /data}", "mountPath: /data, readOnly: true}"))
    assert both_ro.jobs[0].canonical["spec"]["volumes"][0]["mode"] == "ro"
    assert not [w for w in warnings(both_ro) if "read-only by" in w]


# ---- 1: subPath, several mounts of one volume, mount fields not mapped -------------------------


def mounted(mounts: str, volume: str = "{name: data, hostPath: {path: /srv/data}}", env: str = "") -> str:
    text = tfjob(
        f"volumeMounts: {mounts}\n" + env,
        pod=f"volumes: [{volume}]\n",
    )
    return text.replace(
        "command: [python, t.py]",
        "command: [python, t.py]\n              image: 'tf:1'\n              workingDir: /w",
    )


def test_a_sub_path_mounts_only_that_folder_of_the_volume() -> None:
    result = load(mounted("[{name: data, mountPath: /in, subPath: ./team-a//in/, readOnly: true}]"))
    (job,) = result.jobs
    assert job.canonical["spec"]["volumes"] == [
        {"hostPath": "/srv/data/team-a/in", "containerPath": "/in", "mode": "ro"}
    ]
    notes = [d.format() for d in result.diagnostics if d.severity is Severity.NOTE]
    assert any("mounted as hostPath /srv/data/team-a/in" in n and "subPath" in n for n in notes), notes


@pytest.mark.parametrize("sub", ["../other", "a/../../etc", "/etc", ".."])
def test_a_sub_path_leaving_the_volume_is_refused_at_its_line(sub: str) -> None:
    result = load(mounted(f"[{{name: data, mountPath: /in, subPath: '{sub}'}}]"))
    assert result.jobs == ()
    (error,) = errors(result)
    assert "must be a relative path inside the volume" in error and "volumeMounts[0].subPath" in error, error


def test_the_policy_applies_to_the_sub_folder(tmp_path: Path) -> None:
    spec = tmp_path / "tf.yaml"
    spec.write_text(mounted("[{name: data, mountPath: /in, subPath: team-a}]"))
    (tmp_path / "tfdeclare.yaml").write_text(
        "backend: mesos\npolicy: {allowedHostPaths: [/srv/data/team-a]}\n"
    )
    assert cli("validate", "tf.yaml", cwd=tmp_path).returncode == 0
    spec.write_text(mounted("[{name: data, mountPath: /in, subPath: team-b}]"))
    refused = cli("validate", "tf.yaml", cwd=tmp_path)
    assert refused.returncode == 1 and "host path /srv/data/team-b is not allowed" in refused.stderr, (
        refused.stderr
    )


def test_one_volume_may_be_mounted_at_several_paths() -> None:
    result = load(
        mounted("[{name: data, mountPath: /in, subPath: in}, {name: data, mountPath: /out, subPath: out}]")
    )
    assert not [w for w in warnings(result) if "names no volume" in w]
    assert [v["containerPath"] for v in result.jobs[0].canonical["spec"]["volumes"]] == ["/in", "/out"]


def test_mount_fields_not_mapped_are_warned_at_their_lines() -> None:
    result = load(
        mounted(
            "[{name: data, mountPath: /in, mountPropagation: HostToContainer}]",
            volume="{name: data, hostPath: {path: /srv/data, type: Directory}}",
        )
    )
    said = warnings(result)
    assert any(
        "volumeMount field 'mountPropagation'" in w and "volumeMounts[0].mountPropagation" in w for w in said
    )
    assert any(
        "hostPath type Directory is not checked" in w and "volumes[0].hostPath.type" in w for w in said
    )


def test_a_sub_path_expression_is_expanded_or_refused() -> None:
    env = (
        "env: [{name: TEAM, value: team-a}, {name: POD, valueFrom: {fieldRef: {fieldPath: metadata.name}}}]\n"
    )
    expanded = load(mounted("[{name: data, mountPath: /in, subPathExpr: '$(TEAM)/in'}]", env=env))
    assert expanded.jobs[0].canonical["spec"]["volumes"][0]["hostPath"] == "/srv/data/team-a/in"
    refused = load(mounted("[{name: data, mountPath: /in, subPathExpr: '$(POD)'}]", env=env))
    assert refused.jobs == () and "subPathExpr '$(POD)' cannot be resolved" in errors(refused)[0]
