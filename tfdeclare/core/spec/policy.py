"""The config file's ``policy`` section: its typed form and the rules every job must follow
(checked with the backend's own checks in validate, plan, apply and the daemon alike).

Per-job rules are ``SpecCheck``s: a job that breaks one is invalid, so a running copy keeps
running as applied, exactly like a job whose file has an error. Quotas span jobs and are
counted against what a plan would run (``tfdeclare.core.plan.quotas``). Every message names
the rule (``policy.allowedImages``) so the reader knows who to ask: the platform team that
wrote the config, not the spec.
"""

from __future__ import annotations

import posixpath
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from fnmatch import fnmatchcase
from functools import partial
from typing import Any

from tfdeclare.core.diagnostics import Diagnostic, JsonPath
from tfdeclare.core.enums import Role, SecretSource
from tfdeclare.core.spec.loader import STDIN_NAME, LoadedJob, Locate, SpecCheck
from tfdeclare.core.spec.secrets import SecretRef, SecretsConfig


@dataclass(frozen=True, slots=True)
class Quota:
    """What all the jobs whose ``metadata.labels[label] == value`` may use together (None:
    not limited)."""

    label: str
    value: str
    gpus: int | None = None
    cpus: float | None = None
    mem_mib: int | None = None
    tasks: int | None = None

    @property
    def name(self) -> str:
        return f"{self.label}={self.value}"


@dataclass(frozen=True, slots=True)
class PriorityClass:
    """One of ``policy.priorityClasses``: a named priority a spec picks with
    ``spec.priorityClassName``; a class not ``preemptible`` is never preempted."""

    name: str
    value: int
    preemptible: bool = True


@dataclass(frozen=True, slots=True)
class PolicyConfig:
    max_tasks_per_job: int = 1000
    max_jobs: int = 3000  # jobs one state folder holds (``tfdeclare.core.plan.quotas``)
    allowed_images: tuple[str, ...] | None = None  # None: any image
    require_image: bool = False
    allowed_host_paths: tuple[str, ...] = ()  # none by default: no hostPath volume
    max_gpus_per_job: int | None = None
    quotas: tuple[Quota, ...] = ()
    max_priority: int | None = None  # the highest spec.priority a job may have (None: any)
    # Jobs of this priority or higher are never preempted (None: any job of a lower priority may be)
    non_preemptible_priority: int | None = None
    priority_classes: tuple[PriorityClass, ...] = ()

    @property
    def protected_classes(self) -> frozenset[str]:
        """The priority classes whose jobs are never preempted (``preemptible: false``)."""
        return frozenset(c.name for c in self.priority_classes if not c.preemptible)


def policy_checks(
    policy: PolicyConfig,
    reserved: Sequence[str],
    secrets: SecretsConfig | None = None,
    sources: SpecSources | None = None,
    sockets: Sequence[str] = (),
) -> tuple[SpecCheck, ...]:
    """Every per-job rule of ``policy`` and ``secrets``; ``reserved`` are the controller's own
    folders (state, status) and ``sockets`` the container engines', which no job may use as
    its working folder or mount; ``sources``, where the spec files were read from (None: each
    spec file's own folder is its root, and links are not resolved)."""
    named = {
        **{posixpath.normpath(p): "the container engine's socket" for p in sockets},
        **{posixpath.normpath(p): "tfdeclare's own folder" for p in reserved},
    }
    checks: list[SpecCheck] = [
        partial(check_secret_refs, secrets or SecretsConfig()),
        partial(check_task_count, policy.max_tasks_per_job),
        partial(check_images, policy),
        partial(check_host_paths, policy.allowed_host_paths),
        partial(check_reserved_paths, named),
        partial(check_source_folders, sources or SpecSources((), "/"), named),
        check_log_dir,
        partial(check_checkpoint_dir, policy.allowed_host_paths, named),
        PriorityClasses({c.name: c for c in policy.priority_classes}),
    ]
    if policy.max_gpus_per_job is not None:
        checks.append(partial(check_gpus, policy.max_gpus_per_job))
    if policy.max_priority is not None:
        checks.append(partial(check_priority, policy.max_priority))
    return tuple(checks)


def check_secret_refs(secrets: SecretsConfig, job: LoadedJob, at: Locate) -> Sequence[Diagnostic]:
    """The config's ``secrets``: which controller variables and files a spec may name."""
    spec = job.canonical["spec"]
    places: list[tuple[JsonPath, Mapping[str, Any]]] = [(("spec", "env"), spec["env"])]
    places += [(("spec", "replicas", role, "env"), e.get("env", {})) for role, e in spec["replicas"].items()]
    problems = []
    for place, env in places:
        for name, value in env.items():
            if isinstance(value, str):
                continue
            ref = SecretRef.from_json(value)
            problem = _refused(secrets, ref)
            if problem is not None:
                problems.append(at((*place, name, "secretRef"), f"{name}: {problem}"))
    return problems


def _refused(secrets: SecretsConfig, ref: SecretRef) -> str | None:
    if ref.source is SecretSource.ENV and not any(fnmatchcase(ref.where, p) for p in secrets.allowed_env):
        return f"the controller's variable {ref.where} is not readable by specs (secrets.allowedEnv)"
    if ref.source is SecretSource.FILE:
        path = posixpath.normpath(ref.where)
        if not any(lies_under(path, prefix) for prefix in secrets.allowed_files):
            return f"the controller's file {path} is not readable by specs (secrets.allowedFiles)"
    if ref.source is SecretSource.NAME and secrets.dir is None:
        return "{name, key} references need secrets.dir in the config"
    return None


def check_task_count(max_tasks: int, job: LoadedJob, at: Locate) -> Sequence[Diagnostic]:
    """``policy.maxTasksPerJob``: a job's size is bounded, so no replica count can take the
    controller down. Every task counts, the TensorBoard task too. Reported at the count of the
    largest role."""
    if job.screen.tasks <= max_tasks:
        return ()
    runs = job.runs
    total = sum(run.count for run in runs)
    largest = max(runs, key=lambda run: run.count)
    return (
        at(
            largest.count_at,
            f"the job has {total} tasks; at most {max_tasks} per job (policy.maxTasksPerJob in the config)",
        ),
    )


def check_gpus(max_gpus: int, job: LoadedJob, at: Locate) -> Sequence[Diagnostic]:
    """``policy.maxGpusPerJob`` over every task (TensorBoard's too), reported at the GPUs of
    the role that asks for the most."""
    if job.screen.gpus <= max_gpus:
        return ()
    runs = job.runs
    total = sum(run.count * run.resources.gpus for run in runs)
    largest = max(runs, key=lambda run: run.count * run.resources.gpus)
    return (
        at(
            (*largest.resources_at, "gpus"),
            f"the job asks for {total} GPUs; at most {max_gpus} per job (policy.maxGpusPerJob in the config)",
        ),
    )


def check_priority(max_priority: int, job: LoadedJob, at: Locate) -> Sequence[Diagnostic]:
    """``policy.maxPriority``: a priority lets a job preempt the jobs below it, so who may
    write a spec does not decide alone how high it goes. Reported at ``spec.priority``."""
    priority = int(job.canonical["spec"].get("priority", 0))
    if priority <= max_priority:
        return ()
    message = (
        f"priority {priority} is above {max_priority}, the highest allowed (policy.maxPriority in the config)"
    )
    return (at(("spec", "priority"), message),)


@dataclass(frozen=True)
class PriorityClasses:
    """``policy.priorityClasses`` as a spec rule and an admission (``loader.Admission``): a
    spec's ``spec.priorityClassName`` must name one of them, and its value is written into the
    job's ``spec.priority`` (left out when 0, as a written 0 is), so that the queue, the
    preemption and the plan read one priority. ``policy.maxPriority`` bounds only a priority
    written in a spec, not a class's value: the config sets both."""

    classes: Mapping[str, PriorityClass]

    def __call__(self, job: LoadedJob, at: Locate) -> Sequence[Diagnostic]:
        name = job.canonical["spec"].get("priorityClassName")
        if name is None or name in self.classes:
            return ()
        known = ", ".join(sorted(self.classes)) or "none"
        message = (
            f"priority class {name!r} is not defined; defined: {known} (policy.priorityClasses in the config)"
        )
        return (at(("spec", "priorityClassName"), message),)

    def admit(self, canonical: Mapping[str, Any]) -> Mapping[str, Any]:
        spec = canonical["spec"]
        chosen = self.classes.get(spec.get("priorityClassName", ""))
        if chosen is None:
            return canonical
        admitted = {k: v for k, v in spec.items() if k != "priority"}
        if chosen.value:
            admitted["priority"] = chosen.value
        return {**canonical, "spec": admitted}


def check_images(policy: PolicyConfig, job: LoadedJob, at: Locate) -> Sequence[Diagnostic]:
    """``policy.allowedImages`` (glob patterns on the whole reference) and
    ``policy.requireImage``, for the image every task runs (a role's own, TensorBoard's),
    each reported once at the field that names it."""
    allowed = policy.allowed_images
    screen = job.screen
    if not (policy.require_image and screen.unset_image) and (
        allowed is None or all(any(fnmatchcase(i, p) for p in allowed) for i in screen.images)
    ):
        return ()
    problems: dict[JsonPath, Diagnostic] = {}
    for run in job.runs:
        if run.image_at in problems:
            continue
        if run.image is None:
            if policy.require_image:
                what = "the TensorBoard task" if run.role is Role.TENSORBOARD else f"role {run.role.value}"
                problems[run.image_at] = at(
                    run.image_at,
                    f"{what} has no image; every task needs one (policy.requireImage in the config)",
                )
            continue
        if allowed is None or any(fnmatchcase(run.image, pattern) for pattern in allowed):
            continue
        shown = ", ".join(allowed) if allowed else "none"
        problems[run.image_at] = at(
            run.image_at,
            f"image {run.image!r} is not allowed; allowed: {shown} (policy.allowedImages in the config)",
        )
    return tuple(problems.values())


def lies_under(path: str, prefix: str) -> bool:
    """Whether the normalised absolute ``path`` is ``prefix`` or inside it (whole components)."""
    prefix = posixpath.normpath(prefix)
    return path == prefix or path.startswith(prefix.rstrip("/") + "/")


def check_host_paths(allowed: Sequence[str], job: LoadedJob, at: Locate) -> Sequence[Diagnostic]:
    """``policy.allowedHostPaths``: every volume's ``hostPath`` lies under one of them."""
    problems = []
    for index, volume in enumerate(job.canonical["spec"]["volumes"]):
        host_path = posixpath.normpath(volume["hostPath"])
        if not any(lies_under(host_path, prefix) for prefix in allowed):
            shown = ", ".join(allowed) if allowed else "none (set policy.allowedHostPaths to allow some)"
            problems.append(
                at(
                    ("spec", "volumes", index, "hostPath"),
                    f"host path {host_path} is not allowed; allowed under: {shown} "
                    "(policy.allowedHostPaths in the config)",
                )
            )
    return problems


def check_reserved_paths(reserved: Mapping[str, str], job: LoadedJob, at: Locate) -> Sequence[Diagnostic]:
    """No task works in the controller's own state or status folders or a container engine's
    socket (``reserved``: path -> what it is), and no volume is, or holds, one of them (a task could
    forge job records or status, or start containers of its own). Relative working folders
    are judged where they resolve, by ``check_source_folders``."""
    volumes = job.canonical["spec"]["volumes"]
    if not volumes and not any(posixpath.isabs(d) for d in job.screen.working_dirs):
        return ()
    # (where, the path, whether a folder above a reserved one counts: a mount exposes all below it)
    candidates: dict[JsonPath, tuple[str, bool]] = {}
    for run in job.runs:
        if run.working_dir and posixpath.isabs(run.working_dir):
            candidates.setdefault(run.working_dir_at, (run.working_dir, False))
    for index, volume in enumerate(volumes):
        candidates[("spec", "volumes", index, "hostPath")] = (volume["hostPath"], True)
    problems = []
    for path, (value, above) in candidates.items():
        problem = reserved_path_problem(posixpath.normpath(value), reserved, mounted=above)
        if problem is not None:
            problems.append(at(path, problem))
    return problems


@dataclass(frozen=True)
class SpecSources:
    """Where spec files were read from, as the shell found them: the folders they may lie in
    (``roots``, absolute, links resolved), the folder relative file names are taken from
    (``base``; also the folder of a spec read from standard input), and how a path resolves
    on this machine (``resolve``: the shell passes ``os.path.realpath``; pure tests pass
    ``posixpath.normpath``)."""

    roots: tuple[str, ...]
    base: str
    resolve: Callable[[str], str] = posixpath.normpath
    # Git mode: the roots are the repository's (``--path``), so one counts only where it
    # resolves inside ``base`` (the snapshot): a ``--path`` committed as a link out of the
    # repository bounds nothing
    confined: bool = False

    def folder_of(self, file: str) -> str:
        """The folder of the spec file ``file`` (as a ``SourceRef`` names it), resolved."""
        if file == STDIN_NAME:
            return self.resolve(self.base)
        return self.resolve(posixpath.dirname(posixpath.join(self.base, file)))

    def root_of(self, folder: str) -> str | None:
        """The innermost root holding ``folder``; the folder itself when no roots are known
        (pure checks), None when roots are known and none holds it (a spec's recorded file that
        no folder read holds: never its own root). Roots are resolved when asked: in git mode
        they lie behind the link to the current snapshot."""
        if not self.roots:
            return folder
        inside = self.resolve(self.base) if self.confined else None
        holding = [
            real
            for r in self.roots
            if lies_under(folder, real := self.resolve(r)) and (inside is None or lies_under(real, inside))
        ]
        return max(holding, key=len) if holding else None


def check_source_folders(
    sources: SpecSources, reserved: Mapping[str, str], job: LoadedJob, at: Locate
) -> Sequence[Diagnostic]:
    """A relative ``workingDir`` (the job's or a role's) names the task's *source folder*,
    which the local backend's containers get mounted: after ``..`` and links are resolved it
    must stay inside the folder the spec was read from (``sources``), whatever the policy,
    and must not be, or lie in, a ``reserved`` path. A source folder that *holds* the state
    folder is mounted without it (the local backend hides it)."""
    if all(posixpath.isabs(d) for d in job.screen.working_dirs):
        return ()
    problems: dict[JsonPath, Diagnostic] = {}
    relative = [r for r in job.runs if r.working_dir and not posixpath.isabs(r.working_dir)]
    if not relative:
        return ()
    folder = sources.folder_of(job.source.file)
    root = sources.root_of(folder)
    if root is None:  # only a claim (a hand-made source) can name such a file: refuse every relative one
        return tuple(
            at(
                run.working_dir_at,
                f"workingDir {run.working_dir} is taken relative to {folder}, which is not a folder "
                "the specs were read from: a relative workingDir needs the spec's own folder",
            )
            for run in {r.working_dir_at: r for r in relative}.values()
        )
    for run in relative:
        wd = run.working_dir
        if wd is None or run.working_dir_at in problems:
            continue
        target = sources.resolve(posixpath.normpath(posixpath.join(folder, wd)))
        problem = source_folder_problem(f"workingDir {wd}", target, root, reserved)
        if problem is not None:
            problems[run.working_dir_at] = at(run.working_dir_at, problem)
    return tuple(problems.values())


def source_folder_problem(what: str, target: str, root: str, reserved: Mapping[str, str]) -> str | None:
    """The source-folder rule on one folder: ``what`` (``workingDir sub``) leads to ``target``
    (links resolved), which must lie inside ``root`` and in no ``reserved`` path. Applied when a
    spec is checked and again, links resolved anew, when each task is launched."""
    if not lies_under(target, root):
        return (
            f"{what} leads to {target}, outside {root}, the folder the spec was read "
            "from (links resolved): a relative workingDir must stay inside it; use an "
            "absolute workingDir (a folder of the image) or a volume"
        )
    # a reserved folder that holds the root itself is not counted: in git mode the checkout
    # (its snapshot) lies in the state folder, and the target stays inside the checkout
    hit = next((r for r in reserved if lies_under(target, r) and not lies_under(root, r)), None)
    if hit is not None:
        return f"{what} leads to {target}, in {reserved[hit]} {hit}: no job may use it"
    return None


def reserved_path_problem(path: str, reserved: Mapping[str, str], *, mounted: bool) -> str | None:
    """Whether ``path`` (normalised) is, lies in or, when ``mounted`` (a volume exposes all below
    it), holds one of the ``reserved`` paths; applied when a spec is checked and at launch."""
    hit = next((r for r in reserved if lies_under(path, r) or (mounted and lies_under(r, path))), None)
    return None if hit is None else f"{path} is or holds {reserved[hit]} {hit}: no job may use it"


def check_log_dir(job: LoadedJob, at: Locate) -> Sequence[Diagnostic]:
    """A relative ``tensorboard.logDir`` is taken in TensorBoard's own working folder: it may
    reach its job's other task folders (``../chief-0/logs``), nothing above them."""
    board = job.canonical["spec"].get("tensorboard")
    log_dir = board["logDir"] if board else None
    if log_dir is None or "://" in log_dir or posixpath.isabs(log_dir):
        return ()
    reached = posixpath.normpath(posixpath.join("job/tensorboard-0", log_dir))
    if reached == "job" or reached.startswith("job/"):
        return ()
    return (
        at(
            ("spec", "tensorboard", "logDir"),
            f"logDir {log_dir} leads out of the job's task folders: a relative logDir may "
            "name its job's folders (../chief-0/logs), nothing above them",
        ),
    )


def check_checkpoint_dir(
    allowed: Sequence[str], reserved: Mapping[str, str], job: LoadedJob, at: Locate
) -> Sequence[Diagnostic]:
    """``spec.checkpoint.dir``, which the controller reads (docs/security.md): a relative one
    is taken in the saving task's working folder and may reach its job's other task folders
    (``../worker-0/ckpt``), nothing above them; an absolute one is a folder of the controller's
    machine, so it must lie under ``policy.allowedHostPaths`` and not in a ``reserved`` path."""
    checkpoint = job.canonical["spec"].get("checkpoint")
    if checkpoint is None:
        return ()
    where: JsonPath = ("spec", "checkpoint", "dir")
    folder = checkpoint["dir"]
    if not posixpath.isabs(folder):
        reached = posixpath.normpath(posixpath.join("job/task", folder))
        if reached == "job" or reached.startswith("job/"):
            return ()
        return (
            at(
                where,
                f"checkpoint.dir {folder} leads out of the job's task folders: a relative "
                "checkpoint.dir may name its job's folders (../worker-0/ckpt), nothing above them",
            ),
        )
    path = posixpath.normpath(folder)
    problem = reserved_path_problem(path, reserved, mounted=False)
    if problem is not None:
        return (at(where, f"checkpoint.dir {problem}"),)
    if not any(lies_under(path, prefix) for prefix in allowed):
        shown = ", ".join(allowed) if allowed else "none (set policy.allowedHostPaths to allow some)"
        return (
            at(
                where,
                f"checkpoint.dir {path} is read by the controller on its machine and is not allowed; "
                f"allowed under: {shown} (policy.allowedHostPaths in the config)",
            ),
        )
    return ()
