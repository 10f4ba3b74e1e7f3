"""A saved plan file as *claims*: what ``plan --out`` recorded, checked against what a fresh
load and plan on this machine give, never taken as what to run.

``apply PLANFILE`` reads the specs again from the plan's ``paths`` (the loader, policy and
backend checks of ``apply PATH``), plans them against the state, and applies that only when it
matches what the file claims: the same jobs (names, specs, source files and lines), the same
protected names and files, and the same actions against the same observed state. Everything a
policy rule or a launch reads (a job's spec, its source file and hence its source folder) comes
from the files, so a hand-edited plan can at most be refused. This module is pure: it reads the
file's parsed JSON (``parse_plan_file``) and compares (``desired_mismatches``,
``plan_mismatches``); the shell reads and writes the files.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from tfdeclare.core.diagnostics import Code, Diagnostic, JsonPath
from tfdeclare.core.plan.desired import DesiredState
from tfdeclare.core.plan.planner import Plan
from tfdeclare.core.plan.render import plan_json
from tfdeclare.core.spec.loader import LoadedJob

PLAN_KIND = "TFDeclarePlan"
FORMAT_VERSION = 1
STDIN_PATH = "-"  # standard input on the command line: cannot be read again at apply
_AGAIN = "run `tfdeclare plan` again"
_SHOWN_PATHS = 5  # differing spec fields named per job
# The fields of a planned job that say what apply does to it (its message and changes are
# derived from these and the specs, and hold masked values).
_ACTION_FIELDS = ("action", "specHash", "previousSpecHash", "source", "tasks", "moves")


class PlanFileError(ValueError):
    """The file is not a plan file this version reads (the message names the field)."""


@dataclass(frozen=True, slots=True)
class JobClaim:
    """One job as the plan says it was loaded."""

    spec: Mapping[str, Any]
    file: str
    line: int


@dataclass(frozen=True, slots=True)
class SavedPlan:
    """A plan file's claims, their shapes checked (their values are still only claims)."""

    backend: str
    state_dir: str
    paths: tuple[str, ...]
    prune: bool
    allow_empty: bool
    observed_fingerprint: str
    jobs: Mapping[str, JobClaim]
    protected: tuple[str, ...]
    invalid_files: tuple[str, ...]
    empty_files: tuple[str, ...]
    files: tuple[str, ...]
    actions: tuple[tuple[str, Mapping[str, Any]], ...]  # (name, the fields of _ACTION_FIELDS)


def _field(data: Mapping[str, Any], key: str, kind: type | tuple[type, ...], where: str) -> Any:
    value = data.get(key)
    if not isinstance(value, kind) or isinstance(value, bool) is not (kind is bool):
        raise PlanFileError(f"{where}{key}: missing or of the wrong type")
    return value


def _strings(data: Mapping[str, Any], key: str, where: str = "") -> tuple[str, ...]:
    """A list of strings; missing is empty (plans of earlier releases lack some lists: they are
    compared all the same, so a missing one only matches an empty one)."""
    if key not in data:
        return ()
    values = _field(data, key, list, where)
    if not all(isinstance(v, str) for v in values):
        raise PlanFileError(f"{where}{key}: expected a list of strings")
    return tuple(values)


def parse_plan_file(document: Any) -> SavedPlan:
    """The claims of a parsed plan file; ``PlanFileError`` when it is not one (a wrong kind or
    format version, a field missing or of the wrong type)."""
    if not isinstance(document, dict) or document.get("kind") != PLAN_KIND:
        raise PlanFileError(f"kind: not {PLAN_KIND}")
    version = document.get("formatVersion")
    if type(version) is not int or version != FORMAT_VERSION:
        raise PlanFileError(f"formatVersion: {version!r}; this tfdeclare reads {FORMAT_VERSION}")
    plan = _field(document, "plan", dict, "")
    options = _field(plan, "options", dict, "plan.")
    jobs: dict[str, JobClaim] = {}
    for name, entry in _field(document, "desiredAll", dict, "").items():
        where = f"desiredAll.{name}."
        if not isinstance(entry, dict):
            raise PlanFileError(f"desiredAll.{name}: expected a mapping")
        jobs[name] = JobClaim(
            _field(entry, "spec", dict, where),
            _field(entry, "file", str, where),
            _field(entry, "line", int, where),
        )
    actions = []
    for index, entry in enumerate(_field(plan, "jobs", list, "plan.")):
        if not isinstance(entry, dict) or not isinstance(entry.get("name"), str):
            raise PlanFileError(f"plan.jobs[{index}]: expected a mapping with a name")
        actions.append((entry["name"], {key: entry.get(key) for key in _ACTION_FIELDS}))
    paths = _strings(document, "paths") if "paths" in document else (".",)  # plans before paths
    if not paths or not all(paths) or any("\0" in p for p in paths):
        raise PlanFileError("paths: empty, or a path empty or holding a NUL character")
    return SavedPlan(
        backend=_field(document, "backend", str, ""),
        state_dir=_field(document, "stateDir", str, ""),
        paths=paths,
        prune=_field(options, "prune", bool, "plan.options."),
        allow_empty=_field(options, "allowEmpty", bool, "plan.options."),
        observed_fingerprint=_field(document, "observedFingerprint", str, ""),
        jobs=jobs,
        protected=_strings(document, "protected"),
        invalid_files=_strings(document, "invalidFiles"),
        empty_files=_strings(document, "emptyFiles"),
        files=_strings(document, "files"),
        actions=tuple(actions),
    )


def differences(claimed: Any, actual: Any, path: JsonPath = ()) -> list[JsonPath]:
    """The JSON paths where two JSON values differ (types compared too: ``1`` is not ``true``)."""
    if isinstance(claimed, dict) and isinstance(actual, dict):
        out: list[JsonPath] = []
        for key in sorted(claimed.keys() | actual.keys(), key=str):
            if key not in claimed or key not in actual:
                out.append((*path, str(key)))
            else:
                out.extend(differences(claimed[key], actual[key], (*path, str(key))))
        return out
    if isinstance(claimed, list) and isinstance(actual, list):
        if len(claimed) != len(actual):
            return [path]
        return [
            p
            for i, (a, b) in enumerate(zip(claimed, actual, strict=True))
            for p in differences(a, b, (*path, i))
        ]
    if type(claimed) is not type(actual) or claimed != actual:
        return [path]
    return []


def shown(value: Any, limit: int = 120) -> str:
    """A claimed value for a message: a printable string as it is, anything else as Python
    writes it (control characters escaped), cut at ``limit`` characters."""
    text = value if isinstance(value, str) and value.isprintable() else repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _listed(values: Sequence[str]) -> str:
    names = sorted(values)
    more = ", ..." if len(names) > _SHOWN_PATHS else ""
    return "[" + ", ".join(repr(v) for v in names[:_SHOWN_PATHS]) + more + "]"


def desired_mismatches(saved: SavedPlan, desired: DesiredState, plan_file: str) -> list[Diagnostic]:
    """Where the plan's claims about the files differ from ``desired``, what the files hold
    now: each at the job's file and line (the spec's differing fields by JSON path, values not
    shown: an environment value may be a secret), or at the plan file."""

    def at_plan(message: str) -> Diagnostic:
        return Diagnostic(plan_file, 1, None, f"{message}: {_AGAIN}", None, Code.PLAN_MISMATCH)

    problems: list[Diagnostic] = []
    for name in sorted(saved.jobs.keys() - desired.jobs.keys()):
        claim = saved.jobs[name]
        problems.append(
            at_plan(
                f"job {name}: the plan says {claim.file!r} line {claim.line} defines it; no file does now"
            )
        )
    for name in sorted(desired.jobs):
        problems.extend(_job_mismatches(name, desired.jobs[name], saved.jobs.get(name)))
    for label, claimed, actual in (
        ("protected", saved.protected, sorted(desired.protected)),
        ("invalidFiles", saved.invalid_files, sorted(desired.invalid_files)),
        ("emptyFiles", saved.empty_files, sorted(desired.empty_files)),
        ("files", saved.files, list(desired.files)),
    ):
        if list(claimed) != list(actual):
            problems.append(
                at_plan(f"the plan says {label} is {_listed(claimed)}, the files now give {_listed(actual)}")
            )
    return problems


def _job_mismatches(name: str, job: LoadedJob, claim: JobClaim | None) -> list[Diagnostic]:
    file, line = job.source.file, job.source.line

    def at_job(message: str, path: JsonPath | None = None) -> Diagnostic:
        words = f"job {name}: {message}: {_AGAIN}"
        if path is not None:  # at the field, or its nearest parent the job kept the place of
            return job.at(path, words, Code.PLAN_MISMATCH)
        return replace(job.at(("metadata", "name"), words, Code.PLAN_MISMATCH), json_path=None)  # at its name

    if claim is None:
        return [at_job("defined here, but not in the plan")]
    problems = []
    if (claim.file, claim.line) != (file, line):
        problems.append(
            at_job(
                f"the plan says desiredAll.{name}.file/line is {claim.file!r} line {claim.line}, "
                f"the files now say {file!r} line {line}"
            )
        )
    for path in differences(dict(claim.spec), dict(job.canonical))[:_SHOWN_PATHS]:
        problems.append(at_job("the plan's spec differs from the file's here (values not shown)", path))
    return problems


def plan_mismatches(saved: SavedPlan, current: Plan) -> list[str]:
    """Where the plan's actions differ from ``current``, a plan of the same files now, job by
    job (the first few; hashes, actions and task names, no values)."""
    if current.observed_fingerprint != saved.observed_fingerprint:
        return [
            "the jobs it was planned against have changed since (another apply, a completion or a failure)"
        ]
    now = [(j["name"], {key: j.get(key) for key in _ACTION_FIELDS}) for j in plan_json(current)["jobs"]]
    if [name for name, _ in now] != [name for name, _ in saved.actions]:
        said = ", ".join(name for name, _ in saved.actions) or "none"
        says = ", ".join(name for name, _ in now) or "none"
        return [f"the plan names the jobs {said}, a plan made now names {says}"]
    out = []
    for (name, claimed), (_, actual) in zip(saved.actions, now, strict=True):
        for key in _ACTION_FIELDS:
            if differences(claimed[key], actual[key]):
                out.append(
                    f"job {name}: the plan says {key} {shown(claimed[key])}, "
                    f"a plan made now says {shown(actual[key])}"
                )
    return out[:_SHOWN_PATHS]
