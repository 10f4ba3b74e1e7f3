"""What every command shares: errors and exit codes, settings from config + options, output.

Exit codes (docs/reference.md#exit-codes): 0 success, 1 user or environment error, 2 plan has
changes (with ``--detailed-exitcode``), 3 internal error, 130 interrupted.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from enum import Enum
from functools import partial
from pathlib import Path
from typing import Any

from tfdeclare.backends import registry
from tfdeclare.backends.plugin import BackendPlugin
from tfdeclare.cli import terminal
from tfdeclare.core.config import Config
from tfdeclare.core.diagnostics import Diagnostic
from tfdeclare.core.spec.loader import LoadedJob, Locate, SpecCheck
from tfdeclare.core.spec.policy import SpecSources, policy_checks

EXIT_OK = 0
EXIT_ERROR = 1
EXIT_CHANGES = 2
EXIT_INTERNAL = 3
EXIT_INTERRUPTED = 130

DEFAULT_CONFIG = "tfdeclare.yaml"


class UserError(Exception):
    """A problem the user can fix; printed as one line (plus diagnostics), exit code 1."""

    def __init__(self, message: str, diagnostics: Sequence[Diagnostic] = ()) -> None:
        super().__init__(message)
        self.diagnostics = tuple(diagnostics)


# Container engines' sockets: a task that reaches one starts containers of its own, with any
# host folder mounted (on this machine and, at their default paths, on Mesos agents).
ENGINE_SOCKETS = ("/var/run/docker.sock", "/run/docker.sock", "/run/containerd", "/var/run/containerd")


def engine_sockets() -> tuple[str, ...]:
    """The default engine sockets and the one ``DOCKER_HOST`` names, if a local one."""
    host = os.environ.get("DOCKER_HOST", "")
    named = (host.removeprefix("unix://"),) if host.startswith("unix://") else ()
    return tuple(dict.fromkeys((*named, *ENGINE_SOCKETS)))


@dataclass(frozen=True, slots=True)
class Settings:
    config: Config
    state_dir: Path
    status_dir: Path
    config_path: Path | None
    sources: SpecSources | None = None  # where the specs are read from (the source-folder rule)
    # why the state folder is where it is, for a person ("--state-dir", "TFDECLARE_STATE_DIR",
    # "the config FILE", "the default"): plan and apply say it when it is not ./.tfdeclare
    state_dir_from: str = "the default"

    def reading(self, sources: SpecSources) -> Settings:
        """These settings for specs read from ``sources``."""
        return replace(self, sources=sources)

    def refuse_overlap(self, paths: Sequence[str | Path]) -> None:
        """A ``UserError`` when the state or status folder is a folder the specs are read from
        (one given, or a given file's own): a walk passes over those folders, so the specs
        there would go unread, and a job's status file (``<name>.yaml``) would be written over
        the spec file of that name (or the daemon, reading none, would prune every job)."""
        own = {
            os.path.realpath(self.status_dir): ("status folder", "--status-dir", "./status"),
            os.path.realpath(self.state_dir): ("state folder", "--state-dir", "./.tfdeclare"),
        }
        for path in paths:
            if str(path) == "-":
                continue
            folder = path if os.path.isdir(path) else os.path.dirname(os.path.abspath(path))
            found = own.get(os.path.realpath(folder))
            if found is not None:
                what, option, default = found
                raise UserError(
                    f"the {what} is where the specs are ({path}): status and state files are "
                    f"not specs, and would be written beside them; give the {what} a folder of "
                    f"its own ({option}, default {default})"
                )

    @property
    def config_files(self) -> tuple[Path, ...]:
        """The config file in effect, which a walk of the spec folders passes over (it is
        no job; ``shell.sources``)."""
        return (self.config_path,) if self.config_path is not None else ()

    @property
    def backend(self) -> str:
        return self.config.backend

    @property
    def plugin(self) -> BackendPlugin[Any]:
        return registry.plugin(self.config.backend)

    @property
    def backend_config(self) -> Any:
        """The chosen backend's own config (its section of the config file, or its defaults)."""
        return self.config_of(self.config.backend)

    def config_of(self, backend: str) -> Any:
        """A backend's own config (its section of the config file, or its defaults)."""
        config = self.config.backends.get(backend)
        return config if config is not None else registry.plugin(backend).config_type()

    def with_page_url(self, url: str) -> Settings:
        """These settings with the chosen backend told where the daemon's status page is."""
        if self.plugin.with_page_url is None:
            return self
        backends = {**self.config.backends, self.backend: self.plugin.with_page_url(self.backend_config, url)}
        return replace(self, config=replace(self.config, backends=backends))

    @property
    def spec_checks(self) -> tuple[SpecCheck, ...]:
        """What every job is checked for besides its schema (validate, plan, apply, the daemon):
        the config's policy, and what the chosen backend cannot honour."""
        reserved = (str(self.state_dir), str(self.status_dir))
        return (
            *policy_checks(self.config.policy, reserved, self.config.secrets, self.sources, engine_sockets()),
            partial(self.plugin.check_job, self.backend_config),
        )

    @property
    def launch_checks(self) -> tuple[SpecCheck, ...]:
        """``spec_checks`` and what this machine cannot honour now (apply: the daemon leaves
        that to the backend's placement, each pass, as the job's ``lastError``)."""
        return self._environment_checks(launching=True)

    @property
    def plan_checks(self) -> tuple[SpecCheck, ...]:
        """``spec_checks`` and, as warnings, what apply would do or find on this machine
        (``plan``, which needs no engine or cluster)."""
        return self._environment_checks(launching=False)

    def _environment_checks(self, *, launching: bool) -> tuple[SpecCheck, ...]:
        environment = self.plugin.check_environment
        if environment is None:
            return self.spec_checks
        config = self.backend_config

        def check(job: LoadedJob, at: Locate) -> list[Diagnostic]:
            return environment(config, job, at, launching)

        return (*self.spec_checks, check)


# The common options' environment variables: a flag beats its variable, which beats the config
# file, which beats the defaults. An empty variable counts as unset.
CONFIG_ENV = "TFDECLARE_CONFIG"
STATE_DIR_ENV = "TFDECLARE_STATE_DIR"
STATUS_DIR_ENV = "TFDECLARE_STATUS_DIR"
PRECEDENCE_NOTE = (
    f"{CONFIG_ENV}, {STATE_DIR_ENV} and {STATUS_DIR_ENV} stand for --config, --state-dir and "
    "--status-dir when those are not given: a flag beats its environment variable, which beats the "
    "config file, which beats the defaults (an empty variable counts as unset)."
)


def add_common_options(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("common options", description=PRECEDENCE_NOTE)
    group.add_argument(
        "--config",
        metavar="FILE",
        help=f"config file (env {CONFIG_ENV}; default ./{DEFAULT_CONFIG} when present)",
    )
    group.add_argument("--backend", choices=registry.names(), help="where jobs run (default local)")
    group.add_argument(
        "--state-dir",
        metavar="DIR",
        help=f"controller state (env {STATE_DIR_ENV}; default stateDir of the config, ./.tfdeclare)",
    )
    group.add_argument(
        "--status-dir",
        metavar="DIR",
        help=f"status files (env {STATUS_DIR_ENV}; default statusDir of the config, ./status)",
    )


class Origin(Enum):
    """Where a setting's effective value came from, strongest first."""

    FLAG = "flag"
    ENVIRONMENT = "environment"
    CONFIG_FILE = "config file"
    DEFAULT = "default"


@dataclass(frozen=True, slots=True)
class Chosen:
    """A common option's effective value and where it came from; ``via`` names that place as a
    user would look for it: ``--state-dir``, ``TFDECLARE_STATE_DIR``, ``stateDir in FILE``."""

    value: str
    origin: Origin
    via: str

    def said(self) -> str:
        """``VALUE (from VIA)``, for messages."""
        return f"{self.value} (from {self.via})"


def chosen_option(
    args: argparse.Namespace, dest: str, env: str, environ: Mapping[str, str] | None = None
) -> Chosen | None:
    """The value of the option ``dest`` from its flag or else its environment variable ``env``
    (empty counts as unset); None when neither gives one."""
    flag = getattr(args, dest, None)
    if flag:
        return Chosen(str(flag), Origin.FLAG, "--" + dest.replace("_", "-"))
    value = (os.environ if environ is None else environ).get(env, "")
    return Chosen(value, Origin.ENVIRONMENT, env) if value else None


def chosen_config(args: argparse.Namespace, environ: Mapping[str, str] | None = None) -> Chosen | None:
    """The config file to read: ``--config``, ``TFDECLARE_CONFIG``, else ``./tfdeclare.yaml``
    when there is one; None for none (the defaults)."""
    named = chosen_option(args, "config", CONFIG_ENV, environ)
    if named is None and Path(DEFAULT_CONFIG).is_file():
        return Chosen(DEFAULT_CONFIG, Origin.DEFAULT, f"./{DEFAULT_CONFIG}")
    return named


def chosen_folders(
    args: argparse.Namespace,
    config: Config,
    config_path: Path | None,
    environ: Mapping[str, str] | None = None,
) -> dict[str, Chosen]:
    """The state and status folders (``state_dir``, ``status_dir``) as given, with where each
    came from: flag, environment, the config file (relative to its folder), or the default
    (relative to the config file's folder when there is one, else to the current folder)."""
    base = config_path.resolve().parent if config_path is not None else Path.cwd()
    chosen: dict[str, Chosen] = {}
    for dest, env, key in (
        ("state_dir", STATE_DIR_ENV, "stateDir"),
        ("status_dir", STATUS_DIR_ENV, "statusDir"),
    ):
        given = chosen_option(args, dest, env, environ)
        if given is None:
            value: str = getattr(config, dest)
            path = str(base / value)
            if config_path is not None and value != getattr(Config(), dest):
                given = Chosen(path, Origin.CONFIG_FILE, f"{key} in {config_path}")
            else:
                given = Chosen(path, Origin.DEFAULT, "the default")
        chosen[dest] = given
    return chosen


def settings_from(args: argparse.Namespace) -> Settings:
    """The config and the folders: flags > environment (``TFDECLARE_CONFIG``,
    ``TFDECLARE_STATE_DIR``, ``TFDECLARE_STATUS_DIR``) > the config file (its folders are
    relative to its own folder) > the defaults."""
    config_choice = chosen_config(args)
    config_path = Path(config_choice.value) if config_choice is not None else None
    config = Config()
    if config_path is not None and config_choice is not None:
        try:
            data = config_path.read_bytes()
        except OSError as err:
            named = "" if config_choice.origin is Origin.DEFAULT else f" (from {config_choice.via})"
            raise UserError(f"cannot read config {config_path}{named}: {err.strerror or err}") from err
        base = config_path.resolve().parent
        parsed, problems = registry.parse_config_file(str(config_path), data, str(base))
        if parsed is None:
            raise UserError(f"invalid config {config_path}", problems)
        config = parsed
    config = config.with_overrides(backend=args.backend)
    folders = chosen_folders(args, config, config_path)
    state_dir, status_dir = Path(folders["state_dir"].value), Path(folders["status_dir"].value)
    state = folders["state_dir"]
    if state.origin in (Origin.FLAG, Origin.ENVIRONMENT):
        state_from = state.via
    elif config_choice is not None and config_path is not None:
        how = "the config" if config_choice.origin is Origin.DEFAULT else config_choice.via
        state_from = f"{how} {config_path}: its stateDir ({config.state_dir}) is relative to its folder"
    else:
        state_from = "the default"
    return Settings(
        config, state_dir.absolute(), status_dir.absolute(), config_path, state_dir_from=state_from
    )


def check_state(settings: Settings, *, reading: bool = True) -> None:
    """A ``UserError`` unless the state folder may be read: the check of every writer
    (``shell.lock.check_state_folder``: the folder and its own sub-folders this user's alone,
    no link in them), run without the lock by each command that only reads it (``status``,
    ``logs``, ``history``, ``plan``) and by a writer before it reads anything ahead of the
    lock (``reading=False``: the writer's words; docs/security.md, "The state folder"). A
    folder others can write could hold a link or a FIFO at any file read."""
    from tfdeclare.shell.lock import StateFolderRefused, check_state_folder

    try:
        check_state_folder(settings.state_dir, reading=reading)
    except StateFolderRefused as err:
        raise UserError(str(err)) from None


def state_dir_note(settings: Settings) -> str | None:
    """A line saying which state folder a command uses and why, when it is not the default
    (``./.tfdeclare`` here): a config elsewhere moves it, and jobs under the other are not
    seen (``shell.statedirs`` finds them)."""
    if settings.state_dir == (Path.cwd() / Config().state_dir).absolute():
        return None
    return f"state folder {settings.state_dir} (from {settings.state_dir_from}), not ./{Config().state_dir}"


def stdout_write(text: str) -> None:
    sys.stdout.write(text)
    sys.stdout.flush()


def print_backend_warnings(settings: Settings, jobs: Sequence[LoadedJob]) -> None:
    """What the chosen backend warns about running ``jobs`` (``plan`` and ``apply``), on stderr."""
    for warning in settings.plugin.warnings(settings.backend_config, jobs):
        stderr_line(f"tfdeclare: warning: {warning}")


def stderr_line(text: str) -> None:
    sys.stderr.write(text + "\n")
    sys.stderr.flush()


def print_diagnostics(diagnostics: Sequence[Diagnostic], output: str = "text") -> None:
    """One line each on stderr, coloured on a terminal (not when the command prints ``output``
    for machines)."""
    paint = terminal.painter(sys.stderr, output)
    for diagnostic in diagnostics:
        stderr_line(terminal.diagnostic_line(diagnostic, paint))
