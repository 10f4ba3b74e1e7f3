"""The Mesos backend's registration: config section, spec checks, construction.

The spec checks, per containerizer (``mesos.containerizer``):

* GPUs. The Mesos containerizer isolates a task's GPUs (``gpu/nvidia``). The Docker
  containerizer takes GPU tasks too, as upstream does (``src/slave/containerizer/docker.cpp``:
  ``allocateNvidiaGpus`` reserves the agent's GPUs for the task, so no two tasks are given the
  same ones, but they are not passed to ``docker run``): a warning at the first role that asks
  for GPUs says that the container sees them only through the agents' Docker engine.
* A role that runs its image's entrypoint (no command) with a working directory: the Docker
  containerizer runs it with ``docker run --workdir``; the Mesos containerizer has no way to
  set a working directory for an image's entrypoint (its ``docker/runtime`` isolator takes the
  image's WorkingDir), so there it is an error that says what works: the entrypoint as the
  command (or, for an image without one, the first of the args), or the Docker containerizer.

The warning for ``plan``/``apply``: tasks run as ``FrameworkInfo.user`` on the agents (their
``--switch_user``), which is the controller's own user when ``mesos.user`` is not set; for a
controller running as root that is root on every agent (or every task refused, on masters
with ``--root_submissions=false``). Importing this module imports no Mesos client (``build``
does).

``check_environment`` runs at ``plan`` only (``launching`` false): it asks the master what its
agents have (``survey.py``, a bounded wait, once per plan) and warns at the spec's line, or at a
role's ``resources``, of a job that can never fit (``fit.py``); a master that cannot be asked is
one warning (of ``warnings``, on no spec's line), and plan goes on. At ``apply`` and in the
daemon the backend's placement judges the same and leaves the job Pending as ``Unschedulable``.
"""

from __future__ import annotations

import os
import posixpath
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING

from tfdeclare.backends.mesos.config import MesosConfig, parse_mesos_config
from tfdeclare.backends.plugin import BackendPlugin
from tfdeclare.core.diagnostics import Severity
from tfdeclare.core.enums import ImagePullPolicy

if TYPE_CHECKING:
    from collections.abc import Sequence

    from tfdeclare.backends.base import Backend
    from tfdeclare.core.diagnostics import Diagnostic
    from tfdeclare.core.spec.loader import LoadedJob, Locate


def check_job(config: MesosConfig, job: LoadedJob, at: Locate) -> list[Diagnostic]:
    return [*_checks(config, job, at), *_relative_checkpoint(job, at)]


def _relative_checkpoint(job: LoadedJob, at: Locate) -> list[Diagnostic]:
    """A relative ``checkpoint.dir`` lies in an agent's sandbox, which the controller cannot
    read: a warning (the job runs; its progress says the same)."""
    checkpoint = job.canonical["spec"].get("checkpoint")
    if checkpoint is None or posixpath.isabs(checkpoint["dir"]):
        return []
    found = at(
        ("spec", "checkpoint", "dir"),
        f"checkpoint.dir {checkpoint['dir']} lies in a Mesos sandbox, which the controller cannot read: "
        "no progress is shown and preemption counts work from the tasks' start; use an absolute "
        "folder on a filesystem the agents and the controller share",
    )
    return [replace(found, severity=Severity.WARNING)]


def _checks(config: MesosConfig, job: LoadedJob, at: Locate) -> list[Diagnostic]:
    if config.containerizer != "docker":
        return _entrypoint_working_dir(job, at)
    for role, replica in job.canonical["spec"]["replicas"].items():
        if replica["resources"]["gpus"]:
            found = at(
                ("spec", "replicas", role, "resources", "gpus"),
                "the Docker containerizer (mesos.containerizer: docker) reserves these GPUs on the "
                "agent, as upstream Mesos does, but does not pass them to docker: the container sees "
                "GPUs only through the agents' Docker engine (the NVIDIA container runtime); "
                "mesos.containerizer: mesos gives each task exactly its own",
            )
            return [replace(found, severity=Severity.WARNING)]
    return []


def _entrypoint_working_dir(job: LoadedJob, at: Locate) -> list[Diagnostic]:
    """The Mesos containerizer cannot set a working directory for an image's entrypoint (the
    ``cd`` wrapper needs the command); say what works instead."""
    if job.canonical["spec"]["command"] is not None:
        return []  # no role runs an entrypoint (read off the canonical form: no typed spec made)
    spec = job.spec
    for replica in spec.replicas:
        role = replica.role
        if spec.runs_entrypoint(role) and spec.working_dir_for(role) is not None:
            field = ("workingDir",) if replica.working_dir is None else ("replicas", role.value, "workingDir")
            args = spec.command_for(role)
            first = f" ({args[0]!r})" if args else ""
            return [
                at(
                    ("spec", *field),
                    f"role {role.value} runs its image's entrypoint (no command) in a working directory, "
                    "which the Mesos containerizer cannot do (it starts an entrypoint in the image's "
                    "own WORKDIR): set command to the image's entrypoint (for an image without one, "
                    f"to the first of the args{first}, leaving the rest as args), or use "
                    "mesos.containerizer: docker, which runs it with --workdir",
                )
            ]
    return []


def user_warnings(config: MesosConfig, euid: int) -> list[str]:
    """Warn when the controller runs as root (``euid`` 0) and ``mesos.user`` is not set."""
    if config.user is not None or euid != 0:
        return []
    return [
        "mesos.user is not set and tfdeclare runs as root, so Mesos tasks would run as root on "
        "the agents (masters with --root_submissions=false refuse them); set mesos.user to the "
        "account tasks should run as (it must exist on every agent)"
    ]


# plan's notes that the master could not be asked: ``check_environment`` records one per
# config, ``warnings`` says it once (on no spec's line: it is about the cluster).
_unasked: dict[MesosConfig, str] = {}


def check_environment(config: MesosConfig, job: LoadedJob, at: Locate, launching: bool) -> list[Diagnostic]:
    """At ``plan``: whether the job can ever fit the cluster's agents (``survey.py``)."""
    if launching:
        return []
    from tfdeclare.backends.mesos import survey

    seen = survey.survey(config)
    if seen.unasked is not None:
        _unasked[config] = survey.unasked_warning(config, seen.unasked)
        return []
    return survey.plan_warnings(config, job, at, seen.agents)


def plan_and_apply_warnings(config: MesosConfig, jobs: Sequence[LoadedJob], euid: int) -> list[str]:
    """Said once by ``plan`` and ``apply`` about running ``jobs``: the task user, and (plan
    only: apply never asks here) a master that could not be asked for its agents."""
    if not jobs:
        return []
    unasked = _unasked.pop(config, None)
    return [*user_warnings(config, euid), *([unasked] if unasked else [])]


def build(state_dir: Path, config: MesosConfig) -> Backend:
    from tfdeclare.backends.mesos.backend import MesosBackend

    return MesosBackend.from_config(state_dir, config)


def with_page_url(config: MesosConfig, url: str) -> MesosConfig:
    """The daemon's status page as FrameworkInfo.webui_url, unless the config names one."""
    return config if config.webui_url else replace(config, webui_url=url)


def pull_policies(job: LoadedJob, at: Locate) -> list[Diagnostic]:
    """The agents pull an image they lack (``IfNotPresent``) or, with ``Always``, every launch
    (``taskinfo.py``); nothing tells them never to pull: ``Never`` is refused at its field."""
    canonical = job.canonical["spec"]
    never = ImagePullPolicy.NEVER.value
    if canonical.get("imagePullPolicy") != never and all(
        entry.get("imagePullPolicy") != never for entry in canonical["replicas"].values()
    ):
        return []  # no policy says Never (read off the canonical form: no typed spec made)
    spec = job.spec
    for replica in spec.replicas:
        if spec.image_for(replica.role) and spec.image_pull_policy_for(replica.role) is ImagePullPolicy.NEVER:
            own = replica.image_pull_policy is not None
            field = ("replicas", replica.role.value, "imagePullPolicy") if own else ("imagePullPolicy",)
            return [
                at(
                    ("spec", *field),
                    "imagePullPolicy Never cannot be honoured on Mesos: the agents pull an image "
                    "they do not have; use IfNotPresent (the default) or Always",
                )
            ]
    return []


PLUGIN = BackendPlugin(
    "mesos",
    MesosConfig,
    parse_mesos_config,
    lambda config, job, at: check_job(config, job, at) + pull_policies(job, at),
    build,
    with_page_url,
    warnings=lambda config, jobs: plan_and_apply_warnings(config, jobs, os.geteuid()),
    check_environment=check_environment,
)
