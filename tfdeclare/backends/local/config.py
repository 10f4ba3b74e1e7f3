"""The local backend's config: the ``local:`` section of the config file (its schema is
``schemas/backends/local.schema.json``)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from tfdeclare.core.config import ConfigProblem
from tfdeclare.core.spec.resources import QuantityError, parse_mem_mib


class LocalRuntime(StrEnum):
    """``local.runtime``: how the local backend runs a task."""

    AUTO = "auto"  # a container for a job with spec.image, a process for the rest
    PROCESS = "process"  # a supervised process group; spec.image is refused
    DOCKER = "docker"  # a container of spec.image, through the Docker engine; an image is required

    def uses_docker(self, image: str | None) -> bool:
        """Does a job with this ``spec.image`` run in containers?"""
        return self is LocalRuntime.DOCKER or (self is LocalRuntime.AUTO and image is not None)


@dataclass(frozen=True, slots=True)
class LocalConfig:
    cpus: float | None = None  # None: what the machine has
    mem_mib: int | None = None
    gpus: int | None = None
    port_first: int = 20000
    port_last: int = 29999
    runtime: LocalRuntime = LocalRuntime.AUTO
    pull_timeout_s: float = 1800.0  # a container task's image is on the engine within this, or it failed


def parse_local_config(section: Mapping[str, Any], base_dir: str | None) -> LocalConfig:
    """The section as a ``LocalConfig`` (it names no files: ``base_dir`` is not needed)."""
    try:
        mem = parse_mem_mib(section["mem"]) if "mem" in section else None
    except QuantityError as err:
        raise ConfigProblem(("mem",), str(err)) from err
    ports = section["portRange"]
    if ports["first"] > ports["last"]:
        raise ConfigProblem(("portRange",), "first must not be after last")
    return LocalConfig(
        cpus=float(section["cpus"]) if "cpus" in section else None,
        mem_mib=mem,
        gpus=section.get("gpus"),
        port_first=ports["first"],
        port_last=ports["last"],
        runtime=LocalRuntime(section["runtime"]),
        pull_timeout_s=float(section.get("pullTimeoutSeconds", 1800.0)),
    )
