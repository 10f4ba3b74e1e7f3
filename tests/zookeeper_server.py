"""A real ZooKeeper server for tests: Debian's ``zookeeper`` package, started standalone with
a private config and data folder on a free loopback port, stopped with its process group.

``zookeeper_or_skip()`` gives the server's ``host:port``; where ZooKeeper (or Java, or kazoo)
is missing the test is skipped with one line saying what to install, except under
``CI=true``, where it fails (``.ci/run`` installs the package, so a skip would hide a lost test).
"""

from __future__ import annotations

import shutil
import socket
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from tests.components import missing, stop_group

JARS = ("/usr/share/java/zookeeper.jar",)  # Debian's package; slf4j and the rest come via its manifest
MAIN = "org.apache.zookeeper.server.ZooKeeperServerMain"


def _missing() -> str | None:
    if shutil.which("java") is None:
        return "java"
    if not any(Path(jar).is_file() for jar in JARS):
        return "the zookeeper package (apt-get install -y zookeeper)"
    try:
        import kazoo.client  # noqa: F401
    except ImportError:
        return "kazoo (requirements/dev.txt)"
    return None


def _unavailable(what: str) -> None:
    missing(f"needs a real ZooKeeper: {what} is missing")


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@contextmanager
def zookeeper_server(folder: Path, timeout: float = 60.0) -> Iterator[str]:
    """Start ZooKeeper in ``folder``; yield ``127.0.0.1:PORT`` once a client can connect."""
    missing = _missing()
    if missing is not None:
        _unavailable(missing)
    from kazoo.client import KazooClient
    from kazoo.handlers.threading import KazooTimeoutError

    folder.mkdir(parents=True, exist_ok=True)
    port = _free_port()
    config = folder / "zoo.cfg"
    config.write_text(
        f"tickTime=500\ndataDir={folder / 'data'}\nclientPort={port}\nclientPortAddress=127.0.0.1\n"
        "admin.enableServer=false\nminSessionTimeout=1000\nmaxSessionTimeout=20000\n"
    )
    jar = next(jar for jar in JARS if Path(jar).is_file())
    log = (folder / "zookeeper.log").open("wb")
    process = subprocess.Popen(
        ["java", "-Xmx256m", "-Dzookeeper.admin.enableServer=false", "-cp", jar, MAIN, str(config)],
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    hosts = f"127.0.0.1:{port}"
    try:
        probe = KazooClient(hosts=hosts)
        deadline = time.monotonic() + timeout
        while True:  # connect retries until the server listens (or has died)
            if process.poll() is not None:
                raise AssertionError(
                    f"ZooKeeper exited with {process.returncode}: see {folder / 'zookeeper.log'}"
                )
            try:
                probe.start(timeout=min(5.0, max(0.1, deadline - time.monotonic())))
                break
            except KazooTimeoutError:
                if time.monotonic() > deadline:
                    raise AssertionError(f"ZooKeeper did not accept clients within {timeout} s") from None
        probe.stop()
        probe.close()
        yield hosts
    finally:
        stop_group(process)
        log.close()
