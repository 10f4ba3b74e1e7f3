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

from tfdeclare.cli import background, elsewhere, pulls, terminal
from tfdeclare.cli.common import (
    EXIT_ERROR,
    EXIT_INTERRUPTED,
    EXIT_OK,
    Origin,
    Settings,
    UserError,
    chosen_folders,
    print_backend_warnings,
    print_diagnostics,
    settings_from,
    stderr_line,
    stdout_write,
)
from tfdeclare.cli.output import document_text, is_document
from tfdeclare.cli.specs_commands import PLAN_KIND, plan_options
from tfdeclare.cli.validate_command import load_desired
from tfdeclare.cli.wiring import controller_for, locked
from tfdeclare.controller import Controller
from tfdeclare.core.diagnostics import Code
from tfdeclare.core.enums import Phase, Reason, TaskState
from tfdeclare.core.plan.claims import (
    STDIN_PATH,
    desired_mismatches,
    parse_plan_file,
    plan_mismatches,
    shown,
)
from tfdeclare.core.plan.desired import DesiredState
from tfdeclare.core.plan.planner import Action, Plan, plan
from tfdeclare.core.plan.problems import Problem, held_by, merged, standing
from tfdeclare.core.plan.render import plan_json, render_text
from tfdeclare.core.run.record import JobRecord
from tfdeclare.core.tone import PHASE_TONES, Painter, Tone, plain
from tfdeclare.shell import problems as problems_file
from tfdeclare.shell.lock import ControllerLock
from tfdeclare.shell.sources import spec_sources
from tfdeclare.shell.statuswriter import StatusWriter
from tfdeclare.shell.store import StateError, StateStore

# A job has what it needs for now (apply without --wait may return) in these states.
_LAUNCHED_REASONS = frozenset(
    {
        Reason.ALL_TASKS_RUNNING,
        Reason.WAITING_FOR_RESOURCES,
        Reason.WAITING_FOR_GPUS,
        Reason.WAITING_FOR_OFFERS,
        Reason.UNSCHEDULABLE,
        Reason.LAUNCH_REFUSED,
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
    except (OSError, ValueError, AttributeError, RecursionError):
        return False


def _read_from(paths: list[str]) -> list[str]:
    """The paths the specs of ``apply PATHS`` were read from (a saved plan's, as given then)."""
    if not _is_plan_file(paths):
        return paths
    try:
        saved = json.loads(Path(paths[0]).read_bytes())
        return [str(p) for p in saved.get("paths") or ["."]]
    except (OSError, ValueError, AttributeError):
        return ["."]  # read and checked before: not reached


def replan_saved(path: str, settings: Settings, store: StateStore) -> tuple[Plan, DesiredState]:
    """What ``apply PLANFILE`` applies: the specs read again from the plan's paths (as
    ``apply PATH`` reads them: the same loader, policy and backend checks) and planned against
    the state now, when that bears out everything the file claims; otherwise a ``UserError``
    naming what differs, and nothing is applied. The file is evidence, never authority: no spec,
    source file, prune list or option it holds is used unless the files say the same."""
    try:
        saved = parse_plan_file(json.loads(Path(path).read_text(encoding="utf-8")))
    except (OSError, ValueError, RecursionError) as err:
        raise UserError(f"{path}: not a readable tfdeclare plan ({err})") from err
    if saved.backend != settings.backend or saved.state_dir != str(settings.state_dir):
        raise UserError(
            f"{path} was made for backend {shown(saved.backend)} and state folder {shown(saved.state_dir)}; "
            f"this is backend {settings.backend} with {settings.state_dir}"
        )
    if STDIN_PATH in saved.paths:
        raise UserError(
            f"{path} was made from standard input, which cannot be read again: "
            "run `tfdeclare apply -` with the spec instead"
        )
    # the paths the plan was made from, as given then (relative to this same folder: the state
    # folder matched), read as `apply PATH` reads them
    desired, _ = load_desired(list(saved.paths), settings)
    if desired.has_errors:
        print_diagnostics(desired.diagnostics)
        raise UserError(
            f"nothing applied from {path}: the specs it was made from have errors now (see above)"
        )
    print_diagnostics(desired.diagnostics)  # warnings
    mismatches = desired_mismatches(saved, desired, path)
    if mismatches:
        print_diagnostics(mismatches)
        raise UserError(
            f"nothing applied from {path}: the files it was made from say otherwise now (see above); "
            "run `tfdeclare plan` again"
        )
    options = plan_options(settings, saved.paths, prune=saved.prune, allow_empty=saved.allow_empty)
    try:
        current = plan(desired, store.observed(), options)
    except StateError as err:
        raise UserError(str(err)) from err
    stale = plan_mismatches(saved, current)
    if stale:
        for line in stale[1:]:
            stderr_line(f"tfdeclare: {line}")
        raise UserError(f"{path} is stale: {stale[0]}. Run `tfdeclare plan` again.")
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
        if record.phase is Phase.SUSPENDED:  # its stops are asked for; a preempted one runs again
            if wait and (record.reason is Reason.PREEMPTED or any(t.state.alive for t in record.tasks)):
                return False
            continue
        if wait:
            if not record.reason.stalled:  # unschedulable, a launch refused: waiting is in vain
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
            result, desired = replan_saved(args.paths[0], settings, store)
            for flag, given, planned in (
                ("--prune", args.prune, result.options.prune),
                ("--allow-empty", args.allow_empty, result.options.allow_empty),
            ):
                if given and not planned:
                    stderr_line(
                        f"tfdeclare: warning: {flag} is ignored: a saved plan applies with the options "
                        f"it was made with (make it with `tfdeclare plan {flag} --out`)"
                    )
        else:
            desired, _ = load_desired(args.paths, settings)
            _record_problems(settings, args.paths, desired)
            if desired.has_errors:
                print_diagnostics(desired.diagnostics, args.output)
                raise UserError("nothing applied: the specs have errors (see above)")
            print_diagnostics(desired.diagnostics, args.output)  # warnings
            try:
                result = plan(
                    desired,
                    store.observed(),
                    plan_options(settings, args.paths, prune=args.prune, allow_empty=args.allow_empty),
                )
            except StateError as err:
                raise UserError(str(err)) from err
        if result.has_errors:  # a quota refused a job
            print_diagnostics([d for d in result.diagnostics if d.code is Code.QUOTA])
            raise UserError("nothing applied: the specs break the policy (see above)")
        elsewhere.check(settings, result, applying=True)  # never a second copy of a job
        machine = is_document(args.output)
        if not machine:
            stdout_write(render_text(result, paint=terminal.painter(sys.stdout)))
        print_backend_warnings(settings, list(desired.jobs.values()))
        with controller_for(settings) as controller, pulls.shown_on(sys.stderr):
            # where the specs were read from, recorded with each job (its workingDir's bound,
            # checked again at every launch)
            controller.sources = spec_sources(_read_from(args.paths))
            controller.apply(result)
            not_applied = [
                f"job {name}: not applied: cannot write {why}; free the disk and apply again"
                for name, why in sorted(controller.apply_failures.items())
            ]
            for line in not_applied:
                stderr_line(f"tfdeclare: error: {line}")
            _record(settings, result, args.paths, controller)
            names = set(desired.jobs) | {j.name for j in result.jobs if j.action is Action.DELETE}
            names -= controller.apply_failures.keys() - controller.store.records().keys()  # never made
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
            "errors": [*not_applied, *errors],
        }
        stdout_write(document_text(outcome, args.output, ensure_ascii=False))
    return _apply_outcome(records, timed_out, [*not_applied, *errors], wait=args.wait)


def _record(settings: Settings, result: Plan, paths: list[str], controller: Controller) -> None:
    """The apply in the history of revisions (``tfdeclare history``); a history that cannot be
    written is a warning, never a failed apply."""
    from tfdeclare.core.plan.history import applied
    from tfdeclare.shell.history import append_one

    records = controller.store.records()
    attempt = {name: record.attempt for name, record in records.items()}.get
    problem = append_one(settings.state_dir, applied(result, paths, attempt, time.time()))
    if problem is not None:
        stderr_line(f"tfdeclare: warning: {problem}")


def _record_problems(settings: Settings, paths: list[str], desired: DesiredState) -> None:
    """``apply PATH...`` (which holds the lock) records the problems of the files it read in
    the state folder's problems file, as the daemon does, and clears those it found fixed; the
    problems of other paths, and of a daemon's source, stand. Standard input is no file."""
    roots = [p for p in paths if p != "-"]
    if not roots:
        return
    where = problems_file.path_in(settings.state_dir)
    try:
        previous, _ = problems_file.load(where)
    except problems_file.ProblemsUnreadable:
        previous = ()  # rewritten whole below
    found = standing(
        desired.diagnostics,
        source="",
        source_error=None,
        fetch=False,
        rejected=None,
        revision=None,
        now=time.time(),
        previous=previous,
        held=held_by(desired.protected),
    )
    now = merged(previous, found, roots)
    if now == previous:
        return
    try:
        problems_file.save(where, now, time.time())
    except OSError as err:
        stderr_line(f"tfdeclare: warning: cannot record the problems in {where}: {err.strerror}")


def _apply_outcome(records: dict[str, JobRecord], timed_out: bool, errors: list[str], *, wait: bool) -> int:
    failed = sorted(n for n, r in records.items() if r.phase is Phase.FAILED)
    stuck = sorted(n for n, r in records.items() if r.reason is Reason.UNSCHEDULABLE and not r.phase.terminal)
    if stuck:
        stderr_line(f"tfdeclare: cannot be scheduled: {', '.join(stuck)} (see `tfdeclare status NAME`)")
    refused = sorted(n for n, r in records.items() if r.reason is Reason.LAUNCH_REFUSED)
    for name in refused:
        stderr_line(f"tfdeclare: {name}: {records[name].message}")
    stuck += refused
    if wait and failed:
        stderr_line(f"tfdeclare: failed: {', '.join(failed)}")
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
    if holder is not None and background.is_background(holder):
        return (
            f"status files kept current by a background controller (pid {holder.get('pid', '?')}, "
            f"log {holder.get('log', background.LOG_NAME)})"
        )
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


def _status_table(documents: list[dict[str, Any]], paint: Painter = plain) -> str:
    rows = [("NAME", "PHASE", "TASKS", "RESTARTS", "AGE", "MESSAGE")]
    for doc in documents:
        tasks = doc.get("tasks", [])
        running = sum(1 for t in tasks if t["state"] == TaskState.RUNNING)
        done = sum(1 for t in tasks if t["state"] == TaskState.SUCCEEDED)
        counts = f"{running}/{len(tasks)}" + (f" ({done} done)" if done else "")
        rows.append(
            (
                doc["name"],
                doc["phase"],
                counts,
                str(doc.get("restarts", 0)),
                _age(doc.get("startTime")),
                doc.get("message", ""),
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
    lines.extend(_interruptions(doc))
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
    lines.append("  tasks:")
    for t in doc.get("tasks", []):
        where = f"{t['host']}:{t['port']}" if t.get("host") else "-"
        code = "" if t.get("exitCode") is None else f" exit {t['exitCode']}"
        name = f"{t['role']}-{t['index']}"
        lines.append(f"    {name:<12} {t['state']:<10} {where:<21}{code} {t.get('message', '')}".rstrip())
    return "\n".join(lines) + "\n"


def _folders_read(args: argparse.Namespace, settings: Settings) -> str:
    """``state folder X (status folder Y)``, each with where it came from unless the default:
    what ``status`` says when it finds nothing, so that a wrong folder shows."""
    chosen = chosen_folders(args, settings.config, settings.config_path)

    def named(what: str, dest: str, path: Path) -> str:
        origin = chosen[dest]
        return f"{what} {path}" + ("" if origin.origin is Origin.DEFAULT else f", from {origin.via}")

    state = named("state folder", "state_dir", settings.state_dir)
    return f"{state} ({named('status folder', 'status_dir', settings.status_dir)})"


def _interruptions(doc: dict[str, Any]) -> list[str]:
    """Preemptions and suspensions, apart from restarts (they never count as restarts): the
    counters, the current one and the last few ended ones."""
    preempted, suspended = doc.get("preemptions") or 0, doc.get("suspensions") or 0
    current, history = doc.get("suspension"), doc.get("suspensionHistory") or []
    if not (preempted or suspended or current):
        return []
    lines = [f"  preemptions {preempted}, suspensions {suspended} (not counted as restarts)"]
    for entry, now in [*((e, False) for e in history[-5:]), *([(current, True)] if current else [])]:
        by = f" by {entry['preemptedBy']}" if entry.get("preemptedBy") else ""
        why = f" ({entry['message']})" if entry.get("message") else ""
        until = "still" if now else f"resumed {entry.get('resumeTime') or '-'}"
        lines.append(
            f"  {entry['reason'].lower()}{by} at {entry['time']}{why}, {entry['tasks']} task(s); {until}"
        )
    return lines


def cmd_status(args: argparse.Namespace) -> int:
    settings = settings_from(args)
    if args.refresh:
        _refresh(settings)
    statuses = StatusWriter(settings.status_dir)
    store = StateStore(settings.state_dir)  # read-only: never the lock
    unreadable: list[str] = []

    def record_of(name: str) -> JobRecord | None:  # only for a job without a readable status file
        try:
            return store.load(name)
        except StateError as err:
            unreadable.append(f"{name}: its record cannot be read either: {err}")
            return None

    names = [args.name] if args.name else None
    documents, notes = statuses.documents(store.names(), record_of, time.time(), names)
    notes.extend(unreadable)
    for note in notes:  # what could not be read is said, on stderr (stdout stays the documents)
        stderr_line(f"tfdeclare: warning: {note}")
    if args.name and not documents:
        raise UserError(f"no job named {args.name!r} in {_folders_read(args, settings)}")
    problems, as_of = _standing_problems(settings)
    if args.name:
        problems = tuple(p for p in problems if args.name in p.jobs)
    if is_document(args.output):
        listed = [p.to_json() for p in problems]
        document: Any
        if args.problems and args.name:
            document = {**documents[0], "problems": listed}
        elif args.problems:
            document = {"jobs": documents, "problems": listed}
        else:  # the list (or document) scripts read, as before: the problems go to stderr
            document = documents[0] if args.name else documents
            for problem in problems:
                stderr_line(f"tfdeclare: problem ({problem.kind.value}): {problem.message}")
        stdout_write(document_text(document, args.output))
        if not documents:  # the list stays a list (scripts count it); where it looked, aside
            stderr_line(f"tfdeclare: no jobs in {_folders_read(args, settings)}")
    elif args.name:
        stdout_write(_status_detail(documents[0], terminal.painter(sys.stdout)))
    elif documents:
        stdout_write(_status_table(documents, terminal.painter(sys.stdout)))
    else:
        stdout_write(f"No jobs in {_folders_read(args, settings)}.\n")
    if not is_document(args.output) and problems:
        stdout_write(_problems_footer(problems, as_of, terminal.painter(sys.stdout)))
    if documents and not is_document(args.output):
        stderr_line(f"({_freshness(settings)})")
    return EXIT_OK


def _standing_problems(settings: Settings) -> tuple[tuple[Problem, ...], str | None]:
    """The source problems the daemon last recorded (none without a file); a file that
    cannot be read is said on stderr, and shows none."""
    try:
        return problems_file.load(problems_file.path_in(settings.state_dir))
    except problems_file.ProblemsUnreadable as err:
        stderr_line(f"tfdeclare: warning: the source problems cannot be shown: {err}")
        return (), None


def _problems_footer(problems: tuple[Problem, ...], as_of: str | None, paint: Painter) -> str:
    """Each file that cannot be applied and its first error (what holds which job back)."""
    when = f", as of {as_of}" if as_of else ""
    lines = [
        "",
        paint(
            f"Problems ({len(problems)}{when}): not applied, the jobs named keep running as applied", Tone.BAD
        ),
    ]
    for problem in problems:
        held = f" (holds back {', '.join(problem.jobs)})" if problem.jobs else ""
        lines.append(f"  {problem.path}: {problem.kind.value}{held}, since {problem.since_text}")
        lines.append(f"    {problem.message}")
        more = problem.diagnostic_count - 1
        if more > 0:
            lines.append(f"    ... and {more} more error{'s' if more > 1 else ''}")
    return "\n".join(lines) + "\n"


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
                controller, present, wait=True, timeout=args.timeout, show=not is_document(args.output)
            )
    if is_document(args.output):
        document = {"deleted": sorted(present), "missing": sorted(missing), "timedOut": timed_out}
        stdout_write(document_text(document, args.output))
    if timed_out:
        stderr_line("tfdeclare: timed out waiting for tasks to stop; they are still being stopped")
        return EXIT_ERROR
    if missing and not args.ignore_not_found:
        raise UserError(f"no job named {', '.join(repr(m) for m in missing)}")
    return EXIT_OK
