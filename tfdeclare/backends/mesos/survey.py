"""``plan``'s look at the Mesos cluster: what its agents have, asked once (issue 32).

This module owns asking the master for its agents at ``plan`` (``GET_AGENTS`` of the
operator API, ``readonly.ask``: the same master list, ZooKeeper, TLS and credentials as the
backend's client, without subscribing), within ``ASK_TIMEOUT_S`` in all, once per config in a
process (a plan checks every job with one answer), and turning the answer into warnings at
the spec's lines (``fit.fit_findings`` decides). ``plan`` works offline: a master that cannot
be asked is one warning saying so (``unasked_warning``, said once by the plugin's
``warnings``: it is about no spec's line), never an error and never a long wait, and then
nothing is said of fit. ``apply`` and the daemon never ask here: the backend's
placement judges the same on the same list and leaves such a job Pending as
``Unschedulable``.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from tfdeclare.backends.mesos.amounts import agent_capacity
from tfdeclare.backends.mesos.auth import credentials_for
from tfdeclare.backends.mesos.errors import MesosError
from tfdeclare.backends.mesos.fit import fit_findings
from tfdeclare.backends.mesos.placement_values import AgentOffer, PlacementOptions
from tfdeclare.backends.mesos.readonly import agents_of, ask
from tfdeclare.backends.mesos.tls import client_certificate_of
from tfdeclare.core.diagnostics import Severity

if TYPE_CHECKING:
    from tfdeclare.backends.mesos.config import MesosConfig
    from tfdeclare.core.diagnostics import Diagnostic
    from tfdeclare.core.spec.loader import LoadedJob, Locate

ASK_TIMEOUT_S = 2.0  # all of it: ZooKeeper, each master of the list, redirects
SEEN_S = 10.0  # how long one answer serves (a plan of many jobs asks once)


@dataclass(frozen=True, slots=True)
class Survey:
    """The master's answer: what each agent has for our roles, or why it could not be asked."""

    asked_at: float
    agents: tuple[AgentOffer, ...] = ()
    unasked: str | None = None  # why the master could not be asked


_seen: dict[MesosConfig, Survey] = {}
_lock = threading.Lock()


def agents_now(config: MesosConfig, timeout_s: float = ASK_TIMEOUT_S) -> tuple[AgentOffer, ...]:
    """What each of the cluster's agents has in all for ``mesos.roles`` (``GET_AGENTS``).
    Raises ``MesosError``."""
    body = ask(
        config.master,
        "GET_AGENTS",
        timeout_s=timeout_s,
        credentials=credentials_for(config),
        ca_file=config.ca_file,
        insecure_skip_tls_verify=not config.tls_verify,
        client_certificate=client_certificate_of(config),
    )
    listed = (agent_capacity(raw, config.roles) for raw in agents_of(body))
    return tuple(agent for agent in listed if agent is not None)


def survey(config: MesosConfig, clock: Callable[[], float] = time.monotonic) -> Survey:
    """The cluster's agents as last asked for this config (asked again after ``SEEN_S``)."""
    with _lock:  # one question at a time: a plan's jobs share the answer
        seen = _seen.get(config)
        now = clock()
        if seen is not None and now - seen.asked_at < SEEN_S:
            return seen
        try:
            seen = Survey(now, agents_now(config))
        except MesosError as err:
            seen = Survey(now, unasked=str(err) or type(err).__name__)
        _seen[config] = seen
        return seen


def plan_warnings(
    config: MesosConfig, job: LoadedJob, at: Locate, agents: Sequence[AgentOffer]
) -> list[Diagnostic]:
    """``plan``'s warnings for one job: where it can never fit ``agents`` (what each has)."""
    options = PlacementOptions(cpu_tasks_on_gpu_agents=config.cpu_tasks_on_gpu_agents)
    findings = fit_findings(job.name, job.spec, agents, options)
    return [_warning(at(finding.at, finding.message)) for finding in findings]


def unasked_warning(config: MesosConfig, why: str) -> str:
    """What ``plan`` says once when the master could not be asked for its agents."""
    return (
        f"could not ask the Mesos master ({config.master}) for its agents within {ASK_TIMEOUT_S:g} s "
        f"({why}): plan says nothing of whether jobs fit the cluster's largest agent; apply places "
        "them, and says Unschedulable for one that can never fit"
    )


def _warning(diagnostic: Diagnostic) -> Diagnostic:
    return replace(diagnostic, severity=Severity.WARNING)
