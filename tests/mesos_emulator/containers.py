"""Tasks in real containers: the agent's Docker and Mesos containerizers on a Docker engine.

Owns the I/O side of ``EmulatorConfig.containerizers`` (argv building is ``docker_run``):

* ``DockerCli`` — the engine through the ``docker`` command line, as the upstream agent drives
  it (``src/docker/docker.cpp``: ``docker -H SOCKET run|inspect|stop|kill|rm|pull``). The CLI
  rather than the Python SDK: the argv is the one the real agent runs, so tests and logs show
  exactly what an agent would do, and the emulator stays standard-library only.
* ``prepare_docker`` — what ``DockerContainerizerProcess::_launch`` does before the executor
  starts: fetch the URIs, then ``pull`` (``docker inspect IMAGE[:latest]``, else ``docker pull``;
  a failure reads "Failed to run 'docker -H ... pull IMAGE': exited with status 1;
  stderr='...'" followed by "; Container destroyed while pulling image", as
  ``Slave::sendExecutorTerminatedStatusUpdate`` joins the messages).
* ``prepare_mesos`` — the Mesos containerizer's launch: the provisioner (the image must be in
  the engine, or pullable by it: the engine plays the agent's image store), the
  ``volume/host_path`` isolator (``src/slave/containerizer/mesos/isolators/volume/host_path.cpp``,
  ``prepare``: a HOST_PATH source must be absolute, the host path must exist, an absolute
  ``container_path`` on the host filesystem must exist; a relative legacy ``host_path`` is a
  sandbox-path volume and not this isolator's) and the image's config for ``docker/runtime``.
* ``DockerTaskRunner`` — ``mesos-docker-executor`` (``src/docker/executor.cpp``): TASK_STARTING,
  ``docker run`` attached with its output in the sandbox's stdout/stderr, ``docker inspect``
  every 0.5 s until the container has started, then TASK_RUNNING (the container's IP in
  ``container_status`` on a network that gives it one); kill: ``docker stop -t <whole seconds
  of the grace period>`` once the container has started; "Container exited with status N".
* ``MesosImageTaskRunner`` — the command executor's task in the image's filesystem: kill is
  SIGTERM, then SIGKILL after the grace period (``docker kill --signal``), and the end is
  "Command exited with status N" / "Command terminated with signal S" (an engine reports a
  signal death as 128+N, which is read back as the signal).

Containers are removed once their end is reported (the agent keeps them for
``--docker_remove_delay``, 6 hours) and when the agent dies or the emulator stops.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import threading
from abc import abstractmethod
from collections.abc import Callable
from pathlib import Path
from typing import Any

from .docker_run import RunOptionsError, docker_run_argv, launch_command, mesos_image_error
from .executor import LaunchSpec, ProcessRunner, RunnerEvents, describe_wait_status, fetch_uris

DOCKER_INSPECT_DELAY = 0.5  # src/docker/executor.cpp
UNSTARTED = "0001-01-01T00:00:00Z"


def default_docker_socket() -> str:
    """``DOCKER_HOST`` when set, else the agent's default ``--docker_socket``."""
    return os.environ.get("DOCKER_HOST") or "unix:///var/run/docker.sock"


class DockerCli:
    """``docker -H SOCKET ...`` (blocking calls; run them off the event loop)."""

    def __init__(self, docker: str, socket: str) -> None:
        self.base = [docker, "-H", socket]

    def run(self, *args: str, timeout: float = 60.0) -> subprocess.CompletedProcess[str]:
        """The command's result; one that could not run or timed out is a failed result."""
        argv = [*self.base, *args]
        try:
            return subprocess.run(
                argv, stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=timeout, check=False
            )
        except (OSError, subprocess.SubprocessError) as error:
            return subprocess.CompletedProcess(argv, 127, "", f"Failed to create subprocess: {error}")

    def inspect(self, name: str) -> dict[str, Any] | None:
        """The container's ``docker inspect`` object, or None when there is none."""
        result = self.run("inspect", "--type", "container", name)
        if result.returncode != 0:
            return None
        found = json.loads(result.stdout or "[]")
        return found[0] if found else None

    def image_config(self, image: str) -> dict[str, Any] | None:
        result = self.run("image", "inspect", image)
        if result.returncode != 0:
            return None
        found = json.loads(result.stdout or "[]")
        return (found[0].get("Config") or {}) if found else None

    def pull(self, image: str) -> str | None:
        """``Docker::pull``: nothing when the image is there, else ``docker pull``; the error."""
        name = image if ":" in image.rsplit("/", 1)[-1] else f"{image}:latest"
        if self.run("inspect", name).returncode == 0:
            return None
        result = self.run("pull", name, timeout=600.0)
        if result.returncode == 0:
            return None
        cmd = " ".join([*self.base, "pull", name])
        return f"Failed to run '{cmd}': exited with status {result.returncode}; stderr='{result.stderr}'"

    def remove(self, name: str) -> None:
        with contextlib.suppress(subprocess.SubprocessError, OSError):
            self.run("rm", "-f", "-v", name)

    def in_background(self, *args: str) -> None:
        """Run a CLI command without waiting for it (``docker stop`` can take the grace period)."""
        threading.Thread(target=self.run, args=args, kwargs={"timeout": 3600.0}, daemon=True).start()


def _fetch(task: dict[str, Any], sandbox: Path, container_id: str) -> str | None:
    uris = task.get("command", {}).get("uris", [])
    error = fetch_uris(uris, sandbox) if uris else None
    return None if error is None else f"Failed to fetch all URIs for container '{container_id}': {error}"


def prepare_docker(cli: DockerCli, task: dict[str, Any], sandbox: Path, container_id: str) -> str | None:
    """Fetch, then pull; the launch failure's message or None."""
    error = _fetch(task, sandbox, container_id)
    if error is not None:
        return f"{error}; Container destroyed while fetching"
    error = cli.pull(task["container"]["docker"]["image"])
    if error is not None:
        return f"{error}; Container destroyed while pulling image"
    return None


def host_path_mounts(
    volumes: list[dict[str, Any]], mapped: str, *, rootfs: bool
) -> list[tuple[str, str, bool]]:
    """(host, target, read-only) of every HOST_PATH volume; raises ``RunOptionsError``."""
    mounts = []
    for volume in volumes:
        host: str | None = None
        if os.path.isabs(volume.get("host_path", "")):
            host = volume["host_path"]
        source = volume.get("source", {})
        if source.get("type") == "HOST_PATH":
            path = source.get("host_path", {}).get("path", "")
            if not os.path.isabs(path):
                raise RunOptionsError(f"Path '{path}' in HOST_PATH volume is not absolute")
            host = path
        if host is None:
            continue
        if not os.path.exists(host):
            raise RunOptionsError(f"Path '{host}' in HOST_PATH volume does not exist")
        container_path = volume.get("container_path", "")
        if os.path.isabs(container_path):
            if not rootfs and not os.path.exists(container_path):
                raise RunOptionsError(
                    f"Mount point '{container_path}' is an absolute path. "
                    "It must exist if the container shares the host filesystem"
                )
            target = container_path
        else:
            target = os.path.join(mapped, container_path)
        mounts.append((host, target, volume.get("mode", "RW") == "RO"))
    return mounts


def prepare_mesos(
    cli: DockerCli, task: dict[str, Any], sandbox: Path, container_id: str, mapped: str
) -> tuple[str | None, dict[str, Any] | None, list[tuple[str, str, bool]]]:
    """Fetch, provision, then the isolators: (error, image config, host-path mounts)."""
    error = _fetch(task, sandbox, container_id)
    if error is not None:
        return error, None, []
    container = task.get("container") or {}
    image = container.get("mesos", {}).get("image")
    config: dict[str, Any] | None = None
    if image is not None:
        if image.get("type") != "DOCKER":
            return f"Unsupported container image type: {image.get('type')}", None, []
        shape = mesos_image_error(image)
        if shape is not None:
            return shape, None, []
        name = image["docker"]["name"]
        config = cli.image_config(name)
        if config is None:
            pulled = cli.pull(name)
            config = cli.image_config(name) if pulled is None else None
            if config is None:
                return f"Failed to provision image '{name}': {pulled}", None, []
        try:  # the docker/runtime isolator's prepare
            launch_command(task.get("command", {}), config)
        except RunOptionsError as failure:
            return f"Failed to determine the launch command: {failure}", None, []
    try:
        mounts = host_path_mounts(container.get("volumes", []), mapped, rootfs=image is not None)
    except RunOptionsError as failure:
        return str(failure), None, []
    return None, config, mounts


class ContainerRunner(ProcessRunner):
    """One task as a ``docker run`` client process, watched by ``docker inspect``."""

    def __init__(
        self,
        spec: LaunchSpec,
        events: RunnerEvents,
        clock: Any,
        loop: Any,
        on_process: Callable[[int, bool], None],
        cli: DockerCli,
        name: str,
    ) -> None:
        super().__init__(spec, events, clock, loop, on_process)
        self.cli = cli
        self.name = name
        self.started = False
        self._pending_kill: float | None = None

    @abstractmethod
    def argv(self) -> list[str]:
        """The command line that starts the container (``RunOptionsError``: refused)."""

    @abstractmethod
    def signal_container(self, grace: float) -> None:
        """Ask the container to stop, killing it after ``grace`` seconds."""

    def launch_error(self, error: str) -> str:
        return error

    def launch(self) -> None:
        try:
            argv = self.argv()
        except RunOptionsError as error:
            self._finish("TASK_FAILED", self.launch_error(str(error)))
            return
        sandbox = self.spec.sandbox
        with (sandbox / "stdout").open("ab") as out, (sandbox / "stderr").open("ab") as err:
            try:
                self.process = subprocess.Popen(
                    argv,
                    stdin=subprocess.DEVNULL,
                    stdout=out,
                    stderr=err,
                    start_new_session=True,
                    close_fds=True,
                )
            except OSError as error:  # the executor's _reaped with a failed `run` future
                self._finish(
                    "TASK_FAILED", f"Failed to run docker container: Failed to create subprocess: {error}"
                )
                return
        self._on_process(self.process.pid, True)
        threading.Thread(target=self._watch, name=f"container-{self.name}", daemon=True).start()

    def _watch(self) -> None:
        """Inspect until started (or the client ended), then wait for the end; clean up."""
        assert self.process is not None
        seen: dict[str, Any] | None = None
        while seen is None and not self.finished:
            seen = self._started_view()
            if seen is None:
                try:
                    self.process.wait(timeout=DOCKER_INSPECT_DELAY)
                except subprocess.TimeoutExpired:
                    continue
                seen = self._started_view()
                break
        if seen is not None:
            self._soon(self._started, _ip_address(seen))
        code = self.process.wait()
        self._soon(self._exited, code)
        self.cli.remove(self.name)

    def _started_view(self) -> dict[str, Any] | None:
        view = self.cli.inspect(self.name)
        if view is None or view.get("State", {}).get("StartedAt", UNSTARTED) == UNSTARTED:
            return None
        return view

    def _soon(self, callback: Callable[..., None], *args: Any) -> None:
        with contextlib.suppress(RuntimeError):
            self.loop.call_soon_threadsafe(callback, *args)

    def _started(self, ip_address: str | None) -> None:
        self.started = True
        if self.finished:
            return
        if self._pending_kill is not None:
            self.signal_container(self._pending_kill)
        elif not self.killed:
            self.events.running(ip_address)

    def kill(self, grace: float) -> None:
        if self.finished or self.killed:
            return
        self.killed = True
        if self.started:
            self.signal_container(grace)
        else:
            self._pending_kill = grace

    def destroy(self) -> None:
        super().destroy()  # the client's process group
        self.cli.remove(self.name)


def _ip_address(view: dict[str, Any]) -> str | None:
    """``Docker::Container::create``: the IP on the container's network mode, if any."""
    mode = view.get("HostConfig", {}).get("NetworkMode", "")
    networks = view.get("NetworkSettings", {}).get("Networks") or {}
    address = (networks.get(mode) or {}).get("IPAddress") or view.get("NetworkSettings", {}).get("IPAddress")
    return address or None


class DockerTaskRunner(ContainerRunner):
    """``mesos-docker-executor`` running one DOCKER task."""

    def __init__(self, *args: Any, mapped: str, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.mapped = mapped

    def argv(self) -> list[str]:
        return docker_run_argv(self.cli.base, self.spec.task, self.name, str(self.spec.sandbox), self.mapped)

    def launch_error(self, error: str) -> str:
        return f"Failed to create docker run options: {error}"

    def describe_exit(self, code: int) -> str:
        return "Container" + describe_wait_status(code).removeprefix("Command")

    def signal_container(self, grace: float) -> None:
        self.cli.in_background("stop", "-t", str(int(grace)), self.name)


class MesosImageTaskRunner(ContainerRunner):
    """The command executor's task with a Docker image's root filesystem."""

    def __init__(self, *args: Any, argv_of: Callable[[], list[str]], **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._argv_of = argv_of

    def argv(self) -> list[str]:
        return self._argv_of()

    def describe_exit(self, code: int) -> str:
        return describe_wait_status(-(code - 128) if code > 128 else code)

    def signal_container(self, grace: float) -> None:
        self.cli.in_background("kill", "--signal=TERM", self.name)
        if grace <= 0:
            self.cli.in_background("kill", "--signal=KILL", self.name)
        else:
            self._timers.append(self.clock.call_later(grace, self._force))

    def _force(self) -> None:
        if not self.finished:
            self.cli.in_background("kill", "--signal=KILL", self.name)
