"""Every backend passes the same conformance suite (tests/backend_conformance.py)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.backend_conformance import SUITE, Harness
from tfdeclare.backends.local.backend import LocalBackend, LocalCapacity


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
