"""Unit tests of the client's pure parts: FrameworkInfo, call bodies, leader selection, auth."""

from __future__ import annotations

import json
import random
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import httpx
import pytest

from tfdeclare.backends.mesos import calls
from tfdeclare.backends.mesos.auth import Credentials, Secret, load_credentials
from tfdeclare.backends.mesos.client import Backoff, ClientConfig
from tfdeclare.backends.mesos.errors import (
    AuthenticationError,
    BadRequestError,
    ConfigError,
    ForbiddenError,
    MesosHTTPError,
    NotAcceptableError,
    ServerError,
    UnsupportedMediaTypeError,
    error_for_status,
)
from tfdeclare.backends.mesos.events import Offer, TaskStatus
from tfdeclare.backends.mesos.info import Capability, FrameworkInfo
from tfdeclare.backends.mesos.leader import (
    ZooKeeperDetector,
    ZooKeeperMaster,
    master_url_from_info,
    parse_master,
    resolve_redirect,
    select_leader_znode,
)

# ------------------------------------------------------------------ FrameworkInfo


def test_framework_info_json_first_subscribe() -> None:
    info = FrameworkInfo(user="svc", name="tfdeclare", roles=("gpu", "cpu"), principal="tfd", hostname="h")
    body = calls.subscribe(info, suppressed_roles=("cpu",))
    assert "framework_id" not in body
    fi = body["subscribe"]["framework_info"]
    assert "id" not in fi and "role" not in fi
    assert fi["user"] == "svc" and fi["name"] == "tfdeclare" and fi["roles"] == ["gpu", "cpu"]
    assert fi["checkpoint"] is True and fi["failover_timeout"] == 7 * 24 * 3600.0
    assert [c["type"] for c in fi["capabilities"]] == [
        "GPU_RESOURCES",
        "PARTITION_AWARE",
        "TASK_KILLING_STATE",
        "MULTI_ROLE",
    ]
    assert body["subscribe"]["suppressed_roles"] == ["cpu"]


def test_framework_info_json_with_id() -> None:
    info = FrameworkInfo(user="svc", name="n", id="abc-0001", role="ml", capabilities=(), labels={"a": "b"})
    body = calls.subscribe(info)
    assert body["framework_id"] == body["subscribe"]["framework_info"]["id"] == {"value": "abc-0001"}
    fi = body["subscribe"]["framework_info"]
    assert fi["role"] == "ml" and "roles" not in fi and "capabilities" not in fi
    assert fi["labels"] == {"labels": [{"key": "a", "value": "b"}]}


@pytest.mark.parametrize(
    "kwargs",
    [
        {"user": ""},
        {"name": ""},
        {"id": "a/b"},
        {"id": ".."},
        {"id": "x" * 256},
        {"failover_timeout": -1.0},
        {"failover_timeout": float("inf")},
        {"role": "a", "roles": ("b",)},
        {"roles": ("a", "a")},
        {"role": "a", "capabilities": (Capability.MULTI_ROLE,)},
    ],
)
def test_framework_info_validation(kwargs: dict[str, Any]) -> None:
    args: dict[str, Any] = {"user": "u", "name": "n", **kwargs}
    with pytest.raises(ConfigError):
        FrameworkInfo(**args)


# ------------------------------------------------------------------- call bodies


def test_call_bodies() -> None:
    task = {"name": "t", "task_id": {"value": "t1"}, "agent_id": {"value": "a1"}}
    assert calls.accept(["o1"], [calls.launch_operation([task])], 30) == {
        "type": "ACCEPT",
        "accept": {
            "offer_ids": [{"value": "o1"}],
            "operations": [{"type": "LAUNCH", "launch": {"task_infos": [task]}}],
            "filters": {"refuse_seconds": 30.0},
        },
    }
    assert calls.decline(["o1", "o2"], None) == {
        "type": "DECLINE",
        "decline": {"offer_ids": [{"value": "o1"}, {"value": "o2"}]},
    }
    assert calls.decline(["o1"], 0)["decline"]["filters"] == {"refuse_seconds": 0.0}
    assert calls.revive(["a"]) == {"type": "REVIVE", "revive": {"roles": ["a"]}}
    assert calls.suppress([]) == {"type": "SUPPRESS", "suppress": {"roles": []}}
    assert calls.kill("t1", None, None) == {"type": "KILL", "kill": {"task_id": {"value": "t1"}}}
    assert calls.kill("t1", "a1", 2.5)["kill"] == {
        "task_id": {"value": "t1"},
        "agent_id": {"value": "a1"},
        "kill_policy": {"grace_period": {"nanoseconds": 2_500_000_000}},
    }
    assert calls.acknowledge("a1", "t1", "q+/=")["acknowledge"]["uuid"] == "q+/="
    assert calls.reconcile([]) == {"type": "RECONCILE", "reconcile": {"tasks": []}}
    assert calls.reconcile([("t1", "a1"), ("t2", None)])["reconcile"]["tasks"] == [
        {"task_id": {"value": "t1"}, "agent_id": {"value": "a1"}},
        {"task_id": {"value": "t2"}},
    ]
    assert calls.teardown() == {"type": "TEARDOWN"}
    uf = calls.update_framework(FrameworkInfo(user="u", name="n", id="f1"), ["r"])
    assert uf["update_framework"]["framework_info"]["id"] == {"value": "f1"}
    assert uf["update_framework"]["suppressed_roles"] == ["r"]


def test_call_body_validation() -> None:
    with pytest.raises(ConfigError):
        calls.decline([], None)
    with pytest.raises(TypeError):
        calls.decline("o1", None)
    with pytest.raises(ConfigError):
        calls.decline(["o1"], -1)
    with pytest.raises(ConfigError):
        calls.kill("t", None, float("nan"))


def test_event_views() -> None:
    offer = Offer.from_json(
        {"id": {"value": "o"}, "agent_id": {"value": "a"}, "hostname": "h", "allocation_info": {"role": "r"}}
    )
    assert (offer.id, offer.agent_id, offer.hostname, offer.role) == ("o", "a", "h", "r")
    assert offer.resources == [] and offer.attributes == []  # omitted lists are empty
    status = TaskStatus.from_json(
        {"task_id": {"value": "t"}, "state": "TASK_LOST", "source": "SOURCE_MASTER"}
    )
    assert status.uuid is None and status.agent_id is None and status.state == "TASK_LOST"


# ---------------------------------------------------------------- leader finding


def test_parse_master() -> None:
    assert parse_master("m1:5050").endpoints == ("http://m1:5050/api/v1/scheduler",)
    assert parse_master("https://m/prefix/").endpoints == ("https://m/prefix/api/v1/scheduler",)
    assert parse_master("http://a:1, b:2").endpoints == (
        "http://a:1/api/v1/scheduler",
        "http://b:2/api/v1/scheduler",
    )
    zk = parse_master("zk://h1:2181,h2:2181/mesos").zookeeper
    assert zk == ZooKeeperMaster("h1:2181,h2:2181", "/mesos")
    for bad in ("", "ftp://x", "http://user:pw@m:5050", "zk:///mesos", "zk://u:p@h/mesos"):
        with pytest.raises(ConfigError):
            parse_master(bad)


def test_resolve_redirect_protocol_relative() -> None:
    cur = "https://m1:5050/api/v1/scheduler"
    assert resolve_redirect(cur, "//m2:5051/api/v1/scheduler") == "https://m2:5051/api/v1/scheduler"
    assert (
        resolve_redirect("http://m1:5050/api/v1/scheduler", "//m2:5050") == "http://m2:5050/api/v1/scheduler"
    )
    assert resolve_redirect(cur, "http://m3:1/api/v1/scheduler") == "http://m3:1/api/v1/scheduler"
    for bad in (None, "", "/api/v1/scheduler"):
        with pytest.raises(ConfigError):
            resolve_redirect(cur, bad)


def test_select_leader_znode_lowest_sequence() -> None:
    children = [
        "log_replicas",
        "json.info_0000000012",
        "info_0000000001",  # legacy binary protobuf: ignored
        "json.info_0000000003",
        "json.info_0000000010",
        "json.info_x",
    ]
    assert select_leader_znode(children) == "json.info_0000000003"
    assert select_leader_znode(["log_replicas", "info_0000000001"]) is None
    assert select_leader_znode([]) is None


def test_master_url_from_info() -> None:
    info = {"address": {"hostname": "m2.example", "ip": "10.0.0.2", "port": 5051}, "hostname": "x", "port": 1}
    assert master_url_from_info(json.dumps(info).encode()) == "http://m2.example:5051/api/v1/scheduler"
    # old MasterInfo without address: ip is a uint32 in network byte order (127.0.0.1 here)
    assert master_url_from_info(b'{"ip": 16777343, "port": 5050}', "https") == (
        "https://127.0.0.1:5050/api/v1/scheduler"
    )
    for bad in (b"\x08\x01", b"[]", b"{}"):
        with pytest.raises((ValueError, TypeError)):
            master_url_from_info(bad)


def test_zookeeper_detector_reports_leader_changes() -> None:
    datas = {
        "/mesos/json.info_0000000005": b'{"address": {"ip": "10.0.0.5", "port": 5050}}',
        "/mesos/json.info_0000000007": b'{"address": {"ip": "10.0.0.7", "port": 5050}}',
    }

    class FakeKazoo:
        def get(self, path: str) -> tuple[bytes, None]:
            return datas[path], None

    seen: list[str | None] = []
    detector = ZooKeeperDetector(ZooKeeperMaster("zk:2181", "/mesos"), seen.append)
    detector._client = FakeKazoo()  # the kazoo wiring itself is not exercised here
    detector._children_changed(["log_replicas", "json.info_0000000007", "json.info_0000000005"])
    detector._children_changed(["json.info_0000000007"])
    detector._children_changed(["json.info_0000000009"])  # vanished before it could be read
    detector._children_changed([])
    assert seen == [
        "http://10.0.0.5:5050/api/v1/scheduler",
        "http://10.0.0.7:5050/api/v1/scheduler",
        None,
        None,
    ]


def test_zookeeper_detector_waits_for_the_path() -> None:
    class FakeKazoo:
        def __init__(self) -> None:
            self.exists_result = False
            self.watches: list[Any] = []

        def exists(self, path: str, watch: Any = None) -> bool:
            self.watches.append(watch)
            return self.exists_result

        def get(self, path: str) -> tuple[bytes, None]:
            return b'{"address": {"ip": "10.0.0.5", "port": 5050}}', None

    seen: list[str | None] = []
    armed: list[str] = []

    def children_watch(client: Any, path: str, func: Any) -> None:
        armed.append(path)
        func(["json.info_0000000001"])

    detector = ZooKeeperDetector(ZooKeeperMaster("zk:2181", "/mesos"), seen.append)
    fake = FakeKazoo()
    detector._client = fake
    detector._children_watch = children_watch
    detector._path_changed()
    assert seen == [None] and armed == []
    fake.exists_result = True
    fake.watches[-1](SimpleNamespace(type="CREATED"))
    assert armed == ["/mesos"] and seen == [None, "http://10.0.0.5:5050/api/v1/scheduler"]
    fake.watches[-1](SimpleNamespace(type="CHANGED"))  # a data change arms no second watch
    assert armed == ["/mesos"]


# --------------------------------------------------------------- auth and config


def test_secret_is_masked_everywhere(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    secret_file = tmp_path / "secret"
    secret_file.write_text("s3cr3t-value\n")
    creds = load_credentials("tfd", secret_file=secret_file)
    assert creds.secret.reveal() == "s3cr3t-value"
    monkeypatch.setenv("TFD_MESOS_SECRET", "s3cr3t-value")
    assert load_credentials("tfd", secret_env="TFD_MESOS_SECRET") == creds
    config = ClientConfig(
        master="m:5050", framework=FrameworkInfo(user="u", name="n"), credentials=creds, backoff_seed=1
    )
    for text in (repr(creds), str(creds), repr(config), f"{creds.secret}", repr(Secret("s3cr3t-value"))):
        assert "s3cr3t-value" not in text
    with pytest.raises(TypeError):
        import pickle

        pickle.dumps(creds.secret)


def test_credential_errors_do_not_leak(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("NOPE_NOT_SET", raising=False)
    with pytest.raises(ConfigError, match="NOPE_NOT_SET"):
        load_credentials("p", secret_env="NOPE_NOT_SET")
    with pytest.raises(ConfigError):
        load_credentials("p", secret_file=tmp_path / "missing")
    with pytest.raises(ConfigError):
        load_credentials("p")
    with pytest.raises(ConfigError):
        load_credentials("a:b", secret_env="X")
    (tmp_path / "empty").write_text("\n")
    with pytest.raises(ConfigError):
        load_credentials("p", secret_file=tmp_path / "empty")
    assert isinstance(Credentials("p", Secret("x")).httpx_auth(), httpx.BasicAuth)


def test_client_config_validation() -> None:
    fw = FrameworkInfo(user="u", name="n")
    for kwargs in ({"backoff_initial": 0}, {"backoff_cap": 0.1, "backoff_initial": 1}, {"backoff_jitter": 1}):
        with pytest.raises(ConfigError):
            ClientConfig(master="m:5050", framework=fw, **kwargs)
    with pytest.raises(ConfigError):
        ClientConfig(master="ftp://m", framework=fw)


def test_backoff_is_capped_exponential_with_jitter() -> None:
    b = Backoff(0.5, 15.0, 0.0, random.Random(0))
    assert [b.next() for _ in range(8)] == [0.5, 1.0, 2.0, 4.0, 8.0, 15.0, 15.0, 15.0]
    b.reset()
    assert b.next() == 0.5
    j = Backoff(0.5, 15.0, 0.2, random.Random(0))
    delays = [j.next() for _ in range(200)]
    assert all(0.4 <= d <= 15.0 for d in delays) and max(delays[10:]) > min(delays[10:])


@pytest.mark.parametrize(
    ("status", "cls"),
    [
        (400, BadRequestError),
        (401, AuthenticationError),
        (403, ForbiddenError),
        (406, NotAcceptableError),
        (415, UnsupportedMediaTypeError),
        (500, ServerError),
        (503, ServerError),
        (418, MesosHTTPError),
    ],
)
def test_error_for_status(status: int, cls: type[MesosHTTPError]) -> None:
    err = error_for_status(status, "Framework is not subscribed", "KILL")
    assert type(err) is cls and err.status == status
    assert str(err) == f"KILL: HTTP {status}: Framework is not subscribed"
