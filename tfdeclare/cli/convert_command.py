"""``convert``: Kubeflow TFJob manifests -> native specs, comments and key order kept.

To stdout by default (several files: one YAML stream, documents separated by ``---``);
``--write`` rewrites each file in place, atomically (a file without a Kubeflow TFJob is left
alone). A file with errors is not converted: its diagnostics are printed and the exit code
is 1. Errors include what ``validate`` reports: the config's policy and the backend's rules.
What cannot be carried over is printed as warnings and listed atop the converted document.

``-`` reads standard input (shown as <stdin>) and writes to stdout; ``--write`` with ``-`` is a
usage error. ``--write`` of a symbolic link rewrites the file it leads to (resolved, that
file checked as a named one is: a regular file), and the link stays a link: replacing the
link by a converted copy would leave the file it named unconverted.
"""

from __future__ import annotations

import argparse
import os
import stat
import sys
from pathlib import Path

from tfdeclare.cli.common import (
    EXIT_ERROR,
    EXIT_OK,
    UserError,
    print_diagnostics,
    settings_from,
    stdout_write,
)
from tfdeclare.cli.parsers import EXIT_USAGE
from tfdeclare.core.spec.documents import MAX_FILE_BYTES
from tfdeclare.core.spec.loader import STDIN_NAME, load_file
from tfdeclare.files import write_atomic
from tfdeclare.shell.sources import load_spec_file, spec_sources


def cmd_convert(args: argparse.Namespace) -> int:
    from tfdeclare.shell.convert import convert_text  # ruamel.yaml: only this command needs it

    if args.write and "-" in args.files:
        sys.stderr.write("tfdeclare convert: error: --write cannot rewrite standard input (-)\n")
        return EXIT_USAGE
    settings = settings_from(args)
    failed = False
    outputs: list[str] = []
    for name in args.files:
        checks = settings.reading(spec_sources([name])).spec_checks
        path = _written(name) if args.write else Path(name)  # checked before it is read
        try:
            if name == "-":
                data = sys.stdin.buffer.read(MAX_FILE_BYTES + 1)  # the loader refuses more
                result = load_file(STDIN_NAME, data, checks)
            else:
                data, result = load_spec_file(name, checks)
        except OSError as err:
            raise UserError(f"{name}: cannot read: {err.strerror or err}") from err
        print_diagnostics(result.diagnostics)
        if result.has_errors:
            failed = True
            continue
        converted = convert_text(data.decode("utf-8"))
        if args.write:
            if converted.kubeflow_documents:
                write_atomic(path, converted.text.encode("utf-8"), mode=path.stat().st_mode & 0o777)
        else:
            outputs.append(converted.text)
    if outputs:
        stdout_write("---\n".join(outputs))
    return EXIT_ERROR if failed else EXIT_OK


def _written(name: str) -> Path:
    """The file ``--write`` rewrites for ``name``: itself, or the file a link leads to (so the
    link stays a link); either must be a regular file (never a FIFO, whose read would wait)."""
    path = Path(name)
    target = Path(os.path.realpath(path)) if path.is_symlink() else path
    try:
        regular = stat.S_ISREG(os.stat(target, follow_symlinks=False).st_mode)
    except OSError as err:
        raise UserError(f"{name}: cannot read: {err.strerror or err}") from err
    if not regular:
        shown = name if target == path else f"{name} (a link to {target})"
        raise UserError(f"{shown}: not a regular file: --write rewrites only files")
    return target
