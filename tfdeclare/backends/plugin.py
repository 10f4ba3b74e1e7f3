"""What a backend brings besides running tasks: its name, its section of the config file
(schema fragment, parsed into its own config), its checks of a job spec, and how to build it.

Each backend package registers one ``BackendPlugin`` in ``tfdeclare.backends.registry``; the
rest of tfdeclare knows backends only through that. A plugin module must be cheap to import
(``validate`` loads it): it imports its backend's heavy parts in ``build``.
"""

from __future__ import annotations

import json
from abc import ABC, abstractmethod
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, Generic, TypeVar

from tfdeclare.core.spec.schema import schema_text

if TYPE_CHECKING:
    from tfdeclare.backends.base import Backend
    from tfdeclare.core.diagnostics import Diagnostic
    from tfdeclare.core.spec.loader import LoadedJob, Locate

ConfigT = TypeVar("ConfigT")


class BackendPlugin(ABC, Generic[ConfigT]):
    """One backend, as the registry knows it. ``name`` is what ``--backend`` and the config's
    ``backend:`` say, and the key of its config section; ``config_type()`` is its default
    config (the schema fragment's defaults)."""

    name: str
    config_type: type[ConfigT]

    def config_schema(self) -> dict[str, Any]:
        """The JSON Schema of this backend's config section: ``schemas/backends/<name>.schema.json``."""
        document: dict[str, Any] = json.loads(schema_text(f"backends/{self.name}"))
        return document

    @abstractmethod
    def parse_config(self, section: Mapping[str, Any], base_dir: str | None) -> ConfigT:
        """The config section (schema-valid, defaults filled) as this backend's config; file
        paths in it taken from ``base_dir`` (the config file's folder) when relative. Raises
        ``tfdeclare.core.config.ConfigProblem`` for what the schema cannot say."""

    @abstractmethod
    def check_job(self, config: ConfigT, job: LoadedJob, at: Locate) -> list[Diagnostic]:
        """What this backend, so configured, cannot honour in ``job`` (which passed every
        general rule): one diagnostic per problem, made by ``at`` at the field's JSON path.
        Pure: it runs in ``validate``, ``plan``, ``apply`` and the daemon alike."""

    @abstractmethod
    def build(self, state_dir: Path, config: ConfigT) -> Backend:
        """The backend itself, keeping its state under ``state_dir``."""
