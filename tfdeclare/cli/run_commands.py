"""``apply`` and ``delete``: the commands that act on running jobs (``status`` is
``status_command``, ``logs`` ``logs_command``).

``apply`` takes the state folder's lock, applies the plan to the job records and runs
reconcile passes: without ``--wait`` until every job's tasks are seen running (or waiting for
resources; tasks still starting after ``STARTING_GRACE_S`` are left starting), so the status
files it leaves say what runs; with ``--wait`` until every job of the files has Succeeded or Failed, printing
progress as it changes, and in between a heartbeat (``_Heartbeat``: a "Still running…" line
every 30 s in a log, a live line on a terminal). Tasks are detached processes (or Mesos
tasks): interrupting ``apply`` never stops them; a later ``apply``, ``status`` or the daemon adopts them.
"""

from __future__ import annotations

import argparse
import json
import sys
import threading
import time
from collections.abc import Sequence
from pathlib import Path

from tfdeclare.cli import elsewhere, pulls, terminal
from tfdeclare.cli.common import (
    EXIT_ERROR,
    EXIT_INTERRUPTED,
    EXIT_OK,
    Settings,
    UserError,
    check_state,
    print_backend_warnings,
    print_diagnostics,
    settings_from,
    stderr_line,
    stdout_write,
)
from tfdeclare.cli.output import document_text, is_document
from tfdeclare.cli.selection import selected_names, selector_of
from tfdeclare.cli.specs_commands import PLAN_KIND, plan_options
from tfdeclare.cli.status_command import _phase
from tfdeclare.cli.validate_command import load_desired
from tfdeclare.cli.wiring import controller_for, locked
from tfdeclare.controller import Controller
from tfdeclare.core.diagnostics import Code
from tfdeclare.core.enums import Phase, Reason, TaskState
from tfdeclare.core.errors import RuntimeProblem
from tfdeclare.core.plan.claims import (
    STDIN_PATH,
    desired_mismatches,
    parse_plan_file,
    plan_mismatches,
    shown,
)
from tfdeclare.core.plan.desired import DesiredState
from tfdeclare.core.plan.planner import Action, Plan, plan
from tfdeclare.core.plan.problems import bounded, held_by, merged, standing
from tfdeclare.core.plan.render import plan_json, render_text_parts
from tfdeclare.core.run.record import JobRecord
from tfdeclare.core.tone import Painter, plain
from tfdeclare.core.visible import visible
from tfdeclare.files import JobWriteError
from tfdeclare.shell import problems as problems_file
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
        Reason.LAUNCH_REFUSED,
        Reason.BACKING_OFF,
    }
)
# Without --wait, apply waits this long for launched tasks to be seen running (a local task's
# supervisor answers within a second), so that the status it leaves behind says what runs
# rather than "starting"; a task slower to start (an image being fetched) is left starting.
STARTING_GRACE_S = 10.0
# While apply waits, a pass runs when the backend reports a change (``Backend.watch``), a job's
# own timer is due (a backoff, a deadline) or, as a safety net for a change never reported,
# every RESYNC_S; never on a short timer, since a pass looks at every task.
RESYNC_S = 5.0
PASS_GAP_S = 0.25  # changes reported within this long after a pass make one pass (0.5 s with --wait)
BEAT_CHECK_S = 0.5  # how often a heartbeat is considered between passes (no pass for it)


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
        current = plan(desired, store.observed(), options, now=time.time())  # a preemption's work at risk
    except StateError as err:
        raise UserError(str(err)) from err
    stale = plan_mismatches(saved, current)
    if stale:
        for line in stale[1:]:
            stderr_line(f"tfdeclare: {line}")
        raise UserError(f"{path} is stale: {stale[0]}. Run `tfdeclare plan` again.")
    return current, desired


class _Waker:
    """Set by the backend's watcher (from its thread) when something changed."""

    def __init__(self) -> None:
        self.event = threading.Event()

    def __call__(self) -> None:
        self.event.set()


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
    alone = sum(entry.count for entry in record.task_restarts.values())
    if alone:
        parts.append(f"{alone} task restart(s) alone")
    return ", ".join(parts) + (f" — {visible(record.message)}" if record.message else "")


_CLEAR = "\r\x1b[K"


def _elapsed(seconds: float) -> str:
    """``1h2m``, ``1m30s``, ``12s``."""
    whole = int(seconds)
    hours, minutes, secs = whole // 3600, whole // 60 % 60, whole % 60
    if hours:
        return f"{hours}h{minutes}m"
    return f"{minutes}m{secs}s" if minutes else f"{secs}s"


def _counts(records: list[JobRecord]) -> str:
    tasks = sum(len(r.spec.task_keys()) for r in records)
    running = sum(1 for r in records for t in r.tasks if t.state is TaskState.RUNNING)
    done = sum(1 for r in records for t in r.tasks if t.state is TaskState.SUCCEEDED)
    return f"{running}/{tasks} running" + (f", {done} succeeded" if done else "")


class _Heartbeat:
    """While ``apply --wait`` waits and nothing changes: on a terminal one live line (``\r``)
    updated every second, cleared before any other line; elsewhere (a CI log) a line
    ``Still running… [1m30s elapsed] NAME: 3/4 running, 1 succeeded`` per job still running
    (past ``NAMES_SHOWN`` of them, one line for all) once ``every`` seconds pass without a line."""

    def __init__(self, every: float, live: bool) -> None:
        self.every = every
        self.live = live
        self.last = 0.0  # elapsed when a line was last printed
        self.shown = False  # the live line is on the screen

    def printed(self, elapsed: float) -> None:
        self.clear()
        self.last = elapsed

    def clear(self) -> None:
        if self.shown:
            stdout_write(_CLEAR)
            self.shown = False

    def beat(self, records: dict[str, JobRecord], elapsed: float) -> None:
        waiting = [r for _, r in sorted(records.items()) if not _finished({r.name: r}, True)]
        if not waiting:
            return
        head = f"Still running… [{_elapsed(elapsed)} elapsed]"
        if len(waiting) == 1:
            lines = [f"{head} {waiting[0].name}: {_counts(waiting)}"]
        elif self.live or len(waiting) > NAMES_SHOWN:
            lines = [f"{head} {len(waiting)} jobs: {_counts(waiting)}"]
        else:
            lines = [f"{head} {r.name}: {_counts([r])}" for r in waiting]
        if self.live:
            if elapsed - self.last >= 1.0:
                stdout_write(_CLEAR + lines[0])
                self.shown = True
                self.last = elapsed
        elif elapsed - self.last >= self.every:
            stdout_write("".join(line + "\n" for line in lines))
            self.last = elapsed


def _run_passes(
    controller: Controller,
    names: set[str],
    *,
    wait: bool,
    timeout: float | None,
    show: bool = True,
    heartbeat: float | None = None,
    deleting: bool = False,
) -> tuple[dict[str, JobRecord], bool, list[RuntimeProblem]]:
    """Reconcile until the jobs in ``names`` are launched (or finished, with ``wait``).
    Returns the last records, whether it timed out, and the errors of the last pass (each
    error is printed once, when first seen; a terminal one of these jobs, or of no job in
    particular, ends the wait at once: passes would meet it again). ``heartbeat``: with
    ``show``, a ``_Heartbeat`` of that period while nothing changes. Between passes it waits
    for a change the backend reports (``RESYNC_S`` at most; see ``_next_pass_at``), never
    re-running a pass on a timer.
    A job whose staged record could not be written is
    left out: one never made, or (``deleting``) one never marked for deletion."""
    waker = _Waker()
    paint = terminal.painter(sys.stdout)
    beats = _Heartbeat(heartbeat, sys.stdout.isatty()) if heartbeat is not None and show else None
    controller.backend.watch(waker)
    started = time.monotonic()
    shown: dict[str, tuple[object, ...]] = {}
    told: set[RuntimeProblem] = set()
    limit = timeout if timeout is not None else (None if wait else 60.0)
    while True:
        waker.event.clear()  # a change reported from now on makes the next pass
        result = controller.reconcile()
        # a record the command staged that could not be written: that job was never changed
        failed = controller.stage_failures.keys()
        names -= failed if deleting else failed - controller.store.records().keys()
        for error in result.errors:
            if error not in told:
                told.add(error)
                if beats is not None:
                    beats.clear()
                stderr_line(f"tfdeclare: {error}")
        records = {n: r for n, r in controller.store.records().items() if n in names}
        elapsed = time.monotonic() - started
        _show_changes(records, names, shown, elapsed, paint if show else None, beats)
        # a backend not observed at all (its cluster unreachable, its framework refused): a
        # command does not wait on it; the next command, the background controller or the
        # daemon tries again (each of its jobs has the error as its lastError meanwhile)
        done = _terminal(result.errors, names) or bool(result.unobserved)
        if _finished(records, wait, patient=elapsed < STARTING_GRACE_S) or done:
            if beats is not None:
                beats.clear()
            return records, False, result.errors
        if beats is not None:
            beats.beat(records, elapsed)
        if limit is not None and elapsed >= limit:
            if beats is not None:
                beats.clear()
            return records, True, result.errors
        ended = time.monotonic()
        timers = [ended + RESYNC_S]
        if result.wake_at is not None:
            timers.append(ended + max(0.05, result.wake_at - time.time()))
        if not wait and elapsed < STARTING_GRACE_S:  # what _finished accepts changes then
            timers.append(started + STARTING_GRACE_S)
        if limit is not None:
            timers.append(started + limit)
        _wait_for_next_pass(waker, timers, ended + PASS_GAP_S * (2 if wait else 1), records, started, beats)


def _show_changes(
    records: dict[str, JobRecord],
    names: set[str],
    shown: dict[str, tuple[object, ...]],
    elapsed: float,
    paint: Painter | None,
    beats: _Heartbeat | None,
) -> None:
    """A progress line per job whose state a reader cares about changed since ``shown`` (not
    a backoff countdown); printed only with ``paint`` (``show``), remembered either way."""
    for name in sorted(names):
        record = records.get(name)
        key = (record.phase, record.deleting, record.reason, record.restarts, record.tasks) if record else ()
        if shown.get(name) == key:
            continue
        shown[name] = key
        if paint is not None:
            line = _progress_line(record, paint) if record else f"{name:<24} deleted"
            if beats is not None:
                beats.printed(elapsed)
            stdout_write(f"[{elapsed:6.1f}s] {line}\n")


def _wait_for_next_pass(
    waker: _Waker,
    timers: list[float],
    changed_due: float,
    records: dict[str, JobRecord],
    started: float,
    beats: _Heartbeat | None,
) -> None:
    """Wait until the first of ``timers``, or ``changed_due`` once the backend reports a
    change (``_next_pass_at``), beating the heartbeat meanwhile."""
    while (now := time.monotonic()) < (
        due := _next_pass_at(timers, changed_due if waker.event.is_set() else None)
    ):
        pause = min(due - now, BEAT_CHECK_S) if beats is not None else due - now
        if waker.event.is_set():  # a change came: its pass waits for the gap
            time.sleep(pause)
        else:
            waker.event.wait(pause)
        if beats is not None:
            beats.beat(records, time.monotonic() - started)


def _next_pass_at(timers: list[float], changed_at: float | None) -> float:
    """When the next pass is due: the first of ``timers`` (the safety resync, a job's own
    wake-up, the time limit...) or, once the backend reported a change, ``changed_at`` (the
    last pass's end plus the gap between passes)."""
    return min(timers) if changed_at is None else min(changed_at, *timers)


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
    if not _is_plan_file(args.paths):
        settings.refuse_overlap(args.paths)  # before the lock makes the state folder
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
                    now=time.time(),
                )
            except StateError as err:
                raise UserError(str(err)) from err
        if result.has_errors:  # a quota refused a job
            print_diagnostics([d for d in result.diagnostics if d.code is Code.QUOTA])
            raise UserError("nothing applied: the specs break the policy (see above)")
        elsewhere.check(settings, result, applying=True)  # never a second copy of a job
        machine = is_document(args.output)
        if not machine:
            for part in render_text_parts(result, paint=terminal.painter(sys.stdout)):
                stdout_write(part)
        print_backend_warnings(settings, list(desired.jobs.values()))
        with controller_for(settings) as controller, pulls.shown_on(sys.stderr):
            # where the specs were read from, recorded with each job (its workingDir's bound,
            # checked again at every launch)
            controller.sources = spec_sources(_read_from(args.paths))
            names = set(desired.jobs) | {j.name for j in result.jobs if j.action is Action.DELETE}
            # with passes to follow, the records are written once, by the first of them
            # (controller.reconciler's docstring): an apply of 10,000 jobs wrote each twice
            controller.apply(result, stage=bool(names))
            _record(settings, result, args.paths, controller)
            records: dict[str, JobRecord] = {}
            timed_out, errors = False, list[RuntimeProblem]()
            if names:
                if not machine:
                    stdout_write("\n")
                try:
                    records, timed_out, errors = _run_passes(
                        controller,
                        names,
                        wait=args.wait,
                        timeout=args.timeout,
                        show=not machine,
                        heartbeat=args.heartbeat_interval if args.wait else None,
                    )
                except KeyboardInterrupt:
                    stderr_line(
                        "tfdeclare: interrupted; the jobs keep running (`tfdeclare status` adopts them)"
                    )
                    return EXIT_INTERRUPTED
            not_applied = [
                f"job {name}: not applied: cannot write {why}; free the disk and apply again"
                for name, why in sorted(controller.apply_failures.items())
            ]
            for line in not_applied:
                stderr_line(f"tfdeclare: error: {line}")
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
            "errors": [*not_applied, *map(str, errors)],
            "problems": [problem.to_json() for problem in errors],
        }
        stdout_write(document_text(outcome, args.output, ensure_ascii=False))
    return _apply_outcome(records, timed_out, [*not_applied, *errors], wait=args.wait)


def _record(settings: Settings, result: Plan, paths: list[str], controller: Controller) -> None:
    """The apply in the history of revisions (``tfdeclare history``); a history that cannot be
    written is a warning, never a failed apply."""
    from tfdeclare.core.plan.history import applied
    from tfdeclare.shell.history import append_one

    records = controller.records()  # those the apply staged included
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
        stored = problems_file.read(where)
    except problems_file.ProblemsUnreadable:
        stored = problems_file.Stored((), None)  # rewritten whole below
    previous = stored.problems
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
    # those the file left out are not known by path: counted again from what is known (the
    # next daemon pass counts every problem of its source)
    now, omitted = bounded(merged(previous, found, roots))
    if now == previous and omitted == stored.omitted:
        return
    try:
        problems_file.save(where, now, time.time(), omitted=omitted, status_branch=stored.status_branch)
    except OSError as err:
        stderr_line(f"tfdeclare: warning: cannot record the problems in {where}: {err.strerror}")


NAMES_SHOWN = 20  # jobs a line names before it says how many more


def _some(names: list[str]) -> str:
    """``a, b, c`` — at most ``NAMES_SHOWN`` of them, then how many more (10,000 unschedulable
    jobs are one line, not 80 KB; `tfdeclare status` lists them all)."""
    if len(names) <= NAMES_SHOWN:
        return ", ".join(names)
    return f"{', '.join(names[:NAMES_SHOWN])} and {len(names) - NAMES_SHOWN} more"


def _terminal(errors: list[RuntimeProblem], names: set[str]) -> bool:
    """Whether a pass met an error that passes cannot get past (``core.errors``), for one of
    the jobs waited for or for no job in particular (a backend's)."""
    return any(error.terminal and (error.job is None or error.job in names) for error in errors)


def _apply_outcome(
    records: dict[str, JobRecord], timed_out: bool, errors: Sequence[object], *, wait: bool
) -> int:
    failed = sorted(n for n, r in records.items() if r.phase is Phase.FAILED)
    stuck = sorted(n for n, r in records.items() if r.reason is Reason.UNSCHEDULABLE and not r.phase.terminal)
    if stuck:
        stderr_line(f"tfdeclare: cannot be scheduled: {_some(stuck)} (see `tfdeclare status NAME`)")
    refused = sorted(n for n, r in records.items() if r.reason is Reason.LAUNCH_REFUSED)
    for name in refused:
        stderr_line(f"tfdeclare: {name}: {visible(records[name].message)}")
    stuck += refused
    if wait and failed:
        stderr_line(f"tfdeclare: failed: {_some(failed)}")
        return EXIT_ERROR
    if timed_out:
        stderr_line("tfdeclare: timed out waiting; the jobs keep running (`tfdeclare status`)")
        return EXIT_ERROR
    if any(isinstance(error, RuntimeProblem) and error.terminal for error in errors):
        stderr_line(
            f"tfdeclare: {len(errors)} problem(s) remain (above), some terminal: passes do not get past "
            "them until their cause is fixed"
        )
        return EXIT_ERROR
    if errors:
        stderr_line(f"tfdeclare: {len(errors)} problem(s) remain (above); the next pass retries them")
        return EXIT_ERROR
    return EXIT_ERROR if stuck else EXIT_OK  # it can never run as configured: a user error


# ---- delete -------------------------------------------------------------------------------


def cmd_delete(args: argparse.Namespace) -> int:
    settings = settings_from(args)
    check_state(settings, reading=False)  # it reads the records before it takes the lock
    store = StateStore(settings.state_dir)
    selector = selector_of(args)
    if selector and (args.all or args.names):
        raise UserError("-l picks the jobs to delete: give it without NAMEs or --all")
    if selector:
        names = selected_names(store, selector)
        if not names:  # like `kubectl delete -l`: nothing to do is no error
            stderr_line(f"tfdeclare: no job matches -l {selector}; nothing deleted")
    else:
        names = sorted(store.records()) if args.all else list(args.names)
    if not names:
        if args.all or selector:
            if is_document(args.output):
                stdout_write(document_text({"deleted": [], "missing": [], "timedOut": False}, args.output))
            return EXIT_OK
        raise UserError("name the jobs to delete (or --all, or -l KEY=VALUE)")
    timed_out = False
    source = f"-l {selector}" if selector else " ".join(names)
    with locked(settings, "delete", source=source), controller_for(settings) as controller:
        if selector:  # again under the lock: a job relabelled meanwhile is not deleted
            names = selected_names(controller.store, selector)
        # the marks are written by the first pass (controller.reconciler's docstring): a job
        # with nothing left on a backend goes without its mark ever being written
        missing = controller.delete(names, stage=True)
        present = set(names) - set(missing)
        if present:
            _, timed_out, _ = _run_passes(
                controller,
                present,
                wait=True,
                timeout=args.timeout,
                show=not is_document(args.output),
                deleting=True,
            )
        for name, err in sorted(controller.stage_failures.items()):
            raise JobWriteError(name, err, "it was not marked for deletion")
    if is_document(args.output):
        document = {"deleted": sorted(present), "missing": sorted(missing), "timedOut": timed_out}
        stdout_write(document_text(document, args.output))
    if timed_out:
        stderr_line("tfdeclare: timed out waiting for tasks to stop; they are still being stopped")
        return EXIT_ERROR
    if missing and not args.ignore_not_found:
        raise UserError(f"no job named {', '.join(repr(m) for m in missing)}")
    return EXIT_OK
