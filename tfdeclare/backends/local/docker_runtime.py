"""The local backend's Docker runtime: the engine calls for tasks that run as containers of
their job's ``spec.image``, through the Docker engine at ``DOCKER_HOST`` (or the default
socket), with the ``docker`` SDK. ``docker_driver.py`` keeps their record in the task folders.

The engine is the task's supervisor: no tfdeclare process stays behind for a container. A
container is named ``tfdeclare-<owner>-<task id>`` (the engine refuses a second container of
one name, so a retried or concurrent launch never runs a task twice) and labelled with its
owner (a hash of the state folder), job, role, index, attempt, task id and hashes; a later
controller finds its containers by the owner label (one listing per pass) and adopts them.

What a container gets (``container_options``): host networking (the TF port as for a
process), ``docker-init`` as PID 1 (signals reach the command; 128+N for signal N), the
task's environment (the image's own for what the spec does not set), the controller's user
and group (files it writes in its folders are the user's; ``HOME`` is its working folder
unless the spec sets it), cpu (``NanoCpus``) and memory limits (no swap beyond), GPUs as one
device request for exactly the host devices placed (``NVIDIA_VISIBLE_DEVICES`` names the same
ones, ``void`` for a task without GPUs), and bind mounts: its working folder (read-write) and
its source folder (read-only, links resolved) at their host paths, then the spec's ``volumes``
(read-only unless ``rw``; one at the same container path replaces ours); the controller's
state folder, when a source folder holds it, is covered by an empty tmpfs. The command runs after the
image's entrypoint, like ``docker run IMAGE COMMAND...``.

Images (``ensure_image``) are pulled before the container is made as the task's
``imagePullPolicy`` says, like the kubelet: ``IfNotPresent`` when the engine lacks it,
``Always`` every launch, ``Never`` not at all (a missing image is then the task's error). The
SDK sends the credentials of the client's config (``~/.docker/config.json`` or
``DOCKER_CONFIG``, credential helpers included) for the image's registry. Callers of one
process that need the same image wait for one pull; its progress goes to
``backends/progress.py``. A pull that fails ends the task with the registry's reason. The
calls run in each task's launcher (``launcher.py``), never in a reconcile pass; the engine
joins the pulls of one image by several launchers (one download of each layer).
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import math
import os
import signal
import threading
import time
from collections.abc import Mapping, Sequence
from concurrent.futures import Future
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

from tfdeclare.backends.local.record import LocalTask
from tfdeclare.backends.progress import PullEvent, PullStep, report
from tfdeclare.backends.secrets import SecretUnavailable, agent_file_argv, read_all
from tfdeclare.core.enums import ImagePullPolicy
from tfdeclare.core.errors import ErrorCode

ENGINE_TIMEOUT_S = 60.0
PROBE_TIMEOUT_S = 3.0
KILL_SLACK_S = 5.0  # past grace + this, a controller that sees the container still up kills it
LABEL = "tfdeclare"  # label prefix: tfdeclare.owner, tfdeclare.job, ...


class EngineError(Exception):
    """The Docker engine cannot be reached, or refused what was asked (``answered``: it
    answered, with a refusal)."""

    answered = False


class ImageUnavailable(EngineError):
    """The task's image is not on the engine and could not (or may not) be pulled: ``code``
    says which (``ImageMissing`` under imagePullPolicy Never; else ``ImagePullFailed``)."""

    def __init__(self, message: str, code: ErrorCode = ErrorCode.IMAGE_PULL_FAILED) -> None:
        super().__init__(message)
        self.code = code


def _causes(err: BaseException) -> list[BaseException]:
    """``err`` and what it wraps: the SDK wraps requests, which wraps urllib3, which wraps the
    ``OSError`` that says what happened."""
    seen: list[BaseException] = []
    todo: list[BaseException] = [err]
    while todo and len(seen) < 20:
        each = todo.pop(0)
        if any(each is s for s in seen):
            continue
        seen.append(each)
        todo.extend(a for a in getattr(each, "args", ()) if isinstance(a, BaseException))
        todo.extend(c for c in (each.__cause__, each.__context__) if c is not None)
    return seen


def unreachable_reason(err: BaseException, timeout: float) -> str:
    """Why the engine did not answer, in words (never an exception's repr)."""
    causes = _causes(err)
    for cause in causes:
        if isinstance(cause, TimeoutError) or type(cause).__name__ in (
            "ReadTimeoutError",
            "ConnectTimeoutError",
        ):
            return f"it did not answer within {timeout:g} s"
    for cause in causes:
        if isinstance(cause, OSError) and cause.errno is not None:
            if cause.errno == errno.ENOENT:
                return "nothing is there (no such socket)"
            if cause.errno == errno.ECONNREFUSED:
                return "nothing listens there (connection refused)"
            if cause.errno in (errno.EACCES, errno.EPERM):
                return "permission denied (is this user allowed to use the engine, e.g. in the docker group?)"
            return (cause.strerror or errno.errorcode.get(cause.errno, "")).lower() or "it did not answer"
    explanation = getattr(err, "explanation", None)
    if isinstance(explanation, str) and explanation:
        return explanation
    return "it did not answer"


def engine_address() -> str:
    """Where the SDK looks for the engine: ``DOCKER_HOST``, else the default socket."""
    return os.environ.get("DOCKER_HOST") or "unix:///var/run/docker.sock"


def connect(timeout: float = ENGINE_TIMEOUT_S) -> Any:
    """A ``docker.DockerClient`` for the engine that answers a ping, or ``EngineError``."""
    import docker
    import docker.errors

    try:
        client = docker.from_env(timeout=math.ceil(timeout))
        client.ping()
    except (docker.errors.DockerException, OSError) as err:
        why = unreachable_reason(err, timeout)
        raise EngineError(f"no Docker engine answers at {engine_address()}: {why}") from err
    return client


def owner_of(root: Path) -> str:
    """The owner label of the containers of one state folder."""
    return hashlib.sha256(str(root.resolve()).encode()).hexdigest()[:12]


def container_name(owner: str, task_id: str) -> str:
    return f"tfdeclare-{owner}-{task_id}"


@dataclass(frozen=True, slots=True)
class BindMount:
    source: str
    target: str
    read_only: bool


@dataclass(frozen=True, slots=True)
class HiddenFolder:
    """An empty, private tmpfs over ``target``: a folder a mounted folder holds that the task
    must not see (the controller's state folder inside a source folder)."""

    target: str


def mounts_for(
    work: str, source: str | None, volumes: Sequence[Mapping[str, Any]], hidden: Sequence[str] = ()
) -> list[BindMount | HiddenFolder]:
    """The task's folders at their host paths, then the spec's volumes; a volume at the same
    container path as one of ours replaces it (the user said what is there). Each ``hidden``
    folder (links resolved) that a mount holds is covered by an empty tmpfs (the engine mounts
    parents first, so the working folder, when it lies below one, is mounted over it)."""
    spec_mounts = [BindMount(v["hostPath"], v["containerPath"], v["mode"] != "rw") for v in volumes]
    targets = {m.target for m in spec_mounts}
    ours = [BindMount(work, work, False)]
    if source is not None and source != work:
        # the folder itself, links resolved (what the policy checked), at the path the task knows
        ours.append(BindMount(os.path.realpath(source), source, True))
    mounts: list[BindMount | HiddenFolder] = [m for m in ours if m.target not in targets]
    mounts += spec_mounts
    covered = []
    for folder in hidden:
        for mount in mounts:
            if isinstance(mount, BindMount) and mount.target != work and _below(folder, mount.source):
                covered.append(
                    HiddenFolder(os.path.join(mount.target, os.path.relpath(folder, mount.source)))
                )
    return mounts + covered


def host_path(task: LocalTask, path: str) -> str | None:
    """Where ``path``, as the container task sees it (relative: to its working folder), lies
    on this machine, through the task's mounts; None when no mount holds it (a file of the
    image, or one under a hidden folder: this machine has nothing of it to look at), or when
    links lead it out of the mounted folder. So the controller, which looks at it for the
    task (a ``progress`` health check), never looks at a file of its own machine that the
    spec names but the container cannot see."""
    container = task.container
    assert container is not None
    work = task.work_dir or task.cwd or "/"
    inside = os.path.normpath(os.path.join(task.cwd or work, path))
    volumes = [
        {"hostPath": v.host_path, "containerPath": v.container_path, "mode": v.mode.value}
        for v in container.volumes
    ]
    holder: BindMount | HiddenFolder | None = None
    for mount in mounts_for(work, task.source_dir, volumes, container.hidden):
        if (inside == mount.target or _below(inside, mount.target)) and (
            holder is None or len(mount.target) > len(holder.target)
        ):
            holder = mount
    if not isinstance(holder, BindMount):
        return None
    found = os.path.join(holder.source, os.path.relpath(inside, holder.target))
    root = os.path.realpath(holder.source)
    real = os.path.realpath(found)
    return found if real == root or _below(real, root) else None


def _below(path: str, folder: str) -> bool:
    return path != folder and path.startswith(folder.rstrip("/") + "/")


def device_requests(devices: Sequence[int]) -> list[Any]:
    """One NVIDIA device request naming exactly the host devices placed, or none: never
    ``count=-1`` ("all"), never a count that lets the engine choose."""
    if not devices:
        return []
    from docker.types import DeviceRequest

    return [DeviceRequest(driver="nvidia", device_ids=[str(d) for d in devices], capabilities=[["gpu"]])]


def container_options(task: LocalTask, owner: str) -> dict[str, Any]:
    """The keyword arguments of ``client.containers.create`` for a container task."""
    from docker.types import Mount

    container = task.container
    if container is None:
        raise ValueError(f"task {task.task_id} is not a container task")
    mem_bytes = task.resources.mem_mib * 1024 * 1024
    devices = list(task.gpu_devices)
    work = task.work_dir or task.cwd or "/"
    # Secrets: the controller's (env, file, name/key) are read now, into the container's
    # environment only (task.json keeps the references); ``agentFile`` ones are read inside the
    # container as it starts (a file of the image or of a mounted volume).
    environment = {**task.env, **read_all(task.secrets, os.environ, agent_files=False)}
    environment["NVIDIA_VISIBLE_DEVICES"] = ",".join(str(d) for d in devices) or "void"
    environment.setdefault("HOME", work)
    labels = {
        f"{LABEL}.owner": owner,
        f"{LABEL}.task-id": task.task_id,
        f"{LABEL}.job": task.job,
        f"{LABEL}.role": task.key.role.value,
        f"{LABEL}.index": str(task.key.index),
        f"{LABEL}.attempt": str(task.attempt),
        f"{LABEL}.spec-hash": task.spec_hash,
        f"{LABEL}.config-hash": task.config_hash,
    }
    volumes = [
        {"hostPath": v.host_path, "containerPath": v.container_path, "mode": v.mode.value}
        for v in container.volumes
    ]
    return {
        "image": container.image,
        "command": agent_file_argv(task.argv, task.secrets),
        "name": container_name(owner, task.task_id),
        "labels": labels,
        "environment": environment,
        "working_dir": task.cwd,
        "user": container.user,
        "network_mode": "host",
        "init": True,
        "nano_cpus": int(task.resources.cpus * 1e9),
        "mem_limit": mem_bytes,
        "memswap_limit": mem_bytes,
        "shm_size": min(1 << 30, mem_bytes // 2),
        "device_requests": device_requests(devices),
        "mounts": [
            Mount(m.target, m.source, type="bind", read_only=m.read_only)
            if isinstance(m, BindMount)
            else Mount(m.target, None, type="tmpfs", tmpfs_size=1 << 20)
            for m in mounts_for(work, task.source_dir, volumes, container.hidden)
        ],
        "stdin_open": False,
        "tty": False,
    }


@dataclass(frozen=True, slots=True)
class ContainerEnd:
    exit_code: int | None
    finished_at: float
    message: str


def _unix_time(stamp: str) -> float | None:
    """The engine's time (RFC 3339 in UTC, nanoseconds: ``...T16:00:00.123456789Z``) as unix
    seconds; None for its zero time."""
    if not stamp or stamp.startswith("0001-"):
        return None
    head, _, fraction = stamp.rstrip("Z").partition(".")
    try:
        return datetime.fromisoformat(head + "+00:00").timestamp() + float("0." + (fraction or "0"))
    except ValueError:
        return None


def _unix_ns(stamp: str) -> int:
    """The engine's time of a log message (RFC 3339, nanoseconds) as unix nanoseconds."""
    head, _, fraction = stamp.rstrip("Z").partition(".")
    try:
        seconds = int(datetime.fromisoformat(head + "+00:00").timestamp())
    except ValueError:
        return 0
    digits = "".join(c for c in fraction if c.isdigit())[:9]
    return seconds * 1_000_000_000 + int(digits.ljust(9, "0") or "0")


class DockerRuntime:
    """The engine's side of the local backend's containers (one per backend instance)."""

    def __init__(self, owner: str) -> None:
        self.owner = owner
        self._client: Any = None
        self._lock = threading.Lock()
        self._pulls: dict[str, Future[None]] = {}  # image -> the pull under way
        self.log_bytes_read = 0  # bytes of container output read by ``log_frames`` (measured)

    def ensure_image(self, image: str, policy: ImagePullPolicy, job: str = "") -> None:
        """Have ``image`` on the engine as ``policy`` says (pulling it when needed), or raise
        ``ImageUnavailable`` with the reason. Callers that want the same image while it is
        being pulled wait for that pull."""
        with self._lock:
            under_way = self._pulls.get(image)
            if under_way is None:
                mine: Future[None] = Future()
                self._pulls[image] = mine
        if under_way is not None:
            under_way.result()  # raises that pull's ImageUnavailable
            return
        try:
            self._ensure_image(image, policy, job)
        except BaseException as err:
            mine.set_exception(err)
            raise
        else:
            mine.set_result(None)
        finally:
            with self._lock:
                del self._pulls[image]

    def _ensure_image(self, image: str, policy: ImagePullPolicy, job: str) -> None:
        import docker.errors

        if policy is not ImagePullPolicy.ALWAYS:
            try:
                self.client.api.inspect_image(image)
                return
            except docker.errors.NotFound:
                pass
            except (docker.errors.DockerException, OSError) as err:
                raise EngineError(_explain(err)) from err
            if policy is ImagePullPolicy.NEVER:
                raise ImageUnavailable(
                    f"the Docker engine has no image {image}, and imagePullPolicy is Never: build or "
                    "pull it first, or set imagePullPolicy to IfNotPresent",
                    ErrorCode.IMAGE_MISSING,
                )
        self._pull(image, job)

    def _pull(self, image: str, job: str) -> None:
        import docker.errors
        from docker.utils import parse_repository_tag

        repository, tag = parse_repository_tag(image)
        report(PullEvent(image, PullStep.STARTED, job))
        reason = ""
        try:
            for event in self.client.api.pull(repository, tag=tag or "latest", stream=True, decode=True):
                if event.get("error"):
                    reason = str((event.get("errorDetail") or {}).get("message") or event["error"])
                    break
                layer, status = str(event.get("id") or ""), str(event.get("status") or "")
                if not layer or not status or status.startswith("Pulling from"):
                    continue
                detail = event.get("progressDetail") or {}
                report(
                    PullEvent(
                        image, PullStep.LAYER, job, layer, status, detail.get("current"), detail.get("total")
                    )
                )
        except docker.errors.APIError as err:
            reason = str(err.explanation or err)
        except (docker.errors.DockerException, OSError) as err:
            why = unreachable_reason(err, ENGINE_TIMEOUT_S)
            reason = f"the Docker engine at {engine_address()} stopped answering: {why}"
        if reason:
            report(PullEvent(image, PullStep.FAILED, job, status=reason))
            raise ImageUnavailable(f"cannot pull image {image}: {reason}")
        report(PullEvent(image, PullStep.DONE, job))

    @property
    def client(self) -> Any:
        with self._lock:
            if self._client is None:
                self._client = connect()
            return self._client

    def listing(self) -> dict[str, str]:
        """Container name -> state (``created``, ``running``, ``exited``, ...) of every
        container of this owner: one request."""
        import docker.errors

        try:
            found = self.client.api.containers(all=True, filters={"label": f"{LABEL}.owner={self.owner}"})
        except (docker.errors.DockerException, OSError) as err:
            raise EngineError(f"cannot list containers at {engine_address()}: {_reason(err)}") from err
        return {c["Names"][0].lstrip("/"): c["State"] for c in found if c.get("Names")}

    def run(self, task: LocalTask) -> str:
        """Pull the task's image as its policy says, create and start its container; its id."""
        assert task.container is not None
        self.ensure_image(task.container.image, task.container.image_pull_policy, task.job)
        return self.make(task)

    def make(self, task: LocalTask) -> str:
        """Create and start the task's container, its image on the engine (a container of
        that name already there is started if it has not been); its id."""
        import docker.errors

        name = container_name(self.owner, task.task_id)
        try:
            try:
                container = self.client.containers.create(**container_options(task, self.owner))
            except docker.errors.APIError as err:
                if err.status_code != 409:  # 409: the name is taken: made by an earlier launch
                    raise
                container = self.client.containers.get(name)
            if container.status == "created":
                container.start()
        except (docker.errors.DockerException, OSError) as err:
            raise EngineError(_explain(err)) from err
        except SecretUnavailable as err:
            raise EngineError(str(err)) from None
        return str(container.id)

    def start(self, name: str) -> None:
        """Start a container that was made but not started (its launch was interrupted)."""
        import docker.errors

        try:
            self.client.api.start(name)
        except (docker.errors.DockerException, OSError) as err:
            raise EngineError(_explain(err)) from err

    def exec_check(self, name: str, argv: Sequence[str], workdir: str | None, timeout_s: float) -> int | None:
        """Run ``argv`` in the running container ``name`` (a health check's ``exec``: the
        container's environment, ``workdir``); its exit code, or None when it ran over
        ``timeout_s`` (then its process is killed, where this user may). Raises ``EngineError``."""
        import docker.errors

        api = self.client.api
        try:
            made = api.exec_create(name, list(argv), workdir=workdir, stdout=False, stderr=False)
            api.exec_start(made["Id"], detach=True)
            deadline = time.monotonic() + timeout_s
            while True:
                info = api.exec_inspect(made["Id"])
                if not info.get("Running") and isinstance(info.get("ExitCode"), int):
                    return int(info["ExitCode"])
                if time.monotonic() >= deadline:
                    pid = info.get("Pid")
                    if isinstance(pid, int) and pid > 0:
                        with contextlib.suppress(OSError):
                            os.kill(pid, signal.SIGKILL)
                    return None
                time.sleep(0.05)
        except (docker.errors.DockerException, OSError) as err:
            raise EngineError(_explain(err)) from err

    def end(self, name: str) -> ContainerEnd:
        """How an ended container ended."""
        import docker.errors

        try:
            state = self.client.api.inspect_container(name)["State"]
        except (docker.errors.DockerException, OSError) as err:
            error = EngineError(_explain(err))
            error.answered = isinstance(err, docker.errors.APIError)
            raise error from err
        code = state.get("ExitCode")
        message = ""
        if state.get("OOMKilled"):
            message = "killed by the kernel: out of memory (resources.mem is its limit)"
        elif state.get("Error"):
            message = str(state["Error"])
        finished = _unix_time(state.get("FinishedAt", "")) or time.time()
        return ContainerEnd(code if isinstance(code, int) else None, finished, message)

    def logs(self, name: str) -> tuple[bytes, bool] | None:
        """The container's whole output (stdout and stderr as written) and whether it has
        ended (no more will come), or None if there is no such container."""
        import docker.errors

        try:
            ended = self.client.api.inspect_container(name)["State"]["Status"] in ("exited", "dead")
            data: bytes = self.client.api.logs(name, stdout=True, stderr=True)
        except docker.errors.NotFound:
            return None
        except (docker.errors.DockerException, OSError) as err:
            raise EngineError(_explain(err)) from err
        return data, ended

    def status(self, name: str) -> str | None:
        """The container's state (``running``, ``exited``, ...), or None if there is none."""
        import docker.errors

        try:
            return str(self.client.api.inspect_container(name)["State"]["Status"])
        except docker.errors.NotFound:
            return None
        except (docker.errors.DockerException, OSError) as err:
            raise EngineError(_explain(err)) from err

    def log_frames(self, name: str, since_ns: int, tail: int | None = None) -> list[tuple[int, bytes]] | None:
        """The container's log messages written at or after ``since_ns`` (unix nanoseconds;
        0: all) among its last ``tail`` (None: all), as (time in unix nanoseconds, bytes), in
        the order written; None if there is no such container. One request; the SDK's
        ``logs`` takes ``since`` only to the microsecond, so the engine's API is asked
        directly (``since`` to the nanosecond, each message one frame of its multiplexed
        stream, its time in front). ``tail`` lets the engine read the end of its log file
        only: with ``since`` alone it reads the whole file to filter it."""
        api = self.client.api
        params: dict[str, int | str] = {"stdout": 1, "stderr": 1, "timestamps": 1, "follow": 0}
        if tail is not None:
            params["tail"] = str(tail)
        if since_ns:
            params["since"] = f"{since_ns // 1_000_000_000}.{since_ns % 1_000_000_000:09d}"
        url = f"{api.base_url}/v{api.api_version}/containers/{name}/logs"
        try:
            answer = api.get(url, params=params, timeout=ENGINE_TIMEOUT_S)
            body = answer.content
        except OSError as err:  # what requests raises is one (RequestException is an IOError)
            raise EngineError(_explain(err)) from err
        if answer.status_code == 404:
            return None
        if answer.status_code >= 400:
            why = body.decode("utf-8", "replace").strip()
            raise EngineError(f"the Docker engine at {engine_address()} refused: {why}")
        frames = []
        at = 0
        while at + 8 <= len(body):  # a frame: stream (1 byte), 3 zero bytes, size (4, big-endian)
            size = int.from_bytes(body[at + 4 : at + 8], "big")
            stamp, _, data = body[at + 8 : at + 8 + size].partition(b" ")
            frames.append((_unix_ns(stamp.decode("ascii", "replace")), data))
            at += 8 + size
        self.log_bytes_read += len(body)
        return frames

    def remove(self, name: str) -> None:
        import docker.errors

        try:
            self.client.api.remove_container(name, force=True)
        except docker.errors.NotFound:
            pass
        except (docker.errors.DockerException, OSError) as err:
            raise EngineError(_explain(err)) from err

    def stop(self, name: str, grace_s: float) -> None:
        """SIGTERM now, SIGKILL after the grace period, done by the engine (which goes on
        even when this process exits before); returns once the container has stopped.
        A container that is not there (any more) needs no stop."""
        import docker.errors

        try:
            self.client.api.stop(name, timeout=math.ceil(grace_s))
        except docker.errors.NotFound:
            pass
        except (docker.errors.DockerException, OSError) as err:
            raise EngineError(_explain(err)) from err

    def kill(self, name: str) -> None:
        """SIGKILL the container now; one that is gone or not running needs none."""
        import docker.errors

        try:
            self.client.api.kill(name)
        except docker.errors.NotFound:
            pass
        except docker.errors.APIError as err:
            if err.status_code != 409:  # 409: it is not running (any more)
                raise EngineError(_explain(err)) from err
        except (docker.errors.DockerException, OSError) as err:
            raise EngineError(_explain(err)) from err

    def close(self) -> None:
        with self._lock:
            if self._client is not None:
                self._client.close()
                self._client = None


def _reason(err: Exception) -> str:
    explanation = getattr(err, "explanation", None)
    return str(explanation) if explanation else unreachable_reason(err, ENGINE_TIMEOUT_S)


def _explain(err: Exception) -> str:
    if getattr(err, "explanation", None):
        return f"the Docker engine at {engine_address()} refused: {_reason(err)}"
    return f"the Docker engine at {engine_address()} did not answer: {_reason(err)}"
