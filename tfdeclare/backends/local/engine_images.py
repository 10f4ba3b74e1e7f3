"""What the Docker engine holds now, for the checks made before containers are launched.

``held`` asks the engine (``DOCKER_HOST`` or the default socket) for the names (tags and
digests) and ids of its images, or says why no engine answers; one answer serves for
``max_age_s`` (a plan of many jobs asks once, not once a job). ``plan`` and ``apply`` ask
through the plugin (``plugin.check_environment``: a warning at plan, an error at apply); the
backend asks at each placement of a container job (``launch_problem``), so that what depends
on the machine's state at the moment (an engine that does not answer, an image missing under
``imagePullPolicy: Never``) is a runtime condition of the job, its ``lastError``, looked at
again every pass, never a verdict on its spec file.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence

from tfdeclare.backends.errors import BackendError
from tfdeclare.backends.local.config import LocalRuntime
from tfdeclare.core.enums import ImagePullPolicy
from tfdeclare.core.errors import ErrorCode

_lock = threading.Lock()
_seen: dict[str, tuple[float, set[str] | str]] = {}  # address -> (when, its images | why not)
LAUNCH_MAX_AGE_S = 2.0  # the backend's answers: fresh for each pass


def held(max_age_s: float) -> set[str] | str:
    """The names (tags and digests) and ids of the images the engine holds, or why no
    engine answers; an answer at most ``max_age_s`` old is reused."""
    import docker.errors

    from tfdeclare.backends.local import docker_runtime

    address = docker_runtime.engine_address()
    with _lock:
        seen = _seen.get(address)
    if seen is not None and time.monotonic() - seen[0] < max_age_s:
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
        except (docker.errors.DockerException, OSError) as err:
            answer = f"the Docker engine at {address} did not list its images: {err}"
        finally:
            client.close()
    with _lock:
        _seen[address] = (time.monotonic(), answer)
    return answer


def has(images: set[str], image: str) -> bool:
    """Whether the engine holds ``image`` (a name without a tag means ``:latest``, as for
    ``docker run``)."""
    wanted = image if ":" in image.rsplit("/", 1)[-1] or "@" in image else f"{image}:latest"
    return wanted in images or image in images


def launch_problem(
    runtime: LocalRuntime, images: Sequence[tuple[str, ImagePullPolicy]]
) -> BackendError | None:
    """Why a gang running ``images`` (with their pull policies) cannot be launched now: no
    engine answers (``EngineUnreachable``), or an image ``imagePullPolicy: Never`` forbids
    pulling is not there (``ImageMissing``); None when it can, or when none runs in a container.
    Both are retried every pass: the engine may start, the image may be loaded."""
    if not any(runtime.uses_docker(image) for image, _ in images):
        return None
    answer = held(LAUNCH_MAX_AGE_S)
    if isinstance(answer, str):
        return BackendError(
            f"this job runs in containers, but {answer}: it is launched once the engine answers "
            "(start it or point DOCKER_HOST at it)",
            code=ErrorCode.ENGINE_UNREACHABLE,
        )
    for image, policy in images:
        if policy is ImagePullPolicy.NEVER and not has(answer, image):
            return BackendError(
                f"the Docker engine has no image {image}, and imagePullPolicy is Never: it is "
                "launched once the image is there (build, load or pull it), or set "
                "imagePullPolicy to IfNotPresent",
                code=ErrorCode.IMAGE_MISSING,
            )
    return None
