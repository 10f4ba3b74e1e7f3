"""A Docker engine and test images for the container tests, built here from Debian and PyPI.

No public image registry is reachable on the machines this project is developed and tested on,
so nothing is pulled: the base image is a root filesystem made by `mmdebstrap` (Debian's
packages) and imported, and the TensorFlow image is that base with `tensorflow-cpu` installed
by pip inside a container (host networking; the host's CA bundle mounted read-only, so pip
trusts what the host trusts) and committed.

Images are tagged by a hash of everything that goes into them (the recipe below and
requirements/tensorflow.txt), so a repeated run finds them and builds nothing; the root
filesystem tarball is also kept in the cache folder, so even a fresh engine only re-imports it.

Which engine (`engine()`):
1. `DOCKER_HOST`, or the default socket, when it answers a ping (`.ci/run` starts one and
   exports `DOCKER_HOST`);
2. otherwise, as root with Debian's `dockerd` installed, a private engine on a socket in the
   cache folder (`--iptables=false --bridge=none`: host networking only), found there, or
   started by this module when none answers;
3. otherwise none: the tests skip with one line, or fail under `CI=true`.

A test run stops what it started (contract section 9): an engine a test run started (marked by
`STARTED_BY_TESTS`) is stopped when the last test run using it ends (`release()`: each run
using the private engine holds a shared lock on `USERS_LOCK` meanwhile, so two concurrent
runs never stop it under each other; a run on several worker processes holds the lock in its
main process too, `hold()`, so the engine outlives the worker that started it until the run
ends). An engine found running and not started by a test run
(`DOCKER_HOST`, the default socket, one `start` below or `.ci/run` started) is never stopped.

Also a command line for `.ci/run` and people: `python3 -m tests.docker_env start` starts (or
finds) the private engine and prints `DOCKER_HOST=...` (the engine is then the caller's to stop,
not the test runs'); `stop` stops it. Standard library only at that level, since it runs before
the virtual environment exists.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import os
import shutil
import signal
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

from tests.waiting import wait_until

ROOT = Path(__file__).resolve().parent.parent
CACHE = Path(os.environ.get("TFDECLARE_TEST_CACHE", Path.home() / ".cache" / "tfdeclare-tests"))
ENGINE_DIR = CACHE / "dockerd"
SOCKET = ENGINE_DIR / "docker.sock"
USERS_LOCK = ENGINE_DIR / "users.lock"  # shared by each test run that uses the private engine
STARTED_BY_TESTS = ENGINE_DIR / "started-by-a-test-run"  # holds the starting process's pid
STOP_WAIT_S = 60.0  # dockerd stops its containers (10 s grace each, in parallel) before it exits

DEBIAN_SUITE = "bookworm"
BASE_PACKAGES = ("python3", "python3-venv", "ca-certificates", "procps")
HOST_CA_BUNDLE = Path("/etc/ssl/certs/ca-certificates.crt")
# Bump when the way an image is made changes, so old tags are not taken for new ones.
RECIPE = "2"


def _ping(host: str, timeout: float = 2.0) -> bool:
    """True when a Docker engine answers `GET /_ping` at this `unix://` address."""
    if not host.startswith("unix://"):
        return False
    path = host.removeprefix("unix://")
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as conn:
            conn.settimeout(timeout)
            conn.connect(path)
            conn.sendall(b"GET /_ping HTTP/1.0\r\nHost: docker\r\n\r\n")
            return conn.recv(64).split(b" ")[1:2] == [b"200"]
    except OSError:
        return False


def _running_host() -> str | None:
    """The address of an engine that answers now, or None."""
    for host in (os.environ.get("DOCKER_HOST", ""), "unix:///var/run/docker.sock", f"unix://{SOCKET}"):
        if host and _ping(host):
            return host
    return None


def start_private_engine(wait_s: float = 60.0) -> str:
    """Start (or find) the private engine on the cache folder's socket; returns its address."""
    return _start_private_engine(wait_s)[0]


def _start_private_engine(wait_s: float = 60.0) -> tuple[str, bool]:
    """The private engine's address, and whether this call started it."""
    host = f"unix://{SOCKET}"
    if _ping(host):
        return host, False
    dockerd = shutil.which("dockerd")
    if dockerd is None:
        raise RuntimeError("dockerd is not installed (Debian: apt-get install docker.io)")
    if os.geteuid() != 0:
        raise RuntimeError("starting a Docker engine needs root")
    ENGINE_DIR.mkdir(parents=True, exist_ok=True)
    with open(ENGINE_DIR / "start.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if _ping(host):
            return host, False
        log = open(ENGINE_DIR / "dockerd.log", "ab")  # noqa: SIM115 - handed to the engine
        subprocess.Popen(
            [
                dockerd,
                "--host", host,
                "--data-root", str(ENGINE_DIR / "data"),
                "--exec-root", str(ENGINE_DIR / "exec"),
                "--pidfile", str(ENGINE_DIR / "dockerd.pid"),
                "--iptables=false", "--ip6tables=false", "--bridge=none",
            ],
            stdin=subprocess.DEVNULL, stdout=log, stderr=log, start_new_session=True,
        )  # fmt: skip
        with contextlib.suppress(AssertionError):
            wait_until(lambda: _ping(host), wait_s, interval=0.2)
            return host, True
    raise RuntimeError(f"dockerd did not answer within {wait_s:.0f} s (see its log in {ENGINE_DIR})")


def _engine_pid() -> int | None:
    """The private engine's pid while it runs (checked by name: a stale pid file never names
    another process)."""
    try:
        pid = int((ENGINE_DIR / "dockerd.pid").read_text())
    except (OSError, ValueError):
        return None
    return pid if _is_dockerd(pid) else None


def _is_dockerd(pid: int) -> bool:
    """Whether ``pid`` is a dockerd that has not exited (a zombie has)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    name, _, rest = stat.partition(" (")[2].rpartition(") ")
    return name == "dockerd" and not rest.startswith(("Z", "X"))


def stop_private_engine(wait_s: float = STOP_WAIT_S) -> None:
    """Stop the engine `start_private_engine` started and wait until it has exited (SIGKILL
    after ``wait_s``)."""
    pid = _engine_pid()
    if pid is None:
        return
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGTERM)
    try:
        wait_until(lambda: not _is_dockerd(pid), wait_s, interval=0.1)
    except AssertionError:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
        wait_until(lambda: not _is_dockerd(pid), 10.0, what=f"dockerd {pid} killed", interval=0.1)


_users_lock: Any = None  # this process's shared lock on USERS_LOCK while it uses the private engine


def acquire() -> str:
    """The address of the engine to use: one that answers at `DOCKER_HOST` or the default
    socket (not ours: never stopped), else the private one, found or started. This process then
    counts as a user of the private engine until `release()`. Raises RuntimeError when there is
    none and none can be started."""
    for host in (os.environ.get("DOCKER_HOST", ""), "unix:///var/run/docker.sock"):
        if host and host != f"unix://{SOCKET}" and _ping(host):
            return host
    hold()
    host, started = _start_private_engine()
    if started:
        STARTED_BY_TESTS.write_text(f"{os.getpid()}\n")
    return host


def hold() -> None:
    """Count this process as a user of the private engine until `release()`, without starting
    it. A test run on several worker processes (pytest-xdist) holds it in its main process
    (conftest.py), so that an engine one worker started is not stopped when that worker ends
    while others still have tests to run, and is stopped when the run ends."""
    global _users_lock
    if _users_lock is None:
        ENGINE_DIR.mkdir(parents=True, exist_ok=True)
        _users_lock = open(USERS_LOCK, "a")  # noqa: SIM115 - held until release()
        fcntl.flock(_users_lock, fcntl.LOCK_SH)  # waits while a last user stops the engine


def release() -> None:
    """This process no longer uses the private engine. When it was the last user of an engine a
    test run started, the engine is stopped (and this waits until it has exited)."""
    global _users_lock
    if _users_lock is None:
        return
    _users_lock.close()  # our shared lock goes: an exclusive one is granted only to the last user
    _users_lock = None
    with open(USERS_LOCK, "a") as lock:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return  # another test run uses it; the last one stops it
        if STARTED_BY_TESTS.exists():
            stop_private_engine()
            STARTED_BY_TESTS.unlink(missing_ok=True)


def _why_no_engine() -> str | None:
    """None when an engine answers or can be started here; otherwise the reason."""
    if _running_host() is not None:
        return None
    if shutil.which("dockerd") is None:
        return "no Docker engine: none answers and dockerd is not installed (apt-get install docker.io)"
    if os.geteuid() != 0:
        return "no Docker engine: none answers and starting dockerd needs root"
    return None


def engine() -> Any:
    """A `docker.DockerClient` for the engine the tests use; skips (fails under CI) without one.
    The caller calls `release()` when done (the session fixture in conftest.py)."""
    reason = _why_no_engine()
    host = None
    if reason is None:
        try:
            host = acquire()
        except RuntimeError as error:
            reason = f"no Docker engine: {error}"
    if host is None:
        from tests.components import missing

        missing(reason or "no Docker engine")
    import docker

    os.environ["DOCKER_HOST"] = host
    return docker.DockerClient(base_url=host, timeout=300)


def _digest(*parts: str | bytes) -> str:
    h = hashlib.sha256()
    for part in parts:
        h.update(part.encode() if isinstance(part, str) else part)
        h.update(b"\0")
    return h.hexdigest()[:16]


def _image_exists(client: Any, tag: str) -> bool:
    import docker.errors

    try:
        client.images.get(tag)
    except docker.errors.ImageNotFound:
        return False
    return True


def base_image(client: Any) -> str:
    """`tfdeclare-test-base:<hash>`: Debian with Python 3, from `mmdebstrap`; built once."""
    digest = _digest(RECIPE, DEBIAN_SUITE, *BASE_PACKAGES)
    tag = f"tfdeclare-test-base:{digest}"
    with _build_lock(tag):
        if _image_exists(client, tag):
            return tag
        tarball = CACHE / f"rootfs-{digest}.tar"
        if not tarball.exists():
            if shutil.which("mmdebstrap") is None:  # an optional component: skip, as without an engine
                from tests.components import missing

                missing("building the test base image needs mmdebstrap (apt-get install mmdebstrap)")
            partial = tarball.with_suffix(".partial.tar")
            subprocess.run(
                [
                    "mmdebstrap", "--quiet", "--variant=apt",
                    f"--include={','.join(BASE_PACKAGES)}", DEBIAN_SUITE, str(partial),
                ],
                check=True, stdin=subprocess.DEVNULL,
            )  # fmt: skip
            partial.replace(tarball)
        client.api.import_image_from_file(str(tarball), repository=tag.split(":", maxsplit=1)[0], tag=digest)
        if not _image_exists(client, tag):
            raise RuntimeError(f"importing {tarball.name} did not make {tag}")
        return tag


def tensorflow_image(client: Any) -> str:
    """`tfdeclare-test-tf:<hash>`: the base with a virtual environment holding
    requirements/tensorflow.txt at /opt/venv (on PATH); built once."""
    base = base_image(client)
    requirements = (ROOT / "requirements" / "tensorflow.txt").read_bytes()
    digest = _digest(RECIPE, base, requirements)
    tag = f"tfdeclare-test-tf:{digest}"
    with _build_lock(tag):
        if _image_exists(client, tag):
            return tag
        from docker.types import Mount

        # Mounts, not `volumes=`: the SDK declares `volumes` in the container's config too, and
        # `commit` would then bake them into the image as VOLUMEs.
        mounts = [Mount("/requirements", str(ROOT / "requirements"), type="bind", read_only=True)]
        environment = {"PIP_DISABLE_PIP_VERSION_CHECK": "1", "PIP_DEFAULT_TIMEOUT": "180"}
        if HOST_CA_BUNDLE.exists():
            mounts.append(Mount("/host-ca.crt", str(HOST_CA_BUNDLE), type="bind", read_only=True))
            environment["PIP_CERT"] = "/host-ca.crt"
        container = client.containers.create(
            base,
            [
                "sh",
                "-c",
                "python3 -m venv /opt/venv && /opt/venv/bin/pip install -q -r /requirements/tensorflow.txt",
            ],
            network_mode="host",
            mounts=mounts,
            environment=environment,
        )
        try:
            container.start()
            result = container.wait(timeout=900)
            if result.get("StatusCode") != 0:
                raise RuntimeError(
                    f"pip in the image build failed: {container.logs()[-2000:].decode(errors='replace')}"
                )
            container.commit(
                repository=tag.split(":", maxsplit=1)[0],
                tag=digest,
                changes=[
                    "ENV PATH=/opt/venv/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
                    "ENV TF_ENABLE_ONEDNN_OPTS=0",
                    "ENV PYTHONUNBUFFERED=1",
                ],
            )
        finally:
            container.remove(force=True)
        return tag


@contextlib.contextmanager
def _build_lock(tag: str) -> Any:
    """One builder per image across concurrent test runs on this machine."""
    CACHE.mkdir(parents=True, exist_ok=True)
    with open(CACHE / f"build-{tag.replace(':', '-')}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield


def main(argv: list[str]) -> int:
    if argv == ["start"]:
        host = _running_host() or start_private_engine()
        STARTED_BY_TESTS.unlink(missing_ok=True)  # the caller's now, to stop (`stop`)
        print(f"DOCKER_HOST={host}")
        return 0
    if argv == ["stop"]:
        stop_private_engine()
        return 0
    print("usage: python3 -m tests.docker_env start|stop", file=sys.stderr)
    return 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
