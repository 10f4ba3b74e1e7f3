"""TaskInfo JSON for one ``TaskLaunch`` (reference §1.9): a pure builder.

This module owns the wire shape of what tfdeclare launches: the TF-style ``name``, the id,
the agent, resources (cpus, mem, gpus when > 0, the task's port as a single-port range, cut
from the offered resources with their reservations: ``take_resources``), the command without a
shell, the environment,
the container (the image through the Mesos containerizer, or the Docker containerizer with
HOST networking), volumes, the kill policy, the health check (``healthcheck.py``) and labels.

A task's resources carry no ``allocation_info``: all the offers of one ACCEPT share one
allocation role, and the master gives each resource of its operations that role (upstream
``protobuf::injectAllocationInfo`` in ``Master::accept``, for every framework, MULTI_ROLE or
not; the real tier's role tests check it), so sending it (31 bytes a resource, the same in
every task) only made every TaskInfo longer (``bench/wire_bench.py``).

The Mesos command executor execs ``value`` with ``arguments`` as the whole argv; the Docker
containerizer appends ``value`` then ``arguments`` to ``docker run IMAGE`` (the image's
entrypoint stays), so there ``arguments`` is argv without its first word. The Docker task also
gets ``--init`` (a DockerInfo parameter, Docker >= 1.13): without it the training process is
PID 1 of its container, which ignores SIGTERM unless it installs a handler, so every stop would
wait out the grace period and end in SIGKILL.

A role that runs its image's entrypoint (no command, ``launch.entrypoint``) sends no
``value``: both containerizers then run the image's entrypoint with ``arguments`` in place of
its CMD. Its working directory needs ``docker run --workdir`` (the plugin refuses a working
directory for it under the Mesos containerizer, which has no way to set one, and says what
works). A task's GPUs are its ``gpus`` resource under either containerizer; the Docker
containerizer reserves them on the agent without passing them to docker, as upstream does.

A working directory is honoured without a shell interpreting the user's argv: the command
becomes ``/bin/sh -c 'cd -- "$1" && shift && exec "$@"' tfdeclare-workdir DIR ARGV...``,
where DIR and ARGV are positional parameters, never parsed as shell text. A relative DIR is
taken from the Mesos sandbox (the executor's working directory). With Docker it is
``docker run --workdir``.

A task with an image has the image's filesystem, where neither the spec's folder nor the
agent's sandbox path exists: its working directory is ``workingDir`` when absolute, the
sandbox's mount point in the container (``/mnt/mesos/sandbox``, the agents'
``--sandbox_directory`` default) joined with it when relative, and otherwise the image's own
(its WORKDIR; the Mesos containerizer falls back to the sandbox), whatever
``sharedFilesystem`` says. A missing working directory is made, in both containerizers.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

from tfdeclare.backends.mesos.bootstrap import program_env
from tfdeclare.backends.mesos.healthcheck import health_check_json
from tfdeclare.backends.secrets import agent_file_argv
from tfdeclare.core.enums import ImagePullPolicy, VolumeMode
from tfdeclare.core.run.tasks import TaskLaunch

JSON = dict[str, Any]

CD_SCRIPT = 'cd -- "$1" && shift && exec "$@"'
# In an image the folder is made first, as `docker run --workdir` does.
MKDIR_CD_SCRIPT = 'mkdir -p -- "$1" && cd -- "$1" && shift && exec "$@"'
SANDBOX_IN_CONTAINER = "/mnt/mesos/sandbox"
LABEL_PREFIX = "tfdeclare."


def _scalar(name: str, value: float) -> JSON:
    return {"name": name, "type": "SCALAR", "scalar": {"value": value}, "role": "*"}


def resources_json(launch: TaskLaunch) -> list[JSON]:
    """The task's resources, unreserved (what ``take_resources`` asks for when the offers do not
    hold them)."""
    r = launch.resources
    out = [_scalar("cpus", float(r.cpus)), _scalar("mem", float(r.mem_mib))]
    if r.gpus > 0:
        out.append(_scalar("gpus", float(r.gpus)))
    port = launch.slot.port
    out.append(
        {"name": "ports", "type": "RANGES", "ranges": {"range": [{"begin": port, "end": port}]}, "role": "*"}
    )
    return out


_RESERVATION_FIELDS = ("role", "reservation", "reservations")


def _reserved(resource: JSON) -> bool:
    stack = resource.get("reservations") or []
    return bool(stack) or resource.get("role", "*") != "*"


def _piece(offered: JSON, value: JSON) -> JSON:
    """A task resource cut from ``offered``: its name and reservation as offered."""
    piece: JSON = {"name": offered["name"], **value}
    for key in _RESERVATION_FIELDS:
        if key in offered:
            piece[key] = offered[key]
    return piece


def take_resources(offered: list[JSON], launch: TaskLaunch, reserved_first: bool) -> list[JSON]:
    """The task's resources cut from what its offers hold (``offered``, used up in place), each
    piece with the reservation of the offered resource it comes from, so the master finds
    exactly what it offered (a task may take part reserved, part unreserved). With
    ``reserved_first`` resources reserved to the role go first. What the offers do not hold
    (they always should: placement checked) is asked for unreserved, for the master to judge."""
    r = launch.resources
    out: list[JSON] = []
    for name, amount in (("cpus", float(r.cpus)), ("mem", float(r.mem_mib)), ("gpus", float(r.gpus))):
        entries = [e for e in offered if e.get("name") == name and e.get("type") == "SCALAR"]
        entries.sort(key=lambda e: (not _reserved(e)) if reserved_first else _reserved(e))
        left = round(amount, 3)
        for entry in entries:
            have = float(entry["scalar"]["value"])
            take = round(min(have, left), 3)
            if take <= 0:
                continue
            entry["scalar"]["value"] = round(have - take, 3)
            out.append(_piece(entry, {"type": "SCALAR", "scalar": {"value": take}}))
            left = round(left - take, 3)
            if left <= 0:
                break
        if left > 0:
            out.append(_scalar(name, left))
    port = launch.slot.port
    single = {"type": "RANGES", "ranges": {"range": [{"begin": port, "end": port}]}}
    holder = next(
        (
            e
            for e in offered
            if e.get("name") == "ports"
            and any(g["begin"] <= port <= g["end"] for g in (e.get("ranges") or {}).get("range", []))
        ),
        None,
    )
    out.append(_piece(holder, single) if holder else {"name": "ports", **single, "role": "*"})
    return out


def working_dir(launch: TaskLaunch, shared_filesystem: bool) -> str | None:
    """Where the task starts: in an image, ``workingDir`` (relative: under the sandbox's mount
    point) or None for the image's own; otherwise the spec's folder rules of the local backend
    when the agents share this machine's files, else ``workingDir`` as given (relative: from
    the sandbox). The agents resolve that path again: a folder swapped for a link between the
    controller's check and the agent's start is not caught (it is on the local backend)."""
    if launch.image is not None:
        if launch.working_dir is None or os.path.isabs(launch.working_dir):
            return launch.working_dir
        return os.path.normpath(os.path.join(SANDBOX_IN_CONTAINER, launch.working_dir))
    if not shared_filesystem or launch.source_dir is None:
        return launch.working_dir
    if launch.working_dir is not None and os.path.isabs(launch.working_dir):
        return launch.working_dir
    if launch.source_folder is not None:  # resolved and checked by the controller just now
        return launch.source_folder
    if launch.working_dir is None:
        return launch.source_dir
    return os.path.normpath(os.path.join(launch.source_dir, launch.working_dir))


def task_info(
    launch: TaskLaunch,
    agent_id: str,
    labels: Mapping[str, str],
    *,
    containerizer: str = "mesos",
    shared_filesystem: bool = False,
    resources: list[JSON] | None = None,
) -> JSON:
    argv = agent_file_argv(launch.argv, launch.secrets)
    directory = working_dir(launch, shared_filesystem)
    docker = containerizer == "docker" and launch.image is not None
    command: JSON = {"shell": False}
    if launch.entrypoint:
        command["arguments"] = argv
    elif docker:
        command["value"] = argv[0]
        command["arguments"] = argv[1:]
    elif directory is not None:
        command["value"] = "/bin/sh"
        script = CD_SCRIPT if launch.image is None else MKDIR_CD_SCRIPT
        command["arguments"] = ["sh", "-c", script, "tfdeclare-workdir", directory, *argv]
    else:
        command["value"] = argv[0]
        command["arguments"] = argv
    if launch.env:
        command["environment"] = {"variables": [{"name": k, "value": v} for k, v in launch.env]}
    info: JSON = {
        "name": f"/job:{launch.key.role.value}/task:{launch.key.index}",
        "task_id": {"value": launch.task_id},
        "agent_id": {"value": agent_id},
        "resources": resources if resources is not None else resources_json(launch),
        "command": command,
        "kill_policy": {"grace_period": {"nanoseconds": round(launch.grace_period_s * 1e9)}},
        "labels": {"labels": [{"key": k, "value": v} for k, v in labels.items()]},
    }
    if launch.health_check is not None:  # the executor runs it (healthcheck.py)
        script = CD_SCRIPT if launch.image is None else MKDIR_CD_SCRIPT
        env = program_env(launch.env)  # a task's key and token: its bootstrap's only
        info["health_check"] = health_check_json(
            launch.health_check, launch.slot.port, env, None if docker else directory, script
        )
    volumes = [
        {
            "container_path": v.container_path,
            "host_path": v.host_path,
            "mode": "RO" if v.mode is VolumeMode.RO else "RW",
        }
        for v in launch.volumes
    ]
    if docker:
        assert launch.image is not None
        parameters = [{"key": "init", "value": "true"}]
        if directory is not None:
            parameters.append({"key": "workdir", "value": directory})
        docker_info: JSON = {"image": launch.image, "network": "HOST", "parameters": parameters}
        if launch.image_pull_policy is ImagePullPolicy.ALWAYS:
            docker_info["force_pull_image"] = True
        container: JSON = {"type": "DOCKER", "docker": docker_info}
        if volumes:
            container["volumes"] = volumes
        info["container"] = container
    elif launch.image is not None or volumes:
        container = {"type": "MESOS"}
        if launch.image is not None:
            image: JSON = {"type": "DOCKER", "docker": {"name": launch.image}}
            if launch.image_pull_policy is ImagePullPolicy.ALWAYS:
                image["cached"] = False  # the provisioner pulls even when it has the image
            container["mesos"] = {"image": image}
        if volumes:
            container["volumes"] = volumes
        info["container"] = container
    return info


def task_labels(launch: TaskLaunch, owner: str) -> dict[str, str]:
    """Labels for operators (the journal, not these, is what tfdeclare reads back)."""
    return {
        f"{LABEL_PREFIX}owner": owner,
        f"{LABEL_PREFIX}job": launch.job,
        f"{LABEL_PREFIX}role": launch.key.role.value,
        f"{LABEL_PREFIX}index": str(launch.key.index),
        f"{LABEL_PREFIX}attempt": str(launch.attempt),
        f"{LABEL_PREFIX}configHash": launch.config_hash,
        f"{LABEL_PREFIX}specHash": launch.spec_hash,
    }
