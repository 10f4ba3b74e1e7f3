"""Named priority classes (``policy.priorityClasses``, ``spec.priorityClassName``): the
class's value becomes the job's ``spec.priority`` when its spec is read (a table over the
loader with the config's checks), an unknown class or a class beside ``spec.priority`` is
refused at its line by validate, plan and apply (the real CLI) and the daemon (which keeps the
running version), a change of a class's value is
planned as an in-place update, and a class marked ``preemptible: false`` is never preempted
while a job of the same value in a preemptible class is (the real controller, fake backend)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.conftest import cli
from tests.controller_world import World, daemon_running, job_text
from tests.fake_backend import FakeCluster
from tfdeclare.backends import registry
from tfdeclare.core.enums import Phase, Reason
from tfdeclare.core.spec.loader import load_file
from tfdeclare.core.spec.policy import PolicyConfig, PriorityClass, policy_checks
from tfdeclare.core.spec.resources import Resources
from tfdeclare.daemon.service import DaemonOptions
from tfdeclare.daemon.sources import FolderSource
from tfdeclare.shell.convert import convert_text
from tfdeclare.shell.sources import SpecFiles
from tfdeclare.shell.store import StateStore

CLASSES = (PriorityClass("production", 100, preemptible=False), PriorityClass("research", 0))
POLICY = PolicyConfig(priority_classes=CLASSES, max_priority=10)


def spec(extra: str = "") -> str:
    return job_text("j", extra=extra)


def load(text: str, policy: PolicyConfig | None = POLICY) -> tuple[dict[str, object] | None, str, list[str]]:
    """(the job's canonical spec or None, its hash, each diagnostic as file:line:col: message)."""
    checks = policy_checks(policy, ()) if policy is not None else ()
    result = load_file("j.yaml", text.encode(), checks)
    shown = [d.format() for d in result.diagnostics]
    if not result.jobs:
        return None, "", shown
    job = result.jobs[0]
    return dict(job.canonical["spec"]), job.spec_hash, shown


# spec lines -> (spec.priority as admitted (None: absent), spec.priorityClassName kept)
ADMITTED = {
    "a class's value is the priority": ("priorityClassName: production", 100, "production"),
    "above maxPriority: the config set both": ("priorityClassName: production", 100, "production"),
    "a class of value 0 writes none": ("priorityClassName: research", None, "research"),
    "no class: as before": ("priority: 7", 7, None),
}


@pytest.mark.parametrize("case", sorted(ADMITTED))
def test_a_class_is_admitted_as_the_jobs_priority(case: str) -> None:
    extra, priority, name = ADMITTED[case]
    canonical, _, problems = load(spec(extra))
    assert canonical is not None and problems == []
    assert canonical.get("priority") == priority
    assert canonical.get("priorityClassName") == name
    loaded, _, _ = load(spec(extra))
    assert loaded is not None and loaded.get("priority") == priority  # the typed spec reads it too


# spec lines -> (line:col, words of the message), each at $.spec.priorityClassName
REFUSED = {
    "unknown class": (
        "priorityClassName: nightly",
        "7:22",
        "priority class 'nightly' is not defined; defined: production, research (policy.priorityClasses",
    ),
    "both set": (
        "priority: 3\npriorityClassName: research",
        "8:22",
        "spec.priorityClassName and spec.priority are both set",
    ),
    "a written 0 counts as set": ("priority: 0\npriorityClassName: research", "8:22", "both set"),
    "not a name": ("priorityClassName: Prod_1", "7:22", "lowercase letters"),
}


@pytest.mark.parametrize("case", sorted(REFUSED))
def test_what_is_refused_at_the_class_name(case: str) -> None:
    extra, where, words = REFUSED[case]
    canonical, _, problems = load(spec(extra))
    assert canonical is None and len(problems) == 1, problems
    assert problems[0].startswith(f"j.yaml:{where}: error: "), problems[0]
    assert words in problems[0] and problems[0].endswith("(at $.spec.priorityClassName)")


def test_no_class_configured_refuses_every_name() -> None:
    _, _, problems = load(spec("priorityClassName: production"), PolicyConfig())
    assert "defined: none (policy.priorityClasses" in problems[0]


def test_without_the_field_nothing_changes_not_even_the_hash() -> None:
    text = spec("priority: 7")
    with_classes = load(text)
    without = load(text, None)
    assert with_classes == without
    assert load(spec())[1] == load(spec(), None)[1]
    # a class and the same written priority are different specs (the class is kept)
    assert load(spec("priorityClassName: production"))[1] != load(spec("priority: 100"), PolicyConfig())[1]


def test_the_config_parses_the_classes_and_refuses_a_bad_one() -> None:
    text = "policy:\n  priorityClasses:\n    production: {value: 100, preemptible: false}\n    research: {value: 0}\n"
    config, problems = registry.parse_config_file("c.yaml", text.encode(), None)
    assert not problems and config is not None
    assert config.policy.priority_classes == CLASSES
    assert config.policy.protected_classes == frozenset({"production"})
    for bad, path in (
        ("{research: {}}", "$.policy.priorityClasses.research"),
        ("{research: {value: 1, preempt: false}}", "$.policy.priorityClasses.research"),
        ("{Research: {value: 1}}", "$.policy.priorityClasses"),
    ):
        config, problems = registry.parse_config_file(
            "c.yaml", f"policy: {{priorityClasses: {bad}}}\n".encode(), None
        )
        assert config is None and path in problems[0].format(), (bad, [p.format() for p in problems])


def test_explain_describes_the_field_and_the_classes(tmp_path: Path) -> None:
    result = cli("explain", "spec.priorityClassName", cwd=tmp_path)
    assert result.returncode == 0 and "policy.priorityClasses" in result.stdout, result.stdout
    result = cli(
        "explain", "--schema", "config", "policy.priorityClasses.production.preemptible", cwd=tmp_path
    )
    assert result.returncode == 0 and "never preempted" in result.stdout, (result.stdout, result.stderr)


# -- the controller: queue order and who may be preempted --------------------------------------


def job(name: str, cpus: float, extra: str) -> str:
    return job_text(
        name,
        f"worker: {{count: 1, resources: {{cpus: {cpus}, mem: 64}}}}",
        extra=f"{extra}\nterminationGracePeriodSeconds: 5",
    )


def world(tmp_path: Path, classes: tuple[PriorityClass, ...]) -> World:
    w = World(tmp_path, FakeCluster(capacity=Resources(4, 4096, 0)))
    policy = PolicyConfig(priority_classes=classes)
    w.files = SpecFiles([w.specs], checks=policy_checks(policy, ()), exclude=(w.root / "state",), base=w.root)
    w.controller.protected_classes = policy.protected_classes
    return w


def test_a_class_not_preemptible_is_never_preempted_a_preemptible_one_of_its_value_is(tmp_path: Path) -> None:
    classes = (
        PriorityClass("production", 5, preemptible=False),
        PriorityClass("batch", 5),
        PriorityClass("urgent", 10),
    )
    w = world(tmp_path, classes)
    w.write("serving", job("serving", 2, "priorityClassName: production"))
    w.write("sweep", job("sweep", 2, "priorityClassName: batch"))
    w.apply()
    w.settle()
    assert w.record("serving").phase is Phase.RUNNING and w.record("sweep").phase is Phase.RUNNING
    w.clock.advance(10)

    w.write("hot", job("hot", 2, "priorityClassName: urgent"))
    w.apply()
    w.settle()
    assert w.record("serving").phase is Phase.RUNNING, "its class is not preemptible"
    sweep = w.record("sweep")
    assert sweep.phase is Phase.SUSPENDED and sweep.reason is Reason.PREEMPTED
    assert sweep.suspension is not None and sweep.suspension.by == "hot"
    assert "priority 10 > 5" in sweep.message
    w.clock.advance(6)
    w.settle()
    assert w.record("hot").phase is Phase.RUNNING

    # a job that needs the production job's room waits, however high its class
    w.write("hotter", job("hotter", 4, "priorityClassName: urgent"))
    w.apply()
    w.settle()
    assert w.record("serving").phase is Phase.RUNNING and w.record("hotter").phase is Phase.PENDING


def test_the_queue_orders_by_the_class_value(tmp_path: Path) -> None:
    w = world(tmp_path, (PriorityClass("low", -1), PriorityClass("high", 3)))
    w.write("a-low", job("a-low", 3, "priorityClassName: low"))
    w.write("b-high", job("b-high", 3, "priorityClassName: high"))  # after a-low by name
    w.apply()
    w.settle()
    assert w.record("b-high").phase is Phase.RUNNING
    assert w.record("a-low").phase is Phase.PENDING


# -- the command line --------------------------------------------------------------------------

CONFIG = "policy:\n  priorityClasses:\n    research: {value: 0}\n    production: {value: VALUE, preemptible: false}\n"
QUICK = "apiVersion: tfdeclare/v1\nkind: TFJob\nmetadata: {name: NAME}\nspec:\n  priorityClassName: CLASS\n  command: [python, -c, pass]\n  replicas: {worker: {count: 1, resources: {cpus: 0.1, mem: 64}}}\n"


def test_the_cli_refuses_an_unknown_class_and_plans_a_new_value_in_place(tmp_path: Path) -> None:
    (tmp_path / "specs").mkdir()
    (tmp_path / "tfdeclare.yaml").write_text(CONFIG.replace("VALUE", "100"))
    (tmp_path / "specs" / "bad.yaml").write_text(QUICK.replace("NAME", "bad").replace("CLASS", "nightly"))
    for command in ("validate", "plan", "apply"):
        result = cli(command, "specs", cwd=tmp_path)
        assert result.returncode == 1, (command, result.stdout, result.stderr)
        line = next(x for x in result.stderr.splitlines() if x.startswith("specs/bad.yaml"))
        assert line.startswith("specs/bad.yaml:5:22: error: priority class 'nightly' is not defined"), line
        assert line.endswith("(at $.spec.priorityClassName)"), line
    assert not StateStore(tmp_path / ".tfdeclare").exists(), "no record kept"

    (tmp_path / "specs" / "bad.yaml").unlink()
    (tmp_path / "specs" / "ok.yaml").write_text(QUICK.replace("NAME", "ok").replace("CLASS", "production"))
    result = cli("apply", "specs", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert cli("plan", "specs", "--detailed-exitcode", cwd=tmp_path).returncode == 0  # nothing to do

    (tmp_path / "tfdeclare.yaml").write_text(CONFIG.replace("VALUE", "200"))
    result = cli("plan", "specs", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert "~ ok will be updated in place" in result.stdout
    assert "spec.priority: 100 → 200" in result.stdout, result.stdout


def test_the_daemon_keeps_the_running_version_when_the_class_is_unknown(tmp_path: Path) -> None:
    w = world(tmp_path, CLASSES)
    w.write("a", job("a", 1, "priorityClassName: production"))
    source = FolderSource(w.specs, [tmp_path / "state", w.status_dir])
    options = DaemonOptions(interval_s=3600, debounce_s=0.0, settle_s=0.0)
    with daemon_running(w, source, options):
        w.controller.wait_for_pass(0, lambda: len(w.tasks("a")) == 1)
        ids = {t.task_id for t in w.tasks("a").values()}
        assert w.record("a").canonical["spec"]["priority"] == 100
        w.write("a", job("a", 1, "priorityClassName: nightly"))
        passes = w.controller.passes
        w.controller.wait_for_pass(
            passes,
            lambda: (
                w.record("a").not_synced is not None
                and "priority class 'nightly' is not defined" in json.dumps(w.status("a"))
            ),
        )
        assert w.record("a").not_synced[0] is Reason.INVALID_SPEC  # type: ignore[index]
        assert "a.yaml:7:22" in json.dumps(w.status("a")), w.status("a")
        assert {t.task_id for t in w.tasks("a").values()} == ids, "kept running as applied"


KUBEFLOW = """\
apiVersion: kubeflow.org/v1
kind: TFJob
metadata: {name: kf}
spec:
  runPolicy:
    schedulingPolicy: {priorityClass: CLASS}
  tfReplicaSpecs:
    Worker:
      replicas: 1
      template:
        spec:
          containers:
            - {name: tensorflow, image: tf:2, command: [python, train.py]}
"""


def test_a_kubeflow_tfjobs_priority_class_is_the_class_name() -> None:
    result = load_file("kf.yaml", KUBEFLOW.replace("CLASS", "production").encode(), policy_checks(POLICY, ()))
    assert not any(d.is_error for d in result.diagnostics), [d.format() for d in result.diagnostics]
    assert not any("schedulingPolicy" in d.message for d in result.diagnostics), "nothing to warn of"
    spec = result.jobs[0].canonical["spec"]
    assert (spec["priorityClassName"], spec["priority"]) == ("production", 100)
    result = load_file("kf.yaml", KUBEFLOW.replace("CLASS", "nightly").encode(), policy_checks(POLICY, ()))
    shown = [d.format() for d in result.diagnostics if d.is_error]
    assert len(shown) == 1 and shown[0].startswith("kf.yaml:6:39: error: priority class 'nightly'"), shown
    converted = convert_text(KUBEFLOW.replace("CLASS", "production")).text
    assert "priorityClassName: production" in converted, converted
