"""ZooKeeper leader detection against a real ZooKeeper (optional).

Runs only when ``TFDECLARE_TEST_ZK=host:port`` names a ZooKeeper server that may be written
to, and kazoo is installed. Masters are scripted servers registered as Mesos masters do it:
ephemeral sequential ``json.info_`` znodes holding a JSON MasterInfo.
"""

from __future__ import annotations

import json
import os
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from tests.mesos_script_server import ScriptServer
from tfdeclare.backends.mesos import BaseHandler, ClientConfig, FrameworkInfo, SchedulerClient

ZK = os.environ.get("TFDECLARE_TEST_ZK")
pytestmark = pytest.mark.skipif(not ZK, reason="set TFDECLARE_TEST_ZK=host:port to run")


@pytest.fixture
def zk() -> Iterator[Any]:
    kazoo_client = pytest.importorskip("kazoo.client")
    client = kazoo_client.KazooClient(hosts=ZK)
    client.start(timeout=10)
    yield client
    client.stop()
    client.close()


def _register(zk: Any, path: str, server: ScriptServer) -> str:
    info = {"id": "m", "address": {"hostname": "127.0.0.1", "ip": "127.0.0.1", "port": server.port}}
    node: str = zk.create(f"{path}/json.info_", json.dumps(info).encode(), ephemeral=True, sequence=True)
    return node


def test_follows_the_lowest_sequence_and_its_changes(zk: Any) -> None:
    path = f"/tfdeclare-test-{uuid.uuid4().hex}"
    first, second = ScriptServer(), ScriptServer()
    client = SchedulerClient(
        ClientConfig(
            master=f"zk://{ZK}{path}",
            framework=FrameworkInfo(user="svc", name="zk-test"),
            backoff_initial=0.05,
            backoff_cap=0.2,
        ),
        BaseHandler(),
    )
    try:
        client.start()  # the path does not exist yet
        zk.ensure_path(path)
        zk.create(f"{path}/log_replicas", b"")
        leader = _register(zk, path, first)
        _register(zk, path, second)
        assert client.wait_subscribed(10) == "fw-1"
        assert len(first.subscribes()) == 1 and not second.subscribes()
        zk.delete(leader)  # the leader goes away: re-subscribe to the next one
        second.wait(lambda: len(second.subscribes()) == 1, timeout=10)
        assert second.subscribes()[0].json["framework_id"] == {"value": "fw-1"}
        assert client.endpoint == second.url + "/api/v1/scheduler"
    finally:
        client.stop()
        first.close()
        second.close()
        zk.delete(path, recursive=True)
