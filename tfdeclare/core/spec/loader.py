"""One file's bytes -> its jobs and diagnostics (parse, schema, semantic rules, the config's and
the configured backend's checks, the config's admission, model).

Pure: the caller reads the bytes. ``FileResult`` is cacheable by content hash (the shell
caches it so a warm re-plan only re-parses files that changed). Rules that need every file —
unique names — live in ``desired``.
"""

from __future__ import annotations

import hashlib
import posixpath
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from functools import cached_property
from typing import Any, Protocol, runtime_checkable

from tfdeclare.core.diagnostics import Code, Diagnostic, JsonPath, Severity, format_json_path
from tfdeclare.core.enums import ClusterSpecStyle, Role
from tfdeclare.core.spec.documents import Document, parse_documents
from tfdeclare.core.spec.kubeflow import API_VERSION, Translation, is_kubeflow, translate
from tfdeclare.core.spec.model import FieldScreen, JobSpec, TaskRun, canonicalize, fingerprint
from tfdeclare.core.spec.resources import QuantityError
from tfdeclare.core.spec.schema import load_schema


@dataclass(frozen=True, slots=True)
class SourceRef:
    file: str
    line: int
    document: int = 0
    column: int | None = field(default=None, compare=False)  # where a name was found, for diagnostics

    def __str__(self) -> str:
        return f"{self.file}:{self.line}"


@dataclass(frozen=True)
class LoadedJob:
    name: str
    canonical: Mapping[str, Any]
    spec_hash: str
    source: SourceRef
    # Line and column of what the rules across jobs name (``PLACED``), read while its document
    # was at hand (it is released after loading): ``at`` places their diagnostics there.
    places: Mapping[JsonPath, tuple[int, int]] = field(default_factory=dict, compare=False, repr=False)

    # A Kubeflow manifest that this version reads otherwise than earlier versions did: the
    # spec hash of their reading (what a job they applied from it runs), and notes at the
    # manifest's lines saying what reads differently. A job whose record holds that hash
    # plans no change until its file changes (``planner``: an upgrade changes no plan).
    earlier_hash: str | None = None
    reread: tuple[Diagnostic, ...] = ()

    def at(self, path: JsonPath, message: str, code: Code) -> Diagnostic:
        """The diagnostic ``message`` at ``path`` of this job's document: at the line and
        column of the path, or of its nearest parent kept in ``places`` (the document's
        start when none is: a job made without its document)."""
        for depth in range(len(path), 0, -1):
            found = self.places.get(tuple(path[:depth]))
            if found is not None:
                return Diagnostic(self.source.file, found[0], found[1], message, format_json_path(path), code)
        return Diagnostic(self.source.file, self.source.line, 1, message, format_json_path(path), code)

    @cached_property
    def spec(self) -> JobSpec:
        """Built on first use: a plan of unchanged jobs only compares hashes."""
        return JobSpec.from_canonical(self.canonical, self.spec_hash)

    @cached_property
    def screen(self) -> FieldScreen:
        """A cheap first look at what its runs could be (``FieldScreen``); made once."""
        return FieldScreen.of(self.canonical)

    @cached_property
    def runs(self) -> tuple[TaskRun, ...]:
        """What its tasks run (``JobSpec.runs``), for the policy's rules; made once."""
        return self.spec.runs()


PLACED = "metadata.name, each of metadata.labels, spec"
"""What a ``LoadedJob`` keeps the position of (``places``): the fields the rules across jobs
name (``policy.quotas`` a label, ``policy.maxJobs`` and duplicates the name, a saved plan's
claims a field of ``spec``, shown at ``spec``). Few, so a state of 10,000 jobs keeps little."""

Locate = Callable[[JsonPath, str], Diagnostic]
"""Makes the diagnostic ``message`` at a JSON path of the job's document (file:line:col)."""

SpecCheck = Callable[[LoadedJob, Locate], Sequence[Diagnostic]]
"""What validity depends on besides the file: a pure check of a job that passed every general
rule, answering what the configured backend cannot honour (the backends bring them)."""


@runtime_checkable
class Admission(Protocol):
    """A ``SpecCheck`` that also completes a job from the config, as Kubernetes' admission
    does: the config's priority classes (``policy.PriorityClasses``) write a class's value
    into ``spec.priority``. Asked only of a job that names a class and passed every check; the
    admitted form is what is hashed, planned and applied."""

    def __call__(self, job: LoadedJob, at: Locate) -> Sequence[Diagnostic]: ...

    def admit(self, canonical: Mapping[str, Any]) -> Mapping[str, Any]: ...


@dataclass(frozen=True, slots=True)
class FileResult:
    path: str
    content_hash: str
    jobs: tuple[LoadedJob, ...]
    diagnostics: tuple[Diagnostic, ...]
    named: tuple[tuple[str, SourceRef], ...]  # every metadata.name seen, valid document or not

    @property
    def has_errors(self) -> bool:
        return any(d.is_error for d in self.diagnostics)


STDIN_NAME = "<stdin>"  # the file name of a spec read from standard input

_LEGACY_ROLES = (Role.PS, Role.WORKER)
_PLACEHOLDER = re.compile(r"\{(ps_hosts|worker_hosts|job_name|task_index)\}")


def content_hash(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def load_file(path: str, data: bytes, checks: Sequence[SpecCheck] = ()) -> FileResult:
    documents, diagnostics = parse_documents(path, data)
    jobs: list[LoadedJob] = []
    named: list[tuple[str, SourceRef]] = []
    for document in documents:
        if document.value is None:
            document.release()
            continue  # an empty document, e.g. after a trailing ---
        other = _other_document(path, document)
        if other is not None:
            diagnostics.append(other)
            document.release()
            continue
        view = _View.of(document)
        name = _name_of(view.value)
        source = SourceRef(path, document.line, document.index)
        if name is not None:
            name_line, name_column = view.locate(("metadata", "name"))
            named.append((name, SourceRef(path, name_line, document.index, name_column)))
        job, problems = _load_document(view, source, checks)
        diagnostics.extend(problems)
        if job is not None:
            jobs.append(job)
        document.release()
    diagnostics.sort(key=lambda d: (d.line or 0, d.column or 0))
    return FileResult(path, content_hash(data), tuple(jobs), tuple(diagnostics), tuple(named))


_DNS_LABEL = r"[a-z0-9](?:[-a-z0-9]*[a-z0-9])?"
_KUBERNETES_API = re.compile(rf"(?:{_DNS_LABEL}(?:\.{_DNS_LABEL})*/)?v[0-9]+(?:(?:alpha|beta)[0-9]+)?")


def _other_document(path: str, document: Document) -> Diagnostic | None:
    """A warning for another Kubernetes document (a PersistentVolumeClaim, ConfigMap, Service...)
    that came in the file with a TFJob: it is not a job, so it is not run. Our own and
    Kubeflow's documents, and anything calling itself a TFJob, are judged as jobs."""
    value = document.value
    if not isinstance(value, dict):
        return None
    api, kind = value.get("apiVersion"), value.get("kind")
    if type(api) is str and api.startswith("tfdeclare/"):  # ours: the common case, first
        return None
    if not isinstance(api, str) or not isinstance(kind, str) or not _KUBERNETES_API.fullmatch(api):
        return None
    if api.startswith("tfdeclare/") or is_kubeflow(value) or kind.lower() == "tfjob":
        return None
    name = _name_of(value)
    named = f"{kind} {name!r}" if name else kind
    message = f"{named} ({api}) is not a TFJob: not run (tfdeclare runs only the TFJobs of a file)"
    found = document.diagnostic(("kind",), message, Code.NOT_A_JOB)
    return replace(found, severity=Severity.WARNING)


def _name_of(value: Any) -> str | None:
    if isinstance(value, dict):
        metadata = value.get("metadata")
        if isinstance(metadata, dict) and isinstance(metadata.get("name"), str):
            return str(metadata["name"])
    return None


@dataclass(frozen=True)
class _View:
    """A document as the native spec it stands for: itself, or a Kubeflow TFJob translated,
    with every diagnostic placed at the manifest's own line and JSON path."""

    document: Document
    value: Any
    translation: Translation | None = None

    @classmethod
    def of(cls, document: Document) -> _View:
        if not is_kubeflow(document.value):
            return cls(document, document.value)
        translation = translate(document.value)
        return cls(document, translation.native, translation)

    def place(self, path: JsonPath) -> JsonPath:
        return self.translation.source_of(path) if self.translation else path

    def locate(self, path: JsonPath) -> tuple[int, int]:
        return self.document.locate(self.place(path))

    def diagnostic(
        self, path: JsonPath, message: str, code: Code = Code.SCHEMA, *, key: bool = False
    ) -> Diagnostic:
        return self.document.diagnostic(self.place(path), message, code, key=key)

    def kubeflow_diagnostics(self) -> list[Diagnostic]:
        """The note that this is a Kubeflow TFJob, what did not map, and what cannot be read."""
        if self.translation is None:
            return []
        doc = self.document
        read = bool(self.translation.native)  # not when its version or kind is not one we read
        note = replace(
            doc.diagnostic(("apiVersion",), kubeflow_note(self.translation.api_version), Code.KUBEFLOW),
            severity=Severity.NOTE,
            json_path=None,
        )
        warnings = [
            replace(doc.diagnostic(path, message, Code.KUBEFLOW_UNMAPPED), severity=Severity.WARNING)
            for path, message in self.translation.warnings
        ]
        notes = [
            replace(doc.diagnostic(path, message, Code.KUBEFLOW), severity=Severity.NOTE)
            for path, message in self.translation.notes
        ]
        errors = [doc.diagnostic(path, message, Code.KUBEFLOW) for path, message in self.translation.errors]
        return [note, *notes, *warnings, *errors] if read else [*warnings, *errors]


def kubeflow_note(api_version: str) -> str:
    same = "" if api_version == API_VERSION else f" (its fields are those of {API_VERSION})"
    return (
        f"read as a Kubeflow {api_version} TFJob{same}; `tfdeclare convert` writes it in tfdeclare's own form"
    )


KUBEFLOW_NOTE = kubeflow_note(API_VERSION)


def _load_document(
    view: _View, source: SourceRef, checks: Sequence[SpecCheck]
) -> tuple[LoadedJob | None, list[Diagnostic]]:
    document, value = view.document, view.value
    if not isinstance(value, dict):
        return None, [document.diagnostic((), "a document must be a mapping: a tfdeclare/v1 TFJob")]
    found = view.kubeflow_diagnostics()
    if any(d.is_error for d in found):
        return None, found
    job, problems = _load_native(view, value, source, checks)
    if job is not None and view.translation is not None and view.translation.reread:
        job = _with_earlier_reading(job, view, source, checks)
    return job, found + problems


def _with_earlier_reading(
    job: LoadedJob, view: _View, source: SourceRef, checks: Sequence[SpecCheck]
) -> LoadedJob:
    """``job`` with the hash of the manifest as earlier versions read it, when that differs
    (``LoadedJob.earlier_hash``); read through the same schema, defaults and checks, so it is
    the hash their records hold (not the semantic rules: that reading may break one added
    since, such as two volumes at one containerPath, which today's reading merges)."""
    earlier = translate(view.document.value, earlier=True)
    if earlier.errors:
        return job
    earlier_view = _View(view.document, earlier.native, earlier)
    before, _ = _load_native(earlier_view, earlier.native, source, checks, rules=False)
    if before is None or before.spec_hash == job.spec_hash:
        return job
    assert view.translation is not None
    notes = tuple(
        replace(view.document.diagnostic(path, message, Code.KUBEFLOW), severity=Severity.NOTE)
        for path, message in view.translation.reread
    )
    return replace(job, earlier_hash=before.spec_hash, reread=notes)


def _load_native(
    view: _View, value: dict[str, Any], source: SourceRef, checks: Sequence[SpecCheck], rules: bool = True
) -> tuple[LoadedJob | None, list[Diagnostic]]:
    """``rules`` False: without the semantic rules (an earlier reading, which earlier rules
    let through: ``_with_earlier_reading``)."""
    errors = load_schema("job").validate(value)
    if errors or view.document.refused:
        found = [view.diagnostic(e.path, e.message, key=e.at_key) for e in errors]
        if not view.document.refused and all(e.path[:1] != ("spec",) for e in errors):
            found += _semantic_problems_of_a_valid_spec(view, value)
        return None, found
    both = _priority_twice(view, value)  # before the defaults fill in spec.priority
    filled = load_schema("job").fill_defaults(value)
    try:
        canonical = canonicalize(filled)
    except QuantityError as err:
        return None, [view.diagnostic(err.path, str(err), Code.QUANTITY)]
    problems = both + (_semantic_problems(view, canonical) if rules else [])
    if problems:
        return None, problems
    name = canonical["metadata"]["name"]
    job = LoadedJob(name, canonical, fingerprint(canonical), source, _places(view, canonical))
    if checks:

        def locate(path: JsonPath, message: str) -> Diagnostic:
            return view.diagnostic(path, message, Code.BACKEND)

        problems = [problem for check in checks for problem in check(job, locate)]
        job.__dict__.pop("screen", None)  # the checks' (made again if asked): not kept a job
        if any(problem.is_error for problem in problems):
            return None, problems
        if "priorityClassName" in canonical["spec"]:
            job = _admitted(job, checks)
        return job, problems  # warnings: the job is valid
    return job, []


def _priority_twice(view: _View, value: Mapping[str, Any]) -> list[Diagnostic]:
    """``spec.priority`` and ``spec.priorityClassName`` both written: refused, at the class."""
    spec = value["spec"]
    if "priority" not in spec or "priorityClassName" not in spec:
        return []
    message = (
        "spec.priorityClassName and spec.priority are both set: the class gives the priority, "
        "so set one of them"
    )
    return [view.diagnostic(("spec", "priorityClassName"), message)]


def _admitted(job: LoadedJob, checks: Sequence[SpecCheck]) -> LoadedJob:
    """``job`` as the ``Admission`` checks complete it (hashed anew when one changed it)."""
    canonical = job.canonical
    for check in checks:
        if isinstance(check, Admission):
            canonical = check.admit(canonical)
    if canonical is job.canonical:
        return job
    return LoadedJob(job.name, canonical, fingerprint(canonical), job.source, job.places)


def _places(view: _View, canonical: Mapping[str, Any]) -> dict[JsonPath, tuple[int, int]]:
    """Where the paths of ``PLACED`` are in the document (a Kubeflow manifest's own lines)."""
    paths: list[JsonPath] = [("metadata", "name"), ("spec",)]
    paths.extend(("metadata", "labels", key) for key in canonical["metadata"]["labels"])
    return {path: view.locate(path) for path in paths}


def _semantic_problems_of_a_valid_spec(view: _View, value: dict[str, Any]) -> list[Diagnostic]:
    """``_semantic_problems`` of a document whose schema errors all lie outside ``spec`` (a bad
    name, an unknown top-level field): its spec is whole, so its rules are reported with them
    rather than after they are fixed (the rules read ``spec`` alone: the metadata is stood in
    for). Nothing when the canonical form cannot be made even so."""
    whole = {**value, "metadata": {"name": "job"}}
    try:
        canonical = canonicalize(load_schema("job").fill_defaults(whole))
    except (QuantityError, KeyError, TypeError, ValueError, AttributeError):
        return []
    return _semantic_problems(view, canonical)


def _mount_points_twice(view: _View, volumes: Sequence[Mapping[str, Any]]) -> list[Diagnostic]:
    """A ``containerPath`` that an earlier volume mounts already (``/data`` and ``/data/`` are
    one path): refused at the second, as the container engine would refuse the task."""
    seen: dict[str, int] = {}
    problems: list[Diagnostic] = []
    for index, volume in enumerate(volumes):
        path = volume.get("containerPath")
        if not isinstance(path, str):
            continue
        first = seen.setdefault(posixpath.normpath(path), index)
        if first != index:
            message = (
                f"containerPath {path} is mounted already by spec.volumes[{first}]: a container has "
                "one mount at a path (the engine refuses a second); mount it once, or at another path"
            )
            problems.append(view.diagnostic(("spec", "volumes", index, "containerPath"), message))
    return problems


def _semantic_problems(view: _View, canonical: Mapping[str, Any]) -> list[Diagnostic]:
    """The rules a JSON Schema cannot say well."""
    spec = canonical["spec"]
    replicas = spec["replicas"]
    problems: list[Diagnostic] = []
    if not replicas.get("chief") and not replicas.get("worker"):
        problems.append(
            view.diagnostic(
                ("spec", "replicas"),
                "a job needs at least one chief or worker (count >= 1)",
                Code.NO_CHIEF_OR_WORKER,
            )
        )
    for role, entry in replicas.items():
        has_image = spec["image"] is not None or "image" in entry  # its entrypoint runs
        if spec["command"] is None and "command" not in entry and not has_image:
            problems.append(
                view.diagnostic(
                    ("spec", "replicas", role),
                    f"role {role} has no command: set spec.command or spec.replicas.{role}.command "
                    "(or an image, whose entrypoint then runs)",
                    Code.MISSING_COMMAND,
                )
            )
    problems.extend(_mount_points_twice(view, spec["volumes"]))
    if spec["clusterSpec"] == ClusterSpecStyle.LEGACY_FLAGS.value:
        for role in replicas:
            if Role(role) not in _LEGACY_ROLES:
                problems.append(
                    view.diagnostic(
                        ("spec", "replicas", role),
                        f"clusterSpec legacy_flags knows only ps and worker, not {role}; "
                        "use tf_config or both",
                    )
                )
        commands = [
            spec["command"] or [],
            spec.get("args", []),
            *(e.get("command", []) for e in replicas.values()),
            *(e.get("args", []) for e in replicas.values()),
        ]
        if not any(_PLACEHOLDER.search(arg) for command in commands for arg in command):
            problems.append(
                view.diagnostic(
                    ("spec", "clusterSpec"),
                    "clusterSpec legacy_flags but no command uses {ps_hosts}, {worker_hosts}, "
                    "{job_name} or {task_index}",
                )
            )
    return problems
