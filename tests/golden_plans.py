"""Golden plan cases: each folder under tests/golden/plan/ is one case.

    specs/*.yaml     the desired state (paths shown relative to the case folder)
    observed.yaml    a list of applied jobs: {phase, running: [worker-0, ...], source: FILE:LINE,
                     sourcePath: ABSOLUTE FILE, backend: NAME, startedAt: T,
                     progress: {checkpoint: {name, step, at}, step: N, ...} (a record's), job: TFJob}
    options.yaml     optional planner options: {prune: bool, allowEmpty: bool, backend: NAME,
                     settleSeconds: S, now: T, sightings: {NAME: {specHash: HASH or null, since: T}},
                     scope: {paths: [ABSOLUTE PATH, ...], stdin: bool},
                     room: {cpus: C, mem: MIB, gpus: G, nonPreemptiblePriority: P,
                     protectedClasses: [NAME, ...]}: what the backend offers in all)
    expected.txt     the text plan
    expected.json    the JSON plan
    expected.md      the Markdown plan (as `plan -o markdown` prints it)

Run ``UPDATE_GOLDEN=1 pytest tests/test_plan_golden.py`` to rewrite the expected files after an
intended change, then read the diff.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from tfdeclare.core.enums import Phase, Role
from tfdeclare.core.plan.observed import ObservedJob
from tfdeclare.core.plan.planner import Plan, PlanOptions, Sighting, plan
from tfdeclare.core.plan.preempting import Room
from tfdeclare.core.plan.scope import PruneScope
from tfdeclare.core.run.progress import Progress
from tfdeclare.core.run.tasks import TaskKey
from tfdeclare.core.spec.loader import SourceRef, load_file
from tfdeclare.core.spec.resources import Resources
from tfdeclare.shell.sources import SpecFiles

ROOT = Path(__file__).parent / "golden" / "plan"


def cases() -> list[Path]:
    return sorted(p for p in ROOT.iterdir() if p.is_dir())


def _observed(entry: dict[str, Any]) -> ObservedJob:
    text = yaml.safe_dump(entry["job"]).encode()
    result = load_file("observed.yaml", text)
    assert not result.diagnostics, [d.format() for d in result.diagnostics]
    job = result.jobs[0]
    source = None
    if "source" in entry:
        file, line = entry["source"].rsplit(":", 1)
        source = SourceRef(file, int(line))
    running = tuple(
        TaskKey(Role(role), int(index))
        for role, index in (t.rsplit("-", 1) for t in entry.get("running", []))
    )
    return ObservedJob(
        job.name,
        job.canonical,
        job.spec_hash,
        Phase(entry["phase"]),
        source,
        running,
        entry.get("backend"),
        entry.get("sourcePath"),
        Progress.from_json(entry["progress"]) if entry.get("progress") else None,
        entry.get("startedAt"),
    )


def _scope(given: dict[str, Any] | None) -> PruneScope | None:
    if given is None:
        return None
    paths = tuple(given.get("paths", []))
    return PruneScope(paths, stdin=given.get("stdin", False), shown=paths)


def _room(given: dict[str, Any] | None) -> Room | None:
    if given is None:
        return None
    total = Resources(float(given["cpus"]), int(given["mem"]), int(given.get("gpus", 0)))
    return Room(total, given.get("nonPreemptiblePriority"), frozenset(given.get("protectedClasses", ())))


def run_case(case: Path) -> Plan:
    desired = (
        SpecFiles([case / "specs"], base=case).load()
        if (case / "specs").exists()
        else SpecFiles([], base=case).load()
    )
    observed_file = case / "observed.yaml"
    entries = yaml.safe_load(observed_file.read_text()) if observed_file.exists() else []
    observed = {o.name: o for o in map(_observed, entries or [])}
    options_file = case / "options.yaml"
    options = yaml.safe_load(options_file.read_text()) if options_file.exists() else {}
    return plan(
        desired,
        observed,
        PlanOptions(
            prune=options.get("prune", False),
            allow_empty=options.get("allowEmpty", False),
            backend=options.get("backend"),
            settle_s=options.get("settleSeconds", 0.0),
            scope=_scope(options.get("scope")),
            room=_room(options.get("room")),
        ),
        now=options.get("now", 0.0),
        sightings={
            name: Sighting(seen["specHash"], seen["since"])
            for name, seen in options.get("sightings", {}).items()
        },
    )
