"""What the CLI promises around the commands themselves: exit codes of usage errors, NAME
arguments that cannot name a file elsewhere, a ``status`` that only reads, ages in UTC; no
prefixes of options, "did you mean" for a mistyped command or option; one name per task; a
status that is current right after a plain ``apply``."""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import cli
from tests.test_e2e_local import pids_alive, project, records, spec, status_of, wait_until
from tfdeclare.cli.main import build_parser
from tfdeclare.cli.run_commands import _finished
from tfdeclare.cli.status_command import _age
from tfdeclare.core.enums import Phase, Reason, Role
from tfdeclare.core.run.record import JobRecord, rfc3339
from tfdeclare.core.spec.keys import TaskKey
from tfdeclare.shell.store import StateStore

__all__ = ["project"]  # the fixture


@pytest.mark.parametrize(
    "args",
    [
        ("plan",),  # a required argument missing
        ("apply", "specs", "--timeout", "soon"),
        ("no-such-command",),
        ("plan", "specs", "--detailed-exitcode", "--no-such-flag"),
    ],
)
def test_usage_errors_exit_1_not_2_which_means_changes(tmp_path: Path, args: tuple[str, ...]) -> None:
    result = cli(*args, cwd=tmp_path)
    assert result.returncode == 1, result.stderr
    assert "usage: tfdeclare" in result.stderr and "Traceback" not in result.stderr


@pytest.mark.parametrize(
    "args",
    [("delete", "Nope"), ("status", "../x"), ("logs", "../../etc/passwd"), ("delete", "a", "b/../../c")],
)
def test_a_name_that_is_not_a_job_name_is_a_usage_error(tmp_path: Path, args: tuple[str, ...]) -> None:
    result = cli(*args, cwd=tmp_path)
    assert result.returncode == 1, result.stdout + result.stderr
    assert "is not a job name" in result.stderr and "Traceback" not in result.stderr


def test_ages_are_counted_in_utc_whatever_the_local_daylight_saving_time() -> None:
    code = (
        "import time; from tfdeclare.cli.status_command import _age; "
        "from tfdeclare.core.run.record import rfc3339; print(_age(rfc3339(time.time() - 90)))"
    )
    for zone in ("Australia/Sydney", "America/New_York", "Europe/Berlin", "UTC"):
        shown = subprocess.run(
            [sys.executable, "-c", code],
            env={**os.environ, "TZ": zone},
            capture_output=True,
            text=True,
            check=True,
        )
        assert shown.stdout.strip() == "1m", zone
    assert _age(rfc3339(time.time() - 3 * 3600 - 5)) == "3h"


def _hold_lock(project: Path) -> subprocess.Popen[str]:
    """Another controller holding the state folder's lock, as a real process."""
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sys, pathlib; from tfdeclare.shell.lock import ControllerLock; "
            "lock = ControllerLock(pathlib.Path('.tfdeclare')); lock.acquire('daemon', source='x'); "
            "print('held', flush=True); sys.stdin.read()",
        ],
        cwd=project,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
    return holder


def test_status_only_reads_and_refresh_reconciles(project: Path) -> None:
    (project / "specs" / "a.yaml").write_text(spec("quick", {"worker": (1, "sleep=0.5")}))
    assert cli("apply", "specs", cwd=project).returncode == 0
    wait_until(lambda: len(records(project)) == 1)
    pid = int(records(project)["worker-0.0"]["pid"])  # type: ignore[call-overload]
    wait_until(lambda: pids_alive([pid]) == [])
    # the task has ended and its supervisor has recorded how; no controller has looked since
    wait_until(lambda: any((project / ".tfdeclare" / "local" / "tasks").glob("*/exit.json")))
    before = {p: p.read_bytes() for p in (project / ".tfdeclare").rglob("*.json")}
    status_before = (project / "status" / "quick.yaml").read_bytes()

    holder = _hold_lock(project)
    try:
        shown = cli("status", cwd=project)
        assert shown.returncode == 0, shown.stderr
        assert "quick" in shown.stdout and "kept current by daemon" in shown.stderr
        refused = cli("status", "--refresh", cwd=project)
        assert refused.returncode == 1 and "daemon" in refused.stderr
    finally:
        assert holder.stdin is not None
        holder.stdin.close()
        holder.wait(10)

    shown = cli("status", "quick", cwd=project)
    assert shown.returncode == 0 and "--refresh" in shown.stderr
    after = {p: p.read_bytes() for p in (project / ".tfdeclare").rglob("*.json")}
    assert after == before, "status wrote to the state folder"
    assert (project / "status" / "quick.yaml").read_bytes() == status_before
    assert status_of(project, "quick")["phase"] != "Succeeded"

    assert cli("status", "--refresh", cwd=project).returncode == 0
    assert status_of(project, "quick")["phase"] == "Succeeded"


@pytest.mark.parametrize("output", ["text", "markdown"])
def test_plan_of_files_with_errors_shows_no_plan(tmp_path: Path, output: str) -> None:
    (tmp_path / "specs").mkdir()
    (tmp_path / "specs" / "good.yaml").write_text(spec("good", {"worker": (1, "serve")}))
    (tmp_path / "specs" / "bad.yaml").write_text("apiVersion: [")
    for paths in (["specs"], ["specs/good.yaml", "missing-folder"]):
        result = cli("plan", *paths, "-o", output, cwd=tmp_path)
        assert result.returncode == 1
        assert "No plan: the files have 1 error(s)" in result.stdout
        assert "No changes" not in result.stdout and "good" not in result.stdout
        assert "to create" not in result.stdout


def test_a_job_bigger_than_the_policy_allows_is_refused_with_its_line(tmp_path: Path) -> None:
    (tmp_path / "specs").mkdir()
    (tmp_path / "specs" / "big.yaml").write_text(
        "apiVersion: tfdeclare/v1\nkind: TFJob\nmetadata: {name: big}\nspec:\n"
        "  command: [python, x.py]\n  replicas:\n    ps: {count: 2}\n    worker: {count: 100000}\n"
    )
    for command in ("validate", "plan", "apply"):
        result = cli(command, "specs", cwd=tmp_path)
        assert result.returncode == 1, result.stdout + result.stderr
        assert (
            "specs/big.yaml:8:21: error: the job has 100002 tasks; at most 1000 per job "
            "(policy.maxTasksPerJob in the config) (at $.spec.replicas.worker.count)"
        ) in result.stderr
    assert not StateStore(tmp_path / ".tfdeclare").exists(), "no record kept"
    (tmp_path / "tfdeclare.yaml").write_text("policy: {maxTasksPerJob: 100000}\n")
    assert "at most 100000 per job" in cli("validate", "specs", cwd=tmp_path).stderr
    (tmp_path / "tfdeclare.yaml").write_text("policy: {maxTasksPerJob: 2000}\n")
    text = (tmp_path / "specs" / "big.yaml").read_text().replace("100000", "1998")
    (tmp_path / "specs" / "big.yaml").write_text(text)
    assert cli("validate", "specs", cwd=tmp_path).returncode == 0


def test_apply_of_a_job_that_can_never_fit_exits_1(tmp_path: Path) -> None:
    (tmp_path / "specs").mkdir()
    (tmp_path / "tfdeclare.yaml").write_text("local: {cpus: 2, mem: 4Gi, gpus: 0}\n")
    (tmp_path / "specs" / "huge.yaml").write_text(
        "apiVersion: tfdeclare/v1\nkind: TFJob\nmetadata: {name: huge}\nspec:\n"
        "  command: [python, x.py]\n  replicas:\n    worker: {count: 1, resources: {cpus: 64}}\n"
    )
    result = cli("apply", "specs", cwd=tmp_path)
    assert result.returncode == 1, result.stdout + result.stderr
    assert "cannot be scheduled: huge" in result.stderr
    cli("delete", "--all", cwd=tmp_path)


def _every_parser(parser: argparse.ArgumentParser) -> Iterator[tuple[str, argparse.ArgumentParser]]:
    yield parser.prog, parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub in action.choices.values():
                yield from _every_parser(sub)


def test_no_parser_takes_a_prefix_of_an_option() -> None:
    found = dict(_every_parser(build_parser()))
    assert {"tfdeclare", "tfdeclare plan", "tfdeclare logs", "tfdeclare daemon"} <= set(found)
    assert [prog for prog, parser in found.items() if parser.allow_abbrev] == []


def test_no_option_takes_a_bare_number() -> None:
    """``float``/``int`` take ``-5``, ``nan`` and ``inf``: a negative timeout, a daemon resyncing
    without pause. Every number option has a type saying what it takes."""
    bare = [
        f"{prog} {action.option_strings[0]}"
        for prog, parser in _every_parser(build_parser())
        for action in parser._actions
        if action.type in (float, int)
    ]
    assert bare == []


@pytest.mark.parametrize(
    ("args", "told"),
    [
        (
            ("apply", "specs", "--timeout", "-5"),
            "--timeout: expected a number of seconds, 0 or more, got '-5'",
        ),
        (
            ("apply", "specs", "--timeout", "nan"),
            "--timeout: expected a number of seconds, 0 or more, got 'nan'",
        ),
        (
            ("delete", "a", "--timeout", "inf"),
            "--timeout: expected a number of seconds, 0 or more, got 'inf'",
        ),
        (
            ("daemon", "--specs", ".", "--interval", "0"),
            "--interval: expected a number of seconds, more than 0",
        ),
        (("daemon", "--specs", ".", "--port", "70000"), "--port: expected a port number from 0 to 65535"),
        (("daemon", "--specs", ".", "--port", "-1"), "--port: expected a port number from 0 to 65535"),
    ],
)
def test_a_number_out_of_range_is_a_usage_error(tmp_path: Path, args: tuple[str, ...], told: str) -> None:
    result = cli(*args, cwd=tmp_path)
    assert result.returncode == 1, result.stderr
    assert told in result.stderr and "Traceback" not in result.stderr


@pytest.mark.parametrize(
    ("args", "told"),
    [
        (
            ("plan", "specs", "--detailed"),
            "unrecognized arguments: --detailed; did you mean --detailed-exitcode?",
        ),
        (("apply", "specs", "--wai"), "unrecognized arguments: --wai; did you mean --wait?"),
        (("status", "--refres"), "did you mean --refresh?"),
        (("stauts",), "invalid choice: 'stauts' (choose from 'validate', "),
        (("stauts",), "; did you mean 'status'?"),
        (("aply", "specs"), "did you mean 'apply'?"),
        (("plan", "specs", "-o", "jsno"), "did you mean 'json'?"),
    ],
)
def test_a_mistyped_command_or_option_is_refused_with_what_was_meant(
    tmp_path: Path, args: tuple[str, ...], told: str
) -> None:
    (tmp_path / "specs").mkdir()
    (tmp_path / "specs" / "a.yaml").write_text(spec("a", {"worker": (1, "serve")}))
    result = cli(*args, cwd=tmp_path)
    assert result.returncode == 1, result.stdout + result.stderr  # not 2 ("changes"), not 0: nothing ran
    assert told in result.stderr and "Traceback" not in result.stderr
    assert result.stdout == ""


def test_a_word_like_no_command_gets_no_guess(tmp_path: Path) -> None:
    result = cli("frobnicate", cwd=tmp_path)
    assert result.returncode == 1 and "invalid choice: 'frobnicate'" in result.stderr
    assert "did you mean" not in result.stderr


@pytest.mark.parametrize(
    ("text", "key"),
    [
        ("worker-0", TaskKey(Role.WORKER, 0)),
        ("worker:12", TaskKey(Role.WORKER, 12)),
        ("ps-3", TaskKey(Role.PS, 3)),
        ("tensorboard-0", TaskKey(Role.TENSORBOARD, 0)),
        ("chief", TaskKey(Role.CHIEF, 0)),  # a bare role: its task 0
    ],
)
def test_a_task_is_named_role_dash_index_or_role_colon_index(text: str, key: TaskKey) -> None:
    assert TaskKey.parse(text) == key
    assert TaskKey.parse(key.name) == key and key.name == f"{key.role.value}-{key.index}"


@pytest.mark.parametrize(
    "text",
    [
        "",
        "worker-",
        "-1",
        "Worker-0",
        "wrker-1",
        "worker-x",
        "worker--1",
        "worker-+1",
        "worker- 1",
        "worker-0:1",
        "worker:-1",
        "worker-\u0661",  # a digit, but not an ASCII one
    ],
)
def test_what_is_not_a_task_name_is_refused_with_the_form(text: str) -> None:
    with pytest.raises(ValueError, match=r"a task is ROLE-INDEX, e\.g\. worker-1 \(or worker:1\)"):
        TaskKey.parse(text)


@pytest.mark.slow
@pytest.mark.e2e
def test_status_right_after_a_plain_apply_shows_what_runs(project: Path) -> None:
    (project / "specs" / "a.yaml").write_text(spec("fresh", {"ps": (1, "serve"), "worker": (2, "serve")}))
    applied = cli("apply", "specs", cwd=project)  # no --wait: returns once the tasks run
    assert applied.returncode == 0, applied.stderr
    document = status_of(project, "fresh")
    assert (document["phase"], [t["state"] for t in document["tasks"]]) == ("Running", ["running"] * 3)
    assert document["replicas"] == {
        "ps": {"desired": 1, "running": 1, "succeeded": 0, "failed": 0},
        "worker": {"desired": 2, "running": 2, "succeeded": 0, "failed": 0},
    }
    shown = cli("status", cwd=project).stdout.splitlines()
    assert shown[1].split()[:3] == ["fresh", "Running", "3/3"], shown


def _record(reason: Reason, phase: Phase = Phase.PENDING) -> JobRecord:
    return JobRecord("a", "uid", {}, "hash", phase=phase, reason=reason)


def test_apply_waits_a_while_for_starting_tasks_then_leaves_them_starting() -> None:
    starting = {"a": _record(Reason.TASKS_STARTING)}
    assert not _finished(starting, wait=False, patient=True)  # the status would say "starting"
    assert _finished(starting, wait=False, patient=False)  # an image being fetched: not for ever
    for reason in (Reason.ALL_TASKS_RUNNING, Reason.WAITING_FOR_RESOURCES, Reason.BACKING_OFF):
        assert _finished({"a": _record(reason, Phase.RUNNING)}, wait=False, patient=True), reason
    assert not _finished({"a": _record(Reason.ALL_TASKS_RUNNING, Phase.RUNNING)}, wait=True)
