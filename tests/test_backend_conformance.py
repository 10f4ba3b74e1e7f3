"""Every backend passes the same conformance suite (tests/backend_conformance.py).

The ``mesos`` harness runs the suite against the master emulator (real processes, one agent
``cpus:4;mem:4096;ports:[31000-31999]``) over real HTTP, with short timings.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.backend_conformance import SUITE, Harness
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


@pytest.mark.parametrize("check", SUITE, ids=lambda c: c.__name__.removeprefix("check_"))
def test_local_backend(local_harness: Harness, check: Callable[[Harness], None]) -> None:
    check(local_harness)


@pytest.fixture
def mesos_harness(tmp_path: Path) -> Iterator[Harness]:
    emulator = start_emulator(tmp_path)  # one agent: cpus:4;mem:4096;ports:[31000-31999]
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
