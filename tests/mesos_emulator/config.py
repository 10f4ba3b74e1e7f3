"""Every knob of the emulator, with Mesos' defaults where Mesos has one.

Owns ``EmulatorConfig``. Timings default to the real master's values (1 s allocation
interval, 15 s heartbeats, 15 s x 5 ping timeouts, 10 s..10 min update retries, 3 s
kill grace period, 10 min agent re-registration timeout) so the CLI behaves like a
master; tests pass much shorter values.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

DEFAULT_AGENT_RESOURCES = "cpus:4;mem:8192;disk:10240;ports:[31000-31099]"


@dataclass
class EmulatorConfig:
    # cluster shape
    agents: int = 1
    agent_resources: str = DEFAULT_AGENT_RESOURCES
    agent_attributes: str = ""
    agent_default_role: str = "*"  # the agent's --default_role: resources without a role get it
    agent_hostname: str = "127.0.0.1"
    # None: with the process executor, give each agent a disjoint copy of the port ranges
    # while that fits below 65536 (all agents share 127.0.0.1, so real tasks must not
    # collide); with the simulated executor identical ranges. N: shift agent i by i*N.
    agent_port_offset: int | None = None
    # network
    host: str = "127.0.0.1"
    port: int = 0
    agent_port: int = 0
    # timings (seconds)
    heartbeat_interval: float = 15.0
    allocation_interval: float = 1.0
    offer_timeout: float | None = None
    agent_ping_timeout: float = 15.0
    max_agent_ping_timeouts: int = 5
    agent_reregister_timeout: float = 600.0
    agent_reregister_delay: float = 0.0
    registry_recovery_delay: float = 0.0
    update_retry_interval: float = 10.0
    update_retry_max: float = 600.0
    kill_grace_period: float = 3.0
    # behaviour
    executor: str = "process"  # "process" | "simulated"
    # The agent's --containerizers (e.g. ("docker", "mesos")): tasks whose ContainerInfo asks
    # for a container run in one on a Docker engine (containers.py). None: every task runs as a
    # host process whatever its ContainerInfo says (only launch-time shape checks).
    containerizers: tuple[str, ...] | None = None
    docker: str = "docker"  # --docker: the CLI
    docker_socket: str | None = None  # --docker_socket; None: DOCKER_HOST, else the default socket
    sandbox_directory: str = "/mnt/mesos/sandbox"  # --sandbox_directory: the sandbox in a container
    filter_gpu_resources: bool = True
    root_submissions: bool = True
    roles: set[str] | None = None  # master --roles whitelist
    credentials: dict[str, str] | None = None  # principal -> secret; enables Basic auth
    failing_images: set[str] = field(default_factory=set)
    # users tasks may run as on the agents (as with --switch_user); None: this machine's users
    agent_users: frozenset[str] | None = None
    chunk_mode: str = "record"
    seed: int = 0
    clock: str = "real"  # "real" | "manual"
    sandbox_root: str | None = None
    max_unreachable_tasks: int = 1000
    max_calls_recorded: int = 10000
    operator_api: bool = True  # False: /api/v1 answers 404 (a proxy that passes only the scheduler API)
    version: str = "1.11.0"  # what the master claims; below 1.9 UPDATE_FRAMEWORK is a 400 (no type)
    # zk://host:port/path: join the masters' group there, lead while first (zookeeper.py)
    zookeeper: str | None = None

    def older_than(self, major: int, minor: int) -> bool:
        """The claimed ``version`` is below ``major.minor``."""
        got = tuple(int(p) for p in self.version.split("-")[0].split(".")[:2])
        return got < (major, minor)

    @property
    def host_ip(self) -> str:
        """The IP address agents and the master listen on."""
        return "127.0.0.1"

    def validate(self) -> None:
        if self.executor not in ("process", "simulated"):
            raise ValueError("executor must be 'process' or 'simulated'")
        if self.containerizers is not None and (
            not self.containerizers or not set(self.containerizers) <= {"docker", "mesos"}
        ):
            raise ValueError("containerizers must name 'docker' and/or 'mesos'")
        if self.clock not in ("real", "manual"):
            raise ValueError("clock must be 'real' or 'manual'")
        if self.chunk_mode not in ("record", "split", "coalesce", "bytes"):
            raise ValueError("chunk_mode must be record, split, coalesce or bytes")
        if self.allocation_interval <= 0 or self.heartbeat_interval <= 0:
            raise ValueError("intervals must be positive")
        if not re.fullmatch(r"\d+\.\d+\.\d+(-\w+)?", self.version):
            raise ValueError(f"version must look like 1.8.0, not {self.version!r}")
        if self.host not in ("127.0.0.1", "localhost"):
            raise ValueError("the emulator only binds loopback addresses")
