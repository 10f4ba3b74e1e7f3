"""The backend conformance suite (tests/backend_conformance.py) against a real Apache Mesos
1.11.0 master and agent (issue 21), each check on a fresh cluster of one agent with the
suite's capacity (``cpus:4;mem:4096``), tasks run by the real agent through
``mesos-containerizer launch`` and the command executor of tools/realmesos."""

from __future__ import annotations

import os
import signal
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.backend_conformance import SUITE, Harness
from tests.mesos_fixtures import mesos_test_config
from tfdeclare.backends import registry

pytestmark = [pytest.mark.real_mesos, pytest.mark.slow]


@pytest.fixture
def harness(tmp_path: Path, real_mesos: Callable[..., Any]) -> Iterator[Harness]:
    mesos = real_mesos(agents=1, resources="cpus:4;mem:4096;disk:4096;ports:[31000-31999]")
    config = mesos_test_config(mesos.url, shared_filesystem=True)

    def kill(task_id: str, pid: int) -> None:
        del task_id
        os.kill(mesos.host_pid(pid), signal.SIGKILL)

    made = Harness(
        lambda: registry.plugin("mesos").build(tmp_path / "state", config),
        tmp_path,
        kill_from_outside=kill,
    )
    try:
        yield made
    finally:
        made.close()


@pytest.mark.parametrize("check", SUITE, ids=lambda c: c.__name__.removeprefix("check_"))
def test_conformance_on_the_real_master(harness: Harness, check: Callable[[Harness], None]) -> None:
    check(harness)
