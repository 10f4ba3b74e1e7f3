"""``apply``, ``status``, ``logs`` and ``delete``: the commands that act on running jobs.

``apply`` takes the state folder's lock, applies the plan to the job records and runs
reconcile passes: without ``--wait`` until every job's tasks are seen running (or waiting for
resources; tasks still starting after ``STARTING_GRACE_S`` are left starting), so the status
files it leaves say what runs; with ``--wait`` until every job of the files has Succeeded or Failed, printing
progress as it changes. Tasks are detached processes (or Mesos tasks): interrupting ``apply``
never stops them; a later ``apply``, ``status`` or the daemon adopts them.
"""

from __future__ import annotations

import argparse
import calendar
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
from tfdeclare.cli.validate_command import load_desired
from tfdeclare.cli.wiring import controller_for, locked
from tfdeclare.controller import Controller
from tfdeclare.core.diagnostics import Code, Diagnostic, JsonPath, format_json_path
from tfdeclare.core.enums import Phase, Reason, TaskState
from tfdeclare.core.plan.desired import DesiredState
from tfdeclare.core.plan.planner import Action, Plan, PlanOptions, plan
from tfdeclare.core.plan.render import plan_json, render_text
from tfdeclare.core.run import status
from tfdeclare.core.run.record import JobRecord
from tfdeclare.core.spec.loader import LoadedJob, Locate, SourceRef
from tfdeclare.core.spec.model import fingerprint
from tfdeclare.core.tone import PHASE_TONES, Painter, Tone, plain
from tfdeclare.shell.lock import ControllerLock
from tfdeclare.shell.sources import spec_sources
from tfdeclare.shell.statuswriter import STATUS_INDEX, StatusWriter
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


# ---- status -----------------------------------------------------------------------------


def _refresh(settings: Settings) -> None:
    """One reconcile pass (``status --refresh``): adopt tasks, notice the ones that ended."""
    if not StateStore(settings.state_dir).jobs_dir.is_dir():
        return
    with (
        locked(settings, "status --refresh"),
        controller_for(settings) as controller,
        pulls.shown_on(sys.stderr),
    ):
        result = controller.reconcile()
    for error in result.errors:
        stderr_line(f"tfdeclare: {error}")


def _freshness(settings: Settings) -> str:
    """Who keeps the status files current, for a note under the table."""
    holder = ControllerLock(settings.state_dir).holder()
    if holder is not None:
        who = holder.get("purpose", "a controller")
        return f"status files kept current by {who} (pid {holder.get('pid', '?')})"
    return (
        "as of the last reconcile pass; no controller is running: `tfdeclare status --refresh` updates them"
    )


def _age(timestamp: str | None) -> str:
    if not timestamp:
        return "-"
    then = calendar.timegm(time.strptime(timestamp, "%Y-%m-%dT%H:%M:%SZ"))  # UTC, whatever the DST
    seconds = max(0, int(time.time() - then))
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size:
            return f"{seconds // size}{unit}"
    return f"{seconds}s"


def _phase(phase: str, paint: Painter, width: int = 0) -> str:
    try:
        tone = PHASE_TONES[Phase(phase)]
    except ValueError:
        return phase.ljust(width)
    return paint(phase, tone) + " " * (width - len(phase))


def _status_table(summaries: list[dict[str, Any]], paint: Painter = plain) -> str:
    """One line a job, from its summary (``core.run.status.summary``)."""
    rows = [("NAME", "PHASE", "TASKS", "RESTARTS", "AGE", "MESSAGE")]
    for job in summaries:
        done = job.get("succeeded", 0)
        counts = f"{job.get('running', 0)}/{job.get('tasks', 0)}" + (f" ({done} done)" if done else "")
        rows.append(
            (
                str(job["name"]),
                str(job["phase"]),
                counts,
                str(job.get("restarts", 0)),
                _age(job.get("startTime")),
                str(job.get("message", "")),
            )
        )
    widths = [max(len(r[i]) for r in rows) for i in range(5)]
    header = "  ".join(c.ljust(w) for c, w in zip(rows[0][:5], widths, strict=True)) + "  " + rows[0][5]
    lines = [paint(header, Tone.STRONG)]
    for r in rows[1:]:
        cells = [r[0].ljust(widths[0]), _phase(r[1], paint, widths[1])]
        cells.extend(c.ljust(w) for c, w in zip(r[2:5], widths[2:], strict=True))
        lines.append("  ".join(cells) + "  " + r[5])
    return "".join(line.rstrip() + "\n" for line in lines)


def _status_detail(doc: dict[str, Any], paint: Painter = plain) -> str:
    lines = [f"{paint(doc['name'], Tone.STRONG)}: {_phase(doc['phase'], paint)} — {doc.get('message', '')}"]
    if doc.get("source"):
        lines.append(f"  source:    {doc['source']['file']}:{doc['source']['line']}")
    lines.append(f"  spec hash: {doc['specHash'][:16]}   revision: {doc.get('revision') or '-'}")
    lines.append(f"  attempt {doc.get('attempt', 0)}, restarts {doc.get('restarts', 0)}")
    for role, scope in (doc.get("restartScopes") or {}).items():
        what = "alone" if scope["scope"] == "Task" else "the whole job"
        lines.append(f"  a failed {role} restarts {what} (restartScope {scope['scope']}: {scope['message']})")
    for each in doc.get("taskRestarts") or []:
        waiting = f", relaunch pending (from {each['nextLaunchTime']})" if each.get("pending") else ""
        fell = each.get("jobRestartsForItsAddress") or 0
        back = f", {fell} whole-job restart(s) for want of its address" if fell else ""
        lines.append(
            f"  {each['task']} restarted alone {each['restarts']}/{each['backoffLimit']}: "
            f"{each['message']} ({each['lastRestartTime']}){waiting}{back}"
        )
    lines.append(f"  started {doc.get('startTime') or '-'}, completed {doc.get('completionTime') or '-'}")
    lines.append("  conditions:")
    for c in doc.get("conditions", []):
        lines.append(f"    {c['type']:<12} {c['status']:<6} {c['reason']}: {c['message']}")
    tasks = doc.get("tasks", [])
    offset = int(doc.get("tasksOffset", 0))
    total = int(doc.get("taskCount", offset + len(tasks)))
    whole = not offset and len(tasks) == total
    lines.append("  tasks:" if whole else f"  tasks ({total} in all):")
    for t in tasks:
        where = f"{t['host']}:{t['port']}" if t.get("host") else "-"
        code = "" if t.get("exitCode") is None else f" exit {t['exitCode']}"
        name = f"{t['role']}-{t['index']}"
        lines.append(f"    {name:<12} {t['state']:<10} {where:<21}{code} {t.get('message', '')}".rstrip())
    if not whole:
        shown = f"tasks {offset + 1}-{offset + len(tasks)}" if tasks else "no task"
        following = total - offset - len(tasks)
        more = (
            f"; {following} more: `tfdeclare status {doc['name']} --tasks-offset {offset + len(tasks)}`"
            if following > 0
            else ""
        )
        lines.append(f"    ({shown} of {total} listed{more}, or `--tasks all`)")
    return "\n".join(lines) + "\n"


DETAIL_TASKS = 20  # tasks `tfdeclare status NAME` lists unless told (--tasks)


def _paged(doc: dict[str, Any], settings: Settings, offset: int, limit: int | None) -> dict[str, Any]:
    """The document with its tasks from ``offset``, at most ``limit`` (None: all). Tasks past
    those its status file lists (a big job's) come from the job's record, when there is one
    with the same spec and attempt; else only those listed."""
    listed = doc.get("tasks") or []
    total = int(doc.get("taskCount", len(listed)))
    end = total if limit is None else min(total, offset + limit)
    if end <= len(listed):
        page = listed[offset:end]
    else:
        try:
            record = StateStore(settings.state_dir).load(doc["name"])
        except StateError:
            record = None
        same = record is not None and (record.spec_hash, record.attempt) == (
            doc.get("specHash"),
            doc.get("attempt", 0),
        )
        if record is not None and same:
            page = status.task_entries(record, offset, None if limit is None else end - offset)
            total = status.task_count(record)
        else:
            page = listed[offset:end]
            stderr_line(
                f"tfdeclare: job {doc['name']}'s status file lists its first {len(listed)} of {total} "
                f"tasks and the state folder ({settings.state_dir}) has no record of this run of it "
                "to list the others"
            )
    paged = {k: v for k, v in doc.items() if k not in ("tasks", "tasksTruncated", "taskCount", "updatedAt")}
    paged["tasks"] = page
    if offset or len(page) < total:
        paged.update(tasksTruncated=True, taskCount=total, tasksOffset=offset)
    paged["updatedAt"] = doc.get("updatedAt")
    return paged


def cmd_status(args: argparse.Namespace) -> int:
    settings = settings_from(args)
    if args.refresh:
        _refresh(settings)
    statuses = StatusWriter(settings.status_dir, index=settings.state_dir / STATUS_INDEX)
    if args.name:
        document = statuses.read(args.name)
        if document is None:
            raise UserError(f"no job named {args.name!r} (no status file in {settings.status_dir})")
        told = args.tasks is not None or args.tasks_offset > 0
        limit = None if args.tasks == -1 else DETAIL_TASKS if args.tasks is None else args.tasks  # -1: all
        if args.output == "json" and not told:
            stdout_write(json.dumps(document, indent=2) + "\n")  # the status file as it is
        elif args.output == "json":
            paged = _paged(
                document, settings, args.tasks_offset, None if args.tasks in (None, -1) else args.tasks
            )
            stdout_write(json.dumps(paged, indent=2) + "\n")
        else:
            paged = _paged(document, settings, args.tasks_offset, limit)
            stdout_write(_status_detail(paged, terminal.painter(sys.stdout)))
    elif args.tasks is not None or args.tasks_offset:
        raise UserError("--tasks and --tasks-offset list the tasks of one job: name it")
    elif args.output == "json":
        documents = [d for d in (statuses.read(n) for n in statuses.names()) if d is not None]
        stdout_write(json.dumps(documents, indent=2) + "\n")
        return EXIT_OK
    elif summaries := statuses.summaries():
        stdout_write(_status_table(summaries, terminal.painter(sys.stdout)))
    else:
        stdout_write("No jobs.\n")
        return EXIT_OK
    if args.output != "json":
        stderr_line(f"({_freshness(settings)})")
    return EXIT_OK


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
