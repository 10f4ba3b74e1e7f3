"""The emulator as a Mesos master in ZooKeeper: joining the masters' group, leading or not.

Upstream (``src/master/contender/zookeeper.cpp``, ``src/zookeeper/group.cpp``,
``src/master/detector/zookeeper.cpp``): every master joins the group at the ZooKeeper path
with an ephemeral, sequential znode labelled ``json.info`` (``<path>/json.info_0000000007``)
holding its ``MasterInfo`` as JSON; the member with the lowest sequence is the leader, and
schedulers and agents follow it. A master's znode lives as long as its session: a master that
stops (or whose session expires) leaves the group, and the next lowest leads.

``ZooKeeperContender`` does that for an emulator started with ``zookeeper="zk://h:p/path"``:
it joins with the emulator's MasterInfo, watches the group, and makes the emulator lead
while its znode is the lowest; otherwise the emulator is a standby that answers 307 to the
leader's address (as standby masters do). Needs ``kazoo``.
"""

from __future__ import annotations

import json
import logging
import re
import threading
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .emulator import Emulator

log = logging.getLogger("mesos_emulator.zookeeper")
MEMBER = re.compile(r"^json\.info_(\d+)$")


def parse_zk_url(url: str) -> tuple[str, str]:
    """``zk://h1:2181,h2:2181/mesos`` -> (hosts, path)."""
    if not url.startswith("zk://"):
        raise ValueError(f"expected zk://host:port/path, not {url!r}")
    hosts, _, path = url[len("zk://") :].partition("/")
    if not hosts or not path.strip("/"):
        raise ValueError(f"expected zk://host:port/path, not {url!r}")
    return hosts, "/" + path.strip("/")


def leader_of(children: list[str]) -> str | None:
    """The member with the lowest sequence (other children are not members)."""
    members = [(int(m.group(1)), child) for child in children if (m := MEMBER.match(child))]
    return min(members)[1] if members else None


class ZooKeeperContender:
    def __init__(self, emulator: Emulator, url: str, master_info: dict[str, Any]) -> None:
        self.hosts, self.path = parse_zk_url(url)
        self.emulator = emulator
        self.info = master_info
        self.znode: str | None = None  # our member, e.g. /mesos/json.info_0000000003
        self._client: Any = None
        self._lock = threading.Lock()
        self._stopped = False

    def start(self) -> ZooKeeperContender:
        from kazoo.client import KazooClient
        from kazoo.recipe.watchers import ChildrenWatch

        self._client = KazooClient(hosts=self.hosts, timeout=10.0)
        self._client.start(timeout=15.0)
        self._client.ensure_path(self.path)
        data = json.dumps(self.info).encode()
        self.znode = self._client.create(f"{self.path}/json.info_", data, ephemeral=True, sequence=True)
        log.info("joined the masters' group as %s", self.znode)
        ChildrenWatch(self._client, self.path, self._members_changed)  # also called once now
        return self

    def _members_changed(self, children: list[str]) -> bool:
        with self._lock:
            if self._stopped:
                return False  # stops the watch
            leader = leader_of(children)
            ours = self.znode.rsplit("/", 1)[1] if self.znode else None
            if leader is not None and leader == ours:
                self.emulator.set_leader(True)
                return True
            location = None
            if leader is not None:
                try:
                    data, _ = self._client.get(f"{self.path}/{leader}")
                    address = json.loads(data)["address"]
                    location = f"{address['ip']}:{address['port']}"
                except Exception as exc:  # the leader left meanwhile: the next change says who leads
                    log.warning("cannot read the leading master %s: %s", leader, exc)
            self.emulator.set_leader(False, location)
            return True

    def stop(self) -> None:
        """Leave the group (closing the session removes the ephemeral znode at once)."""
        with self._lock:
            self._stopped = True
        client, self._client = self._client, None
        if client is not None:
            try:
                client.stop()
                client.close()
            except Exception as exc:
                log.debug("closing the ZooKeeper client: %s", exc)
