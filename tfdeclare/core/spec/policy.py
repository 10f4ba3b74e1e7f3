"""Rules of the config file's ``policy`` section that every job must follow (checked with the
backend's own checks in validate, plan, apply and the daemon alike)."""

from __future__ import annotations

from collections.abc import Sequence

from tfdeclare.core.diagnostics import Diagnostic
from tfdeclare.core.spec.loader import LoadedJob, Locate


def check_task_count(max_tasks: int, job: LoadedJob, at: Locate) -> Sequence[Diagnostic]:
    """``policy.maxTasksPerJob``: a job's size is bounded, so no replica count can take the
    controller down (its cost grows with the square of a job's size: each task's TF_CONFIG
    names every other task). Reported at the count of the largest role."""
    replicas = job.canonical["spec"]["replicas"]
    total = sum(int(entry["count"]) for entry in replicas.values())
    if total <= max_tasks:
        return ()
    largest = max(replicas, key=lambda role: int(replicas[role]["count"]))
    return (
        at(
            ("spec", "replicas", largest, "count"),
            f"the job has {total} tasks; at most {max_tasks} per job (policy.maxTasksPerJob in the config)",
        ),
    )
