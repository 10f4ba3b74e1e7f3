"""``validate``: check spec files, fast (this module imports only what loading needs)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Literal

from tfdeclare.cli import terminal
from tfdeclare.cli.common import EXIT_ERROR, EXIT_OK, Settings, print_diagnostics, settings_from, stdout_write
from tfdeclare.cli.output import document_text, is_document
from tfdeclare.core.plan.desired import DesiredState
from tfdeclare.core.plan.quotas import enforce_max_jobs, enforce_quotas
from tfdeclare.core.spec.documents import MAX_FILE_BYTES
from tfdeclare.core.tone import Tone
from tfdeclare.shell.sources import SpecFiles, no_files_warning, spec_sources


def load_desired(
    paths: list[str], settings: Settings, *, purpose: Literal["apply", "plan", "validate"] = "apply"
) -> tuple[DesiredState, SpecFiles]:
    """The specs as the command ``purpose`` sees them, with its checks: ``apply``'s
    (``Settings.launch_checks``), ``plan``'s (``plan_checks``: this machine's findings as
    warnings) or ``validate``'s (``spec_checks``: files only); ``-`` reads one file from
    standard input (shown as <stdin>)."""
    settings.refuse_overlap(paths)
    stdin = sys.stdin.buffer.read(MAX_FILE_BYTES + 1) if "-" in paths else None  # the loader bounds it
    settings = settings.reading(spec_sources(paths))
    checks = (
        settings.spec_checks
        if purpose == "validate"
        else settings.plan_checks
        if purpose == "plan"
        else settings.launch_checks
    )
    files = SpecFiles(
        [Path(p) for p in paths if p != "-"],
        checks=checks,
        exclude=(settings.state_dir, settings.status_dir),
        skip_files=settings.config_files,
        stdin=stdin,
    )
    return files.load(), files


def cmd_validate(args: argparse.Namespace) -> int:
    settings = settings_from(args)
    desired, _ = load_desired(args.paths, settings, purpose="validate")
    # the quotas as if the files were all that ran (validate never reads the state)
    desired = enforce_quotas(desired, {}, settings.config.policy.quotas, prune=False)
    desired = enforce_max_jobs(desired, {}, settings.config.policy.max_jobs, prune=False)
    diagnostics = list(desired.diagnostics)
    if not desired.files and not diagnostics:
        diagnostics.append(no_files_warning([Path(p) for p in args.paths if p != "-"]))
    valid = not any(d.is_error for d in diagnostics)
    if is_document(args.output):
        document = {
            "valid": valid,
            "files": len(desired.files),
            "jobs": sorted(desired.jobs),
            "diagnostics": [d.to_json() for d in diagnostics],
        }
        stdout_write(document_text(document, args.output))
    else:
        print_diagnostics(diagnostics)
        paint = terminal.painter(sys.stdout)
        errors = sum(1 for d in diagnostics if d.is_error)
        if valid:
            line = paint(f"{len(desired.jobs)} job(s) in {len(desired.files)} file(s): valid", Tone.GOOD)
        else:
            places = len({d.path for d in diagnostics if d.is_error})
            line = paint(f"{errors} error(s) in {places} file(s)", Tone.BAD)
        stdout_write(line + "\n")
    return EXIT_OK if valid else EXIT_ERROR
