"""Never prune on a partial view: read errors in the listing are reported (and stop pruning),
a file without a job protects the jobs last applied from it, and the settle rule holds back
what the files say until they have said it for a while (the clock is passed in)."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import ORDINARY_USER, cli, job_yaml
from tfdeclare.core.diagnostics import Code, Diagnostic
from tfdeclare.core.enums import Phase, Reason
from tfdeclare.core.plan.desired import DesiredState, assemble
from tfdeclare.core.plan.observed import ObservedJob
from tfdeclare.core.plan.planner import Action, Plan, PlanOptions, Sighting, plan
from tfdeclare.core.plan.planner import Reason as PlanReason
from tfdeclare.core.run.record import ConditionType, JobRecord
from tfdeclare.core.run.status import conditions
from tfdeclare.core.spec.loader import load_file


def as_ordinary_user(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    """``tfdeclare ARGS`` as a user whom a folder's mode can lock out."""
    return subprocess.run(
        [*ORDINARY_USER, sys.executable, "-m", "tfdeclare", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


@pytest.fixture
def locked_folder(workdir: Path) -> Iterator[Path]:
    """``specs/team-a`` with a job in it, its mode 000 for the test's duration."""
    folder = workdir / "specs" / "team-a"
    folder.mkdir()
    (folder / "a.yaml").write_text(job_yaml("a"))
    folder.chmod(0)
    yield folder
    folder.chmod(0o755)


def test_validate_reports_an_unreadable_folder_as_an_error(workdir: Path, locked_folder: Path) -> None:
    (workdir / "specs" / "b.yaml").write_text(job_yaml("b"))
    result = as_ordinary_user("validate", "specs", cwd=workdir)
    assert result.returncode == 1, result.stdout + result.stderr
    assert "specs/team-a: error: cannot list this folder: Permission denied" in result.stderr
    assert "1 error(s) in 1 file(s)" in result.stdout
    assert "Traceback" not in result.stderr


def test_validate_reports_an_unreadable_file_as_an_error_on_line_1(workdir: Path) -> None:
    path = workdir / "specs" / "a.yaml"
    path.write_text(job_yaml("a"))
    path.chmod(0)
    try:
        result = as_ordinary_user("validate", "specs", cwd=workdir)
    finally:
        path.chmod(0o644)
    assert result.returncode == 1
    assert "specs/a.yaml:1: error: cannot read: Permission denied" in result.stderr


def test_validate_warns_about_a_file_without_a_job(workdir: Path) -> None:
    (workdir / "specs" / "a.yaml").write_text(job_yaml("a"))
    (workdir / "specs" / "empty.yaml").write_text("")
    (workdir / "specs" / "comments.yaml").write_text("# nothing yet\n---\n")
    result = cli("validate", "specs", cwd=workdir)
    assert result.returncode == 0, result.stderr
    for name in ("empty", "comments"):
        assert f"specs/{name}.yaml:1: warning: holds no job document" in result.stderr
    assert "1 job(s) in 3 file(s): valid" in result.stdout


def test_plan_prunes_nothing_while_a_folder_cannot_be_read(workdir: Path) -> None:
    (workdir / "specs" / "team-a").mkdir()
    (workdir / "specs" / "team-a" / "a.yaml").write_text(job_yaml("a"))
    (workdir / "specs" / "b.yaml").write_text(job_yaml("b"))
    applied = cli("apply", "specs", cwd=workdir)
    assert applied.returncode == 0, applied.stdout + applied.stderr
    try:
        (workdir / "specs" / "team-a").chmod(0)
        result = as_ordinary_user("plan", "specs", "--prune", cwd=workdir)
        (workdir / "specs" / "team-a").chmod(0o755)
        assert result.returncode == 1, result.stdout + result.stderr
        assert "will be deleted" not in result.stdout
        assert "! a: not pruned: the files could not all be read (specs/team-a: error: " in result.stdout
        assert "specs/team-a: error: cannot list this folder" in result.stderr
    finally:
        (workdir / "specs" / "team-a").chmod(0o755)
        cli("delete", "--all", cwd=workdir)


# ---- the planner: protections and the settle rule, with the clock passed in --------------


def _loaded(name: str, command: str = "[sleep, '30']", path: str = "specs/a.yaml") -> DesiredState:
    return assemble([load_file(path, job_yaml(name, command=command).encode())])


def _observed(name: str, path: str = "specs/a.yaml") -> dict[str, ObservedJob]:
    job = _loaded(name, path=path).jobs[name]
    return {name: ObservedJob(name, job.canonical, job.spec_hash, Phase.RUNNING, job.source)}


def _files(*results: tuple[str, str]) -> DesiredState:
    return assemble(load_file(path, text.encode()) for path, text in results)


def test_a_file_without_a_job_protects_the_jobs_last_applied_from_it() -> None:
    observed = _observed("a")
    for text in ("", "# rewriting\n", "---\n---\n"):
        desired = _files(("specs/a.yaml", text), ("specs/b.yaml", job_yaml("b")))
        job = plan(desired, observed, PlanOptions(prune=True)).job("a")
        assert (job.action, job.reasons) == (Action.KEEP, (PlanReason.FILE_HOLDS_NO_JOB,)), text
        assert job.not_synced == (Reason.FILE_HOLDS_NO_JOB, job.message)
    gone = plan(_files(("specs/b.yaml", job_yaml("b"))), observed, PlanOptions(prune=True))
    assert gone.job("a").action is Action.DELETE, "a deleted file still prunes"


def test_a_read_error_anywhere_stops_pruning_and_says_why() -> None:
    observed = _observed("a")
    problem = Diagnostic("specs/team-a", None, None, "cannot list this folder: denied", None, Code.READ_ERROR)
    listed = _files(("specs/b.yaml", job_yaml("b")))
    incomplete = DesiredState(listed.jobs, (problem,), listed.protected, listed.invalid_files, listed.files)
    job = plan(incomplete, observed, PlanOptions(prune=True)).job("a")
    assert (job.action, job.reasons, job.diagnostics) == (
        Action.KEEP,
        (PlanReason.FILES_UNREADABLE,),
        (problem,),
    )
    assert job.not_synced is not None and job.not_synced[0] is Reason.FILES_UNREADABLE
    orphan = plan(incomplete, observed).job("a")
    assert orphan.action is Action.ORPHAN, "without --prune: an orphan, as before"
    assert orphan.not_synced == (Reason.NOT_IN_SOURCE, orphan.message)


def _step(desired: DesiredState, observed: dict[str, ObservedJob], now: float, previous: Plan | None) -> Plan:
    return plan(
        desired,
        observed,
        PlanOptions(prune=True, settle_s=3.0),
        now=now,
        sightings=previous.sightings if previous else None,
    )


def test_a_slow_write_restarts_the_job_once_when_the_file_has_settled() -> None:
    observed = _observed("a")
    half = _loaded("a", command="[sleep, '31']")  # the first half of a save: valid, not final
    whole = _loaded("a", command="[sleep, '32']")
    first = _step(half, observed, 100.0, None)
    assert first.job("a").action is Action.KEEP and first.wake_at == 103.0
    assert first.job("a").reasons == (PlanReason.NOT_SETTLED,) and not first.desired
    second = _step(whole, observed, 100.3, first)  # the rest of the save: the clock starts again
    assert second.job("a").action is Action.KEEP and second.wake_at == pytest.approx(103.3)
    assert _step(whole, observed, 103.2, second).job("a").action is Action.KEEP
    settled = _step(whole, observed, 103.3, second)
    assert settled.job("a").action is Action.RESTART and settled.wake_at is None
    assert settled.desired["a"] == whole.jobs["a"].canonical
    back = _step(_loaded("a"), observed, 100.5, first)  # changed back before settling: nothing to do
    assert back.job("a").action is Action.NOOP and not back.sightings


def test_a_removal_is_made_only_after_the_settle_time_in_complete_listings() -> None:
    observed = _observed("a")
    without = _files(("specs/b.yaml", job_yaml("b")))
    first = _step(without, observed, 10.0, None)
    assert first.job("a").action is Action.KEEP and first.wake_at == 13.0
    assert first.job("a").not_synced == (Reason.NOT_SETTLED, first.job("a").message)
    back = _step(
        _files(("specs/a.yaml", job_yaml("a")), ("specs/b.yaml", job_yaml("b"))), observed, 11.0, first
    )
    again = _step(without, observed, 12.0, back)  # gone again: the settle time counts from now
    assert _step(without, observed, 14.9, again).job("a").action is Action.KEEP
    assert _step(without, observed, 15.0, again).job("a").action is Action.DELETE
    emptied = _step(_files(("specs/a.yaml", ""), ("specs/b.yaml", job_yaml("b"))), observed, 13.0, again)
    assert emptied.job("a").reasons == (PlanReason.FILE_HOLDS_NO_JOB,) and "a" not in emptied.sightings
    assert _step(without, observed, 15.0, emptied).job("a").action is Action.KEEP, "the clock started again"


def test_only_changes_that_stop_or_restart_tasks_wait_to_settle() -> None:
    settle = PlanOptions(settle_s=2.0)
    new = _loaded("n")
    assert plan(new, {}, settle, now=5.0).job("n").action is Action.CREATE, "nothing runs yet: at once"
    observed = _observed("a")
    relabeled = _files(("specs/a.yaml", job_yaml("a").replace("name: a", "name: a\n  labels: {team: x}")))
    assert plan(relabeled, observed, settle, now=5.0).job("a").action is Action.UPDATE, "in place: at once"
    resized = _files(("specs/a.yaml", job_yaml("a", workers=2)))
    held = plan(resized, observed, settle, now=5.0)
    assert held.job("a").action is Action.KEEP
    assert held.sightings == {"a": Sighting(resized.jobs["a"].spec_hash, 5.0)}
    assert plan(resized, observed, settle, now=7.0, sightings=held.sightings).job("a").action is Action.RESIZE
    assert plan(resized, observed).job("a").action is Action.RESIZE, "no settle time (the CLI): at once"


# ---- the Synced condition ----------------------------------------------------------------


def test_the_synced_condition_says_why_the_files_are_not_applied() -> None:
    job = _loaded("a").jobs["a"]
    record = JobRecord("a", "u1", job.canonical, job.spec_hash)
    refused = record.evolve(not_synced=(Reason.PRUNE_REFUSED, "the files define no jobs at all"))
    synced = next(c for c in conditions(refused, 1.0) if c.type is ConditionType.SYNCED)
    assert (synced.status, synced.reason) == ("False", Reason.PRUNE_REFUSED)
    assert JobRecord.from_json(refused.to_json()) == refused
    legacy = {**record.to_json(), "invalid": ["specs/a.yaml:4:5: error: x"]}
    del legacy["notSynced"]
    assert JobRecord.from_json(legacy).not_synced == (Reason.INVALID_SPEC, "specs/a.yaml:4:5: error: x")


def test_a_saved_plan_keeps_the_protection_of_a_file_without_a_job(workdir: Path) -> None:
    (workdir / "specs" / "a.yaml").write_text(job_yaml("a"))
    (workdir / "specs" / "b.yaml").write_text(job_yaml("b"))
    try:
        assert cli("apply", "specs", cwd=workdir).returncode == 0
        (workdir / "specs" / "a.yaml").write_text("")
        planned = cli("plan", "specs", "--prune", "--out", "plan.json", cwd=workdir)
        assert (
            planned.returncode == 0 and "! a: its file specs/a.yaml holds no job document" in planned.stdout
        )
        applied = cli("apply", "plan.json", cwd=workdir)
        assert applied.returncode == 0, applied.stderr
        assert "will be deleted" not in applied.stdout
        assert "a " in cli("status", cwd=workdir).stdout
    finally:
        cli("delete", "--all", cwd=workdir)
