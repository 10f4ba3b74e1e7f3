"""Shell completion through argcomplete: ``tfdeclare completion bash|zsh|fish`` prints the
shell's hook, which on TAB runs ``tfdeclare`` with argcomplete's environment variables; the
command line's own parser then answers (commands, options, choices, job names from the
status folder, a job's tasks for ``--task``, the schema's field paths for ``explain``), so
completion never lags behind the parser.
argcomplete is imported only then and by ``completion``: other commands do not pay for it.
"""

from __future__ import annotations

import argparse
import os
from typing import Any

from tfdeclare.cli.common import EXIT_OK, settings_from, stdout_write
from tfdeclare.cli.parsers import job_name


def _job_names(prefix: str, parsed_args: argparse.Namespace, **_: Any) -> list[str]:
    """Names of the jobs with a status file (the folder the command line would use)."""
    from tfdeclare.shell.statuswriter import StatusWriter

    try:
        settings = settings_from(parsed_args)
        return [n for n in StatusWriter(settings.status_dir).names() if n.startswith(prefix)]
    except Exception:  # a completion never fails loudly (a bad config, no folder)
        return []


def _task_names(prefix: str, parsed_args: argparse.Namespace, **_: Any) -> list[str]:
    """The tasks of the job named before (``logs NAME --task``), as every output names them:
    ``worker-0``. A prefix in the alias form (``worker:``) completes the alias."""
    from tfdeclare.shell.lock import check_state_folder
    from tfdeclare.shell.store import StateStore

    try:
        state_dir = settings_from(parsed_args).state_dir
        check_state_folder(state_dir, reading=True)  # else nothing is read: no completions
        record = StateStore(state_dir).load(parsed_args.name)
        keys = record.spec.task_keys() if record is not None else ()
        names = [f"{k.role}:{k.index}" if ":" in prefix else k.name for k in keys]
        return [n for n in names if n.startswith(prefix)]
    except Exception:  # a completion never fails loudly
        return []


def _field_paths(prefix: str, parsed_args: argparse.Namespace, **_: Any) -> list[str]:
    """``explain FIELD``: the field paths of the schema (``--schema``, else the job's) that
    complete ``prefix``, one level at a time."""
    from tfdeclare.cli.explain_command import schema_document
    from tfdeclare.core.spec.explain import completions

    try:
        return completions(schema_document(getattr(parsed_args, "schema", None) or "job"), prefix)
    except Exception:  # a completion never fails loudly
        return []


def _with_completers(parser: argparse.ArgumentParser) -> None:
    """Job NAME arguments complete from the status folder, in every command that takes one;
    ``--task`` from the job's tasks; ``explain FIELD`` from the schema's fields."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub in action.choices.values():
                _with_completers(sub)
        elif action.type is job_name:
            action.completer = _job_names  # type: ignore[attr-defined]
        elif "--task" in action.option_strings:
            action.completer = _task_names  # type: ignore[attr-defined]
        elif action.metavar == "FIELD":
            action.completer = _field_paths  # type: ignore[attr-defined]


def complete_if_asked(parser: argparse.ArgumentParser) -> None:
    """Answer a shell's completion request (and exit), when this process is one."""
    if "_ARGCOMPLETE" not in os.environ:
        return
    import argcomplete

    _with_completers(parser)
    argcomplete.autocomplete(parser)


def cmd_completion(args: argparse.Namespace) -> int:
    from argcomplete.shell_integration import shellcode

    stdout_write(shellcode(["tfdeclare"], shell=args.shell))
    return EXIT_OK
