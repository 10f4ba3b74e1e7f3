"""tfdeclare's own configuration (``tfdeclare.yaml``): parsed, validated, typed.

Every field has a default in ``schemas/config.schema.json``; command-line options override
the file (the CLI does that). Relative folders are taken from the config file's folder.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

from tfdeclare.core.diagnostics import Diagnostic
from tfdeclare.core.spec.documents import parse_documents
from tfdeclare.core.spec.resources import QuantityError, parse_mem_mib
from tfdeclare.core.spec.schema import load_schema


@dataclass(frozen=True, slots=True)
class LocalConfig:
    cpus: float | None = None
    mem_mib: int | None = None
    gpus: int | None = None
    port_first: int = 20000
    port_last: int = 29999


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
    on_framework_removed: str = "fail"  # fail | newFramework
    gpu_resources: bool = False
    shared_filesystem: bool = False


@dataclass(frozen=True, slots=True)
class DaemonConfig:
    interval_s: float = 30.0
    host: str = "127.0.0.1"
    port: int = 8470
    log_format: str = "text"
    debounce_s: float = 0.05
    status_branch: str = "tfdeclare-status"
    settle_s: float = 3.0


@dataclass(frozen=True, slots=True)
class Config:
    backend: str = "local"
    state_dir: str = ".tfdeclare"
    status_dir: str = "status"
    backoff_initial_s: float = 1.0
    backoff_max_s: float = 300.0
    local: LocalConfig = field(default_factory=LocalConfig)
    mesos: MesosConfig = field(default_factory=MesosConfig)
    daemon: DaemonConfig = field(default_factory=DaemonConfig)

    def with_overrides(self, **changes: Any) -> Config:
        return replace(self, **{k: v for k, v in changes.items() if v is not None})


def parse_config(path: str, data: bytes) -> tuple[Config | None, list[Diagnostic]]:
    documents, problems = parse_documents(path, data)
    if problems:
        return None, problems
    values = [d for d in documents if d.value is not None]
    if not values:
        return Config(), []
    if len(values) > 1:
        return None, [values[1].diagnostic((), "a config file holds one document")]
    document = values[0]
    schema = load_schema("config")
    errors = schema.validate(document.value)
    if errors:
        return None, [document.diagnostic(e.path, e.message, key=e.at_key) for e in errors]
    raw = schema.fill_defaults(document.value)
    local, mesos, daemon = raw["local"], raw["mesos"], raw["daemon"]
    try:
        mem = parse_mem_mib(local["mem"]) if "mem" in local else None
    except QuantityError as err:
        return None, [document.diagnostic(("local", "mem"), str(err))]
    if local["portRange"]["first"] > local["portRange"]["last"]:
        return None, [document.diagnostic(("local", "portRange"), "first must not be after last")]
    config = Config(
        backend=raw["backend"],
        state_dir=raw["stateDir"],
        status_dir=raw["statusDir"],
        backoff_initial_s=float(raw["restartBackoff"]["initialSeconds"]),
        backoff_max_s=float(raw["restartBackoff"]["maxSeconds"]),
        local=LocalConfig(
            cpus=float(local["cpus"]) if "cpus" in local else None,
            mem_mib=mem,
            gpus=local.get("gpus"),
            port_first=local["portRange"]["first"],
            port_last=local["portRange"]["last"],
        ),
        mesos=MesosConfig(
            master=mesos["master"],
            framework_name=mesos["frameworkName"],
            user=mesos.get("user"),
            roles=tuple(mesos["roles"]),
            principal=mesos.get("principal"),
            secret_file=mesos.get("secretFile"),
            secret_env=mesos.get("secretEnv"),
            failover_timeout_s=float(mesos["failoverTimeoutSeconds"]),
            checkpoint=mesos["checkpoint"],
            containerizer=mesos["containerizer"],
            tls_verify=mesos["tlsVerify"],
            ca_file=mesos.get("caFile"),
            offer_hold_s=float(mesos["offerHoldSeconds"]),
            refuse_s=float(mesos["refuseSeconds"]),
            fencing_timeout_s=float(mesos["fencingTimeoutSeconds"]),
            reconcile_interval_s=float(mesos["reconcileIntervalSeconds"]),
            cpu_tasks_on_gpu_agents=mesos["cpuTasksOnGpuAgents"],
            hostname=mesos.get("hostname"),
            webui_url=mesos.get("webuiUrl"),
            subscribe_timeout_s=float(mesos["subscribeTimeoutSeconds"]),
            place_wait_s=float(mesos["placeWaitSeconds"]),
            fifo_backfill_s=float(mesos["fifoBackfillSeconds"]),
            head_of_line_hold_s=float(mesos["headOfLineHoldSeconds"]),
            on_framework_removed=mesos["onFrameworkRemoved"],
            gpu_resources=mesos["gpuResources"],
            shared_filesystem=mesos["sharedFilesystem"],
        ),
        daemon=DaemonConfig(
            interval_s=float(daemon["interval"]),
            host=daemon["host"],
            port=daemon["port"],
            log_format=daemon["logFormat"],
            debounce_s=float(daemon["debounceSeconds"]),
            status_branch=daemon["statusBranch"],
            settle_s=float(daemon["settleSeconds"]),
        ),
    )
    return config, []
