"""The master emulator checked against the real Apache Mesos 1.11.0 master (issue 21): each
scenario runs once on each, through a plain v1 scheduler (tfdeclare's HTTP client, nothing
of the backend), and both must show what upstream does: the same status updates (states,
sources, reasons, messages), offers of the same shape, the same answers to reconciliation
and to invalid launches. tests/mesos_emulator/README.md keeps the table of what is checked.

Where a row's behaviour comes from the command executor, the real side runs
tools/realmesos' rewrite of upstream's executor (the agent, containerizer and master are
upstream's own code).
"""

from __future__ import annotations

import getpass
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.mesos_emulator.status import TERMINAL_STATES
from tests.mesos_fixtures import start_emulator
from tests.real_mesos import RealMesos
from tfdeclare.backends.mesos.client import ClientConfig, SchedulerClient
from tfdeclare.backends.mesos.events import BaseHandler, Offer, TaskStatus
from tfdeclare.backends.mesos.info import Capability, FrameworkInfo

pytestmark = [pytest.mark.real_mesos, pytest.mark.slow]

RESOURCES = "cpus:4;mem:4096;ports:[31000-31099]"


class Probe(BaseHandler):
    """A scheduler that records what the master sends it."""

    def __init__(
        self, master: str, capabilities: tuple[Capability, ...] = (), roles: tuple[str, ...] = ()
    ) -> None:
        self.changed = threading.Condition()
        self.offers_seen: list[Offer] = []
        self.updates: list[TaskStatus] = []
        self.subscribed_info: dict[str, Any] = {}
        info = FrameworkInfo(
            user=getpass.getuser(), name="probe", failover_timeout=0.0, capabilities=capabilities, roles=roles
        )
        self.client = SchedulerClient(
            ClientConfig(master=master, framework=info, subscribe_timeout=20.0), self
        )
        self.client.start()
        self.client.wait_subscribed(20.0)

    def subscribed(self, framework_id: str, heartbeat_interval: float, master_info: dict[str, Any]) -> None:
        with self.changed:
            self.subscribed_info = {"heartbeat": heartbeat_interval, "master_info": master_info}
            self.changed.notify_all()

    def offers(self, offers: Any) -> None:
        with self.changed:
            self.offers_seen.extend(offers)
            self.changed.notify_all()

    def update(self, status: TaskStatus) -> None:
        with self.changed:
            self.updates.append(status)
            self.changed.notify_all()

    def wait(self, ready: Callable[[], Any], timeout: float = 30.0) -> Any:
        deadline = time.monotonic() + timeout
        with self.changed:
            while not (value := ready()):
                left = deadline - time.monotonic()
                assert left > 0, (
                    f"not reached in {timeout} s; updates: {[(u.task_id, u.state) for u in self.updates]}"
                )
                self.changed.wait(left)
            return value

    def offer(self) -> Offer:
        offer: Offer = self.wait(lambda: self.offers_seen[-1] if self.offers_seen else None)
        with self.changed:
            self.offers_seen.clear()
        return offer

    def launch(self, task_id: str, argv: list[str], *, cpus: float = 0.5, user: str | None = None) -> Offer:
        offer = self.offer()
        command: dict[str, Any] = {"shell": False, "value": argv[0], "arguments": argv}
        if user is not None:
            command["user"] = user
        allocation = (
            {"allocation_info": offer.raw["allocation_info"]} if "allocation_info" in offer.raw else {}
        )
        task = {
            "name": task_id,
            "task_id": {"value": task_id},
            "agent_id": {"value": offer.agent_id},
            "resources": [
                {"name": "cpus", "type": "SCALAR", "scalar": {"value": cpus}, "role": "*", **allocation},
                {"name": "mem", "type": "SCALAR", "scalar": {"value": 64}, "role": "*", **allocation},
            ],
            "command": command,
        }
        self.client.launch([offer.id], [task], refuse_seconds=0.0)
        return offer

    def of(self, task_id: str) -> list[TaskStatus]:
        with self.changed:
            return [u for u in self.updates if u.task_id == task_id]

    def ended(self, task_id: str) -> list[TaskStatus]:
        return self.wait(lambda: (u := self.of(task_id)) and u[-1].state in TERMINAL_STATES and u)  # type: ignore[no-any-return]

    def close(self) -> None:
        self.client.teardown()


@pytest.fixture(params=["emulator", "real"])
def master(
    request: pytest.FixtureRequest, tmp_path: Path, real_mesos: Callable[..., RealMesos]
) -> Iterator[str]:
    if request.param == "real":
        yield real_mesos(agents=1, resources=RESOURCES).url
        return
    emulator = start_emulator(tmp_path, agent_resources=RESOURCES)
    try:
        yield emulator.url
    finally:
        emulator.stop()


def test_a_multi_role_framework_is_offered_with_the_allocation_role(master: str) -> None:
    made = Probe(master, (Capability.MULTI_ROLE,), roles=("*",))
    try:
        raw = made.offer().raw
        assert raw["allocation_info"] == {"role": "*"}
        assert all(r["allocation_info"] == {"role": "*"} for r in raw["resources"])
    finally:
        made.close()


@pytest.fixture
def probe(master: str) -> Iterator[Probe]:
    made = Probe(master, (Capability.TASK_KILLING_STATE, Capability.PARTITION_AWARE))
    try:
        yield made
    finally:
        made.close()


def summary(updates: list[TaskStatus]) -> list[tuple[str, str | None, str | None]]:
    return [(u.state, u.source, u.reason) for u in updates]


def test_a_task_that_exits_0_is_finished(probe: Probe) -> None:
    probe.launch("ok", [sys.executable, "-c", "pass"])
    updates = probe.ended("ok")
    assert summary(updates) == [
        ("TASK_STARTING", "SOURCE_EXECUTOR", None),
        ("TASK_RUNNING", "SOURCE_EXECUTOR", None),
        ("TASK_FINISHED", "SOURCE_EXECUTOR", None),
    ]
    assert updates[-1].message == "Command exited with status 0"
    assert all(u.uuid for u in updates), "executor updates carry a uuid"


def test_a_task_that_exits_3_failed_with_the_status_in_the_message(probe: Probe) -> None:
    probe.launch("bad", [sys.executable, "-c", "import sys; sys.exit(3)"])
    updates = probe.ended("bad")
    assert [u.state for u in updates] == ["TASK_STARTING", "TASK_RUNNING", "TASK_FAILED"]
    assert (updates[-1].source, updates[-1].reason) == ("SOURCE_EXECUTOR", None)
    assert updates[-1].message == "Command exited with status 3"


def test_a_killed_task_goes_through_killing_to_killed(probe: Probe) -> None:
    probe.launch("victim", [sys.executable, "-c", "import time; time.sleep(60)"])
    probe.wait(lambda: "TASK_RUNNING" in [u.state for u in probe.of("victim")])
    probe.client.kill("victim", grace_period=5.0)
    updates = probe.ended("victim")
    assert [u.state for u in updates] == ["TASK_STARTING", "TASK_RUNNING", "TASK_KILLING", "TASK_KILLED"]
    assert updates[-1].message == "Command terminated with signal Terminated"


def test_every_executor_update_carries_the_container_status(probe: Probe) -> None:
    """Slave::statusUpdate asks the containerizer for the container's status for each update
    of a launched task, not only TASK_RUNNING's."""
    probe.launch("where", [sys.executable, "-c", "pass"])
    updates = probe.ended("where")
    assert [u.state for u in updates] == ["TASK_STARTING", "TASK_RUNNING", "TASK_FINISHED"]
    for update in updates:
        container = update.raw.get("container_status") or {}
        assert container["network_infos"][0]["ip_addresses"][0]["ip_address"] == "127.0.0.1", update.raw
        assert container["container_id"]["value"]


def test_a_task_asking_more_than_offered_is_an_error_with_upstreams_words(probe: Probe) -> None:
    probe.launch("greedy", [sys.executable, "-c", "pass"], cpus=64.0)
    [update] = probe.ended("greedy")
    assert (update.state, update.source, update.reason) == (
        "TASK_ERROR",
        "SOURCE_MASTER",
        "REASON_TASK_INVALID",
    )
    assert update.message is not None and update.message.startswith("Total resources cpus(allocated: *):64;")
    # (the available resources are listed in the agent's order, which differs)
    assert " required by task and its executor is more than available " in update.message
    assert "cpus(allocated: *):4;" in update.message
    assert update.uuid is None, "master updates have no uuid"


def test_reconciling_an_unknown_task_answers_unknown_from_the_master(probe: Probe) -> None:
    probe.client.reconcile([("never-launched", None)])
    [update] = probe.wait(lambda: probe.of("never-launched"))
    assert (update.state, update.source, update.reason) == (
        "TASK_UNKNOWN",
        "SOURCE_MASTER",
        "REASON_RECONCILIATION",
    )
    assert update.message == "Reconciliation: Task is unknown"


def test_an_offer_has_upstreams_shape(probe: Probe) -> None:
    """Without MULTI_ROLE, no ``allocation_info`` on the offer or its resources (MESOS-8237)."""
    offer = probe.offer()
    raw = offer.raw
    assert {"id", "framework_id", "agent_id", "hostname", "resources", "url"} <= set(raw)
    assert "allocation_info" not in raw
    assert raw["url"]["path"].startswith("/slave(")
    by_name = {r["name"]: r for r in raw["resources"]}
    assert {"cpus", "mem", "ports"} <= set(by_name)
    assert by_name["cpus"] == {"name": "cpus", "type": "SCALAR", "scalar": {"value": 4.0}, "role": "*"}
    assert by_name["ports"]["ranges"] == {"range": [{"begin": 31000, "end": 31099}]}


def test_subscribed_names_the_master_and_a_heartbeat(probe: Probe) -> None:
    info = probe.wait(lambda: probe.subscribed_info)
    assert info["heartbeat"] > 0
    assert {"id", "ip", "port", "hostname", "version"} <= set(info["master_info"])
    assert info["master_info"]["version"] == "1.11.0"


def test_a_task_as_a_user_the_agent_does_not_have_is_dropped_by_the_agent(probe: Probe) -> None:
    probe.launch("nobody-here", [sys.executable, "-c", "pass"], user="no-such-user-tfd")
    [final] = probe.ended("nobody-here")
    assert (final.state, final.source, final.reason) == (
        "TASK_DROPPED",
        "SOURCE_AGENT",
        "REASON_EXECUTOR_TERMINATED",
    )
    assert final.message is not None and final.message.startswith("Failed to create executor directory '")
    assert final.message.endswith(
        ": Failed to chown directory to 'no-such-user-tfd': No such user 'no-such-user-tfd'"
    )


def test_explicit_and_implicit_reconciliation_of_a_running_task(probe: Probe) -> None:
    offer = probe.launch("steady", [sys.executable, "-c", "import time; time.sleep(60)"])
    probe.wait(lambda: "TASK_RUNNING" in [u.state for u in probe.of("steady")])
    seen = len(probe.of("steady"))
    probe.client.reconcile([("steady", offer.agent_id)])
    explicit = probe.wait(lambda: probe.of("steady")[seen:])[0]
    assert (explicit.state, explicit.source, explicit.reason) == (
        "TASK_RUNNING",
        "SOURCE_MASTER",
        "REASON_RECONCILIATION",
    )
    assert explicit.uuid is None and explicit.message == "Reconciliation: Latest task state"
    seen = len(probe.of("steady"))
    probe.client.reconcile([])
    implicit = probe.wait(lambda: probe.of("steady")[seen:])[0]
    assert (implicit.state, implicit.reason) == ("TASK_RUNNING", "REASON_RECONCILIATION")
    probe.client.kill("steady", grace_period=1.0)
    probe.ended("steady")


def test_kill_of_an_unknown_task_is_answered_by_reconciliation(probe: Probe) -> None:
    probe.client.kill("ghost")
    [update] = probe.wait(lambda: probe.of("ghost"))
    assert (update.state, update.source, update.reason) == (
        "TASK_UNKNOWN",
        "SOURCE_MASTER",
        "REASON_RECONCILIATION",
    )


def test_get_agents_lists_each_agents_resources(master: str) -> None:
    import httpx

    answer = httpx.post(
        master + "/api/v1",
        json={"type": "GET_AGENTS"},
        headers={"Accept": "application/json"},
        timeout=30,
    )
    assert answer.status_code == 200
    [agent] = answer.json()["get_agents"]["agents"]
    assert {"agent_info", "total_resources", "active", "pid"} <= set(agent)
    total = {r["name"]: r for r in agent["total_resources"]}
    assert total["cpus"]["scalar"] == {"value": 4.0}
    assert agent["agent_info"]["id"]["value"] and agent["agent_info"]["hostname"] == "127.0.0.1"
