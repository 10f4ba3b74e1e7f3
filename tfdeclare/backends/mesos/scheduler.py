"""What the Mesos backend does with what reaches its loop: the master's events and answers.

The client's stream thread only posts each event (``inbox.EventHandler``: a typed message,
never a callback) to the loop, which handles it in order with everything else; the stream
thread never waits for the backend. This module owns ``Scheduler.handle``: SUBSCRIBED
(persist the framework id before anything acts on it, void held offers), OFFERS (into the
pool, held for as long as ``decide.hold_for`` says), RESCIND, UPDATE (folded into the task
table, journaled before the update is acknowledged; a task never launched is forgotten),
INVERSE_OFFERS (``inverse.Maintenance``), the end of a subscription, a client that stopped,
a framework the master removed (policy ``onFrameworkRemoved``), and the sender's answers.
What follows from each for the policies (ask for the agents, reconcile, re-send KILLs, kill
an unknown task of ours, fence a lost one) is decided by ``decide`` from the event handed to
it. Each handler returns what it changed (``loop.Effect``). It also owns the loop's periodic
work (``upkeep``) and what runs after each batch (``after_batch``: acknowledgements, the next
ACCEPT burst), and the collaborators that act on the loop for the protocol (``placing``,
``launching``).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from typing import assert_never

from tfdeclare.backends.mesos import decide_messages as msg
from tfdeclare.backends.mesos import decide_offers
from tfdeclare.backends.mesos.clusterserver import Fetched
from tfdeclare.backends.mesos.config import MesosConfig
from tfdeclare.backends.mesos.decide_messages import Reported
from tfdeclare.backends.mesos.errors import (
    ClientStoppedError,
    FrameworkRemovedError,
    SubscribeRefusedError,
    TerminalError,
)
from tfdeclare.backends.mesos.events import Offer, TaskStatus
from tfdeclare.backends.mesos.framework import FrameworkRecord, older_than
from tfdeclare.backends.mesos.inbox import (
    ClientDropped,
    ClientTerminated,
    Inbound,
    InverseOffers,
    Offers,
    Rescinded,
    StatusUpdate,
    StreamEnded,
    Subscribed,
)
from tfdeclare.backends.mesos.inverse import Maintenance
from tfdeclare.backends.mesos.launching import Launches
from tfdeclare.backends.mesos.loop import Effect
from tfdeclare.backends.mesos.maintenance import Window
from tfdeclare.backends.mesos.offers import HeldOffer
from tfdeclare.backends.mesos.placing import Placer
from tfdeclare.backends.mesos.policies import Policies
from tfdeclare.backends.mesos.sender import AcksSent, Answered, BurstAnswered, Sender
from tfdeclare.backends.mesos.taskinfo import LABEL_PREFIX
from tfdeclare.backends.mesos.taskstate import LOST_LIKE, is_terminal
from tfdeclare.backends.mesos.tasktable import (
    OUR_TASK_ID,
    Launch,
    StatusRule,
    TaskTable,
    reported,
    status_rule,
    stopping,
    to_reconcile,
)

log = logging.getLogger("tfdeclare.mesos")


class Scheduler:
    """The loop's handlers; see the module docstring."""

    def __init__(
        self,
        config: MesosConfig,
        clock: Callable[[], float],
        table: TaskTable,
        framework: FrameworkRecord,
        sender: Sender,
        policies: Policies,
    ) -> None:
        self._clock = clock
        self._table, self._framework, self._sender = table, framework, sender
        self.policies = policies
        self.launches = Launches(config, clock, table, sender, policies)
        self.placer = Placer(config, clock, policies)
        self.maintenance = Maintenance(clock, table, framework, sender, policies)

    def handle(self, message: Inbound) -> Effect:
        match message:
            case Subscribed():
                return self._subscribed(message)
            case Offers(offers=offers):
                return self._offers(offers)
            case Rescinded(offer_id=offer_id):
                gone = self.policies.pool.remove(offer_id)
                if gone is not None:
                    self.policies.decide(msg.Rescinded(gone.agent_id))
                return Effect.CHANGED
            case StatusUpdate(status=status):
                return self._update(status)
            case InverseOffers(inverse_offers=inverse):
                return self.maintenance.inverse_offers(inverse)
            case StreamEnded():
                self.policies.decide(msg.Disconnected())
                self.policies.pool.clear()
                self.maintenance.held.clear()  # void with the subscription, as offers are
                return Effect.CHANGED
            case ClientTerminated(error=error):
                return self._terminated(error)
            case ClientDropped(client=client):
                if self._sender.client is client:
                    self._sender.drop_client()
                    self.policies.decide(msg.Disconnected())
                return Effect.NONE
            case Answered():
                return self.policies.answered(message)
            case BurstAnswered(burst=burst, results=results):
                return self.launches.answered(burst, results)
            case AcksSent(batches=batches):
                self._sender.acks_out -= batches
                return Effect.CHANGED
            case Fetched():
                self._table.cluster_fetched(message)
                return Effect.NONE
            case _:
                assert_never(message)

    # ---- the loop's own work --------------------------------------------------------------------

    def upkeep(self) -> None:
        """The policies' timers (``decide.on_tick``), then compaction of the journal."""
        if self._framework.read_only:
            return
        self.policies.tick()
        if self._table.journal.needs_compaction(len(self._table)):
            self._table.compact()

    def after_batch(self) -> None:
        """Acknowledge what the batch journaled (the acks thread makes it durable first), and
        hand the next ACCEPT burst to the calls thread."""
        if self._table.acks_due:
            acks = self._table.take_acks()
            try:
                handle = self._table.journal.durable_handle()  # fsynced by the acks thread, then acked
            except OSError as err:
                log.error("cannot sync the task journal (%s); not acknowledging %d update(s)", err, len(acks))
            else:
                self._sender.acknowledge(acks, handle)
        self.launches.dispatch(self._framework.owner)

    # ---- the framework ----------------------------------------------------------------------------

    def framework_removed(self) -> Effect:
        """The master refused our framework id for good: its tasks were killed, so they are
        gone (journaled); then stop, or start anew (policy)."""
        framework_id = self._framework.removed(self._clock())
        if framework_id is None:
            return Effect.CHANGED
        self._table.framework_removed(framework_id, self._clock())
        self.policies.decide(msg.FrameworkRemoved())
        self.policies.pool.clear()
        self.policies.notify()
        return Effect.CHANGED

    def _terminated(self, error: TerminalError) -> Effect:
        if isinstance(error, ClientStoppedError):
            return Effect.NONE
        if isinstance(error, FrameworkRemovedError | SubscribeRefusedError):
            if self._sender.client is None:
                return Effect.NONE  # still connecting: the connecting caller handles it
            self._sender.drop_client()
            if isinstance(error, FrameworkRemovedError):
                return self.framework_removed()
            # the credentials or ACLs changed under a running client: the next pass connects
            # again and says why; nothing is fatal, an operator's fix is taken then
            log.error("the Mesos master refused the framework: %s", error)
        else:
            self._framework.terminated(error)
            if self._framework.read_only:  # another scheduler took over: nothing goes out
                self._sender.drop_client()
                self.policies.decide(msg.Disconnected())
        self.policies.notify()
        return Effect.CHANGED

    # ---- events from the master ---------------------------------------------------------------------

    def _subscribed(self, event: Subscribed) -> Effect:
        if self._framework.read_only:
            return Effect.NONE
        self._framework.subscribed(event.framework_id)  # saved before anything acts on it
        if event.client is not None:
            self._sender.client = event.client
        self.policies.pool.clear()  # offers of an earlier subscription are void
        self.policies.pool.forget_agents()
        live = to_reconcile(self._table, self._table.at(Launch.UNSENT))
        self.policies.decide(msg.Subscribed(live, stopping(self._table)))
        log.info("subscribed as framework %s; reconciling %d task(s)", event.framework_id, len(live))
        if not self._framework.gpu_enabled and older_than(event.version, (1, 9)):
            # No UPDATE_FRAMEWORK before Mesos 1.9 (the call is a 400 there): subscribe again
            # with GPU_RESOURCES now, so GPU jobs never need it. Remembered in framework.json.
            log.info(
                "the Mesos master is %s (< 1.9): subscribing with GPU_RESOURCES from the start", event.version
            )
            self._framework.enable_gpu()
            info = self._framework.info(gpu=True)
            self._sender.call("SUBSCRIBE (with GPU_RESOURCES)", lambda c: c.resubscribe(info))
        self.policies.notify()
        return Effect.TICK

    def _offers(self, offers: Sequence[Offer]) -> Effect:
        policies = self.policies
        if self._framework.read_only or not policies.connected:
            return Effect.NONE
        now = self._clock()
        # Hold offers while work waits, or waited a moment ago (the controller places one
        # job after the other); with nothing to do, decline at once (with a filter).
        hold = decide_offers.hold_for(policies.policy, now)
        unlisted = False
        for offer in offers:
            held = HeldOffer.parse(offer, now, hold)
            policies.pool.add(held)
            self.maintenance.windows[held.agent_id] = None if held.window is None else Window(*held.window)
            unlisted = unlisted or held.agent_id not in policies.pool.capacity
        policies.decide(msg.OffersReceived(unlisted, tuple({o.agent_id for o in offers})), now)
        if decide_offers.demand(policies.policy, now):
            policies.notify()
        return Effect.TICK

    def _update(self, status: TaskStatus) -> Effect:
        if self._framework.read_only:
            return Effect.NONE  # another scheduler owns the framework now: not ours to record or ack
        effect = Effect.NONE
        now = self._clock()
        task_id = status.task_id
        entry = self._table.get(task_id)
        first = self._table.first_update(task_id)
        if first or task_id in self.policies.policy.reconcile_pending:
            effect = Effect.CHANGED  # close() or the first observe() may be waiting for it
        said = reported(status.state)
        rule = status_rule(entry, status.state, status.source, status.reason)
        changed = False
        if entry is None or rule is StatusRule.UNKNOWN:
            ours = said is not Reported.ENDED and self._is_ours(task_id, status)
            self.policies.decide(msg.Update(task_id, status.agent_id, said, known=False, ours=ours), now)
        elif rule is StatusRule.NEVER_LAUNCHED:
            # The task never reached an agent: its launch did not happen. Forget it, so the
            # controller launches the slot again (this is not a failure of the task).
            log.warning(
                "task %s was never launched (%s %s: %s); it will be launched again",
                task_id,
                status.state,
                status.reason,
                status.message,
            )
            self._table.remove([task_id], sync=False)
            self.policies.decide(msg.Forgotten((task_id,)), now)
            changed = True
        else:
            was_lost = entry.state in LOST_LIKE
            changed = self._table.apply(entry, status, now)
            update = msg.Update(
                task_id,
                entry.agent_id,
                said,
                changed=changed,
                kill_requested=entry.kill_requested,
                kill_grace_s=entry.kill_grace_s,
                was_lost=was_lost,
                lost_since=entry.lost_since,
            )
            self.policies.decide(update, now)
        if status.uuid is not None and status.agent_id is not None:
            self._table.acks_due.append((status.agent_id, task_id, status.uuid))  # once the journal is synced
        if not changed:
            return effect
        if is_terminal(status.state):
            self.maintenance.settle()
        self.policies.notify()
        return Effect.CHANGED

    def _is_ours(self, task_id: str, status: TaskStatus) -> bool:
        if not OUR_TASK_ID.match(task_id):
            return False
        labels = status.raw.get("labels")
        if isinstance(labels, dict):
            for label in labels.get("labels", []):
                if label.get("key") == f"{LABEL_PREFIX}owner":
                    return bool(label.get("value") == self._framework.owner)
        return True
