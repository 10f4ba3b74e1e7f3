"""``explain FIELD.PATH``: one field of a schema (the job's by default), as ``kubectl explain``
shows one: type, description, default, allowed values, bounds and the fields under it. The
walking and the wording are the core's (``core/spec/explain.py``); this module reads the
schema and prints."""

from __future__ import annotations

import argparse
import json
from typing import Any

from tfdeclare.cli.common import EXIT_OK, UserError, stdout_write
from tfdeclare.cli.output import document_text, is_document
from tfdeclare.core.spec.explain import NoField, explain_json, explain_text, field_at, parse_path
from tfdeclare.core.spec.schema import schema_text


def schema_document(name: str) -> dict[str, Any]:
    """The schema ``tfdeclare schema NAME`` prints (the config's with every backend's section)."""
    if name == "config":
        from tfdeclare.backends import registry

        return registry.config_schema()
    document: dict[str, Any] = json.loads(schema_text(name))
    return document


def cmd_explain(args: argparse.Namespace) -> int:
    document = schema_document(args.schema)
    path = parse_path(args.field or "")
    title = str(document.get("title", ""))
    if path and title and path[0].lower() == title.lower():  # kubectl's `explain pod.spec`
        path = path[1:]
    try:
        field = field_at(document, path)
    except NoField as err:
        raise UserError(str(err)) from None
    if is_document(args.output):
        found = {"schema": args.schema, **explain_json(field, document, recursive=args.recursive)}
        stdout_write(document_text(found, args.output, ensure_ascii=False))
    else:
        stdout_write(explain_text(field, document, recursive=args.recursive))
    return EXIT_OK
