"""The plan says whom applying it preempts, and the controller's pass after the apply does
exactly that (docs/reference.md#job-semantics): scenarios with the real controller
and the fake backend in virtual time, each planned with the backend's room as data, applied,
and the victims the pass marked compared with the plan's; and the same end to end with the
CLI, the local backend and real task processes."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.conftest import cli
from tests.controller_world import World, job_text
from tests.fake_backend import FakeCluster
from tests.test_e2e_local import status_of, wait_until
from tests.test_suspend_local import config, job, outputs, project, refreshed  # noqa: F401 (fixture)
from tfdeclare.core.enums import Phase, Reason
from tfdeclare.core.plan.planner import Action, Plan, PlanOptions, PlanReason, plan
from tfdeclare.core.plan.preempting import Room
from tfdeclare.core.spec.resources import Resources

CAPACITY = Resources(4, 4096, 0)


def spec(name: str, cpus: float, *, priority: int = 0, count: int = 1, extra: str = "") -> str:
    return job_text(
        name,
        f"worker: {{count: {count}, resources: {{cpus: {cpus}, mem: 64}}}}",
        extra=f"priority: {priority}\nterminationGracePeriodSeconds: 7\n{extra}",
    )


def _run(w: World, *specs: tuple[str, str]) -> None:
    for name, text in specs:
        w.write(name, text)
    w.apply()
    w.settle()


def _planned(w: World, non_preemptible: int | None = None) -> Plan:
    room = Room(CAPACITY, non_preemptible)
    return plan(w.files.load(), w.store.observed(), PlanOptions(room=room), now=w.clock())


def _preempted(w: World) -> dict[str, str | None]:
    """Each job the controller preempted since the apply, and by whom."""
    out = {}
    for name in w.store.names():
        record = w.record(name)
        for hold in (*record.suspension_history, *([record.suspension] if record.suspension else [])):
            if hold.reason is Reason.PREEMPTED:
                out[name] = hold.by
    return out


def _create_over_a_running_job(w: World) -> None:
    _run(w, ("low", spec("low", 3)))
    w.write("high", spec("high", 2, priority=10))


def _raise_a_waiting_jobs_priority(w: World) -> None:
    _run(w, ("low", spec("low", 3)), ("waits", spec("waits", 2)))
    assert w.record("waits").phase is Phase.PENDING
    w.write("waits", spec("waits", 2, priority=5))


def _resume_a_suspended_job(w: World) -> None:
    _run(w, ("low", spec("low", 3)), ("paused", spec("paused", 2, priority=3, extra="suspend: true")))
    w.write("paused", spec("paused", 2, priority=3))


def _least_work_is_chosen(w: World) -> None:
    _run(w, ("old", spec("old", 2)))
    w.clock.advance(500)
    _run(w, ("young", spec("young", 2, count=1)))
    w.clock.advance(10)
    w.write("high", spec("high", 2, priority=10))


def _two_wants_one_pass(w: World) -> None:
    _run(w, ("a", spec("a", 2)), ("b", spec("b", 2)))
    w.write("first", spec("first", 2, priority=9))
    w.write("second", spec("second", 2, priority=8))


def _protected_by_policy(w: World) -> None:
    _run(w, ("guarded", spec("guarded", 3, priority=2)))
    w.write("high", spec("high", 2, priority=10))


def _never_fits(w: World) -> None:
    _run(w, ("low", spec("low", 3)))
    w.write("huge", spec("huge", 8, priority=10))


def _fits(w: World) -> None:
    _run(w, ("low", spec("low", 2)))
    w.write("high", spec("high", 2, priority=10))


SCENARIOS: dict[str, tuple[Callable[[World], None], dict[str, str]]] = {
    "create-over-a-running-job": (_create_over_a_running_job, {"low": "high"}),
    "raise-a-waiting-jobs-priority": (_raise_a_waiting_jobs_priority, {"low": "waits"}),
    "resume-a-suspended-job": (_resume_a_suspended_job, {"low": "paused"}),
    "least-work-is-chosen": (_least_work_is_chosen, {"young": "high"}),
    "two-wants-one-pass": (_two_wants_one_pass, {"a": "first", "b": "second"}),
    "protected-by-policy": (_protected_by_policy, {}),
    "never-fits": (_never_fits, {}),
    "fits": (_fits, {}),
}


@pytest.mark.parametrize("scenario", sorted(SCENARIOS))
def test_the_plan_names_the_victims_the_apply_preempts(tmp_path: Path, scenario: str) -> None:
    w = World(tmp_path, FakeCluster(capacity=CAPACITY))
    w.controller.non_preemptible = 2  # policy.nonPreemptiblePriority
    setup, expected = SCENARIOS[scenario]
    setup(w)
    made = _planned(w, non_preemptible=2)
    said = {j.name: j.preempted_by for j in made.jobs if j.preempted_by is not None}
    assert {name: p.by for name, p in said.items()} == expected
    for name, p in said.items():  # both lines say it, with a reason of the closed vocabulary
        victim, taker = made.job(name), made.job(p.by)
        assert PlanReason.PREEMPTED in victim.reasons and PlanReason.PREEMPTS in taker.reasons
        assert p in taker.preempts and p.tasks == w.store.observed()[name].running
        assert p.grace_s == 7 and p.why.startswith(f"priority {p.by_priority} > ")
    before = {name: sorted(w.tasks(name)) for name in expected}
    w.controller.apply(made)
    w.settle(6)
    assert _preempted(w) == expected, "the apply did what the plan said"
    for name, p in said.items():
        assert [k.name for k in p.tasks] == before[name]


def test_without_room_the_plan_says_nothing_of_preemption(tmp_path: Path) -> None:
    """On a backend whose room the plan cannot know (Mesos: offers) it foretells nothing."""
    w = World(tmp_path, FakeCluster(capacity=CAPACITY))
    _create_over_a_running_job(w)
    made = plan(w.files.load(), w.store.observed(), PlanOptions(), now=w.clock())
    assert all(not j.preempts and j.preempted_by is None for j in made.jobs)
    assert made.job("low").action is Action.NOOP


def test_plan_shows_the_preemption_that_apply_then_does_on_the_local_backend(
    project: Path,  # noqa: F811 (the fixture)
) -> None:
    """The reviewer's case: `local.cpus: 1`, low (priority 0, 1 cpu) running, high (priority
    10, 1 cpu) added: plan, plan -o json and plan -o markdown name the preemption, and apply
    preempts exactly that."""
    (project / "tfdeclare.yaml").write_text(config(1))
    for name in ("low", "high"):
        (project / "specs" / "out" / name).mkdir()
    (project / "specs" / "low.yaml").write_text(job("low", 1, "term", cpus=1))
    assert cli("apply", "specs", cwd=project).returncode == 0
    wait_until(lambda: refreshed(project, "low")["phase"] == "Running" and len(outputs(project, "low")) == 1)
    (project / "specs" / "high.yaml").write_text(job("high", 1, "until=go", cpus=1, extra="  priority: 10\n"))

    text = cli("plan", "specs", cwd=project)
    assert text.returncode == 0, text.stdout + text.stderr
    assert "preempts: low (priority 10 > 0): stops worker-0 after a 5 s grace" in text.stdout, text.stdout
    assert "= low is unchanged, but preempted" in text.stdout
    assert "preempted: by high (priority 10 > 0): stops worker-0 after a 5 s grace" in text.stdout
    assert "(1 preempted)" in text.stdout and "unchanged)" not in text.stdout
    data = json.loads(cli("plan", "specs", "-o", "json", cwd=project).stdout)
    jobs = {j["name"]: j for j in data["jobs"]}
    assert jobs["low"]["reasons"] == ["Unchanged", "Preempted"]
    assert jobs["low"]["preemptedBy"]["job"] == "high" and jobs["low"]["preemptedBy"]["tasks"] == ["worker-0"]
    assert [p["job"] for p in jobs["high"]["preempts"]] == ["low"] and "Preempts" in jobs["high"]["reasons"]
    markdown = cli("plan", "specs", "-o", "markdown", cwd=project).stdout
    assert "preempted: by high (priority 10 \\> 0)" in markdown, markdown

    applied = cli("apply", "specs", cwd=project)
    assert applied.returncode == 0, applied.stdout + applied.stderr
    low = status_of(project, "low")
    assert low["phase"] == "Suspended" and low["suspension"]["preemptedBy"] == "high"  # type: ignore[index]
    (project / "specs" / "out" / "high" / "go").touch()
