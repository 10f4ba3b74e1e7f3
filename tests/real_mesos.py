"""A real Apache Mesos 1.11.0 master and agents for tests (issue 21; ``make real-mesos``).

What this module owns: starting one fresh cluster (the master and N agents of
``tools/realmesos``' ``realmesos-cluster``, one process) on a free port with its work folder
under the test's tmp folder (and in it the cluster's own launcher folder, whose executor runs
this interpreter), waiting until every agent has registered, reading the master's
own view (``/master/state``, the operator API), and stopping it with everything it started.

As root (``.ci/run``, CI) the cluster runs in PID and mount namespaces of its own
(``unshare --pid --mount-proc --kill-child``): stopping it kills every executor and task it
started, whatever they did; a task's pid as it sees it is translated by ``host_pid``.
Otherwise it runs in a session of its own and is stopped by SIGTERM, and every process below
it, below its ``mesos-containerizer`` processes (they keep its environment, marked) or working
in its folder is SIGKILLed (a task that daemonizes out of that tree would escape).

``credentials=(principal, secret)`` stages an authenticating cluster as upstream's
docs/authentication.md describes it: the master authenticates frameworks (v1 HTTP ones with
Basic, ``--credentials``), its agents (CRAM-MD5; each agent has ``--credential``) and every
read-only and read-write HTTP endpoint (``--http_credentials``); the agents' own endpoints ask
the same. The harness's own requests then send the credentials.

``zookeeper="zk://host:port/path"``: the master contends for leadership there and the master
and agents detect the leader there (``tools/realmesos/zookeeper.cpp``), so clusters started
on one path elect one leading master, the agents of all of them register with it, and when
its process stops another is elected (after ZooKeeper's session timeout, 10 s) and the
agents re-register with it.

``docker_socket="/path/docker.sock"``: the agents also have the Docker containerizer
(``--containerizers=docker,mesos``) on that engine, whose tasks run through the build's
``mesos-docker-executor`` (``tools/realmesos/docker_executor.py``); the containers it starts
carry their sandbox as a label, and ``stop`` removes those under the cluster's folder.

Without the build (no compiler or libraries, not x86_64) a test skips with the reason, or
fails under ``CI=true`` (``tests/components.py``).
"""

from __future__ import annotations

import base64
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

from tests.components import missing
from tests.waiting import wait_until

DEFAULT_RESOURCES = "cpus:4;mem:4096;disk:4096;ports:[31000-31999]"


_BUILT: list[Path | str] = []  # the build folder, or why there is none (once per test session)


def built() -> Path:
    """The build folder (``make real-mesos``), built if missing or stale; tried once per test
    session (without it every test would try the download again)."""
    if not _BUILT:
        from tools.realmesos import build as builder

        try:
            _BUILT.append(builder.build())
        except builder.BuildError as error:
            _BUILT.append(f"no real Mesos ({error}; see make real-mesos)")
        except OSError as error:
            _BUILT.append(f"no real Mesos (fetching or building it failed: {error})")
    found = _BUILT[0]
    if isinstance(found, str):
        missing(found)
    return found


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def isolated() -> bool:
    """Whether clusters get namespaces of their own (root and util-linux's unshare;
    ``TFDECLARE_REALMESOS_NAMESPACES=0`` turns them off, to test the other way)."""
    if os.environ.get("TFDECLARE_REALMESOS_NAMESPACES") == "0":
        return False
    return os.geteuid() == 0 and shutil.which("unshare") is not None


class RealMesos:
    """One master and ``agents`` agents (all with ``resources``); ``flags`` adds MESOS_*
    settings for both (``{"ROLES": ...}`` -> ``MESOS_ROLES``)."""

    def __init__(
        self,
        workdir: Path,
        *,
        agents: int = 2,
        resources: str = DEFAULT_RESOURCES,
        flags: dict[str, str] | None = None,
        build: Path | None = None,
        namespaces: bool = True,
        credentials: tuple[str, str] | None = None,
        zookeeper: str | None = None,
        docker_socket: str | None = None,
    ) -> None:
        self.build = build or built()
        # False: executors and tasks outlive the cluster's process (``restart``), as on a real
        # cluster where a master and its agents fail over while tasks run on.
        self.namespaces = namespaces and isolated()
        self.workdir = workdir
        self.agents = agents
        self.resources = resources
        self.flags = dict(flags or {})
        self.credentials = credentials
        self.zookeeper = zookeeper
        self.docker_socket = docker_socket
        self.port = 0
        self.process: subprocess.Popen[bytes] | None = None
        self.log = workdir / "cluster.log"
        # its own launcher folder: the executor runs this checkout's Python (the build is
        # shared by every checkout on the machine)
        self.launcher = workdir / "launcher"
        self.marker = str(workdir.resolve())  # in the environment of what it starts (not isolated)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def environment(self) -> dict[str, str]:
        env = {
            k: v for k, v in os.environ.items() if not k.startswith(("MESOS_", "LIBPROCESS_", "REALMESOS_"))
        }
        env.update(
            {
                "LIBPROCESS_IP": "127.0.0.1",
                "LIBPROCESS_PORT": str(self.port),
                "MESOS_NUM_SLAVES": str(self.agents),
                "MESOS_RESOURCES": self.resources,
                "MESOS_WORK_DIR": str(self.workdir / "mesos"),
                "MESOS_LAUNCHER_DIR": str(self.launcher),
                "MESOS_REGISTRY": "in_memory",
                "MESOS_ISOLATION": "posix/cpu,posix/mem",
                "MESOS_LAUNCHER": "posix",
                "MESOS_HTTP_COMMAND_EXECUTOR": "true",
                "MESOS_HOSTNAME": "127.0.0.1",
                "MESOS_SYSTEMD_ENABLE_SUPPORT": "false",
                "MESOS_ALLOCATION_INTERVAL": "100ms",
                "MESOS_GC_DELAY": "1hrs",
                "TFDECLARE_REALMESOS": self.marker,
            }
        )
        if self.zookeeper is not None:
            env["REALMESOS_ZK"] = self.zookeeper
        if self.credentials is not None:
            env.update({f"MESOS_{name.upper()}": value for name, value in self.authentication().items()})
        if self.docker_socket is not None:
            # docker_kill_orphans: an agent's Docker containerizer, when it starts, stops and
            # removes every "mesos-" container of the engine it did not start itself, and
            # every cluster of the tests shares one engine: a test starting its agents took the
            # containers of another test's agents (gone from `docker ps -a`, a task killed
            # under its executor). Upstream's advice for agents sharing an OS.
            env.update(
                {
                    "MESOS_CONTAINERIZERS": "docker,mesos",
                    "MESOS_DOCKER_SOCKET": self.docker_socket,
                    "MESOS_DOCKER_KILL_ORPHANS": "false",
                }
            )
        env.update({f"MESOS_{name.upper()}": value for name, value in self.flags.items()})
        return env

    def authentication(self) -> dict[str, str]:
        """The flags (and their files, 0600 in the work folder) of an authenticating cluster."""
        assert self.credentials is not None
        principal, secret = self.credentials
        every = self.workdir / "credentials.json"  # the master's: frameworks, agents, HTTP
        one = self.workdir / "credential.json"  # each agent's own
        for path, content in (
            (every, {"credentials": [{"principal": principal, "secret": secret}]}),
            (one, {"principal": principal, "secret": secret}),
        ):
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            with os.fdopen(fd, "w") as out:
                json.dump(content, out)
        return {
            "authenticate_frameworks": "true",
            "authenticate_http_frameworks": "true",
            "http_framework_authenticators": "basic",
            "credentials": str(every),
            "authenticate_agents": "true",
            "credential": str(one),
            "authenticate_http_readonly": "true",
            "authenticate_http_readwrite": "true",
            "http_credentials": str(every),
        }

    def headers(self) -> dict[str, str]:
        """What the harness's own requests send: Basic credentials for an authenticating one."""
        if self.credentials is None:
            return {}
        token = base64.b64encode(":".join(self.credentials).encode()).decode("ascii")
        return {"Authorization": f"Basic {token}"}

    def start(self, timeout: float = 60.0, port: int | None = None) -> RealMesos:
        from tools.realmesos import build as builder

        (self.workdir / "mesos").mkdir(parents=True, exist_ok=True)
        builder.launcher_dir(self.build, self.launcher)
        # A start may fail for a cause outside the cluster (``StartRace``): tried again.
        for _attempt in range(3):
            self.port = port or free_port()
            program = [str(self.build / "realmesos-cluster")]
            if self.namespaces:
                program = ["unshare", "--pid", "--fork", "--kill-child", "--mount-proc", *program]
            with self.log.open("ab") as log:
                self.process = subprocess.Popen(
                    program,
                    env=self.environment(),
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    stdin=subprocess.DEVNULL,
                    start_new_session=True,
                    cwd=self.workdir,
                )
            try:
                self.wait_until_up(timeout)
                return self
            except StartRace:
                self.stop()
        raise AssertionError(f"the real Mesos cluster never came up:\n{self.log_tail()}")

    def wait_until_up(self, timeout: float) -> None:
        def up() -> bool:
            assert self.process is not None
            if self.process.poll() is not None:
                tail = self.log_tail()
                if "Address already in use" in tail or SIBLING_CONTAINER_GONE.search(tail):
                    raise StartRace
                raise AssertionError(
                    f"the real Mesos cluster exited ({self.process.returncode}):\n{self.log_tail()}"
                )
            try:
                return len(self.state().get("slaves", [])) == self.agents
            except urllib.error.HTTPError as error:
                if error.code in (401, 403):  # a harness without the cluster's credentials
                    raise AssertionError(f"/master/state: {error.code} {error.reason}") from None
                return False
            except OSError:
                return False

        wait_until(
            up, timeout, what=lambda: f"{self.agents} agents registered:\n{self.log_tail()}", interval=0.1
        )

    def down(self) -> None:
        """The cluster's process stops (SIGTERM, nothing else): executors and tasks run on.
        Needs ``namespaces=False``."""
        assert not self.namespaces and self.process is not None, "down needs namespaces=False"
        process, self.process = self.process, None
        process.terminate()
        process.wait(30)

    def up(self, timeout: float = 60.0) -> None:
        """Start again after ``down`` on the same port over the same work folder: the master
        recovers its registry (``registry: replicated_log``) and the agents their executors
        (checkpointed frameworks), which re-subscribe."""
        deadline = time.monotonic() + timeout
        while True:  # the port is free again once the old sockets are gone
            try:
                self.start(timeout, port=self.port)
                return
            except AssertionError:
                if time.monotonic() > deadline:
                    raise

    def restart(self, timeout: float = 60.0) -> None:
        """The master and its agents fail over together: ``down`` then ``up``."""
        self.down()
        self.up(timeout)

    def log_tail(self, size: int = 6000) -> str:
        try:
            return self.log.read_bytes()[-size:].decode("utf-8", "replace")
        except OSError:
            return ""

    def stop(self) -> None:
        process, self.process = self.process, None
        if process is None:
            return
        if self.namespaces:
            # unshare --kill-child: its child, the namespace's init, gets SIGKILL, and with it
            # every process of the namespace (executors and tasks included).
            process.kill()
            process.wait(30)
        else:
            # Executors and tasks run in sessions of their own: find them first, as the
            # descendants of the cluster (through its mesos-containerizer processes, which
            # keep its environment) and of anything working in its folder.
            tree = descendants({process.pid, *marked(self.marker), *working_in(self.workdir)})
            try:
                os.killpg(process.pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
            try:
                process.wait(15)
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait(15)
            for pid in tree | descendants({*marked(self.marker), *working_in(self.workdir)}):
                try:
                    os.kill(pid, signal.SIGKILL)
                except (ProcessLookupError, PermissionError):
                    pass
        self.remove_containers()

    def containers(self, *, running: bool = False) -> list[str]:
        """The ids of the Docker containers this cluster's executors started (their sandbox
        label is under its folder); only the running ones with ``running``."""
        if self.docker_socket is None:
            return []
        label = "tfdeclare.realmesos.sandbox"
        listed = subprocess.run(
            ["docker", "-H", f"unix://{self.docker_socket}", "ps", "--no-trunc", "--filter", f"label={label}"]
            + ([] if running else ["-a"])
            + ["--format", f'{{{{.ID}}}} {{{{.Label "{label}"}}}}'],
            capture_output=True,
            text=True,
            check=True,
            timeout=60,
        )
        ours = (str(self.workdir) + os.sep, self.marker + os.sep)
        return [
            line.split(" ", 1)[0]
            for line in listed.stdout.splitlines()
            if line.partition(" ")[2].startswith(ours)
        ]

    def remove_containers(self) -> None:
        """Remove the Docker containers this cluster's executors started."""
        found = self.containers()
        if found:
            subprocess.run(
                ["docker", "-H", f"unix://{self.docker_socket}", "rm", "-f", *found],
                capture_output=True,
                check=False,
                timeout=120,
            )

    def __enter__(self) -> RealMesos:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # ---- the master's view -------------------------------------------------------------

    def get(self, path: str) -> Any:
        request = urllib.request.Request(self.url + path, headers=self.headers())
        with urllib.request.urlopen(request, timeout=30) as response:
            return json.loads(response.read())

    def state(self) -> dict[str, Any]:
        return dict(self.get("/master/state"))

    def operator(self, call: dict[str, Any], expect: int = 200) -> Any:
        """POST a v1 operator call (JSON); the decoded answer, or None for an empty body."""
        request = urllib.request.Request(
            self.url + "/api/v1",
            data=json.dumps(call).encode(),
            headers={"Content-Type": "application/json", "Accept": "application/json", **self.headers()},
            method="POST",
        )
        try:
            with urllib.request.urlopen(request, timeout=30) as response:
                status, body = response.status, response.read()
        except urllib.error.HTTPError as error:
            status, body = error.code, error.read()
        assert status == expect, f"{call.get('type')}: {status} {body[:500]!r}"
        return json.loads(body) if body else None

    def agent_ids(self) -> list[str]:
        return sorted(str(a["id"]) for a in self.state()["slaves"])

    def tasks(self) -> dict[str, dict[str, Any]]:
        """task id -> the master's task (state, slave_id, resources...), of every framework."""
        out: dict[str, dict[str, Any]] = {}
        for framework in self.state().get("frameworks", []):
            for task in framework.get("tasks", []) + framework.get("completed_tasks", []):
                out.setdefault(task["id"], task)
        return out

    def running(self) -> dict[str, str]:
        """task id -> agent id of every task the master sees running."""
        return {i: str(t["slave_id"]) for i, t in self.tasks().items() if t["state"] == "TASK_RUNNING"}

    def frameworks(self) -> list[dict[str, Any]]:
        return list(self.state().get("frameworks", []))

    def host_pid(self, pid: int) -> int:
        """The pid on this machine of the cluster's process numbered ``pid`` inside it."""
        if not self.namespaces:
            return pid
        assert self.process is not None
        namespace = os.readlink(f"/proc/{self.process.pid}/ns/pid_for_children")  # unshare's new one
        for entry in os.listdir("/proc"):
            if not entry.isdigit():
                continue
            try:
                if os.readlink(f"/proc/{entry}/ns/pid") != namespace:
                    continue
                with open(f"/proc/{entry}/status") as status:
                    for line in status:
                        if line.startswith("NSpid:") and int(line.split()[-1]) == pid:
                            return int(entry)
            except OSError:
                continue
        raise ProcessLookupError(pid)


class StartRace(Exception):
    """The cluster exited while starting for a cause outside it, gone when tried again: its free
    port was taken before it bound it, or (``SIBLING_CONTAINER_GONE``) another cluster's Docker
    container went away while this one's agent recovered."""


# An agent with the Docker containerizer, when it starts, lists every "mesos-" container of the
# engine (`docker ps -a`) and then inspects each; one that is removed in between fails the
# agent's recovery and the agent exits ("Docker ps batch failed ... No such container"). Every
# cluster of the tests shares one engine, so a test starting its agent while another test's
# containers go (its executor or its teardown removing them) lost its cluster; a production
# agent has its engine to itself.
SIBLING_CONTAINER_GONE = re.compile(r"Docker ps batch failed.*No such container")


def _processes() -> dict[int, int]:
    """pid -> parent pid of every process."""
    out = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as stat:
                    out[int(entry)] = int(stat.read().rpartition(")")[2].split()[1])
            except OSError:
                continue
    return out


def descendants(roots: set[int]) -> set[int]:
    """``roots`` and every process below them."""
    parents = _processes()
    found = {r for r in roots if r in parents}
    grew = True
    while grew:
        grew = False
        for pid, parent in parents.items():
            if parent in found and pid not in found:
                found.add(pid)
                grew = True
    found.discard(os.getpid())
    return found


def marked(marker: str) -> set[int]:
    """Processes whose environment holds ``TFDECLARE_REALMESOS=<marker>``."""
    wanted = f"TFDECLARE_REALMESOS={marker}".encode()
    out = set()
    for pid in _processes():
        try:
            with open(f"/proc/{pid}/environ", "rb") as environ:
                if wanted in environ.read().split(b"\0"):
                    out.add(pid)
        except OSError:
            continue
    return out


def working_in(folder: Path) -> set[int]:
    """Processes whose working directory is under ``folder``."""
    prefix = str(folder.resolve())
    out = set()
    for pid in _processes():
        try:
            if os.readlink(f"/proc/{pid}/cwd").startswith(prefix):
                out.add(pid)
        except OSError:
            continue
    return out
