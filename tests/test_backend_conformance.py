"""Every registered backend passes the same conformance suite (tests/backend_conformance.py).

``HARNESSES`` holds one harness per registry name (a new backend adds one); each builds its
backend through the registry, as the CLI does. The ``mesos`` harness runs the suite against
the master emulator (real processes, one agent ``cpus:4;mem:4096;ports:[31000-31999]``) over
real HTTP, with short timings. The in-memory fake of ``tests/fake_backend.py`` (which the
controller and daemon tests use; not a registered backend) runs the checks that need no real
process, on its injected clock.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from pathlib import Path
from typing import Any

import pytest

from tests.backend_conformance import SUITE, WITHOUT_PROCESSES, Harness
from tests.conftest import worker_ports
from tests.fake_backend import Clock, FakeBackend, FakeCluster
from tests.mesos_fixtures import mesos_test_config, start_emulator
from tfdeclare.backends import registry
from tfdeclare.backends.local.config import LocalConfig, LocalRuntime
from tfdeclare.backends.local.docker_runtime import owner_of
from tfdeclare.core.enums import VolumeMode
from tfdeclare.core.spec.keys import Volume


@contextmanager
def local_harness(tmp_path: Path) -> Iterator[Harness]:
    # The xdist worker's own ports (tests/conftest.py worker_ports): a check that a stopped slot
    # gets its port back fails when a test on another worker took the freed port in between,
    # as another controller of the machine rightly may.
    first, last = worker_ports()
    config = LocalConfig(cpus=4, mem_mib=4096, gpus=0, port_first=first, port_last=last)
    harness = Harness(lambda: registry.plugin("local").build(tmp_path / "state", config), tmp_path)
    try:
        yield harness
    finally:
        _stop_all(harness)


def _stop_all(harness: Harness) -> None:
    for backend in harness.backends:
        backend.stop([t.task_id for t in backend.observe() if t.state.alive], 0.5)
    harness.close()


@contextmanager
def docker_harness(tmp_path: Path, client: Any, image: str) -> Iterator[Harness]:
    """The local backend with ``local.runtime: docker``: every task a container of the test
    base image (its own Python), the test folder mounted read-write at its own path."""
    first, last = worker_ports()
    config = LocalConfig(
        cpus=4, mem_mib=4096, gpus=0, port_first=first, port_last=last, runtime=LocalRuntime.DOCKER
    )

    def kill(task_id: str, pid_in_container: int) -> None:
        del pid_in_container  # the container's own numbering: SIGKILL the container instead
        (container,) = client.containers.list(
            ignore_removed=True, filters={"label": f"tfdeclare.task-id={task_id}"}
        )
        container.kill("SIGKILL")

    harness = Harness(
        lambda: registry.plugin("local").build(tmp_path / "state", config),
        tmp_path,
        image=image,
        python="python3",
        volumes=(Volume(str(tmp_path), str(tmp_path), VolumeMode.RW),),
        kill_from_outside=kill,
    )
    try:
        yield harness
    finally:
        _stop_all(harness)
        owner = owner_of(tmp_path / "state" / "local")
        for container in client.containers.list(
            ignore_removed=True, all=True, filters={"label": f"tfdeclare.owner={owner}"}
        ):
            container.remove(force=True)


@contextmanager
def mesos_harness(tmp_path: Path) -> Iterator[Harness]:
    emulator = start_emulator(tmp_path)  # one agent: cpus:4;mem:4096;ports:[31000-31999]
    # The emulator's agent runs tasks on this machine: its files are shared, as the suite's
    # working-directory check needs.
    config = mesos_test_config(emulator.url, shared_filesystem=True)
    harness = Harness(lambda: registry.plugin("mesos").build(tmp_path / "state", config), tmp_path)
    try:
        yield harness
        assert emulator.check_invariants() == []
    finally:
        harness.close()
        emulator.stop()  # kills whatever still runs


HARNESSES: dict[str, Callable[[Path], AbstractContextManager[Harness]]] = {
    "local": local_harness,
    "mesos": mesos_harness,
}


def test_every_registered_backend_has_a_harness() -> None:
    assert sorted(HARNESSES) == sorted(registry.names())


@pytest.fixture(params=registry.names())
def harness(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Harness]:
    with HARNESSES[request.param](tmp_path) as harness:
        yield harness


@pytest.mark.slow  # real processes (and the emulator)
@pytest.mark.parametrize("check", SUITE, ids=lambda c: c.__name__.removeprefix("check_"))
def test_backend(harness: Harness, check: Callable[[Harness], None]) -> None:
    check(harness)


@pytest.mark.slow
@pytest.mark.docker
@pytest.mark.parametrize("check", SUITE, ids=lambda c: c.__name__.removeprefix("check_"))
def test_local_docker_runtime(
    tmp_path: Path, docker_client: Any, base_image: str, check: Callable[[Harness], None]
) -> None:
    """The same suite against the local backend's Docker runtime (containers of the base image)."""
    with docker_harness(tmp_path, docker_client, base_image) as harness:
        check(harness)


@pytest.mark.parametrize("check", WITHOUT_PROCESSES, ids=lambda c: c.__name__.removeprefix("check_"))
def test_fake_backend(tmp_path: Path, check: Callable[[Harness], None]) -> None:
    cluster, clock = FakeCluster(), Clock()
    harness = Harness(lambda: FakeBackend(cluster, clock), tmp_path, clock)
    check(harness)
    harness.close()
