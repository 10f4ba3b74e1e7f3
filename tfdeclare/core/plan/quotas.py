"""``policy.quotas``: what all the jobs with one label value may use together, counted over
what a plan would run; and ``policy.maxJobs``: how many jobs one state folder holds.

Counted: every valid job in the files (with its new spec) unless it finished and is unchanged
(it is not run again); every active job the files do not give a new spec for (an invalid
file, a job kept or orphaned) with its applied spec, unless ``--prune`` deletes it. A job
whose create, restart or resize would take a quota over its limit (or further over it, when
the limit was lowered) is refused like an invalid file: it is left out of the desired jobs,
its running copy keeps its applied spec and counts with it, and the diagnostic names the rule.
Jobs are admitted in name order, so the same files and state give the same answer.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from tfdeclare.core.diagnostics import Code, Diagnostic
from tfdeclare.core.plan.desired import DesiredState
from tfdeclare.core.spec.loader import LoadedJob
from tfdeclare.core.spec.policy import Quota

if TYPE_CHECKING:  # validate counts quotas without importing the observed state's model
    from tfdeclare.core.plan.observed import ObservedJob, ObservedState
    from tfdeclare.core.plan.scope import PruneScope

Usage = tuple[float, float, float, float]  # gpus, cpus, mem MiB, tasks
_NONE: Usage = (0.0, 0.0, 0.0, 0.0)
_UNITS = (("GPUs", "gpus"), ("cpus", "cpus"), ("MiB of memory", "mem"), ("tasks", "tasks"))


def _usage(canonical: Mapping[str, Any] | None) -> Usage:
    if canonical is None:
        return _NONE
    gpus = cpus = mem = tasks = 0.0
    spec = canonical["spec"]
    board = spec.get("tensorboard")  # a task like the others
    for entry in [*spec["replicas"].values(), *([{"count": 1, **board}] if board else [])]:
        count = int(entry["count"])
        gpus += count * int(entry["resources"]["gpus"])
        cpus += count * float(entry["resources"]["cpus"])
        mem += count * int(entry["resources"]["mem"])
        tasks += count
    return gpus, cpus, mem, tasks


def _limits(quota: Quota) -> tuple[float | None, ...]:
    return quota.gpus, quota.cpus, quota.mem_mib, quota.tasks


def _member(quota: Quota, canonical: Mapping[str, Any] | None) -> bool:
    return canonical is not None and canonical["metadata"]["labels"].get(quota.label) == quota.value


def _running(job: ObservedJob | None) -> Mapping[str, Any] | None:
    """The applied spec of an active job (None: nothing runs)."""
    return job.canonical if job is not None and not job.phase.terminal else None


def enforce_quotas(
    desired: DesiredState,
    observed: ObservedState,
    quotas: tuple[Quota, ...],
    prune: bool,
    scope: PruneScope | None = None,
) -> DesiredState:
    """``desired`` less the jobs a quota refuses (they become protected, with a diagnostic).
    A job gone from the files still counts unless the plan prunes it (``prune``, and it is in
    ``scope``)."""
    if not quotas:
        return desired
    counted: dict[str, Mapping[str, Any] | None] = {}  # what runs if nothing is refused
    candidates: list[LoadedJob] = []  # jobs that would change what runs
    for name, job in observed.items():
        if name not in desired.jobs and _stays(name, job, desired, prune, scope):
            counted[name] = _running(job)
    for name, loaded in desired.jobs.items():
        current = observed.get(name)
        if current is not None and current.spec_hash in (loaded.spec_hash, loaded.earlier_hash):
            counted[name] = loaded.canonical if _running(current) is not None else None
        else:
            counted[name] = _running(current)  # until admitted
            candidates.append(loaded)
    totals = {quota: _sum(quota, counted) for quota in quotas}
    refused: dict[str, Diagnostic] = {}
    for loaded in sorted(candidates, key=lambda j: j.name):
        before = counted[loaded.name]
        after = {quota: _add(totals[quota], quota, before, loaded.canonical) for quota in quotas}
        problems = (_over(quota, totals[quota], after[quota], loaded) for quota in quotas)
        problem = next((p for p in problems if p is not None), None)
        if problem is None:
            counted[loaded.name] = loaded.canonical
            totals = after
        else:
            refused[loaded.name] = problem
    return _refusing(desired, refused)


def _stays(name: str, job: ObservedJob, desired: DesiredState, prune: bool, scope: PruneScope | None) -> bool:
    """Whether a job the files do not give a spec for is still there after the plan: kept for
    an invalid file (``protected``), or not pruned (``prune``, and it is in ``scope``)."""
    return name in desired.protected or not (prune and (scope is None or scope.holds(job)))


def within_max_jobs(desired: DesiredState, observed: ObservedState, max_jobs: int | None) -> bool:
    """Whether ``policy.maxJobs`` can refuse nothing here: there are not even that many jobs
    in the files and the state folder together (the cheap test of every plan)."""
    return max_jobs is None or len(desired.jobs) + len(observed) <= max_jobs


def enforce_max_jobs(
    desired: DesiredState,
    observed: ObservedState,
    max_jobs: int | None,
    prune: bool,
    scope: PruneScope | None = None,
) -> DesiredState:
    """``desired`` less the creates that would take the state folder over ``max_jobs`` jobs
    (``policy.maxJobs``), admitted in name order after every job already there: a job the
    state folder holds is never refused (a lowered limit keeps them all), and one the plan
    prunes (``prune``, in ``scope``) makes room."""
    if within_max_jobs(desired, observed, max_jobs):
        return desired
    assert max_jobs is not None
    kept = sum(
        1
        for name, job in observed.items()
        if name in desired.jobs or _stays(name, job, desired, prune, scope)
    )
    refused: dict[str, Diagnostic] = {}
    for name in sorted(desired.jobs.keys() - observed.keys()):
        if kept < max_jobs:
            kept += 1
            continue
        loaded = desired.jobs[name]
        refused[name] = loaded.at(
            ("metadata", "name"),
            f"the state folder would hold more than {max_jobs} jobs with this one "
            "(policy.maxJobs in the config): delete jobs, or give these to another state folder",
            Code.QUOTA,
        )
    return _refusing(desired, refused)


def _refusing(desired: DesiredState, refused: Mapping[str, Diagnostic]) -> DesiredState:
    """``desired`` less the jobs ``refused`` (they become protected, with their diagnostic)."""
    if not refused:
        return desired
    protected = dict(desired.protected)
    for name, problem in refused.items():
        protected[name] = (*protected.get(name, ()), problem)
    return replace(
        desired,
        jobs={name: job for name, job in desired.jobs.items() if name not in refused},
        diagnostics=(*desired.diagnostics, *refused.values()),
        protected=protected,
        invalid_files=desired.invalid_files | {desired.jobs[name].source.file for name in refused},
    )


def _sum(quota: Quota, counted: Mapping[str, Mapping[str, Any] | None]) -> Usage:
    total = _NONE
    for canonical in counted.values():
        if _member(quota, canonical):
            total = _plus(total, _usage(canonical), 1)
    return total


def _add(total: Usage, quota: Quota, before: Mapping[str, Any] | None, after: Mapping[str, Any]) -> Usage:
    if _member(quota, before):
        total = _plus(total, _usage(before), -1)
    if _member(quota, after):
        total = _plus(total, _usage(after), 1)
    return total


def _plus(a: Usage, b: Usage, sign: int) -> Usage:
    return a[0] + sign * b[0], a[1] + sign * b[1], a[2] + sign * b[2], a[3] + sign * b[3]


def _over(quota: Quota, before: Usage, after: Usage, job: LoadedJob) -> Diagnostic | None:
    """The diagnostic when ``after`` breaks a limit that ``before`` did not break as much."""
    for index, limit in enumerate(_limits(quota)):
        if limit is not None and after[index] > limit and after[index] > before[index]:
            unit, key = _UNITS[index]
            return job.at(
                ("metadata", "labels", quota.label),
                f"jobs labelled {quota.name} would use {after[index]:g} {unit} with this job; "
                f"at most {limit:g} (policy.quotas {quota.name} {key} in the config)",
                Code.QUOTA,
            )
    return None
