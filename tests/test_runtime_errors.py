"""Typed runtime errors (issue 30): the closed vocabulary (``core.errors``), every raise of a
``BackendError`` naming a code, the codes in a job's record and status file (``lastError``),
terminal ones failing their job at once, and the real CLI showing the code in
``status -o json``."""

from __future__ import annotations

import ast
import dataclasses
import json
import re
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import jsonschema
import pytest

from tests.conftest import cli
from tests.controller_world import World, daemon_running, job_text
from tests.fake_backend import FakeBackend
from tests.test_problems import Endpoints, ask
from tfdeclare.backends.base import BackendError
from tfdeclare.backends.local.drivers import seen_from_end
from tfdeclare.core.enums import Phase, Reason, Role, TaskState
from tfdeclare.core.errors import _ABOUT, ErrorCode, RuntimeProblem
from tfdeclare.core.run import status
from tfdeclare.core.run.record import JobRecord
from tfdeclare.core.run.tasks import GangRequest, ObservedTask, Placement, TaskLaunch, Unplaced
from tfdeclare.daemon.httpguard import AccessPolicy
from tfdeclare.daemon.server import DaemonServer
from tfdeclare.daemon.service import DaemonOptions
from tfdeclare.daemon.sources import FolderSource

ROOT = Path(__file__).resolve().parent.parent
STATUS_SCHEMA = json.loads((ROOT / "schemas" / "status.schema.json").read_text())


# ---- the vocabulary -------------------------------------------------------------------------


@pytest.mark.parametrize("code", list(ErrorCode))
def test_every_code_has_a_summary_and_says_whether_it_is_terminal(code: ErrorCode) -> None:
    assert code in _ABOUT
    assert code.summary and code.summary == code.summary.strip() and not code.summary.endswith(".")
    assert isinstance(code.terminal, bool)
    assert re.fullmatch(r"[A-Z][A-Za-z]+", code.value), "CamelCase, as reasons are"
    assert not code.fails_the_job or code.terminal, "only a terminal error fails its job"


def test_the_table_and_the_status_schema_name_the_same_codes() -> None:
    assert set(_ABOUT) == set(ErrorCode)
    assert len({c.value for c in ErrorCode}) == len(ErrorCode)
    schema_codes = STATUS_SCHEMA["properties"]["lastError"]["properties"]["code"]["enum"]
    assert schema_codes == [c.value for c in ErrorCode]


@pytest.mark.parametrize(
    ("code", "terminal"),
    [
        (ErrorCode.CREDENTIALS_REFUSED, True),  # a 401/403 never changes by asking again
        (ErrorCode.FRAMEWORK_REFUSED, True),
        (ErrorCode.IMAGE_MISSING, False),  # imagePullPolicy Never: a `docker load` brings it
        (ErrorCode.SECRET_UNAVAILABLE, True),
        (ErrorCode.MASTER_UNREACHABLE, False),
        (ErrorCode.ENGINE_UNREACHABLE, False),
        (ErrorCode.IMAGE_PULL_FAILED, False),
        (ErrorCode.STATE_WRITE_FAILED, False),  # a full disk: the next pass retries
        (ErrorCode.STATUS_WRITE_FAILED, False),
        (ErrorCode.PORTS_UNAVAILABLE, False),
        (ErrorCode.BACKEND_FAILED, False),  # what a plugin raises without a code
    ],
)
def test_terminal_or_retryable(code: ErrorCode, terminal: bool) -> None:
    assert code.terminal is terminal


def test_a_problem_prints_as_the_message_did_before_codes() -> None:
    problem = RuntimeProblem(ErrorCode.STOP_FAILED, "cannot stop a.1.worker-0: gone", "a")
    assert str(problem) == "a: cannot stop a.1.worker-0: gone"
    assert str(RuntimeProblem(ErrorCode.STATUS_WRITE_FAILED, "cannot write x")) == "cannot write x"
    assert problem.to_json() == {
        "code": "StopFailed",
        "summary": ErrorCode.STOP_FAILED.summary,
        "detail": "cannot stop a.1.worker-0: gone",
        "terminal": False,
        "job": "a",
    }
    assert RuntimeProblem.from_json(problem.to_json()) == problem
    unknown = RuntimeProblem.from_json({"code": "FromALaterVersion", "detail": "d"})
    assert unknown == RuntimeProblem(ErrorCode.BACKEND_FAILED, "d")


def test_a_backend_error_keeps_its_message_and_carries_its_code() -> None:
    err = BackendError("the Mesos master refused the framework", code=ErrorCode.CREDENTIALS_REFUSED)
    assert str(err) == "the Mesos master refused the framework" and err.terminal
    assert str(err.problem("j")) == "j: the Mesos master refused the framework"
    assert str(err.problem(prefix="mesos: ")) == "mesos: the Mesos master refused the framework"
    assert BackendError("a plugin's").code is ErrorCode.BACKEND_FAILED  # the default, for plugins
    same = [BackendError(m, code=ErrorCode.STOP_FAILED) for m in ("x", "y")]
    assert (
        str(BackendError.joined(same, ErrorCode.TEND_FAILED)),
        BackendError.joined(same, ErrorCode.TEND_FAILED).code,
    ) == (
        "x; y",
        ErrorCode.STOP_FAILED,
    )
    mixed = [*same, BackendError("z", code=ErrorCode.ENGINE_UNREACHABLE)]
    assert BackendError.joined(mixed, ErrorCode.TEND_FAILED).code is ErrorCode.TEND_FAILED


def _calls_without_code(path: Path) -> list[int]:
    tree = ast.parse(path.read_text(), str(path))
    lines = []
    for node in ast.walk(tree):
        if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)):
            continue
        if node.func.id == "BackendError" and not any(k.arg == "code" for k in node.keywords):
            lines.append(node.lineno)
    return lines


def test_every_backend_error_raised_in_the_package_names_a_code() -> None:
    files = sorted((ROOT / "tfdeclare").rglob("*.py"))
    missing = {str(p.relative_to(ROOT)): n for p in files if (n := _calls_without_code(p))}
    assert missing == {}
    counted = sum(p.read_text().count("BackendError(") for p in files)
    assert counted >= 40, "the scan sees the raise sites"


def test_the_scan_finds_a_raise_without_a_code(tmp_path: Path) -> None:
    sample = tmp_path / "m.py"
    sample.write_text(
        "def f():\n    raise BackendError('x')\n\ndef g():\n    raise BackendError('y', code=C)\n"
    )
    assert _calls_without_code(sample) == [2]


# ---- in a record and a status file ----------------------------------------------------------


def test_last_error_round_trips_in_the_record_and_validates_in_the_status_file() -> None:
    record = JobRecord(
        name="j",
        uid="u",
        canonical={"spec": {"replicas": {"worker": {"count": 1}}, "command": ["x"]}},
        spec_hash="h",
    )
    assert "lastError" not in record.to_json()  # absent when none: old records read the same
    problem = RuntimeProblem(ErrorCode.CREDENTIALS_REFUSED, "refused (401)", "j")
    marked = record.evolve(last_error=problem, last_error_at=1_700_000_000.0)
    again = JobRecord.from_json(json.loads(json.dumps(marked.to_json())))
    assert (again.last_error, again.last_error_at) == (problem, 1_700_000_000.0)
    entry = status.last_error(marked)
    assert entry == {
        "code": "CredentialsRefused",
        "summary": ErrorCode.CREDENTIALS_REFUSED.summary,
        "detail": "refused (401)",
        "terminal": True,
        "time": "2023-11-14T22:13:20Z",
    }
    assert status.last_error(record) is None
    jsonschema.validate({"lastError": entry}, {**STATUS_SCHEMA, "required": []})
    jsonschema.validate({"lastError": None}, {**STATUS_SCHEMA, "required": []})


# ---- the controller: a job's error, kept, cleared, terminal -----------------------------------


class _Refusing(FakeBackend):
    """The fake backend, refusing launches with ``refuse`` while it is set."""

    refuse: BackendError | None = None

    def launch(self, placement: Placement, tasks: Sequence[TaskLaunch]) -> None:
        if self.refuse is not None:
            raise self.refuse
        super().launch(placement, tasks)


def _world(tmp_path: Path) -> tuple[World, _Refusing]:
    world = World(tmp_path)
    refusing = _Refusing(world.backend.cluster, world.clock)
    world.backend = refusing
    world.controller.backend = refusing
    return world, refusing


def test_a_retryable_error_is_kept_with_its_code_then_cleared(tmp_path: Path) -> None:
    world, backend = _world(tmp_path)
    world.write("a", job_text("a"))
    world.apply()
    backend.refuse = BackendError("cannot reserve a port: disk full", code=ErrorCode.PORTS_UNAVAILABLE)
    first = world.reconcile()
    assert [e.code for e in first.errors] == [ErrorCode.PORTS_UNAVAILABLE]
    assert [str(e) for e in first.errors] == ["a: cannot reserve a port: disk full"]
    shown = world.status("a")
    assert shown is not None and shown["lastError"]["code"] == "PortsUnavailable"
    assert shown["lastError"]["terminal"] is False and shown["phase"] == "Pending"
    met_at = shown["lastError"]["time"]
    world.clock.advance(5)
    world.reconcile()  # met again: the time it was first met stays
    again = world.status("a")
    assert again is not None and again["lastError"]["time"] == met_at
    backend.refuse = None
    world.clock.advance(5)
    world.reconcile()
    cleared = world.status("a")
    assert cleared is not None and cleared["lastError"] is None
    assert world.record("a").last_error is None and len(world.tasks("a")) == 2


def test_a_terminal_error_of_the_job_fails_it_at_once_and_is_not_retried(tmp_path: Path) -> None:
    world, backend = _world(tmp_path)
    world.write("a", job_text("a"))
    world.apply()
    backend.refuse = BackendError("a: N: the variable TFD_X is not set", code=ErrorCode.SECRET_UNAVAILABLE)
    result = world.reconcile()
    assert [(e.code, e.terminal, e.job) for e in result.errors] == [(ErrorCode.SECRET_UNAVAILABLE, True, "a")]
    record = world.record("a")
    assert (record.phase, record.reason) == (Phase.FAILED, Reason.TERMINAL_ERROR)
    assert "SecretUnavailable: not retried" in record.message
    shown = world.status("a")
    assert (
        shown is not None and shown["phase"] == "Failed" and shown["lastError"]["code"] == "SecretUnavailable"
    )
    assert any(c["reason"] == "TerminalError" for c in shown["conditions"])
    jsonschema.validate(shown, STATUS_SCHEMA)
    world.clock.advance(60)
    later = world.reconcile()
    assert later.errors == [] and world.record("a").phase is Phase.FAILED, "never launched again"


def test_a_terminal_error_of_the_backend_leaves_the_job_as_it_was(tmp_path: Path) -> None:
    """Refused credentials are the operator's to fix: reported with their code, not retried by
    the backend, but the job is not failed for them."""
    world, backend = _world(tmp_path)
    world.write("a", job_text("a"))
    world.apply()
    backend.refuse = BackendError("refused the framework (401)", code=ErrorCode.CREDENTIALS_REFUSED)
    result = world.reconcile()
    assert [e.code for e in result.errors] == [ErrorCode.CREDENTIALS_REFUSED] and result.errors[0].terminal
    shown = world.status("a")
    assert shown is not None and shown["phase"] == "Pending"
    assert (shown["lastError"]["code"], shown["lastError"]["terminal"]) == ("CredentialsRefused", True)


class _Unobservable(FakeBackend):
    """The fake backend, whose ``observe`` fails with ``down`` while it is set (a master that
    cannot be reached at the first subscription, a framework another scheduler took over)."""

    down: BackendError | None = None

    def observe(self) -> Sequence[ObservedTask]:
        if self.down is not None:
            raise self.down
        return super().observe()


def test_a_backend_that_cannot_be_observed_gives_each_of_its_jobs_the_error(tmp_path: Path) -> None:
    """The pass is not aborted: each job of that backend has the error as its lastError (and
    keeps its phase: its tasks may run on, unseen), the pass says which backend, and once the
    backend answers again the error clears and nothing was launched twice."""
    world = World(tmp_path)
    backend = _Unobservable(world.backend.cluster, world.clock)
    world.backend = world.controller.backend = backend
    for name in ("a", "b"):
        world.write(name, job_text(name))
    world.apply()
    world.reconcile()
    world.reconcile()
    started = list(backend.cluster.launched)
    assert world.record("a").phase is Phase.RUNNING and len(started) == 4
    backend.down = BackendError("another scheduler took over", code=ErrorCode.FRAMEWORK_REFUSED)
    world.clock.advance(5)
    result = world.reconcile()  # no raise
    assert (
        set(result.unobserved) == {"local"} and result.unobserved["local"].code is ErrorCode.FRAMEWORK_REFUSED
    )
    assert sorted((e.code, e.job) for e in result.errors) == [
        (ErrorCode.FRAMEWORK_REFUSED, "a"),
        (ErrorCode.FRAMEWORK_REFUSED, "b"),
    ]
    for name in ("a", "b"):
        shown = world.status(name)
        assert shown is not None and shown["phase"] == "Running"
        assert (shown["lastError"]["code"], shown["lastError"]["terminal"]) == ("FrameworkRefused", True)
        jsonschema.validate(shown, STATUS_SCHEMA)
    backend.down = None
    world.clock.advance(5)
    healed = world.reconcile()
    assert healed.errors == [] and healed.unobserved == {}
    assert world.status("a")["lastError"] is None  # type: ignore[index]
    assert backend.cluster.launched == started, "nothing launched twice"


def test_a_write_failure_names_the_file_kind(tmp_path: Path) -> None:
    world, _ = _world(tmp_path)
    world.write("a", job_text("a"))
    world.apply()
    world.reconcile()
    status_file = world.status_dir / "a.yaml"
    status_file.unlink()
    status_file.mkdir()  # the status file cannot be replaced by a rename
    (status_file / "x").write_text("")
    world.clock.advance(1)
    world.backend.finish(next(iter(world.tasks("a").values())).task_id, 1)  # something to write
    result = world.reconcile()
    codes = {e.code for e in result.errors}
    assert codes == {ErrorCode.STATUS_WRITE_FAILED}, result.errors
    assert all(str(e).startswith("a: cannot write ") for e in result.errors)


def _never_ran(world: World, task_id: str, code: ErrorCode, message: str) -> None:
    """The fake task ends as the local backend's launcher ends one whose image it cannot have."""
    cluster = world.backend.cluster
    with cluster.lock:
        task = cluster.tasks[task_id]
        task.observed = dataclasses.replace(
            task.observed, state=TaskState.FAILED, exit_code=None, message=message, error=code
        )


class _Placing(FakeBackend):
    """The fake backend, whose placement says why the gang cannot be launched now while
    ``cannot`` is set (the local backend's look at the Docker engine and its images)."""

    cannot: BackendError | None = None

    def place(self, request: GangRequest) -> Placement | Unplaced:
        if self.cannot is not None:
            raise self.cannot
        return super().place(request)


@pytest.mark.parametrize(
    ("code", "said"),
    [
        (ErrorCode.IMAGE_MISSING, "the Docker engine has no image x:1, and imagePullPolicy is Never"),
        (ErrorCode.ENGINE_UNREACHABLE, "no Docker engine answers at unix:///run/x.sock"),
    ],
)
def test_what_the_machine_lacks_at_launch_keeps_the_job_waiting_until_it_is_there(
    tmp_path: Path, code: ErrorCode, said: str
) -> None:
    """Not a verdict on the job (the file is not looked at again for it) nor its failure: the
    job waits, Pending, with the code as its lastError, asked again every pass, and is
    launched by the first pass that finds the image there (a `docker load`), the engine up."""
    world = World(tmp_path)
    backend = _Placing(world.backend.cluster, world.clock)
    world.backend = backend
    world.controller.backend = backend
    backend.cannot = BackendError(said, code=code)
    world.write("a", job_text("a", extra="restartPolicy: Never"))
    world.apply()
    for _ in range(3):
        result = world.reconcile()
        assert [(e.code, e.job) for e in result.errors] == [(code, "a")]
        world.clock.advance(60)
    record = world.record("a")
    assert (record.phase, record.restarts) == (Phase.PENDING, 0)
    shown = world.status("a")
    assert shown is not None and shown["phase"] == "Pending"
    assert shown["lastError"]["code"] == code.value and not shown["lastError"]["terminal"]
    assert said in shown["lastError"]["detail"]
    assert world.backend.cluster.launched == []
    backend.cannot = None
    world.settle()
    assert world.record("a").phase is Phase.RUNNING and world.status("a")["lastError"] is None  # type: ignore[index]


@pytest.mark.parametrize(
    ("code", "said"),
    [
        (ErrorCode.IMAGE_PULL_FAILED, "cannot pull image x:1: timeout"),
        # removed between the placement's look and its launcher's: the relaunch waits for it
        (ErrorCode.IMAGE_MISSING, "the Docker engine has no image x:1, and imagePullPolicy is Never"),
    ],
)
def test_a_task_whose_image_could_not_be_had_is_the_restart_policys_to_handle(
    tmp_path: Path, code: ErrorCode, said: str
) -> None:
    world, _ = _world(tmp_path)
    world.write("a", job_text("a", extra="restartPolicy: OnFailure\nbackoffLimit: 5"))
    world.apply()
    world.reconcile()
    worker = world.task("a", Role.WORKER)
    _never_ran(world, worker.task_id, code, said)
    result = world.reconcile()
    assert result.errors == [] and world.record("a").phase is not Phase.FAILED


@pytest.mark.parametrize(
    ("error", "seen"),
    [
        ("ImageMissing", ErrorCode.IMAGE_MISSING),
        ("ImagePullFailed", ErrorCode.IMAGE_PULL_FAILED),
        (None, None),
        ("Nonsense", None),
    ],
)
def test_the_local_backend_reads_the_error_its_launcher_recorded(
    error: str | None, seen: ErrorCode | None
) -> None:
    end = {
        "exitCode": None,
        "finishedAt": 1.0,
        "stopped": False,
        "message": "m",
        **({"error": error} if error else {}),
    }
    assert seen_from_end(end).error is seen


# ---- the real CLI and local backend ----------------------------------------------------------


def test_a_terminal_error_shows_with_its_code_in_status_json(tmp_path: Path) -> None:
    """A secret that is not there: apply stops at once (not after its timeout), the job is
    Failed, and ``status -o json`` gives the code, its summary and that it is terminal."""
    (tmp_path / "secrets").mkdir()
    (tmp_path / "tfdeclare.yaml").write_text("secrets: {dir: secrets}\n")
    (tmp_path / "specs").mkdir()
    (tmp_path / "specs" / "s.yaml").write_text(
        "apiVersion: tfdeclare/v1\nkind: TFJob\nmetadata: {name: s}\nspec:\n  command: [sleep, '60']\n"
        "  env:\n    N: {secretRef: {name: db, key: password}}\n"
        "  replicas:\n    worker: {count: 1, resources: {cpus: 0.1, mem: 64}}\n"
    )
    started = time.monotonic()
    applied = cli("apply", "specs", "--timeout", "120", "-o", "json", cwd=tmp_path)
    took = time.monotonic() - started
    assert applied.returncode != 0 and "N: cannot read the file" in applied.stderr, applied.stderr
    assert "some terminal" in applied.stderr and took < 60, (
        took,
        applied.stderr,
    )  # not retried until the timeout
    outcome = json.loads(applied.stdout)
    assert [(p["code"], p["terminal"], p["job"]) for p in outcome["problems"]] == [
        ("SecretUnavailable", True, "s")
    ]
    assert outcome["errors"] == [f"s: {outcome['problems'][0]['detail']}"], "the messages as before"
    listed = cli("status", "-o", "json", cwd=tmp_path)
    assert listed.returncode == 0, listed.stderr
    [document] = json.loads(listed.stdout)
    assert document["phase"] == "Failed"
    error = document["lastError"]
    assert (error["code"], error["terminal"]) == ("SecretUnavailable", True)
    assert error["summary"] == ErrorCode.SECRET_UNAVAILABLE.summary and "N: cannot read" in error["detail"]
    assert error["time"] is not None
    jsonschema.validate(document, STATUS_SCHEMA)
    detail = cli("status", "s", cwd=tmp_path)
    assert "  last error: SecretUnavailable (terminal, not retried, since " in detail.stdout, detail.stdout
    cli("delete", "--all", cwd=tmp_path)


# ---- the daemon --------------------------------------------------------------------------------


def test_the_daemon_shows_the_pass_errors_with_their_codes(tmp_path: Path) -> None:
    """The real daemon loop: /healthz names the last pass's errors with their codes, /jobs
    gives the job's lastError, and both clear once a pass gets through."""
    world, backend = _world(tmp_path)
    backend.refuse = BackendError("the master does not answer", code=ErrorCode.MASTER_UNREACHABLE)
    world.write("a", job_text("a"))
    source = FolderSource(world.specs, [world.root / "state", world.status_dir])
    with daemon_running(world, source, DaemonOptions(interval_s=3600, debounce_s=0.0)) as daemon:
        daemon.wait_shown(lambda shown: bool(shown.pass_errors))
        health = daemon.health()[1]
        assert health["passErrors"] == [
            {
                "code": "MasterUnreachable",
                "summary": ErrorCode.MASTER_UNREACHABLE.summary,
                "detail": "the master does not answer",
                "terminal": False,
                "job": "a",
            }
        ]
        [document] = daemon.jobs()
        assert document["lastError"]["code"] == "MasterUnreachable"
        backend.refuse = None
        daemon.request_pass()
        daemon.wait_shown(lambda shown: not shown.pass_errors)
        assert daemon.health()[1]["passErrors"] == []
        assert daemon.jobs()[0]["lastError"] is None


class _ErringEndpoints(Endpoints):
    """The daemon's answers with one pass error standing."""

    def health(self) -> tuple[bool, dict[str, Any]]:
        healthy, detail = super().health()
        error = RuntimeProblem(ErrorCode.STATE_WRITE_FAILED, "cannot write /srv/state/jobs/a.json", "a")
        return healthy, {**detail, "passErrors": [error.to_json()]}


def test_healthz_gives_a_probe_without_the_token_the_codes_only() -> None:
    token = "a-token-of-sixteen-or-more"
    server = DaemonServer(
        "127.0.0.1", 0, _ErringEndpoints(), AccessPolicy(frozenset(), token, token_for_reads=True)
    )  # type: ignore[arg-type]
    server.start()
    try:
        code, open_health = ask(server, "/healthz")
        assert code == 200 and open_health["passErrors"] == [{"code": "StateWriteFailed", "terminal": False}]
        assert "/srv/state" not in json.dumps(open_health)
        full = ask(server, "/healthz", token)[1]["passErrors"]
        assert [(e["code"], e["job"], e["detail"]) for e in full] == [
            ("StateWriteFailed", "a", "cannot write /srv/state/jobs/a.json")
        ]
    finally:
        server.close()


class _UnreachableEndpoints(Endpoints):
    """The daemon's answers while the Mesos master cannot be reached."""

    def health(self) -> tuple[bool, dict[str, Any]]:
        _, detail = super().health()
        error = RuntimeProblem(
            ErrorCode.MASTER_UNREACHABLE, "not subscribed to http://10.0.0.9:5050: HTTP 503"
        )
        return False, {
            **detail,
            "reasons": [f"MasterUnreachable: {error.detail}"],
            "passErrors": [error.to_json()],
        }


def test_healthz_without_the_token_names_an_unreachable_master_by_its_code_only() -> None:
    token = "a-token-of-sixteen-or-more"
    server = DaemonServer(
        "127.0.0.1", 0, _UnreachableEndpoints(), AccessPolicy(frozenset(), token, token_for_reads=True)
    )  # type: ignore[arg-type]
    server.start()
    try:
        code, open_health = ask(server, "/healthz")
        assert code == 503 and open_health["reasons"] == ["MasterUnreachable"]
        assert "10.0.0.9" not in json.dumps(open_health)
        full = ask(server, "/healthz", token)[1]
        assert full["reasons"] == ["MasterUnreachable: not subscribed to http://10.0.0.9:5050: HTTP 503"]
    finally:
        server.close()
