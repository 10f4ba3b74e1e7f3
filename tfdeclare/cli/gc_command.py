"""``gc``: remove the git snapshots no job or task uses any more, including those the daemon
keeps because tasks wrote files into them (it never deletes what a task wrote on its own).

It takes the controller lock like ``apply`` (stop the daemon first), so no snapshot can become
current or be launched from while it is removed. ``--dry-run`` lists what would go.
"""

from __future__ import annotations

import argparse

from tfdeclare.cli.common import EXIT_OK, settings_from, stdout_write
from tfdeclare.cli.daemon_command import folders_in_use
from tfdeclare.cli.output import document_text, is_document
from tfdeclare.cli.wiring import controller_for, locked
from tfdeclare.daemon.sources import GitSettings, GitSource

_SHOWN = 5  # foreign files named per snapshot


def cmd_gc(args: argparse.Namespace) -> int:
    settings = settings_from(args)
    workdir = settings.state_dir / "git"
    removed: list[tuple[str, list[str]]] = []
    if (workdir / "revisions").is_dir():
        with locked(settings, "gc"), controller_for(settings) as controller:
            source = GitSource(GitSettings(url="", branch="-", status_branch="-status"), workdir)
            removed = source.collect(folders_in_use(controller), dry_run=args.dry_run)
    if is_document(args.output):
        removed_json = [{"revision": commit, "foreignFiles": foreign} for commit, foreign in removed]
        stdout_write(document_text({"dryRun": args.dry_run, "removed": removed_json}, args.output))
        return EXIT_OK
    verb = "would remove" if args.dry_run else "removed"
    for commit, foreign in removed:
        line = f"{verb} the snapshot of revision {commit[:12]}"
        if foreign:
            shown = ", ".join(foreign[:_SHOWN]) + (", ..." if len(foreign) > _SHOWN else "")
            line += f", with {len(foreign)} file(s) its commit does not have: {shown}"
        stdout_write(line + "\n")
    if not removed:
        stdout_write("No unused git snapshots.\n")
    return EXIT_OK
