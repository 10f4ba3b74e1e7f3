"""What a backend brings besides running tasks: its name, its section of the config file
(schema fragment, parsed into its own config), its check of a job spec, and how to build it.

Each backend package makes one ``BackendPlugin`` (``<package>/plugin.py``, ``PLUGIN``) and
``tfdeclare.backends.registry`` lists them; the rest of tfdeclare knows backends only through
the registry. A plugin module must be cheap to import (``validate`` loads every one): it
imports its backend's heavy parts in ``build``.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Generic, TypeVar

from tfdeclare.core.spec.schema import schema_text

if TYPE_CHECKING:
    from tfdeclare.backends.base import Backend
    from tfdeclare.core.diagnostics import Diagnostic
    from tfdeclare.core.spec.loader import LoadedJob, Locate
    from tfdeclare.core.spec.resources import Resources

ConfigT = TypeVar("ConfigT")


@dataclass(frozen=True)
class BackendPlugin(Generic[ConfigT]):
    # What ``--backend`` and the config's ``backend:`` say, and the key of its config section.
    name: str
    # Its own config; ``config_type()`` is the default (the schema fragment's defaults).
    config_type: type[ConfigT]
    # (its section, schema-valid with defaults filled; the config file's folder, for relative
    # file paths) -> its config. Raises ``tfdeclare.core.config.ConfigProblem`` for what the
    # schema cannot judge.
    parse_config: Callable[[Mapping[str, Any], str | None], ConfigT]
    # (its config, a job that passed every general rule, ``at``) -> one diagnostic per field
    # of the job it cannot honour, made by ``at(json_path, message)``. Pure: it runs in
    # ``validate``, ``plan``, ``apply`` and the daemon alike.
    check_job: Callable[[ConfigT, LoadedJob, Locate], list[Diagnostic]]
    # (state folder, its config) -> the backend itself.
    build: Callable[[Path, ConfigT], Backend]
    # (its config, the URL of the daemon's status page) -> its config pointing there, for a
    # backend whose cluster shows a link to its frameworks (Mesos: FrameworkInfo.webui_url).
    with_page_url: Callable[[ConfigT, str], ConfigT] | None = None
    # (its config, the jobs planned) -> warnings about how they will run, for ``plan`` and
    # ``apply`` to print once (e.g. Mesos: tasks would run as root on the agents; local: jobs
    # without an image would run as root processes). May look at this process.
    warnings: Callable[[ConfigT, Sequence[LoadedJob]], list[str]] = lambda config, jobs: []
    # Like ``check_job``, for what this machine cannot honour now (a container engine that
    # does not answer, an image it lacks that may not be pulled): may do I/O, so it runs in
    # ``plan``, ``apply`` and the daemon, never in ``validate``. The last argument says
    # whether the caller launches (``apply``, the daemon: what stops the job is an error) or
    # only plans (``plan`` works offline: it says as warnings what apply would do or find).
    check_environment: Callable[[ConfigT, LoadedJob, Locate, bool], list[Diagnostic]] | None = None
    # (its config) -> what it offers in all, when that is known without asking a cluster (the
    # local backend: its configured or detected capacity), so that a plan can say whom applying
    # it preempts; None where the room is a cluster's offers (Mesos): the plan says nothing.
    room: Callable[[ConfigT], Resources | None] = lambda config: None

    def config_schema(self) -> dict[str, Any]:
        """The JSON Schema of its config section: ``schemas/backends/<name>.schema.json``."""
        document: dict[str, Any] = json.loads(schema_text(f"backends/{self.name}"))
        return document
