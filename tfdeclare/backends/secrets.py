"""Reading the environment values a task names by reference (``TaskLaunch.secrets``), for the
backends, as late as they can: the local backend's supervisor reads them as it starts the task
(they are never written to the task's files); the Mesos backend reads the controller's ones
while it builds the TaskInfo (the master then holds them, as it holds every task's
environment), and has the task read its ``agentFile`` ones on the agent through a small
``sh`` wrapper (``agent_file_argv``), so they never leave that machine.

Errors name the variable and where it was to come from, never a value.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from tfdeclare.core.enums import SecretSource
from tfdeclare.core.spec.secrets import SecretRef

Secrets = Sequence[tuple[str, SecretRef]]

# argv: sh -c SCRIPT tfdeclare-secrets NAME1 PATH1 ... -- COMMAND...: the names and paths are
# arguments, never script text; a file that cannot be read fails the task with exit code 126.
AGENT_FILES_SCRIPT = (
    'while [ "$1" != -- ]; do v=$(cat -- "$2") || { echo "tfdeclare: cannot read the file of $1: $2" >&2; '
    'exit 126; }; export "$1=$v"; shift 2; done; shift; exec "$@"'
)


class SecretUnavailable(Exception):
    """A referenced value that cannot be read now (the message names no value)."""


def to_json(secrets: Secrets) -> list[list[object]]:
    """References as plain data (what the local backend's task file keeps: no value)."""
    return [[name, ref.to_json()] for name, ref in secrets]


def from_json(data: Sequence[Sequence[Any]]) -> list[tuple[str, SecretRef]]:
    return [(str(name), SecretRef.from_json(ref)) for name, ref in data]


def read_secret(name: str, ref: SecretRef, environ: Mapping[str, str]) -> str:
    """The value of ``ref`` here: a variable of ``environ`` or a file of this machine (trailing
    newlines dropped)."""
    if ref.source is SecretSource.ENV:
        value = environ.get(ref.where)
        if value is None:
            raise SecretUnavailable(f"{name}: the variable {ref.where} is not set")
        return value
    if ref.source is SecretSource.NAME:
        raise SecretUnavailable(f"{name}: {ref} has no secrets folder")  # located by the controller
    try:
        return Path(ref.where).read_text(encoding="utf-8").rstrip("\r\n")
    except (OSError, UnicodeDecodeError) as err:
        reason = err.strerror if isinstance(err, OSError) and err.strerror else type(err).__name__
        raise SecretUnavailable(f"{name}: cannot read the file {ref.where}: {reason}") from None


def read_all(secrets: Secrets, environ: Mapping[str, str], *, agent_files: bool = True) -> dict[str, str]:
    """Every value of ``secrets`` (without the ``agentFile`` ones unless ``agent_files``)."""
    return {
        name: read_secret(name, ref, environ)
        for name, ref in secrets
        if agent_files or ref.source is not SecretSource.AGENT_FILE
    }


def agent_file_argv(argv: Sequence[str], secrets: Secrets) -> list[str]:
    """``argv`` wrapped so that the task reads its ``agentFile`` values as it starts."""
    files = [(name, ref.where) for name, ref in secrets if ref.source is SecretSource.AGENT_FILE]
    if not files:
        return list(argv)
    pairs = [part for name, path in files for part in (name, path)]
    return ["/bin/sh", "-c", AGENT_FILES_SCRIPT, "tfdeclare-secrets", *pairs, "--", *argv]
