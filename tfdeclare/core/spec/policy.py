"""The config file's ``policy`` section: its typed form and the rules every job must follow
(checked with the backend's own checks in validate, plan, apply and the daemon alike).

Per-job rules are ``SpecCheck``s: a job that breaks one is invalid, so a running copy keeps
running as applied, exactly like a job whose file has an error. Quotas span jobs and are
counted against what a plan would run (``tfdeclare.core.plan.quotas``). Every message names
the rule (``policy.allowedImages``) so the reader knows who to ask: the platform team that
wrote the config, not the spec.
"""

from __future__ import annotations

import posixpath
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from fnmatch import fnmatchcase
from functools import partial
from typing import Any

from tfdeclare.core.diagnostics import Diagnostic, JsonPath
from tfdeclare.core.enums import SecretSource
from tfdeclare.core.spec.loader import LoadedJob, Locate, SpecCheck
from tfdeclare.core.spec.secrets import SecretRef, SecretsConfig


@dataclass(frozen=True, slots=True)
class Quota:
    """What all the jobs whose ``metadata.labels[label] == value`` may use together (None:
    not limited)."""

    label: str
    value: str
    gpus: int | None = None
    cpus: float | None = None
    mem_mib: int | None = None
    tasks: int | None = None

    @property
    def name(self) -> str:
        return f"{self.label}={self.value}"


@dataclass(frozen=True, slots=True)
class PolicyConfig:
    max_tasks_per_job: int = 1000
    allowed_images: tuple[str, ...] | None = None  # None: any image
    require_image: bool = False
    allowed_host_paths: tuple[str, ...] = ()  # none by default: no hostPath volume
    max_gpus_per_job: int | None = None
    quotas: tuple[Quota, ...] = ()


def policy_checks(
    policy: PolicyConfig, reserved: Sequence[str], secrets: SecretsConfig | None = None
) -> tuple[SpecCheck, ...]:
    """Every per-job rule of ``policy`` and ``secrets``; ``reserved`` are the controller's own
    folders (state, status), which no job may use as its working folder or mount."""
    checks: list[SpecCheck] = [
        partial(check_secret_refs, secrets or SecretsConfig()),
        partial(check_task_count, policy.max_tasks_per_job),
        partial(check_images, policy),
        partial(check_host_paths, policy.allowed_host_paths),
        partial(check_reserved_paths, tuple(posixpath.normpath(p) for p in reserved)),
    ]
    if policy.max_gpus_per_job is not None:
        checks.append(partial(check_gpus, policy.max_gpus_per_job))
    return tuple(checks)


def check_secret_refs(secrets: SecretsConfig, job: LoadedJob, at: Locate) -> Sequence[Diagnostic]:
    """The config's ``secrets``: which controller variables and files a spec may name."""
    spec = job.canonical["spec"]
    places: list[tuple[JsonPath, Mapping[str, Any]]] = [(("spec", "env"), spec["env"])]
    places += [(("spec", "replicas", role, "env"), e.get("env", {})) for role, e in spec["replicas"].items()]
    problems = []
    for place, env in places:
        for name, value in env.items():
            if isinstance(value, str):
                continue
            ref = SecretRef.from_json(value)
            problem = _refused(secrets, ref)
            if problem is not None:
                problems.append(at((*place, name, "secretRef"), f"{name}: {problem}"))
    return problems


def _refused(secrets: SecretsConfig, ref: SecretRef) -> str | None:
    if ref.source is SecretSource.ENV and not any(fnmatchcase(ref.where, p) for p in secrets.allowed_env):
        return f"the controller's variable {ref.where} is not readable by specs (secrets.allowedEnv)"
    if ref.source is SecretSource.FILE:
        path = posixpath.normpath(ref.where)
        if not any(lies_under(path, prefix) for prefix in secrets.allowed_files):
            return f"the controller's file {path} is not readable by specs (secrets.allowedFiles)"
    if ref.source is SecretSource.NAME and secrets.dir is None:
        return "{name, key} references need secrets.dir in the config"
    return None


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


def check_gpus(max_gpus: int, job: LoadedJob, at: Locate) -> Sequence[Diagnostic]:
    """``policy.maxGpusPerJob``, reported at the GPUs of the role that asks for the most."""
    replicas = job.canonical["spec"]["replicas"]
    per_role = {role: int(e["count"]) * int(e["resources"]["gpus"]) for role, e in replicas.items()}
    total = sum(per_role.values())
    if total <= max_gpus:
        return ()
    largest = max(per_role, key=lambda role: per_role[role])
    return (
        at(
            ("spec", "replicas", largest, "resources", "gpus"),
            f"the job asks for {total} GPUs; at most {max_gpus} per job (policy.maxGpusPerJob in the config)",
        ),
    )


def check_images(policy: PolicyConfig, job: LoadedJob, at: Locate) -> Sequence[Diagnostic]:
    """``policy.allowedImages`` (glob patterns on the whole reference) and
    ``policy.requireImage``."""
    image = job.canonical["spec"].get("image")
    if image is None:
        if policy.require_image:
            return (
                at(
                    ("spec",), "the job has no image; every job needs one (policy.requireImage in the config)"
                ),
            )
        return ()
    allowed = policy.allowed_images
    if allowed is None or any(fnmatchcase(image, pattern) for pattern in allowed):
        return ()
    shown = ", ".join(allowed) if allowed else "none"
    return (
        at(
            ("spec", "image"),
            f"image {image!r} is not allowed; allowed: {shown} (policy.allowedImages in the config)",
        ),
    )


def lies_under(path: str, prefix: str) -> bool:
    """Whether the normalised absolute ``path`` is ``prefix`` or inside it (whole components)."""
    prefix = posixpath.normpath(prefix)
    return path == prefix or path.startswith(prefix.rstrip("/") + "/")


def check_host_paths(allowed: Sequence[str], job: LoadedJob, at: Locate) -> Sequence[Diagnostic]:
    """``policy.allowedHostPaths``: every volume's ``hostPath`` lies under one of them."""
    problems = []
    for index, volume in enumerate(job.canonical["spec"]["volumes"]):
        host_path = posixpath.normpath(volume["hostPath"])
        if not any(lies_under(host_path, prefix) for prefix in allowed):
            shown = ", ".join(allowed) if allowed else "none (set policy.allowedHostPaths to allow some)"
            problems.append(
                at(
                    ("spec", "volumes", index, "hostPath"),
                    f"host path {host_path} is not allowed; allowed under: {shown} "
                    "(policy.allowedHostPaths in the config)",
                )
            )
    return problems


def check_reserved_paths(reserved: Sequence[str], job: LoadedJob, at: Locate) -> Sequence[Diagnostic]:
    """No job works in or mounts the controller's own state or status folders (a task could
    forge job records or status there)."""
    spec = job.canonical["spec"]
    # (where, the path, whether a folder above a reserved one counts: a mount exposes all below it)
    candidates: list[tuple[tuple[str | int, ...], str, bool]] = []
    if spec.get("workingDir") and posixpath.isabs(spec["workingDir"]):
        candidates.append((("spec", "workingDir"), spec["workingDir"], False))
    for index, volume in enumerate(spec["volumes"]):
        candidates.append((("spec", "volumes", index, "hostPath"), volume["hostPath"], True))
    problems = []
    for path, value, above in candidates:
        normal = posixpath.normpath(value)
        hit = next((r for r in reserved if lies_under(normal, r) or (above and lies_under(r, normal))), None)
        if hit is not None:
            problems.append(at(path, f"{normal} is or holds tfdeclare's own folder {hit}: no job may use it"))
    return problems
