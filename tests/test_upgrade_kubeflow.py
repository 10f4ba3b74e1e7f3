"""An upgrade that reads a Kubeflow manifest otherwise changes no running job's plan.

``tests/golden/reread/`` holds a job record written by the version before the Kubeflow
reading of pod grace and priority class, ``$(VAR)`` references and volume mounts changed (its
loader, its record of a created job, ``sourceDir`` as ``@SPECS@``), the manifest it was applied
from, and its tasks' config hashes. Today's code plans that unchanged manifest against that
record as no change, saying what now reads differently at the manifest's lines; once the file
changes, the new reading is what is applied.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from tfdeclare.core.enums import Phase
from tfdeclare.core.plan.desired import assemble
from tfdeclare.core.plan.observed import ObservedJob
from tfdeclare.core.plan.planner import Action, PlanOptions, PlanReason, plan
from tfdeclare.core.plan.render import render_text
from tfdeclare.core.run.clusterspec import symbolic_addresses, task_configs
from tfdeclare.core.spec.loader import load_file
from tfdeclare.core.spec.model import fingerprint
from tfdeclare.shell.sources import SpecFiles
from tfdeclare.shell.store import StateStore

FIXTURE = Path(__file__).parent / "golden" / "reread"


def _adopt(tmp_path: Path) -> tuple[Path, StateStore]:
    specs = tmp_path / "specs"
    shutil.copytree(FIXTURE / "specs", specs)
    jobs = tmp_path / "state" / "jobs"
    jobs.mkdir(parents=True)
    for record in (FIXTURE / "jobs").glob("*.json"):
        (jobs / record.name).write_text(record.read_text().replace("@SPECS@", str(specs)))
    return specs, StateStore(tmp_path / "state")


def test_an_unchanged_manifest_read_differently_plans_no_change(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _, store = _adopt(tmp_path)
    monkeypatch.chdir(tmp_path)
    desired = SpecFiles([Path("specs")]).load()
    observed = store.observed()
    job = desired.jobs["kf-reread"]
    assert job.spec_hash != observed["kf-reread"].spec_hash, "today's reading differs: not a shortcut"
    assert job.earlier_hash == observed["kf-reread"].spec_hash
    result = plan(desired, observed, PlanOptions(prune=True))
    planned = result.job("kf-reread")
    assert (planned.action, planned.reasons) == (Action.NOOP, (PlanReason.READ_DIFFERENTLY,))
    assert not result.has_changes
    assert "takes effect when the file next changes" in planned.message
    lines = {d.line for d in planned.diagnostics}
    # grace and class (16, 17, 35, 36), $(VAR) in command, args, env (20, 21, 25, 39, 40, 44),
    # the read-only mount of /data that is merged with the read-write one (28)
    assert {16, 17, 20, 21, 25, 28, 35, 36, 39, 40, 44} <= lines, [d.format() for d in planned.diagnostics]
    assert all(d.path.endswith("kubeflow.yaml") for d in planned.diagnostics)
    text = render_text(result)
    assert "kf-reread" in text and "reads its unchanged Kubeflow manifest differently" in text


def test_once_the_manifest_changes_the_new_reading_is_applied(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    specs, store = _adopt(tmp_path)
    monkeypatch.chdir(tmp_path)
    manifest = specs / "kubeflow.yaml"
    manifest.write_text(
        manifest.read_text().replace("  name: kf-reread\n", "  name: kf-reread\n  labels: {a: b}\n")
    )
    desired = SpecFiles([Path("specs")]).load()
    planned = plan(desired, store.observed(), PlanOptions()).job("kf-reread")
    assert planned.action is not Action.NOOP and planned.action.changes_something
    changed = {c.dotted for c in planned.changes}
    assert {
        "metadata.labels.a",
        "spec.terminationGracePeriodSeconds",
        "spec.priorityClassName",
        "spec.command[1]",
        "spec.env.OUT",
    } <= changed


def test_the_tasks_keep_their_identity(tmp_path: Path) -> None:
    _, store = _adopt(tmp_path)
    expected = json.loads((FIXTURE / "config_hashes.json").read_text())
    for name, record in store.records().items():
        configs = task_configs(record.spec, symbolic_addresses(record.spec), 0)
        assert {k.name: c.config_hash for k, c in configs.items()} == expected[name], name


SUB_PATH = """\
apiVersion: kubeflow.org/v1
kind: TFJob
metadata: {name: narrow}
spec:
  tfReplicaSpecs:
    Worker:
      template:
        spec:
          volumes: [{name: data, hostPath: {path: /srv/data}}]
          containers:
            - name: tensorflow
              image: tf:1
              workingDir: /w
              command: [python, t.py]
              resources: {requests: {cpu: 1, memory: 1Gi}}
              volumeMounts: [{name: data, mountPath: /in, subPath: team-a, readOnly: true}]
"""


def test_a_sub_path_earlier_versions_ignored_restarts_the_job_to_narrow_its_mount() -> None:
    """The security exception (docs/migrating.md, "Upgrades"): earlier versions mounted the
    whole volume for a subPath mount, showing the task folders the manifest keeps from it; the
    plan restarts the job, the change and the note at the subPath line say why."""
    loaded = load_file("tf.yaml", SUB_PATH.encode())
    desired = assemble([loaded])
    job = desired.jobs["narrow"]
    assert job.earlier_hash is None, "the earlier reading narrows it too: no job keeps the whole volume"
    old = json.loads(json.dumps(job.canonical))
    old["spec"]["volumes"][0]["hostPath"] = "/srv/data"  # what earlier versions applied
    observed = ObservedJob(
        "narrow", old, fingerprint(old), Phase.RUNNING, job.source, running=job.spec.task_keys()
    )
    planned = plan(desired, {"narrow": observed}, PlanOptions()).job("narrow")
    assert planned.action is Action.RESTART
    (change,) = planned.changes
    assert (change.dotted, change.old, change.new) == (
        "spec.volumes[0].hostPath",
        "/srv/data",
        "/srv/data/team-a",
    )
    (note,) = [d for d in loaded.diagnostics if "mounted as hostPath" in d.message]
    assert note.line == 16 and "a job one of them applied restarts to narrow it" in note.message
