"""The Mesos backend's policies' state (``decide``'s reducer): the settings they read, made from
``MesosConfig``, and ``Policy``, the one record the reducer writes, with its parts replaced
whole (the offers' state machine, the ask for the master's agents, the reconciliation
timers) and its maps (the queue, the reservations, the KILLs sent, the lost tasks). What each
field means is said beside it; the module docstring of ``decide`` says why ``Policy`` is
changed in place. The timing constants the policies share are here too."""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum

from tfdeclare.backends.mesos.config import MesosConfig
from tfdeclare.backends.mesos.placement_values import GangFit, PlacementOptions
from tfdeclare.backends.mesos.queueing import Waiting

RECONCILE_FIRST_RETRY_S = 1.0


RECONCILE_MAX_RETRY_S = 60.0


QUEUE_TTL_S = 15.0  # a waiting job that has not asked again for this long left the queue


MIN_KILL_RETRY_S = 10.0


AGENTS_REFRESH_S = 30.0  # the master's list of agents is asked again this often while jobs wait


AGENTS_RETRY_S = 1.0  # at most this often for an agent not on the list (one that just joined)


UNSCHEDULABLE_RECHECK_S = 3.0  # at most this often while a job is told it can never fit


FILTERED_REVIVE_S = 1.0  # a new job revives at once (our filters hide agents) at most this often


@dataclass(frozen=True, slots=True)
class Settings:
    """The configuration the policies read: made from a ``MesosConfig`` (``from_config``),
    whose defaults are the only ones (no second copy here)."""

    roles: tuple[str, ...]
    revive_interval_s: float
    reconcile_interval_s: float
    refuse_s: float
    fencing_timeout_s: float
    offer_hold_s: float
    fifo_backfill_s: float
    head_of_line_hold_s: float
    options: PlacementOptions

    @classmethod
    def from_config(cls, config: MesosConfig, options: PlacementOptions | None = None) -> Settings:
        """``config``'s settings; ``options``: the placement's (default: as ``config`` says)."""
        return cls(
            roles=tuple(config.roles),
            revive_interval_s=config.revive_interval_s,
            reconcile_interval_s=config.reconcile_interval_s,
            refuse_s=config.refuse_s,
            fencing_timeout_s=config.fencing_timeout_s,
            offer_hold_s=config.offer_hold_s,
            fifo_backfill_s=config.fifo_backfill_s,
            head_of_line_hold_s=config.head_of_line_hold_s,
            options=options or PlacementOptions(cpu_tasks_on_gpu_agents=config.cpu_tasks_on_gpu_agents),
        )


class Interest(Enum):
    """The two offer-interest calls, REVIVE and SUPPRESS."""

    REVIVE = "REVIVE"
    SUPPRESS = "SUPPRESS"


@dataclass(frozen=True, slots=True)
class OfferState:
    """Our interest in offers and what we know of their coming: one small state machine,
    replaced whole (``dataclasses.replace``) by the reducer's offer functions.

    The master's side as it last took it (``suppressed``), the REVIVE or SUPPRESS out (one
    decision at a time, so the master always ends up told the latest), and what to do once it
    is answered; our refuse filters; when we last revived, were offered, and expect resources
    back; when a job last asked for a placement (offers are held while work waits or waited a
    moment ago); and the close, after which every offer goes back and no REVIVE or SUPPRESS
    goes out. The queue and the reservations, the rest of what decides it, are maps of their
    own in ``Policy``."""

    suppressed: bool = False  # as the master took the last REVIVE/SUPPRESS (a subscription: not)
    recheck: bool = False  # decide REVIVE/SUPPRESS on the next chance, whatever ``suppressed`` says
    out: Interest | None = None  # the REVIVE or SUPPRESS out
    again: bool = False  # a REVIVE was asked for while one was out: decide again once answered
    filtered: bool = False  # we declined with a refuse filter since the last REVIVE
    revived_at: float = float("-inf")  # a REVIVE went out: offers of agents not all held may come
    received_at: float = 0.0  # the last offers came
    expected_since: float = 0.0  # resources come back after this (subscribed, an ACCEPT, a task ended)
    asked_at: float = float("-inf")  # a job last asked to be placed: offers are held a while after
    closing: bool = False  # the backend closes: offers declined and suppressed, no REVIVE


class AgentsAsk(Enum):
    """Where the ask for the master's list of agents (GET_AGENTS) stands."""

    IDLE = "idle"  # none out, the last one answered (or none yet)
    OUT = "out"  # one out: at most one at a time
    REFUSED = "refused"  # the last one was refused (no operator API, or no permission)


@dataclass(frozen=True, slots=True)
class Agents:
    """The ask for the master's agents and when it last went out, replaced whole."""

    ask: AgentsAsk = AgentsAsk.IDLE
    asked_at: float = -AGENTS_REFRESH_S


@dataclass(frozen=True, slots=True)
class ReconcileTimers:
    """Reconciliation's timers, replaced whole: the next explicit round (while task ids wait
    for an answer) and its doubling delay, and the next implicit round."""

    next_at: float = 0.0
    delay: float = RECONCILE_FIRST_RETRY_S
    implicit_at: float = 0.0


@dataclass(slots=True)
class Reservation:
    """What a placement took of the held offers, until its launch or ``expires_at``."""

    job: str
    fit: GangFit
    expires_at: float


@dataclass(slots=True)
class KillRecord:
    """A KILL we sent: one the controller asked for, re-sent until the task ends; or one of a
    task of ours the journal does not know (``unknown``), sent again only when the master
    reports it alive again, at most every ``MIN_KILL_RETRY_S``."""

    agent_id: str | None
    grace_s: float | None
    sent_at: float  # -inf: due now
    unknown: bool = False


@dataclass(slots=True)
class Policy:
    """The reducer's state: written only by ``on_event``/``on_tick``; see the module docstring."""

    settings: Settings
    subscribed_at: float | None = None  # None: not subscribed (or the subscription ended)
    offers: OfferState = OfferState()  # offer interest, and when offers came and are expected
    # agents whose resources we handed back (declined, rescinded), until an offer of theirs
    # comes: the master offers all an agent has free for us at once, what we declined with it
    # (a filter only holds back an offer that would be all refused resources)
    returned: set[str] = field(default_factory=set)
    # demand: the FIFO queue (in the order jobs first asked) and the placements not launched yet
    queue: dict[str, Waiting] = field(default_factory=dict)
    reservations: dict[str, Reservation] = field(default_factory=dict)
    agents: Agents = Agents()  # the ask for the master's list of agents
    # reconciliation: task id -> agent id, until the master answers; and the timers
    reconcile_pending: dict[str, str | None] = field(default_factory=dict)
    reconcile: ReconcileTimers = ReconcileTimers()
    kills: dict[str, KillRecord] = field(default_factory=dict)  # the KILLs we sent, by task id
    # fencing: lost tasks and since when
    lost: dict[str, float] = field(default_factory=dict)

    @property
    def connected(self) -> bool:
        """Subscribed, and the subscription has not ended."""
        return self.subscribed_at is not None
