"""The Mesos backend against a real Apache Mesos 1.11.0 master and agents (issue 21), each
case on a fresh cluster (tests/real_mesos.py; ``make real-mesos``): gangs across agents, the
real allocator's offers with roles, reservations and quota, another framework beside ours,
controller crashes and restarts, and the CLI's flows.

What is checked is what the real master says (``/master/state``, the operator API), never
what the backend believes it did.
"""

from __future__ import annotations

import getpass
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import replace
from functools import partial
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.backend_conformance import Harness, gang, launches, place_soon, wait_for
from tests.conftest import cli, job_yaml
from tests.mesos_fixtures import config_yaml, mesos_test_config
from tests.mesos_fixtures import eventually as _eventually
from tests.mesos_other_framework import OtherFramework
from tests.real_mesos import RealMesos
from tests.real_mesos_backend import backends
from tfdeclare.backends.mesos.backend import MesosBackend
from tfdeclare.backends.mesos.decide_state import AgentsAsk
from tfdeclare.core.enums import TaskState
from tfdeclare.core.run.tasks import Placement, Unplaced, UnplacedReason
from tfdeclare.core.spec.resources import Resources

eventually = partial(_eventually, timeout=30.0)  # a real cluster on a loaded machine: generous deadlines

__all__ = ["backends"]  # the fixture

pytestmark = [pytest.mark.real_mesos, pytest.mark.slow]

PY = sys.executable
SLEEP = [PY, "-c", "import time; time.sleep(120)"]
Start = Callable[..., RealMesos]


def harness_on(
    mesos: RealMesos, tmp_path: Path, made: list[Harness], state: str = "state", **config: Any
) -> Harness:
    settings = mesos_test_config(mesos.url, shared_filesystem=True, **config)
    harness = Harness(lambda: MesosBackend(tmp_path / state, settings), tmp_path)
    made.append(harness)
    return harness


def start_gang(harness: Harness, backend: MesosBackend, job: str, n: int, resources: Resources) -> list[str]:
    placement = place_soon(backend, gang(job, n, resources), timeout=30)
    tasks = launches(harness, placement, SLEEP, resources=resources)
    backend.launch(placement, tasks)
    return [t.task_id for t in tasks]


def start_running(
    harness: Harness, backend: MesosBackend, job: str, n: int, resources: Resources
) -> list[str]:
    """``start_gang``'s task ids once the backend sees all of them running."""
    ids = start_gang(harness, backend, job, n, resources)
    wait_for(backend, running(ids), timeout=60)
    return ids


def placed(backend: MesosBackend, request: Any) -> Placement | None:
    answer = backend.place(request)
    return answer if isinstance(answer, Placement) else None


def running(ids: list[str]) -> Callable[[dict[str, Any]], bool]:
    return lambda ts: all(i in ts and ts[i].state is TaskState.RUNNING for i in ids)


def task_resources(mesos: RealMesos, task_id: str) -> list[dict[str, Any]]:
    """The resources the master holds for a task (operator GET_TASKS)."""
    answer = mesos.operator({"type": "GET_TASKS"})["get_tasks"]
    for task in answer.get("tasks", []) + answer.get("completed_tasks", []):
        if task["task_id"]["value"] == task_id:
            return list(task["resources"])
    raise AssertionError(f"the master has no task {task_id}")


def reservation_of(resource: dict[str, Any]) -> str:
    stack = resource.get("reservations") or []
    return str(stack[-1]["role"]) if stack else "*"


def framework_named(mesos: RealMesos, name: str) -> dict[str, Any]:
    return next(f for f in mesos.frameworks() if f["name"] == name)


# ---- placement on the real allocator's offers -----------------------------------------------


def test_a_gang_is_placed_across_agents_and_runs_on_both(
    real_mesos: Start, tmp_path: Path, backends: list[Harness]
) -> None:
    """Three 1-cpu tasks on agents of 2 cpus each: the gang spans both agents, all or nothing."""
    mesos = real_mesos(agents=2, resources="cpus:2;mem:2048;ports:[31000-31099]")
    harness = harness_on(mesos, tmp_path, backends)
    backend = harness.backend()
    ids = start_running(harness, backend, "wide", 3, Resources(1, 256))
    on = eventually(lambda: (r := mesos.running()) and set(ids) <= set(r) and r)
    assert len({on[i] for i in ids}) == 2, on
    too_big = backend.place(gang("more", 2, Resources(1, 256)))  # only 1 cpu is left in all
    assert isinstance(too_big, Unplaced) and too_big.reason is not UnplacedReason.UNSCHEDULABLE
    backend.stop(ids, 1.0)
    wait_for(backend, lambda ts: all(ts[i].state.ended for i in ids), timeout=60)


def test_a_revive_brings_no_offer_for_what_is_held_and_place_does_not_wait_for_one(
    real_mesos: Start, tmp_path: Path, backends: list[Harness]
) -> None:
    """Upstream: the master never offers again what is offered to us (an offer is ours until
    accepted, declined or rescinded), REVIVE or not. So with both agents' offers held (a
    placement of all of them), a gang that does not fit REVIVEs and ``place`` answers at once
    (``placeWaitSeconds`` is 120 s here), saying what the gang lacks; and no offer comes after
    that REVIVE through several of the master's allocation runs."""
    mesos = real_mesos(agents=2, resources="cpus:2;mem:2048;ports:[31000-31099]")
    settings = mesos_test_config(mesos.url, shared_filesystem=True, place_wait_s=120.0, revive_interval_s=5.0)
    skew = [0.0]  # the backend's clock runs this far ahead of the wall clock
    harness = Harness(
        lambda: MesosBackend(tmp_path / "state", settings, clock=lambda: time.time() + skew[0]), tmp_path
    )
    backends.append(harness)
    backend = harness.backend()
    assert isinstance(backend, MesosBackend)
    whole = place_soon(backend, gang("whole", 2, Resources(2, 512)), timeout=30)
    policies = backend._policies
    # the first placement's REVIVE answered too (on a loaded machine the calls thread may not
    # have sent it yet): else the next REVIVE waits for it, and "it went out" is not what we see
    eventually(
        lambda: (
            policies.pool.agents_known
            and policies.policy.agents.ask is not AgentsAsk.OUT
            and policies.policy.offers.out is None
        )
    )
    skew[0] += 5.1  # past reviveIntervalSeconds (the backend's time, not a sleep): it REVIVEs
    answers: list[Placement | Unplaced] = []
    asking = threading.Thread(
        target=lambda: answers.append(backend.place(gang("other", 1, Resources(1, 128))))
    )
    asking.start()
    asking.join(timeout=60.0)  # a guard against a 120 s wait, not a timing
    assert answers, "place() waited for offers that cannot come"
    other = answers[0]
    assert isinstance(other, Unplaced) and other.reason is UnplacedReason.WAITING_FOR_OFFERS, other
    assert other.short is not None and other.short.cpus == 1, other
    revived_at = policies.policy.offers.revived_at
    assert revived_at > policies.policy.offers.received_at, "the REVIVE went out after the last offers"
    eventually(lambda: policies.policy.offers.out is None)  # the master took the REVIVE

    def allocation_runs() -> float:
        return float(mesos.get("/metrics/snapshot")["allocator/mesos/allocation_runs"])

    runs = allocation_runs()
    eventually(lambda: allocation_runs() >= runs + 3)
    assert policies.policy.offers.received_at < revived_at, "the master offered again what we hold"
    backend.release(whole)
    backend.release(place_soon(backend, gang("other", 1, Resources(1, 128)), timeout=30))


def unschedulable(backend: Any, request: Any) -> Any:
    """The backend's answer once it judges ``request`` unschedulable (it may first wait for
    the master's agent list)."""
    return eventually(
        lambda: (a := backend.place(request)) and a.reason is UnplacedReason.UNSCHEDULABLE and a
    )


def unschedulable_on(
    real_mesos: Start, tmp_path: Path, backends: list[Harness], *, agents: int, resources: str, cpus: float
) -> str:
    """The message of the UNSCHEDULABLE answer a framework in role * gets for one task of
    ``cpus`` cpus on a fresh cluster of ``agents`` agents of ``resources`` each."""
    mesos = real_mesos(agents=agents, resources=resources)
    backend = harness_on(mesos, tmp_path, backends).backend()
    answer = unschedulable(backend, gang("huge", 1, Resources(cpus, 256)))
    return str(answer.message)


def test_a_gang_larger_than_any_agent_is_unschedulable_from_the_masters_agent_list(
    real_mesos: Start, tmp_path: Path, backends: list[Harness]
) -> None:
    message = unschedulable_on(
        real_mesos, tmp_path, backends, agents=2, resources="cpus:2;mem:2048;ports:[31000-31099]", cpus=3
    )
    assert "the largest agent has cpus 2" in message, message


def test_static_reservations_are_taken_first_by_a_framework_in_their_role(
    real_mesos: Start, tmp_path: Path, backends: list[Harness]
) -> None:
    """Agents with ``cpus(ml):2;cpus:2``: a 3-cpu task of a framework in role ml takes both
    reserved cpus and one unreserved, as the real master offered them (role ml, allocated to ml)."""
    mesos = real_mesos(agents=1, resources="cpus(ml):2;cpus:2;mem(ml):1024;mem:3072;ports:[31000-31099]")
    harness = harness_on(mesos, tmp_path, backends, roles=("ml",))
    backend = harness.backend()
    [task_id] = start_running(harness, backend, "mixed", 1, Resources(3, 2048))
    cpus = sorted(
        (reservation_of(r), r["scalar"]["value"])
        for r in task_resources(mesos, task_id)
        if r["name"] == "cpus"
    )
    assert cpus == [("*", 1.0), ("ml", 2.0)]
    assert all(r["allocation_info"]["role"] == "ml" for r in task_resources(mesos, task_id))


def test_a_framework_outside_the_role_never_gets_its_reservations(
    real_mesos: Start, tmp_path: Path, backends: list[Harness]
) -> None:
    message = unschedulable_on(
        real_mesos,
        tmp_path,
        backends,
        agents=1,
        resources="cpus(ml):3;cpus:1;mem:4096;ports:[31000-31099]",
        cpus=2,
    )
    assert "the largest agent has cpus 1" in message, message


def test_multi_role_puts_each_job_where_its_resources_are(
    real_mesos: Start, tmp_path: Path, backends: list[Harness]
) -> None:
    """A framework in roles [*, ml] (MULTI_ROLE): the master lists both roles for it, and a
    job bigger than the unreserved part runs on what ml holds, allocated to ml."""
    mesos = real_mesos(agents=1, resources="cpus(ml):3;cpus:1;mem(ml):2048;mem:2048;ports:[31000-31099]")
    harness = harness_on(mesos, tmp_path, backends, roles=("*", "ml"))
    backend = harness.backend()
    [big] = start_gang(harness, backend, "big", 1, Resources(3, 1024))
    [small] = start_gang(harness, backend, "small", 1, Resources(1, 256))
    wait_for(backend, running([big, small]), timeout=60)
    framework = framework_named(mesos, "tfdeclare-test")
    assert sorted(framework["roles"]) == ["*", "ml"]
    assert "MULTI_ROLE" in framework["capabilities"]
    assert {r["allocation_info"]["role"] for r in task_resources(mesos, big)} == {"ml"}
    assert {r["allocation_info"]["role"] for r in task_resources(mesos, small)} == {"*"}


def test_hierarchical_roles_a_child_role_is_offered_its_parents_reservations(
    real_mesos: Start, tmp_path: Path, backends: list[Harness]
) -> None:
    """Upstream ``Resources::isAllocatableTo``: resources reserved to ``ml`` are allocatable to
    ``ml/team``. A framework in role ml/team runs a 3-cpu job on an agent with cpus(ml):3 and
    1 unreserved cpu; the master allocates ml's reservation to ml/team."""
    mesos = real_mesos(agents=1, resources="cpus(ml):3;cpus:1;mem(ml):2048;mem:2048;ports:[31000-31099]")
    harness = harness_on(mesos, tmp_path, backends, roles=("ml/team",))
    backend = harness.backend()
    [task_id] = start_running(harness, backend, "team", 1, Resources(3, 1024))
    resources = task_resources(mesos, task_id)
    assert {r["allocation_info"]["role"] for r in resources} == {"ml/team"}
    assert ("ml", 3.0) in [
        (reservation_of(r), r["scalar"]["value"]) for r in resources if r["name"] == "cpus"
    ]


def _reserve(role: str, cpus: float, mem: float) -> list[dict[str, Any]]:
    return [
        {
            "name": name,
            "type": "SCALAR",
            "scalar": {"value": value},
            "reservations": [{"type": "DYNAMIC", "role": role, "principal": "ops"}],
        }
        for name, value in (("cpus", cpus), ("mem", mem))
    ]


def test_dynamic_reservations_through_the_operator_api(
    real_mesos: Start, tmp_path: Path, backends: list[Harness]
) -> None:
    """RESERVE_RESOURCES (operator API) gives role ml 3 of the agent's 4 cpus: tfdeclare in
    role ml runs a 3-cpu task on them (a dynamic reservation, as offered), one in role * can
    never; once the task ends, UNRESERVE_RESOURCES gives them back and the * framework runs."""
    mesos = real_mesos(agents=1, resources="cpus:4;mem:4096;ports:[31000-31099]")
    [agent] = mesos.agent_ids()
    resources = _reserve("ml", 3, 1024)
    mesos.operator(
        {
            "type": "RESERVE_RESOURCES",
            "reserve_resources": {"agent_id": {"value": agent}, "resources": resources},
        },
        expect=202,
    )
    ml = harness_on(mesos, tmp_path, backends, roles=("ml",))
    ml_backend = ml.backend()
    [task_id] = start_running(ml, ml_backend, "dyn", 1, Resources(3, 512))
    dynamic = [r for r in task_resources(mesos, task_id) if r["name"] == "cpus"]
    assert [(r["reservations"][-1]["type"], r["reservations"][-1]["role"]) for r in dynamic] == [
        ("DYNAMIC", "ml")
    ]
    star = harness_on(mesos, tmp_path, backends, state="state-star", framework_name="tfdeclare-star")
    star_backend = star.backend()
    answer = unschedulable(star_backend, gang("star", 1, Resources(3, 256)))
    assert "the largest agent has cpus 1" in answer.message
    ml_backend.stop([task_id], 1.0)
    wait_for(ml_backend, lambda ts: ts[task_id].state.ended, timeout=60)
    # The reserved resources may still be offered to ml for a moment: UNRESERVE until accepted.
    eventually(
        lambda: (
            mesos.operator(
                {
                    "type": "UNRESERVE_RESOURCES",
                    "unreserve_resources": {"agent_id": {"value": agent}, "resources": resources},
                },
                expect=202,
            )
            is None
        )
    )
    # The backend asks the master's agent list again as the controller asks again: placed.
    star_job = gang("star", 1, Resources(3, 256))
    star_backend.release(eventually(lambda: placed(star_backend, star_job), timeout=60))


# ---- another framework on the cluster -----------------------------------------------------------


def test_our_job_waits_while_another_framework_holds_the_agent_and_runs_when_it_frees(
    real_mesos: Start, tmp_path: Path, backends: list[Harness]
) -> None:
    """The real DRF allocator with two frameworks: another one holds 3 of the only agent's 4
    cpus, so a 2-cpu job waits (never Unschedulable, the agent could hold it); once the other
    framework kills its task, the job is placed and runs."""
    mesos = real_mesos(agents=1, resources="cpus:4;mem:4096;ports:[31000-31099]")
    other = OtherFramework(mesos.url)
    try:
        held = other.hold(cpus=3.0, timeout=30)
        harness = harness_on(mesos, tmp_path, backends, revive_interval_s=1.0, place_wait_s=0.5)
        backend = harness.backend()
        job = gang("two", 1, Resources(2, 256))
        for _ in range(3):
            answer = backend.place(job)
            assert isinstance(answer, Unplaced), answer
            assert answer.reason is not UnplacedReason.UNSCHEDULABLE, answer.message
        assert framework_named(mesos, "tfdeclare-test")["active"]
        other.release(held, timeout=30)
        placement = place_soon(backend, job, timeout=30)
        tasks = launches(harness, placement, SLEEP, resources=Resources(2, 256))
        backend.launch(placement, tasks)
        wait_for(backend, running([tasks[0].task_id]), timeout=60)
        assert tasks[0].task_id in mesos.running()
    finally:
        other.close()


# ---- quota ---------------------------------------------------------------------------------------


def _update_quota(mesos: RealMesos, role: str, cpus: float) -> None:
    mesos.operator(
        {
            "type": "UPDATE_QUOTA",
            "update_quota": {
                "force": True,
                "quota_configs": [{"role": role, "limits": {"cpus": {"value": cpus}}}],
            },
        }
    )


def test_a_gang_over_its_roles_quota_limit_is_reported_not_left_waiting(
    real_mesos: Start, tmp_path: Path, backends: list[Harness]
) -> None:
    """UPDATE_QUOTA limits role ml to 2 cpus: the real allocator never offers ml more, so a
    3-cpu gang could wait for ever; the backend reads the limit (GET_QUOTA) and reports the
    gang Unschedulable, naming the quota. A gang within the limit runs."""
    mesos = real_mesos(agents=2, resources="cpus:2;mem:2048;ports:[31000-31099]")
    _update_quota(mesos, "ml", 2.0)
    harness = harness_on(mesos, tmp_path, backends, roles=("ml",))
    backend = harness.backend()
    answer = eventually(
        lambda: (
            (a := backend.place(gang("over", 3, Resources(1, 128))))
            and a.reason is UnplacedReason.UNSCHEDULABLE
            and a
        ),
        timeout=30,
    )
    assert "quota" in answer.message and "ml" in answer.message, answer.message
    start_running(harness, backend, "within", 2, Resources(1, 128))


# ---- the framework's life: failover, adoption, reconciliation, UPDATE_FRAMEWORK -----------------


def test_a_new_backend_adopts_the_running_tasks_under_the_same_framework(
    real_mesos: Start, tmp_path: Path, backends: list[Harness]
) -> None:
    """A controller restart: the second backend over the same state re-subscribes with the
    saved framework id within the failover timeout and adopts the running tasks; the master
    has one framework, and the tasks were never relaunched."""
    mesos = real_mesos(agents=2, resources="cpus:2;mem:2048;ports:[31000-31099]")
    harness = harness_on(mesos, tmp_path, backends)
    first = harness.backend()
    ids = start_running(harness, first, "kept", 2, Resources(1, 256))
    framework_id = framework_named(mesos, "tfdeclare-test")["id"]
    first.close()
    eventually(lambda: not framework_named(mesos, "tfdeclare-test")["active"])
    second = harness.backend()
    adopted = wait_for(second, running(ids), timeout=60)
    assert framework_named(mesos, "tfdeclare-test")["id"] == framework_id
    assert eventually(lambda: framework_named(mesos, "tfdeclare-test")["active"])
    assert len(mesos.frameworks()) == 1
    assert sorted(adopted[i].key.index for i in ids) == [0, 1]
    assert set(ids) <= set(mesos.running())


def test_a_task_that_ended_while_no_controller_ran_is_seen_after_the_restart(
    real_mesos: Start, tmp_path: Path, backends: list[Harness]
) -> None:
    """Reconciliation: a task killed (SIGKILL, from outside) while the framework is
    disconnected ends on the agent; the master keeps its terminal update for the framework,
    and the restarted backend sees the task Failed with the signal."""
    mesos = real_mesos(agents=1, resources="cpus:4;mem:4096;ports:[31000-31099]")
    harness = harness_on(mesos, tmp_path, backends)
    first = harness.backend()
    pid_file = tmp_path / "victim.pid"
    placement = place_soon(first, gang("victim", 1), timeout=30)
    argv = [PY, "-c", f"import os,time; open({str(pid_file)!r},'w').write(str(os.getpid())); time.sleep(120)"]
    tasks = launches(harness, placement, argv)
    first.launch(placement, tasks)
    task_id = tasks[0].task_id
    wait_for(
        first,
        lambda ts: (
            task_id in ts
            and ts[task_id].state is TaskState.RUNNING
            and pid_file.exists()
            and pid_file.read_text() != ""
        ),
        timeout=60,
    )
    first.close()
    eventually(lambda: not framework_named(mesos, "tfdeclare-test")["active"])
    os.kill(mesos.host_pid(int(pid_file.read_text())), signal.SIGKILL)
    eventually(lambda: task_id not in mesos.running())
    second = harness.backend()
    seen = wait_for(second, lambda ts: task_id in ts and ts[task_id].state.ended, timeout=60)
    assert (seen[task_id].state, seen[task_id].exit_code) == (TaskState.FAILED, 128 + signal.SIGKILL)


def test_update_framework_changes_the_roles_of_the_subscribed_framework(
    real_mesos: Start, tmp_path: Path, backends: list[Harness]
) -> None:
    """A backend restarted with roles [*, ml] instead of [*]: the master keeps the framework
    (same id) and now lists both roles; a job that needs ml's reservation runs."""
    mesos = real_mesos(agents=1, resources="cpus(ml):3;cpus:1;mem:4096;ports:[31000-31099]")
    plain = harness_on(mesos, tmp_path, backends)
    first = plain.backend()
    [task_id] = start_running(plain, first, "before", 1, Resources(1, 256))
    framework_id = framework_named(mesos, "tfdeclare-test")["id"]
    first.close()
    wider = harness_on(mesos, tmp_path, backends, roles=("*", "ml"))
    second = wider.backend()
    wait_for(second, running([task_id]), timeout=60)
    eventually(lambda: sorted(framework_named(mesos, "tfdeclare-test")["roles"]) == ["*", "ml"])
    assert framework_named(mesos, "tfdeclare-test")["id"] == framework_id
    [big] = start_gang(wider, second, "after", 1, Resources(3, 256))
    wait_for(second, running([big]), timeout=60)


def test_kill_with_grace_sends_killing_then_sigkill_after_the_grace_period(
    real_mesos: Start, tmp_path: Path, backends: list[Harness]
) -> None:
    """A task that ignores SIGTERM, stopped with a 2 s grace period: the master records
    TASK_KILLING (the backend asks for TASK_KILLING_STATE), then TASK_KILLED no sooner than
    the grace period later; the task was SIGKILLed."""
    mesos = real_mesos(agents=1, resources="cpus:4;mem:4096;ports:[31000-31099]")
    harness = harness_on(mesos, tmp_path, backends)
    backend = harness.backend()
    placement = place_soon(backend, gang("stubborn", 1), timeout=30)
    script = "import signal,time; signal.signal(signal.SIGTERM, signal.SIG_IGN); print('ready', flush=True); time.sleep(120)"
    tasks = launches(harness, placement, [PY, "-c", script])
    backend.launch(placement, tasks)
    task_id = tasks[0].task_id
    wait_for(backend, running([task_id]), timeout=60)
    eventually(lambda: b"ready" in backend.read_log(task_id, 0).data)
    backend.stop([task_id], 2.0)
    seen = wait_for(backend, lambda ts: ts[task_id].state.ended, timeout=60)
    assert (seen[task_id].state, seen[task_id].exit_code) == (TaskState.STOPPED, 128 + signal.SIGKILL)
    statuses = {s["state"]: s["timestamp"] for s in mesos.tasks()[task_id]["statuses"]}
    assert "TASK_KILLING" in statuses and "TASK_KILLED" in statuses, statuses
    assert statuses["TASK_KILLED"] - statuses["TASK_KILLING"] >= 1.9


# ---- through the CLI ---------------------------------------------------------------------------


def _project(root: Path, mesos: RealMesos, **mesos_config: object) -> Path:
    (root / "tfdeclare.yaml").write_text(config_yaml(mesos.url, **mesos_config))
    return root


def _status(root: Path, job: str) -> dict[str, Any]:
    path = root / "status" / f"{job}.yaml"
    return yaml.safe_load(path.read_text()) if path.exists() else {}


def _job_tasks(mesos: RealMesos, job: str) -> dict[str, str]:
    return {i: a for i, a in mesos.running().items() if i.startswith(f"{job}.")}


def test_plain_apply_leaves_the_tasks_running_and_delete_stops_them(
    real_mesos: Start, tmp_path: Path
) -> None:
    """``tfdeclare apply`` without ``--wait`` returns once the tasks are launched; the real
    agents keep them running after the CLI has exited (the framework stays registered for its
    failover timeout); a later ``status`` and ``delete`` find and stop them."""
    mesos = real_mesos(agents=2, resources="cpus:2;mem:2048;ports:[31000-31099]")
    root = _project(tmp_path, mesos)
    (root / "job.yaml").write_text(job_yaml("plain", workers=2, command="[sleep, '120']"))
    applied = cli("apply", "job.yaml", cwd=root)
    assert applied.returncode == 0, applied.stderr
    eventually(lambda: len(_job_tasks(mesos, "plain")) == 2, timeout=60)
    assert len(_job_tasks(mesos, "plain")) == 2  # the CLI has exited: what runs now runs without it
    again = cli("apply", "job.yaml", cwd=root)
    assert again.returncode == 0, again.stderr
    assert "No changes" in again.stdout, again.stdout
    deleted = cli("delete", "plain", cwd=root)
    assert deleted.returncode == 0, deleted.stderr
    eventually(lambda: not _job_tasks(mesos, "plain"), timeout=60)


def test_apply_wait_runs_a_job_to_succeeded(real_mesos: Start, tmp_path: Path) -> None:
    mesos = real_mesos(agents=2, resources="cpus:2;mem:2048;ports:[31000-31099]")
    root = _project(tmp_path, mesos)
    (root / "job.yaml").write_text(job_yaml("short", workers=3, command="[sleep, '1']"))
    applied = cli("apply", "job.yaml", "--wait", "--timeout", "120", cwd=root, timeout=180)
    assert applied.returncode == 0, applied.stdout + applied.stderr
    assert _status(root, "short")["phase"] == "Succeeded"
    finished = {i: t["state"] for i, t in mesos.tasks().items() if i.startswith("short.")}
    assert len(finished) == 3 and set(finished.values()) == {"TASK_FINISHED"}, finished


def test_resize_then_restart_through_apply(real_mesos: Start, tmp_path: Path) -> None:
    """2 workers, then 3 (a resize: the gang is replaced at its new size), then a changed
    environment (a restart): each apply leaves exactly the desired tasks running on the master."""
    mesos = real_mesos(agents=2, resources="cpus:2;mem:2048;ports:[31000-31099]")
    root = _project(tmp_path, mesos)
    spec = root / "job.yaml"
    spec.write_text(job_yaml("grow", workers=2, command="[sleep, '120']"))
    assert cli("apply", "job.yaml", cwd=root).returncode == 0
    first = eventually(lambda: (r := _job_tasks(mesos, "grow")) and len(r) == 2 and r, timeout=60)
    spec.write_text(job_yaml("grow", workers=3, command="[sleep, '120']"))
    resized = cli("apply", "job.yaml", cwd=root)
    assert resized.returncode == 0, resized.stderr
    second = eventually(lambda: (r := _job_tasks(mesos, "grow")) and len(r) == 3 and r, timeout=60)
    spec.write_text(job_yaml("grow", workers=3, command="[sleep, '120']", extra="  env: {RESTART: '1'}\n"))
    restarted = cli("apply", "job.yaml", cwd=root)
    assert restarted.returncode == 0, restarted.stderr
    third = eventually(
        lambda: (r := _job_tasks(mesos, "grow")) and len(r) == 3 and not set(r) & set(second) and r,
        timeout=60,
    )
    assert not set(third) & set(first)
    assert cli("delete", "grow", cwd=root).returncode == 0
    eventually(lambda: not _job_tasks(mesos, "grow"), timeout=60)


def test_a_sigkilled_apply_is_adopted_by_the_next_one(real_mesos: Start, tmp_path: Path) -> None:
    """``apply --wait`` SIGKILLed once the tasks run: the framework is disconnected, the real
    master keeps it and its tasks for the failover timeout, and the next ``apply`` re-subscribes,
    adopts them and launches nothing."""
    mesos = real_mesos(agents=2, resources="cpus:2;mem:2048;ports:[31000-31099]")
    root = _project(tmp_path, mesos)
    (root / "job.yaml").write_text(job_yaml("survivor", workers=3, command="[sleep, '120']"))
    first = subprocess.Popen(
        [PY, "-m", "tfdeclare", "apply", "job.yaml", "--wait"],
        cwd=root,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        launched = eventually(lambda: (r := _job_tasks(mesos, "survivor")) and len(r) == 3 and r, timeout=60)
    finally:
        first.send_signal(signal.SIGKILL)
        first.wait()
    eventually(lambda: not framework_named(mesos, "tfdeclare").get("active", True), timeout=30)
    again = cli("apply", "job.yaml", cwd=root)
    assert again.returncode == 0, again.stderr
    assert "No changes" in again.stdout, again.stdout
    assert _job_tasks(mesos, "survivor") == launched
    assert len(mesos.frameworks()) == 1
    assert _status(root, "survivor")["phase"] == "Running"
    assert cli("delete", "survivor", cwd=root).returncode == 0
    eventually(lambda: not _job_tasks(mesos, "survivor"), timeout=60)


def test_the_framework_runs_as_the_configured_user(
    real_mesos: Start, tmp_path: Path, backends: list[Harness]
) -> None:
    mesos = real_mesos(agents=1)
    harness = harness_on(mesos, tmp_path, backends)
    harness.backend().observe()  # subscribes
    assert eventually(lambda: [f["user"] for f in mesos.frameworks()]) == [getpass.getuser()]


# ---- the master and its agents fail over ----------------------------------------------------------


def restartable_cluster(tmp_path: Path, *, agents: int, resources: str) -> RealMesos:
    """A cluster whose process can stop and start again on its port: the master's registry is
    the replicated log in its work folder, and its tasks live outside its PID namespace."""
    (tmp_path / "cluster").mkdir()
    return RealMesos(
        tmp_path / "cluster",
        agents=agents,
        resources=resources,
        flags={"REGISTRY": "replicated_log"},
        namespaces=False,
    )


def test_a_master_and_agent_failover_keeps_the_tasks_and_the_framework(
    tmp_path: Path, backends: list[Harness]
) -> None:
    """The cluster's process stops and starts again on the same port (master and agents fail
    over together; the master's registry is the replicated log in its work folder): the task
    processes run on untouched, the agents recover their executors, which re-subscribe, the
    backend re-subscribes under its framework id, sees its tasks running, and can stop them."""
    mesos = restartable_cluster(tmp_path, agents=2, resources="cpus:2;mem:2048;ports:[31000-31099]")
    with mesos:
        harness = harness_on(mesos, tmp_path, backends)
        backend = harness.backend()
        pids = tmp_path / "pids"
        pids.mkdir()
        placement = place_soon(backend, gang("steady", 2, Resources(1, 256)), timeout=30)
        argv = [
            PY,
            "-c",
            f"import os,time; open(os.path.join({str(pids)!r}, str(os.getpid())), 'w'); time.sleep(120)",
        ]
        tasks = launches(harness, placement, argv, resources=Resources(1, 256))
        backend.launch(placement, tasks)
        ids = [t.task_id for t in tasks]
        wait_for(backend, running(ids), timeout=60)
        before = eventually(
            lambda: (found := {int(p.name) for p in pids.iterdir()}) and len(found) == 2 and found
        )
        framework_id = framework_named(mesos, "tfdeclare-test")["id"]
        mesos.restart()
        eventually(lambda: set(ids) <= set(mesos.running()), timeout=60)
        assert framework_named(mesos, "tfdeclare-test")["id"] == framework_id
        eventually(lambda: framework_named(mesos, "tfdeclare-test")["active"], timeout=60)
        for pid in before:
            os.kill(pid, 0)  # the very same processes
        wait_for(backend, running(ids), timeout=60)
        backend.stop(ids, 1.0)
        seen = wait_for(backend, lambda ts: all(ts[i].state.ended for i in ids), timeout=60)
        assert {seen[i].state for i in ids} == {TaskState.STOPPED}


def test_a_task_that_ends_while_the_cluster_is_down_is_reported_after_it_recovers(
    tmp_path: Path, backends: list[Harness]
) -> None:
    """A task killed (SIGKILL) while the master and agents are down: its executor keeps the
    terminal update, re-subscribes with it once the agent is back, and the backend sees the
    task Failed with the signal; the other task runs on."""
    mesos = restartable_cluster(tmp_path, agents=1, resources="cpus:4;mem:4096;ports:[31000-31099]")
    with mesos:
        harness = harness_on(mesos, tmp_path, backends)
        backend = harness.backend()
        pids = tmp_path / "pids"
        pids.mkdir()
        placement = place_soon(backend, gang("half", 2, Resources(1, 256)), timeout=30)
        argv = [
            PY,
            "-c",
            f"import os,sys,time; open(os.path.join({str(pids)!r}, os.environ['TFD_SLOT']), 'w').write(str(os.getpid())); time.sleep(120)",
        ]
        tasks = []
        for launch in launches(harness, placement, argv, resources=Resources(1, 256)):
            slot = {"TFD_SLOT": launch.key.name}
            tasks.append(replace(launch, env=tuple(sorted({**dict(launch.env), **slot}.items()))))
        backend.launch(placement, tasks)
        victim, survivor = (t.task_id for t in tasks)
        wait_for(backend, running([victim, survivor]), timeout=60)

        def written() -> dict[str, int] | None:
            found = {p.name: int(p.read_text() or 0) for p in pids.iterdir()}
            return found if len(found) == 2 and all(found.values()) else None

        pid_of = eventually(written)
        mesos.down()
        os.kill(pid_of[tasks[0].key.name], signal.SIGKILL)
        mesos.up()
        seen = wait_for(backend, lambda ts: ts[victim].state.ended, timeout=90)
        assert (seen[victim].state, seen[victim].exit_code) == (TaskState.FAILED, 128 + signal.SIGKILL), seen[
            victim
        ]
        assert seen[survivor].state is TaskState.RUNNING
        assert survivor in eventually(mesos.running, timeout=60)
