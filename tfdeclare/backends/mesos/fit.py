"""``plan``'s verdict on whether a job can ever fit the Mesos cluster's agents (issue 32): pure.

Apply judges a gang against what each agent *has* in all (the operator API's ``GET_AGENTS``,
``amounts.agent_capacity``) with ``placement_capacity.never_fits``, and leaves a job that can never be
placed Pending as ``Unschedulable``. ``plan`` asks the master for the same list
(``survey.py``) and says the same thing beforehand, through this function, so plan warns
exactly when apply would refuse: the verdict is ``never_fits`` itself. Only *where* it is
said is decided here: a task runs on one agent, so a role (or the TensorBoard task) whose one
task no agent it may use could hold is named at its ``resources`` field, with the largest of
those agents; a job whose placement constraints no agent matches, at ``placement.constraints``;
what only the tasks together cannot fit (more than all agents have, too few ports), at the
spec's line.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from tfdeclare.backends.mesos.placement_capacity import agent_holds, largest_agent, never_fits
from tfdeclare.backends.mesos.placement_rules import allowed, matches
from tfdeclare.backends.mesos.placement_values import AgentOffer, PlacementOptions, describe_agent
from tfdeclare.core.diagnostics import JsonPath
from tfdeclare.core.run.tasks import GangRequest, SlotRequest
from tfdeclare.core.spec.model import JobSpec, TaskRun

UNSCHEDULABLE = "apply will leave the job Pending as Unschedulable"


@dataclass(frozen=True, slots=True)
class FitFinding:
    """One thing ``plan`` warns of, at a field of the spec."""

    at: JsonPath
    message: str


def gang_of(name: str, spec: JobSpec) -> GangRequest:
    """Every task of the job as apply asks for it (its first attempt: no addresses yet)."""
    slots = tuple(SlotRequest(key, spec.resources_for(key.role)) for key in spec.task_keys())
    return GangRequest(name, 0, slots, spec.strategy, spec.constraints, spec.priority)


def fit_findings(
    name: str, spec: JobSpec, agents: Sequence[AgentOffer], options: PlacementOptions
) -> list[FitFinding]:
    """What ``plan`` says of a job that can never fit ``agents`` (what each has in all for
    our roles); nothing when it might fit, or when no agent is known."""
    why = never_fits(gang_of(name, spec), agents, options)
    if why is None:
        return []
    matching = [a for a in agents if matches(a.attributes, spec.constraints)]
    text = f"this job can never fit the Mesos cluster's {len(agents)} agent(s): {why}; {UNSCHEDULABLE}"
    if not matching:
        return [FitFinding(("spec", "placement", "constraints"), text)]
    per_task = [f for run in spec.runs() if (f := _task_finding(run, matching, options)) is not None]
    return per_task or [FitFinding(("spec",), text)]


def _task_finding(run: TaskRun, agents: Sequence[AgentOffer], options: PlacementOptions) -> FitFinding | None:
    """A role's (or TensorBoard's) one task that no agent it may use could ever hold."""
    need = run.resources
    task = f"a {run.role.value} task"
    hosts = [a for a in agents if allowed(a, need, options)]
    if not hosts:
        what = (
            "an agent with GPUs, and no agent of the Mesos cluster has any"
            if need.gpus
            else "an agent without GPUs (mesos.cpuTasksOnGpuAgents is off), and every agent of the "
            "Mesos cluster has GPUs"
        )
        return FitFinding(run.resources_at, f"{task} needs {what}: {UNSCHEDULABLE}")
    if any(agent_holds(a, need) for a in hosts):
        return None
    largest = largest_agent(hosts)
    ports = "" if largest.port_count else " and no ports"
    return FitFinding(
        run.resources_at,
        f"{task} needs {need.describe()}, and a task runs on one agent: the largest agent of the "
        f"Mesos cluster it may use ({largest.hostname or largest.agent_id}, of {len(hosts)}) has "
        f"{describe_agent(largest)}{ports} in all; {UNSCHEDULABLE} (lower the resources, or add "
        "a larger agent)",
    )
