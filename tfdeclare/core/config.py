"""tfdeclare's own configuration (``tfdeclare.yaml``): parsed, validated, typed.

Every field has a default in the config schema; command-line options override the file (the
CLI does that). Relative folders are taken from the config file's folder. Each backend's
section (``local:``, ``mesos:``) belongs to that backend: the caller passes the schema with
every section composed in (``tfdeclare.backends.registry``) and a parser per section, and
``Config.backends`` holds what each parser made, opaque here.
"""

from __future__ import annotations

import posixpath
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from tfdeclare.core.diagnostics import Diagnostic, JsonPath
from tfdeclare.core.enums import Phase, SecretSource
from tfdeclare.core.spec.documents import parse_documents
from tfdeclare.core.spec.policy import PolicyConfig, PriorityClass, Quota
from tfdeclare.core.spec.resources import QuantityError, parse_mem_mib
from tfdeclare.core.spec.schema import Schema
from tfdeclare.core.spec.secrets import SecretRef, SecretsConfig


class ConfigProblem(Exception):
    """A section parser's complaint about a value the schema admitted, at ``path`` (within the
    section)."""

    def __init__(self, path: JsonPath, message: str) -> None:
        super().__init__(message)
        self.path = path
        self.message = message


SectionParser = Callable[[Mapping[str, Any], str | None], object]
"""(a backend's section, schema-valid with defaults filled; the config file's folder, for
relative paths) -> that backend's own config. Raises ``ConfigProblem``."""


@dataclass(frozen=True, slots=True)
class DaemonConfig:
    interval_s: float = 30.0
    host: str = "127.0.0.1"
    port: int = 8470
    log_format: str = "text"
    debounce_s: float = 0.05
    status_branch: str = "tfdeclare-status"
    git_timeout_s: float = 120.0  # git mode: each clone, fetch and push
    settle_s: float = 3.0
    server_names: tuple[str, ...] = ()
    token_file: str | None = None
    token_env: str | None = None
    token_for_reads: bool = False
    webhook_secret_file: str | None = None  # signed git-host deliveries on POST /sync
    webhook_secret_env: str | None = None
    webhook_max_body_bytes: int = 1024 * 1024
    allowed_signers: str | None = None  # git mode: verify heads against these SSH keys
    gpg_keyring: str | None = None  # or these OpenPGP keys


@dataclass(frozen=True, slots=True)
class WebhookConfig:
    """One ``webhooks:`` entry: where the daemon posts phase changes (README, "Webhooks")."""

    name: str
    url: str | SecretRef
    headers: Mapping[str, str | SecretRef] = field(default_factory=dict)
    phases: frozenset[Phase] = frozenset(Phase)  # the phases entered that are posted
    timeout_s: float = 5.0
    max_attempts: int = 5


@dataclass(frozen=True, slots=True)
class Config:
    backend: str = "local"
    state_dir: str = ".tfdeclare"
    status_dir: str = "status"
    backoff_initial_s: float = 1.0
    backoff_max_s: float = 300.0
    # a background controller keeps the jobs between commands (README, "Running jobs")
    background_controller: bool = True
    daemon: DaemonConfig = field(default_factory=DaemonConfig)
    policy: PolicyConfig = field(default_factory=PolicyConfig)
    webhooks: tuple[WebhookConfig, ...] = ()
    secrets: SecretsConfig = field(default_factory=SecretsConfig)
    backends: Mapping[str, object] = field(default_factory=dict)  # backend name -> its own config

    def with_overrides(self, **changes: Any) -> Config:
        return replace(self, **{k: v for k, v in changes.items() if v is not None})


def parse_config(
    path: str, data: bytes, schema: Schema, sections: Mapping[str, SectionParser], base_dir: str | None
) -> tuple[Config | None, list[Diagnostic]]:
    """The config file ``path`` with its ``data``, validated against ``schema``; ``sections``
    parse each backend's section, relative paths in them taken from ``base_dir``."""
    documents, problems = parse_documents(path, data)
    if problems:
        return None, problems
    values = [d for d in documents if d.value is not None]
    if not values:
        return Config(), []
    if len(values) > 1:
        return None, [values[1].diagnostic((), "a config file holds one document")]
    document = values[0]
    errors = schema.validate(document.value)
    if errors:
        return None, [document.diagnostic(e.path, e.message, key=e.at_key) for e in errors]
    raw = schema.fill_defaults(document.value)
    backends: dict[str, object] = {}
    diagnostics: list[Diagnostic] = []
    for name, parse in sections.items():
        try:
            backends[name] = parse(raw[name], base_dir)
        except ConfigProblem as problem:
            diagnostics.append(document.diagnostic((name, *problem.path), problem.message))
    try:
        policy = _policy(raw["policy"])
    except ConfigProblem as problem:
        diagnostics.append(document.diagnostic(("policy", *problem.path), problem.message))
    if diagnostics:
        return None, diagnostics
    daemon = raw["daemon"]
    config = Config(
        backend=raw["backend"],
        state_dir=raw["stateDir"],
        status_dir=raw["statusDir"],
        backoff_initial_s=float(raw["restartBackoff"]["initialSeconds"]),
        backoff_max_s=float(raw["restartBackoff"]["maxSeconds"]),
        background_controller=bool(raw["backgroundController"]),
        daemon=DaemonConfig(
            interval_s=float(daemon["interval"]),
            host=daemon["host"],
            port=daemon["port"],
            log_format=daemon["logFormat"],
            debounce_s=float(daemon["debounceSeconds"]),
            status_branch=daemon["statusBranch"],
            git_timeout_s=float(daemon["gitTimeoutSeconds"]),
            settle_s=float(daemon["settleSeconds"]),
            server_names=tuple(daemon["serverNames"]),
            token_file=_path(base_dir, daemon.get("tokenFile")),
            token_env=daemon.get("tokenEnv"),
            token_for_reads=daemon["tokenForReads"],
            webhook_secret_file=_path(base_dir, daemon.get("webhookSecretFile")),
            webhook_secret_env=daemon.get("webhookSecretEnv"),
            webhook_max_body_bytes=daemon["webhookMaxBodyBytes"],
            allowed_signers=_path(base_dir, daemon.get("verifyCommits", {}).get("allowedSigners")),
            gpg_keyring=_path(base_dir, daemon.get("verifyCommits", {}).get("gpgKeyring")),
        ),
        policy=policy,
        secrets=SecretsConfig(
            dir=_path(base_dir, raw["secrets"].get("dir")),
            allowed_env=tuple(raw["secrets"]["allowedEnv"]),
            allowed_files=tuple(raw["secrets"]["allowedFiles"]),
        ),
        webhooks=tuple(_webhook(i, entry, base_dir) for i, entry in enumerate(raw["webhooks"])),
        backends=backends,
    )
    return config, []


def _secret(value: str | Mapping[str, Any], base_dir: str | None) -> str | SecretRef:
    """A webhook's value, or its reference (a relative file from the config file's folder)."""
    if isinstance(value, str):
        return value
    ref = SecretRef.from_json(value)
    if ref.source is SecretSource.FILE and base_dir is not None:
        return SecretRef(SecretSource.FILE, posixpath.join(base_dir, ref.where))
    return ref


def _webhook(index: int, entry: Mapping[str, Any], base_dir: str | None) -> WebhookConfig:
    return WebhookConfig(
        name=entry.get("name") or f"webhook {index + 1}",
        url=_secret(entry["url"], base_dir),
        headers={k: _secret(v, base_dir) for k, v in entry["headers"].items()},
        phases=frozenset(Phase(p) for p in entry["phases"]) if "phases" in entry else frozenset(Phase),
        timeout_s=float(entry["timeoutSeconds"]),
        max_attempts=entry["maxAttempts"],
    )


def _path(base_dir: str | None, value: str | None) -> str | None:
    """A file the config names, relative ones taken from the config file's folder."""
    return posixpath.join(base_dir or "", value) if value is not None else None


def _policy(raw: Mapping[str, Any]) -> PolicyConfig:
    """The ``policy`` section (schema-valid, defaults filled). Raises ``ConfigProblem``."""
    quotas = []
    for index, entry in enumerate(raw["quotas"]):
        try:
            mem = parse_mem_mib(entry["mem"]) if "mem" in entry else None
        except QuantityError as err:
            raise ConfigProblem(("quotas", index, "mem"), str(err)) from None
        quotas.append(
            Quota(
                label=entry["label"],
                value=entry["value"],
                gpus=entry.get("gpus"),
                cpus=float(entry["cpus"]) if "cpus" in entry else None,
                mem_mib=mem,
                tasks=entry.get("tasks"),
            )
        )
    return PolicyConfig(
        max_tasks_per_job=raw["maxTasksPerJob"],
        max_jobs=raw["maxJobs"],
        allowed_images=tuple(raw["allowedImages"]) if "allowedImages" in raw else None,
        require_image=raw["requireImage"],
        allowed_host_paths=tuple(raw["allowedHostPaths"]),
        max_gpus_per_job=raw.get("maxGpusPerJob"),
        quotas=tuple(quotas),
        max_priority=raw.get("maxPriority"),
        non_preemptible_priority=raw.get("nonPreemptiblePriority"),
        priority_classes=tuple(
            PriorityClass(name, entry["value"], entry.get("preemptible", True))
            for name, entry in sorted(raw["priorityClasses"].items())
        ),
    )
