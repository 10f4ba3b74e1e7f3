"""Diagnostics: one user-facing problem with its place, gcc-style.

``PATH:LINE:COL: error: MESSAGE (at $.json.path)`` — editors jump to it. Every user error in
tfdeclare is a ``Diagnostic``; the CLI prints them, ``-o json`` gives them as data, and status
conditions quote them. The ``code`` is a closed vocabulary so tools can match on it.

``format`` is one line, whatever the spec held: its path, message and JSON path are written
``visible`` (a key, a value or a file name with a newline or a terminal escape cannot forge
another diagnostic line or colour the terminal); ``to_json`` keeps them exact.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from tfdeclare.core.visible import visible


class Severity(StrEnum):
    ERROR = "error"
    WARNING = "warning"
    NOTE = "note"  # information, like gcc's: e.g. "read as a Kubeflow TFJob"


class Code(StrEnum):
    READ_ERROR = "read-error"
    FILE_TOO_LARGE = "file-too-large"
    INVALID_UTF8 = "invalid-utf8"
    YAML_SYNTAX = "yaml-syntax"
    FORBIDDEN_TAG = "forbidden-tag"
    DUPLICATE_KEY = "duplicate-key"
    NON_STRING_KEY = "non-string-key"
    TOO_COMPLEX = "too-complex"  # alias expansion / nesting / node count over the bound
    EMPTY_DOCUMENT = "empty-document"
    SCHEMA = "schema"
    QUANTITY = "quantity"
    NO_CHIEF_OR_WORKER = "no-chief-or-worker"
    MISSING_COMMAND = "missing-command"
    DUPLICATE_NAME = "duplicate-name"
    BACKEND = "backend"  # valid in general, not on the configured backend (or the config's policy)
    QUOTA = "quota"  # the config's policy.quotas (jobs with one label value together) and maxJobs
    NO_FILES = "no-files"
    NO_JOB_DOCUMENT = "no-job-document"  # a file without a job: it protects the jobs it held
    KUBEFLOW = "kubeflow"  # a Kubeflow TFJob: read as such (note), or not one we can read (error)
    KUBEFLOW_UNMAPPED = "kubeflow-unmapped"  # a Kubeflow field with no equivalent (warning)
    NOT_A_JOB = "not-a-job"  # another Kubernetes document beside the jobs (a Service...): not run (warning)
    PLAN_MISMATCH = "plan-mismatch"  # a saved plan's claim that the files (or a plan now) do not bear out
    ELSEWHERE = "elsewhere"  # a new job that runs under another state folder of this user: not started


@dataclass(frozen=True, slots=True)
class Diagnostic:
    path: str
    line: int | None  # None: not a place in a file (a folder, a repository); a file as a whole is line 1
    column: int | None
    message: str
    json_path: str | None = None
    code: Code = Code.SCHEMA
    severity: Severity = Severity.ERROR

    def format(self) -> str:
        place = visible(self.path)
        if self.line is not None:
            place += f":{self.line}"
            if self.column is not None:
                place += f":{self.column}"
        text = f"{place}: {self.severity.value}: {visible(self.message)}"
        if self.json_path:
            text += f" (at {visible(self.json_path)})"
        return text

    def to_json(self) -> dict[str, Any]:
        return {
            "path": self.path,
            "line": self.line,
            "column": self.column,
            "severity": self.severity.value,
            "code": self.code.value,
            "message": self.message,
            "jsonPath": self.json_path,
        }

    @property
    def is_error(self) -> bool:
        return self.severity is Severity.ERROR


JsonPath = tuple[str | int, ...]


def hides_value(path: JsonPath) -> bool:
    """Whether ``path`` is (in) the value of an environment variable: a diagnostic there never
    quotes the value, which may be a secret (it names the key and the problem)."""
    return "env" in path[:-1]


class _Reported:
    """Stands in for a YAML value that was refused (and reported) while loading, so that
    schema validation does not report it a second time."""

    __slots__ = ()

    def __repr__(self) -> str:
        return "REPORTED"


REPORTED = _Reported()


def format_json_path(path: JsonPath) -> str:
    """``("spec", "replicas", "worker", "count")`` -> ``$.spec.replicas.worker.count``."""
    out = ["$"]
    for part in path:
        if isinstance(part, int):
            out.append(f"[{part}]")
        elif part and (part[0].isalpha() or part[0] == "_") and all(c.isalnum() or c in "_-" for c in part):
            out.append(f".{part}")
        else:
            escaped = part.replace("\\", "\\\\").replace("'", "\\'")
            out.append(f"['{escaped}']")
    return "".join(out)
