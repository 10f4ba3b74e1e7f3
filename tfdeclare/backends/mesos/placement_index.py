"""The offered agents as placement reads them: ``AgentIndex``.

This module owns the index, one ``AgentOffer`` per (agent id, role), bucketed by free GPUs and
sorted by free cpus and mem, kept current between decisions (``put``/``drop``) by the backend's
offer pool and the scheduling simulator, so a decision looks only at the agents that could take
a slot (a bisection and a short scan per bucket) instead of sorting every agent and making an
object per agent. Own code over the standard library's ``bisect`` on plain lists (at 10,000
agents an insert is a move of at most 80 KB; ``sortedcontainers`` pays off only far beyond
that), because the order is placement's own (pack: the tightest agent; spread and "the
largest": the freest, the lowest agent id among equals). Measured alongside the straightforward
version (``make bench-placement``, docs/benchmarks.md, issue 23): at 10,000 agents the median
decision went from 22 ms to 0.021 ms, the p99 from 657 ms to 5.7 ms, and the young collections
in 300 decisions from 18,700 to 0. ``tests/test_placement_index.py`` checks that the answers
are the same. How a decision walks the buckets is ``placement_decision``'s.
"""

from __future__ import annotations

import bisect
from collections.abc import Iterable, Iterator, Mapping

from tfdeclare.backends.mesos.placement_rules import is_gpu_agent
from tfdeclare.backends.mesos.placement_values import AgentOffer

AgentKey = tuple[str, str]  # (agent id, role): one view per key

# One agent in a bucket of the index: (cpus, mem, agent id, role, view). Keys are unique, so
# comparisons never reach the view; a bucket sorted by these tuples is sorted by
# (cpus, mem, agent id, role), and ``bisect`` compares them in C.
Entry = tuple[float, float, str, str, AgentOffer]
Bucket = tuple[bool, int]  # (a GPU agent, free GPUs)


def _entry(view: AgentOffer) -> Entry:
    return (view.cpus, view.mem_mib, view.agent_id, view.role, view)


class Tables:
    """What an ``AgentIndex`` and the indexes amended from it share (a decision reads them;
    only the index changes them)."""

    __slots__ = ("buckets", "by_host", "order", "version", "views", "windowed")

    def __init__(self) -> None:
        self.views: dict[AgentKey, AgentOffer] = {}
        self.buckets: dict[Bucket, list[Entry]] = {}  # each sorted
        self.order: list[AgentKey] | None = None  # the keys sorted (made when first needed)
        self.by_host: dict[str, list[AgentKey]] | None = None  # sorted keys per hostname (likewise)
        self.version = 0  # changes with every put and drop
        self.windowed: set[AgentKey] = set()  # the keys whose view has a maintenance window


class AgentIndex:
    """The offered agents, one ``AgentOffer`` per (agent id, role), indexed for ``place_gang``.

    The agents are kept in buckets by (GPU agent or not, free GPUs), each sorted by (free cpus,
    free mem, agent id, role), so a decision looks only at the agents that could take a slot:
    a bisection to the first with enough cpus for ``pack``, the last (the freest) for
    ``spread`` and for "the largest", in the few buckets with enough GPUs. ``put`` and
    ``drop`` keep it current as offers come and go (the Mesos backend's offer pool keeps
    one between decisions; the scheduling simulator likewise), so a decision costs the agents
    it looks at, not every agent offering (issue 23: building a bin per agent per decision
    made 21 young collections a decision at 10,000 agents, and the collector's passes over
    the backend's long-lived heap decided the p99).

    ``amended`` gives a copy with some views replaced or removed (what a reservation or the
    head of the queue takes) in the cost of the changes: it shares the tables and is valid
    until the index it came from changes.
    """

    __slots__ = ("_at", "_changes", "_t")

    def __init__(self, views: Iterable[AgentOffer] = ()) -> None:
        self._t = Tables()
        self._changes: dict[AgentKey, AgentOffer | None] = {}
        self._at = -1  # the version amended at; -1: the index itself (it may change)
        views_by_key, buckets = self._t.views, self._t.buckets
        for view in views:
            key = (view.agent_id, view.role)
            if key in views_by_key:
                raise ValueError(f"two views of agent {view.agent_id} for role {view.role}")
            views_by_key[key] = view
            if view.window is not None:
                self._t.windowed.add(key)
            buckets.setdefault((is_gpu_agent(view), view.gpus), []).append(_entry(view))
        for entries in buckets.values():
            entries.sort()

    # -- changing it (the index itself only)

    def put(self, view: AgentOffer) -> None:
        """Add the view of (agent id, role), or replace the one there."""
        t = self._mutable()
        key = (view.agent_id, view.role)
        old = t.views.get(key)
        if old is not None:
            self._unfile(old)
            if t.by_host is not None and old.hostname != view.hostname:
                _remove_key(t.by_host, old.hostname, key)
        elif t.order is not None:
            bisect.insort(t.order, key)
        t.views[key] = view
        if view.window is not None:
            t.windowed.add(key)
        else:
            t.windowed.discard(key)
        bisect.insort(t.buckets.setdefault((is_gpu_agent(view), view.gpus), []), _entry(view))
        if t.by_host is not None and (old is None or old.hostname != view.hostname):
            bisect.insort(t.by_host.setdefault(view.hostname, []), key)
        t.version += 1

    def drop(self, agent_id: str, role: str) -> None:
        """Remove the view of (agent id, role), if there is one."""
        t = self._mutable()
        key = (agent_id, role)
        old = t.views.pop(key, None)
        if old is None:
            return
        self._unfile(old)
        t.windowed.discard(key)
        if t.order is not None:
            del t.order[bisect.bisect_left(t.order, key)]
        if t.by_host is not None:
            _remove_key(t.by_host, old.hostname, key)
        t.version += 1

    def _unfile(self, old: AgentOffer) -> None:
        """Take ``old`` out of its bucket."""
        t = self._t
        bucket = (is_gpu_agent(old), old.gpus)
        entries = t.buckets[bucket]
        del entries[bisect.bisect_left(entries, (old.cpus, old.mem_mib, old.agent_id, old.role))]
        if not entries:
            del t.buckets[bucket]

    def _mutable(self) -> Tables:
        if self._at != -1:
            raise TypeError("an amended AgentIndex cannot change: change the index it came from")
        return self._t

    def amended(self, changes: Mapping[AgentKey, AgentOffer | None]) -> AgentIndex:
        """This index with the views of ``changes``' keys replaced (None: removed); each key
        must be one it holds, and a replacement keeps its agent, role and hostname."""
        t = self.tables()
        for key, view in changes.items():
            old = t.views[key]  # KeyError: not one it holds
            if view is not None and (view.agent_id, view.role, view.hostname) != (*key, old.hostname):
                raise ValueError(f"a change of {key} must keep its agent, role and hostname")
        out = AgentIndex.__new__(AgentIndex)
        out._t, out._changes, out._at = t, {**self._changes, **changes}, t.version
        return out

    # -- reading it

    def tables(self) -> Tables:
        """The tables it reads (for a decision over it: read only)."""
        if self._at not in (-1, self._t.version):
            raise RuntimeError("the AgentIndex this was amended from has changed since")
        return self._t

    @property
    def changes(self) -> Mapping[AgentKey, AgentOffer | None]:
        """The views ``amended`` replaced (None: removed), over the tables (read only)."""
        return self._changes

    def get(self, agent_id: str, role: str) -> AgentOffer | None:
        key = (agent_id, role)
        if key in self._changes:
            return self._changes[key]
        return self.tables().views.get(key)

    def _order(self) -> list[AgentKey]:
        t = self.tables()
        if t.order is None:
            t.order = sorted(t.views)
        return t.order

    def keys_on_host(self, hostname: str) -> list[AgentKey]:
        """The keys of the views of ``hostname``, sorted (amended views included)."""
        t = self.tables()
        if t.by_host is None:
            t.by_host = {}
            for key in self._order():
                t.by_host.setdefault(t.views[key].hostname, []).append(key)
        return t.by_host.get(hostname, [])

    def keys_of(self, agent_id: str) -> list[AgentKey]:
        """The keys of ``agent_id`` (one per role it offers for; amended views included)."""
        order = self._order()
        out = []
        for i in range(bisect.bisect_left(order, (agent_id,)), len(order)):
            if order[i][0] != agent_id:
                break
            out.append(order[i])
        return out

    def __iter__(self) -> Iterator[AgentOffer]:
        """Every view, in (agent id, role) order."""
        views, changes = self.tables().views, self._changes
        if not changes:
            return map(views.__getitem__, self._order())
        current = (changes.get(key, views[key]) for key in self._order())
        return (view for view in current if view is not None)

    def windowed(self) -> list[AgentOffer]:
        """The views with a maintenance window, in (agent id, role) order: the cost of those
        alone (a replacement keeps its agent, so amended views are looked up by key)."""
        t = self.tables()
        keys = t.windowed | {key for key, view in self._changes.items() if view is not None and view.window}
        views = (self.get(*key) for key in sorted(keys))
        return [view for view in views if view is not None and view.window is not None]

    def __len__(self) -> int:
        removed = sum(1 for view in self._changes.values() if view is None)
        return len(self.tables().views) - removed


def _remove_key(lists: dict[str, list[AgentKey]], name: str, key: AgentKey) -> None:
    keys = lists[name]
    del keys[bisect.bisect_left(keys, key)]
    if not keys:
        del lists[name]


def as_index(offers: AgentIndex | Iterable[AgentOffer]) -> AgentIndex:
    """``offers`` indexed (an index as it is)."""
    return offers if isinstance(offers, AgentIndex) else AgentIndex(offers)
