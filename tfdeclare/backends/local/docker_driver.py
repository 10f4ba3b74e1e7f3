"""The Docker driver: a task is a container of its image, made and supervised by the Docker
engine (the engine calls are ``docker_runtime.py``'s), recorded in the task's folder like a
process task.

``start`` only starts each task's launcher (``launcher.py``: a detached process that pulls
the image, makes and starts the container and writes ``launch.json``), so no pass waits for
a pull. While a launcher is at work (it holds the task's lock) the task is starting, its
message the pull's progress (``pull_log.py``: what the launcher wrote since the last look is
handed on to ``backends/progress.py``, each pull once); a launcher past its
pull timeout and ``LAUNCHER_SLACK_S`` (it ends itself at its timeout: this one is wedged),
or asked to stop and past ``KILL_SLACK_S``, is killed by ``tend``. A folder with neither a
container nor a launcher at work gets a launcher from ``tend`` once per controller (one that
this controller started and that died without a word has failed); a container made but not
started (its launcher died in between) is started. This controller's or an earlier one's
launcher: the same, so a restarted daemon adopts a pull under way.

``launch.json`` says the container was made (its id, start time, and how long the log was
then); ``exit.json`` how it ended, written by ``tend`` once a look (``inspect``) saw it
ended, which then keeps its output in the task's log and removes the container (or by the
launcher, when there was no container to make). The listing of the owner's containers is
made once per pass (``begin_pass``), and again for a task whose launcher made its container
after it.

Stopping: ``stop`` asks the engine first whether the container is there (an engine that does
not answer is a ``BackendError`` at once), then has the engine stop it (SIGTERM, the grace
period, SIGKILL: the engine goes on even if this process exits) on a thread of its own, since
the engine answers only once the container has stopped. What that request fails with is
kept, and the next look at the task asks ``tend`` to kill it and report the failure as a
``BackendError`` (never dropped on the thread). A container still up past grace + 5 s is
killed by ``tend`` too.

A container that ended (or is found removed) while the engine did not answer its listing
ended with the engine (a stop, a restart, a crash): ``EngineRestart``, a platform event
(``engine_outages.py``), kept in ``exit.json``. A stopping engine ends its containers first
and closes its API after (Debian's dockerd answers some 10 s after its SIGTERM, until ~60 ms
after its last kill), so a container found ended by a signal we did not send, the engine up,
is not judged on first sight: it is reported running (its message says why) until the engine
has answered ``engine_outages.HOLD_S`` past its end (the job's) or gone away within that
(the engine's); ``state_token`` changes when such an end can be judged, so a watching
controller looks then. The end's time is the engine's ``FinishedAt``; the answers' times are
the driver's injected clock.

Logs: a live container's output is read from the engine by time (``since``, to the
nanosecond), never whole each time: a cursor per task keeps how many bytes were read and the
times of the messages read in the last 0.1 s; the next read asks from 0.1 s before the
newest of them (stdout and stderr are timed apart, so a message written a little later may
carry an earlier time), drops the messages it already had (the engine answers in the order
written, so they come first, and their times say so) and hands out only the new bytes. It
also asks for the log's last messages only (``tail``: at least 256, four times as many as
came last time), since with ``since`` alone the engine reads its whole log file to filter it
(an 8 MB log followed: 0.36 s a read with ``since`` alone, 6 ms with ``tail`` too, against
0.69 s for the whole log as before; ``make bench-docker``, docs/benchmarks.md); an
answer that does not reach back to the messages it had is asked again whole. A cursor whose
messages do not come back as read (the log was rotated) starts over from the beginning.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

from tfdeclare.backends import progress
from tfdeclare.backends.base import BackendError, LogChunk, LogOffsetError
from tfdeclare.backends.local.docker_runtime import (
    KILL_SLACK_S,
    ContainerEnd,
    DockerRuntime,
    EngineError,
    container_name,
)
from tfdeclare.backends.local.drivers import (
    Chore,
    Preparation,
    Seen,
    TaskFolder,
    read_log_file,
    seen_from_end,
)
from tfdeclare.backends.local.engine_outages import HOLD_S, EngineOutages, Verdict
from tfdeclare.backends.local.process_driver import alive, supervisor_holds
from tfdeclare.backends.local.pull_log import PULL_LOG, LauncherInfo, PullView, pull_log_size
from tfdeclare.backends.local.record import ContainerSpec, LocalTask, TaskRuntime
from tfdeclare.core.enums import EndCause, TaskState
from tfdeclare.core.errors import ErrorCode
from tfdeclare.core.run.tasks import TaskLaunch
from tfdeclare.files import read_regular_at, write_atomic

LAUNCHER_START_S = 30.0  # a launcher started less long ago that holds no lock yet is on its way
LAUNCHER_SLACK_S = 30.0  # a launcher still there this long past its pull timeout is killed
DEFAULT_PULL_TIMEOUT_S = 1800.0  # local.pullTimeoutSeconds
LAUNCHER_GONE = "its launcher exited before its container was made"
ENGINE_STOPPED = "it ended while the Docker engine was stopped or restarting"
TAIL_FIRST = 256  # a follow read asks the engine for at least this many of its last messages
SINCE_MARGIN_NS = 100_000_000  # a log read asks from this long before the newest message read
ENDED = ("exited", "dead")


def _size(path: str | Path) -> int:
    try:
        return os.stat(path).st_size
    except FileNotFoundError:
        return 0


class _Rotated(Exception):
    """The engine's log no longer starts with what a cursor read."""


@dataclass(slots=True)
class _LogCursor:
    """How far a live container's output has been read from the engine."""

    fetched: int = 0  # bytes of output read so far
    pending: bytes = b""  # the last of them, not handed out yet (they end at ``fetched``)
    newest: int = 0  # the time (unix ns) of the newest message read
    recent: list[int] = field(default_factory=list)  # times of the messages read since ``_since``
    came: int = 0  # how many new messages the last read brought

    def _since(self) -> int:
        return max(1, self.newest - SINCE_MARGIN_NS) if self.newest else 0

    def more(self, engine: DockerRuntime, name: str) -> bool:
        """Read what the container wrote since the last read; False if it is not there."""
        since = self._since()
        had = self.recent if since else []
        # The engine's last ``tail`` messages, as many as came last time and more; when the
        # answer does not reach back to the messages we had, the rest came between: again,
        # whole.
        tail = max(TAIL_FIRST, 4 * self.came) + len(had) if since else None
        frames = engine.log_frames(name, since, tail)
        if frames is None:
            return False
        if tail is not None and len(frames) >= tail and [s for s, _ in frames[: len(had)]] != had:
            frames = engine.log_frames(name, since)
            if frames is None:
                return False
        if [stamp for stamp, _ in frames[: len(had)]] != had:
            raise _Rotated
        new = frames[len(had) :]
        self.came = len(new)
        data = b"".join(chunk for _, chunk in new)
        self.fetched += len(data)
        self.pending += data
        self.newest = max([self.newest, *(stamp for stamp, _ in new)])
        cutoff = self._since()
        self.recent = [stamp for stamp, _ in frames if stamp >= cutoff]
        return True


class DockerDriver:
    runtime = TaskRuntime.DOCKER

    def __init__(
        self,
        owner: str,
        started: dict[str, float],
        state_folder: Path,
        python: str,
        pull_timeout_s: float = DEFAULT_PULL_TIMEOUT_S,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.engine = DockerRuntime(owner)
        self.python = python
        self.pull_timeout_s = pull_timeout_s
        self._clock = clock
        self._started = started  # task id -> when this controller started its launcher (monotonic)
        self._state_folder = state_folder
        self._listing: dict[str, str] | None = None
        self._listed_at = 0.0  # when the listing was asked for (monotonic)
        self._ends: dict[str, ContainerEnd] = {}  # an ended container's end (it never changes)
        self._gone: dict[str, float] = {}  # task id -> when its container was first seen missing
        self._stop_failures: dict[str, str] = {}  # task id -> why the engine did not stop it
        self._cursors: dict[str, _LogCursor] = {}
        self._pulls: dict[str, PullView] = {}  # task id -> its launcher's pull, as read so far
        self._launching: dict[str, Path] = {}  # task id -> its folder, while a launcher is at work
        self._outages = EngineOutages()  # when the engine did not answer (its listing), under _lock
        self._held: dict[str, float] = {}  # task id -> the end of a signal not judged yet, under _lock
        self._lock = threading.Lock()  # the failures, cursors and launching, from other threads

    def _name(self, task_id: str) -> str:
        return container_name(self.engine.owner, task_id)

    def health_exec(self, task: LocalTask, argv: Sequence[str], timeout_s: float) -> str | None:
        """A health check's command run in the task's container, in its working folder: None
        when it exits 0, else why not (``prober.py``)."""
        try:
            code = self.engine.exec_check(self._name(task.task_id), argv, task.cwd, timeout_s)
        except EngineError as err:
            return f"cannot run it in the container: {err}"
        if code is None:
            return f"still running after {timeout_s:g} s (timeoutSeconds)"
        return None if code == 0 else f"exited {code}"

    def prepare(self, launch: TaskLaunch, gpu_machine: bool) -> Preparation:
        """The image's PATH; the engine hands out the GPUs (the container numbers them from 0);
        the controller's user; the state folder hidden when a source folder holds it."""
        if launch.image is None:
            raise BackendError(
                f"{launch.task_id}: a container task needs an image", code=ErrorCode.IMAGE_REQUIRED
            )
        container = ContainerSpec(
            image=launch.image,
            image_pull_policy=launch.image_pull_policy,
            user=f"{os.getuid()}:{os.getgid()}",
            hidden=(os.path.realpath(self._state_folder),),
            volumes=launch.volumes,
        )
        return Preparation(dict(launch.env), host_working_dir=False, container=container)

    def state_token(self) -> object:
        """The engine's listing and how far each launcher at work has written its pull."""
        with self._lock:
            launching = sorted(self._launching.items())
        pulls = tuple((task_id, pull_log_size(path)) for task_id, path in launching)
        try:
            listing = self._list()
        except EngineError:
            return None, pulls
        with self._lock:  # an end held back that can be judged now: a change to look at
            ripe = tuple(sorted(t for t, at in self._held.items() if self._outages.ripe(at)))
        return listing, pulls, ripe

    def _list(self) -> dict[str, str]:
        """The engine's listing of the owner's containers; whether it answered is noted
        (``engine_outages``: a container that ended while it did not ended with it)."""
        try:
            listing = self.engine.listing()
        except EngineError:
            with self._lock:
                self._outages.saw(False, self._clock())
            raise
        with self._lock:
            self._outages.saw(True, self._clock())
        return listing

    # ---- start ------------------------------------------------------------------------------

    def start(self, folders: Iterable[tuple[TaskFolder, int | None]]) -> None:
        """Start one launcher (``launcher.py``) for the tasks of this launch once their folders
        are written: it pulls their images, makes and starts their containers side by side and
        records them, detached, so the pass never waits for a pull (the port reservation is
        not needed: a container binds its port once it runs)."""
        batch: list[TaskFolder] = []
        try:
            for folder, _ in folders:
                batch.append(folder)
        finally:  # the tasks written so far get their launcher, whatever ``folders`` raised
            if batch:
                self._start_launcher(batch).wait()  # it forks the real launcher and exits at once

    def _start_launcher(self, batch: list[TaskFolder]) -> subprocess.Popen[bytes]:
        try:
            starter = subprocess.Popen(
                [
                    self.python,
                    "-m",
                    "tfdeclare.backends.local.launcher",
                    "--detach",
                    "--owner",
                    self.engine.owner,
                    "--pull-timeout",
                    f"{self.pull_timeout_s:g}",
                    *(str(folder.path) for folder in batch),
                ],
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
                close_fds=True,
            )
        except OSError as err:
            names = ", ".join(folder.task_id for folder in batch)
            raise BackendError(
                f"cannot start the launcher of {names}: {err}", code=ErrorCode.LAUNCH_FAILED
            ) from err
        now = time.monotonic()
        with self._lock:
            for folder in batch:
                self._started[folder.task_id] = now
                self._launching[folder.task_id] = folder.path
        return starter

    # ---- inspect ----------------------------------------------------------------------------

    def begin_pass(self) -> None:
        self._listing = None

    def quiet(self, task_id: str) -> bool:
        return False  # the engine, not the folder, says what changed: looked at every pass

    def _state(self, task_id: str) -> str | None:
        if self._listing is None:
            self._listed_at = time.monotonic()
            try:
                self._listing = self._list()
            except EngineError as err:
                raise BackendError(str(err), code=ErrorCode.ENGINE_UNREACHABLE) from err
        return self._listing.get(self._name(task_id))

    def inspect(self, folder: TaskFolder) -> Seen:
        """From its folder, its launcher (while one is at work) and the engine's listing of the
        owner's containers (one per pass). Read in that order: a launcher seen gone has written
        all it will (its container, or its end) before the folder is read."""
        task_id = folder.task_id
        looked_at = time.monotonic()
        launcher = self._launcher(folder)
        end_on_record = folder.exit()
        if end_on_record is not None:
            self._done_launching(task_id)
            return seen_from_end(end_on_record)
        stop_request = folder.stop_request()
        stopping = stop_request is not None
        made = bool(folder.launch().get("container"))
        state = self._state(task_id)
        if state is None and made and self._listed_at < looked_at:
            self._listing = None  # made after this pass listed the containers: list again
            state = self._state(task_id)
        if launcher is None and (state is not None or made):
            self._done_launching(task_id)
        if state is None and made:
            at = self._gone.setdefault(task_id, time.time())
            with self._lock:
                with_engine = self._outages.away_since(folder.launch().get("startedAt"))
            if with_engine:
                message, cause = (
                    "its container was gone after the Docker engine restarted",
                    EndCause.ENGINE_RESTART,
                )
            else:
                message, cause = "its container was removed outside tfdeclare", EndCause.JOB
            state_now = TaskState.STOPPED if stopping else TaskState.FAILED
            return Seen(state_now, None, None, at, message, Chore.RECORD_END, cause=cause)
        if state in (None, "created") and launcher is not None:
            return self._launching_seen(folder, launcher, stop_request)
        if state in (None, "created") and stopping:
            at = self._gone.setdefault(task_id, time.time())
            return Seen(TaskState.STOPPED, None, None, at, "stopped before it started", Chore.RECORD_END)
        if state == "created":
            return Seen(TaskState.STARTING, chore=Chore.START)  # made by a launcher that died then
        if state is None:
            asked = self._started.get(task_id)
            if asked is None:  # left by a controller that stopped before starting its launcher
                return Seen(TaskState.STARTING, chore=Chore.START)
            if time.monotonic() - asked < LAUNCHER_START_S:
                return Seen(TaskState.STARTING, message=self._pull_message(folder))  # on its way
            self._done_launching(task_id)
            at = self._gone.setdefault(task_id, time.time())
            return Seen(TaskState.FAILED, None, None, at, LAUNCHER_GONE, Chore.RECORD_END)
        if state in ENDED:
            end = self._end(task_id)
            # a signal's end the engine does not explain (not the OOM killer) and that we did
            # not ask for: the engine's own stop, or not? Its answers after the end say
            signalled = end.exit_code is not None and end.exit_code > 128 and not end.message and not stopping
            with self._lock:
                verdict = (
                    Verdict.JOB if end.exit_code == 0 else self._outages.verdict(end.finished_at, signalled)
                )
                if verdict is Verdict.WAIT:
                    self._held[task_id] = end.finished_at
                else:
                    self._held.pop(task_id, None)
            if verdict is Verdict.WAIT:
                message = (
                    f"ended with exit code {end.exit_code}; said once the Docker engine has answered "
                    f"{HOLD_S:g} s past it (a stopping engine ends its containers first)"
                )
                return Seen(TaskState.RUNNING, started_at=folder.launch().get("startedAt"), message=message)
            with_engine = verdict is Verdict.ENGINE
            seen = seen_from_end(
                {
                    "exitCode": end.exit_code,
                    "finishedAt": end.finished_at,
                    "stopped": stopping,
                    "message": ENGINE_STOPPED if with_engine and not end.message else end.message,
                    "cause": EndCause.ENGINE_RESTART.value if with_engine else EndCause.JOB.value,
                }
            )
            return replace(seen, chore=Chore.RECORD_END)
        started_at = folder.launch().get("startedAt")
        chore = None
        with self._lock:
            failed = task_id in self._stop_failures
        if failed or (
            stop_request is not None
            and time.time()
            > float(stop_request.get("at", 0)) + float(stop_request.get("graceSeconds", 0)) + KILL_SLACK_S
        ):
            chore = Chore.KILL  # the engine's own stop did not finish (or failed)
        return Seen(TaskState.STOPPING if stopping else TaskState.RUNNING, started_at=started_at, chore=chore)

    def _launcher(self, folder: TaskFolder) -> LauncherInfo | None:
        """The task's launcher, while it is at work (it holds the task's lock)."""
        if not supervisor_holds(folder.path):
            return None
        info = LauncherInfo.read(folder.path)
        if info is None:  # it has the lock and is about to say who it is
            info = LauncherInfo(0, 0, self._clock(), self.pull_timeout_s)
        with self._lock:
            self._launching[folder.task_id] = folder.path
        return info

    def _launching_seen(
        self, folder: TaskFolder, launcher: LauncherInfo, stop_request: dict[str, object] | None
    ) -> Seen:
        """A task whose launcher is at work: starting, with its pull's progress; past its
        timeout (or, asked to stop, past the slack) it is killed by ``tend``."""
        now = self._clock()
        message = self._pull_message(folder)
        if stop_request is not None:
            asked_at = float(stop_request.get("at", now))  # type: ignore[arg-type]
            late = now > asked_at + KILL_SLACK_S
            return Seen(TaskState.STOPPING, message=message, chore=Chore.KILL if late else None)
        late = launcher.overdue(now, LAUNCHER_SLACK_S)
        return Seen(TaskState.STARTING, message=message, chore=Chore.KILL if late else None)

    def _pull_message(self, folder: TaskFolder) -> str:
        """Its pull's progress in words; what the launcher wrote since the last look is handed
        on to whoever shows pulls (what is not an echo of another task's log: each pull once)."""
        view = self._pulls.get(folder.task_id)
        if view is None:
            view = self._pulls[folder.task_id] = PullView(folder.path / PULL_LOG)
        for event in view.read_new():
            progress.report(event)
        return view.summary()

    def _done_launching(self, task_id: str) -> None:
        """Its launcher's work is over: what is left of its pull is handed on (all of it, for
        a launch of this controller that ended before a look saw it at work), then dropped."""
        with self._lock:
            path = self._launching.pop(task_id, None)
        view = self._pulls.pop(task_id, None)
        if view is None and path is not None:
            view = PullView(path / PULL_LOG)
        for event in view.read_new() if view is not None else []:
            progress.report(event)

    def _end(self, task_id: str) -> ContainerEnd:
        end = self._ends.get(task_id)
        if end is None:
            try:
                end = self._ends[task_id] = self.engine.end(self._name(task_id))
            except EngineError as err:
                if not err.answered:  # a stopping engine: it may list, and not take a new connection
                    with self._lock:
                        self._outages.saw(False, self._clock())
                raise BackendError(str(err), code=ErrorCode.ENGINE_UNREACHABLE) from err
        return end

    # ---- tend -------------------------------------------------------------------------------

    def tend(self, folder: TaskFolder, seen: Seen) -> None:
        try:
            if seen.chore is Chore.START:
                self._start_again(folder)
            elif seen.chore is Chore.RECORD_END:
                self._record_end(folder, seen)
            elif seen.chore is Chore.KILL:
                self._kill(folder)
        except EngineError as err:
            raise BackendError(f"{folder.task_id}: {err}", code=ErrorCode.TEND_FAILED) from err

    def _start_again(self, folder: TaskFolder) -> None:
        name = self._name(folder.task_id)
        if self._state(folder.task_id) == "created":
            self.engine.start(name)  # made by a launcher that died before starting it
            return
        if folder.task_id in self._started:
            return  # once per controller: a launcher that then dies without a word has failed
        folder.note("this task's container was never made (its launcher stopped first); launching it")
        self._start_launcher([folder]).wait()

    def _record_end(self, folder: TaskFolder, seen: Seen) -> None:
        """Keep the ended container's output in the log, record its end, remove it (a
        controller that dies in between leaves the removal to ``destroy``)."""
        name = self._name(folder.task_id)
        state = self._state(folder.task_id)
        if state in ENDED:
            output = (self.engine.logs(name) or (b"", True))[0]
            self._keep_output(folder, output)
        end = (
            seen.exit_code,
            seen.finished_at or time.time(),
            seen.message,
            folder.stop_request() is not None,
        )
        cause = seen.cause.value  # a platform event's, kept: the next controller reads it back
        folder.record_end(*end, cause=cause)
        if state is not None:
            self.engine.remove(name)
        folder.record_end(*end, containerRemoved=True, cause=cause)  # ``destroy`` then needs no engine
        self._forget(folder.task_id)

    @staticmethod
    def _keep_output(folder: TaskFolder, output: bytes) -> None:
        """The log becomes what tfdeclare wrote before the container started, then the
        container's whole output: written atomically, so doing it twice (a controller that
        died before recording the end) changes nothing."""
        path = folder.task.log_path
        path.parent.mkdir(parents=True, exist_ok=True)
        launched = folder.launch()
        try:  # never through a link (a rename replaces whatever is there)
            before, _ = read_regular_at(path, 0, int(launched.get("logOffset", _size(path))))
        except (OSError, ValueError, TypeError):
            before = b""
        write_atomic(path, before + output)

    def _kill(self, folder: TaskFolder) -> None:
        launcher = self._launcher(folder)
        if launcher is not None and not folder.launch().get("container"):
            self._kill_launcher(folder, launcher)
            return
        with self._lock:
            failure = self._stop_failures.pop(folder.task_id, None)
        self.engine.kill(self._name(folder.task_id))
        if failure is not None:
            raise BackendError(
                f"{folder.task_id}: the Docker engine did not stop its container ({failure}); killed it",
                code=ErrorCode.STOP_FAILED,
            )

    def _kill_launcher(self, folder: TaskFolder, launcher: LauncherInfo) -> None:
        """A launcher past its pull timeout (or its stop) and still there: killed (which
        cancels its pull); past its timeout, the task's end says so."""
        if alive(launcher.pid, launcher.ticks):
            with contextlib.suppress(ProcessLookupError):
                os.kill(launcher.pid, signal.SIGKILL)
        if folder.stop_request() is not None or folder.ended_on_record():
            return  # the next look records it stopped
        assert folder.task.container is not None
        message = (
            f"cannot pull image {folder.task.container.image}: not done within "
            f"{launcher.pull_timeout_s:g} s (local.pullTimeoutSeconds); its launcher did not end, killed"
        )
        folder.note(message)
        folder.record_end(None, self._clock(), message, False, containerRemoved=True)

    # ---- stop, destroy, logs ----------------------------------------------------------------

    def stop(self, folder: TaskFolder, grace_s: float) -> None:
        launcher = self._launcher(folder)
        if launcher is not None and alive(launcher.pid, launcher.ticks):
            with contextlib.suppress(ProcessLookupError):  # it polls stop.json: this wakes it sooner
                os.kill(launcher.pid, signal.SIGTERM)
        name = self._name(folder.task_id)
        try:
            state = self.engine.status(name)
        except EngineError as err:
            raise BackendError(f"cannot stop {folder.task_id}: {err}", code=ErrorCode.STOP_FAILED) from err
        if state is None or state in ENDED or state == "created":
            return  # nothing runs: the next look records how it ended

        def stop() -> None:
            try:
                self.engine.stop(name, grace_s)
            except EngineError as err:
                with self._lock:
                    self._stop_failures[folder.task_id] = str(err)

        threading.Thread(target=stop, name=f"stop-{name}", daemon=True).start()

    def destroy(self, folder: TaskFolder) -> None:
        if (folder.exit() or {}).get("containerRemoved"):
            self._forget(folder.task_id)
            return  # nothing of it is left on the engine
        try:
            self.engine.remove(self._name(folder.task_id))  # recorded, but not yet removed
        except EngineError as err:
            raise BackendError(
                f"cannot remove the container of {folder.task_id}: {err}", code=ErrorCode.FORGET_FAILED
            ) from err
        self._forget(folder.task_id)

    def _forget(self, task_id: str) -> None:
        self._done_launching(task_id)
        self._ends.pop(task_id, None)
        self._gone.pop(task_id, None)
        with self._lock:
            self._cursors.pop(task_id, None)
            self._stop_failures.pop(task_id, None)

    def read_log(self, folder: TaskFolder, offset: int, limit: int) -> LogChunk:
        """While the container is there, what tfdeclare wrote before it started, then its
        output from the engine; else the log file (all of it once its end is recorded; what
        tfdeclare wrote so far while its container is being made, and until its launch is
        recorded: the engine may run it a moment before ``launch.json`` says where tfdeclare's
        own lines end)."""
        path = folder.task.log_path
        launched = folder.launch()
        if not folder.ended_on_record() and "logOffset" in launched:
            before = int(launched["logOffset"])
            if offset < before:  # tfdeclare's own lines before the container's output
                chunk = read_log_file(path, offset, min(limit, before - offset), ended=False)
                return LogChunk(chunk.data, chunk.next_offset, False)
            try:
                with self._lock:
                    live = self._read_live(folder.task_id, offset - before, limit)
            except EngineError as err:
                raise BackendError(str(err), code=ErrorCode.LOG_UNAVAILABLE) from err
            if live is not None:
                data, ended, size = live
                if data is None:
                    raise LogOffsetError(offset, before + size)
                return LogChunk(data, offset + len(data), ended and len(data) < limit)
        return read_log_file(path, offset, limit, ended=folder.ended_on_record())

    def _read_live(self, task_id: str, offset: int, limit: int) -> tuple[bytes | None, bool, int] | None:
        """``limit`` bytes of the container's output from ``offset``, whether it has ended,
        and how much it has written (the data is None when ``offset`` is past that); None
        when the container is not there."""
        name = self._name(task_id)
        cursor = self._cursors.get(task_id)
        if cursor is None or offset < cursor.fetched - len(cursor.pending):  # a read back: start over
            cursor = self._cursors[task_id] = _LogCursor()
        ended = False
        if offset >= cursor.fetched:  # all read so far is handed out: ask for what is new
            state = self.engine.status(name)  # first: ended now, all it wrote comes next
            if state is None:
                return None
            ended = state in ENDED
            try:
                there = cursor.more(self.engine, name)
            except _Rotated:
                cursor = self._cursors[task_id] = _LogCursor()
                there = cursor.more(self.engine, name)
            if not there:
                return None
        if offset > cursor.fetched:
            return None, ended, cursor.fetched
        start = offset - (cursor.fetched - len(cursor.pending))
        data = cursor.pending[start : start + limit]
        cursor.pending = cursor.pending[start + len(data) :]
        return data, ended and not cursor.pending, cursor.fetched

    def close(self) -> None:
        self.engine.close()
