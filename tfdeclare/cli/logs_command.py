"""``logs``: a job's task output. Without ``--task`` every task's output, each line prefixed
with its task (``worker-0 | ...``); with ``--follow`` the lines of all tasks interleave as they
are written, tasks that start later (a restart) included, until the job has finished and every
log is complete. With ``--task`` the task's bytes as written. ``-o json``: one JSON object per
line, ``{"task": "worker-0", "line": "..."}``; ``-o yaml``: the same, one YAML document each.

``--tail N``: of what each log holds at first, only its last N lines (held N at a time,
however long the log). ``--previous``: each task's launch before its current one (its id's
launch count lower, the backend asked in turn).

While the job (or a task alone) waits to restart, the record keeps the last run's entry of
each slot not relaunched yet (``status.with_last_runs``): that run's log is printed, with or
without ``--previous`` (no launch came after it), with a line on stderr saying how it ended
and when it restarts; ``--follow`` prints it and goes on into the next run.

``-l``: each matching job's logs, lines prefixed ``JOB/TASK``.

``--follow`` ends by the job's record (``_followed_to_the_end``): a task that ended but that no
controller has judged yet (the record still shows it alive) may run again, so while a
controller is running or on its way (``_kept``) the follow waits for its word.

Without ``--follow`` the tasks' logs come one after the other (no backend records when a line
was written, so there is no order across tasks to restore).

A backend whose tasks' stdout and stderr are two logs (``LogStreams``: Mesos's sandbox files)
has each task's two read in turn, both with the task's prefix: without ``--follow`` stdout,
then a ``--- stderr ---`` line and stderr (as the backend's own ``read_log`` of an ended task);
with ``--follow`` each new line as it is read, so the streams interleave to within a poll.
"""

from __future__ import annotations

import argparse
import bisect
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from tfdeclare.backends.base import (
    STDERR_HEADER,
    Backend,
    BackendError,
    LogOffsetError,
    LogTimes,
    log_streams,
    read_log_part,
)
from tfdeclare.cli import terminal
from tfdeclare.cli.background import enabled as background_enabled
from tfdeclare.cli.background import log_path
from tfdeclare.cli.common import EXIT_OK, Settings, UserError, check_state, settings_from, stderr_line
from tfdeclare.cli.output import is_document, yaml_text
from tfdeclare.cli.selection import selected_names, selector_of
from tfdeclare.cli.wiring import make_backend
from tfdeclare.core.enums import Phase
from tfdeclare.core.run.keeping import needs_controller
from tfdeclare.core.run.record import JobRecord
from tfdeclare.core.run.status import waiting_to_restart
from tfdeclare.core.run.tasks import TaskKey
from tfdeclare.core.spec.selector import Selector
from tfdeclare.core.tone import Painter, Tone
from tfdeclare.core.visible import json_line
from tfdeclare.shell.lock import ControllerLock
from tfdeclare.shell.store import StateStore

_POLL_S = 0.2
_PREFIX_TONES = (Tone.ACTIVE, Tone.ADDED, Tone.CHANGED, Tone.REPLACED, Tone.STRONG, Tone.WARN)


@dataclass
class _Tail:
    """One task's log being read: where it has got to and the line it is in the middle of."""

    key: TaskKey
    task_id: str
    offset: int = 0
    partial: bytes = b""
    complete: bool = False
    lines: list[bytes] = field(default_factory=list)
    keep: int | None = None  # --tail: of what is there at first, only the last lines
    timing: _Timing | None = None  # --timestamps, --since: when each line was written
    since: float | None = None  # --since: lines written before this are dropped
    stamps: list[float] = field(default_factory=list)  # with timing: each line's time
    stream: str | None = None  # one of the task's two logs (``LogStreams``); None: its one log
    header: list[bytes] | None = None  # lines printed before the first of this log's, if any

    def _trim(self) -> None:
        if self.keep is not None:
            cut = max(0, len(self.lines) - self.keep)
            del self.lines[:cut]
            del self.stamps[:cut]

    def drain(self, backend: Backend, strict: bool, printer: _Printer) -> bool:
        """Print what is there now (at first, with ``keep``, only its last lines); whether
        anything came."""
        came = False
        while not self.complete and self.read(backend, strict):
            came = True
            if self.keep is None:
                self._print(printer)
            else:  # only ever the last `keep` lines held, however long the log
                self._trim()
        self._trim()
        self.keep = None
        self._print(printer)
        return came

    def _print(self, printer: _Printer) -> None:
        if self.lines and self.header is not None:
            printer.lines(self.key, self.header)
            self.header = None
        printer.lines(self.key, self.lines, self.stamps)

    def read(self, backend: Backend, strict: bool) -> bool:
        """Read what is there now; complete lines go to ``lines``. Whether anything came. A log
        that cannot be read is an error when ``strict`` (one task asked for), else a note on
        stderr and the other tasks' logs go on."""
        try:
            chunk = read_log_part(backend, self.task_id, self.stream, self.offset)
        except LogOffsetError:  # the log shrank under us (rotated): its new content is all unread
            self.offset = 0
            return True
        except BackendError as err:
            if strict:
                raise UserError(str(err)) from err
            stderr_line(f"tfdeclare: {self.key.name}: {err}")
            self.complete = True
            return False
        start = self.offset - len(self.partial)  # where the first line read now begins
        self.offset = chunk.next_offset
        data = self.partial + chunk.data
        *whole, self.partial = data.split(b"\n")
        ends: list[int] = []
        for line in whole:
            start += len(line) + 1
            self.lines.append(line + b"\n")
            ends.append(start)
        if chunk.complete and not chunk.data:
            self.complete = True
            if self.partial:  # the last line, without a newline
                start += len(self.partial)
                self.lines.append(self.partial)
                ends.append(start)
                self.partial = b""
        if self.timing is not None and ends:
            self._stamp(ends)
        return bool(chunk.data)

    def _stamp(self, ends: list[int]) -> None:
        """The times of the lines just read (ending at ``ends``), and with ``since`` only those
        written since."""
        assert self.timing is not None
        fresh = self.lines[len(self.lines) - len(ends) :]
        del self.lines[len(self.lines) - len(ends) :]
        for line, end in zip(fresh, ends, strict=True):
            at = self.timing.at(end, self.complete)
            if self.since is None or at >= self.since:
                self.lines.append(line)
                self.stamps.append(at)


class _Timing:
    """When a task's log lines were written, from the backend's samples of its log's size
    (``LogTimes``): a line has the time of the first sample that holds it (at most a second
    late); one past the last sample is being written now (or, in a complete log, by the last)."""

    def __init__(self, backend: LogTimes, task_id: str, samples: list[tuple[int, float]]) -> None:
        self.backend = backend
        self.task_id = task_id
        self.samples = samples

    def at(self, end: int, complete: bool) -> float:
        place = bisect.bisect_left(self.samples, end, key=lambda sample: sample[0])
        if place == len(self.samples):
            try:
                self.samples = self.backend.read_log_times(self.task_id) or self.samples
            except BackendError:  # said when the times were first read; the last ones serve
                pass
            place = bisect.bisect_left(self.samples, end, key=lambda sample: sample[0])
        if place < len(self.samples):
            return self.samples[place][1]
        if complete and self.samples:
            return self.samples[-1][1]
        return time.time()


def _stamp_text(at: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(at)) + f".{int(at % 1 * 1000):03d}Z"


class _Printer:
    def __init__(
        self, output: str, prefixed: bool, width: int, job: str | None = None, timestamps: bool = False
    ) -> None:
        self.output = output
        self.timestamps = timestamps  # each line prefixed with its time (-o json: a "time" field)
        self.prefixed = prefixed
        self.width = width
        self.job = job  # with -l: each line says its job too (``bert/worker-0 | ...``)
        self.paint: Painter = terminal.painter(sys.stdout, output)
        self.tones: dict[str, Tone] = {}

    def lines(self, key: TaskKey, lines: list[bytes], stamps: list[float] | None = None) -> None:
        out = sys.stdout.buffer
        if self.timestamps and stamps is not None and not is_document(self.output):
            lines[:] = [
                _stamp_text(at).encode() + b" " + line for line, at in zip(lines, stamps, strict=True)
            ]
        if is_document(self.output):
            for place, line in enumerate(lines):
                text = line.removesuffix(b"\n").decode("utf-8", errors="replace")
                job = {"job": self.job} if self.job is not None else {}
                when = {"time": _stamp_text(stamps[place])} if self.timestamps and stamps else {}
                out.write(self._document({**job, "task": key.name, **when, "line": text}).encode())
        elif self.prefixed:
            name = key.name if self.job is None else f"{self.job}/{key.name}"
            tone = self.tones.setdefault(name, _PREFIX_TONES[len(self.tones) % len(_PREFIX_TONES)])
            prefix = (self.paint(name.ljust(self.width), tone) + " | ").encode()
            for line in lines:
                out.write(prefix + line if line.endswith(b"\n") else prefix + line + b"\n")
        else:
            out.writelines(lines)
        out.flush()
        lines.clear()
        if stamps is not None:
            stamps.clear()

    def _document(self, document: dict[str, str]) -> str:
        """One line's document: a line of JSON, or a YAML document of the stream (``---``)."""
        if self.output == "yaml":
            return yaml_text(document, start=True)
        return json_line(document) + "\n"


def _followed_to_the_end(
    record: JobRecord, only: TaskKey | None, tails: dict[str, list[_Tail]], kept: bool
) -> bool:
    """Nothing more will come: every followed log is complete, and no controller keeps the
    record current (``kept``, ``_kept``), or the record shows no followed task alive or new
    and none coming back (the job has finished; for one ``--task``, neither the job nor that
    task alone restarts). A followed task the record still shows alive has not been judged
    yet: whether it runs again is not decided, however complete its log. ``tails``: each
    followed launch's logs (two where the backend reads stdout and stderr apart)."""
    complete = all(tail.complete for logs in tails.values() for tail in logs)
    if tails and not kept and complete:
        return True  # the records are not kept current: the backend's word is the last
    followed = [t for t in record.tasks if only in (None, t.key)]
    if any(t.state.alive or (t.task_id and t.task_id not in tails) for t in followed):
        return False
    if not complete:
        return False
    if only is None:
        return record.phase.terminal
    return bool(tails) and not _comes_back(record, only)


def _kept(record: JobRecord, running: bool, background: bool) -> bool:
    """Whether a controller keeps ``record`` current: one holds the lock now, or the background
    controller is on and the record needs one (``core.run.keeping``), so one is on its way: the
    command that left the job hands over to it after letting go of the lock, and its start
    may take seconds on a loaded machine, while the task it is to judge may already have
    ended. Without either, no controller looks at the job before the next command."""
    return running or (background and needs_controller(record))


# A follow that expects the background controller (``_kept``) and sees none hold the lock for
# this long says so once: the job will not move until one runs (its start failed, it was
# killed), and a silent wait would look like a job that prints nothing.
UNKEPT_NOTICE_S = 20.0


def unkept_notice(
    record: JobRecord, running: bool, background: bool, waiting_since: float | None, now: float, log: Path
) -> tuple[float | None, str | None]:
    """Since when the follow has waited for a controller that none runs (None: one runs, or
    none is expected), and the notice to print now (once, when that wait reaches
    ``UNKEPT_NOTICE_S``; None otherwise)."""
    if running or not (background and needs_controller(record)):
        return None, None
    if waiting_since is None:
        return now, None
    if now - waiting_since < UNKEPT_NOTICE_S:
        return waiting_since, None
    notice = (
        f"tfdeclare: no controller has looked after job {record.name} for {UNKEPT_NOTICE_S:g} s: the "
        f"background controller is not running (see {log}); the job moves on at the next "
        "`tfdeclare apply` or `status --refresh`, or under `tfdeclare daemon`; still following"
    )
    return float("inf"), notice  # said once for this wait: no time is that far past it


def _comes_back(record: JobRecord, key: TaskKey) -> bool:
    """Whether the task ``key`` will run again: the whole job restarts or waits to launch, or
    the task restarts alone (``restartScope: Task``) in this attempt and is not back yet."""
    if record.phase in (Phase.RESTARTING, Phase.PENDING):
        return True
    alone = record.task_restarts.get(key.name)
    return alone is not None and alone.pending and alone.attempt == record.attempt


PREVIOUS_LOOKED_BACK = 1000  # launches `--previous` looks back through for a task's last log


def _previous_id(backend: Backend, task_id: str) -> str | None:
    """The id of the task's launch before ``task_id`` whose log the backend still has: ids end
    in the job's launch count (``core.run.launches.task_id``), and a task is not relaunched in
    every launch (another task restarting alone), so the counts below are tried in turn."""
    base, _, count = task_id.rpartition(".")
    if not base or not count.isdigit():
        return None
    for launch in range(int(count) - 1, max(-1, int(count) - 1 - PREVIOUS_LOOKED_BACK), -1):
        try:
            backend.read_log(f"{base}.{launch}", 0, 1)
        except BackendError:
            continue
        return f"{base}.{launch}"
    return None


def _tails_of(
    args: argparse.Namespace,
    backend: Backend,
    key: TaskKey,
    task_id: str,
    *,
    strict: bool,
    waiting: str | None = None,
) -> list[_Tail]:
    """The logs to print of a task: its one log, or where the backend reads them apart
    (``LogStreams``) its stdout and its stderr, the latter after a header unless followed
    (each line then comes as it is read). With ``--previous`` the launch before's one log (it
    has ended: its stderr follows its stdout there). None, said on stderr, when there is none
    the backend can read. ``waiting``: the task is the last run's, waiting to restart
    (``status.waiting_to_restart``, said on stderr): its log is both the current one and, as
    no launch came after it, the previous one."""
    if waiting is not None:
        stderr_line(f"tfdeclare: {waiting}")
    previous = args.previous and waiting is None
    timed = args.timestamps or args.since is not None  # only a backend that records line times
    streams = log_streams(backend)
    if previous or timed or not streams:
        tail = _tail_of(args, backend, key, task_id, strict=strict, previous=previous)
        return [] if tail is None else [tail]
    header = None if args.follow else STDERR_HEADER.splitlines(keepends=True)
    first, *others = streams  # stdout, then stderr after a header
    return [
        _Tail(key, task_id, keep=args.tail, since=args.since, stream=first),
        *(_Tail(key, task_id, keep=args.tail, since=args.since, stream=s, header=header) for s in others),
    ]


def _tail_of(
    args: argparse.Namespace, backend: Backend, key: TaskKey, task_id: str, *, strict: bool, previous: bool
) -> _Tail | None:
    """The log to print of a task: its current launch's, or when ``previous`` the one before
    (None, said on stderr, when there is none the backend can read)."""
    if previous:
        earlier = _previous_id(backend, task_id)
        if earlier is None:
            why = f"{key.name} has no earlier launch whose log the backend still has"
            if strict:
                raise UserError(why)
            stderr_line(f"tfdeclare: {why}")
            return None
        task_id = earlier
    tail = _Tail(key, task_id, keep=args.tail, since=args.since)
    if args.timestamps or args.since is not None:
        if not isinstance(backend, LogTimes):
            raise UserError(
                f"the {backend.name} backend does not record when log lines were written: --timestamps "
                "and --since work with the local backend's process tasks"
            )
        try:
            samples = backend.read_log_times(task_id)
            why = (
                f"{key.name}'s log has no line times (a container's, or a task started by an earlier "
                "release): not printed with --timestamps or --since"
            )
        except BackendError as err:
            samples, why = None, f"{key.name}: {err}: not printed with --timestamps or --since"
        if samples is None:
            if strict:
                raise UserError(why)
            stderr_line(f"tfdeclare: {why}")
            return None
        tail.timing = _Timing(backend, task_id, samples)
    return tail


def _selected_logs(
    args: argparse.Namespace, settings: Settings, store: StateStore, selector: Selector
) -> int:
    """``logs -l``: each matching job's logs one after the other, every line prefixed with its
    job and task (``bert/worker-0 | ...``; ``-o json``: a ``job`` field too)."""
    if args.name:
        raise UserError("-l picks the jobs whose logs are printed: give it without NAME")
    if args.follow:
        raise UserError("--follow follows one job: name it (without -l)")
    names = selected_names(store, selector)
    if not names:
        stderr_line(f"tfdeclare: no job matches -l {selector}")
        return EXIT_OK
    records = [r for r in (store.load(n) for n in names) if r is not None]
    width = max((len(r.name) + 1 + len(k.name) for r in records for k in r.spec.task_keys()), default=0)
    backend = make_backend(settings)
    try:
        for record in records:
            started = [t for t in sorted(record.tasks, key=lambda t: t.key) if t.task_id]
            started = [t for t in started if args.task in (None, t.key)]
            if not started:
                stderr_line(f"tfdeclare: job {record.name} has no task that has started")
                continue
            printer = _Printer(
                args.output, prefixed=True, width=width, job=record.name, timestamps=args.timestamps
            )
            for task in started:
                waiting = waiting_to_restart(record, task, time.time())
                for tail in _tails_of(
                    args, backend, task.key, str(task.task_id), strict=False, waiting=waiting
                ):
                    tail.drain(backend, False, printer)
    finally:
        backend.close()
    return EXIT_OK


def cmd_logs(args: argparse.Namespace) -> int:
    settings = settings_from(args)
    check_state(settings)  # read without the lock: only a folder of this user's alone
    store = StateStore(settings.state_dir)
    selector = selector_of(args)
    if selector:
        return _selected_logs(args, settings, store, selector)
    if not args.name:
        raise UserError("name the job whose logs to print (or pick jobs with -l KEY=VALUE)")
    if args.previous and args.follow:
        raise UserError("--previous prints an earlier launch's log, which is complete: not with --follow")
    record = store.load(args.name)
    if record is None:
        raise UserError(f"no job named {args.name!r}")
    only: TaskKey | None = args.task
    if only is None and not args.follow and not any(t.task_id for t in record.tasks):
        raise UserError(f"job {record.name} has no task that has started")
    if only is not None and not any(t.key == only and t.task_id for t in record.tasks) and not args.follow:
        raise UserError(f"job {record.name} has no task {only.name} that has started")
    width = max((len(k.name) for k in record.spec.task_keys()), default=0)
    printer = _Printer(args.output, prefixed=only is None, width=width, timestamps=args.timestamps)
    backend = make_backend(settings)
    background = background_enabled(settings)  # whether a controller follows each command
    tails: dict[str, list[_Tail]] = {}  # each launch's logs (``_tails_of``)
    skipped: set[str] = set()
    unkept_since: float | None = None
    try:
        while True:
            for task in sorted(record.tasks, key=lambda t: t.key):
                if task.task_id and task.task_id not in (tails.keys() | skipped) and only in (None, task.key):
                    waiting = waiting_to_restart(record, task, time.time())
                    logs = _tails_of(
                        args, backend, task.key, task.task_id, strict=only is not None, waiting=waiting
                    )
                    if logs:
                        tails[task.task_id] = logs
                    else:  # said once
                        skipped.add(task.task_id)
            came = False
            for logs in tails.values():  # all there is now, task by task (stdout, then stderr)
                for tail in logs:
                    came = tail.drain(backend, only is not None, printer) or came
            if not args.follow:
                return EXIT_OK
            latest = store.load(args.name)
            running = ControllerLock(settings.state_dir).holder() is not None
            if latest is None or _followed_to_the_end(
                latest, only, tails, _kept(latest, running, background)
            ):
                return EXIT_OK  # deleted, or nothing more will come
            record = latest
            unkept_since, notice = unkept_notice(
                latest, running, background, unkept_since, time.monotonic(), log_path(settings.state_dir)
            )
            if notice is not None:
                stderr_line(notice)
            if not came:
                time.sleep(_POLL_S)
    finally:
        backend.close()
