"""Shared test helpers: running the real ``tfdeclare`` command and writing spec files; and the
rule that a test served by the Mesos master emulator or the scripted HTTP server is ``slow``
(real sockets and real timers: heartbeats, offer timeouts), so ``make unit`` leaves it out."""

from __future__ import annotations

import functools
import importlib.util
import os
import signal
import subprocess
import sys
import textwrap
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.components import missing

REPO = Path(__file__).resolve().parents[1]
SETTINGS_ENV = ("TFDECLARE_CONFIG", "TFDECLARE_STATE_DIR", "TFDECLARE_STATUS_DIR")

# A command prefix that runs a process as a user whom a file's mode can lock out: under root,
# without the capabilities that override file modes (``chmod 000`` then means what it says).
ORDINARY_USER = ["setpriv", "--bounding-set=-dac_override,-dac_read_search"] if os.geteuid() == 0 else []


def cli(
    *args: str, cwd: Path, timeout: float = 120, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """Run ``python -m tfdeclare ARGS`` as a real process (the environment variables of the
    common options only as ``env`` gives them, whatever the shell running the tests has)."""
    inherited = {k: v for k, v in os.environ.items() if k not in SETTINGS_ENV}
    full_env = {**inherited, "PYTHONUNBUFFERED": "1", **(env or {})}
    return subprocess.run(
        [sys.executable, "-m", "tfdeclare", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=timeout,
        env=full_env,
        check=False,
    )


def job_yaml(
    name: str, *, workers: int = 1, command: str = "[sleep, '30']", extra: str = "", roles: str | None = None
) -> str:
    replicas = roles or f"worker: {{count: {workers}, resources: {{cpus: 0.1, mem: 64}}}}"
    return (
        textwrap.dedent(
            f"""\
        apiVersion: tfdeclare/v1
        kind: TFJob
        metadata:
          name: {name}
        spec:
          command: {command}
          replicas:
            {replicas}
        """
        )
        + extra
    )


def processes_mentioning(folder: Path) -> list[int]:
    """The pids of the processes (this one aside) whose command line mentions ``folder``."""
    found = []
    marker = str(folder).encode()
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == os.getpid():
            continue
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as handle:
                cmdline = handle.read()
        except OSError:
            continue
        if marker in cmdline:
            found.append(int(entry))
    return found


def kill_leftovers(folder: Path) -> list[int]:
    """SIGKILL every process whose command line mentions ``folder`` (and its group): a failed
    test must not leave task processes behind. Returns the pids it found."""
    found = processes_mentioning(folder)
    for pid in found:
        for kill in (lambda p: os.killpg(p, signal.SIGKILL), lambda p: os.kill(p, signal.SIGKILL)):
            try:
                kill(pid)
            except (ProcessLookupError, PermissionError):
                pass
    return found


def worker_ports(size: int = 1000) -> tuple[int, int]:
    """The first and last port of this xdist worker's own slice of 10000-19999, for tests that
    give the local backend a port range: below the default range (20000-29999, which tests
    without a config share), the Mesos agents' ports (31000 and up) and the kernel's ephemeral
    range (32768 and up, any outgoing connection may take one). The tests of one worker run one
    after another, so a test whose job restarts on the ports it had (or a slot that gets its
    port back) never loses them to a test on another worker. ``size`` ports from its start."""
    worker = os.environ.get("PYTEST_XDIST_WORKER", "gw0")
    index = int(worker[2:]) if worker.startswith("gw") and worker[2:].isdigit() else 0
    if index >= 10 or not 0 < size <= 1000:
        raise RuntimeError(f"no port slice for worker {worker} of size {size}: 10 workers at most")
    first = 10000 + 1000 * index
    return first, first + size - 1


def processes_of(folder: Path, script: str) -> dict[int, dict[str, str]]:
    """pid -> environment of every live (not zombie) process running ``script`` whose
    environment names ``folder`` or a path in it (the test's own tmp folder): tests on other
    xdist workers run jobs of the same names, so a test must never pick a process by job name
    alone."""
    found: dict[int, dict[str, str]] = {}
    marker = str(folder).encode()
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as handle:
                if script.encode() not in handle.read():
                    continue
            with open(f"/proc/{entry}/environ", "rb") as handle:
                environ = handle.read().split(b"\0")
            with open(f"/proc/{entry}/stat", "rb") as handle:
                if handle.read().rsplit(b") ", 1)[1][:1] == b"Z":
                    continue
        except (OSError, IndexError):
            continue
        values = [item.partition(b"=")[2] for item in environ]
        if any(value == marker or marker + b"/" in value for value in values):
            found[int(entry)] = dict(e.decode(errors="replace").split("=", 1) for e in environ if b"=" in e)
    return found


SERVERS = {"emulator", "server"}  # fixtures: tests/test_mesos_emulator_helpers.py, test_mesos_client_http.py

# Ports 31000 and up are what every Mesos agent the tests start offers (the emulator's, a real
# one), and the backend takes the lowest free ones; the backend conformance suite checks which
# ports its tasks get (a slot gets its old port back; a task listens on the port of its
# TF_CONFIG). Tests whose tasks listen there or that depend on which of those ports they get
# would take them from each other on two workers at once, so they share one xdist group: one
# worker runs them one after another (make test: --dist loadgroup). The local backend's ports
# are reserved machine-wide (backends/local/ports.py), and a test that depends on getting a
# port back gives it its worker's own range (worker_ports above).
# The task scripts of tests/ that listen on the port of their TF_CONFIG (TensorFlow's own
# servers are found by the ``tf`` mark): a Mesos test whose module runs one of them shares the
# group (tests/test_test_hygiene.py finds every listening task script and checks it is named).
SHARED_PORTS = "agent-ports-31000"
LISTENING_TASKS = ("hung_task.py", "pss_stand_in.py")
_CONFORMANCE = ("tests/test_backend_conformance.py::", "tests/test_real_mesos_conformance.py::")


@functools.cache
def _runs_listening_task(module: Path) -> bool:
    text = module.read_text()
    return any(script in text for script in LISTENING_TASKS)


def _uses_shared_ports(item: pytest.Item) -> bool:
    test_id = item.nodeid.lower()
    if test_id.startswith(_CONFORMANCE):
        return True
    listens = (
        item.get_closest_marker("tf") is not None
        or "tensorboard" in test_id
        or _runs_listening_task(Path(str(item.path)))
    )
    return listens and (item.get_closest_marker("real_mesos") is not None or "mesos" in test_id)


# tryfirst: pytest-xdist's own hook reads the xdist_group marks (it names each test by its group)
# and ran before this one (checked), so marks added after it grouped nothing.
@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if SERVERS & set(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.slow)
        if _uses_shared_ports(item):
            item.add_marker(pytest.mark.xdist_group(SHARED_PORTS))


def _runs_workers(config: pytest.Config) -> bool:
    """Whether this is the main process of a run on pytest-xdist worker processes (``-n``)."""
    return not hasattr(config, "workerinput") and config.getoption("dist", "no") != "no"


def pytest_sessionstart(session: pytest.Session) -> None:
    """The main process of a run on worker processes counts as a user of the private Docker
    engine for the whole run (``docker_env.hold``; it starts nothing): the worker whose test
    needs the engine first starts it, and it is stopped when the run ends, not when that
    worker does."""
    if _runs_workers(session.config):
        from tests import docker_env

        docker_env.hold()


def pytest_sessionfinish(session: pytest.Session) -> None:
    if _runs_workers(session.config):
        from tests import docker_env

        docker_env.release()


def pytest_runtest_setup(item: pytest.Item) -> None:
    """A test marked ``tf`` needs TensorFlow, a component like the others (make venv installs
    it): without it the test skips with one line, or fails under ``CI=true``."""
    if item.get_closest_marker("tf") is not None and importlib.util.find_spec("tensorflow") is None:
        missing("TensorFlow is not installed (make venv installs it; pip install '.[tensorflow]')")


@pytest.fixture(autouse=True)
def state_folder_registry(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Each test's own registry of state folders (``tfdeclare.shell.statedirs``), inherited by
    the processes it starts: no test touches the real home, nor sees another test's jobs."""
    folder = tmp_path_factory.mktemp("registry") / "tfdeclare"
    monkeypatch.setenv("TFDECLARE_REGISTRY_DIR", str(folder))
    return folder


@pytest.fixture(autouse=True)
def no_background_controller(monkeypatch: pytest.MonkeyPatch) -> None:
    """No background controller is left after a command (cli.background), in this process and
    the processes it starts, unless a test turns it on (``TFDECLARE_BACKGROUND_CONTROLLER=on``
    in the environment it gives a command, as tests/test_background_controller.py does): the
    other tests look at what one command left."""
    monkeypatch.setenv("TFDECLARE_BACKGROUND_CONTROLLER", "off")


@pytest.fixture
def workdir(tmp_path: Path) -> Iterator[Path]:
    (tmp_path / "specs").mkdir()
    yield tmp_path
    kill_leftovers(tmp_path)


@pytest.fixture
def real_mesos(tmp_path: Path) -> Iterator[Callable[..., Any]]:
    """Starts fresh real Mesos clusters (tests/real_mesos.py: ``real_mesos(agents=2,
    resources=..., flags={...})``), each in its own folder under the test's; all are stopped,
    with every executor and task they started, when the test ends."""
    from tests.real_mesos import RealMesos

    started: list[RealMesos] = []

    def start(**options: Any) -> RealMesos:
        folder = tmp_path / f"cluster{len(started)}"
        folder.mkdir()
        cluster = RealMesos(folder, **options)
        started.append(cluster)
        return cluster.start()

    try:
        yield start
    finally:
        for cluster in started:
            cluster.stop()


@pytest.fixture(scope="session")
def docker_client() -> Iterator[Any]:
    """A Docker engine's client (tests/docker_env.py: skips without one, fails under CI=true).
    An engine this run started is stopped at the end of the run, unless another run uses it."""
    from tests import docker_env

    try:
        client = docker_env.engine()
        yield client
        client.close()
    finally:
        docker_env.release()


@pytest.fixture(scope="session")
def base_image(docker_client: Any) -> str:
    """Debian with Python 3, made here by mmdebstrap; cached by content hash."""
    from tests import docker_env

    return docker_env.base_image(docker_client)


@pytest.fixture(scope="session")
def tensorflow_image(docker_client: Any) -> str:
    """The base image with requirements/tensorflow.txt in /opt/venv (on PATH); cached."""
    from tests import docker_env

    return docker_env.tensorflow_image(docker_client)
