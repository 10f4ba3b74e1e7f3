"""The Mesos backend on real-world clusters (issue 14): shared with other frameworks, and
masters older than 1.9.

A job that fits an agent but not what is free on it now waits (Pending, never
Unschedulable), the framework keeps asking for offers (REVIVE at a bounded rate, never
SUPPRESS while it waits), and the job runs within a few seconds of the agent becoming free.
``Unschedulable`` is kept for gangs no agent could ever hold, judged against what the
agents have (the master's operator API), and re-checked when agents join.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.backend_conformance import Harness, gang, launches, place_soon, wait_for
from tests.conftest import job_yaml, kill_leftovers
from tests.mesos_emulator import Emulator
from tests.mesos_fixtures import (
    PY,
    config_yaml,
    eventually,
    mesos_test_config,
    running_on_agents,
    start_emulator,
)
from tests.mesos_other_framework import OtherFramework
from tfdeclare.backends.mesos.backend import MesosBackend
from tfdeclare.backends.mesos.errors import MesosError
from tfdeclare.backends.mesos.info import FrameworkInfo
from tfdeclare.core.enums import Role, TaskState
from tfdeclare.core.run.tasks import GangRequest, Placement, SlotRequest, TaskKey, Unplaced, UnplacedReason
from tfdeclare.core.spec.resources import Resources

pytestmark = pytest.mark.slow  # real task processes behind the emulator, offer timers

SLEEP = [PY, "-c", "import time; time.sleep(60)"]


@pytest.fixture
def emulator(tmp_path: Path) -> Iterator[Emulator]:
    emulator = start_emulator(tmp_path)  # one agent: cpus 4, mem 4096
    try:
        yield emulator
        assert emulator.check_invariants() == []
    finally:
        emulator.stop()


@pytest.fixture
def harness(tmp_path: Path, emulator: Emulator) -> Iterator[Harness]:
    config = mesos_test_config(emulator.url, revive_interval_s=1.0, place_wait_s=0.5)
    made = Harness(lambda: MesosBackend(tmp_path / "state", config), tmp_path)
    try:
        yield made
    finally:
        made.close()


def test_a_job_that_fits_an_agent_waits_for_it_and_runs_when_it_is_free(
    emulator: Emulator, harness: Harness
) -> None:
    other = OtherFramework(emulator.url)
    try:
        held = other.hold(cpus=2.0)
        backend = harness.backend()
        job = gang("three", 1, Resources(3, 256))
        waited: list[Unplaced] = []
        for _ in range(3):  # several controller passes while the other framework holds 2 cpus
            answer = backend.place(job)
            assert isinstance(answer, Unplaced), answer
            assert answer.reason is not UnplacedReason.UNSCHEDULABLE, answer.message
            waited.append(answer)
        ours = next(f for f in emulator.frameworks() if f["name"] == "tfdeclare-test")
        assert ours["suppressed_roles"] == []  # never SUPPRESS while work waits
        # REVIVE sent while it waits (its bounded rate, every reviveIntervalSeconds, is tested
        # in virtual time: tests/test_mesos_decide.py)
        eventually(lambda: len(emulator.calls("REVIVE")) >= 1, timeout=10)
        other.release(held)
        # placed once the agent is free (never Unschedulable on the way); how soon is the
        # REVIVE rate's, tested in virtual time (tests/test_mesos_decide.py), not timed here
        placement = place_soon(backend, job, timeout=60)
        tasks = launches(harness, placement, SLEEP, resources=Resources(3, 256))
        backend.launch(placement, tasks)
        eventually(lambda: tasks[0].task_id in running_on_agents(emulator))
    finally:
        other.close()


def test_unschedulable_only_when_no_agent_could_hold_it_and_rechecked_when_agents_join(
    emulator: Emulator, harness: Harness
) -> None:
    backend = harness.backend()
    big = gang("big", 1, Resources(6, 256))
    answer = backend.place(big)
    assert isinstance(answer, Unplaced) and answer.reason is UnplacedReason.UNSCHEDULABLE, answer
    assert "cpus 6" in answer.message and "the largest agent has cpus 4" in answer.message
    emulator.add_agent("cpus:8;mem:4096;ports:[32000-32099]")

    def placed() -> Placement | None:
        answer = backend.place(big)
        return answer if isinstance(answer, Placement) else None

    placement = eventually(placed, timeout=10)
    assert {s.backend_ref for s in placement.slots} != {emulator.agent_ids()[0]}


def test_a_gang_larger_than_what_is_free_but_not_than_the_agents_has_no_unschedulable_verdict(
    emulator: Emulator, harness: Harness
) -> None:
    """Two agents of 4 cpus, another framework holds 3 cpus of each: a gang of two 2-cpu
    tasks waits (all agents together have enough), never Unschedulable."""
    emulator.add_agent("cpus:4;mem:4096;ports:[32000-32099]")
    other = OtherFramework(emulator.url)
    try:
        other.hold(cpus=3.0)
        other.client.revive(["*"])
        other.hold(cpus=3.0)
        backend = harness.backend()
        answer = backend.place(gang("pair", 2, Resources(2, 256)))
        assert isinstance(answer, Unplaced) and answer.reason is not UnplacedReason.UNSCHEDULABLE, answer
    finally:
        other.close()


# ---- old masters (< 1.9: no UPDATE_FRAMEWORK) ---------------------------------------------------


def test_a_master_before_1_9_gets_gpu_resources_at_subscription_not_update_framework(tmp_path: Path) -> None:
    emulator = start_emulator(tmp_path, version="1.8.0")
    harness = Harness(lambda: MesosBackend(tmp_path / "state", mesos_test_config(emulator.url)), tmp_path)
    try:
        gpu_agent = emulator.add_agent("cpus:4;mem:4096;ports:[32000-32099]", gpus=1)
        # What an old master answers to UPDATE_FRAMEWORK (what failed every GPU job before):
        other = OtherFramework(emulator.url)
        info = FrameworkInfo(user="nobody", name="other-framework", roles=("*",), failover_timeout=0.0)
        with pytest.raises(MesosError, match="Expecting 'type' to be present") as refused:
            other.client.update_framework(info)
        assert "400" in str(refused.value)
        other.close()
        backend = harness.backend()
        request = GangRequest("gpu", 0, (SlotRequest(TaskKey(Role.WORKER, 0), Resources(1, 256, 1)),))
        placement = place_soon(backend, request)
        assert {s.backend_ref for s in placement.slots} == {gpu_agent}
        tasks = launches(harness, placement, SLEEP, resources=Resources(1, 256, 1))
        backend.launch(placement, tasks)
        eventually(lambda: tasks[0].task_id in running_on_agents(emulator))
        ours = [
            c
            for c in emulator.calls()
            if c["type"] in ("SUBSCRIBE", "UPDATE_FRAMEWORK") and c["status"] < 300
        ]
        ours = [
            c
            for c in ours
            if (c["call"] or {}).get("subscribe", {}).get("framework_info", {}).get("name")
            != "other-framework"
        ]
        assert [c["type"] for c in ours] == ["SUBSCRIBE", "SUBSCRIBE"]  # the second one with GPUs
        capabilities = {c["type"] for c in ours[-1]["call"]["subscribe"]["framework_info"]["capabilities"]}
        assert "GPU_RESOURCES" in capabilities
        assert '"gpuResources": true' in (tmp_path / "state" / "mesos" / "framework.json").read_text()
    finally:
        harness.close()
        emulator.stop()


# ---- the user tasks run as ---------------------------------------------------------------------


def test_a_task_whose_user_does_not_exist_on_the_agent_fails_with_the_agents_words(tmp_path: Path) -> None:
    """As a real agent with --switch_user: the task is dropped (REASON_EXECUTOR_TERMINATED,
    "No such user"); the backend reports it as an ended task with that message, never as a
    launch that did not happen (which would be retried forever)."""
    emulator = start_emulator(tmp_path, agent_users=frozenset({"trainer"}))
    config = mesos_test_config(emulator.url, user="no-such-user")
    harness = Harness(lambda: MesosBackend(tmp_path / "state", config), tmp_path)
    try:
        backend = harness.backend()
        placement = place_soon(backend, gang("nouser", 1))
        [task] = launches(harness, placement, SLEEP)
        backend.launch(placement, [task])
        ended = wait_for(backend, lambda ts: task.task_id in ts and ts[task.task_id].state.ended)
        observed = ended[task.task_id]
        assert observed.state is TaskState.GONE
        assert "Failed to chown directory to 'no-such-user': No such user 'no-such-user'" in observed.message
        assert observed.extra["mesosReason"] == "REASON_EXECUTOR_TERMINATED"
        # What the master sent (its own task list drops the task once the update is acknowledged).
        assert observed.extra["mesosState"] == "TASK_DROPPED"
        # A user the agent knows runs (a new framework: FrameworkInfo.user cannot change).
        known = mesos_test_config(emulator.url, user="trainer")
        backend = MesosBackend(tmp_path / "state-trainer", known)
        harness.backends.append(backend)
        placement = place_soon(backend, gang("withuser", 1))
        tasks = launches(harness, placement, SLEEP)
        backend.launch(placement, tasks)
        eventually(lambda: tasks[0].task_id in running_on_agents(emulator))
    finally:
        harness.close()
        emulator.stop()


# ---- reservations and roles ----------------------------------------------------------------------


def _task_resources(emulator: Emulator, task_id: str) -> list[dict[str, Any]]:
    for call in emulator.calls("ACCEPT"):
        for operation in call["call"]["accept"].get("operations", []):
            for info in operation.get("launch", {}).get("task_infos", []):
                if info["task_id"]["value"] == task_id:
                    return list(info["resources"])
    raise AssertionError(f"no ACCEPT launched {task_id}")


def test_a_gpu_pool_reserved_to_a_role_beside_unreserved_cpu_agents(tmp_path: Path) -> None:
    """Agents started with --default_role=ml (all their resources reserved to ml, GPUs
    included) beside an unreserved CPU agent: a framework with roles [*, ml] (MULTI_ROLE) puts
    the GPU job on the pool, asking for the resources as offered (role ml, allocated to ml),
    and the CPU job on the CPU agent; without the role, the GPU job can never run there."""
    emulator = start_emulator(tmp_path)
    cpu_agent = emulator.agent_ids()[0]
    pool = emulator.add_agent("cpus:4;mem:4096;ports:[32000-32099]", gpus=2, default_role="ml")
    config = mesos_test_config(emulator.url, roles=("*", "ml"))
    harness = Harness(lambda: MesosBackend(tmp_path / "state", config), tmp_path)
    try:
        backend = harness.backend()
        gpu_job = GangRequest("gpu", 0, (SlotRequest(TaskKey(Role.WORKER, 0), Resources(2, 512, 1)),))
        placement = place_soon(backend, gpu_job)
        assert [s.backend_ref for s in placement.slots] == [pool]
        gpu_tasks = launches(harness, placement, SLEEP, resources=Resources(2, 512, 1))
        backend.launch(placement, gpu_tasks)
        cpu_placement = place_soon(backend, gang("cpu", 1, Resources(1, 256)))
        assert [s.backend_ref for s in cpu_placement.slots] == [cpu_agent]
        cpu_tasks = launches(harness, cpu_placement, SLEEP, resources=Resources(1, 256))
        backend.launch(cpu_placement, cpu_tasks)
        eventually(lambda: {gpu_tasks[0].task_id, cpu_tasks[0].task_id} <= set(running_on_agents(emulator)))
        asked = _task_resources(emulator, gpu_tasks[0].task_id)
        assert {r["name"] for r in asked} == {"cpus", "mem", "gpus", "ports"}
        assert all(r["role"] == "ml" and r["allocation_info"] == {"role": "ml"} for r in asked)
        assert all(r["role"] == "*" for r in _task_resources(emulator, cpu_tasks[0].task_id))
        [subscribe] = [c for c in emulator.calls("SUBSCRIBE") if c["status"] == 200][:1]
        info = subscribe["call"]["subscribe"]["framework_info"]
        assert info["roles"] == ["*", "ml"] and {"type": "MULTI_ROLE"} in info["capabilities"]
        # A framework without the role never sees the pool: the GPU job can never run.
        other = MesosBackend(tmp_path / "state-star", mesos_test_config(emulator.url))
        harness.backends.append(other)
        answer = other.place(GangRequest("gpu2", 0, gpu_job.slots))
        assert isinstance(answer, Unplaced) and answer.reason is UnplacedReason.UNSCHEDULABLE, answer
        assert "needs an agent with GPUs" in answer.message
    finally:
        harness.close()
        emulator.stop()


@pytest.mark.parametrize("reserved_first", [True, False])
def test_a_task_takes_reserved_resources_first_and_asks_for_them_as_offered(
    tmp_path: Path, reserved_first: bool
) -> None:
    """An agent with 2 cpus reserved to ml and 2 unreserved: a 3-cpu task of a framework in
    role ml takes both reserved ones and one unreserved (reservedFirst), or the other way round."""
    emulator = start_emulator(
        tmp_path, agent_resources="cpus(ml):2;cpus:2;mem(ml):1024;mem:3072;ports:[31000-31099]"
    )
    config = mesos_test_config(emulator.url, roles=("ml",), reserved_first=reserved_first)
    harness = Harness(lambda: MesosBackend(tmp_path / "state", config), tmp_path)
    try:
        backend = harness.backend()
        placement = place_soon(backend, gang("mixed", 1, Resources(3, 2048)))
        tasks = launches(harness, placement, SLEEP, resources=Resources(3, 2048))
        backend.launch(placement, tasks)
        eventually(lambda: tasks[0].task_id in running_on_agents(emulator))
        cpus = {
            r["role"]: r["scalar"]["value"]
            for r in _task_resources(emulator, tasks[0].task_id)
            if r["name"] == "cpus"
        }
        assert cpus == ({"ml": 2.0, "*": 1.0} if reserved_first else {"*": 2.0, "ml": 1.0})
    finally:
        harness.close()
        emulator.stop()


def _dynamic(name: str, value: float) -> dict[str, Any]:
    """A resource to RESERVE for role ml, in the pre-refinement format (``role`` and
    ``reservation``), as a framework without RESERVATION_REFINEMENT sends it."""
    return {
        "name": name,
        "type": "SCALAR",
        "scalar": {"value": value},
        "role": "ml",
        "reservation": {"principal": "ops"},
        "allocation_info": {"role": "ml"},
    }


def test_dynamic_reservations_are_offered_to_their_role_and_used_as_offered(tmp_path: Path) -> None:
    """Another framework RESERVEs 2 of the agent's 4 cpus for role ml (and UNRESERVEs and
    RESERVEs again in one ACCEPT): tfdeclare in role ml gets them offered (role ml with a
    ``reservation``) and launches a 3-cpu task from 2 reserved + 1 unreserved; in role * only
    2 cpus are ever its, so a 3-cpu job can never run."""
    emulator = start_emulator(tmp_path)
    reserver = OtherFramework(emulator.url, name="reserver", role="ml")
    try:
        offer = reserver.next_offer()
        cpus, mem = _dynamic("cpus", 2.0), _dynamic("mem", 512.0)
        operations = [
            {"type": "RESERVE", "reserve": {"resources": [cpus, mem]}},
            {"type": "UNRESERVE", "unreserve": {"resources": [mem]}},
        ]
        reserver.client.accept([offer.id], operations, refuse_seconds=0.0)
        total = eventually(
            lambda: "DYNAMIC,ml" in emulator.agents()[0]["total"] and emulator.agents()[0]["total"]
        )
        assert "cpus(reservations: [(DYNAMIC,ml)]):2" in total and "mem(reservations" not in total
    finally:
        reserver.close()
    harness = Harness(
        lambda: MesosBackend(tmp_path / "state", mesos_test_config(emulator.url, roles=("ml",))), tmp_path
    )
    try:
        backend = harness.backend()
        placement = place_soon(backend, gang("dyn", 1, Resources(3, 256)))
        tasks = launches(harness, placement, SLEEP, resources=Resources(3, 256))
        backend.launch(placement, tasks)
        eventually(lambda: tasks[0].task_id in running_on_agents(emulator))
        asked = [r for r in _task_resources(emulator, tasks[0].task_id) if r["name"] == "cpus"]
        assert sorted((r["role"], "reservation" in r, r["scalar"]["value"]) for r in asked) == [
            ("*", False, 1.0),
            ("ml", True, 2.0),
        ]
        star = MesosBackend(tmp_path / "state-star", mesos_test_config(emulator.url))
        harness.backends.append(star)
        answer = star.place(gang("dyn-star", 1, Resources(3, 256)))
        assert isinstance(answer, Unplaced) and answer.reason is UnplacedReason.UNSCHEDULABLE, answer
        assert "the largest agent has cpus 2" in answer.message
    finally:
        harness.close()
        emulator.stop()


# ---- through the CLI and the controller ----------------------------------------------------------


def test_apply_waits_for_resources_another_framework_holds_then_runs_the_job(tmp_path: Path) -> None:
    """`tfdeclare apply --wait` beside another framework holding 2 of the only agent's 4 cpus:
    the 3-cpu job's status is Pending (WaitingForOffers, never Unschedulable) while it waits,
    it is launched within a few seconds of the other framework's release, and succeeds."""
    emulator = start_emulator(tmp_path)
    other = OtherFramework(emulator.url)
    apply = None
    try:
        held = other.hold(cpus=2.0)
        (tmp_path / "tfdeclare.yaml").write_text(config_yaml(emulator.url, reviveIntervalSeconds=1))
        (tmp_path / "job.yaml").write_text(
            job_yaml(
                "three", command="[sleep, '2']", roles="worker: {count: 1, resources: {cpus: 3, mem: 256}}"
            )
        )
        apply = subprocess.Popen(
            [sys.executable, "-m", "tfdeclare", "apply", "job.yaml", "--wait", "--timeout", "60"],
            cwd=tmp_path,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        status_file = tmp_path / "status" / "three.yaml"

        def waiting() -> dict[str, Any] | None:
            document = yaml.safe_load(status_file.read_text()) if status_file.exists() else None
            return document if document and document["phase"] == "Pending" else None

        eventually(waiting, timeout=30)
        revives = len(emulator.calls("REVIVE"))
        eventually(lambda: len(emulator.calls("REVIVE")) >= revives + 2)  # several passes, REVIVEs
        document = waiting()
        assert document is not None and "WaitingForOffers" in str(document["conditions"]), document
        assert "Unschedulable" not in str(document), document
        other.release(held)
        # launched once the agent is free (how soon: the REVIVE rate, tested in virtual time)
        eventually(lambda: any(t.startswith("three.") for t in running_on_agents(emulator)), timeout=60)
        out, err = apply.communicate(timeout=60)
        assert apply.returncode == 0, err
        assert "Unschedulable" not in out and "Succeeded" in out
    finally:
        if apply is not None and apply.poll() is None:
            apply.kill()
            apply.wait()
        other.close()
        kill_leftovers(tmp_path)
        emulator.stop()


def test_without_the_masters_agent_list_nothing_is_unschedulable_and_jobs_still_run(tmp_path: Path) -> None:
    """Behind a proxy that passes only the scheduler API (GET_AGENTS is a 404), what agents
    have is unknown: a job too big for every agent waits (never a false Unschedulable),
    and one that fits runs."""
    emulator = start_emulator(tmp_path, operator_api=False)
    harness = Harness(lambda: MesosBackend(tmp_path / "state", mesos_test_config(emulator.url)), tmp_path)
    try:
        backend = harness.backend()
        for _ in range(2):
            huge = backend.place(gang("huge", 1, Resources(64, 128)))
            assert isinstance(huge, Unplaced) and huge.reason is UnplacedReason.WAITING_FOR_OFFERS, huge
        placement = place_soon(backend, gang("small", 1))
        tasks = launches(harness, placement, SLEEP)
        backend.launch(placement, tasks)
        eventually(lambda: tasks[0].task_id in running_on_agents(emulator))
    finally:
        harness.close()
        emulator.stop()


def test_a_child_role_is_offered_its_parents_reservations(tmp_path: Path) -> None:
    """Hierarchical roles, as the real master does them (issue 21; upstream
    ``Resources::isAllocatableTo``): an agent with ``cpus(ml):3;cpus:1`` offers ml's
    reservation to a framework in role ml/team, which runs a 3-cpu task on it, allocated to
    ml/team; the backend counts ml's reservation as ml/team's when judging what fits."""
    emulator = start_emulator(
        tmp_path, agent_resources="cpus(ml):3;cpus:1;mem(ml):2048;mem:2048;ports:[31000-31099]"
    )
    harness = Harness(
        lambda: MesosBackend(tmp_path / "state", mesos_test_config(emulator.url, roles=("ml/team",))),
        tmp_path,
    )
    try:
        backend = harness.backend()
        placement = place_soon(backend, gang("team", 1, Resources(3, 1024)))
        tasks = launches(harness, placement, SLEEP, resources=Resources(3, 1024))
        backend.launch(placement, tasks)
        eventually(lambda: tasks[0].task_id in running_on_agents(emulator))
        asked = _task_resources(emulator, tasks[0].task_id)
        assert {r["allocation_info"]["role"] for r in asked} == {"ml/team"}
        assert ("ml", 3.0) in [(r["role"], r["scalar"]["value"]) for r in asked if r["name"] == "cpus"]
    finally:
        harness.close()
        emulator.stop()
