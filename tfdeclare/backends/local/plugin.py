"""The local backend's registration: config section, spec checks, construction.

What the local backend cannot honour is an error naming the field, never silently ignored.
``local.runtime`` (``config.py``) decides how a job runs: ``auto`` (the default) runs a job
with ``spec.image`` in containers (``docker_runtime.py``) and the rest as processes;
``process`` refuses ``spec.image`` (the job would run as a bare process instead of in its
image: docs/reference.md#job-semantics) and ``docker`` requires it. ``spec.volumes`` need a
container (a process has nothing to mount into); ``spec.placement.constraints`` are refused
(no agent attributes to match); ``placement.strategy`` has nothing to choose between on one
machine and is accepted.

``check_environment`` (``plan`` and ``apply``, not ``validate``) asks the Docker engine
(``engine_images.py``) whether it answers and holds each container job's images. ``plan``
works without one: what apply would do (pull an image) or find (no engine, an image
``imagePullPolicy: Never`` forbids pulling) is a warning at the image's field. At ``apply`` no
engine, or a missing image under ``Never``, is an error (file:line), never a silent bare
process; the images a job lacks are pulled as it launches (``docker_runtime.py``). The daemon
does not check this with the files (their verdict is cached by content, and the machine's
state changes under it): the backend's placement finds the same each pass
(``engine_images.launch_problem``), the job's ``lastError`` until it is so.

At ``plan`` it also warns, at the spec's line, of a job that can never fit what the backend
offers (``offered``: the config's ``local.cpus``/``mem``/``gpus``, else the machine's own);
apply finds the same and leaves the job Pending as Unschedulable, shown in its status.
"""

from __future__ import annotations

import functools
import os
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING

from tfdeclare.backends.local import engine_images, machine
from tfdeclare.backends.local.config import LocalConfig, LocalRuntime, parse_local_config
from tfdeclare.backends.plugin import BackendPlugin
from tfdeclare.core.diagnostics import Severity
from tfdeclare.core.enums import ImagePullPolicy
from tfdeclare.core.spec.resources import Resources

if TYPE_CHECKING:
    from collections.abc import Sequence

    from tfdeclare.backends.base import Backend
    from tfdeclare.core.diagnostics import Diagnostic, JsonPath
    from tfdeclare.core.spec.loader import LoadedJob, Locate


def check_job(config: LocalConfig, job: LoadedJob, at: Locate) -> list[Diagnostic]:
    spec = job.canonical["spec"]
    problems = []
    image_paths: list[JsonPath] = [("spec", "image")] if spec["image"] is not None else []
    image_paths += [("spec", "replicas", r, "image") for r, e in spec["replicas"].items() if "image" in e]
    # A role's own image (Kubeflow parity) counts like spec.image: its tasks run in containers.
    imageless = [r for r, e in spec["replicas"].items() if spec["image"] is None and "image" not in e]
    for path in image_paths[:1] if config.runtime is LocalRuntime.PROCESS else []:
        problems.append(
            at(
                path,
                "local.runtime is process: the job would run as a bare process on this machine "
                "instead of in its image; set local.runtime to docker or auto (the default) to "
                "run it in containers, or remove the image to run the command here",
            )
        )
    if imageless and config.runtime is LocalRuntime.DOCKER:
        problems.append(
            at(
                ("spec",),
                "local.runtime is docker: every job runs in a container of its spec.image, and "
                f"role {imageless[0]} of this one has none; add spec.image, or set local.runtime "
                "to auto",
            )
        )
    board = spec.get("tensorboard")
    if board and config.runtime is LocalRuntime.DOCKER and not (board.get("image") or spec["image"]):
        problems.append(
            at(
                ("spec", "tensorboard"),
                "local.runtime is docker: the TensorBoard task runs in a container, and this one "
                "has no image; set tensorboard.image (or spec.image), or local.runtime auto to "
                "run it as a process",
            )
        )
    if spec["volumes"] and (imageless or config.runtime is LocalRuntime.PROCESS):
        problems.append(
            at(
                ("spec", "volumes"),
                "spec.volumes need a container: without spec.image the local backend runs the "
                "job as processes, which see this machine's files as they are; add spec.image "
                "(local.runtime auto or docker), or remove them and use the host paths",
            )
        )
    if spec["placement"]["constraints"]:
        problems.append(
            at(
                ("spec", "placement", "constraints"),
                "the local backend has no agent attributes for spec.placement.constraints to "
                "match: remove them, or use the mesos backend",
            )
        )
    return problems


_ENGINE_SEEN_S = 10.0  # how long one answer about the engine serves a plan or an apply


def _images(job: LoadedJob) -> list[tuple[JsonPath, str, ImagePullPolicy]]:
    """Each image a container job's tasks run (roles', TensorBoard's), at the field that names
    it, with its pull policy (a role's own, else the job's); a policy that refuses to pull
    first, so a missing image is reported under it."""
    spec = job.spec
    named = [
        (run.image_at, run.image, spec.image_pull_policy_for(run.role)) for run in spec.runs() if run.image
    ]
    return sorted(named, key=lambda entry: _POLICY_ORDER.index(entry[2]))


# A policy that refuses to pull is reported before one that pulls (the image is then missing).
_POLICY_ORDER = (ImagePullPolicy.NEVER, ImagePullPolicy.IF_NOT_PRESENT, ImagePullPolicy.ALWAYS)


def offered(config: LocalConfig) -> Resources:
    """What the local backend offers all jobs together: ``local.cpus``/``mem``/``gpus`` where
    the config sets them, else what this machine has (as ``build`` sizes the backend)."""
    return Resources(
        config.cpus if config.cpus is not None else machine.cpu_count(),
        config.mem_mib if config.mem_mib is not None else machine.memory_mib(),
        config.gpus if config.gpus is not None else _gpus_here(),
    )


@functools.cache
def _gpus_here() -> int:  # nvidia-smi once per process: a plan of many jobs asks for each
    return machine.gpu_count()


def capacity_warnings(config: LocalConfig, job: LoadedJob, at: Locate) -> list[Diagnostic]:
    """``plan``'s warning at the spec's line for a job that can never fit what the backend
    offers (apply leaves it Pending, Unschedulable, until the spec or the config changes)."""
    need, total = job.spec.total_resources, offered(config)
    if need.fits_in(total):
        return []
    short = [
        f"{want:g} {label} (offered: {have:g})"
        for label, want, have in (
            ("cpus", need.cpus, total.cpus),
            ("MiB of memory", need.mem_mib, total.mem_mib),
            ("gpus", need.gpus, total.gpus),
        )
        if want > have + 1e-9
    ]
    text = (
        f"this job can never fit this machine: its tasks need {', '.join(short)} in all; the "
        "local backend offers local.cpus, local.mem and local.gpus of the config, else what the "
        "machine has: change the spec or the config, or apply will leave it Pending as Unschedulable"
    )
    return [_warning(at(("spec",), text))]


def check_environment(config: LocalConfig, job: LoadedJob, at: Locate, launching: bool) -> list[Diagnostic]:
    """What this machine can offer a job (``plan`` only: at apply the job is Unschedulable,
    shown in its status), and what the Docker engine says about its images, at each image's
    field.

    ``plan`` (``launching`` false) works without an engine: an engine that does not answer,
    an image apply will pull and one it may not pull are warnings saying what apply will do.
    ``apply`` pulls what it may (showing progress as it does): an engine that does not
    answer, or a missing image under ``imagePullPolicy: Never``, is an error there (the
    daemon: the job's ``lastError`` at placement, ``engine_images.launch_problem``).
    """
    problems = [] if launching else capacity_warnings(config, job, at)
    if config.runtime is LocalRuntime.PROCESS:
        return problems
    if not job.screen.images and not config.runtime.uses_docker(None):
        return problems  # no task runs an image (the screen names every one): no typed spec made
    named = _images(job)
    if not named and not config.runtime.uses_docker(None):
        return problems
    images = engine_images.held(_ENGINE_SEEN_S)
    if isinstance(images, str):
        where = named[0][0] if named else ("spec",)
        if launching:
            text = (
                f"this job runs in containers, but {images}: start the engine or point DOCKER_HOST "
                "at it (or set local.runtime to process and remove the job's images)"
            )
            return [*problems, at(where, text)]
        text = (
            f"{images}: apply needs a Docker engine to run this job's containers (and pulls the "
            "images it lacks); start one or point DOCKER_HOST at it before applying"
        )
        return [*problems, _warning(at(where, text))]
    told: set[tuple[str, ImagePullPolicy]] = set()
    for path, image, policy in named:
        if (image, policy) in told or policy is ImagePullPolicy.ALWAYS or engine_images.has(images, image):
            continue  # Always: apply pulls it anyway, which is what the spec says
        told.add((image, policy))
        if policy is ImagePullPolicy.NEVER:
            text = (
                f"the Docker engine has no image {image}, and imagePullPolicy is Never: "
                + ("" if launching else "apply will fail; ")
                + "build or pull it first, or set imagePullPolicy to IfNotPresent"
            )
            problems.append(at(path, text) if launching else _warning(at(path, text)))
        elif not launching:
            problems.append(
                _warning(at(path, f"will pull {image} at apply (the Docker engine does not have it)"))
            )
    return problems


def root_warnings(config: LocalConfig, jobs: Sequence[LoadedJob], euid: int) -> list[str]:
    """Said once by ``plan`` and ``apply`` when one of ``jobs`` would run a task as a process
    of a controller running as root: policy cannot bind such a task (docs/security.md), and it
    can write through the read-only modes of its source folder (a git snapshot included)."""
    if euid != 0 or not any(not config.runtime.uses_docker(r.image) for j in jobs for r in j.runs):
        return []
    return [
        "tfdeclare runs as root, so a job without an image runs as root processes on this machine: "
        "they can read and write anything here, the state folder included, whatever the policy says; "
        "give jobs an image (local.runtime auto or docker) or run tfdeclare as another user"
    ]


def _warning(diagnostic: Diagnostic) -> Diagnostic:
    return replace(diagnostic, severity=Severity.WARNING)


def build(state_dir: Path, config: LocalConfig) -> Backend:
    from tfdeclare.backends.local.backend import LocalBackend, LocalCapacity

    capacity = LocalCapacity.detect(
        config.cpus, config.mem_mib, config.gpus, config.port_first, config.port_last
    )
    return LocalBackend(state_dir, capacity, runtime=config.runtime, pull_timeout_s=config.pull_timeout_s)


PLUGIN = BackendPlugin(
    "local",
    LocalConfig,
    parse_local_config,
    check_job,
    build,
    check_environment=check_environment,
    warnings=lambda config, jobs: root_warnings(config, jobs, os.geteuid()),
    room=offered,  # the plan's room for preemption: what it offers all jobs together
)
