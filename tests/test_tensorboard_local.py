"""A real TensorBoard process on the local backend (``spec.tensorboard``): started beside a
job by the daemon, its address in the status file and on the status page, answering HTTP
there, stopped with the job."""

from __future__ import annotations

import http.client
import textwrap
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import cli, kill_leftovers
from tests.test_daemon import CONFIG, Daemon, status, wait_until

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

SERVE = "import time\nprint('training', flush=True)\ntime.sleep(3600)\n"


@pytest.fixture
def cwd(tmp_path: Path) -> Iterator[Path]:
    (tmp_path / "specs" / "runs").mkdir(parents=True)
    (tmp_path / "tfdeclare.yaml").write_text(CONFIG)
    (tmp_path / "specs" / "serve.py").write_text(SERVE)
    yield tmp_path
    cli("delete", "--all", cwd=tmp_path)
    assert kill_leftovers(tmp_path) == [], "a task outlived its job"


def board(cwd: Path) -> dict[str, Any]:
    return (status(cwd, "tb") or {}).get("tensorboard") or {}


def answers(url: str) -> bool:
    """TensorBoard answers at ``url`` (not yet: refused, or anything that is not its page, such
    as another program that had the port a moment before, seen once as an echo of the request)."""
    try:
        with urllib.request.urlopen(url, timeout=5) as response:
            return response.status == 200 and b"TensorBoard" in response.read()
    except (OSError, http.client.HTTPException):
        return False


def job(name: str, board: str = "") -> str:
    return (
        textwrap.dedent(
            f"""\
        apiVersion: tfdeclare/v1
        kind: TFJob
        metadata: {{name: {name}}}
        spec:
          command: [python, serve.py]
          replicas:
            chief: {{count: 1, resources: {{cpus: 0.1, mem: 64}}}}
        """
        )
        + board
    )


def test_a_real_tensorboard_beside_a_job(cwd: Path) -> None:
    logs = cwd / "specs" / "runs"
    (cwd / "specs" / "tb.yaml").write_text(
        job("tb", f"  tensorboard: {{logDir: {logs}, resources: {{cpus: 0.1, mem: 256}}}}\n")
    )
    (cwd / "specs" / "keep.yaml").write_text(job("keep"))  # pruning every job at once is refused
    daemon = Daemon(cwd, "--specs", "specs", "--interval", "5", "--prune")
    try:
        wait_until(lambda: bool(board(cwd).get("url")), 120)
        url = board(cwd)["url"]
        assert url.startswith("http://127.0.0.1:")
        wait_until(lambda: answers(url), 120)
        with urllib.request.urlopen(daemon.url + "/", timeout=5) as response:
            assert f'<a href="{url}">' in response.read().decode(), "the status page links to it"
        (cwd / "specs" / "tb.yaml").unlink()
        wait_until(lambda: status(cwd, "tb") is None, 60)
        assert not answers(url), "stopped with its job"
    finally:
        assert daemon.stop() == 0
