"""What the Mesos backend's loop is told: one typed inbox, no callbacks.

This module owns the messages that reach the loop from other threads: the master's events as
the client's stream thread hands them over (``Subscribed``, ``Offers``, ``Rescinded``,
``StatusUpdate``, ``InverseOffers``, ``StreamEnded``, ``ClientTerminated``) and the answers of
the sender's threads (``sender.Answered``, ``sender.BurstAnswered``, ``sender.AcksSent``).
``Inbound`` is their union; ``scheduler.Scheduler.handle`` matches on it (closed: a new
message that is not handled fails the type check). Frozen values, no behaviour.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from tfdeclare.backends.mesos.client import SchedulerClient
from tfdeclare.backends.mesos.errors import TerminalError
from tfdeclare.backends.mesos.events import JSON, Offer, TaskStatus
from tfdeclare.backends.mesos.sender import AcksSent, Answered, BurstAnswered


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
)
