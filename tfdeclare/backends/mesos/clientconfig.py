"""The scheduler client's settings and its reconnect delays.

This module owns ``ClientConfig`` (how to reach the master and how patient to be, checked when
made) and ``Backoff`` (capped exponential delays with jitter between two SUBSCRIBEs). Both are
re-exported by ``client.py``, where their users import them from.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from tfdeclare.backends.mesos.auth import Credentials
from tfdeclare.backends.mesos.errors import ConfigError
from tfdeclare.backends.mesos.info import FrameworkInfo
from tfdeclare.backends.mesos.leader import parse_master
from tfdeclare.backends.mesos.recordio import DEFAULT_MAX_RECORD_SIZE
from tfdeclare.backends.mesos.tls import ClientCertificate


@dataclass(frozen=True)
class ClientConfig:
    """How to reach the master and how patient to be. Times are seconds."""

    master: str  # "http(s)://host:5050", "host:5050", "m1:5050,m2:5050" or "zk://h1:2181,h2:2181/mesos"
    framework: FrameworkInfo
    credentials: Credentials | None = None
    ca_file: str | None = None  # CA bundle for https masters; default: httpx's (certifi)
    insecure_skip_tls_verify: bool = False
    client_certificate: ClientCertificate | None = None  # presented to https masters that ask
    suppressed_roles: tuple[str, ...] = ()
    connect_timeout: float = 10.0
    call_timeout: float = 75.0
    subscribe_timeout: float = 75.0  # until SUBSCRIBED; also the httpx read timeout of the stream
    heartbeat_miss_factor: float = 5.0
    backoff_initial: float = 0.5
    backoff_cap: float = 15.0
    backoff_jitter: float = 0.2  # fraction of the delay removed at random
    backoff_seed: int | None = None
    call_503_retries: int = 3
    max_redirects: int = 5
    max_record_size: int = DEFAULT_MAX_RECORD_SIZE
    # False: the owner acknowledges updates itself with ``acknowledge()`` once they are
    # durable (e.g. after a group fsync on another thread); the client never does.
    auto_acknowledge: bool = True
    zk_scheme: str = "http"
    zk_timeout: float = 10.0

    def __post_init__(self) -> None:
        parse_master(self.master)
        positive = ("connect_timeout", "call_timeout", "subscribe_timeout", "heartbeat_miss_factor")
        for name in (*positive, "backoff_initial", "backoff_cap"):
            if not getattr(self, name) > 0:
                raise ConfigError(f"{name} must be > 0")
        if self.backoff_cap < self.backoff_initial:
            raise ConfigError("backoff_cap must be >= backoff_initial")
        if not 0 <= self.backoff_jitter < 1:
            raise ConfigError("backoff_jitter must be in [0, 1)")


class Backoff:
    """Capped exponential delays with proportional jitter; never below ``initial * (1 - jitter)``."""

    def __init__(self, initial: float, cap: float, jitter: float, rng: random.Random) -> None:
        self._initial, self._cap, self._jitter, self._rng = initial, cap, jitter, rng
        self._attempt = 0

    def next(self) -> float:
        delay: float = min(self._cap, self._initial * 2.0 ** min(self._attempt, 30))
        self._attempt += 1
        return delay * (1.0 - self._jitter * self._rng.random())

    def reset(self) -> None:
        self._attempt = 0
