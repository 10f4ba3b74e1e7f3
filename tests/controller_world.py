"""A controller in-process over a temp folder: real spec files, planner, job records and status
files, the in-memory fake backend and an injected clock. Shared by the controller and daemon
loop tests; nothing here starts a process or sleeps."""

from __future__ import annotations

import json
import textwrap
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from tests.fake_backend import Clock, FakeBackend, FakeCluster
from tfdeclare.controller import Controller
from tfdeclare.controller.reconciler import PassResult
from tfdeclare.core.enums import Role
from tfdeclare.core.plan.planner import Plan, PlanOptions, plan
from tfdeclare.core.run.lifecycle import Backoff
from tfdeclare.core.run.record import JobRecord
from tfdeclare.core.run.tasks import ObservedTask, TaskKey
from tfdeclare.daemon.service import Daemon, DaemonOptions, Shown, Source
from tfdeclare.shell.sources import SpecFiles
from tfdeclare.shell.statuswriter import StatusWriter
from tfdeclare.shell.store import StateStore

BACKOFF = Backoff(initial_s=10.0, max_s=60.0)


def job_text(
    name: str, replicas: str = "worker: {count: 2, resources: {cpus: 0.5, mem: 64}}", extra: str = ""
) -> str:
    return textwrap.dedent(
        f"""\
        apiVersion: tfdeclare/v1
        kind: TFJob
        metadata: {{name: {name}}}
        spec:
          command: [python, train.py]
          replicas: {{{replicas}}}
        """
    ) + "".join(f"  {line}\n" for line in extra.splitlines())


class PassCountingController(Controller):
    """The real controller, which also tells waiting tests that a pass has ended."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.passes = 0
        self.passed = threading.Condition()

    def reconcile(self, *, through_outage: bool = False) -> PassResult:
        result = super().reconcile(through_outage=through_outage)
        with self.passed:
            self.passes += 1
            self.passed.notify_all()
        return result

    def wait_for_pass(
        self, after: int, check: Callable[[], bool] = lambda: True, timeout: float = 10.0
    ) -> int:
        """Until a pass numbered above ``after`` has ended with ``check`` true; returns its number."""
        deadline = time.monotonic() + timeout
        with self.passed:
            while True:
                if self.passes > after and check():
                    return self.passes
                remaining = deadline - time.monotonic()
                assert remaining > 0, f"no pass after {after} with the expected outcome"
                self.passed.wait(remaining)


class World:
    def __init__(
        self,
        root: Path,
        cluster: FakeCluster | None = None,
        clock: Clock | None = None,
        *,
        status_dir: Path | None = None,
    ) -> None:
        self.root = root
        self.specs = root / "specs"
        self.specs.mkdir(parents=True, exist_ok=True)
        self.clock = clock or Clock()
        self.backend = FakeBackend(cluster or FakeCluster(), self.clock)
        self.store = StateStore(root / "state", exclusive=True)
        self.status_dir = status_dir or root / "status"
        self.statuses = StatusWriter(self.status_dir)
        self.controller = PassCountingController(
            self.store, self.backend, self.statuses, backoff=BACKOFF, clock=self.clock, base_dir=root
        )
        self.files = SpecFiles([self.specs], exclude=(root / "state", self.status_dir), base=root)

    # ---- the user's side --------------------------------------------------------------------

    def write(self, name: str, text: str) -> Path:
        path = self.specs / f"{name}.yaml"
        path.write_text(text)
        return path

    def plan(self, *, prune: bool = False) -> Plan:
        return plan(self.files.load(), self.store.observed(), PlanOptions(prune=prune))

    def apply(self, *, prune: bool = False) -> list[str]:
        return self.controller.apply(self.plan(prune=prune))

    def reconcile(self) -> PassResult:
        return self.controller.reconcile()

    # ---- what there is to see ---------------------------------------------------------------

    def record(self, name: str) -> JobRecord:
        record = self.store.load(name)
        assert record is not None, f"no record of {name}"
        return record

    def status(self, name: str) -> dict[str, Any] | None:
        return self.statuses.read(name)

    def tasks(self, job: str, *, alive: bool = True) -> dict[str, ObservedTask]:
        """The job's tasks by slot name ("worker-0"), alive ones only unless told."""
        return {
            t.key.name: t for t in self.backend.observe() if t.job == job and (t.state.alive or not alive)
        }

    def task(self, job: str, role: Role, index: int = 0) -> ObservedTask:
        return self.tasks(job)[TaskKey(role, index).name]

    def tf_config(self, task_id: str) -> dict[str, Any]:
        env = dict(self.backend.cluster.tasks[task_id].launch.env)
        config: dict[str, Any] = json.loads(env["TF_CONFIG"])
        return config

    def settle(self, passes: int = 3) -> PassResult:
        """A few passes at the same instant (stops take one pass to show as ended)."""
        result = self.reconcile()
        for _ in range(passes - 1):
            result = self.reconcile()
        return result


class WatchedDaemon(Daemon):
    """The real daemon; a test can wait for what a pass published (``Daemon.shown``), which
    comes after the controller's part of that pass."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.published = threading.Condition()

    def _pass(self, changes: frozenset[str] | None = None) -> tuple[float | None, bool]:
        done = super()._pass(changes)
        with self.published:
            self.published.notify_all()
        return done

    def wait_shown(self, check: Callable[[Shown], bool], timeout: float = 10.0) -> Shown:
        """The snapshot a pass published once ``check`` holds of it."""
        with self.published:
            assert self.published.wait_for(lambda: check(self.shown), timeout), self.shown
        return self.shown


@contextmanager
def daemon_running(world: World, source: Source, options: DaemonOptions) -> Iterator[WatchedDaemon]:
    """The real daemon loop over ``world``'s controller and files, in a thread; stopped (and
    its source closed) after."""
    daemon = WatchedDaemon(
        source, world.controller, world.files, world.status_dir, options, clock=world.clock
    )
    thread = threading.Thread(target=daemon.run, name="daemon-under-test", daemon=True)
    thread.start()
    try:
        yield daemon
    finally:
        daemon.stop()
        thread.join(timeout=10)
        source.close()
