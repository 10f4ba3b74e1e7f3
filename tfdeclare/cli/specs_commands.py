"""``plan`` and ``schema``: read-only commands on spec files (``validate`` has its own module)."""

from __future__ import annotations

import argparse
import json
import platform
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from tfdeclare import __version__
from tfdeclare.backends import registry
from tfdeclare.cli import elsewhere, parting, terminal
from tfdeclare.cli.common import (
    EXIT_CHANGES,
    EXIT_ERROR,
    EXIT_OK,
    Settings,
    UserError,
    check_state,
    print_backend_warnings,
    print_diagnostics,
    settings_from,
    stderr_line,
    stdout_write,
)
from tfdeclare.cli.output import document_text, is_document
from tfdeclare.cli.selection import selected_plan, selector_of
from tfdeclare.cli.validate_command import load_desired
from tfdeclare.core.plan.claims import FORMAT_VERSION, PLAN_KIND, STDIN_PATH
from tfdeclare.core.plan.desired import DesiredState
from tfdeclare.core.plan.markdown import render_markdown
from tfdeclare.core.plan.planner import Plan, PlanOptions, plan
from tfdeclare.core.plan.preempting import Room
from tfdeclare.core.plan.render import plan_json, render_json, render_text_parts
from tfdeclare.core.spec.schema import SCHEMA_NAMES, schema_text
from tfdeclare.files import write_atomic
from tfdeclare.shell.sources import prune_scope
from tfdeclare.shell.store import StateError, StateStore

__all__ = ["PLAN_KIND", "cmd_plan", "cmd_schema", "cmd_version", "compute_plan", "plan_options", "saved_plan"]


def plan_options(settings: Settings, paths: Sequence[str], *, prune: bool, allow_empty: bool) -> PlanOptions:
    """The options of a plan of ``paths`` (plan, apply, a saved plan's re-plan): the backend and
    quotas of ``settings``, and a prune that reaches only jobs last applied from ``paths``."""
    return PlanOptions(
        prune=prune,
        allow_empty=allow_empty,
        backend=settings.backend,
        quotas=settings.config.policy.quotas,
        max_jobs=settings.config.policy.max_jobs,
        scope=prune_scope(paths),
        room=plan_room(settings),
    )


def plan_room(settings: Settings) -> Room | None:
    """What the plan needs to say whom applying it preempts: the backend's room, when it
    knows it without asking a cluster, and the policy that protects jobs from preemption."""
    total = settings.plugin.room(settings.backend_config)
    if total is None:
        return None
    policy = settings.config.policy
    return Room(total, policy.non_preemptible_priority, policy.protected_classes)


def compute_plan(paths: list[str], settings: Settings, options: PlanOptions) -> tuple[Plan, DesiredState]:
    desired, files = load_desired(paths, settings, purpose="plan")
    parting.outlive(files)  # its cache of every file read (``cli.parting``)
    check_state(settings)  # read without the lock: only a folder of this user's alone
    try:
        observed = StateStore(settings.state_dir).observed()
    except StateError as err:
        raise UserError(str(err)) from err
    return plan(desired, observed, options, now=time.time()), desired


def saved_plan(result: Plan, desired: DesiredState, settings: Settings, paths: list[str]) -> dict[str, Any]:
    """The plan file: what `apply PLANFILE` reads the specs again from (``paths``, relative to
    the current folder) and the claims it checks them and a new plan against
    (``core.plan.claims``), refusing the plan when anything differs. It holds the specs,
    environment values included: keep it where you keep the specs."""
    return {
        "kind": PLAN_KIND,
        "formatVersion": FORMAT_VERSION,
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
        "emptyFiles": sorted(desired.empty_files),
        "files": list(desired.files),
        "plan": plan_json(result),
    }


def cmd_plan(args: argparse.Namespace) -> int:
    settings = settings_from(args)
    if args.out and STDIN_PATH in args.paths:
        raise UserError(
            f"not saving {args.out}: `apply PLANFILE` reads the specs again from the paths of the "
            "plan, and standard input (`-`) cannot be read again; save the spec to a file and plan that"
        )
    selector = selector_of(args)
    if selector and args.out:
        raise UserError(
            f"not saving {args.out}: a saved plan applies every job of its files, and -l shows only some; "
            "plan without -l to save one"
        )
    options = plan_options(settings, args.paths, prune=args.prune, allow_empty=args.allow_empty)
    result, desired = compute_plan(args.paths, settings, options)
    result = selected_plan(result, selector)  # only ever fewer jobs: never a prune more
    elsewhere.check(settings, result, applying=False)
    print_diagnostics(result.diagnostics, args.output)
    print_backend_warnings(settings, list(desired.jobs.values()))
    if args.output == "json":
        stdout_write(render_json(result))
    elif args.output == "yaml":
        stdout_write(document_text(plan_json(result), "yaml"))
    elif args.output == "markdown":
        stdout_write(render_markdown(result, link_base=args.link_base))
    else:
        paint = terminal.painter(sys.stdout)
        for part in render_text_parts(result, show_unchanged=args.show_unchanged, paint=paint):
            stdout_write(part)
    if args.out:
        if result.has_errors:
            raise UserError(f"not saving {args.out}: the specs have errors")
        document = saved_plan(result, desired, settings, args.paths)
        write_atomic(
            Path(args.out), (json.dumps(document, indent=1, sort_keys=True) + "\n").encode(), mode=0o600
        )
        hint = f"Saved the plan to {args.out}: run `tfdeclare apply {args.out}` to apply exactly this plan"
        if args.output == "text":  # the text plan's last line
            stdout_write(f"\n{hint}\n")
        else:  # on stderr: a document on stdout stays parseable
            stderr_line(hint)
    parting.outlive(result, desired)  # every job, planned: freed with the process (``cli.parting``)
    if result.has_errors:
        return EXIT_ERROR
    if args.detailed_exitcode and result.has_changes:
        return EXIT_CHANGES
    return EXIT_OK


def cmd_schema(args: argparse.Namespace) -> int:
    if args.name not in SCHEMA_NAMES:
        raise UserError(f"unknown schema {args.name!r}; one of {', '.join(SCHEMA_NAMES)}")
    if args.name == "config":  # with every backend's section composed in
        stdout_write(json.dumps(registry.config_schema(), indent=2, ensure_ascii=False) + "\n")
    else:
        stdout_write(schema_text(args.name))
    return EXIT_OK


def cmd_version(args: argparse.Namespace) -> int:
    if is_document(args.output):
        document = {
            "version": __version__,
            "apiVersion": "tfdeclare/v1",
            "python": platform.python_version(),
            "backends": list(registry.names()),
        }
        stdout_write(document_text(document, args.output))
    else:
        stdout_write(f"tfdeclare {__version__}\n")
    return EXIT_OK
