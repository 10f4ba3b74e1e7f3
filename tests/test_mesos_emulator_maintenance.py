"""Emulator conformance: drains (``DRAIN_AGENT``), maintenance schedules and inverse offers,
driven over the wire as upstream Mesos 1.11 answers them (the operator API and a raw
subscriber; ``tests/mesos_emulator/maintenance.py`` says what is modelled)."""

from __future__ import annotations

import time
from typing import Any

import httpx

from tests.mesos_emulator import Emulator
from tests.test_mesos_emulator_helpers import Subscriber, command_task, emulator, subscribe, subscribers
from tests.waiting import wait_until

__all__ = ["emulator", "subscribers"]

AWARE = ["PARTITION_AWARE", "TASK_KILLING_STATE"]
TRAP = "trap 'echo stopping; sleep 0.3; exit 0' TERM; while true; do sleep 0.05; done"


def _start(sub: Subscriber, offer: dict[str, Any], task_id: str, grace: float | None = None) -> None:
    extra = (
        {"kill_policy": {"grace_period": {"nanoseconds": int(grace * 1e9)}}} if grace is not None else None
    )
    sub.accept([offer["id"]["value"]], [command_task(task_id, offer, TRAP, extra=extra)], refuse_seconds=0)
    sub.ack(sub.update(task_id, "TASK_STARTING"))
    sub.ack(sub.update(task_id, "TASK_RUNNING"))


def _operator(emulator: Emulator, call: dict[str, Any]) -> httpx.Response:
    return httpx.post(f"{emulator.url}/api/v1", json=call, timeout=5)


def test_a_drain_kills_with_the_draining_reason_and_the_agent_gets_no_more_offers(
    emulator: Emulator, subscribers: list[Subscriber]
) -> None:
    sub = subscribe(emulator, subscribers, capabilities=AWARE)
    offer = sub.offers()[0]
    agent_id = offer["agent_id"]["value"]
    _start(sub, offer, "t", grace=5.0)
    drain = {"agent_id": {"value": agent_id}, "max_grace_period": {"nanoseconds": 2_000_000_000}}
    response = _operator(emulator, {"type": "DRAIN_AGENT", "drain_agent": drain})
    assert response.status_code == 200, response.text
    killing = sub.update("t", "TASK_KILLING", timeout=3)
    assert killing["reason"] == "REASON_AGENT_DRAINING"
    sub.ack(killing)
    killed = sub.update("t", "TASK_KILLED", timeout=5)  # its SIGTERM trap ran: a graceful stop
    assert killed["reason"] == "REASON_AGENT_DRAINING"
    sub.ack(killed)
    [listed] = _operator(emulator, {"type": "GET_AGENTS"}).json()["get_agents"]["agents"]
    assert listed["deactivated"] is True
    assert listed["drain_info"]["state"] == "DRAINED"
    assert listed["drain_info"]["config"]["max_grace_period"] == {"nanoseconds": 2_000_000_000}
    cycles = emulator.allocation_cycles()
    # many allocation cycles: a deactivated agent is offered to no one
    emulator.wait_for(lambda e: e.allocation_cycles() >= cycles + 5)
    assert emulator.offers() == []
    emulator.reactivate_agent(agent_id)
    assert sub.offers()[0]["agent_id"]["value"] == agent_id
    assert emulator.drain_info(agent_id) is None


def test_a_drain_with_mark_gone_answers_gone_by_operator(
    emulator: Emulator, subscribers: list[Subscriber]
) -> None:
    sub = subscribe(emulator, subscribers, capabilities=["PARTITION_AWARE"])
    offer = sub.offers()[0]
    agent_id = offer["agent_id"]["value"]
    _start(sub, offer, "t")
    emulator.drain_agent(agent_id, max_grace_period=1.0, mark_gone=True)
    gone = sub.update("t", "TASK_GONE_BY_OPERATOR", timeout=5)
    assert gone["reason"] == "REASON_AGENT_DRAINING" and "uuid" in gone
    sub.ack(gone)
    wait_until(
        lambda: emulator.agents()[0]["state"] == "gone", 20
    )  # DRAINED, then marked gone: removed for good


def test_a_schedule_puts_unavailability_in_offers_and_sends_inverse_offers(
    emulator: Emulator, subscribers: list[Subscriber]
) -> None:
    sub = subscribe(emulator, subscribers, capabilities=AWARE)
    offer = sub.offers()[0]
    agent_id = offer["agent_id"]["value"]
    assert "unavailability" not in offer
    _start(sub, offer, "t")
    start = int((time.time() + 3600) * 1e9)
    window = {"start": {"nanoseconds": start}, "duration": {"nanoseconds": 600 * 10**9}}
    schedule = {
        "windows": [
            {"machine_ids": [{"hostname": offer["hostname"], "ip": "127.0.0.1"}], "unavailability": window}
        ]
    }
    response = _operator(
        emulator,
        {"type": "UPDATE_MAINTENANCE_SCHEDULE", "update_maintenance_schedule": {"schedule": schedule}},
    )
    assert response.status_code == 200, response.text
    inverse = sub.next("INVERSE_OFFERS", timeout=3)["inverse_offers"]["inverse_offers"][0]
    assert inverse["agent_id"]["value"] == agent_id and inverse["unavailability"] == window
    # the offer held before was rescinded and comes again with the window
    assert sub.next("RESCIND", timeout=3)["rescind"]["offer_id"]["value"].endswith("-O2")

    def windowed(event: dict[str, Any]) -> bool:
        return any("unavailability" in o for o in event["offers"]["offers"])

    again = sub.next("OFFERS", windowed, timeout=3)["offers"]["offers"][0]
    assert again["unavailability"] == window and again["agent_id"]["value"] == agent_id
    # one outstanding at a time; a decline with a filter holds the next one back that long
    sub.no_event("INVERSE_OFFERS", within=0.3)
    body = {"inverse_offer_ids": [inverse["id"]], "filters": {"refuse_seconds": 0.5}}
    assert sub.call("DECLINE_INVERSE_OFFERS", body).status_code == 202
    status = emulator.maintenance_status()["draining_machines"][0]["statuses"]
    assert status == [{"framework_id": {"value": sub.framework_id}, "status": "DECLINE"}]
    sub.no_event("INVERSE_OFFERS", within=0.3)
    second = sub.next("INVERSE_OFFERS", timeout=3)["inverse_offers"]["inverse_offers"][0]
    assert second["id"] != inverse["id"]
    # once our task is gone and we hold no offer of the agent, no more are sent; an accept is
    # recorded (an offer held counts as resources there, as in upstream's allocator)
    sub.kill("t")
    sub.ack(sub.update("t", "TASK_KILLING"))
    sub.ack(sub.update("t", "TASK_KILLED", timeout=5))
    assert sub.call("SUPPRESS", {}).status_code == 202  # no more offers: hold none of the agent
    # (the master handled the call before it answered: the offers it lists are all there are)
    sub.decline([o["id"] for o in emulator.offers(sub.framework_id)], refuse_seconds=60)
    assert sub.call("ACCEPT_INVERSE_OFFERS", {"inverse_offer_ids": [second["id"]]}).status_code == 202
    status = emulator.maintenance_status()["draining_machines"][0]["statuses"]
    assert status[0]["status"] == "ACCEPT"
    sub.no_event("INVERSE_OFFERS", within=6.0)  # past the default 5 s filter: nothing of ours runs there
    got = _operator(emulator, {"type": "GET_MAINTENANCE_SCHEDULE"}).json()
    assert got["get_maintenance_schedule"]["schedule"] == schedule


def test_an_invalid_schedule_is_refused(emulator: Emulator) -> None:
    bad = {"windows": [{"machine_ids": [], "unavailability": {"start": {"nanoseconds": 0}}}]}
    call = {"type": "UPDATE_MAINTENANCE_SCHEDULE", "update_maintenance_schedule": {"schedule": bad}}
    assert _operator(emulator, call).status_code == 400


def test_a_machine_id_matches_only_with_both_its_hostname_and_ip(
    emulator: Emulator, subscribers: list[Subscriber]
) -> None:
    """Upstream compares machine ids whole: a hostname alone (its IP the empty string)
    matches no agent that announces an IP, so its offers carry no window."""
    sub = subscribe(emulator, subscribers, capabilities=AWARE)
    offer = sub.offers()[0]
    window = {"start": {"nanoseconds": int((time.time() + 60) * 1e9)}}

    def windowed(event: dict[str, Any]) -> bool:
        return any("unavailability" in o for o in event["offers"]["offers"])

    emulator.schedule_maintenance(
        [{"machine_ids": [{"hostname": offer["hostname"]}], "unavailability": window}]
    )
    sub.no_event("RESCIND", within=0.3)  # no machine of the schedule is this agent's
    sub.no_event("OFFERS", within=0.1, predicate=windowed)
    machine = {"hostname": offer["hostname"].upper(), "ip": "127.0.0.1"}  # hostnames: any case
    emulator.schedule_maintenance([{"machine_ids": [machine], "unavailability": window}])
    assert sub.next("OFFERS", windowed, timeout=3)["offers"]["offers"][0]["unavailability"] == window
    # no task of it runs there, but an offer it holds is allocated to it: it is asked too
    inverse = sub.next("INVERSE_OFFERS", timeout=3)["inverse_offers"]["inverse_offers"][0]
    assert inverse["agent_id"] == offer["agent_id"]
