"""The backends tfdeclare knows, by name: each backend package registers one plugin here
(``tfdeclare.backends.plugin.BackendPlugin``), and everything else finds backends through
this module: ``--backend`` choices, the config schema and file, spec checks, construction.

Cheap to import: plugin modules import their backend's heavy parts only when it is built.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Mapping
from typing import Any

from tfdeclare.backends.local.plugin import PLUGIN as LOCAL
from tfdeclare.backends.mesos.plugin import PLUGIN as MESOS
from tfdeclare.backends.plugin import BackendPlugin
from tfdeclare.core.config import Config, parse_config
from tfdeclare.core.diagnostics import Diagnostic
from tfdeclare.core.spec.schema import Schema, schema_text

PLUGINS: Mapping[str, BackendPlugin[Any]] = {p.name: p for p in (LOCAL, MESOS)}


class UnknownBackend(LookupError):
    def __init__(self, name: str) -> None:
        super().__init__(f"unknown backend {name!r}; one of {', '.join(PLUGINS)}")


def names() -> tuple[str, ...]:
    return tuple(PLUGINS)


def plugin(name: str) -> BackendPlugin[Any]:
    try:
        return PLUGINS[name]
    except KeyError:
        raise UnknownBackend(name) from None


def config_schema() -> dict[str, Any]:
    """The config file's JSON Schema: ``schemas/config.schema.json`` with each backend's section
    (its schema fragment) and the backend names composed in."""
    document: dict[str, Any] = json.loads(schema_text("config"))
    properties = document["properties"]
    properties["backend"]["enum"] = list(PLUGINS)
    examples = []
    for name, entry in PLUGINS.items():
        fragment = {k: v for k, v in entry.config_schema().items() if k not in ("$schema", "$id")}
        examples += [{**document["examples"][0], "backend": name, name: e} for e in fragment["examples"]]
        properties[name] = fragment
    document["examples"] = examples
    return document


def parse_config_file(path: str, data: bytes, base_dir: str | None) -> tuple[Config | None, list[Diagnostic]]:
    """The config file, every backend's section parsed by its plugin (so a mistake in any
    section is reported, whichever backend is chosen)."""
    sections = {name: entry.parse_config for name, entry in PLUGINS.items()}
    return parse_config(path, data, _compiled_schema(), sections, base_dir)


@functools.cache
def _compiled_schema() -> Schema:
    return Schema(config_schema())
