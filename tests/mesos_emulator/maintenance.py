"""The master's drains and maintenance, as upstream Mesos 1.11 does them.

Owns, from ``src/master/master.cpp``, ``src/master/http.cpp`` and the allocator's
maintenance half (``src/master/allocator/mesos/hierarchical.cpp``), and the docs'
"Maintenance Primitives" and "Performing Node Maintenance":

* ``DRAIN_AGENT`` (``agent_id``, ``max_grace_period``, ``mark_gone``): the agent is
  deactivated (no offers; its outstanding ones are rescinded), its DrainInfo (state
  ``DRAINING``) is persisted, and the agent kills every task (``Agent.drain``: the smaller of
  the task's kill policy grace and ``max_grace_period``; KILLING/KILLED updates carry
  ``REASON_AGENT_DRAINING``, and with ``mark_gone`` a KILLED becomes GONE_BY_OPERATOR). Once
  none of its tasks is left the state is ``DRAINED`` (with ``mark_gone`` the agent is then
  marked gone). ``REACTIVATE_AGENT`` ends it: offers come again.
* ``UPDATE_MAINTENANCE_SCHEDULE`` (``schedule.windows``: ``machine_ids`` of
  ``hostname``/``ip`` and an ``unavailability``): the machines are in Draining mode. Their
  outstanding offers are rescinded and re-sent, and every offer of them carries the
  window's ``unavailability``; each framework with resources on them (used, or held in an
  offer: the allocator counts both as allocated) gets an ``INVERSE_OFFERS`` event (one outstanding per framework and agent; the allocation cycle
  sends another after an answer's filter, ``refuse_seconds`` default 5 s, has passed, while
  the framework still has resources there). ``ACCEPT_INVERSE_OFFERS`` and
  ``DECLINE_INVERSE_OFFERS`` record the answer (``GET_MAINTENANCE_STATUS``) and change
  nothing else, as upstream: the operator decides.
* ``GET_MAINTENANCE_SCHEDULE`` and ``GET_MAINTENANCE_STATUS``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from .status import is_terminal

if TYPE_CHECKING:
    from .master import Master
    from .model import AgentRecord, Framework

DEFAULT_REFUSE_S = 5.0  # upstream Filters.refuse_seconds default


@dataclass
class InverseOffer:
    id: str
    framework_id: str
    agent_id: str


@dataclass
class Maintenance:
    master: Master
    outstanding: dict[str, InverseOffer] = field(default_factory=dict)  # by inverse offer id
    filters: dict[tuple[str, str], float] = field(default_factory=dict)  # (framework, agent) -> until
    responses: dict[str, dict[str, str]] = field(default_factory=dict)  # agent -> framework -> answer
    _counter: int = 0

    # -- drains -------------------------------------------------------------------------
    def drain_agent(self, agent_id: str, config: dict[str, Any]) -> str | None:
        """``DRAIN_AGENT``; an error message for a 400, else None."""
        master = self.master
        record = master.agents.get(agent_id)
        if record is None:
            return f"Unknown agent {agent_id}"
        master.registry.draining[agent_id] = {"state": "DRAINING", "config": dict(config)}
        record.deactivated = True
        for offer_id in list(record.offers):
            master._rescind_offer(master.offers[offer_id])
        master._to_agent(record, lambda agent: agent.drain(dict(config)))
        self.progress(record)
        return None

    def reactivate_agent(self, agent_id: str) -> str | None:
        master = self.master
        record = master.agents.get(agent_id)
        if record is None:
            return f"Unknown agent {agent_id}"
        if not record.deactivated:
            return f"Agent {agent_id} is not deactivated"
        master.registry.draining.pop(agent_id, None)
        record.deactivated = False
        master._to_agent(record, _undrain)
        master.request_allocation()
        return None

    def progress(self, record: AgentRecord) -> None:
        """A draining agent with no task left that is not terminal is DRAINED."""
        info = self.master.registry.draining.get(record.id)
        if info is None or info["state"] != "DRAINING":
            return
        if any(not is_terminal(task.state) for task in record.tasks.values()):
            return
        info["state"] = "DRAINED"
        if info["config"].get("mark_gone"):
            self.master.mark_gone(record.id)

    def drain_info(self, agent_id: str) -> dict[str, Any] | None:
        info = self.master.registry.draining.get(agent_id)
        return None if info is None else {"state": info["state"], "config": info["config"]}

    # -- the schedule -------------------------------------------------------------------
    def update_schedule(self, schedule: dict[str, Any]) -> str | None:
        windows = schedule.get("windows") or []
        seen: set[tuple[str, str]] = set()
        for window in windows:
            machines = window.get("machine_ids") or []
            if not machines or not isinstance(window.get("unavailability"), dict):
                return "Maintenance window must contain at least one machine and an unavailability"
            for machine in machines:
                key = (str(machine.get("hostname", "")).lower(), str(machine.get("ip", "")))
                if key == ("", ""):
                    return "Machine ID must have at least a hostname or an IP"
                if key in seen:
                    return f"Machine {key} appears more than once in the schedule"
                seen.add(key)
        master = self.master
        master.registry.schedule = [dict(w) for w in windows]
        for record in list(master.agents.values()):
            if self.window_of(record) is not None:
                for offer_id in list(record.offers):  # re-sent with their unavailability
                    master._rescind_offer(master.offers[offer_id])
            else:
                self.responses.pop(record.id, None)
        self.send_inverse_offers()
        master.request_allocation()
        return None

    def window_of(self, record: AgentRecord) -> dict[str, Any] | None:
        """The unavailability of the agent's machine in the schedule. As upstream, a machine
        id is compared whole with the agent's (its hostname, lower case, and its IP): an
        omitted field is the empty string, which matches no agent that has one."""
        mine = (record.hostname.lower(), self.master.cluster.config.host_ip)
        for window in self.master.registry.schedule:
            for machine in window.get("machine_ids") or []:
                if (str(machine.get("hostname", "")).lower(), str(machine.get("ip", ""))) == mine:
                    return dict(window["unavailability"])
        return None

    def schedule(self) -> dict[str, Any]:
        return {"windows": [dict(w) for w in self.master.registry.schedule]}

    def status(self) -> dict[str, Any]:
        draining = []
        for record in self.master.agents.values():
            if self.window_of(record) is None:
                continue
            answers = self.responses.get(record.id, {})
            draining.append(
                {
                    "id": {"hostname": record.hostname, "ip": self.master.cluster.config.host_ip},
                    "statuses": [
                        {"framework_id": {"value": fid}, "status": answer}
                        for fid, answer in sorted(answers.items())
                    ],
                }
            )
        return {"draining_machines": draining, "down_machines": []}

    # -- inverse offers -----------------------------------------------------------------
    def send_inverse_offers(self) -> None:
        """Every framework with resources on an agent in a window, and no inverse offer for
        it outstanding or filtered, gets one (the allocator's cycle)."""
        master = self.master
        now = master.clock.now()
        for record in master.agents.values():
            window = self.window_of(record)
            if window is None:
                continue
            # Offered resources are allocated to the framework in the allocator's books as much
            # as used ones: a framework holding an offer of the agent is asked too (seen on
            # the real master, which sends inverse offers for agents we only held offers of).
            holders = {fid for fid, used in record.used.items() if used}
            holders |= {master.offers[o].framework_id for o in record.offers if o in master.offers}
            for framework_id in sorted(holders):
                framework = master.frameworks.get(framework_id)
                if framework is None or not framework.connected:
                    continue
                if any(
                    o.framework_id == framework_id and o.agent_id == record.id
                    for o in self.outstanding.values()
                ):
                    continue
                if self.filters.get((framework_id, record.id), 0.0) > now:
                    continue
                self._send(framework, record, window)

    def _send(self, framework: Framework, record: AgentRecord, window: dict[str, Any]) -> None:
        master = self.master
        self._counter += 1
        offer = InverseOffer(f"{master.id}-IO{self._counter}", framework.id, record.id)
        self.outstanding[offer.id] = offer
        port = master.cluster.agent_port
        event = {
            "type": "INVERSE_OFFERS",
            "inverse_offers": {
                "inverse_offers": [
                    {
                        "id": {"value": offer.id},
                        "url": {
                            "scheme": "http",
                            "address": {
                                "hostname": record.hostname,
                                "ip": master.cluster.config.host_ip,
                                "port": port,
                            },
                            "path": f"/{record.agent.pid_path}",
                        },
                        "framework_id": {"value": framework.id},
                        "agent_id": {"value": record.id},
                        "unavailability": window,
                        "resources": [],
                    }
                ]
            },
        }
        master.send(framework, event)

    def answer(self, framework: Framework, body: dict[str, Any], accepted: bool) -> None:
        """``ACCEPT_INVERSE_OFFERS`` / ``DECLINE_INVERSE_OFFERS``: unknown ids are ignored (as
        upstream logs and drops them); the answer is recorded and filters the next one."""
        filters = body.get("filters") or {}
        refuse = float(filters.get("refuse_seconds", DEFAULT_REFUSE_S))
        now = self.master.clock.now()
        for raw in body.get("inverse_offer_ids") or []:
            offer = self.outstanding.get(str(raw.get("value")))
            if offer is None or offer.framework_id != framework.id:
                continue
            del self.outstanding[offer.id]
            self.responses.setdefault(offer.agent_id, {})[framework.id] = "ACCEPT" if accepted else "DECLINE"
            self.filters[(framework.id, offer.agent_id)] = now + refuse

    def forget_framework(self, framework_id: str) -> None:
        for offer_id in [i for i, o in self.outstanding.items() if o.framework_id == framework_id]:
            del self.outstanding[offer_id]


def _undrain(agent: Any) -> None:
    agent.drain_config = None
