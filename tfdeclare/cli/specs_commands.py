"""``validate``, ``plan`` and ``schema``: the read-only commands on spec files."""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path
from typing import Any

from tfdeclare import __version__
from tfdeclare.cli.common import (
    EXIT_CHANGES,
    EXIT_ERROR,
    EXIT_OK,
    Settings,
    UserError,
    print_diagnostics,
    settings_from,
    stdout_write,
)
from tfdeclare.core.desired import DesiredState
from tfdeclare.core.planner import Plan, PlanOptions, plan
from tfdeclare.core.render import plan_json, render_json, render_markdown, render_text
from tfdeclare.core.schema import SCHEMA_NAMES, schema_text
from tfdeclare.files import write_atomic
from tfdeclare.shell.sources import SpecFiles, no_files_warning
from tfdeclare.shell.store import StateError, StateStore

PLAN_KIND = "TFDeclarePlan"


def load_desired(paths: list[str], settings: Settings) -> tuple[DesiredState, SpecFiles]:
    files = SpecFiles(
        [Path(p) for p in paths],
        context=settings.load_context,
        exclude=(settings.state_dir, settings.status_dir),
    )
    return files.load(), files


def cmd_validate(args: argparse.Namespace) -> int:
    settings = settings_from(args)
    desired, _ = load_desired(args.paths, settings)
    diagnostics = list(desired.diagnostics)
    if not desired.files and not diagnostics:
        diagnostics.append(no_files_warning([Path(p) for p in args.paths]))
    valid = not any(d.is_error for d in diagnostics)
    if args.output == "json":
        stdout_write(
            json.dumps(
                {
                    "valid": valid,
                    "files": len(desired.files),
                    "jobs": sorted(desired.jobs),
                    "diagnostics": [d.to_json() for d in diagnostics],
                },
                indent=2,
            )
            + "\n"
        )
    else:
        print_diagnostics(diagnostics)
        errors = sum(1 for d in diagnostics if d.is_error)
        if valid:
            stdout_write(f"{len(desired.jobs)} job(s) in {len(desired.files)} file(s): valid\n")
        else:
            stdout_write(f"{errors} error(s) in {len(desired.invalid_files)} file(s)\n")
    return EXIT_OK if valid else EXIT_ERROR


def compute_plan(paths: list[str], settings: Settings, options: PlanOptions) -> tuple[Plan, DesiredState]:
    desired, _ = load_desired(paths, settings)
    try:
        observed = StateStore(settings.state_dir).observed()
    except StateError as err:
        raise UserError(str(err)) from err
    return plan(desired, observed, options), desired


def saved_plan(result: Plan, desired: DesiredState, settings: Settings, paths: list[str]) -> dict[str, Any]:
    """The plan file: everything `apply PLANFILE` needs to re-plan from the same specs and to
    refuse the plan when the state it was computed against has moved (it holds the specs,
    environment values included: keep it where you keep the specs)."""
    return {
        "kind": PLAN_KIND,
        "formatVersion": 1,
        "tfdeclareVersion": __version__,
        "createdAt": time.time(),
        "backend": settings.backend,
        "stateDir": str(settings.state_dir),
        "paths": paths,
        "observedFingerprint": result.observed_fingerprint,
        "desiredAll": {
            name: {"spec": dict(job.canonical), "file": job.source.file, "line": job.source.line}
            for name, job in desired.jobs.items()
        },
        "protected": sorted(desired.protected),
        "invalidFiles": sorted(desired.invalid_files),
        "files": list(desired.files),
        "plan": plan_json(result),
    }


def cmd_plan(args: argparse.Namespace) -> int:
    settings = settings_from(args)
    options = PlanOptions(prune=args.prune, allow_empty=args.allow_empty)
    result, desired = compute_plan(args.paths, settings, options)
    print_diagnostics(result.diagnostics)
    if args.output == "json":
        stdout_write(render_json(result))
    elif args.output == "markdown":
        stdout_write(render_markdown(result))
    else:
        stdout_write(render_text(result, show_unchanged=args.show_unchanged))
    if args.out:
        if result.has_errors:
            raise UserError(f"not saving {args.out}: the specs have errors")
        document = saved_plan(result, desired, settings, args.paths)
        write_atomic(Path(args.out), (json.dumps(document, indent=1, sort_keys=True) + "\n").encode())
    if result.has_errors:
        return EXIT_ERROR
    if args.detailed_exitcode and result.has_changes:
        return EXIT_CHANGES
    return EXIT_OK


def cmd_schema(args: argparse.Namespace) -> int:
    if args.name not in SCHEMA_NAMES:
        raise UserError(f"unknown schema {args.name!r}; one of {', '.join(SCHEMA_NAMES)}")
    stdout_write(schema_text(args.name))
    return EXIT_OK


def add_parsers(sub: Any, common: argparse.ArgumentParser) -> None:
    validate = sub.add_parser(
        "validate",
        parents=[common],
        help="check spec files; exit 0 when valid, 1 otherwise",
        description="Check spec files (recursive *.yaml/*.yml under folders). Diagnostics are "
        "PATH:LINE:COL: error: MESSAGE (at $.json.path).",
    )
    validate.add_argument("paths", nargs="+", metavar="PATH")
    validate.add_argument("-o", "--output", choices=("text", "json"), default="text")
    validate.set_defaults(func=cmd_validate)

    plan_parser = sub.add_parser(
        "plan",
        parents=[common],
        help="show what apply would change, and why",
        description="Compare the spec files with what is applied and show each job's action "
        "(+ create, ~ update in place, ± resize, -/+ restart, - delete) with its reasons.",
    )
    plan_parser.add_argument("paths", nargs="+", metavar="PATH")
    plan_parser.add_argument("-o", "--output", choices=("text", "json", "markdown"), default="text")
    plan_parser.add_argument("--out", metavar="PLANFILE", help="save the plan for `tfdeclare apply PLANFILE`")
    plan_parser.add_argument(
        "--detailed-exitcode", action="store_true", help="exit 2 when the plan has changes (0 none, 1 error)"
    )
    plan_parser.add_argument("--prune", action="store_true", help="delete jobs that are gone from the files")
    plan_parser.add_argument(
        "--allow-empty",
        action="store_true",
        help="with --prune, allow deleting every job when the files define none",
    )
    plan_parser.add_argument("--show-unchanged", action="store_true", help="list unchanged jobs too")
    plan_parser.set_defaults(func=cmd_plan)

    schema = sub.add_parser("schema", help="print a JSON Schema: job (default), status or config")
    schema.add_argument("name", nargs="?", default="job")
    schema.set_defaults(func=cmd_schema)
