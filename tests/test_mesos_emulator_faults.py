"""Emulator conformance: agent loss and partitions, master restarts, the CLI, guarantees."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

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
from tests.waiting import wait_until

__all__ = ["emulator", "subscribers"]

REPO = Path(__file__).resolve().parent.parent

pytestmark = pytest.mark.slow  # failovers, partitions and timeouts on real timers


def _start(sub: Subscriber, offer: dict[str, Any], task_id: str, refuse: float = 0) -> None:
    sub.accept([offer["id"]["value"]], [command_task(task_id, offer, "sleep 30")], refuse_seconds=refuse)
    sub.ack(sub.update(task_id, "TASK_STARTING"))
    sub.ack(sub.update(task_id, "TASK_RUNNING"))


def _agent_state(emulator: Emulator, agent_id: str) -> str:
    return next(str(a["state"]) for a in emulator.agents() if a["id"] == agent_id)


def test_partition_then_heal(emulator: Emulator, subscribers: list[Subscriber]) -> None:
    plain = subscribe(emulator, subscribers, name="plain")
    _start(plain, plain.offers()[0], "p", refuse=30)
    aware = subscribe(emulator, subscribers, name="aware", capabilities=["PARTITION_AWARE"])
    _start(aware, aware.offers()[0], "a", refuse=0)
    held = aware.offers()[0]
    agent_id = held["agent_id"]["value"]
    emulator.partition_agent(agent_id)
    lost = plain.update("p", "TASK_LOST", timeout=3)
    unreachable = aware.update("a", "TASK_UNREACHABLE", timeout=3)
    for status in (lost, unreachable):
        assert status["reason"] == "REASON_AGENT_REMOVED" and status["source"] == "SOURCE_MASTER"
        assert "uuid" not in status and status["unreachable_time"]["nanoseconds"] > 0
        assert status["message"] == "health check timed out"
    assert aware.next("RESCIND", timeout=2)["rescind"]["offer_id"] == held["id"]
    for sub in (plain, aware):
        assert sub.next("FAILURE", timeout=2) == {
            "type": "FAILURE",
            "failure": {"agent_id": {"value": agent_id}},
        }
    assert len(emulator.processes()) == 2  # the tasks keep running behind the partition
    assert _agent_state(emulator, agent_id) == "unreachable"
    aware.reconcile([("a", agent_id)])
    assert aware.update("a")["state"] == "TASK_UNREACHABLE"
    emulator.heal_agent(agent_id)
    for sub, task_id in ((plain, "p"), (aware, "a")):
        back = sub.update(task_id, "TASK_RUNNING", timeout=3)
        assert back["reason"] == "REASON_AGENT_REREGISTERED" and "uuid" not in back
        assert back["message"] == "Unreachable agent re-reregistered"
    assert _agent_state(emulator, agent_id) == "registered"
    aware.reconcile([("a", agent_id)])
    assert aware.update("a")["state"] == "TASK_RUNNING"
    assert emulator.check_invariants() == []


def test_short_partition_is_invisible(subscribers: list[Subscriber]) -> None:
    # One missed ping of 1 s, far from the 3 s after which the agent would be unreachable: a
    # loaded machine cannot stretch the partition that much (with pings of 0.05 s it could).
    with Emulator(**{**FAST, "agent_ping_timeout": 1.0}) as emulator:
        sub = subscribe(emulator, subscribers, capabilities=["PARTITION_AWARE"])
        offer = sub.offers()[0]
        sub.accept([offer["id"]["value"]], [command_task("t", offer, "exit 0")])
        agent_id = offer["agent_id"]["value"]
        emulator.partition_agent(agent_id)

        def missed() -> bool:
            return any(a["id"] == agent_id and a["ping_misses"] >= 1 for a in emulator.agents())

        emulator.wait_for(lambda e: missed(), timeout=10)  # the partition: a ping missed, not 3
        emulator.heal_agent(agent_id)
        for state in ("TASK_STARTING", "TASK_RUNNING", "TASK_FINISHED"):
            sub.ack(sub.update("t", state, timeout=10))
        sub.no_event("FAILURE", within=0.2)
        assert emulator.check_invariants() == []


def test_agent_disconnect_loses_non_checkpointing_tasks(subscribers: list[Subscriber]) -> None:
    with Emulator(**{**FAST, "agent_reregister_timeout": 0.3}) as emu:
        agent_id = emu.agent_ids()[0]
        plain = Subscriber(emu.url, framework_info("plain")).subscribe()
        subscribers.append(plain)
        _start(plain, plain.offers()[0], "p", refuse=30)
        durable = Subscriber(emu.url, framework_info("durable", checkpoint=True)).subscribe()
        subscribers.append(durable)
        _start(durable, durable.offers()[0], "d", refuse=30)
        emu.disconnect_agent(agent_id)
        lost = plain.update("p", "TASK_LOST")
        assert lost["reason"] == "REASON_AGENT_DISCONNECTED"
        assert lost["message"] == "Agent 127.0.0.1 disconnected" and "uuid" not in lost
        durable.no_event("UPDATE", within=0.1)
        # Not back within --agent_reregister_timeout: unreachable.
        assert durable.update("d", "TASK_LOST", timeout=3)["reason"] == "REASON_AGENT_REMOVED"
        durable.next("FAILURE")
        plain.close()
        durable.close()


def test_agent_restart_without_its_tasks(emulator: Emulator, subscribers: list[Subscriber]) -> None:
    sub = subscribe(emulator, subscribers, checkpoint=True, capabilities=["PARTITION_AWARE"])
    offer = sub.offers()[0]
    _start(sub, offer, "t")
    agent_id = offer["agent_id"]["value"]
    emulator.kill_agent(agent_id)
    emulator.wait_for(lambda e: not e.processes(), timeout=3)  # its tasks died with it
    emulator.restart_agent(agent_id)
    dropped = sub.update("t", "TASK_DROPPED", timeout=3)
    assert dropped["source"] == "SOURCE_AGENT" and dropped["reason"] == "REASON_RECONCILIATION"
    assert dropped["message"] == "Reconciliation: task unknown to the agent"
    assert "uuid" in dropped  # agent-generated: must be acknowledged
    sub.ack(dropped)
    emulator.wait_for(lambda e: "t" not in e.tasks(), timeout=2)
    assert emulator.agents()[0]["used"] == {}
    assert emulator.check_invariants() == []


def test_mark_gone(emulator: Emulator, subscribers: list[Subscriber]) -> None:
    sub = subscribe(emulator, subscribers, capabilities=["PARTITION_AWARE"])
    offer = sub.offers()[0]
    _start(sub, offer, "t")
    agent_id = offer["agent_id"]["value"]
    emulator.mark_gone(agent_id)
    gone = sub.update("t", "TASK_GONE_BY_OPERATOR")
    assert gone["reason"] == "REASON_AGENT_REMOVED_BY_OPERATOR"
    sub.next("FAILURE")
    emulator.wait_for(lambda e: not e.processes(), timeout=3)  # the agent was shut down
    emulator.restart_agent(agent_id)  # a gone agent can never come back
    assert _agent_state(emulator, agent_id) == "gone"


def test_restart_master(subscribers: list[Subscriber]) -> None:
    with Emulator(**{**FAST, "agents": 2, "agent_reregister_timeout": 4.0}) as emu:
        sub = Subscriber(
            emu.url, framework_info(failover_timeout=60.0, capabilities=["PARTITION_AWARE"])
        ).subscribe()
        subscribers.append(sub)
        offers = sub.offers(2)
        _start(sub, offers[0], "t")
        sub.decline([offers[1]["id"]["value"]], refuse_seconds=0)
        keep, lose = offers[0]["agent_id"]["value"], offers[1]["agent_id"]["value"]
        emu.partition_agent(lose)  # this one will not come back after the restart
        old_master = emu.master_id
        emu.restart_master(reregister_delay=2.0)
        sub.wait_closed()
        assert emu.master_id != old_master
        back = Subscriber(
            emu.url,
            framework_info(
                id={"value": sub.framework_id}, failover_timeout=60.0, capabilities=["PARTITION_AWARE"]
            ),
        ).subscribe()
        subscribers.append(back)
        assert back.next("SUBSCRIBED")["subscribed"]["framework_id"]["value"] == sub.framework_id
        # While the agent is still recovering, explicit reconciliation gets no answer.
        back.reconcile([("t", keep), ("other", None)])
        try:
            back.no_event("UPDATE", within=0.2)
        except AssertionError:  # an answer is right only if the agent was back meanwhile (load)
            assert _agent_state(emu, keep) == "registered"
        emu.wait_for(lambda e: _agent_state(e, keep) == "registered", timeout=6)
        back.reconcile([("t", keep)])
        assert back.update("t")["state"] == "TASK_RUNNING"
        offer = back.offers(timeout=3)[0]
        assert offer["id"]["value"].startswith(emu.master_id)
        # The partitioned agent misses the re-registration timeout: unreachable, FAILURE.
        assert back.next("FAILURE", timeout=8)["failure"]["agent_id"]["value"] == lose
        back.reconcile([("x", lose)])
        assert back.update("x")["state"] == "TASK_UNREACHABLE"
        assert emu.check_invariants() == []


def test_master_restart_recovers_frameworks_from_agents(subscribers: list[Subscriber]) -> None:
    with Emulator(**FAST) as emu:
        sub = Subscriber(emu.url, framework_info(failover_timeout=60.0)).subscribe()
        subscribers.append(sub)
        _start(sub, sub.offers()[0], "t")
        emu.restart_master(reregister_delay=0.0)
        sub.wait_closed()
        emu.wait_for(lambda e: bool(e.frameworks()), timeout=3)
        view = emu.frameworks()[0]
        assert view["id"] == sub.framework_id and view["recovered"] and not view["connected"]
        assert sub.call("REVIVE").status_code == 403  # known only from agent reports
        back = Subscriber(
            emu.url, framework_info(id={"value": sub.framework_id}, failover_timeout=60.0)
        ).subscribe()
        subscribers.append(back)
        back.next("SUBSCRIBED")
        back.call("RECONCILE", {})
        assert back.update("t")["state"] == "TASK_RUNNING"


def test_item_21_guarantees_under_repeated_failover(
    emulator: Emulator, subscribers: list[Subscriber]
) -> None:
    """Reference 6.3 item 21: unique stream ids, one open stream per framework, heartbeats."""
    first = subscribe(emulator, subscribers, failover_timeout=60.0)
    current = first
    for _ in range(4):
        nxt = Subscriber(
            emulator.url, framework_info(id={"value": first.framework_id}, failover_timeout=60.0)
        ).subscribe()
        subscribers.append(nxt)
        nxt.next("SUBSCRIBED")
        assert current.next("ERROR")["error"]["message"] == "Framework failed over"
        current.wait_closed()
        current = nxt
    views = emulator.frameworks()
    assert len(views) == 1 and views[0]["stream_open"] and views[0]["stream_id"] == current.stream_id
    ids = emulator.stream_ids()
    assert len(ids) == len(set(ids)) == 5
    current.next("HEARTBEAT")
    current.next("HEARTBEAT", timeout=1)
    assert emulator.check_invariants() == []


def test_simulated_scale_smoke(subscribers: list[Subscriber]) -> None:
    """A few hundred tasks in gangs across many agents; the ledger must stay exact."""
    with Emulator(**{**FAST, "agents": 20, "executor": "simulated"}) as emu:
        sub = Subscriber(emu.url, framework_info()).subscribe()
        subscribers.append(sub)
        offers = sub.offers(20)
        launched = 0
        for index, offer in enumerate(offers):
            gang = [command_task(f"g{index}-{n}", offer, "x", cpus=0.5, mem=32) for n in range(8)]
            sub.accept([offer["id"]["value"]], gang, refuse_seconds=60)
            launched += len(gang)
        acked = 0
        deadline = time.monotonic() + 20
        while acked < 2 * launched and time.monotonic() < deadline:
            status = sub.next("UPDATE", timeout=5)["update"]["status"]
            sub.ack(status)
            acked += 1
        states = {t["state"] for t in emu.tasks().values()}
        assert states == {"TASK_RUNNING"} and len(emu.tasks()) == launched
        assert emu.check_invariants() == []


def test_cli_prints_listening_and_stops_cleanly_on_sigterm(tmp_path: Path) -> None:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "tests.mesos_emulator",
            "--port",
            "0",
            "--agents",
            "1",
            "--agent-resources",
            "cpus:2;mem:1024;ports:[31000-31004]",
            "--allocation-interval",
            "0.05",
            "--heartbeat-interval",
            "0.2",
            "--agent-attributes",
            "rack:r1",
        ],
        cwd=REPO,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert process.stdout is not None
        line = process.stdout.readline()
        assert "listening" in line, line
        url = next(word for word in line.split() if word.startswith("http://"))
        assert url.startswith("http://127.0.0.1:")
        sub = Subscriber(url, framework_info()).subscribe()
        offer = sub.offers()[0]
        assert offer["attributes"][0]["text"]["value"] == "r1"
        pid_file = tmp_path / "pid"
        task = command_task("t", offer, f"echo $$ > {pid_file}; exec sleep 30")
        sub.accept([offer["id"]["value"]], [task])
        sub.ack(sub.update("t", "TASK_STARTING", timeout=5))
        sub.update("t", "TASK_RUNNING", timeout=5)
        task_pid = int(wait_until(lambda: pid_file.exists() and pid_file.read_text().strip(), 10))
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=10) == 0
        sub.wait_closed()
        sub.close()
        wait_until(lambda: not _alive(task_pid), 10, what="the task's end with the emulator's")
        with pytest.raises(httpx.ConnectError):
            httpx.get(url + "/version", timeout=1)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii") as handle:
            return handle.read().split(")")[-1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def test_delayed_updates_arrive_late(emulator: Emulator, subscribers: list[Subscriber]) -> None:
    sub = subscribe(emulator, subscribers)
    emulator.delay_updates(0.4)
    offer = sub.offers()[0]
    start = time.monotonic()
    sub.accept([offer["id"]["value"]], [command_task("late", offer, "sleep 30")])
    sub.update("late", "TASK_STARTING", timeout=3)
    assert time.monotonic() - start >= 0.35
    emulator.delay_updates(0)


def test_manual_clock_drives_every_timer(subscribers: list[Subscriber]) -> None:
    with Emulator(**{**FAST, "clock": "manual", "heartbeat_interval": 15.0}) as emu:
        sub = Subscriber(emu.url, framework_info(failover_timeout=100.0)).subscribe()
        subscribers.append(sub)
        sub.next("SUBSCRIBED")
        sub.next("HEARTBEAT")  # the immediate one
        emu.advance(0)  # the allocation triggered by the subscription
        offer = sub.offers()[0]
        sub.decline([offer["id"]["value"]], refuse_seconds=10)
        emu.advance(9.9)
        sub.no_event("OFFERS", within=0.1)
        assert len(sub.all("HEARTBEAT")) == 1  # 9.9 virtual seconds < 15
        emu.advance(5.2)  # past the filter and the first periodic heartbeat
        sub.offers(timeout=1)
        sub.next("HEARTBEAT", timeout=1)
        emu.drop_stream(sub.framework_id or "")
        sub.wait_closed()
        emu.advance(99)
        assert sub.framework_id not in emu.completed_framework_ids()
        emu.advance(2)
        assert sub.framework_id in emu.completed_framework_ids()
