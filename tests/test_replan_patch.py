"""A re-plan after file events (the daemon's, told which files changed) re-plans only the jobs
the patch changed (``PlanCache``, issue 23), and gives exactly the plan a full plan gives:
changed, added, removed and renamed jobs, with and without the settle rule; whatever spans
jobs (an error, a quota, a pending settle) takes the full plan."""

from __future__ import annotations

from pathlib import Path

import pytest

from tfdeclare.core.enums import Phase, Role
from tfdeclare.core.plan import planner
from tfdeclare.core.plan.observed import ObservedJob
from tfdeclare.core.plan.planner import Plan, PlanCache, PlanOptions, plan
from tfdeclare.core.run.tasks import TaskKey
from tfdeclare.core.spec.policy import Quota
from tfdeclare.shell.sources import SpecFiles


def spec(name: str, workers: int = 2, epochs: str = "10", team: str = "a") -> str:
    return (
        f"apiVersion: tfdeclare/v1\nkind: TFJob\nmetadata: {{name: {name}, labels: {{team: {team}}}}}\n"
        f"spec:\n  command: [python, train.py, --epochs, '{epochs}']\n"
        f"  replicas:\n    worker: {{count: {workers}}}\n"
    )


def same(a: Plan, b: Plan) -> None:
    assert a.jobs == b.jobs
    assert dict(a.desired) == dict(b.desired) and dict(a.sources) == dict(b.sources)
    assert dict(a.sightings) == dict(b.sightings) and a.wake_at == b.wake_at
    assert a.diagnostics == b.diagnostics


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    specs = tmp_path / "specs"
    specs.mkdir()
    for i in range(12):
        (specs / f"j{i:02d}.yaml").write_text(spec(f"j{i:02d}"))
    return specs


@pytest.mark.parametrize("settle_s", [0.0, 3.0])
def test_a_patched_re_plan_is_the_full_plan_and_plans_only_what_changed(
    folder: Path, settle_s: float, monkeypatch: pytest.MonkeyPatch
) -> None:
    files = SpecFiles([folder])
    applied = files.load()
    running = (TaskKey(Role.WORKER, 0), TaskKey(Role.WORKER, 1))
    observed = {  # everything applied and running, and one job no file holds (an orphan)
        **{
            n: ObservedJob(n, j.canonical, j.spec_hash, Phase.RUNNING, running=running)
            for n, j in applied.jobs.items()
        },
        "gone": ObservedJob("gone", applied.jobs["j00"].canonical, "x" * 64, Phase.RUNNING),
    }
    options = PlanOptions(settle_s=settle_s)
    cache = PlanCache()
    plan(applied, observed, options, cache, now=100.0)
    full_plans = []
    real = planner.enforce_quotas
    monkeypatch.setattr(planner, "enforce_quotas", lambda *a: full_plans.append(1) or real(*a))

    def step(*paths: Path, full: bool = False) -> None:
        desired = files.load({str(p) for p in paths})
        before = len(full_plans)
        made = plan(desired, observed, options, cache, now=100.0)
        same(made, plan(desired, observed, options, now=100.0))
        assert (len(full_plans) > before + 1) is full  # +1: the reference plan just above

    (folder / "j03.yaml").write_text(spec("j03", team="b"))  # an update in place
    step(folder / "j03.yaml")
    (folder / "j20.yaml").write_text(spec("j20"))  # a new job
    step(folder / "j20.yaml")
    (folder / "j20.yaml").write_text(spec("j21"))  # renamed: j20 is an orphan, j21 new
    step(folder / "j20.yaml")
    (folder / "j05.yaml").unlink()  # removed: an orphan (no --prune)
    step(folder / "j05.yaml")
    (folder / "j07.yaml").write_text(spec("j07", epochs="10"))  # touched, not changed
    step(folder / "j07.yaml")
    (folder / "j04.yaml").write_text(spec("j04", workers=3))  # a resize: held by the settle rule
    step(folder / "j04.yaml", full=settle_s > 0)
    (folder / "j06.yaml").write_text(spec("j06", epochs="12"))  # a restart: held too
    step(folder / "j06.yaml", full=settle_s > 0)
    (folder / "j08.yaml").write_text(spec("j08", team="c"))  # while something waits to settle,
    step(folder / "j08.yaml", full=settle_s > 0)  # every plan is a full one


def test_a_spec_error_takes_the_full_plan(folder: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    files = SpecFiles([folder])
    applied = files.load()
    observed = {n: ObservedJob(n, j.canonical, j.spec_hash, Phase.RUNNING) for n, j in applied.jobs.items()}
    cache = PlanCache()
    plan(applied, observed, None, cache)
    (folder / "j01.yaml").write_text(
        "apiVersion: tfdeclare/v1\nkind: TFJob\nmetadata: {name: j01}\nspec: {}\n"
    )
    desired = files.load({str(folder / "j01.yaml")})
    assert desired.patch is None and desired.diagnostics  # an error: the files are read whole
    same(plan(desired, observed, None, cache), plan(desired, observed))
    (folder / "j01.yaml").write_text(spec("j01", epochs="3"))
    desired = files.load({str(folder / "j01.yaml")})
    made = plan(desired, observed, None, cache)  # the last state had an error: a full plan
    same(made, plan(desired, observed))
    assert made.job("j01").action is planner.Action.RESTART


def test_with_quotas_every_re_plan_is_a_full_one(folder: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A quota counts every job of a label: one job's change can refuse another."""
    files = SpecFiles([folder])
    applied = files.load()
    observed = {n: ObservedJob(n, j.canonical, j.spec_hash, Phase.RUNNING) for n, j in applied.jobs.items()}
    options = PlanOptions(quotas=(Quota("team", "a", tasks=24),))
    cache = PlanCache()
    plan(applied, observed, options, cache)
    (folder / "j02.yaml").write_text(spec("j02", workers=3))  # 25 tasks of team a: refused
    desired = files.load({str(folder / "j02.yaml")})
    assert desired.patch is not None
    made = plan(desired, observed, options, cache)
    same(made, plan(desired, observed, options))
    assert made.job("j02").action is not planner.Action.RESIZE
