"""The local backend's registration: config section, spec checks, construction.

What the local backend cannot honour is an error naming the field, never silently ignored:
``spec.image`` (no container runtime yet: the job would run as a bare process instead of in
its image; contract §5), ``spec.volumes`` (nothing to mount into) and
``spec.placement.constraints`` (no agent attributes to match). ``placement.strategy`` has
nothing to choose between on one machine and is accepted.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from tfdeclare.backends.local.config import LocalConfig, parse_local_config
from tfdeclare.backends.plugin import BackendPlugin

if TYPE_CHECKING:
    from tfdeclare.backends.base import Backend
    from tfdeclare.core.diagnostics import Diagnostic, JsonPath
    from tfdeclare.core.spec.loader import LoadedJob, Locate


def check_job(config: LocalConfig, job: LoadedJob, at: Locate) -> list[Diagnostic]:
    spec = job.canonical["spec"]
    problems = []
    image_paths: list[JsonPath] = [("spec", "image")] if spec["image"] is not None else []
    image_paths += [("spec", "replicas", r, "image") for r, e in spec["replicas"].items() if "image" in e]
    for path in image_paths[:1]:
        problems.append(
            at(
                path,
                "the local backend has no container runtime: the job would run as a bare process "
                "on this machine instead of in its image; remove spec.image to run the command "
                "here, or use a container backend (mesos)",
            )
        )
    if spec["volumes"]:
        problems.append(
            at(
                ("spec", "volumes"),
                "the local backend cannot mount spec.volumes (its tasks see this machine's "
                "files as they are): remove them and use the host paths, or use a container "
                "backend (mesos)",
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


def build(state_dir: Path, config: LocalConfig) -> Backend:
    from tfdeclare.backends.local.backend import LocalBackend, LocalCapacity

    capacity = LocalCapacity.detect(
        config.cpus, config.mem_mib, config.gpus, config.port_first, config.port_last
    )
    return LocalBackend(state_dir, capacity)


PLUGIN = BackendPlugin("local", LocalConfig, parse_local_config, check_job, build)
