"""The local backend's registration: config section, spec checks, construction.

What the local backend cannot honour is an error naming the field, never silently ignored.
``local.runtime`` (``config.py``) decides how a job runs: ``auto`` (the default) runs a job
with ``spec.image`` in containers (``docker_runtime.py``) and the rest as processes;
``process`` refuses ``spec.image`` (the job would run as a bare process instead of in its
image; contract §5) and ``docker`` requires it. ``spec.volumes`` need a container (a process
has nothing to mount into); ``spec.placement.constraints`` are refused (no agent attributes to
match); ``placement.strategy`` has nothing to choose between on one machine and is accepted.

``check_environment`` (``plan``, ``apply`` and the daemon, not ``validate``) asks the Docker
engine whether it answers and holds each container job's image: no engine, or an image it
does not have, is an error at ``spec.image`` (file:line), never a silent bare process.
Images are not pulled (build or ``docker pull`` them first).
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import TYPE_CHECKING

from tfdeclare.backends.local.config import LocalConfig, LocalRuntime, parse_local_config
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


_ENGINE_SEEN_S = 10.0  # how long one answer about the engine serves (a daemon asks again later)
_engine_seen: dict[str, tuple[float, set[str] | str]] = {}  # address -> (when, its images | why not)


def _engine_images() -> set[str] | str:
    """The names (tags and digests) and ids of the images the engine holds, or why no
    engine answers."""
    from tfdeclare.backends.local import docker_runtime

    address = docker_runtime.engine_address()
    seen = _engine_seen.get(address)
    if seen is not None and time.monotonic() - seen[0] < _ENGINE_SEEN_S:
        return seen[1]
    answer: set[str] | str
    try:
        client = docker_runtime.connect(docker_runtime.PROBE_TIMEOUT_S)
    except docker_runtime.EngineError as err:
        answer = str(err)
    else:
        try:
            answer = set()
            for image in client.api.images():
                answer.update(image.get("RepoTags") or ())
                answer.update(image.get("RepoDigests") or ())  # name@sha256:...
                answer.add(image["Id"])
        finally:
            client.close()
    _engine_seen[address] = (time.monotonic(), answer)
    return answer


def check_environment(config: LocalConfig, job: LoadedJob, at: Locate) -> list[Diagnostic]:
    """A container job needs an engine that answers and holds its images, the job's and each
    role's own (a name without a tag means ``:latest``, as for ``docker run``)."""
    spec = job.canonical["spec"]
    named: list[tuple[JsonPath, str]] = [(("spec", "image"), spec["image"])] if spec["image"] else []
    named += [
        (("spec", "replicas", r, "image"), e["image"]) for r, e in spec["replicas"].items() if "image" in e
    ]
    if config.runtime is LocalRuntime.PROCESS or (not named and not config.runtime.uses_docker(None)):
        return []
    images = _engine_images()
    if isinstance(images, str):
        where = named[0][0] if named else ("spec",)
        return [
            at(
                where,
                f"this job runs in containers, but {images}; start the engine (or set "
                "DOCKER_HOST), or set local.runtime to process and remove its images",
            )
        ]
    for path, image in named:
        wanted = image if ":" in image.rsplit("/", 1)[-1] or "@" in image else f"{image}:latest"
        if wanted not in images and image not in images:
            return [
                at(
                    path,
                    f"the Docker engine has no image {image}: build it (make images) or docker "
                    "pull it first; tfdeclare never pulls",
                )
            ]
    return []


def build(state_dir: Path, config: LocalConfig) -> Backend:
    from tfdeclare.backends.local.backend import LocalBackend, LocalCapacity

    capacity = LocalCapacity.detect(
        config.cpus, config.mem_mib, config.gpus, config.port_first, config.port_last
    )
    return LocalBackend(state_dir, capacity, runtime=config.runtime)


PLUGIN = BackendPlugin(
    "local", LocalConfig, parse_local_config, check_job, build, check_environment=check_environment
)
