"""Every backend passes the same conformance suite (tests/backend_conformance.py).

The ``mesos`` harness runs the suite against the master emulator (real processes, one agent
``cpus:4;mem:4096;ports:[31000-31999]``) over real HTTP, with short timings. The in-memory
fake of ``tests/fake_backend.py`` (which the controller and daemon tests use) runs the checks
that need no real process, on its injected clock.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.backend_conformance import SUITE, WITHOUT_PROCESSES, Harness
from tests.fake_backend import Clock, FakeBackend, FakeCluster
from tests.mesos_fixtures import mesos_test_config, start_emulator
from tfdeclare.backends.local.backend import LocalBackend, LocalCapacity
from tfdeclare.backends.mesos.backend import MesosBackend


@pytest.fixture
def local_harness(tmp_path: Path) -> Iterator[Harness]:
    capacity = LocalCapacity(cpus=4, mem_mib=4096, gpus=0, port_first=31000, port_last=31999)
    harness = Harness(lambda: LocalBackend(tmp_path / "state", capacity), tmp_path)
    yield harness
    for backend in harness.backends:
        backend.stop([t.task_id for t in backend.observe() if t.state.alive], 0.5)
    harness.close()


@pytest.mark.slow  # real processes
@pytest.mark.parametrize("check", SUITE, ids=lambda c: c.__name__.removeprefix("check_"))
def test_local_backend(local_harness: Harness, check: Callable[[Harness], None]) -> None:
    check(local_harness)


@pytest.fixture
def mesos_harness(tmp_path: Path) -> Iterator[Harness]:
    emulator = start_emulator(tmp_path)  # one agent: cpus:4;mem:4096;ports:[31000-31999]
    # The emulator's agent runs tasks on this machine: its files are shared, as the suite's
    # working-directory check needs.
    config = mesos_test_config(emulator.url, shared_filesystem=True)
    harness = Harness(lambda: MesosBackend(tmp_path / "state", config), tmp_path)
    try:
        yield harness
        assert emulator.check_invariants() == []
    finally:
        harness.close()
        emulator.stop()  # kills whatever still runs


@pytest.mark.slow  # real processes behind the master emulator
@pytest.mark.parametrize("check", SUITE, ids=lambda c: c.__name__.removeprefix("check_"))
def test_mesos_backend(mesos_harness: Harness, check: Callable[[Harness], None]) -> None:
    check(mesos_harness)


@pytest.mark.parametrize("check", WITHOUT_PROCESSES, ids=lambda c: c.__name__.removeprefix("check_"))
def test_fake_backend(tmp_path: Path, check: Callable[[Harness], None]) -> None:
    cluster, clock = FakeCluster(), Clock()
    harness = Harness(lambda: FakeBackend(cluster, clock), tmp_path, clock)
    check(harness)
    harness.close()
