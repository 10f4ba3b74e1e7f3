"""ZooKeeper leader detection against a real ZooKeeper (Debian's ``zookeeper`` package,
started by the test on a free port, ``tests/zookeeper_server.py``).

Masters register as Mesos masters do: ephemeral sequential ``json.info_`` znodes holding the
MasterInfo JSON, the lowest sequence leading. First with scripted servers (the client alone),
then with master emulators that join the group themselves, and a whole backend that follows
a leader change: the leader stops, the backend re-subscribes to the new leader with the same
framework id, reconciles the task the old leader ran, and places the job again there.
"""

from __future__ import annotations

import json
import urllib.error
import urllib.request
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.backend_conformance import Harness, gang, launches, wait_for
from tests.mesos_fixtures import PY, eventually, mesos_test_config, start_emulator
from tests.mesos_script_server import Reply, ScriptServer
from tests.zookeeper_server import zookeeper_server
from tfdeclare.backends.mesos import BaseHandler, ClientConfig, FrameworkInfo, SchedulerClient
from tfdeclare.backends.mesos.backend import MesosBackend
from tfdeclare.backends.mesos.errors import MesosConnectionError
from tfdeclare.core.enums import TaskState
from tfdeclare.core.run.tasks import Placement

pytestmark = pytest.mark.slow  # a Java server, real task processes

SLEEP = [PY, "-c", "import time; time.sleep(120)"]


@pytest.fixture(scope="module")
def zookeeper(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    with zookeeper_server(tmp_path_factory.mktemp("zookeeper")) as hosts:
        yield hosts


@pytest.fixture
def zk(zookeeper: str) -> Iterator[Any]:
    from kazoo.client import KazooClient

    client = KazooClient(hosts=zookeeper)
    client.start(timeout=10)
    yield client
    client.stop()
    client.close()


def _register(zk: Any, path: str, server: ScriptServer) -> str:
    info = {"id": "m", "address": {"hostname": "127.0.0.1", "ip": "127.0.0.1", "port": server.port}}
    node: str = zk.create(f"{path}/json.info_", json.dumps(info).encode(), ephemeral=True, sequence=True)
    return node


def _client(zookeeper: str, path: str) -> SchedulerClient:
    """A client of the masters registered at ``path``, retrying quickly."""
    config = ClientConfig(
        master=f"zk://{zookeeper}{path}",
        framework=FrameworkInfo(user="svc", name="zk-test"),
        backoff_initial=0.05,
        backoff_cap=0.2,
    )
    return SchedulerClient(config, BaseHandler())


def test_follows_the_lowest_sequence_and_its_changes(zookeeper: str, zk: Any) -> None:
    path = f"/tfdeclare-test-{uuid.uuid4().hex}"
    first, second = ScriptServer(), ScriptServer()
    client = _client(zookeeper, path)
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


def test_a_named_leader_that_still_redirects_is_asked_again_not_followed(zookeeper: str, zk: Any) -> None:
    """The race a leader change runs (seen in CI): ZooKeeper tells us the new leader before it
    tells the new leader itself, which answers 307 to the old one, stopped by then. Following
    that redirect left the client on the stopped master for good (ZooKeeper had nothing more
    to say). The client must keep to the leader ZooKeeper names and ask it again."""
    path = f"/tfdeclare-test-{uuid.uuid4().hex}"
    leader, gone = ScriptServer(), ScriptServer()
    gone.close()  # the old leader: nothing listens at its address any more
    redirected = []

    def not_yet(req: Any) -> Any:
        if len(redirected) < 2:  # it learns that it leads after two SUBSCRIBEs
            redirected.append(req)
            return Reply(307, headers={"Location": gone.location})
        return leader.default_subscribe(req)

    leader.on_subscribe = not_yet
    client = _client(zookeeper, path)
    try:
        zk.ensure_path(path)
        _register(zk, path, leader)
        client.start()
        assert client.wait_subscribed(10) == "fw-1"
        assert len(redirected) == 2 and len(leader.subscribes()) == 3
        assert client.endpoint == leader.url + "/api/v1/scheduler"
    finally:
        client.stop()
        leader.close()
        zk.delete(path, recursive=True)


def test_a_call_redirected_to_an_old_leader_does_not_move_the_subscription(zookeeper: str, zk: Any) -> None:
    """A call answered with 307 goes where the answer says, but with ZooKeeper the next
    SUBSCRIBE still goes to the leader ZooKeeper names: a redirect can name a stopped master."""
    path = f"/tfdeclare-test-{uuid.uuid4().hex}"
    leader, gone = ScriptServer(), ScriptServer()
    gone.close()
    client = _client(zookeeper, path)
    try:
        zk.ensure_path(path)
        _register(zk, path, leader)
        client.start()
        assert client.wait_subscribed(10) == "fw-1"
        leader.on_call = lambda req: Reply(307, headers={"Location": gone.location})
        with pytest.raises(MesosConnectionError):
            client.revive()  # followed to the stopped master
        leader.on_call = lambda req: Reply(202)
        leader.wait_stream(1).abort()  # the stream drops: subscribe again, to the leader
        leader.wait(lambda: len(leader.subscribes()) == 2, timeout=10)
        assert client.wait_subscribed(10) == "fw-1"
        assert client.endpoint == leader.url + "/api/v1/scheduler"
    finally:
        client.stop()
        leader.close()
        zk.delete(path, recursive=True)


def _status(url: str) -> tuple[int, str | None]:
    """(status, Location) of a scheduler call to ``url``, redirects not followed."""

    class NoRedirect(urllib.request.HTTPRedirectHandler):
        def redirect_request(self, *args: Any) -> None:
            return None

    request = urllib.request.Request(url + "/api/v1/scheduler", data=b"{}", method="POST")
    request.add_header("Content-Type", "application/json")
    try:
        with urllib.request.build_opener(NoRedirect).open(request, timeout=5) as response:
            return response.status, None
    except urllib.error.HTTPError as err:
        return err.code, err.headers.get("Location")


def test_emulators_join_the_group_as_masters_do_and_standbys_redirect(
    zookeeper: str, zk: Any, tmp_path: Path
) -> None:
    path = f"/mesos-{uuid.uuid4().hex[:8]}"
    first = start_emulator(tmp_path / "a", zookeeper=f"zk://{zookeeper}{path}")
    second = start_emulator(tmp_path / "b", zookeeper=f"zk://{zookeeper}{path}")
    try:
        members = sorted(zk.get_children(path))
        assert len(members) == 2 and all(m.startswith("json.info_") for m in members)
        data, stat = zk.get(f"{path}/{members[0]}")
        assert stat.ephemeralOwner != 0  # lives as long as the master's session
        info = json.loads(data)
        assert info["id"] == first.master_id and info["address"]["port"] == int(first.url.rsplit(":", 1)[1])
        assert info["pid"] == f"master@127.0.0.1:{info['port']}" and info["version"]
        # The standby answers 307 to the leader (the leader itself answers: 400 for "{}").
        port = info["address"]["port"]
        assert _status(second.url) == (307, f"//127.0.0.1:{port}/api/v1/scheduler")
        assert _status(first.url)[0] == 400
        first.stop()  # leaves the group: the second leads
        eventually(lambda: len(zk.get_children(path)) == 1, timeout=10)
        eventually(lambda: _status(second.url)[0] == 400, timeout=10)
    finally:
        first.stop()
        second.stop()
        zk.delete(path, recursive=True)


def test_the_backend_follows_a_leader_change_and_reconciles(zookeeper: str, zk: Any, tmp_path: Path) -> None:
    """Two emulated masters in ZooKeeper; a job runs under the first; the first stops. The
    backend follows ZooKeeper to the second, re-subscribes with the same framework id, learns
    by reconciliation that its task is unknown there, and the job is placed and runs again."""
    path = f"/mesos-{uuid.uuid4().hex[:8]}"
    master = f"zk://{zookeeper}{path}"
    first = start_emulator(tmp_path / "a", zookeeper=master)
    second = start_emulator(tmp_path / "b", zookeeper=master)
    config = mesos_test_config(master, fencing_timeout_s=1.0)
    harness = Harness(lambda: MesosBackend(tmp_path / "state", config), tmp_path)
    try:
        backend = harness.backend()
        assert isinstance(backend, MesosBackend)
        placement = backend.place(gang("zk-job", 1))
        assert isinstance(placement, Placement), placement
        tasks = launches(harness, placement, SLEEP)
        backend.launch(placement, tasks)
        task_id = tasks[0].task_id
        wait_for(backend, lambda ts: task_id in ts and ts[task_id].state is TaskState.RUNNING)
        saved = json.loads((tmp_path / "state" / "mesos" / "framework.json").read_text())
        assert len(first.calls("SUBSCRIBE")) == 1 and not second.calls("SUBSCRIBE")
        first.stop()  # the leader stops (its agent's tasks with it)
        subscribe = eventually(lambda: second.calls("SUBSCRIBE"), timeout=20)[0]
        assert subscribe["call"]["subscribe"]["framework_info"]["id"]["value"] == saved["frameworkId"]
        # Unknown to the new leader: reconciled as gone, then ended (after the fencing timeout).
        wait_for(backend, lambda ts: ts[task_id].state.ended, timeout=30)
        again = eventually(lambda: _placed(backend, gang("zk-job", 1)), timeout=20)
        relaunched = launches(harness, again, SLEEP)
        backend.launch(again, relaunched)
        new_id = relaunched[0].task_id
        wait_for(backend, lambda ts: new_id in ts and ts[new_id].state is TaskState.RUNNING)
        assert new_id in second.tasks()
    finally:
        harness.close()
        first.stop()
        second.stop()
        zk.delete(path, recursive=True)


def _placed(backend: MesosBackend, request: Any) -> Placement | None:
    answer = backend.place(request)
    return answer if isinstance(answer, Placement) else None


def test_plan_asks_the_leader_zookeeper_names_for_its_agents(zookeeper: str, zk: Any, tmp_path: Path) -> None:
    """``plan``'s one read-only question (issue 32) finds the master as the client does: the
    lowest member of the group; no leader registered is an error, never a hang."""
    from tfdeclare.backends.mesos.readonly import agents_of, ask

    path = f"/mesos-{uuid.uuid4().hex[:8]}"
    with pytest.raises(MesosConnectionError, match="names no leading Mesos master"):
        ask(f"zk://{zookeeper}{path}", "GET_AGENTS", timeout_s=5)
    leader = start_emulator(tmp_path / "a", agents=2, zookeeper=f"zk://{zookeeper}{path}")
    standby = start_emulator(tmp_path / "b", agents=1, zookeeper=f"zk://{zookeeper}{path}")
    try:
        listed = agents_of(ask(f"zk://{zookeeper}{path}", "GET_AGENTS", timeout_s=5))
        assert sorted(a["agent_info"]["id"]["value"] for a in listed) == sorted(leader.agent_ids())
    finally:
        standby.stop()
        leader.stop()
        zk.delete(path, recursive=True)
