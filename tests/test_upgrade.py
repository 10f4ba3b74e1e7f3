"""An upgrade of tfdeclare never changes a running job's plan nor a running task's identity.

``tests/golden/upgrade/<release>/`` holds what a release wrote: the job records of its state
folder (``jobs/``, ``sourceDir`` replaced by ``@SPECS@``), the spec files they were applied
from (``specs/``, including one that sets every field) and each task's config hash
(``config_hashes.json``). Planning those files against those records with today's code must
say "no change", and today's code must give each task the same config hash.
"""

from __future__ import annotations

import json
import shutil
from dataclasses import replace
from pathlib import Path

import pytest

from tfdeclare.core.plan.planner import Action, PlanOptions, plan
from tfdeclare.core.run.clusterspec import symbolic_addresses, task_configs
from tfdeclare.core.spec.model import fingerprint
from tfdeclare.shell.sources import SpecFiles
from tfdeclare.shell.store import StateStore

RELEASES = sorted((Path(__file__).parent / "golden" / "upgrade").iterdir())


def _adopt(release: Path, tmp_path: Path) -> tuple[Path, StateStore]:
    specs = tmp_path / "specs"
    shutil.copytree(release / "specs", specs)
    jobs = tmp_path / "state" / "jobs"
    jobs.mkdir(parents=True)
    for record in (release / "jobs").glob("*.json"):
        text = record.read_text().replace("@SPECS@", str(specs))
        (jobs / record.name).write_text(text)
    return specs, StateStore(tmp_path / "state")


@pytest.mark.parametrize("release", RELEASES, ids=[r.name for r in RELEASES])
def test_the_files_a_release_applied_plan_as_no_change(
    release: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _, store = _adopt(release, tmp_path)
    monkeypatch.chdir(tmp_path)
    desired = SpecFiles([Path("specs")]).load()
    assert not desired.diagnostics
    observed = store.observed()
    assert set(observed) == set(desired.jobs) and observed
    result = plan(desired, observed, PlanOptions(prune=True))
    assert [(j.name, j.action) for j in result.jobs] == [(j.name, Action.NOOP) for j in result.jobs]
    assert not result.has_changes


@pytest.mark.parametrize("release", RELEASES, ids=[r.name for r in RELEASES])
def test_every_task_of_a_release_keeps_its_identity(release: Path, tmp_path: Path) -> None:
    _, store = _adopt(release, tmp_path)
    expected = json.loads((release / "config_hashes.json").read_text())
    for name, record in store.records().items():
        spec = record.spec
        configs = task_configs(spec, symbolic_addresses(spec), 0)
        assert {k.name: c.config_hash for k, c in configs.items()} == expected[name], name


@pytest.mark.parametrize("unset", [None, {}, []])
def test_a_field_an_earlier_release_did_not_know_is_no_change_while_unset(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, unset: object
) -> None:
    """What the next release's new optional field looks like to today's records: the desired
    canonical form has the key, unset; the stored one lacks it."""
    release = RELEASES[-1]
    _, store = _adopt(release, tmp_path)
    monkeypatch.chdir(tmp_path)
    desired = SpecFiles([Path("specs")]).load()
    job = desired.jobs["everything"]
    with_new_field = {**job.canonical, "spec": {**job.canonical["spec"], "aFieldFromTheFuture": unset}}
    changed = replace(job, canonical=with_new_field, spec_hash=fingerprint(with_new_field))
    assert changed.spec_hash != store.observed()["everything"].spec_hash  # not a shortcut
    result = plan(
        replace(desired, jobs={**desired.jobs, "everything": changed}), store.observed(), PlanOptions()
    )
    assert result.job("everything").action is Action.NOOP
    # ... and once set, it is a change
    set_field = {**job.canonical, "spec": {**job.canonical["spec"], "aFieldFromTheFuture": 1}}
    changed = replace(job, canonical=set_field, spec_hash=fingerprint(set_field))
    result = plan(
        replace(desired, jobs={**desired.jobs, "everything": changed}), store.observed(), PlanOptions()
    )
    assert result.job("everything").action is Action.RESTART
