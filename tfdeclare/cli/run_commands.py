"""``apply`` and ``delete``: the commands that act on running jobs (``status`` is
``status_command``, ``logs`` ``logs_command``).

``apply`` takes the state folder's lock, applies the plan to the job records and runs
reconcile passes: without ``--wait`` until every job's tasks are seen running (or waiting for
resources; tasks still starting after ``STARTING_GRACE_S`` are left starting), so the status
files it leaves say what runs; with ``--wait`` until every job of the files has Succeeded or Failed, printing
progress as it changes. Tasks are detached processes (or Mesos tasks): interrupting ``apply``
never stops them; a later ``apply``, ``status`` or the daemon adopts them.
"""

from __future__ import annotations

import argparse
import json
import sys
import threading
import time
from pathlib import Path
from typing import Any

from tfdeclare.cli import pulls, terminal
from tfdeclare.cli.common import (
    EXIT_ERROR,
    EXIT_INTERRUPTED,
    EXIT_OK,
    Settings,
    UserError,
    print_backend_warnings,
    print_diagnostics,
    settings_from,
    stderr_line,
    stdout_write,
)
from tfdeclare.cli.specs_commands import PLAN_KIND
from tfdeclare.cli.status_command import _phase
from tfdeclare.cli.validate_command import load_desired
from tfdeclare.cli.wiring import controller_for, locked
from tfdeclare.controller import Controller
from tfdeclare.core.diagnostics import Code, Diagnostic, JsonPath, format_json_path
from tfdeclare.core.enums import Phase, Reason, TaskState
from tfdeclare.core.plan.desired import DesiredState
from tfdeclare.core.plan.planner import Action, Plan, PlanOptions, plan
from tfdeclare.core.plan.render import plan_json, render_text
from tfdeclare.core.run.record import JobRecord
from tfdeclare.core.spec.loader import LoadedJob, Locate, SourceRef
from tfdeclare.core.spec.model import fingerprint
from tfdeclare.core.tone import Painter, plain
from tfdeclare.shell.sources import spec_sources
from tfdeclare.shell.store import StateError, StateStore

# A job has what it needs for now (apply without --wait may return) in these states.
_LAUNCHED_REASONS = frozenset(
    {
        Reason.ALL_TASKS_RUNNING,
        Reason.WAITING_FOR_RESOURCES,
        Reason.WAITING_FOR_GPUS,
        Reason.WAITING_FOR_OFFERS,
        Reason.UNSCHEDULABLE,
        Reason.BACKING_OFF,
    }
)
# Without --wait, apply waits this long for launched tasks to be seen running (a local task's
# supervisor answers within a second), so that the status it leaves behind says what runs
# rather than "starting"; a task slower to start (an image being fetched) is left starting.
STARTING_GRACE_S = 10.0


def _is_plan_file(paths: list[str]) -> bool:
    if len(paths) != 1 or not Path(paths[0]).is_file():
        return False
    try:
        with open(paths[0], encoding="utf-8") as handle:
            head = handle.read(1)
            if head != "{":
                return False
            handle.seek(0)
            return bool(json.load(handle).get("kind") == PLAN_KIND)
    except (OSError, ValueError, AttributeError):
        return False


def _locate(job: LoadedJob) -> Locate:
    """Diagnostics on a saved plan's job, at its file and line."""

    def at(path: JsonPath, message: str) -> Diagnostic:
        source = job.source
        return Diagnostic(source.file, source.line, None, message, format_json_path(path), Code.BACKEND)

    return at


def _saved_plan(path: str, settings: Settings, store: StateStore) -> tuple[Plan, DesiredState]:
    """Re-plan from a saved plan's specs; refuse it when the state moved since."""
    try:
        saved = json.loads(Path(path).read_text(encoding="utf-8"))
        desired_specs: dict[str, Any] = saved["desiredAll"]
        options = PlanOptions(
            prune=saved["plan"]["options"]["prune"],
            allow_empty=saved["plan"]["options"]["allowEmpty"],
            backend=settings.backend,
            quotas=settings.config.policy.quotas,
        )
    except (OSError, ValueError, KeyError, TypeError) as err:
        raise UserError(f"{path}: not a readable tfdeclare plan ({err})") from err
    if saved.get("backend") != settings.backend or saved.get("stateDir") != str(settings.state_dir):
        raise UserError(
            f"{path} was made for backend {saved.get('backend')} and state folder {saved.get('stateDir')}; "
            f"this is backend {settings.backend} with {settings.state_dir}"
        )
    jobs = {
        name: LoadedJob(
            name, entry["spec"], fingerprint(entry["spec"]), SourceRef(entry["file"], entry["line"])
        )
        for name, entry in desired_specs.items()
    }
    # the paths the plan was made from, as given then (relative to this same folder: the state
    # folder matched): a hand-edited spec is judged where its file lies, like any other
    checks = settings.reading(spec_sources([str(p) for p in saved.get("paths") or ["."]])).spec_checks
    problems = [p for job in jobs.values() for check in checks for p in check(job, _locate(job))]
    if problems:  # the policy or the backend may have changed since, or the file was edited
        print_diagnostics(problems)
        raise UserError(f"{path}: its jobs break the policy or the backend's rules (see above)")
    desired = DesiredState(
        jobs,
        (),
        dict.fromkeys(saved.get("protected", []), ()),
        frozenset(saved.get("invalidFiles", [])),
        tuple(saved.get("files", [])),
        frozenset(saved.get("emptyFiles", [])),
    )
    observed = store.observed()
    current = plan(desired, observed, options)
    stale = current.observed_fingerprint != saved["observedFingerprint"] or [
        (j["name"], j["action"]) for j in saved["plan"]["jobs"]
    ] != [(j.name, j.action.value) for j in current.jobs]
    if stale:
        raise UserError(
            f"{path} is stale: the jobs it was planned against have changed since (another apply, a "
            "completion or a failure). Run `tfdeclare plan` again."
        )
    return current, desired


class _Waker:
    """Lets the backend's watcher cut a sleep between passes short."""

    def __init__(self) -> None:
        self.event = threading.Event()

    def __call__(self) -> None:
        self.event.set()

    def sleep(self, seconds: float) -> None:
        self.event.wait(seconds)
        self.event.clear()


def _progress_line(record: JobRecord, paint: Painter = plain) -> str:
    spec = record.spec
    desired = len(spec.task_keys())
    running = sum(1 for t in record.tasks if t.state is TaskState.RUNNING)
    done = sum(1 for t in record.tasks if t.state is TaskState.SUCCEEDED)
    phase = Phase.DELETING if record.deleting else record.phase
    parts = [f"{record.name:<24} {_phase(phase, paint, 10)} {running}/{desired} running"]
    if done:
        parts.append(f"{done} succeeded")
    if record.restarts:
        parts.append(f"restarts {record.restarts}/{spec.backoff_limit}")
    return ", ".join(parts) + (f" — {record.message}" if record.message else "")


def _run_passes(
    controller: Controller, names: set[str], *, wait: bool, timeout: float | None, show: bool = True
) -> tuple[dict[str, JobRecord], bool, list[str]]:
    """Reconcile until the jobs in ``names`` are launched (or finished, with ``wait``).
    Returns the last records, whether it timed out, and the errors of the last pass (each
    error is printed once, when first seen)."""
    waker = _Waker()
    paint = terminal.painter(sys.stdout)
    controller.backend.watch(waker)
    started = time.monotonic()
    shown: dict[str, tuple[object, ...]] = {}
    told: set[str] = set()
    limit = timeout if timeout is not None else (None if wait else 60.0)
    while True:
        result = controller.reconcile()
        for error in result.errors:
            if error not in told:
                told.add(error)
                stderr_line(f"tfdeclare: {error}")
        records = {n: r for n, r in controller.store.records().items() if n in names}
        elapsed = time.monotonic() - started
        for name in sorted(names):
            record = records.get(name)
            line = _progress_line(record, paint) if record else f"{name:<24} deleted"
            # Print when something a reader cares about changed (not a backoff countdown).
            key = (
                (record.phase, record.deleting, record.reason, record.restarts, record.tasks)
                if record
                else ()
            )
            if shown.get(name) != key:
                shown[name] = key
                if show:
                    stdout_write(f"[{elapsed:6.1f}s] {line}\n")
        if _finished(records, wait, patient=elapsed < STARTING_GRACE_S):
            return records, False, result.errors
        if limit is not None and elapsed >= limit:
            return records, True, result.errors
        pause = 0.25 if not wait else 0.5
        if result.wake_at is not None:
            pause = min(pause, max(0.05, result.wake_at - time.time()))
        waker.sleep(pause)


def _finished(records: dict[str, JobRecord], wait: bool, *, patient: bool = False) -> bool:
    """Whether apply (or delete) may stop its passes: every job done with (``wait``) or
    launched; launched means its tasks are seen running, or, once no longer ``patient``,
    at least on their way."""
    for record in records.values():
        if record.deleting:
            if wait:
                return False
            continue
        if record.phase.terminal:
            if wait and any(t.state.alive for t in record.tasks):
                return False  # done, but still stopping what ran beside the chief
            continue
        if wait:
            if record.reason is not Reason.UNSCHEDULABLE:
                return False
        elif record.reason not in _LAUNCHED_REASONS and (
            patient or record.reason is not Reason.TASKS_STARTING
        ):
            return False
    return True


def cmd_apply(args: argparse.Namespace) -> int:
    settings = settings_from(args)
    store = StateStore(settings.state_dir)
    with locked(settings, "apply", source=" ".join(args.paths)):
        if _is_plan_file(args.paths):
            result, desired = _saved_plan(args.paths[0], settings, store)
        else:
            desired, _ = load_desired(args.paths, settings)
            if desired.has_errors:
                print_diagnostics(desired.diagnostics, args.output)
                raise UserError("nothing applied: the specs have errors (see above)")
            print_diagnostics(desired.diagnostics, args.output)  # warnings
            try:
                result = plan(
                    desired,
                    store.observed(),
                    PlanOptions(
                        prune=args.prune,
                        allow_empty=args.allow_empty,
                        backend=settings.backend,
                        quotas=settings.config.policy.quotas,
                    ),
                )
            except StateError as err:
                raise UserError(str(err)) from err
        if result.has_errors:  # a quota refused a job
            print_diagnostics([d for d in result.diagnostics if d.code is Code.QUOTA])
            raise UserError("nothing applied: the specs break the policy (see above)")
        machine = args.output == "json"
        if not machine:
            stdout_write(render_text(result, paint=terminal.painter(sys.stdout)))
        print_backend_warnings(settings, list(desired.jobs.values()))
        with controller_for(settings) as controller, pulls.shown_on(sys.stderr):
            controller.apply(result)
            names = set(desired.jobs) | {j.name for j in result.jobs if j.action is Action.DELETE}
            records: dict[str, JobRecord] = {}
            timed_out, errors = False, list[str]()
            if names:
                if not machine:
                    stdout_write("\n")
                try:
                    records, timed_out, errors = _run_passes(
                        controller, names, wait=args.wait, timeout=args.timeout, show=not machine
                    )
                except KeyboardInterrupt:
                    stderr_line(
                        "tfdeclare: interrupted; the jobs keep running (`tfdeclare status` adopts them)"
                    )
                    return EXIT_INTERRUPTED
    if machine:
        outcome = {
            "plan": plan_json(result),
            "jobs": [
                {
                    "name": name,
                    "phase": record.phase.value,
                    "reason": record.reason.value if record.reason else None,
                    "restarts": record.restarts,
                    "message": record.message,
                }
                for name, record in sorted(records.items())
            ],
            "deleted": sorted(names - set(records)) if names else [],
            "timedOut": timed_out,
            "errors": errors,
        }
        stdout_write(json.dumps(outcome, indent=2, ensure_ascii=False) + "\n")
    return _apply_outcome(records, timed_out, errors, wait=args.wait)


NAMES_SHOWN = 20  # jobs a line names before it says how many more


def _some(names: list[str]) -> str:
    """``a, b, c`` — at most ``NAMES_SHOWN`` of them, then how many more (10,000 unschedulable
    jobs are one line, not 80 KB; `tfdeclare status` lists them all)."""
    if len(names) <= NAMES_SHOWN:
        return ", ".join(names)
    return f"{', '.join(names[:NAMES_SHOWN])} and {len(names) - NAMES_SHOWN} more"


def _apply_outcome(records: dict[str, JobRecord], timed_out: bool, errors: list[str], *, wait: bool) -> int:
    failed = sorted(n for n, r in records.items() if r.phase is Phase.FAILED)
    stuck = sorted(n for n, r in records.items() if r.reason is Reason.UNSCHEDULABLE and not r.phase.terminal)
    if stuck:
        stderr_line(f"tfdeclare: cannot be scheduled: {_some(stuck)} (see `tfdeclare status NAME`)")
    if wait and failed:
        stderr_line(f"tfdeclare: failed: {_some(failed)}")
        return EXIT_ERROR
    if timed_out:
        stderr_line("tfdeclare: timed out waiting; the jobs keep running (`tfdeclare status`)")
        return EXIT_ERROR
    if errors:
        stderr_line(f"tfdeclare: {len(errors)} problem(s) remain (above); the next pass retries them")
        return EXIT_ERROR
    return EXIT_ERROR if stuck else EXIT_OK  # it can never run as configured: a user error


# ---- delete -------------------------------------------------------------------------------


def cmd_delete(args: argparse.Namespace) -> int:
    settings = settings_from(args)
    store = StateStore(settings.state_dir)
    names = sorted(store.records()) if args.all else list(args.names)
    if not names:
        if args.all:
            return EXIT_OK
        raise UserError("name the jobs to delete (or --all)")
    timed_out = False
    with locked(settings, "delete", source=" ".join(names)), controller_for(settings) as controller:
        missing = controller.delete(names)
        present = set(names) - set(missing)
        if present:
            _, timed_out, _ = _run_passes(
                controller, present, wait=True, timeout=args.timeout, show=args.output != "json"
            )
    if args.output == "json":
        document = {"deleted": sorted(present), "missing": sorted(missing), "timedOut": timed_out}
        stdout_write(json.dumps(document, indent=2) + "\n")
    if timed_out:
        stderr_line("tfdeclare: timed out waiting for tasks to stop; they are still being stopped")
        return EXIT_ERROR
    if missing and not args.ignore_not_found:
        raise UserError(f"no job named {', '.join(repr(m) for m in missing)}")
    return EXIT_OK
