"""The Mesos backend and ``plan`` against an authenticating real Apache Mesos 1.11.0 cluster
(issue 33; ``make real-mesos``): the master authenticates frameworks (v1 HTTP, Basic), its
agents (CRAM-MD5) and its read-only and read-write HTTP endpoints, as upstream's
docs/authentication.md describes (tests/real_mesos.py, ``credentials=``).

What is checked is what the real master says (``/master/state``, its log), never what the
backend believes it did.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from functools import partial
from pathlib import Path

import pytest

from tests.backend_conformance import Harness
from tests.conftest import cli, job_yaml
from tests.mesos_fixtures import eventually as _eventually
from tests.mesos_fixtures import mesos_test_config
from tests.real_mesos import RealMesos
from tests.real_mesos_backend import backends, run_one, stop_one
from tfdeclare.backends.errors import BackendError
from tfdeclare.backends.mesos.backend import MesosBackend
from tfdeclare.core.spec.resources import Resources

__all__ = ["backends"]  # the fixture

pytestmark = [pytest.mark.real_mesos, pytest.mark.slow]

eventually = partial(_eventually, timeout=30.0)
Start = Callable[..., RealMesos]
PRINCIPAL, SECRET = "tfd", "s3cret-Val"


def test_the_harness_itself_is_refused_without_the_credentials(real_mesos: Start) -> None:
    """The cluster really authenticates: its state is not read without credentials."""
    mesos = real_mesos(agents=1, credentials=(PRINCIPAL, SECRET))
    assert len(mesos.state()["slaves"]) == 1  # with them (and the agent authenticated itself)
    mesos.credentials = (PRINCIPAL, "wrong")
    with pytest.raises(OSError, match="401"):
        mesos.state()


def test_an_authenticated_framework_runs_a_task_and_reads_its_log(
    real_mesos: Start, tmp_path: Path, backends: list[Harness], monkeypatch: pytest.MonkeyPatch
) -> None:
    mesos = real_mesos(
        agents=1, resources="cpus:2;mem:1024;ports:[31000-31099]", credentials=(PRINCIPAL, SECRET)
    )
    monkeypatch.setenv("TFD_REAL_SECRET", SECRET)
    settings = mesos_test_config(mesos.url, principal=PRINCIPAL, secret_env="TFD_REAL_SECRET")
    harness = Harness(lambda: MesosBackend(tmp_path / "state", settings), tmp_path)
    backends.append(harness)
    backend = harness.backend()
    argv = [sys.executable, "-c", "import time; print('ready', flush=True); time.sleep(120)"]
    task = run_one(harness, backend, "authed", argv, Resources(1, 128))
    [framework] = mesos.frameworks()
    assert framework["principal"] == PRINCIPAL  # the master authenticated it as tfd
    assert eventually(lambda: mesos.running().get(task.task_id))
    # the agent's sandbox (/files, read-only HTTP authentication on the agent too)
    eventually(lambda: b"ready" in backend.read_log(task.task_id, 0).data)
    stop_one(backend, task)


def test_wrong_credentials_are_refused_at_once_not_retried_until_a_timeout(
    real_mesos: Start, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """A 401 is final: the backend fails on the first SUBSCRIBE with SubscribeRefusedError's
    message, even with a subscribe timeout far longer than the test would wait."""
    mesos = real_mesos(agents=1, credentials=(PRINCIPAL, SECRET))
    monkeypatch.setenv("TFD_REAL_SECRET", "not-the-secret")
    settings = mesos_test_config(
        mesos.url, principal=PRINCIPAL, secret_env="TFD_REAL_SECRET", subscribe_timeout_s=3600.0
    )
    backend = MesosBackend(tmp_path / "state", settings)
    try:
        with pytest.raises(BackendError) as info:
            backend.observe()
    finally:
        backend.close()
    message = str(info.value)
    assert "refused the framework" in message and "401" in message, message
    assert "not-the-secret" not in message and SECRET not in message
    assert mesos.frameworks() == []
    # one SUBSCRIBE, answered 401, and no retry (the master logs no refused request itself)
    failed = [r.getMessage() for r in caplog.records if "subscription failed" in r.getMessage()]
    assert failed == ["Mesos subscription failed: SUBSCRIBE: HTTP 401: 401 Unauthorized."], failed


def _project(root: Path, mesos: RealMesos, secret: str) -> None:
    (root / "specs").mkdir()
    job = "worker: {count: 2, resources: {cpus: 2, mem: 256}}"
    (root / "specs" / "two.yaml").write_text(job_yaml("plan-real-auth", roles=job))
    (root / "secret").write_text(secret + "\n")
    (root / "secret").chmod(0o600)
    (root / "tfdeclare.yaml").write_text(
        f"backend: mesos\nmesos: {{master: '{mesos.url}', principal: {PRINCIPAL}, secretFile: secret}}\n"
    )


def test_plan_asks_an_authenticating_master_for_its_agents_with_the_credentials(
    real_mesos: Start, tmp_path: Path
) -> None:
    """GET_AGENTS on the read-only operator API, with the configured principal and secret file."""
    mesos = real_mesos(
        agents=2, resources="cpus:1;mem:2048;ports:[31000-31099]", credentials=(PRINCIPAL, SECRET)
    )
    _project(tmp_path, mesos, SECRET)
    result = cli("plan", "specs", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert "could not ask" not in result.stderr, result.stderr
    # the answer was the master's: its agents have 1 cpu, the task needs 2
    assert "a worker task needs cpus 2" in result.stderr and "has cpus 1, mem 2048 MiB" in result.stderr
    assert mesos.frameworks() == []  # plan only asked
    # with a wrong secret the master refuses, and plan says so (never the secret)
    (tmp_path / "secret").write_text("wrong-one\n")
    refused = cli("plan", "specs", cwd=tmp_path)
    assert refused.returncode == 0, refused.stderr
    assert "could not ask" in refused.stderr and "401" in refused.stderr, refused.stderr
    assert "wrong-one" not in refused.stderr and SECRET not in refused.stderr
