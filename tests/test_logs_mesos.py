"""``logs`` on the Mesos backend, end to end: the real CLI against the master emulator, whose
agents run the tasks as real processes and serve their sandboxes' ``stdout`` and ``stderr``
as a real agent's ``/files`` API does. ``logs --follow`` runs in a process of its own, whose
backend never hears the master's updates (the controller's process does): it learns from the
agent that a task has ended, and returns once the job has ended and both files are read. A
running task's stderr (where TensorFlow and absl log) shows as it is written, not only once
the task has ended: in ``logs`` and on the daemon's page alike."""

from __future__ import annotations

import json
import queue
import re
import subprocess
import sys
import threading
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import cli
from tests.mesos_emulator import Emulator
from tests.mesos_fixtures import PY, emulated_project, start_emulator
from tests.test_daemon import Daemon
from tests.waiting import wait_until
from tfdeclare.backends.mesos.sandbox import _has_ended

# Writes a line to each stream, waits for the file GO (60 s at most), writes another to each and fails.
TASK = """\
import os, pathlib, sys, time
print("training", flush=True)
print("warming up", file=sys.stderr, flush=True)
deadline = time.time() + 60
while not pathlib.Path(os.environ["GO"]).exists() and time.time() < deadline:
    time.sleep(0.05)
print("last step", flush=True)
raise RuntimeError("boom")
"""


@pytest.fixture
def project(tmp_path: Path) -> Iterator[tuple[Path, Emulator]]:
    emulator = start_emulator(tmp_path, agents=2, agent_resources="cpus:4;mem:4096;ports:[31000-31099]")
    with emulated_project(tmp_path, emulator) as project:
        yield project


def _apply(root: Path, go: Path) -> None:
    (root / "specs" / "talk.yaml").write_text(
        "apiVersion: tfdeclare/v1\nkind: TFJob\nmetadata: {name: talk}\nspec:\n"
        f"  command: {json.dumps([PY, '-c', TASK])}\n  env: {{GO: {json.dumps(str(go))}}}\n"
        "  restartPolicy: Never\n"
        "  replicas: {worker: {count: 1, resources: {cpus: 0.5, mem: 64}}}\n"
    )
    applied = cli("apply", "specs", cwd=root)
    assert applied.returncode == 0, applied.stdout + applied.stderr


class _Following:
    """``logs talk --follow`` (and ``more``) as a process of its own, its lines read as they come."""

    def __init__(self, root: Path, *more: str) -> None:
        self.process = subprocess.Popen(
            [sys.executable, "-m", "tfdeclare", "logs", "talk", "--follow", *more],
            cwd=root,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        self.lines: queue.Queue[str] = queue.Queue()
        self.seen: list[str] = []
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def _read(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            self.lines.put(line)

    def _stop(self, why: str) -> AssertionError:
        self.process.kill()
        self.process.wait()
        return AssertionError(f"{why}; seen {self.seen}")

    def until(self, line: str, timeout: float = 60) -> None:
        """Read on until ``line`` has come."""
        try:
            while line not in self.seen:
                self.seen.append(self.lines.get(timeout=timeout))
        except queue.Empty:
            raise self._stop(f"{line!r} never came") from None

    def ended(self, timeout: float = 60) -> str:
        """Wait for the follow to return by itself; its stderr (every line read into ``seen``)."""
        try:
            self.process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            raise self._stop(f"logs --follow did not return within {timeout} s of the job's end") from None
        self.reader.join(timeout=10)
        while not self.lines.empty():
            self.seen.append(self.lines.get())
        assert self.process.stderr is not None
        with self.process.stderr:
            return self.process.stderr.read()


TRACEBACK = [
    "Traceback (most recent call last):",
    '  File "<string>", line 8, in <module>',
    "RuntimeError: boom",
]


@pytest.mark.slow
def test_following_a_failing_job_returns_with_both_streams(project: tuple[Path, Emulator]) -> None:
    """The task ends while followed (after the follow has read its first line): the follow
    returns, exit 0 as on the local backend, with every line of both streams."""
    root, _ = project
    go = root / "go"
    _apply(root, go)
    follow = _Following(root)
    follow.until("worker-0 | training\n")
    go.touch()  # the task goes on and fails
    errors = follow.ended()
    assert follow.process.returncode == 0 and errors == ""
    assert [line for line in follow.seen if not line.startswith("worker-0 | ")] == [], follow.seen
    shown = [line.removeprefix("worker-0 | ").removesuffix("\n") for line in follow.seen]
    assert [line for line in shown if line in ("training", "last step")] == ["training", "last step"]
    assert [line for line in shown if line == "warming up" or line in TRACEBACK] == ["warming up", *TRACEBACK]
    one = cli("logs", "talk", "--follow", "--task", "worker-0", cwd=root, timeout=60)
    assert one.returncode == 0 and sorted(one.stdout.splitlines()) == sorted(shown), one.stderr
    whole = cli("logs", "talk", cwd=root)  # without --follow: stdout, then its stderr after a header
    expected = ["training", "last step", "", "--- stderr ---", "warming up", *TRACEBACK]
    assert whole.returncode == 0 and whole.stdout.splitlines() == [f"worker-0 | {line}" for line in expected]
    for flag in ("--timestamps", "--since=1h"):  # Mesos records no line times: said, as before
        timed = cli("logs", "talk", flag, cwd=root)
        assert timed.returncode == 1 and "does not record when log lines were written" in timed.stderr


@pytest.mark.slow
def test_following_a_running_job_shows_its_stderr_as_it_is_written(project: tuple[Path, Emulator]) -> None:
    root, _ = project
    go = root / "go"
    _apply(root, go)
    follow = _Following(root)
    follow.until("worker-0 | warming up\n")  # the task waits for `go`: it is running still
    assert not go.exists() and "worker-0 | training\n" in follow.seen
    shown = cli("logs", "talk", cwd=root)  # without --follow too, while it runs
    assert (
        shown.stdout == "worker-0 | training\nworker-0 | \nworker-0 | --- stderr ---\nworker-0 | warming up\n"
    )
    go.touch()
    assert follow.ended() == "" and follow.process.returncode == 0
    assert follow.seen[-len(TRACEBACK) :] == [f"worker-0 | {line}\n" for line in TRACEBACK]
    assert "worker-0 | last step\n" in follow.seen


def test_an_agent_shows_a_task_ended_as_a_real_agent_does() -> None:
    """A real agent keeps an ended task among its executor's ``tasks``, in its terminal state,
    until the framework acknowledges the update; then among ``completed_tasks`` (and its
    executor among ``completed_executors``)."""

    def state(key: str, executor_key: str, task_state: str) -> dict[str, object]:
        task = {"id": "t.1", "state": task_state}
        executor = {"id": "t.1", "directory": "/sandbox", key: [task]}
        return {"frameworks": [{"id": "f", executor_key: [executor]}]}

    assert not _has_ended(state("tasks", "executors", "TASK_RUNNING"), "t.1")
    assert not _has_ended(state("queued_tasks", "executors", "TASK_STAGING"), "t.1")
    assert _has_ended(state("tasks", "executors", "TASK_FAILED"), "t.1")  # not acknowledged yet
    assert _has_ended(state("completed_tasks", "executors", "TASK_FINISHED"), "t.1")
    assert _has_ended(state("completed_tasks", "completed_executors", "TASK_KILLED"), "t.1")
    assert _has_ended(state("tasks", "completed_executors", "TASK_RUNNING"), "t.1")  # its executor ended
    assert not _has_ended(state("tasks", "executors", "TASK_RUNNING"), "t.2")  # not that agent's


# Writes a line to stdout and 3000 to stderr (the last a hostile one), then runs until the file GO.
TALKER = """\
import os, pathlib, sys, time
print("training", flush=True)
for step in range(3000):
    print(f"warming up {step}", file=sys.stderr)
print("<script>alert(1)</script> & done", file=sys.stderr, flush=True)
deadline = time.time() + 60
while not pathlib.Path(os.environ["GO"]).exists() and time.time() < deadline:
    time.sleep(0.05)
"""


def _get(url: str) -> tuple[int, dict[str, str], bytes]:
    try:
        with urllib.request.urlopen(url, timeout=10) as response:
            return response.status, dict(response.headers), response.read()
    except urllib.error.HTTPError as err:
        return err.code, dict(err.headers), err.read()


@pytest.mark.slow
def test_the_daemons_page_shows_a_running_tasks_stderr(project: tuple[Path, Emulator]) -> None:
    """The daemon on the Mesos backend: a card shows the end of a running task's stdout and of
    its stderr (where TensorFlow logs; Mesos's one log has only stdout until the task ends),
    bounded and escaped, and links to the stderr alone, which the log endpoint serves."""
    root, _ = project
    go = root / "go"
    (root / "specs" / "talk.yaml").write_text(
        "apiVersion: tfdeclare/v1\nkind: TFJob\nmetadata: {name: talk}\nspec:\n"
        f"  command: {json.dumps([PY, '-c', TALKER])}\n  env: {{GO: {json.dumps(str(go))}}}\n"
        "  restartPolicy: Never\n"
        "  replicas: {worker: {count: 1, resources: {cpus: 0.5, mem: 64}}}\n"
    )
    daemon = Daemon(root, "--specs", "specs", "--interval", "1")
    try:

        def tail() -> str | None:
            found = re.search(
                r'<div class="tail">.*?<pre>(.*?)</pre>', _get(daemon.url + "/")[2].decode(), re.S
            )
            # both streams' ends: the agent writes each to its own file, in no order between them
            return (
                found.group(1)
                if found and "done" in found.group(1) and "training" in found.group(1)
                else None
            )

        shown = str(wait_until(tail, timeout=60))
        assert not go.exists()  # the task runs still
        expected = [f"warming up {step}" for step in range(2993, 3000)]
        assert shown.splitlines() == [
            "training",
            "",
            "--- stderr ---",
            *expected,
            "&lt;script&gt;alert(1)&lt;/script&gt; &amp; done",
        ]
        page_text = _get(daemon.url + "/")[2].decode()
        assert 'href="/jobs/talk/logs?task=worker-0&amp;stream=stderr">stderr</a>' in page_text
        code, headers, body = _get(daemon.url + "/jobs/talk/logs?task=worker-0&stream=stderr")
        assert code == 200 and headers["X-Tfdeclare-Complete"] == "false"
        assert body.decode().splitlines()[-2:] == ["warming up 2999", "<script>alert(1)</script> & done"]
        assert headers["X-Tfdeclare-Next-Offset"] == str(len(body))
        assert _get(daemon.url + "/jobs/talk/logs?task=worker-0&stream=stdout")[2] == b"training\n"
        assert _get(daemon.url + "/jobs/talk/logs")[2] == b"training\n"  # the one log: stdout while it runs
        for wrong in ("stream=both", "stream=stderr&stream=stdout"):
            code, _, body = _get(daemon.url + f"/jobs/talk/logs?{wrong}")
            assert code == 400 and b"stream is given once, stdout or stderr" in body, wrong
    finally:
        go.touch()
        daemon.stop()
