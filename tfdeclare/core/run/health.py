"""Health checks over time: from a task's probe results to its verdict, pure and clock-free.

A backend that probes a task itself (the local backend; on Mesos the executor does it) keeps
one ``ProbeState`` per running task and asks this module when the next probe is due, records
each result and reads the verdict. The rules are Kubernetes' probe rules, which Mesos' health
checker follows too: the first probe ``initialDelaySeconds`` after the task started, then one
every ``periodSeconds`` (never two at once); a probe that has not answered within
``timeoutSeconds`` is a failure (``expire``: a stuck probe never hides a hung task);
``failureThreshold`` failures in a row make the task unhealthy, for good (the task is then
stopped and restarted as a failure, ``lifecycle``); a success starts the count again.

``progress_failure`` is the progress check's judgement: a file not written for longer than
``stalledSeconds`` (the backend only reads its modification time).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from tfdeclare.core.spec.health import HealthCheck

EXPIRY_SLACK_S = 1.0  # past the probe's own timeout before a probe that did not answer counts as failed


@dataclass(frozen=True, slots=True)
class ProbeState:
    """One running task's checks so far."""

    next_at: float  # the next probe is due then
    failures: int = 0  # in a row
    probes: int = 0
    in_flight_since: float | None = None
    last_failure: str = ""
    unhealthy: bool = False


def begin(check: HealthCheck, started_at: float) -> ProbeState:
    return ProbeState(next_at=started_at + check.initial_delay_s)


def due(state: ProbeState, now: float) -> bool:
    """A probe should start now."""
    return not state.unhealthy and state.in_flight_since is None and now >= state.next_at


def started(state: ProbeState, now: float) -> ProbeState:
    return replace(state, in_flight_since=now)


def finished(state: ProbeState, check: HealthCheck, failure: str | None, now: float) -> ProbeState:
    """A probe's result: ``failure`` is None for a success, else why it failed."""
    if state.unhealthy:
        return state
    began = state.in_flight_since if state.in_flight_since is not None else now
    failures = 0 if failure is None else state.failures + 1
    return ProbeState(
        next_at=max(now, began + check.period_s),
        failures=failures,
        probes=state.probes + 1,
        last_failure=failure if failure is not None else state.last_failure,
        unhealthy=failures >= check.failure_threshold,
    )


def expire(state: ProbeState, check: HealthCheck, now: float) -> ProbeState:
    """A probe in flight past its timeout (and a little slack) counts as failed."""
    since = state.in_flight_since
    if since is None or now < since + check.timeout_s + EXPIRY_SLACK_S:
        return state
    return finished(state, check, f"no answer within {check.timeout_s:g} s", now)


def wake_at(state: ProbeState, check: HealthCheck) -> float | None:
    """When this state next needs a look (None: never again)."""
    if state.unhealthy:
        return None
    if state.in_flight_since is not None:
        return state.in_flight_since + check.timeout_s + EXPIRY_SLACK_S
    return state.next_at


def verdict(state: ProbeState, check: HealthCheck) -> str | None:
    """None while healthy (or not yet judged); else the message that says why not."""
    if not state.unhealthy:
        return None
    return (
        f"unhealthy: {check.describe()} failed {state.failures} time(s) in a row "
        f"(failureThreshold {check.failure_threshold}); last: {state.last_failure}"
    )


def progress_failure(modified_at: float | None, now: float, stalled_s: float, what: str) -> str | None:
    """The progress check: None when ``what`` was written within ``stalled_s`` of ``now``."""
    if modified_at is None:
        return f"{what} does not exist"
    idle = now - modified_at
    if idle > stalled_s:
        return f"{what} not written for {idle:.0f} s (stalledSeconds {stalled_s:g})"
    return None
