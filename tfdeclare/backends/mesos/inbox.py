"""What the Mesos backend's loop is told: one typed inbox, no callbacks.

This module owns the messages that reach the loop from other threads: the master's events as
the client's stream thread hands them over (``EventHandler``: the client's callbacks, each
posted as a message) (``Subscribed``, ``Offers``, ``Rescinded``,
``StatusUpdate``, ``InverseOffers``, ``StreamEnded``, ``ClientTerminated``) and the answers of
the sender's threads (``sender.Answered``, ``sender.BurstAnswered``, ``sender.AcksSent``)
and the cluster server's (``clusterserver.Fetched``).
``Inbound`` is their union; ``scheduler.Scheduler.handle`` matches on it (closed: a new
message that is not handled fails the type check). Frozen values, no behaviour.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from tfdeclare.backends.mesos.client import SchedulerClient
from tfdeclare.backends.mesos.clusterserver import Fetched
from tfdeclare.backends.mesos.errors import TerminalError
from tfdeclare.backends.mesos.events import JSON, BaseHandler, Offer, TaskStatus
from tfdeclare.backends.mesos.sender import AcksSent, Answered, BurstAnswered

log = logging.getLogger("tfdeclare.mesos")


@dataclass(frozen=True, slots=True)
class Subscribed:
    """SUBSCRIBED from ``client`` (None: unknown), from a master of this ``version``."""

    framework_id: str
    client: SchedulerClient | None
    version: str = ""


@dataclass(frozen=True, slots=True)
class Offers:
    offers: Sequence[Offer]


@dataclass(frozen=True, slots=True)
class Rescinded:
    offer_id: str


@dataclass(frozen=True, slots=True)
class StatusUpdate:
    status: TaskStatus


@dataclass(frozen=True, slots=True)
class InverseOffers:
    inverse_offers: Sequence[JSON]


@dataclass(frozen=True, slots=True)
class StreamEnded:
    """The subscription's stream ended (the client subscribes again)."""


@dataclass(frozen=True, slots=True)
class ClientTerminated:
    """The client stopped for good."""

    error: TerminalError


@dataclass(frozen=True, slots=True)
class ClientDropped:
    """A caller stopped this client (a refused subscription, a teardown): calls no longer go
    through it."""

    client: SchedulerClient


Inbound = (
    Subscribed
    | Offers
    | Rescinded
    | StatusUpdate
    | InverseOffers
    | StreamEnded
    | ClientTerminated
    | ClientDropped
    | Answered
    | BurstAnswered
    | AcksSent
    | Fetched
)


class EventHandler(BaseHandler):
    """Client callbacks (the stream thread), posted to the backend's loop in order."""

    def __init__(self, post: Callable[[Inbound], None]) -> None:
        self.post = post
        self.client: SchedulerClient | None = None  # the client these events come from

    def subscribed(
        self, framework_id: str, heartbeat_interval: float, master_info: dict[str, object]
    ) -> None:
        self.post(Subscribed(framework_id, self.client, str(master_info.get("version") or "")))

    def offers(self, offers: Sequence[Offer]) -> None:
        self.post(Offers(offers))

    def rescind(self, offer_id: str) -> None:
        self.post(Rescinded(offer_id))

    def update(self, status: TaskStatus) -> None:
        self.post(StatusUpdate(status))

    def failure(self, agent_id: str | None, executor_id: str | None, status: int | None) -> None:
        if agent_id is not None and executor_id is None:
            log.warning("the master removed agent %s; its tasks are reported separately", agent_id)

    def disconnected(self, reason: str) -> None:
        self.post(StreamEnded())

    def terminated(self, error: TerminalError) -> None:
        self.post(ClientTerminated(error))

    def other(self, event: JSON) -> None:
        if event.get("type") == "INVERSE_OFFERS":
            raw = (event.get("inverse_offers") or {}).get("inverse_offers") or []
            self.post(InverseOffers([offer for offer in raw if isinstance(offer, dict)]))
