"""The Mesos backend: tfdeclare as a Mesos v1 HTTP framework.

This package owns everything Mesos. The scheduler client (``client``: subscription
stream, calls, reconnects, acknowledgements) is re-exported here, imported on first use of
a name (the registry imports ``plugin``, and ``validate`` must not pay for httpx); importing
the package has no side effects (no threads, signal handlers or logging handlers; kazoo is
imported only when a ``zk://`` master is started).

Usage sketch::

    class Scheduler(BaseHandler):
        def subscribed(self, framework_id, heartbeat_interval, master_info):
            store.save_framework_id(framework_id)        # persist before acting
            client.reconcile([(t.id, t.agent) for t in store.non_terminal_tasks()])

        def offers(self, offers):
            client.decline([o.id for o in offers], refuse_seconds=30)

        def update(self, status):                        # acked after this returns
            store.record(status.task_id, status.state)

    info = FrameworkInfo(user="svc", name="tfdeclare", id=store.framework_id(),
                         failover_timeout=7 * 86400, roles=("ml",))
    client = SchedulerClient(ClientConfig(master="zk://zk1:2181/mesos", framework=info), Scheduler())
    client.start()
    client.wait_subscribed(timeout=60)
    ...
    client.stop()                                        # tasks keep running; no TEARDOWN
"""

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
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
        SubscribeRefusedError,
        SubscribeTimeoutError,
        TerminalError,
    )
    from tfdeclare.backends.mesos.events import BaseHandler, Handler, Offer, TaskStatus
    from tfdeclare.backends.mesos.info import Capability, FrameworkInfo

# Where the names of ``__all__`` live, the light modules first.
_MODULES = ("errors", "events", "info", "auth", "client")


def __getattr__(name: str) -> Any:
    if name in __all__:
        import importlib

        for module in _MODULES:
            found = importlib.import_module(f"{__name__}.{module}").__dict__.get(name)
            if found is not None:
                return found
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


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
    "SubscribeRefusedError",
    "SubscribeTimeoutError",
    "TaskStatus",
    "TerminalError",
    "load_credentials",
]
