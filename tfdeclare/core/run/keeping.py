"""Whether a job still needs a controller between commands (the background controller's rule).

A job needs one while something is left to do without anyone asking: it has not finished
(tasks to watch, a restart or backoff to honour, a deadline, a waiting gang to place, a
preempted job to resume), it is being deleted, tasks still run beside a finished chief, or its
``ttlSecondsAfterFinished`` has not run out yet. A job that cannot progress without a change
(Unschedulable, a launch refused) or is suspended with nothing running waits for the next
``apply``, which starts a controller again.
"""

from __future__ import annotations

from collections.abc import Iterable

from tfdeclare.core.enums import Phase, Reason
from tfdeclare.core.run.record import JobRecord


def needs_controller(record: JobRecord) -> bool:
    """Whether ``record`` has something left that only a running controller does."""
    alive = any(t.state.alive for t in record.tasks)
    if record.deleting or alive or record.moving_from is not None:
        return True
    if record.phase.terminal:
        return record.spec.ttl_after_finished_s is not None and record.cleaned_at is None
    if record.phase is Phase.SUSPENDED:
        return record.reason is Reason.PREEMPTED  # it runs again when the higher one is done
    return not record.reason.stalled


def any_needs_controller(records: Iterable[JobRecord]) -> bool:
    return any(needs_controller(r) for r in records)
