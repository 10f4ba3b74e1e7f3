"""Status-update faults that tests can arm: drop or delay agent updates to schedulers.

Owns the rules consulted for every agent-originated update the master is about to
forward. A dropped update is lost between master and scheduler (the master still
learns the state); the agent re-sends it on its retry timer, so a correct client sees it
again. A delayed update reaches the scheduler late, possibly after newer events.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass
class DropRule:
    remaining: int
    framework_id: str | None = None
    task_id: str | None = None
    state: str | None = None

    def matches(self, framework_id: str, status: dict[str, Any]) -> bool:
        if self.remaining <= 0:
            return False
        if self.framework_id is not None and self.framework_id != framework_id:
            return False
        if self.task_id is not None and self.task_id != status["task_id"]["value"]:
            return False
        return self.state is None or self.state == status["state"]


class UpdateFaults:
    def __init__(self) -> None:
        self.rules: list[DropRule] = []
        self.delay = 0.0
        self.dropped: list[dict[str, Any]] = []

    def drop(
        self,
        count: int = 1,
        *,
        framework_id: str | None = None,
        task_id: str | None = None,
        state: str | None = None,
    ) -> None:
        self.rules.append(DropRule(count, framework_id, task_id, state))

    def clear(self) -> None:
        self.rules.clear()
        self.delay = 0.0

    def on_update(self, framework_id: str, status: dict[str, Any]) -> float | None:
        """``None``: drop this update; otherwise the delay in seconds (0 = now)."""
        for rule in self.rules:
            if rule.matches(framework_id, status):
                rule.remaining -= 1
                self.dropped.append({"task_id": status["task_id"]["value"], "state": status["state"]})
                return None
        self.rules = [rule for rule in self.rules if rule.remaining > 0]
        return self.delay
