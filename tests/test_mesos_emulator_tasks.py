"""Emulator conformance: real task processes, kills, reliable updates, reconciliation, logs."""

from __future__ import annotations

import base64
import json
import os
import signal
import socket
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


def _launch(sub: Subscriber, task_id: str, command: str = "true", **kwargs: Any) -> dict[str, Any]:
    offer = sub.offers()[0]
    sub.accept([offer["id"]["value"]], [command_task(task_id, offer, command, **kwargs)])
    return offer


def _run_to_end(sub: Subscriber, task_id: str) -> dict[str, Any]:
    while True:
        status = sub.update(task_id)
        sub.ack(status)
        if status["state"] not in ("TASK_STARTING", "TASK_RUNNING", "TASK_KILLING"):
            return status


def test_exit_codes_and_signals(emulator: Emulator, subscribers: list[Subscriber]) -> None:
    sub = subscribe(emulator, subscribers)
    cases = {
        "ok": ("exit 0", "TASK_FINISHED", "Command exited with status 0"),
        "three": ("exit 3", "TASK_FAILED", "Command exited with status 3"),
        "signal": ("kill -USR1 $$", "TASK_FAILED", "Command terminated with signal User defined signal 1"),
        "missing": ("no-such-binary-xyz", "TASK_FAILED", "Command exited with status 127"),
    }
    for task_id, (command, state, message) in cases.items():
        _launch(sub, task_id, command)
        starting = sub.update(task_id)
        assert starting["state"] == "TASK_STARTING" and starting["source"] == "SOURCE_EXECUTOR"
        assert starting["executor_id"] == {"value": task_id}
        sub.ack(starting)
        running = sub.update(task_id)
        assert running["state"] == "TASK_RUNNING"
        assert running["container_status"]["network_infos"][0]["ip_addresses"][0]["ip_address"] == "127.0.0.1"
        sub.ack(running)
        final = sub.update(task_id)
        assert (final["state"], final["message"]) == (state, message), task_id
        assert len(base64.b64decode(final["uuid"])) == 16
        sub.ack(final)
    emulator.wait_for(lambda e: not e.tasks(), timeout=2)  # acked terminal tasks are removed
    agent = emulator.agents()[0]
    assert agent["used"] == {}


def test_shell_false_environment_and_sandbox(emulator: Emulator, subscribers: list[Subscriber]) -> None:
    sub = subscribe(emulator, subscribers)
    offer = _launch(
        sub,
        "argv",
        "/bin/sh",
        shell=False,
        arguments=["my-sh", "-c", 'echo "$0|$MESOS_TASK_ID|$GREETING|$(pwd)"; echo oops >&2'],
        env={"GREETING": "grüß dich"},
    )
    assert _run_to_end(sub, "argv")["state"] == "TASK_FINISHED"
    state = httpx.get(emulator.agent_url + "/slave(1)/state", timeout=5).json()
    executor = state["frameworks"][0]["completed_executors"][0]
    sandbox = Path(executor["directory"])
    assert sandbox.parts[-2] == "runs" and sandbox.parent.parent.name == "argv"
    out = (sandbox / "stdout").read_text(encoding="utf-8")
    assert out == f"my-sh|argv|grüß dich|{sandbox}\n"
    assert (sandbox / "stderr").read_text() == "oops\n"
    assert state["id"] == offer["agent_id"]["value"]


def test_files_read_endpoint(emulator: Emulator, subscribers: list[Subscriber]) -> None:
    sub = subscribe(emulator, subscribers)
    _launch(sub, "logs", "printf 'héllo\\nworld\\n'")
    _run_to_end(sub, "logs")
    state = httpx.get(emulator.agent_url + "/state", timeout=5).json()
    directory = state["frameworks"][0]["completed_executors"][0]["directory"]
    base = emulator.agent_url + "/files/read"
    size = httpx.get(base, params={"path": directory + "/stdout", "offset": -1}, timeout=5).json()
    assert size == {"data": "", "offset": len("héllo\nworld\n".encode())}
    part = httpx.get(base, params={"path": directory + "/stdout", "offset": 0, "length": 6}, timeout=5)
    assert part.json() == {"data": "héllo", "offset": 0}
    rest = httpx.get(base, params={"path": directory + "/stdout", "offset": 7}, timeout=5).json()
    assert rest == {"data": "world\n", "offset": 7}
    virtual = f"/frameworks/{sub.framework_id}/executors/logs/runs/latest/stdout"
    assert (
        httpx.get(base, params={"path": virtual, "offset": 0}, timeout=5).json()["data"].endswith("world\n")
    )
    assert httpx.get(base, params={"path": "/etc/passwd"}, timeout=5).status_code == 404
    assert httpx.get(base, params={"path": directory}, timeout=5).status_code == 400
    assert httpx.get(base, timeout=5).status_code == 400


def test_kill_with_killing_state_and_default_grace(emulator: Emulator, subscribers: list[Subscriber]) -> None:
    sub = subscribe(emulator, subscribers, capabilities=["TASK_KILLING_STATE"])
    _launch(sub, "k", "sleep 30")
    sub.ack(sub.update("k", "TASK_STARTING"))
    sub.ack(sub.update("k", "TASK_RUNNING"))
    sub.kill("k")
    killing = sub.update("k")
    assert killing["state"] == "TASK_KILLING" and "uuid" in killing
    sub.ack(killing)
    killed = sub.update("k")
    assert killed["state"] == "TASK_KILLED"
    assert killed["message"] == "Command terminated with signal Terminated"
    sub.ack(killed)
    emulator.wait_for(lambda e: not e.processes(), timeout=2)


def test_kill_escalates_to_sigkill_after_the_grace_period(
    emulator: Emulator, subscribers: list[Subscriber], tmp_path: Path
) -> None:
    sub = subscribe(emulator, subscribers)  # no TASK_KILLING_STATE: no TASK_KILLING update
    deaf = tmp_path / "deaf"  # written once SIGTERM is ignored
    _launch(sub, "stubborn", f"trap '' TERM; touch {deaf}; sleep 30 & wait; sleep 30")
    sub.ack(sub.update("stubborn", "TASK_STARTING"))
    sub.ack(sub.update("stubborn", "TASK_RUNNING"))
    wait_until(deaf.exists, 10)
    start = time.monotonic()
    sub.kill("stubborn", grace=2.0)  # the KILL call's kill_policy overrides the default (1 s)
    killed = sub.update("stubborn", timeout=30)
    elapsed = time.monotonic() - start
    assert killed["state"] == "TASK_KILLED" and killed["message"] == "Command terminated with signal Killed"
    assert elapsed >= 1.95, elapsed  # not before its own grace: a lower bound a slow machine cannot miss
    emulator.wait_for(lambda e: not e.processes(), timeout=2)


def test_kill_unknown_task_reconciles_and_mismatched_agent_is_ignored(
    emulator: Emulator, subscribers: list[Subscriber]
) -> None:
    sub = subscribe(emulator, subscribers)
    offer = _launch(sub, "live", "sleep 30")
    sub.ack(sub.update("live", "TASK_STARTING"))
    sub.kill("ghost", agent_id=offer["agent_id"]["value"])
    ghost = sub.update("ghost")
    assert ghost["state"] == "TASK_LOST" and ghost["reason"] == "REASON_RECONCILIATION"
    assert ghost["message"] == "Reconciliation: Task is unknown to the agent"
    sub.kill("live", agent_id="some-other-agent")
    sub.ack(sub.update("live", "TASK_RUNNING"))
    sub.no_event("UPDATE", within=0.3)
    assert emulator.tasks()["live"]["state"] == "TASK_RUNNING"


def test_updates_are_redelivered_until_acked_and_stay_ordered(
    emulator: Emulator, subscribers: list[Subscriber]
) -> None:
    sub = subscribe(emulator, subscribers)
    _launch(sub, "r", "exit 0")
    first = sub.update("r", "TASK_STARTING")
    again = sub.update("r", "TASK_STARTING", timeout=2)  # not acked: re-sent with the same uuid
    assert again["uuid"] == first["uuid"]
    # The master already knows the task finished (latest state) ...
    emulator.wait_for(lambda e: e.tasks()["r"]["state"] == "TASK_FINISHED", timeout=2)
    # ... but the scheduler sees one update at a time, in order.
    assert not [e for e in sub.all("UPDATE") if e["update"]["status"]["state"] != "TASK_STARTING"]
    # An ACK with a stale uuid does nothing; the right one releases the next update.
    stale = dict(first)
    stale["uuid"] = base64.b64encode(os.urandom(6) + b"\x40" + os.urandom(9)).decode()
    sub.ack(stale)
    sub.no_event("UPDATE", within=0.1, predicate=lambda e: e["update"]["status"]["state"] != "TASK_STARTING")
    sub.ack(first)
    running = sub.update("r", "TASK_RUNNING")
    sub.ack(running)
    finished = sub.update("r", "TASK_FINISHED")
    states = [e["update"]["status"]["state"] for e in sub.all("UPDATE")]
    order = [s for i, s in enumerate(states) if i == 0 or s != states[i - 1]]
    assert order == ["TASK_STARTING", "TASK_RUNNING", "TASK_FINISHED"]
    sub.ack(finished)


def test_dropped_updates_come_back(emulator: Emulator, subscribers: list[Subscriber]) -> None:
    sub = subscribe(emulator, subscribers)
    emulator.drop_updates(1, state="TASK_RUNNING")
    _launch(sub, "d", "sleep 30")
    sub.ack(sub.update("d", "TASK_STARTING"))
    start = time.monotonic()
    running = sub.update("d", "TASK_RUNNING", timeout=3)
    assert time.monotonic() - start >= 0.15  # it took a retry
    assert emulator.dropped_updates() == [{"task_id": "d", "state": "TASK_RUNNING"}]
    sub.ack(running)


def test_master_updates_are_not_resent_and_not_sent_while_disconnected(
    emulator: Emulator, subscribers: list[Subscriber]
) -> None:
    sub = subscribe(emulator, subscribers, failover_timeout=60.0)
    offer = _launch(sub, "t", "exit 0")
    sub.ack(sub.update("t", "TASK_STARTING"))
    emulator.drop_stream(sub.framework_id or "")
    sub.wait_closed()
    # RUNNING and FINISHED happen while nobody listens
    emulator.wait_for(lambda e: e.tasks()["t"].get("agent_state") == "TASK_FINISHED", timeout=10)
    back = Subscriber(
        emulator.url, framework_info(id={"value": sub.framework_id}, failover_timeout=60.0)
    ).subscribe()
    subscribers.append(back)
    back.next("SUBSCRIBED")
    running = back.update("t", "TASK_RUNNING", timeout=3)
    back.reconcile([("t", offer["agent_id"]["value"])])
    answer = back.update("t", timeout=3)
    assert answer["reason"] == "REASON_RECONCILIATION" and "uuid" not in answer
    assert answer["state"] == "TASK_RUNNING"  # the latest *forwarded* state
    back.ack(running)
    back.ack(back.update("t", "TASK_FINISHED", timeout=3))


def test_reconciliation_answers_the_update_the_master_got_while_disconnected() -> None:
    """``Master::updateTask`` records an agent's update on receipt, connected framework or not:
    an explicit reconciliation right after re-subscribing answers it (here before the agent's
    retry, 30 s away, forwards it)."""
    with Emulator(**{**FAST, "update_retry_interval": 30.0, "update_retry_max": 60.0}) as emu:
        made: list[Subscriber] = []
        try:
            sub = subscribe(emu, made, failover_timeout=60.0)
            offer = _launch(sub, "f", "sleep 30")
            sub.ack(sub.update("f", "TASK_STARTING"))
            sub.ack(sub.update("f", "TASK_RUNNING"))
            emu.drop_stream(sub.framework_id or "")
            sub.wait_closed()
            (pid,) = emu.processes()  # the task's process group
            os.killpg(pid, signal.SIGKILL)
            emu.wait_for(lambda e: e.tasks()["f"]["state"] == "TASK_FAILED", timeout=10)
            back = Subscriber(
                emu.url, framework_info(id={"value": sub.framework_id}, failover_timeout=60.0)
            ).subscribe()
            made.append(back)
            back.next("SUBSCRIBED")
            back.reconcile([("f", offer["agent_id"]["value"])])
            answer = back.update("f", timeout=3)
            assert answer["reason"] == "REASON_RECONCILIATION" and "uuid" not in answer
            assert answer["state"] == "TASK_FAILED"
        finally:
            for made_sub in made:
                made_sub.close()
        assert emu.check_invariants() == []


def test_reconciliation_table(emulator: Emulator, subscribers: list[Subscriber]) -> None:
    gone_agent = emulator.add_agent()
    unreachable_agent = emulator.add_agent()
    plain = subscribe(emulator, subscribers, name="plain")
    aware = subscribe(emulator, subscribers, name="aware", capabilities=["PARTITION_AWARE"])
    registered = emulator.agent_ids()[0]
    emulator.mark_gone(gone_agent)
    emulator.partition_agent(unreachable_agent)
    emulator.wait_for(
        lambda e: any(a["id"] == unreachable_agent and a["state"] == "unreachable" for a in e.agents()),
        timeout=3,
    )
    cases = [
        ("unknown-on-registered", registered, "TASK_GONE", "Reconciliation: Task is unknown to the agent"),
        (
            "unknown-on-unreachable",
            unreachable_agent,
            "TASK_UNREACHABLE",
            "Reconciliation: Task is unreachable",
        ),
        ("unknown-on-gone", gone_agent, "TASK_GONE_BY_OPERATOR", "Reconciliation: Task is gone"),
        ("unknown-agent", "no-such-agent", "TASK_UNKNOWN", "Reconciliation: Task is unknown"),
        ("no-agent", None, "TASK_UNKNOWN", "Reconciliation: Task is unknown"),
    ]
    for sub, aware_of_partitions in ((plain, False), (aware, True)):
        sub.reconcile([(task_id, agent) for task_id, agent, _, _ in cases])
        for task_id, agent, state, message in cases:
            status = sub.update(task_id)
            assert status["state"] == (state if aware_of_partitions else "TASK_LOST"), task_id
            assert status["message"] == message
            assert status["source"] == "SOURCE_MASTER" and status["reason"] == "REASON_RECONCILIATION"
            assert "uuid" not in status and "data" not in status and "labels" not in status
            if agent is not None:
                assert status["agent_id"] == {"value": agent}
            assert ("unreachable_time" in status) == (agent == unreachable_agent)


def test_implicit_reconciliation_and_terminal_unacked_tasks(
    emulator: Emulator, subscribers: list[Subscriber]
) -> None:
    sub = subscribe(emulator, subscribers)
    offer = sub.offers()[0]
    sub.accept(
        [offer["id"]["value"]],
        [command_task("a", offer, "sleep 30"), command_task("b", offer, "exit 1")],
    )
    for task_id in ("a", "b"):
        sub.ack(sub.update(task_id, "TASK_STARTING"))
        sub.ack(sub.update(task_id, "TASK_RUNNING"))
    failed = sub.update("b", "TASK_FAILED")  # terminal but not yet acknowledged
    assert sub.call("RECONCILE", {}).status_code == 202

    def answer(task_id: str) -> str:
        event = sub.next(
            "UPDATE",
            lambda e: (
                e["update"]["status"]["task_id"]["value"] == task_id
                and e["update"]["status"].get("reason") == "REASON_RECONCILIATION"
            ),
        )
        status = event["update"]["status"]
        assert "uuid" not in status and status["message"] == "Reconciliation: Latest task state"
        return str(status["state"])

    assert {"a": answer("a"), "b": answer("b")} == {"a": "TASK_RUNNING", "b": "TASK_FAILED"}
    sub.ack(failed)
    emulator.wait_for(lambda e: "b" not in e.tasks(), timeout=2)


# Its task binds an agent's offered port (31000 and up) on this machine: it runs in the xdist
# group of the other tests whose tasks listen there (tests/conftest.py, SHARED_PORTS).
@pytest.mark.xdist_group("agent-ports-31000")
def test_real_ports_can_be_bound(emulator: Emulator, subscribers: list[Subscriber]) -> None:
    sub = subscribe(emulator, subscribers)
    offer = sub.offers()[0]
    port = offer["resources"][-1]["ranges"]["range"][0]["begin"]
    script = (
        "import socket;s=socket.socket();s.setsockopt(socket.SOL_SOCKET,socket.SO_REUSEADDR,1);"
        f"s.bind(('127.0.0.1',{port}));s.listen();"
        "c,_=s.accept();c.sendall(b'hi');c.close()"
    )
    task = command_task(
        "srv", offer, sys.executable, shell=False, arguments=["python3", "-c", script], ports=[port]
    )
    sub.accept([offer["id"]["value"]], [task])
    sub.ack(sub.update("srv", "TASK_STARTING"))
    sub.ack(sub.update("srv", "TASK_RUNNING"))

    def greeted() -> bool:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1) as conn:
                return conn.recv(2) == b"hi"
        except OSError:
            return False

    wait_until(greeted, 10, what=f"the task's greeting on port {port}")
    assert sub.update("srv", "TASK_FINISHED")["state"] == "TASK_FINISHED"


def test_container_tasks_are_validated_and_run_on_the_host(
    emulator: Emulator, subscribers: list[Subscriber]
) -> None:
    sub = subscribe(emulator, subscribers)
    emulator.set_failing_images({"broken/image:1"})
    offer = sub.offers()[0]
    docker = {"type": "DOCKER", "docker": {"image": "tensorflow/tensorflow:2.15.0"}}
    bridge_bad = {
        "type": "DOCKER",
        "docker": {
            "image": "x",
            "network": "BRIDGE",
            "port_mappings": [{"host_port": 31005, "container_port": 2222}],
        },
    }
    host_mapping = {
        "type": "DOCKER",
        "docker": {"image": "x", "port_mappings": [{"host_port": 31001, "container_port": 1}]},
    }
    mesos = {"type": "MESOS", "mesos": {"image": {"type": "DOCKER", "docker": {"name": "tf:latest"}}}}
    tasks = [
        command_task("docker", offer, "exit 0", extra={"container": docker}),
        command_task("bridge", offer, "exit 0", ports=[31001], extra={"container": bridge_bad}),
        command_task("hostnet", offer, "exit 0", ports=[31002], extra={"container": host_mapping}),
        command_task("mesos", offer, "exit 0", extra={"container": mesos}),
        command_task(
            "pull",
            offer,
            "exit 0",
            extra={"container": {"type": "DOCKER", "docker": {"image": "broken/image:1"}}},
        ),
    ]
    sub.accept([offer["id"]["value"]], tasks)
    assert _run_to_end(sub, "docker")["state"] == "TASK_FINISHED"
    assert _run_to_end(sub, "mesos")["state"] == "TASK_FINISHED"
    for task_id, message in (
        ("bridge", "Port [31005] not included in resources"),
        ("hostnet", "Port mappings are only supported for bridge and user-defined networks"),
        ("pull", "Failed to pull image 'broken/image:1'"),
    ):
        status = sub.update(task_id)
        assert status["state"] == "TASK_FAILED" and status["source"] == "SOURCE_AGENT"
        assert status["reason"] == "REASON_CONTAINER_LAUNCH_FAILED"
        assert status["message"].startswith("Failed to launch container: " + message), status
        sub.ack(status)


def test_fetcher_and_max_completion_time(
    emulator: Emulator, subscribers: list[Subscriber], tmp_path: Path
) -> None:
    script = tmp_path / "hello.sh"
    script.write_text("#!/bin/sh\necho fetched\n")
    sub = subscribe(emulator, subscribers)
    offer = sub.offers()[0]
    fetched = command_task("fetch", offer, "sh hello.sh", extra={})
    fetched["command"]["uris"] = [{"value": str(script), "extract": False}]
    slow = command_task(
        "slow", offer, "sleep 30", extra={"max_completion_time": {"nanoseconds": 200_000_000}}
    )
    missing = command_task("missing", offer, "true")
    missing["command"]["uris"] = [{"value": str(tmp_path / "nope.tgz")}]
    sub.accept([offer["id"]["value"]], [fetched, slow, missing])
    assert _run_to_end(sub, "fetch")["state"] == "TASK_FINISHED"
    final = _run_to_end(sub, "slow")
    assert (final["state"], final["reason"]) == ("TASK_FAILED", "REASON_MAX_COMPLETION_TIME_REACHED")
    failed = sub.update("missing")
    assert failed["reason"] == "REASON_CONTAINER_LAUNCH_FAILED" and "Failed to fetch" in failed["message"]


@pytest.mark.parametrize("mode", ["simulated"])
def test_simulated_executor(mode: str, subscribers: list[Subscriber]) -> None:
    with Emulator(**{**FAST, "executor": mode}) as emu:
        sub = Subscriber(emu.url, framework_info(capabilities=["TASK_KILLING_STATE"])).subscribe()
        subscribers.append(sub)
        offer = sub.offers()[0]
        sub.accept(
            [offer["id"]["value"]],
            [
                command_task("forever", offer, "ignored"),
                command_task(
                    "short", offer, "ignored", labels={"emulator.duration": "0.1", "emulator.exit_code": "2"}
                ),
            ],
        )
        final = _run_to_end(sub, "short")
        assert (final["state"], final["message"]) == ("TASK_FAILED", "Command exited with status 2")
        sub.ack(sub.update("forever", "TASK_STARTING"))
        sub.ack(sub.update("forever", "TASK_RUNNING"))
        sub.kill("forever")
        killing = sub.update("forever")
        sub.ack(killing)
        assert [killing["state"], sub.update("forever")["state"]] == ["TASK_KILLING", "TASK_KILLED"]
        assert emu.processes() == set()
        sub.close()


def test_agent_state_lists_running_executors(emulator: Emulator, subscribers: list[Subscriber]) -> None:
    sub = subscribe(emulator, subscribers)
    _launch(sub, "st", "sleep 30")
    sub.ack(sub.update("st", "TASK_STARTING"))
    state = httpx.get(emulator.agent_url + "/slave(1)/state", timeout=5).json()
    executor = state["frameworks"][0]["executors"][0]
    assert executor["id"] == "st" and Path(executor["directory"]).is_dir()
    assert executor["tasks"][0]["state"] in ("TASK_STARTING", "TASK_RUNNING")
    assert json.loads(json.dumps(state)) == state
    assert httpx.get(emulator.agent_url + "/slave(9)/state", timeout=5).status_code == 404
