"""The Mesos backend's config: the ``mesos:`` section of the config file (its schema is
``schemas/backends/mesos.schema.json``). Files it names (``secretFile``, ``caFile``,
``clientCertFile``, ``clientKeyFile``) are taken from the config file's folder when relative."""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True, slots=True)
class ClusterServerConfig:
    """``mesos.clusterServer``: deliver large jobs' cluster descriptions out of band
    (``clusterwire``, ``clusterserver``)."""

    listen: str = "127.0.0.1:0"  # HOST:PORT the framework's cluster server binds (0: any port)
    advertise: str | None = None  # HOST:PORT tasks reach it at (None: the bound address)
    min_bytes: int = 2048  # a job whose per-task cluster description is larger is fetched
    fetch_wait_s: float = 20.0  # how long a framework process waits at close for its tasks to fetch


@dataclass(frozen=True, slots=True)
class MesosConfig:
    master: str = "http://127.0.0.1:5050"
    framework_name: str = "tfdeclare"
    user: str | None = None
    roles: tuple[str, ...] = ("*",)
    principal: str | None = None
    secret_file: str | None = None
    secret_env: str | None = None
    failover_timeout_s: float = 604800.0
    checkpoint: bool = True
    containerizer: str = "mesos"
    tls_verify: bool = True
    ca_file: str | None = None
    client_cert_file: str | None = None
    client_key_file: str | None = None
    offer_hold_s: float = 5.0
    refuse_s: float = 5.0
    fencing_timeout_s: float = 300.0
    reconcile_interval_s: float = 900.0
    cpu_tasks_on_gpu_agents: bool = False
    hostname: str | None = None
    webui_url: str | None = None
    subscribe_timeout_s: float = 30.0
    place_wait_s: float = 2.0
    fifo_backfill_s: float = 60.0
    head_of_line_hold_s: float = 60.0
    revive_interval_s: float = 5.0
    same_address_timeout_s: float = 120.0
    reserved_first: bool = True
    on_framework_removed: str = "fail"  # fail | newFramework
    gpu_resources: bool = False
    shared_filesystem: bool = False
    cluster_server: ClusterServerConfig | None = None  # None: every cluster in band (env, argv)


def _file(section: Mapping[str, Any], key: str, base_dir: str | None) -> str | None:
    value = section.get(key)
    if value is None or base_dir is None:
        return value
    return os.path.join(base_dir, value)


def parse_mesos_config(section: Mapping[str, Any], base_dir: str | None) -> MesosConfig:
    return MesosConfig(
        master=section["master"],
        framework_name=section["frameworkName"],
        user=section.get("user"),
        roles=tuple(section["roles"]),
        principal=section.get("principal"),
        secret_file=_file(section, "secretFile", base_dir),
        secret_env=section.get("secretEnv"),
        failover_timeout_s=float(section["failoverTimeoutSeconds"]),
        checkpoint=section["checkpoint"],
        containerizer=section["containerizer"],
        tls_verify=section["tlsVerify"],
        ca_file=_file(section, "caFile", base_dir),
        client_cert_file=_file(section, "clientCertFile", base_dir),
        client_key_file=_file(section, "clientKeyFile", base_dir),
        offer_hold_s=float(section["offerHoldSeconds"]),
        refuse_s=float(section["refuseSeconds"]),
        fencing_timeout_s=float(section["fencingTimeoutSeconds"]),
        reconcile_interval_s=float(section["reconcileIntervalSeconds"]),
        cpu_tasks_on_gpu_agents=section["cpuTasksOnGpuAgents"],
        hostname=section.get("hostname"),
        webui_url=section.get("webuiUrl"),
        subscribe_timeout_s=float(section["subscribeTimeoutSeconds"]),
        place_wait_s=float(section["placeWaitSeconds"]),
        fifo_backfill_s=float(section["fifoBackfillSeconds"]),
        head_of_line_hold_s=float(section["headOfLineHoldSeconds"]),
        revive_interval_s=float(section["reviveIntervalSeconds"]),
        same_address_timeout_s=float(section["sameAddressTimeoutSeconds"]),
        reserved_first=section["reservedFirst"],
        on_framework_removed=section["onFrameworkRemoved"],
        gpu_resources=section["gpuResources"],
        shared_filesystem=section["sharedFilesystem"],
        cluster_server=_cluster_server(section.get("clusterServer")),
    )


def _cluster_server(section: Mapping[str, Any] | None) -> ClusterServerConfig | None:
    if section is None:
        return None
    return ClusterServerConfig(
        listen=section["listen"],
        advertise=section.get("advertise"),
        min_bytes=int(section["minBytes"]),
        fetch_wait_s=float(section["fetchWaitSeconds"]),
    )
