"""A test run stops the private Docker engine it started, and only that one (contract section
9: whatever a test run starts, it stops): ``tests/docker_env.py``'s ``acquire``/``release``
driven by real processes, with a stand-in ``dockerd`` (it answers ``/_ping`` on its socket and
writes its pid file, as dockerd does) in a cache folder of the test's own, so the engine other
runs use is never touched."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests import docker_env
from tests.conftest import REPO
from tests.waiting import wait_until

pytestmark = pytest.mark.slow

FAKE_DOCKERD = """\
import os, signal, socket, sys
with open("/proc/self/comm", "w") as comm:
    comm.write("dockerd")  # what stop_private_engine checks before it signals
args = sys.argv[1:]
path = args[args.index("--host") + 1].removeprefix("unix://")
pidfile = args[args.index("--pidfile") + 1]
server = socket.socket(socket.AF_UNIX)
server.bind(path)
server.listen(8)
with open(pidfile, "w") as out:
    out.write(str(os.getpid()))
def bye(*_):
    os.unlink(pidfile)
    os.unlink(path)
    sys.exit(0)
signal.signal(signal.SIGTERM, bye)
while True:
    conn, _ = server.accept()
    conn.recv(4096)
    conn.sendall(b"HTTP/1.0 200 OK\\r\\nContent-Length: 2\\r\\n\\r\\nOK")
    conn.close()
"""

USER = """\
import sys
from tests import docker_env
print(docker_env.acquire(), flush=True)
sys.stdin.readline()
docker_env.release()
print("released", flush=True)
"""


@pytest.fixture
def env(tmp_path: Path) -> Iterator[dict[str, str]]:
    if os.geteuid() != 0:
        pytest.skip("the private engine is started only as root")
    if docker_env._ping("unix:///var/run/docker.sock"):
        pytest.skip("an engine answers on the default socket: the tests use it and start none")
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "dockerd").write_text(f"#!{sys.executable}\n{FAKE_DOCKERD}")
    (bin_dir / "dockerd").chmod(0o755)
    environ = {k: v for k, v in os.environ.items() if k != "DOCKER_HOST"}
    # a short cache path: a unix socket's path is at most 107 bytes
    cache = Path(os.environ.get("TMPDIR", "/tmp")) / f"tfd-engine-{os.getpid()}-{tmp_path.name[-12:]}"
    environ |= {"PATH": f"{bin_dir}{os.pathsep}{environ['PATH']}", "TFDECLARE_TEST_CACHE": str(cache)}
    yield environ
    pid = _engine_pid(environ)
    if pid is not None:  # a failed test leaves no stand-in behind
        os.kill(pid, 9)
    subprocess.run(["rm", "-rf", str(cache)], check=False)


HOLDER = USER.replace(
    "print(docker_env.acquire(), flush=True)", "docker_env.hold()\nprint('held', flush=True)"
)


class User:
    """One test run using the engine, as a real process: acquire, then release when told
    (``code``: HOLDER, the main process of a run on worker processes, which holds it and
    starts nothing)."""

    def __init__(self, env: dict[str, str], code: str = USER) -> None:
        self.process = subprocess.Popen(
            [sys.executable, "-c", code], cwd=REPO, env=env, stdin=subprocess.PIPE,
            stdout=subprocess.PIPE, text=True,
        )  # fmt: skip
        assert self.process.stdout is not None
        self.host = self.process.stdout.readline().strip()

    def release(self) -> None:
        out, _ = self.process.communicate("\n", timeout=60)
        assert out.strip() == "released" and self.process.returncode == 0


def _engine_pid(env: dict[str, str]) -> int | None:
    code = "from tests import docker_env; print(docker_env._engine_pid())"
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, env=env, capture_output=True, text=True)
    return None if out.stdout.strip() == "None" else int(out.stdout)


def _alive(pid: int) -> bool:
    return docker_env._is_dockerd(pid)


def test_a_run_that_started_the_engine_stops_it(env: dict[str, str]) -> None:
    run = User(env)
    assert run.host == f"unix://{env['TFDECLARE_TEST_CACHE']}/dockerd/docker.sock"
    pid = _engine_pid(env)
    assert pid is not None and _alive(pid)
    run.release()
    assert not _alive(pid), "the engine this run started outlived it"
    again = User(env)  # the next run starts its own, and stops it too
    second = _engine_pid(env)
    assert second is not None and second != pid
    again.release()
    assert not _alive(second)


def test_an_engine_the_run_did_not_start_is_left_running(env: dict[str, str]) -> None:
    started = subprocess.run(
        [sys.executable, "-m", "tests.docker_env", "start"], cwd=REPO, env=env, capture_output=True, text=True
    )
    assert started.stdout.startswith("DOCKER_HOST=unix://"), started.stderr
    pid = _engine_pid(env)
    assert pid is not None
    for _ in range(2):  # found through the cache folder's socket, or through DOCKER_HOST
        run = User(env)
        run.release()
        assert _alive(pid), "a test run stopped an engine it did not start"
        env = {**env, "DOCKER_HOST": started.stdout.strip().removeprefix("DOCKER_HOST=")}
    subprocess.run([sys.executable, "-m", "tests.docker_env", "stop"], cwd=REPO, env=env, check=True)
    wait_until(lambda: not _alive(pid), 30, what=f"the engine {pid} stopped")


@pytest.mark.parametrize("first_to_end", ["starter", "other"])
def test_concurrent_runs_share_it_and_the_last_one_stops_it(env: dict[str, str], first_to_end: str) -> None:
    starter = User(env)
    pid = _engine_pid(env)
    other = User(env)
    assert other.host == starter.host and _engine_pid(env) == pid and pid is not None
    runs = [starter, other] if first_to_end == "starter" else [other, starter]
    runs[0].release()
    assert _alive(pid), "stopped under a run that still uses it"
    runs[1].release()
    assert not _alive(pid)


def test_a_run_on_worker_processes_keeps_it_until_its_main_process_ends(env: dict[str, str]) -> None:
    main = User(env, HOLDER)  # conftest.py: the main process of ``pytest -n``
    assert main.host == "held" and _engine_pid(env) is None, "holding starts nothing"
    first = User(env)  # the worker whose test needs it first starts it
    pid = _engine_pid(env)
    assert pid is not None
    first.release()
    assert _alive(pid), "stopped when the worker that started it ended, under the rest of the run"
    second = User(env)
    assert _engine_pid(env) == pid, "another worker of the run uses the same engine"
    second.release()
    main.release()
    assert not _alive(pid), "the run ended and left the engine it started running"
