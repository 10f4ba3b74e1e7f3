"""Why a task ended: the job's own failure, or one of the platform's events. Pure.

A backend reports what it saw (``ObservedTask.cause``: a Mesos agent lost or drained, a
maintenance window, an operator, the controller's own restart); this module has the last word
on what counts as a platform event, so the rule is the same on every backend:

- a task that exited 0 ended by itself, whatever the backend says;
- a task still running, starting or being stopped by tfdeclare ended for no one yet;
- a task lost or gone, stopped, or failed with a platform cause is a platform event;
- anything else is the job's own failure (an exit code, a signal, a limit it hit).

Platform events restart the job (or the task alone, by its restart scope) at once, counted in
``platformRestarts`` against ``platformRestartLimit``, never in ``restarts`` nor against
``backoffLimit`` (``lifecycle``).
"""

from __future__ import annotations

from collections.abc import Sequence

from tfdeclare.core.enums import EndCause, TaskState
from tfdeclare.core.run.tasks import ObservedTask

# The states in which a platform cause is believed: the task was taken, not finished.
_TAKEN = frozenset({TaskState.LOST, TaskState.GONE, TaskState.STOPPED, TaskState.FAILED})

WORDS: dict[EndCause, str] = {
    EndCause.JOB: "its own failure",
    EndCause.AGENT_LOST: "its agent was lost",
    EndCause.AGENT_DRAINED: "its agent was drained",
    EndCause.MAINTENANCE: "its agent goes into maintenance",
    EndCause.KILLED_BY_OPERATOR: "an operator took it",
    EndCause.LAUNCH_DROPPED: "the cluster dropped its launch",
    EndCause.CONTROLLER_RESTART: "it ended while the controller was away",
    EndCause.ENGINE_RESTART: "its container ended with the Docker engine",
    EndCause.CLUSTER_UNDELIVERED: "it could not fetch its cluster from the framework",
}


def classify(state: TaskState, reported: EndCause) -> EndCause:
    """The cause that counts for a task in ``state`` the backend reported ``reported`` for."""
    if state in _TAKEN and reported.platform:
        return reported
    return EndCause.JOB


def cause_of(task: ObservedTask) -> EndCause:
    return classify(task.state, task.cause)


def split(failures: Sequence[ObservedTask]) -> tuple[list[ObservedTask], list[ObservedTask]]:
    """(the job's own failures, the tasks the platform took)."""
    own = [t for t in failures if not cause_of(t).platform]
    taken = [t for t in failures if cause_of(t).platform]
    return own, taken
