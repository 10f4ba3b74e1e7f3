"""How one ``place_gang`` decision picks an agent: ``Decision``, over an ``AgentIndex``.

This module owns the strategies' choice of the next agent for a slot (``pack``: keep filling,
else the tightest that takes the whole rest, else the largest; ``spread``: the least used, then
the freest; a previous address: its agent), reading the index's sorted buckets for the agents
the decision has not touched and its ``Bin``s for those it has. Every tie is broken by
(agent id, role), so the same input always gives the same answer.
"""

from __future__ import annotations

import bisect
from collections.abc import Sequence
from typing import Any

from tfdeclare.backends.mesos.placement_bins import Bin, Rest, holds_all, view_fits
from tfdeclare.backends.mesos.placement_index import AgentIndex, AgentKey, Entry
from tfdeclare.backends.mesos.placement_rules import gpu_rules_allow, matches
from tfdeclare.backends.mesos.placement_values import EPS, AgentOffer, PlacementOptions
from tfdeclare.core.spec.keys import AttributeConstraint
from tfdeclare.core.spec.resources import Resources


class Decision:
    """One ``place_gang``: the index as given, and bins for the agents the decision changed.

    An agent without a bin is as the index has it (unused by this gang), so the strategies
    ask the index's buckets for the best such agent and compare it with the bins:

    - ``pack`` keeps filling the agents the gang uses (the fullest first); a new agent is the
      tightest unused one that takes every slot still to place (by free cpus, mem, GPUs, key),
      else the largest unused one that takes this slot;
    - ``spread`` takes the agent with the fewest slots of the gang, then the most free cpus,
      then mem, then key.

    These are the answers the straightforward placement gave (a bin per agent, sorted or in a
    heap each decision: ``tests/placement_reference.py``); ``tests/test_placement_index.py``
    checks they are the same on random clusters and gangs.
    """

    __slots__ = ("agents", "bins", "changes", "constraints", "options", "tables")

    def __init__(
        self, agents: AgentIndex, constraints: Sequence[AttributeConstraint], options: PlacementOptions
    ) -> None:
        self.agents = agents
        self.tables = agents.tables()
        self.changes = agents.changes
        self.constraints = constraints
        self.options = options
        self.bins: dict[AgentKey, Bin] = {}
        for key, view in self.changes.items():
            if view is not None and (not constraints or matches(view.attributes, constraints)):
                self.bins[key] = Bin.of(view)

    def _as_indexed(self, key: AgentKey, view: AgentOffer) -> bool:
        """Is this agent of the index usable as the index has it (no bin, not amended away,
        matching the constraints)?"""
        if key in self.bins or key in self.changes:
            return False
        return not self.constraints or matches(view.attributes, self.constraints)

    def bin_of(self, key: AgentKey) -> Bin:
        b = self.bins.get(key)
        if b is None:
            b = self.bins[key] = Bin.of(self.tables.views[key])
        return b

    def at_address(self, host: str, port: int, resources: Resources) -> Bin | None:
        """The first agent (by key) of ``host`` that offers ``port`` and takes ``resources``."""
        for key in self.agents.keys_on_host(host):
            b = self.bins.get(key)
            if b is None:
                view = self.tables.views[key]
                if not self._as_indexed(key, view):
                    continue
                b = Bin.of(view)  # kept only if chosen
            if b.has_port(port) and b.allows(resources, self.options) and b.fits(resources):
                return self.bins.setdefault(key, b)
        return None

    def pack_fill(self, resources: Resources) -> Bin | None:
        """The fullest agent the gang uses already that takes ``resources``."""
        filling = [
            b
            for b in self.bins.values()
            if b.used and b.allows(resources, self.options) and b.fits(resources)
        ]
        if not filling:
            return None
        return min(filling, key=lambda b: (-b.used, b.cpus, b.mem, b.key))

    def pack_open(self, resources: Resources, rest: Rest) -> Bin | None:
        """A new agent for ``pack``: the tightest that takes the whole rest, else the largest."""
        options = self.options
        best: tuple[float, float, int, AgentKey] | None = None
        for b in self.bins.values():
            if (
                not b.used
                and b.allows(resources, options)
                and b.fits(resources)
                and b.holds_all(rest, options)
            ):
                candidate = (b.cpus, b.mem, b.gpus, b.key)
                if best is None or candidate < best:
                    best = candidate
        low = rest.need.cpus - EPS
        least_gpus = max(resources.gpus, rest.need.gpus)
        for (gpu_agent, gpus), entries in self.tables.buckets.items():
            if gpus < least_gpus or not gpu_rules_allow(gpu_agent, resources, options):
                continue
            for i in range(bisect.bisect_left(entries, (low,)), len(entries)):
                cpus, mem, agent_id, role, view = entries[i]
                if best is not None and (cpus, mem, gpus) > best[:3]:
                    break  # the rest of this bucket is larger than the best so far
                key = (agent_id, role)
                if not self._as_indexed(key, view) or not view_fits(view, resources):
                    continue
                if holds_all(gpu_agent, cpus, mem, gpus, view.ports, rest, options):
                    candidate = (cpus, mem, gpus, key)
                    if best is None or candidate < best:
                        best = candidate
                    break  # the first in a bucket is its tightest
        if best is not None:
            return self.bin_of(best[3])
        return self._freest(resources, spread=False)

    def spread_pick(self, resources: Resources) -> Bin | None:
        """The agent with the fewest slots of the gang, then the most free cpus, mem, key."""
        return self._freest(resources, spread=True)

    def _freest(self, resources: Resources, spread: bool) -> Bin | None:
        """``spread``: the least by (slots of the gang, -cpus, -mem, key) of the agents that
        take ``resources``; else the largest unused one, by (-cpus, -mem, -GPUs, key). Among
        the bins, and from each bucket with enough GPUs its freest agent (most cpus, then mem,
        then the lowest key), unused: both orders rank a bucket's agents that way."""
        options = self.options
        best: tuple[Any, ...] | None = None
        chosen: Bin | None = None
        for b in self.bins.values():
            if (b.used and not spread) or not b.allows(resources, options) or not b.fits(resources):
                continue
            rank = (b.used, -b.cpus, -b.mem, b.key) if spread else (-b.cpus, -b.mem, -b.gpus, b.key)
            if best is None or rank < best:
                best, chosen = rank, b
        indexed: AgentKey | None = None  # the best is an agent as the index has it
        for (gpu_agent, gpus), entries in self.tables.buckets.items():
            if gpus < resources.gpus or not gpu_rules_allow(gpu_agent, resources, options):
                continue
            found: Entry | None = None
            end = len(entries)
            while end > 0 and found is None:
                cpus, mem = entries[end - 1][:2]
                if resources.cpus > cpus + EPS:
                    break  # every agent before it has fewer cpus
                # The agents with these free cpus and mem (many, on a cluster of one kind of
                # machine), from the lowest key: the first usable one that fits is the freest.
                start = bisect.bisect_left(entries, (cpus, mem))
                for i in range(start, end):
                    entry = entries[i]
                    if self._as_indexed((entry[2], entry[3]), entry[4]) and view_fits(entry[4], resources):
                        found = entry
                        break
                end = start
            if found is None:
                continue
            key = (found[2], found[3])
            rank = (0, -found[0], -found[1], key) if spread else (-found[0], -found[1], -gpus, key)
            if best is None or rank < best:
                best, chosen, indexed = rank, None, key
        if indexed is not None and chosen is None:
            return self.bin_of(indexed)
        return chosen
