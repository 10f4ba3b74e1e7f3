"""Finding the leading master: master URL parsing, 307 redirects, ZooKeeper detection.

This module owns (1) turning the configured master string into scheduler endpoint URLs,
(2) resolving a protocol-relative ``Location: //host:port/path`` against the URL in use,
(3) picking the leader among the ZooKeeper children of the Mesos path (lowest
``json.info_<seq>``) and reading its address from the MasterInfo JSON, and (4) a thin
kazoo-based watcher (the scheduler client) and a one-shot lookup (``plan``); kazoo is optional
and imported only when a ``zk://`` master is asked.
"""

from __future__ import annotations

import json
import logging
import re
import socket
import struct
import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from tfdeclare.backends.mesos.errors import ConfigError, MesosConnectionError

log = logging.getLogger(__name__)

SCHEDULER_PATH = "/api/v1/scheduler"
_ZNODE = re.compile(r"^json\.info_(\d+)$")


@dataclass(frozen=True, slots=True)
class ZooKeeperMaster:
    hosts: str  # "h1:2181,h2:2181"
    path: str  # "/mesos"


@dataclass(frozen=True, slots=True)
class MasterSpec:
    """Either a list of candidate scheduler endpoints, or a ZooKeeper location."""

    endpoints: tuple[str, ...] = ()
    zookeeper: ZooKeeperMaster | None = None


def _endpoint(url: str) -> str:
    if "://" not in url:
        url = "http://" + url
    parts = urlsplit(url)
    if parts.scheme not in {"http", "https"} or not parts.hostname:
        raise ConfigError(f"invalid master URL {url!r}: expected http(s)://host:port")
    if parts.username is not None or parts.password is not None:
        raise ConfigError("credentials must not be embedded in the master URL; use credentials instead")
    path = parts.path.rstrip("/")
    if not path.endswith(SCHEDULER_PATH):
        path += SCHEDULER_PATH
    return f"{parts.scheme}://{parts.netloc}{path}"


def parse_master(master: str) -> MasterSpec:
    """``http(s)://host:port[/prefix]``, ``host:port``, a comma-separated list of those, or
    ``zk://h1:2181,h2:2181/mesos``."""
    master = master.strip()
    if master.startswith(("zk://", "zoo://")):
        rest = master.split("://", 1)[1]
        hosts, _, path = rest.partition("/")
        if not hosts or "@" in hosts:
            raise ConfigError("invalid ZooKeeper master: expected zk://host:port[,host:port]/path")
        return MasterSpec(zookeeper=ZooKeeperMaster(hosts, "/" + path.strip("/")))
    endpoints = tuple(_endpoint(u.strip()) for u in master.split(",") if u.strip())
    if not endpoints:
        raise ConfigError("no master given")
    return MasterSpec(endpoints=endpoints)


def resolve_redirect(current: str, location: str | None) -> str:
    """The endpoint to use after a 307 from ``current``.

    Mesos sends ``//leader-host:port/api/v1/scheduler``: keep the current scheme, take host,
    port and path from the Location. An absolute http(s) URL is used as it is.
    """
    parts = urlsplit(resolve_location(current, location))
    return _endpoint(f"{parts.scheme}://{parts.netloc}{parts.path or SCHEDULER_PATH}")


def resolve_location(current: str, location: str | None) -> str:
    """The absolute http(s) URL a 307 from ``current`` names (``//host:port/path`` keeps the
    current scheme)."""
    if not location:
        raise ConfigError("307 redirect without a Location header")
    if location.startswith("//"):
        location = f"{urlsplit(current).scheme}:{location}"
    parts = urlsplit(location)
    if parts.scheme not in {"http", "https"} or not parts.hostname:
        raise ConfigError(f"unusable redirect Location {location!r}")
    return location


def select_leader_znode(children: Iterable[str]) -> str | None:
    """The child with the lowest ``json.info_<seq>`` sequence; other children are ignored."""
    best: tuple[int, str] | None = None
    for child in children:
        m = _ZNODE.match(child)
        if m and (best is None or int(m.group(1)) < best[0]):
            best = (int(m.group(1)), child)
    return best[1] if best else None


def master_url_from_info(data: bytes, scheme: str = "http") -> str:
    """The scheduler endpoint of the master described by a JSON MasterInfo znode."""
    try:
        info: Any = json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ValueError(f"MasterInfo is not JSON: {exc}") from None
    if not isinstance(info, dict):
        raise TypeError("MasterInfo is not a JSON object")
    address = info.get("address")
    if not isinstance(address, dict):
        address = {}
    host = address.get("hostname") or address.get("ip") or info.get("hostname")
    port = address.get("port") or info.get("port") or 5050
    if not host and isinstance(info.get("ip"), int):
        host = socket.inet_ntoa(struct.pack("<I", info["ip"]))  # uint32 in network byte order
    if not host:
        raise ValueError("MasterInfo has no address")
    return _endpoint(f"{scheme}://{host}:{int(port)}")


def _kazoo_client() -> Any:
    try:
        from kazoo.client import KazooClient
    except ImportError:
        raise ConfigError("a zk:// master needs kazoo: pip install 'tfdeclare[zookeeper]'") from None
    return KazooClient


def _read_leader(client: Any, zk: ZooKeeperMaster, children: Iterable[str], scheme: str) -> str | None:
    """The scheduler endpoint of the leader among ``children`` of the Mesos path, or None."""
    child = select_leader_znode(children)
    if child is None:
        return None
    data, _ = client.get(f"{zk.path}/{child}")
    return master_url_from_info(data, scheme)


def zookeeper_leader(zk: ZooKeeperMaster, scheme: str = "http", timeout: float = 10.0) -> str | None:
    """The leading master's scheduler endpoint as ZooKeeper names it now (None: no leader),
    asked once within about ``timeout`` seconds (``plan``; the scheduler client watches with
    ``ZooKeeperDetector``). Raises ``MesosConnectionError`` when ZooKeeper does not answer."""
    client = _kazoo_client()(hosts=zk.hosts, timeout=timeout)
    try:
        client.start(timeout=timeout)
        children = client.get_children(zk.path) if client.exists(zk.path) else []
        return _read_leader(client, zk, children, scheme)
    except Exception as exc:  # kazoo's timeouts and errors, a znode that vanished, bad data
        raise MesosConnectionError(f"cannot read the Mesos leader from ZooKeeper {zk.hosts}: {exc}") from None
    finally:
        try:
            client.stop()
            client.close()
        except Exception as exc:
            log.debug("closing the ZooKeeper client: %s", exc)


class ZooKeeperDetector:
    """Watches the Mesos ZooKeeper path and reports the leader's endpoint (or None) on change."""

    def __init__(
        self,
        zk: ZooKeeperMaster,
        on_leader: Callable[[str | None], None],
        scheme: str = "http",
        timeout: float = 10.0,
    ) -> None:
        self._zk = zk
        self._on_leader = on_leader
        self._scheme = scheme
        self._timeout = timeout
        self._client: Any = None
        self._children_watch: Any = None
        self._lock = threading.Lock()

    def start(self) -> None:
        kazoo_client = _kazoo_client()
        from kazoo.recipe.watchers import ChildrenWatch

        self._client = kazoo_client(hosts=self._zk.hosts, timeout=self._timeout)
        self._client.start(timeout=self._timeout)
        self._children_watch = ChildrenWatch
        self._path_changed()

    def _path_changed(self, event: Any = None) -> None:
        """(Re-)arm the children watch once the path exists; kazoo drops it when the path goes."""
        if self._client is None:
            return
        if not self._client.exists(self._zk.path, watch=self._path_changed):
            log.warning("ZooKeeper path %s does not exist (yet)", self._zk.path)
            self._on_leader(None)
        elif event is None or getattr(event, "type", None) == "CREATED":
            self._children_watch(self._client, self._zk.path, self._children_changed)

    def _children_changed(self, children: list[str]) -> None:
        with self._lock:
            leader: str | None = None
            try:
                leader = _read_leader(self._client, self._zk, children, self._scheme)
            except Exception as exc:  # the znode vanished, or bad data: wait for the next change
                log.warning("cannot read the Mesos leader from ZooKeeper (%s): %s", sorted(children), exc)
            log.info("Mesos leader from ZooKeeper: %s", leader or "none")
            self._on_leader(leader)

    def stop(self) -> None:
        if self._client is not None:
            try:
                self._client.stop()
                self._client.close()
            except Exception as exc:
                log.debug("closing the ZooKeeper client: %s", exc)
            self._client = None
