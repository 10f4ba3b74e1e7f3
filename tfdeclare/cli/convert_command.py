"""``convert``: Kubeflow TFJob manifests -> native specs, comments and key order kept.

To stdout by default (several files: one YAML stream, documents separated by ``---``);
``--write`` rewrites each file in place, atomically (a file without a Kubeflow TFJob is left
alone). A file with errors is not converted: its diagnostics are printed and the exit code
is 1. Errors include what ``validate`` reports: the config's policy and the backend's rules.
What cannot be carried over is printed as warnings and listed atop the converted document.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from tfdeclare.cli.common import (
    EXIT_ERROR,
    EXIT_OK,
    UserError,
    print_diagnostics,
    settings_from,
    stdout_write,
)
from tfdeclare.files import write_atomic
from tfdeclare.shell.sources import load_spec_file, spec_sources


def cmd_convert(args: argparse.Namespace) -> int:
    from tfdeclare.shell.convert import convert_text  # ruamel.yaml: only this command needs it

    settings = settings_from(args)
    failed = False
    outputs: list[str] = []
    for name in args.files:
        path = Path(name)
        try:
            data, result = load_spec_file(name, settings.reading(spec_sources([name])).spec_checks)
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
