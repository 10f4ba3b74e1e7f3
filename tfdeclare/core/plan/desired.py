"""The desired state: every loaded file put together, with the rules that span files.

Names are unique across everything loaded: a name defined twice makes both definitions
invalid (the diagnostics name both places). Names seen in invalid documents or files are
*protected*: the planner never deletes or restarts the jobs they held. So are the jobs last
loaded from a file that now holds no job document (empty, or being rewritten: a warning),
and every job when the listing is incomplete (a file or folder could not be read).
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from tfdeclare.core.diagnostics import Code, Diagnostic, Severity
from tfdeclare.core.spec.loader import FileResult, LoadedJob


@dataclass(frozen=True, slots=True)
class DesiredState:
    jobs: Mapping[str, LoadedJob]
    diagnostics: tuple[Diagnostic, ...]
    protected: Mapping[str, tuple[Diagnostic, ...]]  # name -> why it cannot be applied now
    invalid_files: frozenset[str]
    files: tuple[str, ...]
    empty_files: frozenset[str] = frozenset()  # files that hold no job document
    # Set on a state made by patching another (a file event): that state's ``token`` and the
    # names whose job was added, replaced or removed, so the planner re-plans only those
    # (``PlanCache``). A token, not the state itself, so patched states do not chain.
    patch: tuple[object, frozenset[str]] | None = field(default=None, compare=False, repr=False)
    token: object = field(default_factory=object, init=False, compare=False, repr=False)

    @property
    def has_errors(self) -> bool:
        return any(d.is_error for d in self.diagnostics)

    @property
    def read_errors(self) -> tuple[Diagnostic, ...]:
        """Files or folders that could not be read: the listing is incomplete."""
        return tuple(d for d in self.diagnostics if d.code is Code.READ_ERROR)


def holds_no_job(result: FileResult) -> bool:
    """A readable, valid file without a single job document (empty, comments, ``---``)."""
    return not result.named and not result.diagnostics


def assemble(results: Iterable[FileResult]) -> DesiredState:
    results = sorted(results, key=lambda r: r.path)
    counts = Counter(name for result in results for name, _ in result.named)
    diagnostics: list[Diagnostic] = []
    protected: dict[str, list[Diagnostic]] = defaultdict(list)
    jobs: dict[str, LoadedJob] = {}
    invalid_files: set[str] = set()
    empty_files: set[str] = set()
    for result in results:
        if holds_no_job(result):
            empty_files.add(result.path)
            diagnostics.append(_no_job(result.path))
        if result.diagnostics:
            diagnostics.extend(result.diagnostics)
            errors = [d for d in result.diagnostics if d.is_error]
            if errors:
                invalid_files.add(result.path)
                valid_names = {job.name for job in result.jobs}
                for name, _ in result.named:
                    if name not in valid_names:
                        protected[name].extend(errors)
        for job in result.jobs:
            if counts[job.name] == 1:
                jobs[job.name] = job
                continue
            problem = _duplicate(job, results)  # the rare case: look where else it is defined
            diagnostics.append(problem)
            protected[job.name].append(problem)
            invalid_files.add(job.source.file)
    return DesiredState(
        jobs=jobs,
        diagnostics=tuple(diagnostics),
        protected={name: tuple(problems) for name, problems in protected.items()},
        invalid_files=frozenset(invalid_files),
        files=tuple(r.path for r in results),
        empty_files=frozenset(empty_files),
    )


def _no_job(path: str) -> Diagnostic:
    return Diagnostic(
        path,
        1,
        None,
        "holds no job document: the jobs last applied from it keep running (delete the file to delete them)",
        None,
        Code.NO_JOB_DOCUMENT,
        Severity.WARNING,
    )


def _duplicate(job: LoadedJob, results: list[FileResult]) -> Diagnostic:
    places = [source for result in results for name, source in result.named if name == job.name]
    here = next(p for p in places if (p.file, p.document) == (job.source.file, job.source.document))
    others = ", ".join(str(p) for p in places if p is not here)
    return Diagnostic(
        here.file,
        here.line,
        here.column,
        f"job name {job.name!r} is also defined at {others}",
        "$.metadata.name",
        Code.DUPLICATE_NAME,
    )
