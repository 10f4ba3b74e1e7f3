"""Turning a placed gang into task launches: ids, addresses, and each task's configuration.

Task ids are ``<job>.<uid>.<role>-<index>.<launch>``: unique per launch (Mesos never sees an
id twice), without ``/``, well under 255 characters, and readable in ``ps`` and logs.
"""

from __future__ import annotations

from collections.abc import Mapping

from tfdeclare.core.enums import RestartScope, Role
from tfdeclare.core.run.clusterspec import TaskConfig, task_configs, with_restarts
from tfdeclare.core.run.record import JobRecord
from tfdeclare.core.run.tasks import (
    Address,
    ClusterSource,
    GangRequest,
    Placement,
    SlotRequest,
    TaskKey,
    TaskLaunch,
)


def task_id(record: JobRecord, key: TaskKey, launch: int) -> str:
    return f"{record.name}.{record.uid}.{key.name}.{launch}"


_PINNABLE = (Role.CHIEF, Role.PS, Role.WORKER)  # the roles whose addresses other tasks know


def pinned(record: JobRecord, key: TaskKey) -> bool:
    """Is ``key`` restarting alone in this attempt at an address every other task's TF_CONFIG
    names? (The evaluator's and TensorBoard's are in no other task's: they may move.)"""
    entry = record.task_restarts.get(key.name)
    return (
        entry is not None
        and entry.pending
        and entry.attempt == record.attempt
        and key.role in _PINNABLE
        and key.name in record.addresses
    )


def gang_request(record: JobRecord, keys: tuple[TaskKey, ...]) -> GangRequest:
    spec = record.spec
    slots = []
    for key in keys:
        previous = record.addresses.get(key.name)
        address = None
        if previous is not None:
            host, _, port = previous.rpartition(":")
            address = Address(host, int(port))
        slots.append(SlotRequest(key, spec.resources_for(key.role), address, pinned=pinned(record, key)))
    roles = {key.role for key in keys}
    images = {
        (run.image, spec.image_pull_policy_for(run.role)): None
        for run in spec.runs()
        if run.role in roles and run.image
    }
    return GangRequest(
        record.name,
        record.attempt,
        tuple(slots),
        spec.strategy,
        spec.constraints,
        spec.priority,
        tuple((image, policy) for image, policy in images if image),
    )


def placed(record: JobRecord, placement: Placement) -> JobRecord:
    """The record with the placement's addresses and a new launch number, before launching."""
    keys = {key.name for key in record.spec.task_keys()}
    addresses: dict[str, str] = {name: a for name, a in record.addresses.items() if name in keys}
    for slot in placement.slots:
        addresses[slot.key.name] = str(slot.address)
    return record.evolve(addresses=addresses, launches=record.launches + 1)


# Given to every task unless its spec sets the name: a Python task's output reaches `logs` as
# it is printed, not in 8 KiB blocks. Kept out of the config hash (a task's identity), so
# adding a default here restarts no running task.
DEFAULT_ENV = {"PYTHONUNBUFFERED": "1"}


def launch_env(env: tuple[tuple[str, str], ...]) -> tuple[tuple[str, str], ...]:
    """A task's environment as launched: its own, then the defaults it does not set."""
    named = {name for name, _ in env}
    return tuple(sorted([*env, *((k, v) for k, v in DEFAULT_ENV.items() if k not in named)]))


def launches(
    record: JobRecord,
    placement: Placement,
    source_dir: str | None,
    secrets_dir: str | None = None,
    configs: Mapping[TaskKey, TaskConfig] | None = None,
) -> list[TaskLaunch]:
    """The launches of every placed slot; ``record`` is the one returned by ``placed``.
    ``secrets_dir`` is the config's ``secrets.dir``, where ``{name, key}`` references lie.
    ``configs``: what each slot of ``record`` runs, when the caller has worked it out already
    (``lifecycle.desired_configs`` of ``record``: the same configs, their identities kept for
    the next pass); else made here."""
    spec = record.spec
    addresses: Mapping[TaskKey, str] = {key: record.addresses[key.name] for key in spec.task_keys()}
    if configs is None:
        configs = with_restarts(task_configs(spec, addresses, record.attempt), record.restarted_alone)
    in_cluster = {key: address for key, address in addresses.items() if key.role.in_cluster}
    source = ClusterSource(
        spec.cluster_spec,
        in_cluster,
        {role: spec.command_for(role) for role in {key.role for key in in_cluster}},
    )
    out = []
    for slot in placement.slots:
        config = configs[slot.key]
        out.append(
            TaskLaunch(
                task_id=task_id(record, slot.key, record.launches),
                job=record.name,
                key=slot.key,
                attempt=record.attempt,
                spec_hash=record.spec_hash,
                config_hash=config.config_hash,
                argv=config.argv,
                env=launch_env(tuple((k, v) for k, v in config.env if isinstance(v, str))),
                secrets=tuple((k, v.located(secrets_dir)) for k, v in config.env if not isinstance(v, str)),
                resources=config.resources,
                slot=slot,
                working_dir=config.working_dir,
                image=config.image,
                image_pull_policy=spec.image_pull_policy_for(slot.key.role),
                volumes=config.volumes,
                grace_period_s=spec.grace_period_s,
                source_dir=source_dir,
                entrypoint=config.entrypoint,
                keep_address=slot.key.role in _PINNABLE
                and spec.restart_scope_for(slot.key.role)[0] is RestartScope.TASK,
                health_check=spec.health_check_for(slot.key.role),
                cluster=source if slot.key.role.in_cluster else None,
            )
        )
    return out
