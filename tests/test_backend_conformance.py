"""Every backend passes the same conformance suite (tests/backend_conformance.py).

The ``mesos`` harness runs the suite against the master emulator (real processes, one agent
``cpus:4;mem:4096;ports:[31000-31999]``) over real HTTP, with short timings.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.backend_conformance import SUITE, Harness
from tests.mesos_emulator import Emulator
from tfdeclare.backends.local.backend import LocalBackend, LocalCapacity
from tfdeclare.backends.mesos.backend import MesosBackend
from tfdeclare.core.config import MesosConfig


@pytest.fixture
def local_harness(tmp_path: Path) -> Iterator[Harness]:
    capacity = LocalCapacity(cpus=4, mem_mib=4096, gpus=0, port_first=31000, port_last=31999)
    harness = Harness(lambda: LocalBackend(tmp_path / "state", capacity), tmp_path)
    yield harness
    for backend in harness.backends:
        backend.stop([t.task_id for t in backend.observe() if t.state.alive], 0.5)
    harness.close()


@pytest.mark.parametrize("check", SUITE, ids=lambda c: c.__name__.removeprefix("check_"))
def test_local_backend(local_harness: Harness, check: Callable[[Harness], None]) -> None:
    check(local_harness)


def mesos_test_config(master: str, **changes: object) -> MesosConfig:
    """Short timings for tests against the emulator."""
    values: dict[str, object] = {
        "master": master,
        "offer_hold_s": 1.0,
        "refuse_s": 1.0,
        "fencing_timeout_s": 5.0,
        "reconcile_interval_s": 30.0,
        "subscribe_timeout_s": 10.0,
        "place_wait_s": 2.0,
        "failover_timeout_s": 120.0,
        "framework_name": "tfdeclare-test",
        **changes,
    }
    return MesosConfig(**values)  # type: ignore[arg-type]


@pytest.fixture
def mesos_harness(tmp_path: Path) -> Iterator[Harness]:
    emulator = Emulator(
        agents=1,
        agent_resources="cpus:4;mem:4096;ports:[31000-31999]",
        heartbeat_interval=0.5,
        allocation_interval=0.05,
        update_retry_interval=0.2,
        kill_grace_period=1.0,
        sandbox_root=str(tmp_path / "sandboxes"),
    ).start()
    config = mesos_test_config(emulator.url)
    harness = Harness(lambda: MesosBackend(tmp_path / "state", config), tmp_path)
    try:
        yield harness
        assert emulator.check_invariants() == []
    finally:
        harness.close()
        emulator.stop()  # kills whatever still runs


@pytest.mark.parametrize("check", SUITE, ids=lambda c: c.__name__.removeprefix("check_"))
def test_mesos_backend(mesos_harness: Harness, check: Callable[[Harness], None]) -> None:
    check(mesos_harness)
