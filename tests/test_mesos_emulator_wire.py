"""Emulator conformance: encoding rules, RecordIO framing and the HTTP status-code table."""

from __future__ import annotations

import json
import socket
from typing import Any

import httpx
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.mesos_emulator import Emulator, jsonenc
from tests.mesos_emulator.resources import Resources
from tests.mesos_emulator.status import new_uuid, valid_uuid_bytes
from tests.test_mesos_emulator_helpers import (
    FAST,
    Subscriber,
    b64,
    emulator,
    framework_info,
    records,
    subscribe,
    subscribers,
)

__all__ = ["emulator", "subscribers"]

SUBSCRIBE = {"type": "SUBSCRIBE", "subscribe": {"framework_info": {"user": "u", "name": "n"}}}


# ---------------------------------------------------------------------------------------
# stout JSON rules (reference section 1.11)


def test_parse_ignores_unknown_fields_and_drops_unknown_optional_enums() -> None:
    call = jsonenc.parse(
        "Call",
        {
            "type": "SUBSCRIBE",
            "bogus": 1,
            "subscribe": {
                "framework_info": {
                    "user": "u",
                    "name": "n",
                    "slave_id": {"value": "x"},
                    "capabilities": [{"type": "GPU_RESOURCES"}, {"type": "NOT_A_CAPABILITY"}],
                }
            },
        },
    )
    info = call["subscribe"]["framework_info"]
    assert "bogus" not in call and "slave_id" not in info
    assert info["capabilities"] == [{"type": "GPU_RESOURCES"}, {}]


def test_parse_errors_match_stout() -> None:
    with pytest.raises(jsonenc.ParseError, match=r"Missing required fields: kill\.task_id"):
        jsonenc.parse("Call", {"type": "KILL", "kill": {}})
    with pytest.raises(jsonenc.ParseError, match="Failed to find enum for 'NOPE'"):
        jsonenc.parse("Resource", {"name": "cpus", "type": "NOPE"})
    with pytest.raises(jsonenc.ParseError, match="Failed to base64 decode bytes field 'uuid'"):
        jsonenc.parse(
            "Call.Acknowledge",
            {"agent_id": {"value": "a"}, "task_id": {"value": "t"}, "uuid": "***"},
        )
    with pytest.raises(jsonenc.ParseError, match="Not expecting a JSON number for field 'value'"):
        jsonenc.parse(
            "TaskInfo",
            {"name": "n", "task_id": {"value": "t"}, "agent_id": {"value": "a"}, "limits": {"cpus": 1}},
        )
    with pytest.raises(jsonenc.ParseError, match="Not expecting a JSON array for field 'name'"):
        jsonenc.parse("FrameworkInfo", {"user": "u", "name": ["x"]})
    with pytest.raises(jsonenc.ParseError, match="Expecting a JSON object"):
        jsonenc.parse("Call", [1])


def test_parse_accepts_numeric_strings_infinity_and_null() -> None:
    parsed = jsonenc.parse(
        "TaskInfo",
        {
            "name": "n",
            "task_id": {"value": "t"},
            "agent_id": {"value": "a"},
            "limits": {"cpus": {"value": "Infinity"}, "mem": {"value": "512"}},
            "kill_policy": {"grace_period": {"nanoseconds": "1000"}},
            "data": None,
        },
    )
    assert parsed["limits"]["cpus"]["value"] == float("inf")
    assert parsed["limits"]["mem"]["value"] == 512.0
    assert parsed["kill_policy"]["grace_period"]["nanoseconds"] == 1000
    assert "data" not in parsed


def test_encode_writes_defaults_omits_empty_lists_and_keeps_utf8_raw() -> None:
    out = jsonenc.dumps(
        "Call",
        {"type": "SUBSCRIBE", "subscribe": {"framework_info": {"user": "ü", "name": "名前", "roles": []}}},
    )
    text = out.decode("utf-8")
    assert '"failover_timeout":0.0' in text and '"checkpoint":false' in text
    assert '"role"' not in text  # deprecated: default not written
    assert '"roles"' not in text  # empty repeated: omitted
    assert "名前" in text and "\\u" not in text
    status = jsonenc.encode(
        "TaskStatus",
        {"task_id": {"value": "t"}, "state": "TASK_RUNNING", "uuid": b"\x00" * 16, "timestamp": 3},
    )
    assert status["uuid"] == "AAAAAAAAAAAAAAAAAAAAAA==" and status["timestamp"] == 3.0
    assert list(status) == ["task_id", "state", "timestamp", "uuid"]  # declaration order


def test_uuids_are_v4_and_fromBytes_rules() -> None:
    uuid = new_uuid()
    assert valid_uuid_bytes(uuid)
    assert not valid_uuid_bytes(b"\x00" * 16)  # version nibble 0 is unknown
    assert not valid_uuid_bytes(uuid[:15])


@settings(max_examples=60, deadline=None)
@given(
    texts=st.lists(st.text(min_size=0, max_size=40), min_size=1, max_size=8),
    cuts=st.lists(st.integers(min_value=1, max_value=7), min_size=1, max_size=50),
)
def test_recordio_survives_any_rechunking(texts: list[str], cuts: list[int]) -> None:
    payloads = [json.dumps({"message": t}, ensure_ascii=False).encode() for t in texts]
    stream = b"".join(jsonenc.record(p) for p in payloads)
    chunks, start, index = [], 0, 0
    while start < len(stream):
        size = cuts[index % len(cuts)]
        chunks.append(stream[start : start + size])
        start += size
        index += 1
    assert list(records(iter(chunks))) == payloads


def test_resources_arithmetic_and_description() -> None:
    total = Resources.parse("cpus:4;mem:8192;ports:[31000-31009,31020-31029]")
    used = Resources.parse("cpus:1.5;ports:[31005-31005,31020-31029]")
    left = total - used
    assert left.scalar("cpus") == 2.5
    assert left.ranges("ports") == ((31000, 31004), (31006, 31009))
    assert total.contains(used) and not left.contains(used)
    assert left + used == total
    assert total.describe("*") == (
        "cpus(allocated: *):4; mem(allocated: *):8192; ports(allocated: *):[31000-31009, 31020-31029]"
    )
    assert Resources.parse("cpus:0.1") + Resources.parse("cpus:0.2") == Resources.parse("cpus:0.3")


# ---------------------------------------------------------------------------------------
# the section 1.4 status-code table, in order


def _post(
    url: str,
    body: Any = None,
    headers: dict[str, str] | None = None,
    raw: bytes | None = None,
    method: str = "POST",
) -> httpx.Response:
    content = raw if raw is not None else (json.dumps(body).encode() if body is not None else b"")
    base = {"Content-Type": "application/json", "Accept": "application/json"}
    base.update(headers or {})
    base = {k: v for k, v in base.items() if v is not None}
    return httpx.request(method, url + "/api/v1/scheduler", content=content, headers=base, timeout=5)


def test_status_codes_before_the_call_is_understood(emulator: Emulator) -> None:
    url = emulator.url
    assert _post(url, SUBSCRIBE, method="GET").status_code == 405
    response = _post(url, SUBSCRIBE, method="PUT")
    assert response.status_code == 405 and response.headers["Allow"] == "POST"
    missing = httpx.post(url + "/api/v1/scheduler", content=b"{}", timeout=5)
    assert missing.status_code == 400 and "Content-Type" in missing.text
    assert _post(url, raw=b"{not json").status_code == 400
    bad = _post(url, {"type": "KILL", "framework_id": {"value": "x"}, "kill": {}})
    assert bad.status_code == 400
    assert bad.text == "Failed to convert JSON into Call protobuf: Missing required fields: kill.task_id"
    assert _post(url, SUBSCRIBE, {"Content-Type": "text/plain"}).status_code == 415
    # Mesos compares the media type literally: parameters make it unsupported.
    assert _post(url, SUBSCRIBE, {"Content-Type": "application/json; charset=utf-8"}).status_code == 415
    # 405 is checked before the content type, 415 before call validation.
    assert _post(url, SUBSCRIBE, {"Content-Type": "text/plain"}, method="GET").status_code == 405
    assert _post(url, {"type": "TEARDOWN"}, {"Content-Type": "text/plain"}).status_code == 415


def test_call_validation_messages(emulator: Emulator) -> None:
    url = emulator.url
    cases = [
        ({}, "Expecting 'type' to be present"),
        ({"type": "SUBSCRIBE"}, "Expecting 'subscribe' to be present"),
        (
            {
                "type": "SUBSCRIBE",
                "framework_id": {"value": "a"},
                "subscribe": {"framework_info": {"user": "u", "name": "n"}},
            },
            "'framework_id' differs from 'subscribe.framework_info.id'",
        ),
        ({"type": "TEARDOWN"}, "Expecting 'framework_id' to be present"),
        ({"type": "ACCEPT", "framework_id": {"value": "f"}}, "Expecting 'accept' to be present"),
        (
            {
                "type": "ACKNOWLEDGE",
                "framework_id": {"value": "f"},
                "acknowledge": {"agent_id": {"value": "a"}, "task_id": {"value": "t"}, "uuid": b64(b"short")},
            },
            "Not a valid UUID",
        ),
    ]
    for body, message in cases:
        response = _post(url, body)
        assert response.status_code == 400, body
        assert response.text == f"Failed to validate scheduler::Call: {message}"


def test_subscribe_accept_and_stream_id_rules(emulator: Emulator) -> None:
    url = emulator.url
    assert _post(url, SUBSCRIBE, {"Accept": "application/x-protobuf"}).status_code == 406
    assert _post(url, SUBSCRIBE, {"Accept": "text/html"}).status_code == 406
    assert _post(url, SUBSCRIBE, {"Accept": "application/json;q=0"}).status_code == 406
    # 406 comes after call validation: an invalid call is still a 400.
    assert _post(url, {"type": "SUBSCRIBE"}, {"Accept": "text/html"}).status_code == 400
    with_id = _post(url, SUBSCRIBE, {"Mesos-Stream-Id": "x"})
    assert with_id.status_code == 400
    assert with_id.text == "Subscribe calls should not include the 'Mesos-Stream-Id' header"
    # A non-SUBSCRIBE call never needs Accept.
    teardown = _post(url, {"type": "TEARDOWN", "framework_id": {"value": "nope"}}, {"Accept": "text/html"})
    assert teardown.status_code == 400 and teardown.text == "Framework cannot be found"


def test_calls_for_a_known_framework(emulator: Emulator, subscribers: list[Subscriber]) -> None:
    sub = subscribe(emulator, subscribers, failover_timeout=60)
    missing = sub.call("REVIVE", stream_id=None)
    assert missing.status_code == 400
    assert missing.text == "All non-subscribe calls should include the 'Mesos-Stream-Id' header"
    wrong = sub.call("REVIVE", stream_id="not-the-stream")
    assert wrong.status_code == 400 and "didn't match the stream ID" in wrong.text
    assert sub.call("REVIVE").status_code == 202
    assert sub.call("UNKNOWN").status_code == 501
    emulator.drop_stream(sub.framework_id or "")
    sub.wait_closed()
    emulator.wait_for(lambda e: not e.frameworks()[0]["connected"])
    # Disconnected: 403 comes before the stream-id check.
    assert sub.call("REVIVE").status_code == 403
    assert sub.call("REVIVE", stream_id=None).status_code == 403
    assert sub.call("REVIVE").text == "Framework is not subscribed"


def test_basic_authentication(emulator: Emulator, subscribers: list[Subscriber]) -> None:
    emulator.set_credentials({"alice": "s3cret", "bob": "pw"})
    url = emulator.url
    denied = _post(url, SUBSCRIBE)
    assert denied.status_code == 401
    assert denied.headers["WWW-Authenticate"] == 'Basic realm="mesos-master-scheduler"'
    wrong = _post(url, SUBSCRIBE, {"Authorization": "Basic " + b64(b"alice:nope")})
    assert wrong.status_code == 401
    # 401 precedes everything, even a wrong method.
    assert _post(url, SUBSCRIBE, method="GET").status_code == 401
    mismatch = _post(
        url,
        {
            "type": "SUBSCRIBE",
            "subscribe": {"framework_info": {"user": "u", "name": "n", "principal": "bob"}},
        },
        {"Authorization": "Basic " + b64(b"alice:s3cret")},
    )
    assert mismatch.status_code == 400 and "does not match principal 'bob'" in mismatch.text
    sub = Subscriber(url, framework_info(), auth=("alice", "s3cret")).subscribe()
    subscribers.append(sub)
    sub.next("SUBSCRIBED")
    assert emulator.frameworks()[0]["info"]["principal"] == "alice"  # filled in by the master
    assert sub.call("REVIVE").status_code == 202
    other = httpx.post(
        url + "/api/v1/scheduler",
        json={"type": "REVIVE", "framework_id": {"value": sub.framework_id}},
        headers={"Mesos-Stream-Id": sub.stream_id or ""},
        auth=("bob", "pw"),
        timeout=5,
    )
    assert other.status_code == 400 and "does not match principal 'alice'" in other.text


def test_not_leader_redirects_or_503(emulator: Emulator, subscribers: list[Subscriber]) -> None:
    sub = subscribe(emulator, subscribers)
    emulator.set_leader(False, "leader.example:5050")
    sub.wait_closed()  # a master that loses leadership drops its streams
    response = _post(emulator.url, SUBSCRIBE)
    assert response.status_code == 307
    assert response.headers["Location"] == "//leader.example:5050/api/v1/scheduler"
    emulator.set_leader(False, None)
    no_leader = _post(emulator.url, SUBSCRIBE)
    assert no_leader.status_code == 503 and no_leader.text == "No leader elected"
    emulator.set_leader(True)
    again = subscribe(emulator, subscribers)
    assert again.framework_id != sub.framework_id


def test_master_recovery_answers_503() -> None:
    # Recovery lasts long enough for a loaded machine to ask within it; the SUBSCRIBE is read
    # as a stream, so that one answered after recovery (a subscription) fails instead of hanging.
    with Emulator(**{**FAST, "registry_recovery_delay": 3.0}) as emu:
        headers = {"Content-Type": "application/json", "Accept": "application/json"}
        with httpx.stream(
            "POST", emu.url + "/api/v1/scheduler", json=SUBSCRIBE, headers=headers, timeout=5
        ) as response:
            assert response.status_code == 503
            assert response.read() == b"Master has not finished recovery"
        emu.wait_for(lambda e: _post(e.url, {"type": "TEARDOWN"}).status_code == 400, timeout=20)


def test_version_and_state_endpoints(emulator: Emulator) -> None:
    version = httpx.get(emulator.url + "/version", timeout=5).json()
    assert version["version"] == "1.11.0"
    state = httpx.get(emulator.url + "/master/state", timeout=5).json()
    assert len(state["slaves"]) == 1


# ---------------------------------------------------------------------------------------
# stream framing on the wire


def _raw_subscribe(port: int, count: int) -> tuple[bytes, list[bytes]]:
    """Subscribe over a raw socket; return the head and the first HTTP chunks."""
    body = json.dumps(SUBSCRIBE).encode()
    request = (
        b"POST /api/v1/scheduler HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
        b"Accept: application/json\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body)
    )
    sock = socket.create_connection(("127.0.0.1", port), timeout=5)
    sock.sendall(request)
    data = b""
    while b"\r\n\r\n" not in data:
        data += sock.recv(65536)
    head, rest = data.split(b"\r\n\r\n", 1)
    chunks: list[bytes] = []
    while len(chunks) < count:
        while b"\r\n" not in rest:
            rest += sock.recv(65536)
        size_line, rest = rest.split(b"\r\n", 1)
        size = int(size_line, 16)
        while len(rest) < size + 2:
            rest += sock.recv(65536)
        chunks.append(rest[:size])
        rest = rest[size + 2 :]
    sock.close()
    return head, chunks


def test_stream_is_chunked_json_with_one_record_per_chunk(emulator: Emulator) -> None:
    port = int(emulator.url.rsplit(":", 1)[1])
    head, chunks = _raw_subscribe(port, 2)
    text = head.decode()
    assert text.startswith("HTTP/1.1 200 OK")
    assert "Transfer-Encoding: chunked" in text and "Content-Length" not in text
    assert "Content-Type: application/json" in text and "Mesos-Stream-Id: " in text
    length, _, payload = chunks[0].partition(b"\n")
    assert int(length) == len(payload) and json.loads(payload)["type"] == "SUBSCRIBED"
    assert json.loads(chunks[1].partition(b"\n")[2]) == {"type": "HEARTBEAT"}


@pytest.mark.parametrize("mode", ["bytes", "split", "coalesce"])
def test_rechunked_streams_decode_identically(
    mode: str, subscribers: list[Subscriber], emulator: Emulator
) -> None:
    emulator.set_chunk_mode(mode)
    if mode == "bytes":
        port = int(emulator.url.rsplit(":", 1)[1])
        _, chunks = _raw_subscribe(port, 40)
        assert all(len(c) == 1 for c in chunks)
    sub = subscribe(emulator, subscribers, name="chunky ☃ name")
    sub.next("HEARTBEAT")
    offer = sub.offers()[0]
    assert offer["agent_id"]["value"] == emulator.agent_ids()[0]


def test_non_ascii_payloads_are_raw_utf8(emulator: Emulator, subscribers: list[Subscriber]) -> None:
    sub = subscribe(emulator, subscribers)
    offer = sub.offers()[0]
    task_id = "tâche-ü-名前"
    reply = sub.call("RECONCILE", {"tasks": [{"task_id": {"value": task_id}, "agent_id": offer["agent_id"]}]})
    assert reply.status_code == 202
    status = sub.update(task_id)
    assert status["task_id"]["value"] == task_id
    raw = next(r for r in sub.raw if task_id.encode() in r)
    assert b"\\u" not in raw  # written as raw UTF-8, so bytes != characters
    assert len(raw) > len(raw.decode("utf-8"))
