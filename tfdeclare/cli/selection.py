"""``-l/--selector`` in the commands (``status``, ``logs``, ``delete``, ``plan``): the selector
read from the arguments (a bad one is a ``UserError``, exit 1) and the jobs it picks.

A job's labels are its ``metadata.labels``: for a job that runs, those of the spec applied (its
record in the state folder, the authority; status files do not carry them); for ``plan``, those
the files say, or for a job the files no longer have (a prune), those applied.
"""

from __future__ import annotations

import argparse
import dataclasses
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from tfdeclare.cli.common import UserError
from tfdeclare.core.spec.selector import Selector, SelectorError, parse
from tfdeclare.shell.store import StateError, StateStore

if TYPE_CHECKING:  # `status` imports this module, and no planner
    from tfdeclare.core.plan.planner import Plan


def selector_of(args: argparse.Namespace) -> Selector:
    """The ``-l`` of the command line (empty: every job)."""
    try:
        return parse(getattr(args, "selector", None) or [])
    except SelectorError as err:
        raise UserError(str(err)) from None


def selected_names(store: StateStore, selector: Selector) -> list[str]:
    """The jobs of the state folder whose applied labels match, in name order."""
    try:
        records = store.records()
    except StateError as err:
        raise UserError(str(err)) from err
    return sorted(name for name, record in records.items() if selector.matches(record.spec.labels))


def _labels(canonical: Mapping[str, Any] | None) -> dict[str, str]:
    metadata = (canonical or {}).get("metadata") or {}
    labels = metadata.get("labels") or {}
    return {str(k): str(v) for k, v in labels.items()} if isinstance(labels, Mapping) else {}


def selected_plan(result: Plan, selector: Selector) -> Plan:
    """The plan with only the jobs that match: by the labels the files give a job, or for one
    they do not have (pruned), by those applied. Narrowing only: never a job more."""
    if not selector:
        return result

    def matches(name: str) -> bool:
        if name in result.desired:
            return selector.matches(_labels(result.desired[name]))
        observed = result.observed.get(name)
        return observed is not None and selector.matches(_labels(observed.canonical))

    return dataclasses.replace(result, jobs=tuple(job for job in result.jobs if matches(job.name)))
