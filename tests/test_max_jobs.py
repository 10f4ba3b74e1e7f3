"""``policy.maxJobs``: how many jobs one state folder holds. Creates over it are refused at
their file in validate, plan and apply (the real CLI) and by the daemon's plan; jobs already
held are never refused, a lowered limit keeps them, and a prune makes room."""

from __future__ import annotations

from pathlib import Path

from tests.conftest import cli
from tests.controller_world import World, job_text
from tfdeclare.backends import registry
from tfdeclare.core.diagnostics import Code
from tfdeclare.core.plan.planner import Action, PlanOptions, plan
from tfdeclare.core.plan.problems import ProblemKind
from tfdeclare.core.plan.quotas import enforce_max_jobs
from tfdeclare.daemon.service import Daemon, DaemonOptions
from tfdeclare.daemon.sources import FolderSource

SMALL = "worker: {count: 1, resources: {cpus: 0.1, mem: 32}}"


def _spec(name: str) -> str:
    return (
        f"apiVersion: tfdeclare/v1\nkind: TFJob\nmetadata: {{name: {name}}}\n"
        f"spec:\n  command: [sleep, '60']\n  replicas:\n    {SMALL}\n"
    )


def _refusal(file: str, limit: int) -> str:
    return (
        f"{file}:3:18: error: the state folder would hold more than {limit} jobs with this one "
        "(policy.maxJobs in the config): delete jobs, or give these to another state folder "
        "(at $.metadata.name)"
    )


def test_the_default_is_the_measured_maximum_and_a_config_may_only_lower_it() -> None:
    schema = registry.config_schema()["properties"]["policy"]["properties"]["maxJobs"]
    assert schema["default"] == schema["maximum"] == 3000
    config, problems = registry.parse_config_file("c.yaml", b"policy: {maxJobs: 2}\n", None)
    assert not problems and config is not None and config.policy.max_jobs == 2
    config, problems = registry.parse_config_file("c.yaml", b"policy: {maxJobs: 3001}\n", None)
    assert config is None and "(at $.policy.maxJobs)" in problems[0].format()


def test_creates_over_the_limit_are_refused_in_every_command_and_held_jobs_never(tmp_path: Path) -> None:
    (tmp_path / "specs").mkdir()
    (tmp_path / "tfdeclare.yaml").write_text("policy: {maxJobs: 2}\n")
    for name in ("a", "b", "c"):
        (tmp_path / "specs" / f"{name}.yaml").write_text(_spec(name))
    try:
        for command in ("validate", "plan", "apply"):
            result = cli(command, "specs", cwd=tmp_path)
            assert result.returncode == 1, (command, result.stdout, result.stderr)
            assert _refusal("specs/c.yaml", 2) in result.stderr.splitlines(), (command, result.stderr)
            assert "a.yaml" not in result.stderr and "b.yaml" not in result.stderr
        assert "No jobs" in cli("status", cwd=tmp_path).stdout  # apply applied nothing
        (tmp_path / "specs" / "c.yaml").unlink()
        assert cli("apply", "specs", cwd=tmp_path).returncode == 0
        # lowered below what the folder holds: both keep running, nothing to do; a new one is refused
        (tmp_path / "tfdeclare.yaml").write_text("policy: {maxJobs: 1}\n")
        assert cli("plan", "specs", "--detailed-exitcode", cwd=tmp_path).returncode == 0
        (tmp_path / "specs" / "c.yaml").write_text(_spec("c"))
        result = cli("apply", "specs", cwd=tmp_path)
        assert result.returncode == 1 and _refusal("specs/c.yaml", 1) in result.stderr.splitlines()
        # a prune makes room: a and b go, c is created in their place
        (tmp_path / "specs" / "a.yaml").unlink()
        (tmp_path / "specs" / "b.yaml").unlink()
        result = cli("plan", "specs", "--prune", cwd=tmp_path)
        assert result.returncode == 0 and "policy.maxJobs" not in result.stderr, result.stderr
        assert "+ c" in result.stdout or "create" in result.stdout, result.stdout
    finally:
        cli("delete", "--all", cwd=tmp_path)


def test_the_plan_refuses_creates_in_name_order_after_the_jobs_held(tmp_path: Path) -> None:
    world = World(tmp_path)
    for name in ("m", "n"):
        world.write(name, job_text(name))
    world.controller.apply(plan(world.files.load(), world.store.observed(), PlanOptions()))
    for name in ("z", "a", "q"):  # created over a limit of 3: a is the third, q and z over it
        world.write(name, job_text(name))
    world.write("m", job_text("m", "worker: {count: 3, resources: {cpus: 0.5, mem: 64}}"))  # resized
    result = plan(world.files.load(), world.store.observed(), PlanOptions(max_jobs=3))
    assert [(d.code, d.path.rsplit("/", 1)[-1]) for d in result.diagnostics] == [
        (Code.QUOTA, "q.yaml"),
        (Code.QUOTA, "z.yaml"),
    ]
    actions = {job.name: job.action for job in result.jobs}
    assert actions == {"a": Action.CREATE, "m": Action.RESIZE, "n": Action.NOOP}
    # lowered under what the folder holds: the held jobs stay as they are, every create is refused
    result = plan(world.files.load(), world.store.observed(), PlanOptions(max_jobs=1))
    assert {job.name: job.action for job in result.jobs} == {"m": Action.RESIZE, "n": Action.NOOP}
    assert len(result.diagnostics) == 3


def test_a_plan_under_the_limit_is_not_touched(tmp_path: Path) -> None:
    world = World(tmp_path)
    world.write("a", job_text("a"))
    desired = world.files.load()
    assert enforce_max_jobs(desired, {}, 1, prune=False) is desired
    assert enforce_max_jobs(desired, {}, None, prune=False) is desired
    refused = enforce_max_jobs(desired, world.store.observed(), 0, prune=False)
    assert not refused.jobs and "a" in refused.protected


def test_the_daemon_creates_up_to_the_limit_and_shows_the_rest_as_policy_problems(tmp_path: Path) -> None:
    world = World(tmp_path)
    source = FolderSource(world.specs, [])
    daemon = Daemon(
        source, world.controller, world.files, world.status_dir, DaemonOptions(max_jobs=2), clock=world.clock
    )
    for name in ("c", "a", "b"):
        world.write(name, job_text(name))
    daemon._sync()
    daemon._pass()
    assert sorted(world.store.records()) == ["a", "b"]
    (problem,) = daemon.shown.problems
    assert (problem.path, problem.kind, problem.jobs) == ("specs/c.yaml", ProblemKind.POLICY, ("c",))
    assert "policy.maxJobs" in problem.message
    (world.specs / "a.yaml").unlink()  # without a prune, a is kept: c still waits
    daemon.on_file_event([str(world.specs / "a.yaml")])
    daemon._pass()
    assert sorted(world.store.records()) == ["a", "b"] and len(daemon.shown.problems) == 1
