"""Another framework on the same Mesos master, for shared-cluster tests: a small real scheduler
over HTTP (tfdeclare's client, nothing of the backend) that takes part of an agent for a
sleeping task, keeps it, and gives it back when told.

The stream thread only records offers and updates; the test's thread makes the calls
(``hold``, ``release``, ``close``), waiting on conditions, never on sleeps.
"""

from __future__ import annotations

import getpass
import sys
import threading
import time
from collections.abc import Sequence
from typing import Any

from tests.mesos_emulator.status import TERMINAL_STATES
from tfdeclare.backends.mesos.client import ClientConfig, SchedulerClient
from tfdeclare.backends.mesos.events import BaseHandler, Offer, TaskStatus
from tfdeclare.backends.mesos.info import FrameworkInfo


class OtherFramework(BaseHandler):
    """``hold(cpus, mem)`` launches one sleeping task of that size on the first offer big
    enough and then SUPPRESSes (it wants nothing more); ``release()`` kills it."""

    def __init__(self, master: str, name: str = "other-framework", role: str = "*") -> None:
        self._changed = threading.Condition()
        self._offers: list[Offer] = []
        self._states: dict[str, str] = {}
        self._counter = 0
        self.role = role
        info = FrameworkInfo(user=getpass.getuser(), name=name, roles=(role,), failover_timeout=0.0)
        self.client = SchedulerClient(
            ClientConfig(master=master, framework=info, subscribe_timeout=10.0), self
        )
        self.client.start()
        self.client.wait_subscribed(10.0)

    # ---- the stream thread ------------------------------------------------------------------

    def offers(self, offers: Sequence[Offer]) -> None:
        with self._changed:
            self._offers.extend(offers)
            self._changed.notify_all()

    def rescind(self, offer_id: str) -> None:
        with self._changed:
            self._offers = [o for o in self._offers if o.id != offer_id]

    def update(self, status: TaskStatus) -> None:
        with self._changed:
            self._states[status.task_id] = status.state
            self._changed.notify_all()

    # ---- the test's thread -------------------------------------------------------------------

    def _wait(self, ready: Any, timeout: float, what: str) -> Any:
        deadline = time.monotonic() + timeout
        with self._changed:
            while not (value := ready()):
                left = deadline - time.monotonic()
                if left <= 0:
                    raise AssertionError(f"{what} within {timeout} s")
                self._changed.wait(left)
            return value

    def hold(self, cpus: float, mem: float = 128.0, timeout: float = 15.0) -> str:
        """Launch a task holding ``cpus`` and ``mem`` on the first offer that has them; decline
        the others (no filter); SUPPRESS; return the task id once it runs."""

        def big_enough() -> Offer | None:
            for offer in self._offers:
                if _scalar(offer, "cpus") >= cpus and _scalar(offer, "mem") >= mem:
                    return offer
            return None

        offer: Offer = self._wait(big_enough, timeout, f"no offer of {cpus} cpus came")
        with self._changed:
            others = [o.id for o in self._offers if o.id != offer.id]
            self._offers.clear()
        self._counter += 1
        task_id = f"hold-{self._counter}"
        allocation = {"allocation_info": {"role": self.role}}
        task = {
            "name": task_id,
            "task_id": {"value": task_id},
            "agent_id": {"value": offer.agent_id},
            "resources": [
                {"name": "cpus", "type": "SCALAR", "scalar": {"value": cpus}, **allocation},
                {"name": "mem", "type": "SCALAR", "scalar": {"value": mem}, **allocation},
            ],
            "command": {
                "shell": False,
                "value": sys.executable,
                "arguments": [sys.executable, "-c", "import time; time.sleep(600)"],
            },
        }
        self.client.suppress([self.role])
        self.client.launch([offer.id], [task], refuse_seconds=0.0)
        if others:
            self.client.decline(others, 0.0)
        self._wait(lambda: self._states.get(task_id) == "TASK_RUNNING", timeout, f"{task_id} did not run")
        return task_id

    def next_offer(self, timeout: float = 15.0) -> Offer:
        """The next offer (the others held are declined without a filter)."""
        offer: Offer = self._wait(lambda: self._offers[0] if self._offers else None, timeout, "no offer came")
        with self._changed:
            others = [o.id for o in self._offers if o.id != offer.id]
            self._offers.clear()
        if others:
            self.client.decline(others, 0.0)
        return offer

    def release(self, task_id: str, timeout: float = 15.0) -> None:
        """Kill the task and wait until the master says it ended (its resources are free)."""
        self.client.kill(task_id)
        self._wait(lambda: self._states.get(task_id) in TERMINAL_STATES, timeout, f"{task_id} did not end")

    def close(self) -> None:
        self.client.teardown()


def _scalar(offer: Offer, name: str) -> float:
    return sum(
        float((r.get("scalar") or {}).get("value", 0.0))
        for r in offer.resources
        if r.get("name") == name and r.get("type") == "SCALAR"
    )
