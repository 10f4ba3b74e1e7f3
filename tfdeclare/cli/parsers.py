"""The command line's parsers, kept apart from the commands so that parsing imports nothing
heavy: a command's module is imported only when that command runs (``tfdeclare validate``
must start fast)."""

from __future__ import annotations

import argparse
import datetime
import math
import re
import sys
import time
from collections.abc import Sequence
from typing import Any, NoReturn

from tfdeclare.cli.output import OUTPUT_FORMATS
from tfdeclare.core.spec.keys import TaskKey
from tfdeclare.core.spec.names import is_job_name

# As tfdeclare.core.spec.schema.SCHEMA_NAMES (a test holds them equal), without importing it here.
SCHEMA_NAMES = ("job", "status", "config")
EXIT_USAGE = 1  # as Terraform: 2 would read as "the plan has changes" under --detailed-exitcode


class Parser(argparse.ArgumentParser):
    """argparse with usage errors exiting 1, not 2 (docs/reference.md#exit-codes); no prefixes
    of options (``--detailed`` is an error, not ``--detailed-exitcode``: a later option that
    shares the prefix would change what a script means); a mistyped command or choice gets
    "did you mean" (argparse's own ``suggest_on_error`` comes with Python 3.14)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("allow_abbrev", False)
        super().__init__(*args, **kwargs)

    def _check_value(self, action: argparse.Action, value: Any) -> None:
        choices = action.choices
        if choices is None or value in choices or not isinstance(value, str):
            return super()._check_value(action, value)
        close = meant(value, [str(c) for c in choices])
        names = ", ".join(repr(c) for c in choices)
        hint = f"; did you mean {close!r}?" if close else ""
        raise argparse.ArgumentError(action, f"invalid choice: {value!r} (choose from {names}){hint}")

    def parse_args(  # type: ignore[override]
        self, args: Sequence[str] | None = None, namespace: argparse.Namespace | None = None
    ) -> argparse.Namespace:
        parsed, unknown = self.parse_known_args(args, namespace)
        if unknown:
            options = self._options_of(getattr(parsed, "command", None))
            hints = [
                f"did you mean {close}?"
                for word in unknown
                if word.startswith("-")
                for close in [meant(word.partition("=")[0], options)]
                if close
            ]
            self.error("; ".join([f"unrecognized arguments: {' '.join(unknown)}", *hints]))
        return parsed

    def _options_of(self, command: str | None) -> list[str]:
        """The long options the command line could have meant: this parser's and its command's."""
        parsers: list[argparse.ArgumentParser] = [self]
        for action in self._actions:
            if isinstance(action, argparse._SubParsersAction) and command in action.choices:
                parsers.append(action.choices[command])
        return [o for p in parsers for a in p._actions for o in a.option_strings if o.startswith("--")]

    def error(self, message: str) -> NoReturn:
        self.print_usage(sys.stderr)
        self.exit(EXIT_USAGE, f"{self.prog}: error: {message}\n")


def meant(word: str, known: Sequence[str]) -> str | None:
    """The word of ``known`` that ``word`` is a slip of: by edits first, as validate finds a
    mistyped field (a swap of neighbours is one edit: ``cg`` is ``gc``), else the closest by
    difflib's ratio; none for a word like no other."""
    import difflib  # here: only a mistyped word needs it (a faster start)

    from tfdeclare.core.spec.schema import close_name

    close = close_name(word, known)
    if close is not None:
        return close
    found = difflib.get_close_matches(word, known, n=1)
    return found[0] if found else None


def task_limit(text: str) -> int:
    """``--tasks``: a count of tasks, or ``all`` (-1)."""
    if text == "all":
        return -1
    if not (text.isascii() and text.isdigit()) or len(text) > 18:
        raise argparse.ArgumentTypeError(f"expected a number of tasks or `all`, got {text!r}")
    return int(text)


def task_offset(text: str) -> int:
    """``--tasks-offset``: a task's place, from 0."""
    if not (text.isascii() and text.isdigit()) or len(text) > 18:
        raise argparse.ArgumentTypeError(f"expected a task's place from 0, got {text!r}")
    return int(text)


def line_count(text: str) -> int:
    """``logs --tail``: a number of lines, 0 or more."""
    if not (text.isascii() and text.isdigit()) or len(text) > 18:
        raise argparse.ArgumentTypeError(f"expected a number of lines (0 or more), got {text!r}")
    return int(text)


_DURATION = re.compile(r"^(?:(\d+)h)?(?:(\d+)m)?(?:(\d+)s)?$")


def since_time(text: str) -> float:
    """``logs --since``: a duration ago (``10s``, ``5m``, ``2h``, ``1h30m``) or an RFC 3339 time
    with its offset (``2026-01-02T03:04:05Z``), as a Unix time."""
    found = _DURATION.match(text)
    if found and any(found.groups()):
        hours, minutes, seconds = (int(part or 0) for part in found.groups())
        return time.time() - (hours * 3600 + minutes * 60 + seconds)
    try:
        when = datetime.datetime.fromisoformat(text)
    except ValueError:
        when = None
    if when is None or when.tzinfo is None:
        raise argparse.ArgumentTypeError(
            f"expected a duration (10s, 5m, 2h, 1h30m) or an RFC 3339 time with its offset, got {text!r}"
        )
    return when.timestamp()


def job_name(text: str) -> str:
    """A NAME argument: a job name, so it can never name a file outside the state folders."""
    if not is_job_name(text):
        raise argparse.ArgumentTypeError(
            f"{text!r} is not a job name (lowercase letters, digits and '-', at most 63 characters)"
        )
    return text


def task_name(text: str) -> TaskKey:
    """A ``--task`` argument: ``worker-0``, as every output names tasks (``worker:0`` too)."""
    try:
        return TaskKey.parse(text)
    except ValueError as err:
        raise argparse.ArgumentTypeError(str(err)) from None


def seconds(text: str) -> float:
    """A time option such as ``apply --timeout``: a finite number of seconds, 0 or more."""
    return _seconds(text, 0.0, "0 or more")


def positive_seconds(text: str) -> float:
    """A period such as ``daemon --interval``: a finite number of seconds, more than 0."""
    return _seconds(text, math.ulp(0.0), "more than 0")


def _seconds(text: str, least: float, words: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not (math.isfinite(value) and value >= least):
        raise argparse.ArgumentTypeError(f"expected a number of seconds, {words}, got {text!r}")
    return value


def port_number(text: str) -> int:
    """``daemon --port``: 0 (any free port) to 65535."""
    if not (text.isascii() and text.isdigit()) or int(text) > 65535:
        raise argparse.ArgumentTypeError(f"expected a port number from 0 to 65535, got {text!r}")
    return int(text)


def at_least_one(text: str) -> int:
    """A count such as ``--limit``: a whole number, 1 or more."""
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number of at least 1")
    return value


PATHS_HELP = "spec files or folders (every *.yaml/*.yml below); - reads standard input"
OUTPUT_HELP = "how to print the result: text for people, json or yaml for programs"
SELECTOR_HELP = (
    "only the jobs whose metadata.labels match: KEY=VALUE, KEY!=VALUE, KEY (has it), !KEY (has it "
    "not); comma-separated or repeated, every term must match"
)


def _selector(parser: argparse.ArgumentParser) -> None:
    """``-l/--selector``: read by ``core.spec.selector`` in the command (a bad one: exit 1)."""
    parser.add_argument(
        "-l", "--selector", action="append", default=[], metavar="KEY=VALUE", help=SELECTOR_HELP
    )


def _specs_commands(sub: Any, common: argparse.ArgumentParser) -> None:
    validate = sub.add_parser(
        "validate",
        parents=[common],
        help="check spec files; exit 0 when valid, 1 otherwise",
        description="Check spec files (recursive *.yaml/*.yml under folders). Diagnostics are "
        "PATH:LINE:COL: error: MESSAGE (at $.json.path).",
    )
    validate.add_argument("paths", nargs="+", metavar="PATH", help=PATHS_HELP)
    validate.add_argument("-o", "--output", choices=OUTPUT_FORMATS, default="text", help=OUTPUT_HELP)
    validate.set_defaults(handler="tfdeclare.cli.validate_command:cmd_validate")

    plan_parser = sub.add_parser(
        "plan",
        parents=[common],
        help="show what apply would change, and why",
        description="Compare the spec files with what is applied and show each job's action "
        "(+ create, ~ update in place, ± resize, -/+ restart, - delete) with its reasons.",
    )
    plan_parser.add_argument("paths", nargs="+", metavar="PATH", help=PATHS_HELP)
    plan_parser.add_argument(
        "-o",
        "--output",
        choices=(*OUTPUT_FORMATS, "markdown"),
        default="text",
        help="how to print the plan (markdown: for a pull request's comment)",
    )
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
    _selector(plan_parser)
    plan_parser.add_argument(
        "--link-base",
        metavar="URL",
        help="-o markdown: link files under URL, e.g. https://github.com/OWNER/REPO/blob/COMMIT "
        "(default: links relative to the current folder)",
    )
    plan_parser.set_defaults(handler="tfdeclare.cli.specs_commands:cmd_plan")

    schema = sub.add_parser("schema", help="print a JSON Schema: job (default), status or config")
    schema.add_argument("name", nargs="?", default="job", choices=SCHEMA_NAMES, help="which schema")
    schema.set_defaults(handler="tfdeclare.cli.specs_commands:cmd_schema")

    explain = sub.add_parser(
        "explain",
        help="describe one field of the job spec: type, default, allowed values, its fields",
        description="Describe a field of the job spec (or, with --schema, of the status or config "
        "file) as `kubectl explain` does: its type, description, default, allowed values, pattern, "
        "bounds and the fields under it. FIELD is dotted (spec.replicas.worker.count) or a JSON path "
        "as diagnostics print it ($.spec.volumes[0].hostPath); none: the top. A list's items and a "
        "map's values are looked through: spec.volumes.hostPath, metadata.labels.team.",
    )
    explain.add_argument("field", nargs="?", default="", metavar="FIELD", help="the field (none: the top)")
    explain.add_argument(
        "--schema", choices=SCHEMA_NAMES, default="job", help="the schema: job (default), status or config"
    )
    explain.add_argument("--recursive", action="store_true", help="list every field below, as a tree")
    explain.add_argument("-o", "--output", choices=OUTPUT_FORMATS, default="text", help=OUTPUT_HELP)
    explain.set_defaults(handler="tfdeclare.cli.explain_command:cmd_explain")

    version = sub.add_parser("version", help="print the version (also --version)")
    version.add_argument("-o", "--output", choices=OUTPUT_FORMATS, default="text", help=OUTPUT_HELP)
    version.set_defaults(handler="tfdeclare.cli.specs_commands:cmd_version")
    convert = sub.add_parser(
        "convert",
        parents=[common],
        help="write Kubeflow TFJob manifests as native tfdeclare specs, comments kept",
        description="Convert Kubeflow kubeflow.org/v1 TFJob manifests to tfdeclare/v1 specs, keeping "
        "comments and key order. Prints to stdout unless --write. What cannot be carried over is a "
        "warning (and a comment atop the converted document). A manifest the config's policy or the "
        "backend refuses is an error, as in validate. Example: tfdeclare convert tfjob.yaml",
    )
    convert.add_argument(
        "files", nargs="+", metavar="FILE", help="Kubeflow TFJob manifests (- reads standard input)"
    )
    convert.add_argument(
        "-w",
        "--write",
        action="store_true",
        help="rewrite each file in place instead of printing (a link: the file it leads to)",
    )
    convert.set_defaults(handler="tfdeclare.cli.convert_command:cmd_convert")


def _run_commands(sub: Any, common: argparse.ArgumentParser) -> None:
    apply = sub.add_parser(
        "apply",
        parents=[common],
        help="make the running jobs match the files (or a saved plan)",
        description="Plan and apply: create, update, resize, restart (and with --prune delete) jobs so "
        "they match the files. Given a PLANFILE from `plan --out`, apply exactly that plan, or refuse it "
        "if stale.",
    )
    apply.add_argument(
        "paths", nargs="+", metavar="PATH|PLANFILE", help=f"{PATHS_HELP}; or one plan file of `plan --out`"
    )
    apply.add_argument("--wait", action="store_true", help="wait until every job has Succeeded or Failed")
    apply.add_argument(
        "--timeout", type=seconds, metavar="SECONDS", help="give up waiting after this long (exit 1)"
    )
    apply.add_argument(  # how long --wait stays silent before "Still running…" (tests shorten it)
        "--heartbeat-interval", type=positive_seconds, default=30.0, help=argparse.SUPPRESS
    )
    apply.add_argument("--prune", action="store_true", help="delete jobs that are gone from the files")
    apply.add_argument("--allow-empty", action="store_true", help="with --prune, allow deleting every job")
    apply.add_argument(
        "-o",
        "--output",
        choices=OUTPUT_FORMATS,
        default="text",
        help="json, yaml: one document at the end (the plan, each job's outcome) instead of progress",
    )
    apply.set_defaults(handler="tfdeclare.cli.run_commands:cmd_apply")

    status_parser = sub.add_parser(
        "status",
        parents=[common],
        help="show jobs and their tasks (reads the status files only)",
        description="Show the status files. Read-only: never takes the lock, never starts or stops "
        "anything. The daemon, apply and delete keep the files current; --refresh runs one "
        "reconcile pass first (it takes the lock, so not while a daemon runs).",
    )
    status_parser.add_argument(
        "name", nargs="?", metavar="NAME", type=job_name, help="one job (none: every job)"
    )
    status_parser.add_argument("-o", "--output", choices=OUTPUT_FORMATS, default="text", help=OUTPUT_HELP)
    status_parser.add_argument(
        "--refresh", action="store_true", help="reconcile once first: adopt tasks, notice ended ones"
    )
    status_parser.add_argument(
        "--problems",
        action="store_true",
        help="with -o json or yaml: an object {jobs: [...], problems: [...]} instead of the list (with NAME: "
        "the job's document with the problems that hold it back under problems); without it, -o json "
        "prints the standing problems on stderr",
    )
    status_parser.add_argument(
        "--tasks",
        type=task_limit,
        metavar="N",
        help="with NAME: list N of its tasks, or `all` (default: 20 in text; -o json: those its status "
        "file lists, at most 1000)",
    )
    status_parser.add_argument(
        "--tasks-offset",
        type=task_offset,
        default=0,
        metavar="I",
        help="with NAME: list its tasks from the I-th (0: the first), in role and index order",
    )
    _selector(status_parser)
    status_parser.add_argument(
        "-w",
        "--watch",
        action="store_true",
        help="then a row whenever a job's phase, tasks, restarts or message change, until Ctrl-C; with "
        "NAME until it has Succeeded (exit 0) or Failed (exit 1); -o json: a document a line per change",
    )
    status_parser.add_argument(  # how often --watch looks (tests shorten it)
        "--watch-interval", type=positive_seconds, default=1.0, help=argparse.SUPPRESS
    )
    status_parser.set_defaults(handler="tfdeclare.cli.status_command:cmd_status")

    history = sub.add_parser(
        "history",
        parents=[common],
        help="show the revisions the daemon acted on and their outcome (read-only)",
        description="Show the revisions (git commits, folder changes, applies) acted on, newest "
        "first: when, the revision, the outcome (applied, nothing to do, refused, partly applied, "
        "not applied) and the jobs changed. With JOB, only the entries that touched it and the attempt each "
        "started. Read-only: never takes the lock. To roll back, `git revert` the commit and push.",
    )
    history.add_argument(
        "job", nargs="?", metavar="JOB", type=job_name, help="only the entries that touched it"
    )
    history.add_argument("-o", "--output", choices=("text", "json", "yaml"), default="text", help=OUTPUT_HELP)
    history.add_argument("--limit", type=at_least_one, metavar="N", help="only the newest N entries")
    history.set_defaults(handler="tfdeclare.cli.history_command:cmd_history")

    logs = sub.add_parser(
        "logs",
        parents=[common],
        help="print a job's output: every task's lines prefixed, or one task's",
        description="Print a job's task output. Without --task every task's lines, each prefixed "
        "with its task (worker-0 | ...); with --follow they interleave as they are written, tasks "
        "that start later included. Python tasks run unbuffered (PYTHONUNBUFFERED=1 unless the spec "
        "sets it), so lines appear as they are printed. On Mesos a task's stdout and stderr are two "
        "sandbox files: without --follow its stdout, then a --- stderr --- line and its stderr; with "
        "--follow both are read in turn and each line printed as it is read (each stream in order; "
        "lines of the two written within a fraction of a second may swap).",
    )
    logs.add_argument(
        "name", nargs="?", metavar="NAME", type=job_name, help="the job (or -l: the jobs it selects)"
    )
    _selector(logs)
    logs.add_argument(
        "--task",
        metavar="ROLE-INDEX",
        type=task_name,
        help="only this task, its output as written: worker-0 (or worker:0; a bare role is its task 0)",
    )
    logs.add_argument(
        "-f", "--follow", action="store_true", help="keep printing until the job (or the task) has ended"
    )
    logs.add_argument(
        "--tail",
        type=line_count,
        metavar="N",
        help="only the last N lines of each task's log (Mesos: of its stdout and of its stderr; then, "
        "with --follow, what comes)",
    )
    logs.add_argument(
        "--since",
        type=since_time,
        metavar="DURATION|TIME",
        help="only lines written since: 10s, 5m, 2h, 1h30m ago, or an RFC 3339 time (local backend)",
    )
    logs.add_argument(
        "--timestamps",
        action="store_true",
        help="prefix each line with when it was written, RFC 3339 in UTC, to the millisecond (local backend)",
    )
    logs.add_argument(
        "-p",
        "--previous",
        action="store_true",
        help="the log of each task's launch before the current one (a restarted task's last run)",
    )
    logs.add_argument(
        "-o",
        "--output",
        choices=OUTPUT_FORMATS,
        default="text",
        help='json: {"task", "line"} per line (yaml: one document each)',
    )
    logs.set_defaults(handler="tfdeclare.cli.logs_command:cmd_logs")

    delete = sub.add_parser("delete", parents=[common], help="stop jobs and forget them")
    delete.add_argument("names", nargs="*", metavar="NAME", type=job_name, help="the jobs to delete")
    delete.add_argument("--all", action="store_true", help="every job in the state folder")
    _selector(delete)
    delete.add_argument(
        "--ignore-not-found",
        action="store_true",
        help="a NAME with no job is no error (scripts that clean up what may not be there)",
    )
    delete.add_argument("--timeout", type=seconds, default=120.0, metavar="SECONDS")
    delete.add_argument(
        "-o",
        "--output",
        choices=OUTPUT_FORMATS,
        default="text",
        help="json, yaml: deleted and missing names",
    )
    delete.set_defaults(handler="tfdeclare.cli.run_commands:cmd_delete")

    gc = sub.add_parser(
        "gc",
        parents=[common],
        help="remove git snapshots no job uses (also those kept for files tasks wrote in them)",
        description="Remove the daemon's git snapshots that no job record or live task uses, "
        "including those it keeps because they hold files their commit does not (written by a "
        "task). Takes the controller lock: stop the daemon first.",
    )
    gc.add_argument("--dry-run", action="store_true", help="list what would be removed, remove nothing")
    gc.add_argument("-o", "--output", choices=OUTPUT_FORMATS, default="text", help=OUTPUT_HELP)
    gc.set_defaults(handler="tfdeclare.cli.gc_command:cmd_gc")


def _completion_command(sub: Any) -> None:
    completion = sub.add_parser(
        "completion",
        help="print a shell's completion script: bash, zsh or fish",
        description="Print the completion script of a shell. Load it from the shell's start-up "
        "file: bash `source <(tfdeclare completion bash)` in ~/.bashrc; zsh `source <(tfdeclare "
        "completion zsh)` in ~/.zshrc after compinit; fish `tfdeclare completion fish | source` in "
        "~/.config/fish/config.fish. Commands, options, their values and job names complete.",
    )
    completion.add_argument("shell", choices=("bash", "zsh", "fish"), help="the shell")
    completion.set_defaults(handler="tfdeclare.cli.completion:cmd_completion")


def _daemon_command(sub: Any, common: argparse.ArgumentParser) -> None:
    daemon = sub.add_parser(
        "daemon",
        parents=[common],
        help="keep the jobs converged on a folder or a git branch",
        description="Watch a folder (file events) or a git branch (fetched every --interval and "
        "on POST /sync) and reconcile: create, update, resize, restart jobs as their files change, "
        "restart failed tasks by policy, write status. Serves /healthz, /metrics, /jobs on 127.0.0.1.",
    )
    where = daemon.add_mutually_exclusive_group(required=True)
    where.add_argument("--specs", metavar="DIR", help="a folder of job files")
    where.add_argument("--git", metavar="URL", help="a git repository")
    daemon.add_argument("--branch", default="main", help="the branch to apply (default main)")
    daemon.add_argument(
        "--path", default=".", metavar="SUBDIR", help="folder of the job files in the repository"
    )
    daemon.add_argument(
        "--interval", type=positive_seconds, metavar="SECONDS", help="resync (and fetch) period (default 30)"
    )
    daemon.add_argument("--prune", action="store_true", help="delete jobs that are gone from the source")
    daemon.add_argument("--allow-empty", action="store_true", help="with --prune, allow deleting every job")
    daemon.add_argument(
        "--status-branch", metavar="B", help="git mode: branch for status files (default tfdeclare-status)"
    )
    daemon.add_argument(
        "--push-status",
        action="store_true",
        help="git mode: push the status branch to origin (a refused push is tried again, backing off, "
        "and shown in /healthz)",
    )
    daemon.add_argument("--host", help="address of the HTTP endpoints (default 127.0.0.1)")
    daemon.add_argument(
        "--port", type=port_number, help="port of the HTTP endpoints (default 8470; 0: any free port)"
    )
    daemon.add_argument("--log-format", choices=("text", "json"), help="log lines as text (default) or JSON")
    daemon.set_defaults(handler="tfdeclare.cli.daemon_command:cmd_daemon")


def add_parsers(sub: Any, common: argparse.ArgumentParser) -> None:
    _specs_commands(sub, common)
    _run_commands(sub, common)
    _daemon_command(sub, common)
    _completion_command(sub)
