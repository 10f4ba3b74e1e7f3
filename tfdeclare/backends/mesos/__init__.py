"""The Mesos backend: tfdeclare as a Mesos v1 HTTP framework.

This package owns everything Mesos. The scheduler client (``client``: subscription
stream, calls, reconnects, acknowledgements) is re-exported here; importing the package has
no side effects (no threads, signal handlers or logging handlers; kazoo is imported only
when a ``zk://`` master is started).
"""

from tfdeclare.backends.mesos.auth import Credentials, Secret, load_credentials
from tfdeclare.backends.mesos.client import ClientConfig, SchedulerClient
from tfdeclare.backends.mesos.errors import (
    AuthenticationError,
    BadRequestError,
    ClientStoppedError,
    ConfigError,
    ForbiddenError,
    FrameworkFailedOverError,
    FrameworkRemovedError,
    MesosConnectionError,
    MesosError,
    MesosHTTPError,
    NotSubscribedError,
    RecordIOError,
    ServerError,
    SubscribeTimeoutError,
    TerminalError,
)
from tfdeclare.backends.mesos.events import BaseHandler, Handler, Offer, TaskStatus
from tfdeclare.backends.mesos.info import Capability, FrameworkInfo

__all__ = [
    "AuthenticationError",
    "BadRequestError",
    "BaseHandler",
    "Capability",
    "ClientConfig",
    "ClientStoppedError",
    "ConfigError",
    "Credentials",
    "ForbiddenError",
    "FrameworkFailedOverError",
    "FrameworkInfo",
    "FrameworkRemovedError",
    "Handler",
    "MesosConnectionError",
    "MesosError",
    "MesosHTTPError",
    "NotSubscribedError",
    "Offer",
    "RecordIOError",
    "SchedulerClient",
    "Secret",
    "ServerError",
    "SubscribeTimeoutError",
    "TaskStatus",
    "TerminalError",
    "load_credentials",
]
