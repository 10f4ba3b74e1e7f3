"""ZooKeeper leader election on a real Apache Mesos 1.11.0 cluster (issue 33; ``make
real-mesos``, Debian's ZooKeeper): two clusters on one ZooKeeper path elect one leading master
(tests/real_mesos.py, ``zookeeper=``); the agents of both register with it; the backend,
given ``zk://``, subscribes to it; when its process stops the other master is elected, the
agents re-register with it, and the backend follows with the same framework, its task still
running.

What is checked is what the real masters say (``/master/state``), never what the backend
believes it did.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator
from functools import partial
from pathlib import Path
from typing import Any

import pytest

from tests.backend_conformance import Harness, wait_for
from tests.mesos_fixtures import eventually as _eventually
from tests.mesos_fixtures import mesos_test_config
from tests.real_mesos import RealMesos
from tests.real_mesos_backend import backends, run_one, stop_one
from tests.zookeeper_server import zookeeper_server
from tfdeclare.backends.mesos.backend import MesosBackend
from tfdeclare.core.enums import TaskState
from tfdeclare.core.spec.resources import Resources

__all__ = ["backends"]  # the fixture

pytestmark = [pytest.mark.real_mesos, pytest.mark.slow]

eventually = partial(_eventually, timeout=60.0)  # ZooKeeper's session timeout is 10 s
Start = Callable[..., RealMesos]


@pytest.fixture
def zookeeper(tmp_path: Path) -> Iterator[str]:
    """A ZooKeeper server of this test (stopped after the clusters: asked for first)."""
    with zookeeper_server(tmp_path / "zookeeper") as hosts:
        yield hosts


def state(mesos: RealMesos) -> dict[str, Any]:
    """The master's state; empty while it redirects to a leader that is gone (refused)."""
    try:
        return mesos.state()
    except OSError:
        return {}


def leader(mesos: RealMesos) -> str | None:
    return state(mesos).get("leader")


def framework(mesos: RealMesos, framework_id: str) -> dict[str, Any] | None:
    return next((f for f in state(mesos).get("frameworks", []) if f["id"] == framework_id), None)


def test_a_leader_change_is_followed_by_the_agents_and_the_framework(
    zookeeper: str, real_mesos: Start, tmp_path: Path, backends: list[Harness]
) -> None:
    url = f"zk://{zookeeper}/mesos"
    first = real_mesos(agents=0, zookeeper=url)  # a master alone, elected first
    assert eventually(lambda: leader(first) == f"master@127.0.0.1:{first.port}")
    second = real_mesos(agents=2, resources="cpus:2;mem:1024;ports:[31000-31099]", zookeeper=url)
    # second's agents detected the leader in ZooKeeper and registered with the first master
    assert len(first.state()["slaves"]) == 2 and leader(second) == leader(first)

    settings = mesos_test_config(url, shared_filesystem=True, failover_timeout_s=300.0)
    harness = Harness(lambda: MesosBackend(tmp_path / "state", settings), tmp_path)
    backends.append(harness)
    backend = harness.backend()
    task = run_one(
        harness, backend, "zk", [sys.executable, "-c", "import time; time.sleep(300)"], Resources(1, 128)
    )
    assert eventually(lambda: task.task_id in first.running())
    [ours] = first.frameworks()

    first.stop()  # the leader's process ends; its ZooKeeper session expires
    assert eventually(lambda: leader(second) == f"master@127.0.0.1:{second.port}")
    # the agents re-registered with the new leader, with the task, and the backend re-subscribed
    # with the same framework id (the new master knows it from the agents and the subscription)
    assert eventually(lambda: len(state(second).get("slaves", [])) == 2)
    assert eventually(lambda: (f := framework(second, ours["id"])) is not None and f["active"])
    assert eventually(lambda: task.task_id in second.running())
    wait_for(backend, lambda ts: ts[task.task_id].state is TaskState.RUNNING, timeout=60)
    stop_one(backend, task)
    assert eventually(lambda: task.task_id not in second.running())
