"""Which agents a task may use at all: attribute constraints and the GPU rules.

This module owns the eligibility half of placement, pure: ``matches`` (a job's placement
constraints against an agent's attributes), the GPU rules (tasks with GPUs on agents that have
GPUs only; tasks without stay off them unless ``cpu_tasks_on_gpu_agents``: ``allowed`` for a
view, ``gpu_rules_allow`` for the flag ``is_gpu_agent`` gives), and ``eligible_for`` (could any
slot of a gang ever use this agent).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from tfdeclare.backends.mesos.placement_values import AgentOffer, PlacementOptions
from tfdeclare.core.enums import ConstraintOperator
from tfdeclare.core.run.tasks import GangRequest
from tfdeclare.core.spec.keys import AttributeConstraint
from tfdeclare.core.spec.resources import Resources


def matches(attributes: Mapping[str, str], constraints: Sequence[AttributeConstraint]) -> bool:
    """Every constraint holds for these agent attributes."""
    for constraint in constraints:
        value = attributes.get(constraint.attribute)
        operator = constraint.operator
        if operator is ConstraintOperator.EXISTS:
            ok = value is not None
        elif operator is ConstraintOperator.DOES_NOT_EXIST:
            ok = value is None
        elif operator is ConstraintOperator.IN:
            ok = value is not None and value in constraint.values
        else:  # NOT_IN: an agent without the attribute is not in the list
            ok = value is None or value not in constraint.values
        if not ok:
            return False
    return True


def allowed(view: AgentOffer, resources: Resources, options: PlacementOptions) -> bool:
    """May a task with ``resources`` go to this agent at all (GPU rules only)?"""
    if resources.gpus > 0:
        return view.gpu_agent or view.gpus > 0
    return options.cpu_tasks_on_gpu_agents or not (view.gpu_agent or view.gpus > 0)


def eligible_for(request: GangRequest, view: AgentOffer, options: PlacementOptions) -> bool:
    """Could any slot of ``request`` ever use this agent (constraints and GPU rules)?"""
    if not matches(view.attributes, request.constraints):
        return False
    return any(allowed(view, slot.resources, options) for slot in request.slots)


def is_gpu_agent(view: AgentOffer) -> bool:
    """The agent has GPUs (offered now or not): the flag the GPU rules read."""
    return view.gpu_agent or view.gpus > 0


def gpu_rules_allow(gpu_agent: bool, resources: Resources, options: PlacementOptions) -> bool:
    """The GPU rules: GPU tasks on GPU agents only, others off them unless allowed."""
    if resources.gpus > 0:
        return gpu_agent
    return options.cpu_tasks_on_gpu_agents or not gpu_agent
