"""The Mesos backend's registration: config section, spec checks, construction.

The spec checks: a job asking for GPUs needs the Mesos (universal) containerizer; with
``mesos.containerizer: docker`` it is an error at the first role that asks for them. Under the
Mesos containerizer, a role that runs its image's entrypoint cannot have a working directory.
The warning for ``plan``/``apply``: tasks run as ``FrameworkInfo.user`` on the agents (their
``--switch_user``), which is the controller's own user when ``mesos.user`` is not set; for a
controller running as root that is root on every agent (or every task refused, on masters
with ``--root_submissions=false``). Importing this module imports no Mesos client (``build``
does).
"""

from __future__ import annotations

import os
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING

from tfdeclare.backends.mesos.config import MesosConfig, parse_mesos_config
from tfdeclare.backends.plugin import BackendPlugin
from tfdeclare.core.enums import ImagePullPolicy

if TYPE_CHECKING:
    from tfdeclare.backends.base import Backend
    from tfdeclare.core.diagnostics import Diagnostic
    from tfdeclare.core.spec.loader import LoadedJob, Locate


def check_job(config: MesosConfig, job: LoadedJob, at: Locate) -> list[Diagnostic]:
    if config.containerizer != "docker":
        return _entrypoint_working_dir(job, at)
    for role, replica in job.canonical["spec"]["replicas"].items():
        if replica["resources"]["gpus"]:
            return [
                at(
                    ("spec", "replicas", role, "resources", "gpus"),
                    "GPUs need the Mesos containerizer; this controller is configured with the "
                    "Docker containerizer (mesos.containerizer), which cannot give a task its GPUs",
                )
            ]
    return []


def _entrypoint_working_dir(job: LoadedJob, at: Locate) -> list[Diagnostic]:
    """The Mesos containerizer cannot set a working directory for an image's entrypoint (the
    ``cd`` wrapper needs the command)."""
    spec = job.spec
    for replica in spec.replicas:
        if spec.runs_entrypoint(replica.role) and spec.working_dir_for(replica.role) is not None:
            field = (
                ("workingDir",)
                if replica.working_dir is None
                else ("replicas", replica.role.value, "workingDir")
            )
            return [
                at(
                    ("spec", *field),
                    f"role {replica.role.value} runs its image's entrypoint (no command), and the "
                    "Mesos containerizer cannot give that a working directory: set a command, "
                    "or use mesos.containerizer: docker",
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


def build(state_dir: Path, config: MesosConfig) -> Backend:
    from tfdeclare.backends.mesos.backend import MesosBackend

    return MesosBackend.from_config(state_dir, config)


def with_page_url(config: MesosConfig, url: str) -> MesosConfig:
    """The daemon's status page as FrameworkInfo.webui_url, unless the config names one."""
    return config if config.webui_url else replace(config, webui_url=url)


def pull_policies(job: LoadedJob, at: Locate) -> list[Diagnostic]:
    """The agents pull an image they lack (``IfNotPresent``) or, with ``Always``, every launch
    (``taskinfo.py``); nothing tells them never to pull: ``Never`` is refused at its field."""
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
    warnings=lambda config: user_warnings(config, os.geteuid()),
)
