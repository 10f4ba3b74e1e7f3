"""The Mesos backend as the real-Mesos tests drive it (tests/real_mesos.py runs the cluster):
the harnesses a test made, closed with their backends when it ends (``backends``), and one
task placed, launched and seen running (``run_one``).

What a test checks is what the real master says; these only get it there.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence

import pytest

from tests.backend_conformance import Harness, gang, launches, place_soon, wait_for
from tfdeclare.backends.base import Backend
from tfdeclare.core.enums import TaskState
from tfdeclare.core.run.tasks import TaskLaunch
from tfdeclare.core.spec.resources import Resources


@pytest.fixture
def backends() -> Iterator[list[Harness]]:
    """Harnesses made by a test; closed (and their backends with them) when it ends."""
    made: list[Harness] = []
    yield made
    for harness in made:
        harness.close()


def run_one(
    harness: Harness, backend: Backend, job: str, argv: Sequence[str], resources: Resources
) -> TaskLaunch:
    """One task of ``job`` (a gang of one) launched by ``backend`` (one of ``harness``'s), once
    the backend says it runs (placement and launch wait as long as a loaded machine and a real
    master need)."""
    placement = place_soon(backend, gang(job, 1, resources), timeout=30)
    [task] = launches(harness, placement, argv, resources=resources)
    backend.launch(placement, [task])
    wait_for(backend, lambda ts: ts[task.task_id].state is TaskState.RUNNING, timeout=60)
    return task


def stop_one(backend: Backend, task: TaskLaunch) -> None:
    """Stop the task (a 1 s grace) and wait until the backend says it ended."""
    backend.stop([task.task_id], 1.0)
    wait_for(backend, lambda ts: ts[task.task_id].state.ended, timeout=60)
