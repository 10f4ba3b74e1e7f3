"""The Mesos policies' reducer (``decide``): its vocabulary, plain values.

This module owns what the loop tells the reducer (events: ``Subscribed``, ``Update``,
``Stop``, ``PlaceAsked``, ... and the answers to calls, ``InterestAnswered``,
``AgentsAnswered``; ``Closing``), what the reducer asks the loop to do (calls: ``Revive``, ``Suppress``,
``Reconcile``, ``Kill``, ``Decline``, ``RefreshAgents``, ``PlacementExpired``,
``WakeWatchers``) and the read-only view of the offer pool a tick reads (``HeldOffers``).
Frozen dataclasses, no behaviour: ``decide`` decides, ``policies`` executes.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from enum import Enum
from typing import Protocol

from tfdeclare.backends.mesos.placement_values import AgentOffer, GangFit
from tfdeclare.core.run.tasks import GangRequest

# ---- what the loop tells the reducer -------------------------------------------------------------


class Reported(Enum):
    """What a status update says of a task, as far as the policies care."""

    ACTIVE = "active"  # staging, or another live state not named below
    RUNNING = "running"  # TASK_STARTING / TASK_RUNNING
    KILLING = "killing"
    LOST = "lost"  # TASK_LOST / TASK_UNREACHABLE / TASK_UNKNOWN: maybe alive somewhere
    ENDED = "ended"  # terminal


@dataclass(frozen=True, slots=True)
class KillTarget:
    task_id: str
    agent_id: str | None
    grace_s: float | None


@dataclass(frozen=True, slots=True)
class Subscribed:
    """(Re)subscribed: ``live`` are the journaled tasks to reconcile (task id, agent id),
    ``kill_requested`` the live tasks the controller asked to stop."""

    live: tuple[tuple[str, str | None], ...] = ()
    kill_requested: tuple[KillTarget, ...] = ()


@dataclass(frozen=True, slots=True)
class Disconnected:
    """The subscription ended (or the client was dropped, or another scheduler took over)."""


@dataclass(frozen=True, slots=True)
class FrameworkRemoved:
    """The master removed the framework: every task of it is gone, nothing is lost any more."""


@dataclass(frozen=True, slots=True)
class OffersReceived:
    """Offers went into the pool; ``unlisted``: one of an agent the master's list lacks;
    ``agents``: the agents they are of."""

    unlisted: bool = False
    agents: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class Rescinded:
    """The master took back a held offer of ``agent_id`` (its resources may be offered again)."""

    agent_id: str


@dataclass(frozen=True, slots=True)
class Update:
    """A status update as the loop booked it. ``known``: the journal has the task;
    ``changed``: the update changed it; ``kill_requested``/``was_lost``/``lost_since`` as the
    journal has them; ``ours``: the task id and labels say the task is ours (for unknown ones).
    ``agent_id``: the journal's agent for a known task, else the update's."""

    task_id: str
    agent_id: str | None
    reported: Reported
    known: bool = True
    changed: bool = True
    ours: bool = False
    kill_requested: bool = False
    kill_grace_s: float | None = None
    was_lost: bool = False
    lost_since: float | None = None


@dataclass(frozen=True, slots=True)
class Stop:
    """The controller asked to stop live tasks (``grace_s`` may change between asks)."""

    targets: tuple[KillTarget, ...]


@dataclass(frozen=True, slots=True)
class Forgotten:
    """Tasks left the table (purged, or never launched): nothing more to kill or fence."""

    task_ids: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class LaunchUnanswered:
    """An ACCEPT got no answer (connection lost): did the master get it? Reconcile them."""

    tasks: tuple[tuple[str, str | None], ...]


@dataclass(frozen=True, slots=True)
class OffersUsed:
    """ACCEPTs were queued or answered: what the tasks leave of the offers comes back."""


@dataclass(frozen=True, slots=True)
class PlaceAsked:
    """A job asks to be placed: it joins the queue (or asks again)."""

    request: GangRequest


@dataclass(frozen=True, slots=True)
class NotPlacedYet:
    """A job could not be placed from the offers held; ``first``: it just joined the queue;
    ``waits_until``: the ``place`` call may wait for offers until then (None: it does not)."""

    job: str
    first: bool
    offers_held: bool
    waits_until: float | None = None


@dataclass(frozen=True, slots=True)
class Placed:
    """A placement reserved part of the held offers; the job leaves the queue."""

    token: str
    job: str
    fit: GangFit
    expires_at: float


@dataclass(frozen=True, slots=True)
class Unschedulable:
    """A job can never fit the agents listed: it leaves the queue."""

    job: str


@dataclass(frozen=True, slots=True)
class Released:
    """A placement was launched or given up."""

    token: str


@dataclass(frozen=True, slots=True)
class GpuOffersAsked:
    """UPDATE_FRAMEWORK added GPU_RESOURCES: the master must be asked for offers again."""


@dataclass(frozen=True, slots=True)
class InterestAnswered:
    """The REVIVE or SUPPRESS that was out came back (``ok``: the master took it)."""

    ok: bool
    offers_held: bool


@dataclass(frozen=True, slots=True)
class AgentsAnswered:
    """The ask for the master's agents came back (``ok``: with the list)."""

    ok: bool


@dataclass(frozen=True, slots=True)
class Closing:
    """The backend is closing: hand back the offers held (``offer_ids``) and stop offers,
    before the stream closes; nothing is placed or revived any more."""

    offer_ids: tuple[str, ...]


Event = (
    Subscribed
    | Disconnected
    | FrameworkRemoved
    | OffersReceived
    | Update
    | Stop
    | Forgotten
    | LaunchUnanswered
    | OffersUsed
    | Rescinded
    | PlaceAsked
    | NotPlacedYet
    | Placed
    | Unschedulable
    | Released
    | GpuOffersAsked
    | InterestAnswered
    | AgentsAnswered
    | Closing
)


class HeldOffer(Protocol):
    """What the reducer reads of one held offer."""

    @property
    def offer_id(self) -> str: ...
    @property
    def agent_id(self) -> str: ...
    @property
    def role(self) -> str: ...
    @property
    def received_at(self) -> float: ...
    @property
    def hold_until(self) -> float: ...


class HeldOffers(Protocol):
    """What the reducer reads of the offer pool (``offers.OfferPool``), never changes."""

    @property
    def offers(self) -> Mapping[str, HeldOffer]: ...
    def views(self) -> list[AgentOffer]: ...
    def capacities(self) -> list[AgentOffer]: ...


# ---- what the reducer asks the loop to do ----------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Revive:
    roles: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class Suppress:
    roles: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class Reconcile:
    """RECONCILE these (task id, agent id) pairs; none: implicit reconciliation."""

    tasks: tuple[tuple[str, str | None], ...]


@dataclass(frozen=True, slots=True)
class Kill:
    task_id: str
    agent_id: str | None
    grace_s: float | None
    unknown: bool = False  # a task of ours the journal does not know


@dataclass(frozen=True, slots=True)
class Decline:
    """DECLINE these held offers (the loop removes them from the pool) with a refuse filter."""

    offer_ids: tuple[str, ...]
    refuse_s: float


@dataclass(frozen=True, slots=True)
class RefreshAgents:
    """Ask the master for its agents (and the roles' quota); answer with ``AgentsAnswered``."""


@dataclass(frozen=True, slots=True)
class PlacementExpired:
    """A placement was not launched in time; its reservation is gone (for the log)."""

    job: str


@dataclass(frozen=True, slots=True)
class WakeWatchers:
    """Something the controller waits for happened (a fencing deadline passed)."""


Call = Revive | Suppress | Reconcile | Kill | Decline | RefreshAgents | PlacementExpired | WakeWatchers
