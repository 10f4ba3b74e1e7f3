"""Emulator conformance: SUBSCRIBE, heartbeats, failover, refusals, teardown, timeouts."""

from __future__ import annotations

import time

from tests.mesos_emulator import Emulator
from tests.test_mesos_emulator_helpers import (
    TEST_USER,
    Subscriber,
    command_task,
    emulator,
    framework_info,
    subscribe,
    subscribers,
)

__all__ = ["emulator", "subscribers"]


def test_subscribed_then_immediate_heartbeat_then_periodic(
    emulator: Emulator, subscribers: list[Subscriber]
) -> None:
    sub = Subscriber(emulator.url, framework_info()).subscribe()
    subscribers.append(sub)
    assert sub.status_code == 200
    subscribed = sub.next("SUBSCRIBED")["subscribed"]
    sub.next("HEARTBEAT")
    assert [e["type"] for e in sub.events[:2]] == ["SUBSCRIBED", "HEARTBEAT"]
    assert subscribed["heartbeat_interval_seconds"] == 0.2
    master = subscribed["master_info"]
    assert master["id"] == emulator.master_id and master["port"] == int(emulator.url.rsplit(":", 1)[1])
    assert master["ip"] == 16777343 and master["version"] == "1.11.0"  # 127.0.0.1, network order
    framework_id = subscribed["framework_id"]["value"]
    assert framework_id.startswith(emulator.master_id + "-") and framework_id.endswith("-0000")
    start = time.monotonic()
    sub.next("HEARTBEAT", timeout=10)
    sub.next("HEARTBEAT", timeout=10)
    elapsed = time.monotonic() - start
    # periodic at 0.2 s: two take at least 0.25 s; the upper bound only tells it from the 15 s
    # default, generous so that a loaded machine cannot fail it
    assert 0.25 <= elapsed < 10, elapsed


def test_stream_ids_are_unique_and_frameworks_numbered(
    emulator: Emulator, subscribers: list[Subscriber]
) -> None:
    subs = [subscribe(emulator, subscribers, name=f"fw{i}") for i in range(3)]
    assert len({s.stream_id for s in subs}) == 3
    assert [s.framework_id[-4:] for s in subs if s.framework_id] == ["0000", "0001", "0002"]
    assert emulator.check_invariants() == []


def test_resubscribe_fails_over_the_old_stream(emulator: Emulator, subscribers: list[Subscriber]) -> None:
    first = subscribe(emulator, subscribers, failover_timeout=60.0)
    offers = first.offers()
    info = framework_info(id={"value": first.framework_id}, failover_timeout=60.0)
    second = Subscriber(emulator.url, info).subscribe()
    subscribers.append(second)
    assert second.next("SUBSCRIBED")["subscribed"]["framework_id"]["value"] == first.framework_id
    assert second.stream_id != first.stream_id
    error = first.next("ERROR")
    assert error == {"type": "ERROR", "error": {"message": "Framework failed over"}}
    first.wait_closed()
    # The old stream id is now rejected; the old offers were discarded without RESCIND.
    assert first.call("REVIVE").status_code == 400
    assert second.call("REVIVE").status_code == 202
    second.no_event("RESCIND", within=0.1)
    stale = offers[0]["id"]["value"]
    assert stale not in {o["id"] for o in emulator.offers()}
    fresh = second.offers()
    assert fresh[0]["id"]["value"] != stale
    views = emulator.frameworks()
    assert len(views) == 1 and views[0]["stream_id"] == second.stream_id


def test_resubscribe_ignores_user_and_checkpoint_but_refuses_principal_change(
    emulator: Emulator, subscribers: list[Subscriber]
) -> None:
    first = subscribe(emulator, subscribers, failover_timeout=60.0, principal="p1")
    fid = {"value": first.framework_id}
    changed = framework_info(
        id=fid, user="someone-else", checkpoint=True, principal="p1", failover_timeout=60.0
    )
    second = Subscriber(emulator.url, changed).subscribe()
    subscribers.append(second)
    second.next("SUBSCRIBED")
    info = emulator.frameworks()[0]["info"]
    assert info["user"] == TEST_USER and info.get("checkpoint", False) is False
    refused = Subscriber(emulator.url, framework_info(id=fid, principal="p2")).subscribe()
    subscribers.append(refused)
    assert refused.status_code == 200
    assert refused.next("ERROR")["error"]["message"] == "Changing framework's principal is not allowed."
    refused.wait_closed()
    assert [e["type"] for e in refused.events] == ["ERROR"]
    second.no_event("ERROR", within=0.05)  # the running subscription is untouched


def test_refused_subscriptions_get_one_error_and_close(
    emulator: Emulator, subscribers: list[Subscriber]
) -> None:
    cases = [
        (
            framework_info(role="a", roles=["b"], capabilities=["MULTI_ROLE"]),
            "'FrameworkInfo.role' must not be set when the framework is MULTI_ROLE capable",
        ),
        (
            framework_info(roles=["b"]),
            "'FrameworkInfo.roles' must not be set when the framework is not MULTI_ROLE capable",
        ),
        (
            framework_info(roles=["a", "a"], capabilities=["MULTI_ROLE"]),
            "'FrameworkInfo.roles' contains duplicate items: { a }",
        ),
        (
            framework_info(role="/bad"),
            "'FrameworkInfo.role' is not a valid role: Role '/bad' cannot start with a slash",
        ),
        (framework_info(id={"value": "a/b"}), "'a/b' contains invalid characters"),
        (framework_info(failover_timeout=1e300), "The framework failover_timeout (1e+300) is invalid"),
    ]
    for info, message in cases:
        body = {"type": "SUBSCRIBE", "subscribe": {"framework_info": info}}
        if "id" in info:
            body["framework_id"] = info["id"]
        sub = Subscriber(emulator.url, info).subscribe(body=body)
        subscribers.append(sub)
        assert sub.status_code == 200
        assert sub.next("ERROR")["error"]["message"] == message
        sub.wait_closed()
        assert len(sub.events) == 1
    suppressed = Subscriber(emulator.url, framework_info()).subscribe(
        body={
            "type": "SUBSCRIBE",
            "subscribe": {"framework_info": framework_info(), "suppressed_roles": ["x"]},
        }
    )
    subscribers.append(suppressed)
    assert suppressed.next("ERROR")["error"]["message"] == (
        "Suppressed roles { x } are not contained in the set of roles"
    )
    assert emulator.frameworks() == []


def test_teardown_kills_everything_and_forgets_the_framework(
    emulator: Emulator, subscribers: list[Subscriber]
) -> None:
    sub = subscribe(emulator, subscribers, failover_timeout=60.0)
    offer = sub.offers()[0]
    sub.accept([offer["id"]["value"]], [command_task("t1", offer, "sleep 30")])
    sub.update("t1", "TASK_STARTING")
    assert emulator.processes()
    assert sub.call("TEARDOWN").status_code == 202
    sub.wait_closed()
    assert not [e for e in sub.events if e["type"] == "ERROR"]
    emulator.wait_for(lambda e: not e.processes(), timeout=5)
    assert sub.framework_id in emulator.completed_framework_ids()
    assert sub.call("REVIVE").status_code == 400  # "Framework cannot be found"
    again = Subscriber(emulator.url, framework_info(id={"value": sub.framework_id})).subscribe()
    subscribers.append(again)
    assert again.next("ERROR")["error"]["message"] == "Framework has been removed"
    again.wait_closed()
    agent = emulator.agents()[0]
    assert agent["used"] == {} and agent["running_tasks"] == []


def test_failover_timeout_removes_a_disconnected_framework(
    emulator: Emulator, subscribers: list[Subscriber]
) -> None:
    # a failover window long enough for a loaded machine to look inside it
    sub = subscribe(emulator, subscribers, failover_timeout=3.0)
    offer = sub.offers()[0]
    sub.accept([offer["id"]["value"]], [command_task("t1", offer, "sleep 30")])
    sub.update("t1", "TASK_STARTING")
    emulator.drop_stream(sub.framework_id or "")
    sub.wait_closed()
    emulator.wait_for(lambda e: e.framework(sub.framework_id or "")["connected"] is False, timeout=10)  # type: ignore[index]
    assert emulator.processes()  # still running inside the failover window
    emulator.wait_for(lambda e: sub.framework_id in e.completed_framework_ids(), timeout=20)
    emulator.wait_for(lambda e: not e.processes(), timeout=5)
    late = Subscriber(emulator.url, framework_info(id={"value": sub.framework_id})).subscribe()
    subscribers.append(late)
    assert late.next("ERROR")["error"]["message"] == "Framework has been removed"


def test_failover_within_timeout_keeps_tasks(emulator: Emulator, subscribers: list[Subscriber]) -> None:
    sub = subscribe(emulator, subscribers, failover_timeout=30.0)
    offer = sub.offers()[0]
    sub.accept([offer["id"]["value"]], [command_task("t1", offer, "sleep 30")])
    sub.ack(sub.update("t1", "TASK_STARTING"))
    emulator.drop_stream(sub.framework_id or "")
    sub.wait_closed()
    back = Subscriber(
        emulator.url, framework_info(id={"value": sub.framework_id}, failover_timeout=30.0)
    ).subscribe()
    subscribers.append(back)
    back.next("SUBSCRIBED")
    # The unacknowledged RUNNING update is re-sent by the agent after the failover.
    running = back.update("t1", "TASK_RUNNING")
    back.ack(running)
    assert emulator.tasks()["t1"]["state"] == "TASK_RUNNING"


def test_expire_failover_fault(emulator: Emulator, subscribers: list[Subscriber]) -> None:
    sub = subscribe(emulator, subscribers, failover_timeout=3600.0)
    assert emulator.expire_failover(sub.framework_id or "") is False  # still connected
    emulator.drop_stream(sub.framework_id or "")
    sub.wait_closed()
    emulator.wait_for(lambda e: e.expire_failover(sub.framework_id or ""), timeout=2)
    assert sub.framework_id in emulator.completed_framework_ids()


def test_half_open_stream_and_stalled_stream(emulator: Emulator, subscribers: list[Subscriber]) -> None:
    sub = subscribe(emulator, subscribers, failover_timeout=60.0)
    emulator.stall_stream(sub.framework_id or "")
    before = len(sub.all("HEARTBEAT"))
    sent = emulator.framework(sub.framework_id or "")["heartbeats_sent"]  # type: ignore[index]
    # several heartbeats the master meant to send, and the stalled stream swallowed
    emulator.wait_for(lambda e: e.framework(sub.framework_id or "")["heartbeats_sent"] >= sent + 3)  # type: ignore[index]
    assert len(sub.all("HEARTBEAT")) == before and not sub.closed
    assert emulator.framework(sub.framework_id or "")["connected"] is True  # type: ignore[index]
    emulator.stall_stream(sub.framework_id or "", stalled=False)
    sub.next("HEARTBEAT", timeout=1)
    emulator.drop_stream(sub.framework_id or "", notify_master=False)
    sub.wait_closed()
    # The master did not notice (the emulator's loop ran the close's callbacks before this
    # look): it still believes the framework is connected.
    assert emulator.framework(sub.framework_id or "")["connected"] is True  # type: ignore[index]
    back = Subscriber(
        emulator.url, framework_info(id={"value": sub.framework_id}, failover_timeout=60.0)
    ).subscribe()
    subscribers.append(back)
    back.next("SUBSCRIBED")


def test_update_framework(emulator: Emulator, subscribers: list[Subscriber]) -> None:
    sub = subscribe(emulator, subscribers, capabilities=["MULTI_ROLE"], roles=["a"])
    offer = sub.offers()[0]
    assert offer["allocation_info"] == {"role": "a"}
    info = framework_info(
        id={"value": sub.framework_id}, capabilities=["MULTI_ROLE"], roles=["b"], name="renamed"
    )
    ok = sub.call("UPDATE_FRAMEWORK", {"framework_info": info})
    assert ok.status_code == 200
    rescind = sub.next("RESCIND")
    assert rescind["rescind"]["offer_id"] == offer["id"]
    assert sub.offers()[0]["allocation_info"] == {"role": "b"}
    bad = sub.call("UPDATE_FRAMEWORK", {"framework_info": {**info, "user": "other"}})
    assert bad.status_code == 400 and bad.text.startswith("FrameworkInfo update is not valid: ")
    mismatch = sub.call("UPDATE_FRAMEWORK", {"framework_info": {**info, "id": {"value": "x"}}})
    assert mismatch.status_code == 400
    assert "differs from 'update_framework.framework_info.id'" in mismatch.text
    suppressed = sub.call("UPDATE_FRAMEWORK", {"framework_info": info, "suppressed_roles": ["zz"]})
    assert suppressed.status_code == 400
