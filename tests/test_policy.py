"""The config's ``policy``: every rule refused at every entry point (validate, plan, apply
through the real CLI; the daemon's loop in-process, where a refused change keeps the running
version), quotas counted over what the plan would run, and the state folder's mode."""

from __future__ import annotations

import json
import stat
from pathlib import Path

import pytest

from tests.conftest import cli
from tests.controller_world import World, daemon_running, job_text
from tests.fake_backend import FakeCluster
from tfdeclare.backends import registry
from tfdeclare.core.config import Config
from tfdeclare.core.diagnostics import Code
from tfdeclare.core.enums import Reason
from tfdeclare.core.plan.planner import Action, PlanOptions, plan
from tfdeclare.core.spec.loader import load_file
from tfdeclare.core.spec.policy import PolicyConfig, Quota, policy_checks
from tfdeclare.core.spec.resources import Resources
from tfdeclare.daemon.service import DaemonOptions
from tfdeclare.daemon.sources import FolderSource
from tfdeclare.shell.sources import SpecFiles
from tfdeclare.shell.store import StateStore

POLICY = """\
backend: mesos  # accepts images and volumes; nothing here reaches a master
policy:
  allowedImages: ["registry.example.com/*"]
  allowedHostPaths: [/mnt/data]
  maxTasksPerJob: 10
  maxGpusPerJob: 4
  maxPriority: 10
  nonPreemptiblePriority: 8
  quotas: [{label: team, value: vision, gpus: 6, cpus: 100}]
"""
QUOTA_POLICY = "policy: {quotas: [{label: team, value: vision, cpus: 1.5}]}\n"


def spec(name: str, extra: str = "", worker: str = "{count: 1, resources: {cpus: 1, mem: 64}}") -> str:
    return (
        f"apiVersion: tfdeclare/v1\nkind: TFJob\nmetadata: {{name: {name}, labels: {{team: vision}}}}\n"
        f"spec:\n  command: [sleep, '60']\n{extra}  replicas:\n    worker: {worker}\n"
    )


# rule -> (spec file, the line:col and JSON path it is reported at, words of the message)
CASES = {
    "allowedImages": (
        spec("img", "  image: docker.io/evil:1\n"),
        "6:10",
        "$.spec.image",
        "policy.allowedImages",
    ),
    "allowedHostPaths": (
        spec("vol", "  volumes: [{hostPath: /mnt/data/../../etc, containerPath: /x}]\n"),
        "6:24",
        "$.spec.volumes[0].hostPath",
        "host path /etc is not allowed",
    ),
    "maxTasksPerJob": (
        spec("tasks", worker="{count: 11}"),
        "7:21",
        "$.spec.replicas.worker.count",
        "policy.maxTasksPerJob",
    ),
    "maxGpusPerJob": (
        spec("gpus", worker="{count: 5, resources: {gpus: 1}}"),
        "7:42",
        "$.spec.replicas.worker.resources.gpus",
        "the job asks for 5 GPUs; at most 4 per job (policy.maxGpusPerJob",
    ),
    "maxPriority": (
        spec("prio", "  priority: 50\n"),
        "6:13",
        "$.spec.priority",
        "priority 50 is above 10, the highest allowed (policy.maxPriority",
    ),
    "reservedFolder": (
        spec("forge", "  workingDir: STATE/jobs\n"),
        "6:15",
        "$.spec.workingDir",
        "tfdeclare's own folder",
    ),
}


@pytest.fixture
def project(tmp_path: Path) -> Path:
    (tmp_path / "specs").mkdir()
    (tmp_path / "tfdeclare.yaml").write_text(POLICY)
    (tmp_path / "specs" / "ok.yaml").write_text(spec("ok"))
    return tmp_path


@pytest.mark.parametrize("rule", sorted(CASES))
def test_each_rule_is_refused_by_validate_plan_and_apply_at_its_line(project: Path, rule: str) -> None:
    text, where, json_path, words = CASES[rule]
    text = text.replace("STATE", str(project / ".tfdeclare"))
    (project / "specs" / "bad.yaml").write_text(text)
    for command in ("validate", "plan", "apply"):
        result = cli(command, "specs", cwd=project)
        assert result.returncode == 1, (command, result.stdout, result.stderr)
        line = next(x for x in result.stderr.splitlines() if x.startswith("specs/bad.yaml"))
        assert line.startswith(f"specs/bad.yaml:{where}: error: "), (command, line)
        assert words in line and line.endswith(f"(at {json_path})"), (command, line)
    assert StateStore(project / ".tfdeclare").names() == []  # apply applied nothing, not even ok


def test_a_quota_refuses_what_would_take_the_team_over_it_in_every_command(project: Path) -> None:
    (project / "tfdeclare.yaml").write_text(QUOTA_POLICY)  # the local backend: a really runs
    (project / "specs" / "ok.yaml").unlink()
    (project / "specs" / "a.yaml").write_text(spec("a"))
    (project / "specs" / "b.yaml").write_text(spec("b"))
    for command in ("validate", "plan", "apply"):
        result = cli(command, "specs", cwd=project)
        assert result.returncode == 1, (command, result.stdout, result.stderr)
        assert (
            "specs/b.yaml:3:36: error: jobs labelled team=vision would use 2 cpus with this job; at most 1.5 "
            "(policy.quotas team=vision cpus in the config) (at $.metadata.labels.team)"
        ) in result.stderr, (command, result.stderr)
        assert "a.yaml" not in result.stderr
    (project / "specs" / "b.yaml").unlink()
    assert cli("apply", "specs", cwd=project).returncode == 0
    # once a runs, b is counted against it: refused in plan and apply alike
    (project / "specs" / "b.yaml").write_text(spec("b"))
    try:
        for command in ("plan", "apply"):
            result = cli(command, "specs", cwd=project)
            assert (
                result.returncode == 1
                and "specs/b.yaml:3:36: error: jobs labelled team=vision" in result.stderr
            )
    finally:
        assert cli("delete", "--all", cwd=project).returncode == 0


def test_a_saved_plan_is_checked_against_the_policy_when_applied(project: Path) -> None:
    (project / "specs" / "img.yaml").write_text(spec("img", "  image: registry.example.com/tf:2\n"))
    assert cli("plan", "specs", "--out", "p.json", cwd=project).returncode == 0
    assert stat.S_IMODE((project / "p.json").stat().st_mode) == 0o600
    (project / "tfdeclare.yaml").write_text(POLICY.replace("registry.example.com/*", "other/*"))
    result = cli("apply", "p.json", cwd=project)
    assert result.returncode == 1
    # the specs are read again from their files: the error is at the field, as `apply specs` gives it
    assert "specs/img.yaml:6:10: error: image 'registry.example.com/tf:2' is not allowed" in result.stderr


def test_the_state_folder_is_made_private(project: Path) -> None:
    (project / "tfdeclare.yaml").unlink()
    (project / "specs" / "ok.yaml").write_text(job_text("ok").replace("python, train.py", "'true'"))
    assert cli("apply", "specs", cwd=project).returncode == 0
    assert stat.S_IMODE((project / ".tfdeclare").stat().st_mode) == 0o700


def test_no_host_path_is_allowed_until_the_config_lists_some(tmp_path: Path) -> None:
    checks = policy_checks(PolicyConfig(), ())
    text = spec("v", "  volumes: [{hostPath: /data, containerPath: /d}]\n")
    (problem,) = load_file("v.yaml", text.encode(), checks).diagnostics
    assert "none (set policy.allowedHostPaths to allow some)" in problem.message
    allowed = policy_checks(PolicyConfig(allowed_host_paths=("/data",)), ())
    assert not load_file("v.yaml", text.encode(), allowed).diagnostics
    database = text.replace("/data,", "/database,")
    assert load_file("v.yaml", database.encode(), allowed).diagnostics  # whole components only


def test_a_mount_above_the_state_folder_is_refused_but_a_working_folder_above_it_is_not() -> None:
    checks = policy_checks(PolicyConfig(allowed_host_paths=("/",)), ("/srv/p/.tfdeclare", "/srv/p/status"))
    mount = spec("m", "  volumes: [{hostPath: /srv, containerPath: /x}]\n")
    (problem,) = load_file("m.yaml", mount.encode(), checks).diagnostics
    assert "/srv is or holds tfdeclare's own folder /srv/p/.tfdeclare" in problem.message
    assert not load_file("w.yaml", spec("w", "  workingDir: /srv\n").encode(), checks).diagnostics
    inside = spec("w", "  workingDir: /srv/p/status/x/..\n")
    assert load_file("w.yaml", inside.encode(), checks).diagnostics


def test_require_image_refuses_bare_processes() -> None:
    checks = policy_checks(PolicyConfig(require_image=True), ())
    (problem,) = load_file("x.yaml", spec("x").encode(), checks).diagnostics
    assert "policy.requireImage" in problem.message and problem.json_path == "$.spec.replicas.worker"


def test_every_rule_is_described_in_the_config_schema() -> None:
    policy = registry.config_schema()["properties"]["policy"]["properties"]
    for rule in (
        "allowedImages",
        "requireImage",
        "allowedHostPaths",
        "maxTasksPerJob",
        "maxGpusPerJob",
        "maxPriority",
        "nonPreemptiblePriority",
        "quotas",
    ):
        assert len(policy[rule]["description"]) > 40, rule
    for field in policy["quotas"]["items"]["properties"].values():
        assert field["description"]


def test_the_config_parses_the_policy() -> None:
    config, problems = registry.parse_config_file("c.yaml", POLICY.encode(), None)
    assert not problems and config is not None
    assert config.policy == PolicyConfig(
        max_tasks_per_job=10,
        allowed_images=("registry.example.com/*",),
        allowed_host_paths=("/mnt/data",),
        max_gpus_per_job=4,
        quotas=(Quota("team", "vision", gpus=6, cpus=100.0),),
        max_priority=10,
        non_preemptible_priority=8,
    )
    assert Config().policy.allowed_images is None  # no policy: any image
    bad = "policy: {quotas: [{label: team, value: v, mem: 0Gi}]}\n"
    config, problems = registry.parse_config_file("c.yaml", bad.encode(), None)
    assert config is None and "(at $.policy.quotas[0].mem)" in problems[0].format()


QUOTA = (Quota("team", "vision", gpus=4),)


def _labelled(name: str, gpus: int, team: str = "vision") -> str:
    return job_text(name, f"worker: {{count: 1, resources: {{cpus: 1, mem: 64, gpus: {gpus}}}}}").replace(
        f"metadata: {{name: {name}}}", f"metadata: {{name: {name}, labels: {{team: {team}}}}}"
    )


def test_quotas_count_what_the_plan_would_run(tmp_path: Path) -> None:
    world = World(tmp_path)
    world.write("a", _labelled("a", 3))
    world.write("other", _labelled("other", 8, team="nlp"))  # another team's: not counted
    world.controller.apply(plan(world.files.load(), world.store.observed(), PlanOptions(quotas=QUOTA)))
    world.write("b", _labelled("b", 2))
    result = plan(world.files.load(), world.store.observed(), PlanOptions(quotas=QUOTA))
    assert [d.code for d in result.diagnostics] == [Code.QUOTA]
    assert "would use 5 GPUs" in result.diagnostics[0].message
    assert {j.name: j.action for j in result.jobs}["a"] is Action.NOOP
    # a shrinks to 1 GPU in the same change: now b fits (a is admitted first, by name)
    world.write("a", _labelled("a", 1))
    result = plan(world.files.load(), world.store.observed(), PlanOptions(quotas=QUOTA))
    assert not result.diagnostics
    assert {j.name: j.action for j in result.jobs}["b"] is Action.CREATE
    # a job that breaks nothing is not refused for an over-full quota it does not add to
    lowered = (Quota("team", "vision", gpus=2),)
    world.write("b", _labelled("b", 0))
    result = plan(world.files.load(), world.store.observed(), PlanOptions(quotas=lowered))
    assert not result.diagnostics


def test_the_daemon_keeps_the_running_version_when_a_change_breaks_a_quota(tmp_path: Path) -> None:
    world = World(tmp_path, FakeCluster(Resources(16, 65536, 16)))
    world.files = SpecFiles(
        [world.specs],
        checks=policy_checks(PolicyConfig(max_gpus_per_job=8), ()),
        exclude=(tmp_path / "state", world.status_dir),
        base=tmp_path,
    )
    world.write("a", _labelled("a", 2))
    source = FolderSource(world.specs, [tmp_path / "state", world.status_dir])
    options = DaemonOptions(interval_s=3600, debounce_s=0.0, settle_s=0.0, quotas=QUOTA)
    with daemon_running(world, source, options):
        world.controller.wait_for_pass(0, lambda: len(world.tasks("a")) == 1)
        ids = {t.task_id for t in world.tasks("a").values()}
        world.write("a", _labelled("a", 6))  # over the quota: kept as applied
        passes = world.controller.passes
        world.controller.wait_for_pass(  # the record first, then its status file, in one pass
            passes,
            lambda: (
                world.record("a").not_synced is not None
                and "policy.quotas team=vision" in json.dumps(world.status("a"))
            ),
        )
        assert world.record("a").not_synced[0] is Reason.INVALID_SPEC  # type: ignore[index]
        world.write("a", _labelled("a", 9))  # over maxGpusPerJob: the same
        passes = world.controller.passes
        world.controller.wait_for_pass(passes, lambda: "maxGpusPerJob" in json.dumps(world.status("a")))
        assert {t.task_id for t in world.tasks("a").values()} == ids


def test_a_spec_file_outside_every_folder_read_gets_no_relative_working_folder() -> None:
    """The source-folder rule takes the root from the folders the specs were read from; a spec
    file none of them holds (only a hand-made claim names one, such as an edited saved plan's
    ``file``) is never its own root: every relative workingDir is refused."""
    from tfdeclare.core.spec.policy import SpecSources

    sources = SpecSources(("/srv/project/specs",), "/srv/project")
    checks = policy_checks(PolicyConfig(), (), sources=sources)
    text = spec("w", "  workingDir: etc\n").encode()
    assert not load_file("specs/w.yaml", text, checks).diagnostics  # its folder is read: fine
    (problem,) = load_file("/fake.yaml", text, checks).diagnostics
    assert problem.json_path == "$.spec.workingDir"
    assert "not a folder the specs were read from" in problem.message
    assert not load_file("/fake.yaml", spec("a", "  workingDir: /opt/x\n").encode(), checks).diagnostics
