"""restartPolicy ExitCode and a Mesos task whose end the master's reconciliation answer told
first (it names no exit code; the agent's own terminal update with the code comes later, re-sent
until acknowledged): the decision waits, bounded, for the code. Tables in virtual time: the
Mesos side says until when the code is due (``taskstate.exit_code_due``, ``EXIT_CODE_WAIT_S``
from the answer), the lifecycle holds the decision until the code comes or that time passes,
then decides as before and says so."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest
import yaml

from tests.conftest import cli, job_yaml
from tests.mesos_fixtures import PY, emulated_project, eventually, running_on_agents, start_emulator
from tests.test_lifecycle import BACKOFF, MWMS, T0, record_for, task
from tests.test_mesos_backend_units import entry
from tfdeclare.backends.mesos.journal import TaskEntry
from tfdeclare.backends.mesos.taskstate import EXIT_CODE_WAIT_S, apply_status, observed_task
from tfdeclare.core.enums import Phase, Reason, TaskState
from tfdeclare.core.run.lifecycle import step
from tfdeclare.core.run.record import JobRecord
from tfdeclare.core.run.tasks import ObservedTask

R, F = TaskState.RUNNING, TaskState.FAILED
ANSWERED = T0 + 10.0  # when the master's reconciliation answer told the end
DUE = ANSWERED + EXIT_CODE_WAIT_S


# ---- the Mesos side: until when the exit code is due ----------------------------------------------


def running() -> TaskEntry:
    made = entry()
    assert apply_status(made, "TASK_RUNNING", reason=None, source=None, message=None, timestamp=None, now=T0)
    return made


@pytest.mark.parametrize(
    ("state", "reason", "message", "kill_requested", "due"),
    [
        # the master's answer: no exit code, so it is due from the agent
        ("TASK_FAILED", "REASON_RECONCILIATION", "Reconciliation: Latest task state", False, DUE),
        ("TASK_KILLED", "REASON_RECONCILIATION", "Reconciliation: Latest task state", False, DUE),
        # the agent's own update: the code is there
        ("TASK_FAILED", "REASON_COMMAND_EXECUTOR_FAILED", "Command exited with status 3", False, None),
        # no exit code, but not from a reconciliation: none will come
        ("TASK_FAILED", "REASON_CONTAINER_LAUNCH_FAILED", "no such image", False, None),
        # ended well, or stopped by us: no decision waits on a code
        ("TASK_FINISHED", "REASON_RECONCILIATION", "Reconciliation: Latest task state", False, None),
        ("TASK_KILLED", "REASON_RECONCILIATION", "Reconciliation: Latest task state", True, None),
        # gone with its agent: a platform event, not an exit
        ("TASK_GONE", "REASON_RECONCILIATION", "Reconciliation: Latest task state", False, None),
    ],
)
def test_the_exit_code_is_due_only_after_a_reconciliation_answer(
    state: str, reason: str, message: str, kill_requested: bool, due: float | None
) -> None:
    made = running()
    made.kill_requested = kill_requested
    assert apply_status(
        made, state, reason=reason, source="SOURCE_MASTER", message=message, timestamp=None, now=ANSWERED
    )
    assert observed_task(made, ANSWERED + 1, 300.0).exit_code_due == due


def test_the_agents_update_brings_the_code_and_ends_the_wait() -> None:
    made = running()
    apply_status(
        made, "TASK_FAILED", reason="REASON_RECONCILIATION", source="SOURCE_MASTER",
        message="Reconciliation: Latest task state", timestamp=None, now=ANSWERED,
    )  # fmt: skip
    assert apply_status(
        made, "TASK_FAILED", reason="REASON_COMMAND_EXECUTOR_FAILED", source="SOURCE_EXECUTOR",
        message="Command exited with status 3", timestamp=ANSWERED - 5, now=ANSWERED + 4,
    )  # fmt: skip
    seen = observed_task(made, ANSWERED + 4, 300.0)
    assert (seen.exit_code, seen.exit_code_due) == (3, None)


# ---- the lifecycle: ExitCode waits for a code that is due --------------------------------------------


def failed(record: JobRecord, code: int | None, due: float | None) -> ObservedTask:
    return replace(task(record, "worker-0", F, code), exit_code_due=due)


@pytest.mark.parametrize(
    ("policy", "code", "due", "now", "outcome"),
    [
        # ExitCode, the code still due: nothing decided yet, a look again when it is due
        ("ExitCode", None, DUE, ANSWERED, "held"),
        ("ExitCode", None, DUE, DUE - 0.001, "held"),
        # the agent's update came with a permanent code: Failed, not restarted once
        ("ExitCode", 3, None, ANSWERED + 2, Reason.PERMANENT_EXIT_CODE),
        ("ExitCode", 127, None, ANSWERED + 2, Reason.PERMANENT_EXIT_CODE),
        # ... or a retryable one: restarted
        ("ExitCode", 42, None, ANSWERED + 2, "restart"),
        ("ExitCode", 137, None, ANSWERED + 2, "restart"),
        # the bound passed with no code: decided as before (retryable), and said so
        ("ExitCode", None, DUE, DUE, "restart, no code"),
        ("ExitCode", None, DUE, DUE + 60, "restart, no code"),
        # no code expected (not a reconciliation answer): decided at once, as before
        ("ExitCode", None, None, ANSWERED, "restart"),
        # other policies do not decide by the code: no wait
        ("OnFailure", None, DUE, ANSWERED, "restart"),
        ("Never", None, DUE, ANSWERED, Reason.TASK_FAILED),
    ],
)
def test_exit_code_policy_waits_for_a_code_that_is_due(
    policy: str, code: int | None, due: float | None, now: float, outcome: object
) -> None:
    record = record_for(MWMS, f"  restartPolicy: {policy}\n", phase=Phase.RUNNING)
    tasks = [failed(record, code, due), task(record, "worker-1", R)]
    result = step(record, tasks, now, BACKOFF)
    if outcome == "held":
        assert result.record.phase is Phase.RUNNING and result.record.restarts == 0
        assert (result.stop, result.launch) == ((), ())
        assert result.wake_at == DUE
        assert "waiting for its exit code" in result.record.message and "worker-0" in result.record.message
        again = step(result.record, tasks, now + 0.0005, BACKOFF)
        assert again.record is result.record, "the same look again: nothing new to write"
    elif outcome in ("restart", "restart, no code"):
        assert result.record.phase is Phase.RESTARTING and result.record.restarts == 1
        assert result.stop == ("job.u1.worker-1.1",)
        said = "its exit code did not come in time: taken as retryable" in result.record.message
        assert said == (outcome == "restart, no code"), result.record.message
    else:
        assert result.record.phase is Phase.FAILED and result.record.reason == outcome
        assert result.record.restarts == 0


def test_a_permanent_failure_elsewhere_is_not_held_for_a_code() -> None:
    record = record_for(MWMS, "  restartPolicy: ExitCode\n", phase=Phase.RUNNING)
    tasks = [failed(record, None, DUE), task(record, "worker-1", F, 2)]
    result = step(record, tasks, ANSWERED, BACKOFF)
    assert result.record.phase is Phase.FAILED and result.record.reason is Reason.PERMANENT_EXIT_CODE


def test_a_held_decision_is_taken_when_the_code_comes() -> None:
    """Virtual time through the whole wait: held, then the code arrives: Failed, no restart."""
    record = record_for(MWMS, "  restartPolicy: ExitCode\n", phase=Phase.RUNNING)
    first = step(record, [failed(record, None, DUE), task(record, "worker-1", R)], ANSWERED, BACKOFF)
    assert first.wake_at == DUE and first.record.restarts == 0
    told = [failed(record, 3, None), task(record, "worker-1", R)]
    after = step(first.record, told, ANSWERED + 3, BACKOFF)
    assert after.record.phase is Phase.FAILED and after.record.reason is Reason.PERMANENT_EXIT_CODE
    assert "worker-0 exited 3" in after.record.message and after.record.restarts == 0


# ---- end to end: the emulator's master answers the reconciliation first ---------------------------


@pytest.mark.slow  # a real task process behind the emulator, the real CLI
def test_a_permanent_exit_told_after_the_reconciliation_answer_fails_the_job_without_a_restart(
    tmp_path: Path,
) -> None:
    """The task exits 3 while no controller runs. The next ``apply`` subscribes again; the
    master's reconciliation answer says TASK_FAILED (no exit code) at once, while the agent's
    own update, with the code, is re-sent until it gets through (its first three deliveries
    are dropped). ExitCode waits for it: the job Failed (PermanentExitCode) and never restarted."""
    # the agent re-sends an unacknowledged update at most 0.4 s apart (upstream: 10 s growing)
    emulator = start_emulator(tmp_path, update_retry_max=0.4)
    with emulated_project(tmp_path, emulator) as (root, _):
        go = root / "go"
        script = root / "exit3.py"
        script.write_text(
            f"import os, time\nwhile not os.path.exists({str(go)!r}): time.sleep(0.05)\nexit(3)\n"
        )
        spec = job_yaml("exitwait", command=f"[{PY}, {script}]", extra="  restartPolicy: ExitCode\n")
        (root / "specs" / "exitwait.yaml").write_text(spec)
        assert cli("apply", "specs", cwd=root).returncode == 0
        eventually(lambda: len(running_on_agents(emulator)) == 1, timeout=30)
        [task_id] = running_on_agents(emulator)
        # the agent's update reaches the next framework only from its 4th delivery once it
        # subscribed (about 1 s later): the master's reconciliation answer comes before it
        emulator.drop_updates(3, task_id=task_id, state="TASK_FAILED")
        go.touch()
        eventually(lambda: emulator.tasks()[task_id]["agent_state"] == "TASK_FAILED", timeout=30)

        result = cli("apply", "specs", "--wait", "--timeout", "60", cwd=root)
        assert result.returncode == 1 and "failed: exitwait" in result.stderr, result.stdout + result.stderr
        assert "waiting for its exit code" in result.stdout, result.stdout  # held, then decided
        document = yaml.safe_load((root / "status" / "exitwait.yaml").read_text())
        reasons = {c["type"]: c["reason"] for c in document["conditions"]}
        assert (document["phase"], reasons["Ready"]) == ("Failed", "PermanentExitCode"), document
        assert document["restarts"] == 0 and "exited 3" in document["message"]
        launched = [
            info["task_id"]["value"]
            for call in emulator.calls("ACCEPT")
            for operation in call["call"]["accept"].get("operations", [])
            for info in operation.get("launch", {}).get("task_infos", [])
        ]
        assert launched == [task_id], "never relaunched"
        assert len(emulator.dropped_updates()) == 3, "the agent's update was held back"
