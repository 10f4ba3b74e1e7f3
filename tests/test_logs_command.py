"""``logs``: every task's lines with a prefix, ``--follow`` interleaving them as they come and
ending with the job, ``-o json``; Python tasks unbuffered by default (their lines reach the
log while they run), outside the task's identity (the config hash). A task is ``worker-0``,
``worker:0`` too, for ``--task`` and the daemon's log endpoint alike."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tests.conftest import cli
from tests.test_daemon import Daemon, cwd
from tests.test_daemon_page import Served, served
from tests.test_e2e_local import project, wait_until
from tfdeclare.backends import registry
from tfdeclare.cli.common import UserError
from tfdeclare.cli.logs_command import _Tail
from tfdeclare.core.enums import Role
from tfdeclare.core.run.launches import launch_env
from tfdeclare.core.run.tasks import TaskKey

__all__ = ["cwd", "project", "served"]  # the fixtures

TALKER = """\
import os, pathlib, time
print("ready", os.environ["TFDECLARE_INDEX"], repr(os.environ.get("PYTHONUNBUFFERED")))
go = pathlib.Path(os.environ["GO"])
deadline = time.time() + 60
while not go.exists() and time.time() < deadline:
    time.sleep(0.05)
print("done", os.environ["TFDECLARE_INDEX"], end="")
"""


def _talkers(go: Path) -> str:
    return (
        "apiVersion: tfdeclare/v1\nkind: TFJob\nmetadata: {name: talk}\nspec:\n"
        f"  command: [python, -c, {json.dumps(TALKER)}]\n"
        f"  env: {{GO: {json.dumps(str(go))}}}\n"
        "  replicas: {worker: {count: 2, resources: {cpus: 0.1, mem: 64}}}\n"
    )


def test_default_environment_is_added_unless_the_spec_sets_it() -> None:
    assert launch_env((("A", "1"),)) == (("A", "1"), ("PYTHONUNBUFFERED", "1"))
    assert launch_env((("PYTHONUNBUFFERED", ""),)) == (("PYTHONUNBUFFERED", ""),)


@pytest.mark.slow
@pytest.mark.e2e
def test_logs_of_every_task_prefixed_and_followed_while_python_tasks_run(project: Path) -> None:
    go = project / "go"
    (project / "specs" / "talk.yaml").write_text(_talkers(go))
    assert cli("apply", "specs", cwd=project).returncode == 0

    # The tasks wait for `go`: their first lines can only be in the log if Python did not buffer them.
    def both_ready() -> bool:
        shown = cli("logs", "talk", cwd=project).stdout
        return "worker-0 | ready 0 '1'\n" in shown and "worker-1 | ready 1 '1'\n" in shown

    wait_until(both_ready, timeout=60)
    assert not go.exists()

    follow = subprocess.Popen(
        [sys.executable, "-m", "tfdeclare", "logs", "talk", "--follow"],
        cwd=project,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert follow.stdout is not None
    first = {follow.stdout.readline(), follow.stdout.readline()}  # what is there already
    assert first == {"worker-0 | ready 0 '1'\n", "worker-1 | ready 1 '1'\n"}
    go.touch()
    rest, errors = follow.communicate(timeout=60)  # it ends by itself once both tasks have ended
    assert follow.returncode == 0, errors
    assert sorted(rest.splitlines()) == ["worker-0 | done 0", "worker-1 | done 1"]  # last lines lack "\n"

    as_json = [
        json.loads(line) for line in cli("logs", "talk", "-o", "json", cwd=project).stdout.splitlines()
    ]
    assert {"task": "worker-1", "line": "done 1"} in as_json and len(as_json) == 4
    for name in ("worker-1", "worker:1"):  # the name every output shows, and its alias
        one = cli("logs", "talk", "--task", name, cwd=project)
        assert one.returncode == 0 and one.stdout == "ready 1 '1'\ndone 1", name
    for wrong in ("worker:x", "wrker-1", "worker-"):
        refused = cli("logs", "talk", "--task", wrong, cwd=project)
        assert refused.returncode == 1 and "a task is ROLE-INDEX, e.g. worker-1" in refused.stderr
        assert "Traceback" not in refused.stderr
    absent = cli("logs", "talk", "--task", "worker-2", cwd=project)
    assert absent.returncode == 1 and "job talk has no task worker-2 that has started" in absent.stderr
    shown = yaml.safe_load((project / "status" / "talk.yaml").read_text())
    assert [t["log"] for t in shown["tasks"]] == [f"tfdeclare logs talk --task worker-{i}" for i in (0, 1)]


# worker-1 fails once, when the test says so, then runs again (alone: restartScope Task)
RESTARTS_ALONE = """\
import os, pathlib, sys, time
out = pathlib.Path(os.environ["OUT"])
index = os.environ["TFDECLARE_INDEX"]
ran = out / f"ran-{index}"
run = 2 if ran.exists() else 1
ran.touch()
print("run", run, flush=True)
fails = index == "1" and run == 1
while not (out / ("fail" if fails else "end")).exists():
    time.sleep(0.05)
sys.exit(4 if fails else 0)
"""


@pytest.mark.slow
@pytest.mark.e2e
def test_following_one_task_goes_on_while_it_restarts_alone(cwd: Path) -> None:
    """A task that restarts alone is down for its backoff while the job runs on: the follow of
    that task waits for its next launch (and ends with the job), not at the first end."""
    config = cwd / "tfdeclare.yaml"
    config.write_text(config.read_text().replace("initialSeconds: 0.2, maxSeconds: 1", "initialSeconds: 3"))
    out = cwd / "out"
    out.mkdir()
    (cwd / "specs" / "alone.yaml").write_text(
        "apiVersion: tfdeclare/v1\nkind: TFJob\nmetadata: {name: alone}\nspec:\n"
        f"  command: [python, -c, {json.dumps(RESTARTS_ALONE)}]\n"
        f"  env: {{OUT: {json.dumps(str(out))}}}\n"
        "  restartScope: Task\n  backoffLimit: 3\n"
        "  replicas: {worker: {count: 2, resources: {cpus: 0.1, mem: 64}}}\n"
    )
    daemon = Daemon(cwd, "--specs", "specs")
    try:
        wait_until(lambda: "run 1" in cli("logs", "alone", "--task", "worker-1", cwd=cwd).stdout, timeout=60)
        follow = subprocess.Popen(
            [sys.executable, "-m", "tfdeclare", "logs", "alone", "--follow", "--task", "worker-1"],
            cwd=cwd,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        assert follow.stdout is not None
        assert follow.stdout.readline() == "run 1\n"  # what is there already: it follows now
        (out / "fail").touch()

        def restarted_alone() -> bool:
            shown = yaml.safe_load((cwd / "status" / "alone.yaml").read_text())
            return shown["restarts"] == 0 and [t["task"] for t in shown["taskRestarts"]] == ["worker-1"]

        wait_until(restarted_alone, timeout=60)  # down for its backoff (3 s), the job running
        wait_until(lambda: "run 2" in cli("logs", "alone", "--task", "worker-1", cwd=cwd).stdout, timeout=60)
        (out / "end").touch()
        rest, errors = follow.communicate(timeout=60)  # it ends by itself with the job
        assert follow.returncode == 0, errors
        assert rest == "run 2\n", "the follow saw the task's next launch"
    finally:
        daemon.stop()


def test_a_log_that_cannot_be_read_stops_only_when_it_was_the_one_asked_for(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    plugin = registry.plugin("local")
    backend = plugin.build(tmp_path / "state", plugin.config_type())
    try:
        tail = _Tail(TaskKey(Role.WORKER, 0), "no-such-task")
        assert tail.read(backend, strict=False) is False and tail.complete
        assert "tfdeclare: worker-0: " in capsys.readouterr().err
        with pytest.raises(UserError):
            _Tail(TaskKey(Role.WORKER, 0), "no-such-task").read(backend, strict=True)
    finally:
        backend.close()


@pytest.mark.parametrize("task", ["worker-1", "worker:1"])
def test_the_log_endpoint_takes_the_task_name_and_its_alias(served: Served, task: str) -> None:
    served.world.backend.write_log(served.world.task("a", Role.WORKER, 1).task_id, b"one\n")
    served.world.backend.write_log(served.world.task("a", Role.WORKER, 0).task_id, b"zero\n")
    assert served.get(f"/jobs/a/logs?task={task}")[::2] == (200, b"one\n")  # the daemon's /jobs


@pytest.mark.parametrize("task", ["wrker-1", "worker-x", "worker-", "worker:1:2"])
def test_a_log_task_that_names_no_task_is_not_found_and_says_what_a_task_is(
    served: Served, task: str
) -> None:
    code, _, body = served.get(f"/jobs/a/logs?task={task}")
    assert code == 404 and "a task is ROLE-INDEX, e.g. worker-1" in json.loads(body)["error"], body


def test_a_log_that_shrank_is_read_again_from_its_start() -> None:
    """A rotated log (Mesos' logrotate container logger): the offset reached is past its new
    end, and the backend says so; what the file now holds is all new."""
    from tests.fake_backend import FakeBackend

    backend = FakeBackend()
    backend.cluster.logs["t"] = bytearray(b"old line 1\nold line 2\n")
    tail = _Tail(TaskKey(Role.WORKER, 0), "t")
    assert tail.read(backend, strict=True) and tail.lines == [b"old line 1\n", b"old line 2\n"]
    backend.cluster.logs["t"] = bytearray(b"new\n")  # rotated: shorter than what was read
    assert tail.read(backend, strict=True) and tail.offset == 0
    assert tail.read(backend, strict=True) and tail.lines[-1] == b"new\n"
