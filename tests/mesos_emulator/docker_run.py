"""`docker run` command lines for tasks in containers, as the upstream agent builds them.

Pure functions (no I/O) from a TaskInfo to the docker CLI's argv, checked against Mesos 1.11
(commit ``c1b42f79``):

* ``containerizer_for`` — the composing containerizer (``src/slave/containerizer/composing.cpp``):
  the first of the agent's ``--containerizers`` that does not answer ``NOT_SUPPORTED``. The
  Docker containerizer takes only ``ContainerInfo.type == DOCKER``
  (``DockerContainerizerProcess::launch``, ``src/slave/containerizer/docker.cpp``), the Mesos
  containerizer only tasks without a ContainerInfo or with type ``MESOS``
  (``MesosContainerizerProcess::launch``, ``src/slave/containerizer/mesos/containerizer.cpp``).
* ``docker_run_argv`` — the Docker containerizer's task, as ``mesos-docker-executor``
  (``src/docker/executor.cpp``, ``launchTask``) runs it: ``Docker::RunOptions::create`` then
  ``Docker::run`` (``src/docker/docker.cpp``), in their order and with their error texts:
  ``--cpu-shares`` = cpus x 1024 (at least 2), ``--memory`` = mem (at least 32 MiB), ``-e``
  for the command's environment plus ``MESOS_SANDBOX``, ``MESOS_CONTAINER_NAME`` and
  ``MESOS_ALLOCATION_ROLE`` (sorted, a ``std::map``), ``-v`` per volume then the sandbox at
  the agent's ``--sandbox_directory``, ``--net``, ``--hostname``, ``-p``, ``--entrypoint
  /bin/sh`` only for shell commands, ``--name mesos-<container id>``, every DockerInfo
  parameter as ``--key=value`` (``net``/``network`` replaces the network), the image, then
  ``-c value`` (shell) or ``value`` and ``arguments`` (the image's entrypoint stays).
* ``mesos_image_argv`` — the Mesos containerizer with a Docker image, emulated in the engine:
  the image's root filesystem (the provisioner), host networking (no ``network/cni``), the
  sandbox at ``--sandbox_directory``, host-path volumes as ``volume/host_path`` mounts them,
  the working directory and command of the ``docker/runtime`` isolator
  (``src/slave/containerizer/mesos/isolators/docker/runtime.cpp``: ``getLaunchCommand``,
  ``getWorkingDirectory``), so the image's entrypoint is used only when the command has no
  ``value``; cpu shares and memory as the ``cgroups/cpu`` and ``cgroups/mem`` isolators set
  them. ``--init`` stands in for the command executor's signalling: the task is not PID 1
  on a real agent, so SIGTERM reaches it and its default action applies.

GPUs: a DOCKER task with ``gpus`` is launched as upstream launches it. The Docker containerizer
reserves the agent's GPUs for the task (``DockerContainerizerProcess::allocateNvidiaGpus``,
``src/slave/containerizer/docker.cpp``, on an agent with GPUs, whose NVIDIA components it then
has) but passes no device to ``docker run`` (``mesos-docker-executor`` gives
``RunOptions::create`` no extra devices), so the argv here has none either; the master
already keeps two tasks from being given the same GPUs.

``TaskInfo.limits`` (cpu quota, memory limit and reservation) and DNS defaults are not mapped.
"""

from __future__ import annotations

import posixpath
from typing import Any

DOCKER_NAME_PREFIX = "mesos-"  # src/slave/containerizer/docker.cpp
CPU_SHARES_PER_CPU = 1024  # src/slave/containerizer/mesos/isolators/cgroups/constants.hpp
MIN_CPU_SHARES = 2
MIN_MEMORY = 32 * 1024 * 1024
MIB = 1024 * 1024


class RunOptionsError(Exception):
    """What ``Docker::RunOptions::create`` (or an isolator) returns as an ``Error``."""


def container_name(container_id: str) -> str:
    """``DockerContainerizerProcess::Container::name``: ``mesos-<container id>``."""
    return DOCKER_NAME_PREFIX + container_id


def containerizer_for(task: dict[str, Any], containerizers: tuple[str, ...]) -> str | None:
    """Which containerizer launches ``task``: ``docker``, ``mesos`` or None (none can)."""
    container = task.get("container")
    kind = None if container is None else container.get("type")
    for name in containerizers:
        if name == "docker" and kind == "DOCKER":
            return "docker"
        if name == "mesos" and kind in (None, "MESOS"):
            return "mesos"
    return None


def mesos_image(task: dict[str, Any]) -> dict[str, Any] | None:
    """``ContainerInfo.mesos.image`` of a MESOS container, if it has one."""
    container = task.get("container") or {}
    image = container.get("mesos", {}).get("image")
    return image if container.get("type") == "MESOS" else None


def mesos_image_error(image: dict[str, Any]) -> str | None:
    """The shape a Mesos containerizer needs of ``ContainerInfo.mesos.image``."""
    if image.get("type") == "DOCKER" and "docker" not in image:
        return "Failed to create container: 'docker' is not set for a DOCKER image"
    if image.get("type") == "APPC" and "appc" not in image:
        return "Failed to create container: 'appc' is not set for an APPC image"
    return None


def _scalar_total(resources: list[dict[str, Any]], name: str) -> float | None:
    """``Resources::cpus()`` / ``mem()``: the sum of a scalar, None when absent."""
    values = [
        float(r.get("scalar", {}).get("value", 0.0))
        for r in resources
        if r.get("name") == name and r.get("type", "SCALAR") == "SCALAR"
    ]
    return sum(values) if values else None


def cgroup_limits(resources: list[dict[str, Any]]) -> list[str]:
    """``--cpu-shares`` and ``--memory`` from the task's resources (requests)."""
    argv: list[str] = []
    cpus = _scalar_total(resources, "cpus")
    if cpus is not None:
        argv += ["--cpu-shares", str(max(int(CPU_SHARES_PER_CPU * cpus), MIN_CPU_SHARES))]
    mem = _scalar_total(resources, "mem")
    if mem is not None:
        argv += ["--memory", str(max(int(mem) * MIB, MIN_MEMORY))]
    return argv


def _mode_suffix(volume: dict[str, Any]) -> str:
    mode = volume.get("mode", "RW")  # the proto's first value is the default
    if mode == "RW":
        return ":rw"
    if mode == "RO":
        return ":ro"
    raise RunOptionsError("Unsupported volume mode")


def _docker_volumes(
    container: dict[str, Any], docker: dict[str, Any], sandbox: str, mapped: str
) -> list[str]:
    """``-v`` values and the volume driver, in ``RunOptions::create`` order."""
    out: list[str] = []
    driver: str | None = None
    for volume in container.get("volumes", []):
        container_path = volume.get("container_path", "")
        target = container_path if posixpath.isabs(container_path) else posixpath.join(mapped, container_path)
        if "host_path" in volume:
            host_path = volume["host_path"]
            if not posixpath.isabs(host_path) and not posixpath.isabs(container_path):
                raise RunOptionsError(
                    f"Both host_path '{host_path}' and container_path '{container_path}' of a volume are relative"
                )
            if not posixpath.isabs(host_path) and "volume_driver" not in docker:
                source = posixpath.join(sandbox, host_path)
            else:
                source = host_path
            out.append(f"{source}:{target}{_mode_suffix(volume)}")
        elif "source" in volume:
            source_info = volume["source"]
            if source_info.get("type") != "DOCKER_VOLUME":
                continue  # "only 'DOCKER_VOLUME' was supported by docker"
            docker_volume = source_info.get("docker_volume", {})
            if "driver" in docker_volume:
                if driver is not None and driver != docker_volume["driver"]:
                    raise RunOptionsError("Only one volume driver is supported")
                driver = docker_volume["driver"]
            out.append(f"{docker_volume.get('name', '')}:{target}{_mode_suffix(volume)}")
        else:
            raise RunOptionsError("Host path or volume source is required")
    out.append(f"{sandbox}:{mapped}")
    argv = [word for value in out for word in ("-v", value)]
    if "volume_driver" in docker:
        if driver is not None and driver != docker["volume_driver"]:
            raise RunOptionsError("Only one volume driver per task is supported")
        driver = docker["volume_driver"]
    if driver is not None:
        argv.append(f"--volume-driver={driver}")
    return argv


def _port_ranges(resources: list[dict[str, Any]]) -> list[tuple[int, int]]:
    return [
        (int(rng["begin"]), int(rng["end"]))
        for resource in resources
        if resource.get("name") == "ports" and resource.get("type") == "RANGES"
        for rng in resource.get("ranges", {}).get("range", [])
    ]


def docker_network_error(
    container: dict[str, Any], docker: dict[str, Any], resources: list[dict[str, Any]]
) -> str | None:
    """The network, hostname and port-mapping errors of ``RunOptions::create``, in order."""
    network = docker.get("network", "HOST")
    if network == "USER":
        infos = container.get("network_infos", [])
        if not infos:
            return "No network info found in container info"
        if len(infos) > 1:
            return "Only a single network can be defined in Docker run"
        if "name" not in infos[0]:
            return "No network name found in network info"
    if "hostname" in container and network == "HOST":
        return "Unable to set hostname with host network mode"
    mappings = docker.get("port_mappings", [])
    if not mappings:
        return None
    if network in ("HOST", "NONE"):
        return "Port mappings are only supported for bridge and user-defined networks"
    if not resources:
        return "Port mappings require resources"
    ranges = _port_ranges(resources)
    if not ranges:
        return "Port mappings require port resources"
    for mapping in mappings:
        port = mapping["host_port"]
        if not any(begin <= port <= end for begin, end in ranges):
            return f"Port [{port}] not included in resources"
    return None


def _network_argv(
    container: dict[str, Any], docker: dict[str, Any], resources: list[dict[str, Any]]
) -> list[str]:
    error = docker_network_error(container, docker, resources)
    if error is not None:
        raise RunOptionsError(error)
    network = docker.get("network", "HOST")
    names = {"HOST": "host", "BRIDGE": "bridge", "NONE": "none"}
    net = container["network_infos"][0]["name"] if network == "USER" else names.get(network)
    if net is None:
        raise RunOptionsError(f"Unsupported Network mode: {network}")
    for parameter in docker.get("parameters", []):
        if parameter.get("key") in ("net", "network"):
            net = parameter.get("value", "")
            break
    argv = ["--net", net]
    if "hostname" in container:
        argv += ["--hostname", container["hostname"]]
    for mapping in docker.get("port_mappings", []):
        value = f"{mapping['host_port']}:{mapping['container_port']}"
        if "protocol" in mapping:
            value += "/" + mapping["protocol"].lower()
        argv += ["-p", value]
    return argv


def _additional_options(docker: dict[str, Any]) -> list[str]:
    """Every parameter but the first ``net``/``network`` one, as ``--key=value``."""
    out: list[str] = []
    network_specified = False
    for parameter in docker.get("parameters", []):
        key, value = parameter.get("key", ""), parameter.get("value", "")
        if not network_specified and key in ("net", "network"):
            network_specified = True
        else:
            out.append(f"--{key}={value}")
    return out


def _environment_argv(env: dict[str, str]) -> list[str]:
    return [word for key in sorted(env) for word in ("-e", f"{key}={env[key]}")]


def docker_run_argv(base: list[str], task: dict[str, Any], name: str, sandbox: str, mapped: str) -> list[str]:
    """``docker -H SOCKET run ...`` for a DOCKER task; raises ``RunOptionsError``."""
    container = task["container"]
    docker = container.get("docker")
    if docker is None:
        raise RunOptionsError("No docker info found in container info")
    resources = task.get("resources", [])
    command = task.get("command", {})
    env = {v["name"]: v.get("value", "") for v in command.get("environment", {}).get("variables", [])}
    env["MESOS_SANDBOX"] = mapped
    env["MESOS_CONTAINER_NAME"] = name
    if resources:
        env["MESOS_ALLOCATION_ROLE"] = resources[0].get("allocation_info", {}).get("role", "*")
    volumes = _docker_volumes(container, docker, sandbox, mapped)
    network = _network_argv(container, docker, resources)
    shell = command.get("shell", True)
    if shell:
        if "value" not in command:
            raise RunOptionsError("Shell specified but no command value provided")
        arguments = ["-c", command["value"]]
    else:
        arguments = [command["value"]] if "value" in command else []
        arguments += command.get("arguments", [])
    argv = [*base, "run"]
    if docker.get("privileged", False):
        argv.append("--privileged")
    argv += cgroup_limits(resources)
    argv += _environment_argv(env)
    argv += volumes
    argv += network
    if shell:
        argv += ["--entrypoint", "/bin/sh"]
    argv += ["--name", name]
    argv += _additional_options(docker)
    return [*argv, docker["image"], *arguments]


def launch_command(command: dict[str, Any], image_config: dict[str, Any]) -> tuple[str, list[str]]:
    """``DockerRuntimeIsolatorProcess::getLaunchCommand``: (executable, argv) of the task.

    A shell command runs ``/bin/sh -c value``; with a ``value`` the image's Entrypoint and Cmd
    are ignored and ``arguments`` is the whole argv (the command executor's ``execvp``);
    without one the image's Entrypoint (then Cmd, unless ``arguments`` are given) is used.
    """
    if command.get("shell", True):
        if "value" not in command:
            raise RunOptionsError("Shell specified but no command value provided")
        return "/bin/sh", ["sh", "-c", command["value"]]
    arguments = list(command.get("arguments", []))
    if "value" in command:
        return command["value"], arguments or [command["value"]]
    entrypoint = list(image_config.get("Entrypoint") or [])
    cmd = list(image_config.get("Cmd") or [])
    if entrypoint:
        return entrypoint[0], [*entrypoint, *(arguments or cmd)]
    if cmd:
        return cmd[0], [cmd[0], *(arguments or cmd[1:])]
    raise RunOptionsError("No executable is found")


def mesos_image_argv(
    base: list[str],
    task: dict[str, Any],
    *,
    name: str,
    image: str,
    image_config: dict[str, Any],
    env: dict[str, str],
    mounts: list[tuple[str, str, bool]],
    sandbox: str,
    mapped: str,
) -> list[str]:
    """``docker run`` emulating a Mesos-containerizer command task with a Docker image.

    ``env`` is the task's environment without the image's (the engine adds the image's
    ``Env`` underneath, as the runtime isolator does); ``mounts`` are (host, target, read-only)
    from the ``volume/host_path`` rules. The executable's argv[0] cannot be set apart from its
    path in a container, so ``arguments[0]`` is not passed on.
    """
    executable, argv0 = launch_command(task.get("command", {}), image_config)
    workdir = image_config.get("WorkingDir") or mapped
    argv = [*base, "run", "--init", "--net", "host"]
    argv += cgroup_limits(task.get("resources", []))
    argv += _environment_argv(env)
    argv += ["-v", f"{sandbox}:{mapped}"]
    for host, target, read_only in mounts:
        argv += ["-v", f"{host}:{target}:{'ro' if read_only else 'rw'}"]
    argv += ["-w", workdir, "--entrypoint", executable, "--name", name]
    return [*argv, image, *argv0[1:]]
