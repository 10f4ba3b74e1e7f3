"""The per-task supervisor: ``python -m tfdeclare.backends.local.supervisor TASK_DIR``.

One small process per task, in its own session so it outlives the CLI that started it. It
starts the task's command (an argv list, never a shell) as the leader of a new process group,
its output going straight to the task's log file, and records, atomically:

- ``state.json`` once the task runs: its pid (= process group id) and start tick, and ours;
- ``exit.json`` when it ends: the exit code (128+N for signal N), and whether it was asked to
  stop.

It is started with ``--detach``, takes an exclusive ``flock`` on ``task.json`` (a second
supervisor of the same task, from a retried launch, finds it held and exits at once) and
writes ``launch.json`` (its own pid). A stop request is the file ``stop.json``: the
supervisor looks for it on every poll, and SIGTERM only wakes it sooner, so a controller that
dies between writing the request and signalling still gets its task stopped. It then sends
SIGTERM to the task's process group, waits the grace period, then SIGKILLs the group. When
the task ends, whatever is left of its group is killed too, so no task process outlives it.
The controller passes the descriptor holding the task's machine-wide port reservation
(``--port-fd``): it is never passed on to the task, and is closed once the task has ended.

While the task runs it samples its log's size once a second (``logtimes``: when each line was
written). It reads the task's record through ``record.py`` (every version a release wrote) and imports
little else, so it starts fast.
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from tfdeclare.backends.local.logtimes import Sampler
from tfdeclare.backends.local.record import TASK_FILE, read_task
from tfdeclare.backends.secrets import SecretUnavailable, read_all
from tfdeclare.files import open_append, open_regular, read_regular, write_atomic

POLL_S = 0.05


def process_start_ticks(pid: int) -> int | None:
    """Field 22 of /proc/PID/stat: tells a process from a later one that reused its pid."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as handle:
            data = handle.read()
    except OSError:
        return None
    fields = data[data.rfind(b")") + 2 :].split()
    return int(fields[19])


def write_json(path: Path, data: dict[str, Any]) -> None:
    write_atomic(path, json.dumps(data).encode())


def kill_group(pgid: int, sig: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, sig)


class Supervisor:
    def __init__(self, task_dir: Path, port_fd: int | None = None) -> None:
        self.task_dir = task_dir
        self.port_fd = port_fd
        task = read_task(task_dir)
        if task is None:
            raise SystemExit(f"tfdeclare supervisor: no task record it can read in {task_dir}")
        self.task = task
        self.stop_requested_at: float | None = None
        self.grace_s = task.grace_s

    def _release_port(self) -> None:
        if self.port_fd is not None:
            with contextlib.suppress(OSError):
                os.close(self.port_fd)
            self.port_fd = None

    def _stop_requested(self) -> float | None:
        """When the stop was asked for (by ``stop.json``, with or without a signal), or None."""
        if self.stop_requested_at is None and (self.task_dir / "stop.json").exists():
            self._on_sigterm(signal.SIGTERM, None)
        return self.stop_requested_at

    def _on_sigterm(self, signum: int, frame: object) -> None:
        if self.stop_requested_at is None:
            self.stop_requested_at = time.monotonic()
            with contextlib.suppress(OSError, ValueError):
                request = json.loads(read_regular(self.task_dir / "stop.json", 1 << 20))
                self.grace_s = float(request.get("graceSeconds", self.grace_s))

    def run(self) -> int:
        signal.signal(signal.SIGTERM, self._on_sigterm)
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        signal.signal(signal.SIGHUP, signal.SIG_IGN)
        log_path = self.task.log_path
        log_path.parent.mkdir(parents=True, exist_ok=True)
        started = time.time()
        self.times = Sampler(log_path)  # when the log grew: `logs --timestamps`, `--since`
        with os.fdopen(open_append(log_path), "ab", buffering=0) as log, open(os.devnull, "rb") as devnull:
            try:  # the values of secrets are read now, and only kept in the task's environment
                secrets = read_all(self.task.secrets, os.environ)
                child = subprocess.Popen(
                    self.task.argv,
                    env={**self.task.env, **secrets},
                    cwd=self.task.cwd or None,
                    stdin=devnull,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    process_group=0,
                    close_fds=True,
                )
            except (OSError, SecretUnavailable) as err:
                reason = getattr(err, "strerror", None) or err
                log.write(f"tfdeclare: cannot start {self.task.argv[0]!r}: {reason}\n".encode())
                self.times.sample(time.time(), time.monotonic(), final=True)
                self._release_port()
                write_json(
                    self.task_dir / "exit.json",
                    {
                        "exitCode": 127,
                        "finishedAt": time.time(),
                        "stopped": False,
                        "message": f"cannot start: {reason}",
                    },
                )
                return 0
        write_json(
            self.task_dir / "state.json",
            {
                "pid": child.pid,
                "ticks": process_start_ticks(child.pid),
                "supervisorPid": os.getpid(),
                "supervisorTicks": process_start_ticks(os.getpid()),
                "startedAt": started,
            },
        )
        returncode = self._wait(child)
        self.times.sample(time.time(), time.monotonic(), final=True)
        kill_group(child.pid, signal.SIGKILL)  # stragglers of the task's group
        self._release_port()
        exit_code = returncode if returncode >= 0 else 128 - returncode
        write_json(
            self.task_dir / "exit.json",
            {"exitCode": exit_code, "finishedAt": time.time(), "stopped": self.stop_requested_at is not None},
        )
        return 0

    def _wait(self, child: subprocess.Popen[bytes]) -> int:
        termed = killed = False
        while True:
            code = child.poll()
            if code is not None:
                return code
            self.times.sample(time.time(), time.monotonic())
            asked_at = self._stop_requested()
            if asked_at is not None:
                if not termed:
                    kill_group(child.pid, signal.SIGTERM)
                    termed = True
                elif not killed and time.monotonic() - asked_at >= self.grace_s:
                    kill_group(child.pid, signal.SIGKILL)
                    killed = True
            time.sleep(POLL_S)


def main(argv: list[str]) -> int:
    """``--detach`` forks, and the parent exits at once: the supervisor is then nobody's child
    (no zombie in a long-running controller) and leads its own session. ``--port-fd N`` names
    the inherited descriptor that holds the task's port reservation: it is closed once the
    task has ended, before ``exit.json`` says so, so the port is free when the end is seen."""
    parser = argparse.ArgumentParser(prog="python -m tfdeclare.backends.local.supervisor")
    parser.add_argument("--detach", action="store_true")
    parser.add_argument("--port-fd", type=int)
    parser.add_argument("task_dir", type=Path)
    args = parser.parse_args(argv)
    task_dir: Path = args.task_dir
    if args.detach:
        if os.fork() > 0:
            os._exit(0)
        os.setsid()
    lock = open_regular(task_dir / TASK_FILE)  # never through a link, never waiting on a FIFO
    try:
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)  # held until we exit
    except BlockingIOError:
        return 0  # this task's supervisor already runs (a retried launch)
    me = os.getpid()
    write_json(task_dir / "launch.json", {"supervisorPid": me, "supervisorTicks": process_start_ticks(me)})
    return Supervisor(task_dir, args.port_fd).run()


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
