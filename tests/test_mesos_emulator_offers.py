"""Emulator conformance: offers, filters, suppression, ACCEPT validation, GPU filtering."""

from __future__ import annotations

import time
from typing import Any

from tests.mesos_emulator import Emulator
from tests.test_mesos_emulator_helpers import (
    FAST,
    Subscriber,
    command_task,
    emulator,
    framework_info,
    subscribe,
    subscribers,
)

__all__ = ["emulator", "subscribers"]


def _oid(offer: dict[str, Any]) -> str:
    return str(offer["id"]["value"])


def test_offer_shape_pre_refinement(emulator: Emulator, subscribers: list[Subscriber]) -> None:
    sub = subscribe(emulator, subscribers)
    offer = sub.offers()[0]
    agent = emulator.agents()[0]
    assert offer["agent_id"]["value"] == agent["id"]
    assert offer["framework_id"]["value"] == sub.framework_id
    assert _oid(offer).startswith(emulator.master_id + "-O")
    assert offer["hostname"] == "127.0.0.1"
    port = int(emulator.agent_url.rsplit(":", 1)[1])
    assert offer["url"] == {
        "scheme": "http",
        "address": {"hostname": "127.0.0.1", "ip": "127.0.0.1", "port": port},
        "path": "/slave(1)",
    }
    # Not MULTI_ROLE: no allocation_info on the offer or its resources (MESOS-8237; checked
    # against the real master, tests/test_real_mesos_parity.py)
    assert "allocation_info" not in offer
    assert "attributes" not in offer and "executor_ids" not in offer  # empty lists omitted
    by_name = {r["name"]: r for r in offer["resources"]}
    assert by_name["cpus"] == {"name": "cpus", "type": "SCALAR", "scalar": {"value": 4.0}, "role": "*"}
    assert by_name["ports"]["ranges"] == {"range": [{"begin": 31000, "end": 31009}]}
    assert list(by_name["cpus"]) == ["name", "type", "scalar", "role"]


def test_offer_shape_with_refinement_and_attributes(subscribers: list[Subscriber]) -> None:
    with Emulator(**{**FAST, "agent_attributes": "rack:r1;gen:3;zones:{a,b}"}) as emu:
        sub = Subscriber(emu.url, framework_info(capabilities=["RESERVATION_REFINEMENT"])).subscribe()
        subscribers.append(sub)
        offer = sub.offers()[0]
        assert all("role" not in r and "reservations" not in r for r in offer["resources"])
        assert offer["attributes"] == [
            {"name": "rack", "type": "TEXT", "text": {"value": "r1"}},
            {"name": "gen", "type": "SCALAR", "scalar": {"value": 3.0}},
            {"name": "zones", "type": "SET", "set": {"item": ["a", "b"]}},
        ]
        sub.close()


def test_each_agent_gets_disjoint_ports_and_slave_paths(subscribers: list[Subscriber]) -> None:
    with Emulator(**{**FAST, "agents": 3}) as emu:
        sub = Subscriber(emu.url, framework_info()).subscribe()
        subscribers.append(sub)
        offers = sub.offers(3)
        ports = sorted(
            (r["ranges"]["range"][0]["begin"], r["ranges"]["range"][0]["end"])
            for o in offers
            for r in o["resources"]
            if r["name"] == "ports"
        )
        assert ports == [(31000, 31009), (31010, 31019), (31020, 31029)]
        assert sorted(o["url"]["path"] for o in offers) == ["/slave(1)", "/slave(2)", "/slave(3)"]
        sub.close()


def test_decline_filter_durations(emulator: Emulator, subscribers: list[Subscriber]) -> None:
    sub = subscribe(emulator, subscribers)
    # refuse_seconds 0: no filter, the agent comes straight back.
    sub.decline([_oid(sub.offers()[0])], refuse_seconds=0)
    offer = sub.offers(timeout=0.5)[0]
    # A short filter holds the agent back for that long (but at least one interval).
    start = time.monotonic()
    sub.decline([_oid(offer)], refuse_seconds=0.4)
    offer = sub.offers(timeout=2)[0]
    assert time.monotonic() - start >= 0.35
    # Absent or negative refuse_seconds mean the 5 s default; huge values are capped.
    for refuse in (None, -3.0, 1e12):
        sub.decline([_oid(offer)], refuse_seconds=refuse)
        sub.no_event("OFFERS", within=0.3)
        assert emulator.frameworks()[0]["filters"] == 1
        assert sub.call("REVIVE").status_code == 202  # clears the filter
        offer = sub.offers(timeout=1)[0]


def test_filter_only_hides_subsets_of_what_was_refused(
    emulator: Emulator, subscribers: list[Subscriber]
) -> None:
    sub = subscribe(emulator, subscribers)
    offer = sub.offers()[0]
    task = command_task("t1", offer, "sleep 0.3", cpus=1, mem=128)
    sub.accept([_oid(offer)], [task], refuse_seconds=30)
    # The rest (3 cpus ...) is filtered for 30 s: nothing while the task runs.
    sub.no_event("OFFERS", within=0.2)
    for state in ("TASK_STARTING", "TASK_RUNNING", "TASK_FINISHED"):
        sub.ack(sub.update("t1", state))
    # Once the task frees its cpu the free pool is no longer a subset: offered again.
    again = sub.offers(timeout=2)[0]
    cpus = next(r for r in again["resources"] if r["name"] == "cpus")
    assert cpus["scalar"]["value"] == 4.0


def test_suppress_keeps_outstanding_offers_and_revive_resumes(
    emulator: Emulator, subscribers: list[Subscriber]
) -> None:
    sub = subscribe(emulator, subscribers)
    offer = sub.offers()[0]
    assert sub.call("SUPPRESS", {}).status_code == 202
    sub.no_event("RESCIND", within=0.05)
    assert [o["id"] for o in emulator.offers()] == [_oid(offer)]
    sub.decline([_oid(offer)], refuse_seconds=0)
    sub.no_event("OFFERS", within=0.3)
    assert emulator.frameworks()[0]["suppressed_roles"] == ["*"]
    assert sub.call("REVIVE", {"roles": ["*"]}).status_code == 202
    sub.offers(timeout=1)
    # Roles the framework is not subscribed to make the call a (silent) no-op.
    assert sub.call("SUPPRESS", {"roles": ["other"]}).status_code == 202
    assert emulator.frameworks()[0]["suppressed_roles"] == []


def test_invalid_offers_lose_or_drop_tasks(emulator: Emulator, subscribers: list[Subscriber]) -> None:
    plain = subscribe(emulator, subscribers, name="plain")
    aware = subscribe(emulator, subscribers, name="aware", capabilities=["PARTITION_AWARE"])
    # Whoever got the offer, use the other framework with a bogus offer id.
    for sub, state in ((plain, "TASK_LOST"), (aware, "TASK_DROPPED")):
        fake = {"agent_id": {"value": emulator.agent_ids()[0]}}
        sub.accept(["no-such-offer"], [command_task(f"x-{state}", fake)])
        status = sub.update(f"x-{state}")
        assert status["state"] == state
        assert status["reason"] == "REASON_INVALID_OFFERS" and status["source"] == "SOURCE_MASTER"
        assert (
            status["message"] == "Task launched with invalid offers: Offer no-such-offer is no longer valid"
        )
        assert "uuid" not in status


def test_offer_set_validation(emulator: Emulator, subscribers: list[Subscriber]) -> None:
    emulator.add_agent()
    sub = subscribe(emulator, subscribers)
    first, second = sub.offers(2)
    fake = {"agent_id": first["agent_id"]}
    sub.accept([_oid(first), _oid(first)], [command_task("dup", fake)])
    assert sub.update("dup")["message"] == (
        f"Task launched with invalid offers: Duplicate offer {_oid(first)} in offer list"
    )
    # The valid offer of a failed ACCEPT is recovered (no filter): it comes back.
    offers = {_oid(o): o for o in sub.offers(1, timeout=2)}
    first = next(iter(offers.values()))
    sub.accept([_oid(first), _oid(second)], [command_task("two", fake)])
    assert "Aggregated offers must belong to one single agent" in sub.update("two")["message"]
    sub.call(
        "ACCEPT",
        {
            "offer_ids": [],
            "operations": [{"type": "LAUNCH", "launch": {"task_infos": [command_task("none", fake)]}}],
        },
    )
    assert sub.update("none")["message"] == "Task launched with invalid offers: No offers specified"
    # An offer id is single use.
    offer = sub.offers(1, timeout=2)[0]
    sub.accept([_oid(offer)], [])
    sub.accept([_oid(offer)], [command_task("reuse", offer)])
    assert sub.update("reuse")["message"].endswith(f"Offer {_oid(offer)} is no longer valid")
    assert emulator.check_invariants() == []


def _task_error(sub: Subscriber, task_id: str) -> str:
    status = sub.update(task_id)
    assert status["state"] == "TASK_ERROR" and status["reason"] == "REASON_TASK_INVALID", status
    assert status["source"] == "SOURCE_MASTER" and "uuid" not in status
    return str(status["message"])


def test_task_validation_messages(emulator: Emulator, subscribers: list[Subscriber]) -> None:
    sub = subscribe(emulator, subscribers, capabilities=["GPU_RESOURCES"])
    offer = sub.offers()[0]
    agent = offer["agent_id"]["value"]
    no_resources = command_task("nores", offer)
    no_resources["resources"] = []
    neither = command_task("neither", offer)
    del neither["command"]
    both = command_task("both", offer)
    both["executor"] = {"executor_id": {"value": "e"}, "command": {"value": "x"}}
    tasks = [
        command_task("ok", offer, "sleep 5", cpus=3),
        command_task("ok", offer, "true", cpus=0.1),
        command_task("bad/id", offer),
        command_task("wrong-agent", {"agent_id": {"value": "other"}}),
        command_task("grace", offer, extra={"kill_policy": {"grace_period": {"nanoseconds": -1}}}),
        no_resources,
        command_task("negative", offer, cpus=-1),
        command_task("fraction", offer, gpus=0.5),
        neither,
        both,
        command_task("too-big", offer, cpus=2),
        command_task("bad-port", offer, ports=[40000]),
        command_task(
            "env", offer, extra={"command": {"value": "true", "environment": {"variables": [{"name": "A"}]}}}
        ),
        command_task("docker", offer, extra={"container": {"type": "DOCKER"}}),
    ]
    sub.accept([_oid(offer)], tasks)
    sub.update("ok", "TASK_STARTING")
    expected = {
        "ok": "Task has duplicate ID: ok",
        "bad/id": "'bad/id' contains invalid characters",
        "wrong-agent": f"Task uses invalid agent other while agent {agent} is expected",
        "grace": "Task's 'kill_policy.grace_period' must be non-negative",
        "nores": "Task uses no resources",
        "negative": "Task uses invalid resources: Invalid resources: Resource "
        "'cpus(allocated: *):-1' is invalid: Invalid scalar resource: value < 0",
        "fraction": "Task uses invalid resources: Invalid 'gpus' resource: "
        "The 'gpus' resource must be an unsigned integer",
        "neither": "Task should have at least one (but not both) of CommandInfo or ExecutorInfo present",
        "both": "Task should have at least one (but not both) of CommandInfo or ExecutorInfo present",
        "env": "Task's `CommandInfo` is invalid: Environment variable 'A' of type 'VALUE' "
        "must have a value set",
        "docker": "Task's `ContainerInfo` is invalid: DockerInfo 'docker' is not set for "
        "DOCKER typed ContainerInfo",
    }
    for task_id, message in expected.items():
        assert _task_error(sub, task_id) == message, task_id
    # Resources are consumed in order: after 3 cpus only 1 is left for "too-big".
    too_big = _task_error(sub, "too-big")
    assert too_big.startswith(
        "Total resources cpus(allocated: *):2; mem(allocated: *):64 required by task and its "
        "executor is more than available cpus(allocated: *):1; "
    )
    assert "is more than available" in _task_error(sub, "bad-port")
    agents = emulator.agents()
    assert list(agents[0]["used"].values()) == ["cpus:3; mem:64"]
    assert emulator.check_invariants() == []


def test_missing_required_task_fields_are_a_400(emulator: Emulator, subscribers: list[Subscriber]) -> None:
    sub = subscribe(emulator, subscribers)
    offer = sub.offers()[0]
    task = command_task("t", offer)
    del task["agent_id"]
    response = sub.call(
        "ACCEPT",
        {"offer_ids": [offer["id"]], "operations": [{"type": "LAUNCH", "launch": {"task_infos": [task]}}]},
    )
    assert response.status_code == 400
    assert response.text.endswith(
        "Missing required fields: accept.operations[0].launch.task_infos[0].agent_id"
    )
    docker = command_task("d", offer, extra={"container": {"type": "DOCKER", "docker": {}}})
    response = sub.call(
        "ACCEPT",
        {"offer_ids": [offer["id"]], "operations": [{"type": "LAUNCH", "launch": {"task_infos": [docker]}}]},
    )
    assert response.status_code == 400 and "container.docker.image" in response.text


def test_gpu_agents_are_only_offered_to_gpu_frameworks(subscribers: list[Subscriber]) -> None:
    with Emulator(**FAST) as emu:
        gpu_agent = emu.add_agent(gpus=2)
        cpu_only = Subscriber(emu.url, framework_info("cpu")).subscribe()
        subscribers.append(cpu_only)
        for _ in range(3):
            offer = cpu_only.offers()[0]
            assert offer["agent_id"]["value"] != gpu_agent
            cpu_only.decline([_oid(offer)], refuse_seconds=0)
        gpu = Subscriber(emu.url, framework_info("gpu", capabilities=["GPU_RESOURCES"])).subscribe()
        subscribers.append(gpu)
        offer = gpu.next(
            "OFFERS",
            lambda e: any(o["agent_id"]["value"] == gpu_agent for o in e["offers"]["offers"]),
            timeout=3,
        )
        gpu_offer = next(o for o in offer["offers"]["offers"] if o["agent_id"]["value"] == gpu_agent)
        gpus = next(r for r in gpu_offer["resources"] if r["name"] == "gpus")
        assert gpus["scalar"]["value"] == 2.0
        gpu.accept([_oid(gpu_offer)], [command_task("g", gpu_offer, "true", gpus=1)])
        assert gpu.update("g")["state"] == "TASK_STARTING"
        cpu_only.close()
        gpu.close()
    with Emulator(
        **{**FAST, "filter_gpu_resources": False, "agent_resources": "cpus:1;mem:64;gpus:1"}
    ) as emu:
        sub = Subscriber(emu.url, framework_info("cpu")).subscribe()
        subscribers.append(sub)
        assert any(r["name"] == "gpus" for r in sub.offers()[0]["resources"])
        sub.close()


def test_offer_timeout_rescinds(subscribers: list[Subscriber]) -> None:
    with Emulator(**{**FAST, "offer_timeout": 0.2}) as emu:
        sub = Subscriber(emu.url, framework_info()).subscribe()
        subscribers.append(sub)
        offer = sub.offers()[0]
        assert sub.next("RESCIND", timeout=2)["rescind"]["offer_id"] == offer["id"]
        sub.offers(timeout=2)
        sub.close()


def test_two_frameworks_share_agents(subscribers: list[Subscriber]) -> None:
    with Emulator(**{**FAST, "agents": 4}) as emu:
        a = Subscriber(emu.url, framework_info("a")).subscribe()
        subscribers.append(a)
        first = a.offers(4)  # alone, it gets every agent
        b = Subscriber(emu.url, framework_info("b")).subscribe()
        subscribers.append(b)
        b.next("SUBSCRIBED")
        a.decline([_oid(o) for o in first], refuse_seconds=0)
        emu.wait_for(lambda e: len(e.offers()) == 4, timeout=2)
        owners = [o["framework_id"] for o in emu.offers()]
        assert sorted(owners) == sorted([a.framework_id, a.framework_id, b.framework_id, b.framework_id])
        assert emu.check_invariants() == []
        a.close()
        b.close()


def test_unsupported_operations_are_reported(emulator: Emulator, subscribers: list[Subscriber]) -> None:
    sub = subscribe(emulator, subscribers)
    offer = sub.offers()[0]
    group_task = command_task("grp", offer)
    custom = command_task("custom", offer)
    del custom["command"]
    custom["executor"] = {"executor_id": {"value": "ex"}, "command": {"value": "my-executor"}}
    operations = [
        {"type": "RESERVE", "id": {"value": "op-1"}, "reserve": {"resources": []}},
        {
            "type": "LAUNCH_GROUP",
            "launch_group": {
                "executor": {"executor_id": {"value": "default"}, "type": "DEFAULT"},
                "task_group": {"tasks": [group_task]},
            },
        },
        {"type": "LAUNCH", "launch": {"task_infos": [custom]}},
    ]
    sub.accept([_oid(offer)], operations=operations)
    status = sub.next("UPDATE_OPERATION_STATUS")["update_operation_status"]["status"]
    assert status["operation_id"] == {"value": "op-1"} and status["state"] == "OPERATION_ERROR"
    grp = sub.update("grp")
    assert (grp["state"], grp["reason"]) == ("TASK_ERROR", "REASON_TASK_GROUP_INVALID")
    failed = sub.update("custom")
    assert (failed["state"], failed["reason"]) == ("TASK_FAILED", "REASON_CONTAINER_LAUNCH_FAILED")
    sub.ack(failed)
    assert emulator.check_invariants() == []


def test_filters_are_per_role(emulator: Emulator, subscribers: list[Subscriber]) -> None:
    sub = subscribe(emulator, subscribers, capabilities=["MULTI_ROLE"], roles=["a", "b"])
    offer = sub.offers()[0]
    assert offer["allocation_info"] == {"role": "a"}
    assert {r["allocation_info"]["role"] for r in offer["resources"]} == {"a"}
    sub.decline([_oid(offer)], refuse_seconds=30)
    again = sub.offers(timeout=2)[0]
    assert again["allocation_info"] == {"role": "b"}  # the filter only covers role a
    task = command_task("t", offer)  # resources allocated to role a, offer for role b
    task["resources"][0]["allocation_info"] = {"role": "a"}
    sub.accept([_oid(again)], [task])
    status = sub.update("t")
    assert status["state"] == "TASK_ERROR"
    assert status["message"].startswith(
        "Invalid task resources: The resources have multiple allocation roles ('b' and 'a')"
    )
