"""Fault scenarios on the Mesos backend, through the Controller (as the CLI wires it, from a
``tfdeclare.yaml`` naming the emulator) and through the real CLI: a controller that crashes
mid-launch, a master failover, an agent lost during a job, a partition that heals.

Tasks are ``tests/e2e_task.py`` processes run by the emulator's agents; the invariant checked
throughout is the one users care about: never two live copies of one slot of one attempt,
and nothing lost.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.conftest import REPO, cli
from tests.mesos_emulator import Emulator
from tests.mesos_fixtures import PY, config_yaml, eventually, running_on_agents, slots_running, start_emulator
from tests.waiting import wait_until
from tfdeclare.backends.base import Backend
from tfdeclare.cli.common import settings_from
from tfdeclare.cli.validate_command import load_desired
from tfdeclare.cli.wiring import make_backend, make_controller
from tfdeclare.controller import Controller
from tfdeclare.core.enums import Phase
from tfdeclare.core.plan.planner import PlanOptions, plan
from tfdeclare.core.run.record import JobRecord

pytestmark = pytest.mark.slow  # real task processes behind the emulator, CLI flows, fencing timers

TASK = str(REPO / "tests" / "e2e_task.py")


def spec(name: str, replicas: dict[str, tuple[int, str]], extra: str = "") -> str:
    lines = [
        "apiVersion: tfdeclare/v1",
        "kind: TFJob",
        f"metadata: {{name: {name}}}",
        "spec:",
        "  env: {OUT: out}",
        "  replicas:",
    ]
    for role, (count, mode) in replicas.items():
        lines.append(
            f"    {role}: {{count: {count}, resources: {{cpus: 0.5, mem: 64}}, command: [{PY}, {TASK}, '{mode}']}}"
        )
    return "\n".join(lines) + "\n" + extra


class Project:
    """A folder with specs and a tfdeclare.yaml for the mesos backend on the emulator."""

    def __init__(self, root: Path, emulator: Emulator, **mesos: object) -> None:
        self.root = root
        self.emulator = emulator
        (root / "specs" / "out").mkdir(parents=True)
        (root / "tfdeclare.yaml").write_text(config_yaml(emulator.url, **mesos))
        self.settings = settings_from(
            argparse.Namespace(
                config=str(root / "tfdeclare.yaml"), backend=None, state_dir=None, status_dir=None
            )
        )
        self.backends: list[Backend] = []

    def write(self, name: str, text: str) -> None:
        (self.root / "specs" / f"{name}.yaml").write_text(text)

    def controller(self) -> Controller:
        backend = make_backend(self.settings)
        self.backends.append(backend)
        controller = make_controller(self.settings, backend)
        controller.base_dir = self.root
        return controller

    def apply(self, controller: Controller) -> None:
        desired, _ = load_desired([str(self.root / "specs")], self.settings)
        assert not desired.has_errors, desired.diagnostics
        controller.apply(plan(desired, controller.store.observed(), PlanOptions()))

    def record(self, controller: Controller, name: str) -> JobRecord:
        record = controller.store.load(name)
        assert record is not None
        return record

    def passes(
        self,
        controller: Controller,
        until: Callable[[], bool],
        timeout: float = 30.0,
        each: Callable[[], None] | None = None,
    ) -> None:
        """Reconcile passes (as the daemon runs them) until ``until()``; ``each`` after every pass."""
        errors: list[object] = []

        def one_pass() -> bool:
            errors[:] = controller.reconcile().errors
            if each is not None:
                each()
            return until()

        def seen() -> str:
            records = {n: (r.phase, r.reason, r.message) for n, r in controller.store.records().items()}
            return f"the passes' goal; errors {errors}; records {records}"

        wait_until(one_pass, timeout, what=seen, interval=0.1)

    def outputs(self) -> dict[str, dict[str, Any]]:
        return {p.stem: json.loads(p.read_text()) for p in (self.root / "specs" / "out").glob("*.json")}

    def close(self) -> None:
        for backend in self.backends:
            backend.close()


@pytest.fixture
def emulator(tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[Emulator]:
    marker = request.node.get_closest_marker("emulator")
    options: dict[str, Any] = {"agents": 2, "agent_resources": "cpus:2;mem:2048;ports:[31000-31099]"}
    options.update(marker.kwargs if marker else {})
    made = start_emulator(tmp_path, **options)
    try:
        yield made
        assert made.check_invariants() == []
    finally:
        made.stop()


@pytest.fixture
def project(tmp_path: Path, emulator: Emulator, request: pytest.FixtureRequest) -> Iterator[Project]:
    marker = request.node.get_closest_marker("backend")
    made = Project(tmp_path / "project", emulator, **(marker.kwargs if marker else {}))
    try:
        yield made
    finally:
        made.close()


def at_most_one_per_slot(emulator: Emulator, job: str) -> Callable[[], None]:
    def check() -> None:
        for slot, ids in slots_running(emulator, job).items():
            attempts = [i.split(".")[3] for i in ids]
            assert len(ids) == len(set(attempts)), f"{slot} runs twice in one launch: {ids}"

    return check


def launched_ids(emulator: Emulator, job: str) -> list[str]:
    """Every task id the framework ever ACCEPTed for ``job``."""
    return [
        info["task_id"]["value"]
        for call in emulator.calls("ACCEPT")
        for operation in call["call"]["accept"]["operations"]
        for info in operation["launch"]["task_infos"]
        if info["task_id"]["value"].startswith(f"{job}.")
    ]


# ---- a controller that crashes in the middle of a launch --------------------------------------

# A controller process that applies the specs and reconciles once; its ACCEPT call announces
# itself on stdout and then hangs (before or after the request reached the master) until the
# test kills the process with SIGKILL.
CRASHING_CONTROLLER = """
import argparse, sys, threading
from tfdeclare.backends.mesos.client import SchedulerClient
from tfdeclare.cli.common import settings_from
from tfdeclare.cli.validate_command import load_desired
from tfdeclare.cli.wiring import make_backend, make_controller
from tfdeclare.core.plan.planner import PlanOptions, plan

when, root = sys.argv[1], sys.argv[2]
real_launch = SchedulerClient.launch_many

def hanging_launch(self, *args, **kwargs):
    if when == "after_accept":
        real_launch(self, *args, **kwargs)
    print(when, flush=True)
    threading.Event().wait()

SchedulerClient.launch_many = hanging_launch
settings = settings_from(argparse.Namespace(config=root + "/tfdeclare.yaml", backend=None, state_dir=None, status_dir=None))
controller = make_controller(settings, make_backend(settings))
desired, _ = load_desired([root + "/specs"], settings)
controller.apply(plan(desired, controller.store.observed(), PlanOptions()))
controller.reconcile()
threading.Event().wait()
"""


@pytest.mark.parametrize("when", ["before_accept", "after_accept"])
def test_controller_crash_mid_launch_loses_nothing_and_duplicates_nothing(
    project: Project, emulator: Emulator, when: str
) -> None:
    project.write("crashy", spec("crashy", {"ps": (1, "serve"), "worker": (2, "wait=3")}))
    first = subprocess.Popen(
        [sys.executable, "-c", CRASHING_CONTROLLER, when, str(project.root)],
        cwd=REPO,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert first.stdout is not None
        assert first.stdout.readline().strip() == when  # the tasks are journaled; the ACCEPT is in flight
    finally:
        first.kill()  # SIGKILL: nothing after this point runs
        first.wait()
    journal = (project.root / ".tfdeclare" / "mesos" / "tasks.log").read_text()
    assert journal.count('"job":"crashy"') == 3, "written ahead of the ACCEPT"
    assert len(launched_ids(emulator, "crashy")) == (3 if when == "after_accept" else 0)

    second = project.controller()
    project.passes(
        second,
        lambda: project.record(second, "crashy").phase is Phase.SUCCEEDED,
        each=at_most_one_per_slot(emulator, "crashy"),
    )
    record = project.record(second, "crashy")
    assert record.restarts == 0, record.message
    ids = launched_ids(emulator, "crashy")
    assert len(ids) == 3 and len(set(ids)) == 3, f"each slot launched exactly once: {ids}"
    assert sorted(i.split(".")[2] for i in ids) == ["ps-0", "worker-0", "worker-1"]
    assert sorted(project.outputs()) == ["ps-0.0", "worker-0.0", "worker-1.0"]
    eventually(lambda: not slots_running(emulator, "crashy"))  # the ps was stopped after success


def test_cli_killed_during_apply_then_run_again_adopts_the_tasks(
    project: Project, emulator: Emulator
) -> None:
    project.write("survivor", spec("survivor", {"ps": (1, "serve"), "worker": (2, "serve")}))
    first = subprocess.Popen(
        [sys.executable, "-m", "tfdeclare", "apply", "specs", "--wait"],
        cwd=project.root,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    eventually(lambda: len(project.outputs()) == 3, timeout=30)
    first.kill()
    first.wait()
    launched = launched_ids(emulator, "survivor")
    again = cli("apply", "specs", cwd=project.root)
    assert again.returncode == 0, again.stderr
    assert "No changes" in again.stdout
    assert launched_ids(emulator, "survivor") == launched, "nothing launched twice"
    document = yaml.safe_load((project.root / "status" / "survivor.yaml").read_text())
    assert document["phase"] == "Running"
    deleted = cli("delete", "survivor", cwd=project.root)
    assert deleted.returncode == 0, deleted.stderr
    assert not slots_running(emulator, "survivor")


# ---- the master fails over ------------------------------------------------------------------------


@pytest.mark.emulator(agents=1, agent_resources="cpus:4;mem:4096;ports:[31000-31099]")
def test_master_failover_keeps_the_job_and_reconciles(project: Project, emulator: Emulator) -> None:
    """[19] The client re-subscribes to the new master, reconciles (tasks on recovering agents
    get no answer until they re-register), and the job finishes as if nothing happened."""
    project.write("steady", spec("steady", {"worker": (2, "until=go")}))  # ends when told
    controller = project.controller()
    project.apply(controller)
    project.passes(controller, lambda: project.record(controller, "steady").phase is Phase.RUNNING)
    subscribes = len(emulator.calls("SUBSCRIBE"))
    emulator.restart_master(reregister_delay=2.0)
    (project.root / "specs" / "out" / "go").touch()  # the job runs through the failover, then ends
    project.passes(
        controller,
        lambda: project.record(controller, "steady").phase is Phase.SUCCEEDED,
        each=at_most_one_per_slot(emulator, "steady"),
    )
    assert len(emulator.calls("SUBSCRIBE")) > subscribes, "re-subscribed to the new master"
    explicit = [
        t["task_id"]["value"] for c in emulator.calls("RECONCILE") for t in c["call"]["reconcile"]["tasks"]
    ]
    # the agent re-registers 2 s after the new master starts: the first answers never come,
    # so reconciliation is sent again (with backoff) until every task has one
    assert all(explicit.count(t) >= 2 for t in launched_ids(emulator, "steady")), explicit
    record = project.record(controller, "steady")
    assert record.restarts == 0 and len(launched_ids(emulator, "steady")) == 2


# ---- an agent is lost -----------------------------------------------------------------------------


@pytest.mark.emulator(agent_reregister_timeout=1.0)
@pytest.mark.backend(fencingTimeoutSeconds=1.5)
def test_agent_loss_restarts_the_job_after_fencing(project: Project, emulator: Emulator) -> None:
    project.write(
        "fragile",
        spec("fragile", {"worker": (2, "serve")}, "  placement: {strategy: spread}\n"),
    )
    controller = project.controller()
    project.apply(controller)
    project.passes(controller, lambda: project.record(controller, "fragile").phase is Phase.RUNNING)
    where = running_on_agents(emulator)
    assert len(set(where.values())) == 2, "spread over both agents"
    lost_task = next(t for t in where if ".worker-1." in t)
    killed_at = time.monotonic()
    emulator.kill_agent(where[lost_task])
    survivor = next(a for a in emulator.agent_ids() if a != where[lost_task])
    relaunched_at: list[float] = []
    check = at_most_one_per_slot(emulator, "fragile")

    def each() -> None:
        check()
        if not relaunched_at and len(launched_ids(emulator, "fragile")) > 2:
            relaunched_at.append(time.monotonic())

    project.passes(
        controller,
        lambda: (
            project.record(controller, "fragile").phase is Phase.RUNNING
            and project.record(controller, "fragile").attempt == 1
        ),
        each=each,
        timeout=30,
    )
    # unreachable after agent_reregister_timeout (1 s), presumed gone 1.5 s later: only then
    # does the replacement start
    assert relaunched_at and relaunched_at[0] - killed_at >= 2.0
    now = running_on_agents(emulator)
    assert sorted(t.split(".")[2] for t in now) == ["worker-0", "worker-1"]
    assert set(now.values()) == {survivor}
    record = project.record(controller, "fragile")
    # a lost agent is the platform's doing (issue 34): its own budget, not backoffLimit's
    assert record.restarts == 0 and record.platform_restarts == 1
    assert [e.cause.value for e in record.platform_events] == ["AgentLost"]


# ---- a partition heals after the replacement started -----------------------------------------------


@pytest.mark.emulator(agent_ping_timeout=0.2, max_agent_ping_timeouts=2)
@pytest.mark.backend(fencingTimeoutSeconds=1.5)
def test_a_healed_partition_has_its_surplus_copy_killed(project: Project, emulator: Emulator) -> None:
    """[20] The task behind the partition was replaced after fencing; when the partition heals
    it comes back RUNNING, and it is killed: one copy of each slot remains."""
    project.write(
        "split",
        spec("split", {"worker": (2, "serve")}, "  placement: {strategy: spread}\n"),
    )
    controller = project.controller()
    project.apply(controller)
    project.passes(controller, lambda: project.record(controller, "split").phase is Phase.RUNNING)
    where = running_on_agents(emulator)
    behind = next(t for t in where if ".worker-1." in t)
    cut_off = where[behind]
    emulator.partition_agent(cut_off)
    project.passes(
        controller,
        lambda: (
            project.record(controller, "split").attempt == 1
            and project.record(controller, "split").phase is Phase.RUNNING
        ),
        timeout=30,
    )
    assert emulator.tasks()[behind]["agent_state"] == "TASK_RUNNING", "still runs behind the partition"
    emulator.heal_agent(cut_off)
    project.passes(
        controller,
        lambda: behind not in running_on_agents(emulator),
        timeout=30,
    )
    final = slots_running(emulator, "split")
    assert sorted(final) == ["worker-0", "worker-1"] and all(len(ids) == 1 for ids in final.values())
    assert all(ids[0].split(".")[3] != behind.split(".")[3] for ids in final.values())
    assert project.record(controller, "split").phase is Phase.RUNNING

    def surplus_ended() -> bool:
        observed = {t.task_id: t for t in controller.backend.observe()}
        return behind not in observed or observed[behind].state.ended

    eventually(surplus_ended)


# ---- the CLI ----------------------------------------------------------------------------------------


def test_cli_apply_wait_logs_status_delete_on_mesos(project: Project, emulator: Emulator) -> None:
    """The non-TF end-to-end run: ``apply --wait --backend mesos`` to Succeeded."""
    project.write("e2e", spec("e2e", {"ps": (1, "serve"), "worker": (2, "wait=3")}))
    result = cli("apply", "specs", "--wait", "--backend", "mesos", "--timeout", "60", cwd=project.root)
    assert result.returncode == 0, result.stdout + result.stderr
    document = yaml.safe_load((project.root / "status" / "e2e.yaml").read_text())
    assert document["phase"] == "Succeeded"
    outputs = project.outputs()
    cluster = outputs["worker-0.0"]["tfConfig"]["cluster"]
    assert cluster == outputs["worker-1.0"]["tfConfig"]["cluster"] == outputs["ps-0.0"]["tfConfig"]["cluster"]
    addresses = [a for role in cluster.values() for a in role]
    assert len(set(addresses)) == 3 and all(a.startswith("127.0.0.1:31") for a in addresses)
    assert {t["host"] for t in document["tasks"]} == {"127.0.0.1"}
    logs = cli("logs", "e2e", "--task", "worker:0", cwd=project.root)
    assert logs.returncode == 0, logs.stderr
    status = cli("status", "e2e", cwd=project.root)
    assert status.returncode == 0 and "Succeeded" in status.stdout
    assert not slots_running(emulator, "e2e"), "the ps was stopped once the workers succeeded"
    assert cli("delete", "e2e", cwd=project.root).returncode == 0


def test_cli_with_an_unreachable_master_exits_1_cleanly(tmp_path: Path) -> None:
    (tmp_path / "specs").mkdir()
    (tmp_path / "specs" / "one.yaml").write_text(spec("one", {"worker": (1, "serve")}))
    (tmp_path / "tfdeclare.yaml").write_text(config_yaml("http://127.0.0.1:9", subscribeTimeoutSeconds=1))
    result = cli("apply", "specs", cwd=tmp_path, timeout=60)
    assert result.returncode == 1, result.stdout + result.stderr
    assert "cannot reach the Mesos master at http://127.0.0.1:9" in result.stderr
    assert "Traceback" not in result.stderr
