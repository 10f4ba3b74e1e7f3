"""Every diagnostic that names a JSON path of a spec document is placed at that path's line
and column (docs/reference.md: editors jump to them), including those of the rules that span
jobs and are judged after the document was released: ``policy.quotas`` (at the label),
``policy.maxJobs`` (at the name) and a saved plan's claims (at the field's ``spec``), for
tfdeclare's own files and Kubeflow manifests alike, in the CLI and the daemon."""

from __future__ import annotations

import ast
import textwrap
from pathlib import Path

import pytest
import yaml

from tests.conftest import REPO, cli
from tests.test_daemon import CONFIG, Daemon, wait_until
from tfdeclare.core.diagnostics import Diagnostic
from tfdeclare.core.plan.claims import JobClaim, SavedPlan, desired_mismatches
from tfdeclare.core.plan.desired import DesiredState, assemble
from tfdeclare.core.plan.quotas import enforce_max_jobs, enforce_quotas
from tfdeclare.core.spec.loader import load_file
from tfdeclare.core.spec.policy import Quota


def _constant_none(node: ast.expr | None) -> bool:
    return isinstance(node, ast.Constant) and node.value is None


def test_no_diagnostic_is_built_with_a_json_path_and_no_column() -> None:
    """A ``Diagnostic(file, line, None, message, json_path, ...)`` with a JSON path but no
    column is a fixed line for a place the document knows: ``LoadedJob.at`` or the document's
    ``diagnostic`` place it instead. Walks every producer in the package."""
    found = []
    for path in sorted((REPO / "tfdeclare").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if not (isinstance(node, ast.Call) and getattr(node.func, "id", None) == "Diagnostic"):
                continue
            args: list[ast.expr | None] = [*node.args, *([None] * 5)]
            named = {k.arg: k.value for k in node.keywords}
            column = named.get("column", args[2])
            json_path = named.get("json_path", args[4])
            if _constant_none(column) and json_path is not None and not _constant_none(json_path):
                found.append(f"{path.relative_to(REPO)}:{node.lineno}")
    assert found == []


NATIVE = """\
apiVersion: tfdeclare/v1
kind: TFJob
metadata:
  name: {name}
  labels:
    team: vision
spec:
  command: [sleep, '60']
  replicas:
    worker: {{count: 2, resources: {{cpus: 2, mem: 2Gi, gpus: 2}}}}
"""

KUBEFLOW = """\
apiVersion: kubeflow.org/v1
kind: TFJob
metadata:
  name: {name}
  namespace: ml
  labels: {{owner: me, team: vision}}
spec:
  tfReplicaSpecs:
    Worker:
      replicas: 2
      template:
        spec:
          containers:
            - name: tensorflow
              image: tensorflow/tensorflow:2.15.0
              command: [python, train.py]
              resources: {{limits: {{cpu: 2, memory: 2Gi, nvidia.com/gpu: 2}}}}
"""


def _position(text: str, path: tuple[str, ...]) -> tuple[int, int]:
    """Line and column (1-based) of ``path`` in ``text``, read by PyYAML on its own: a
    scalar's value, a mapping's key."""
    node = yaml.compose(text)
    key_node = None
    for part in path:
        assert isinstance(node, yaml.MappingNode)
        key_node, node = next((k, v) for k, v in node.value if k.value == part)
    shown = node if isinstance(node, yaml.ScalarNode) else key_node
    assert shown is not None
    return shown.start_mark.line + 1, shown.start_mark.column + 1


def _desired(texts: dict[str, str]) -> DesiredState:
    results = [load_file(file, text.encode()) for file, text in sorted(texts.items())]
    assert not [d for r in results for d in r.diagnostics if d.is_error]
    return assemble(results)


def _refusal(desired: DesiredState, name: str) -> Diagnostic:
    (problem,) = desired.protected[name]
    return problem


QUOTAS = {
    "gpus": Quota("team", "vision", gpus=3),
    "cpus": Quota("team", "vision", cpus=5),
    "mem": Quota("team", "vision", mem_mib=5000),
    "tasks": Quota("team", "vision", tasks=3),
}


@pytest.mark.parametrize("form", ["native", "kubeflow"])
@pytest.mark.parametrize("limit", sorted(QUOTAS))
def test_a_quota_refusal_is_at_the_label(form: str, limit: str) -> None:
    template = NATIVE if form == "native" else KUBEFLOW
    texts = {f"specs/{n}.yaml": template.format(name=n) for n in ("a", "b")}
    desired = enforce_quotas(_desired(texts), {}, (QUOTAS[limit],), prune=False)
    problem = _refusal(desired, "b")
    assert (
        problem.json_path == "$.metadata.labels.team"
        and f"team=vision {limit} in the config" in problem.message
    )
    assert (problem.path, problem.line, problem.column) == (
        "specs/b.yaml",
        *_position(texts["specs/b.yaml"], ("metadata", "labels", "team")),
    )
    assert problem.line == 6


@pytest.mark.parametrize("form", ["native", "kubeflow"])
def test_a_max_jobs_refusal_is_at_the_name(form: str) -> None:
    template = NATIVE if form == "native" else KUBEFLOW
    texts = {f"specs/{n}.yaml": template.format(name=n) for n in ("a", "b")}
    desired = enforce_max_jobs(_desired(texts), {}, 1, prune=False)
    problem = _refusal(desired, "b")
    assert problem.json_path == "$.metadata.name"
    assert (problem.line, problem.column) == _position(texts["specs/b.yaml"], ("metadata", "name")) == (4, 9)


@pytest.mark.parametrize("form", ["native", "kubeflow"])
def test_a_saved_plans_claims_are_at_the_job(form: str) -> None:
    template = NATIVE if form == "native" else KUBEFLOW
    texts = {"specs/a.yaml": template.format(name="a")}
    desired = _desired(texts)
    job = desired.jobs["a"]
    changed = {**job.canonical, "spec": {**job.canonical["spec"], "backoffLimit": 99}}
    saved = SavedPlan(
        "local", "state", ("specs",), False, False, "", {"a": JobClaim(changed, "specs/a.yaml", 2)},
        (), (), (), tuple(desired.files), (),
    )  # fmt: skip
    problems = desired_mismatches(saved, desired, "plan.json")
    at_spec = _position(texts["specs/a.yaml"], ("spec",))
    at_name = _position(texts["specs/a.yaml"], ("metadata", "name"))
    assert [(p.json_path, p.line, p.column) for p in problems] == [
        (None, *at_name),  # the plan says another line
        ("$.spec.backoffLimit", *at_spec),  # a field the file leaves out: at its spec
    ]


def test_the_cli_and_the_daemon_show_a_quota_refusal_at_the_label(tmp_path: Path) -> None:
    (tmp_path / "specs").mkdir()
    (tmp_path / "tfdeclare.yaml").write_text(
        CONFIG + "policy: {quotas: [{label: team, value: vision, cpus: 3}]}\n"
    )
    for name in ("a", "b"):
        (tmp_path / "specs" / f"{name}.yaml").write_text(
            NATIVE.format(name=name)
            .replace(", gpus: 2", "")
            .replace("cpus: 2", "cpus: 0.8")
            .replace("2Gi", "64")
        )
    where = "specs/b.yaml:6:11: error: jobs labelled team=vision would use 3.2 cpus"
    for command in ("validate", "plan"):
        result = cli(command, "specs", cwd=tmp_path)
        assert result.returncode == 1 and where in result.stderr, (command, result.stderr)
    daemon = Daemon(tmp_path, "--specs", "specs", "--interval", "5")
    try:
        wait_until(lambda: daemon.get("/healthz")[0] == 200 and daemon.get("/healthz")[1]["problems"])
        (problem,) = daemon.get("/healthz")[1]["problems"]
        assert problem["message"].startswith(where), problem
        assert (problem["diagnostics"][0]["line"], problem["diagnostics"][0]["column"]) == (6, 11)
    finally:
        assert daemon.stop() == 0
        assert cli("delete", "--all", cwd=tmp_path).returncode == 0


def test_the_places_kept_are_few() -> None:
    """What a job keeps of its document's positions: its name, spec and labels (a state of
    10,000 jobs holds them all)."""
    job = load_file("a.yaml", textwrap.dedent(NATIVE.format(name="a")).encode()).jobs[0]
    assert set(job.places) == {("metadata", "name"), ("spec",), ("metadata", "labels", "team")}
