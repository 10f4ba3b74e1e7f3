"""``plan`` against a real Apache Mesos 1.11.0 master (issue 32; ``make real-mesos``): the
master's own ``GET_AGENTS`` answer, read-only and unsubscribed, is what plan judges fit by, with
the agents' static reservations counted only for the roles tfdeclare has."""

from __future__ import annotations

import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.conftest import cli, job_yaml
from tests.real_mesos import RealMesos
from tests.waiting import wait_until

pytestmark = [pytest.mark.real_mesos, pytest.mark.slow]


def plan_answered(folder: Path) -> subprocess.CompletedProcess[str]:
    """``plan`` once the master answered it within the plan's own bound (2 s for all of
    ``GET_AGENTS``): on a loaded machine a real master can be slower, and plan then says it
    could not ask, which is that bound at work, not what these cases check."""
    return wait_until(
        lambda: (
            (result := cli("plan", "specs", cwd=folder)) and "could not ask" not in result.stderr and result
        ),
        timeout=90,
        what="a plan the master answered within its bound",
    )


def test_plan_warns_of_a_task_no_real_agent_could_hold(
    real_mesos: Callable[..., RealMesos], tmp_path: Path
) -> None:
    mesos = real_mesos(agents=2, resources="cpus(ml):3;cpus:1;mem:2048;ports:[31000-31099]")
    (tmp_path / "specs").mkdir()
    job = "worker: {count: 2, resources: {cpus: 2, mem: 256}}"
    (tmp_path / "specs" / "two.yaml").write_text(job_yaml("plan-real-two", roles=job))
    config = tmp_path / "tfdeclare.yaml"
    # roles ["*"]: each agent's 3 cpus reserved to ml are not ours; 1 cpu is
    config.write_text(f"backend: mesos\nmesos: {{master: '{mesos.url}'}}\n")
    result = plan_answered(tmp_path)
    assert result.returncode == 0, result.stderr
    assert (
        "specs/two.yaml:8:24: warning: a worker task needs cpus 2, mem 256 MiB, and a task runs on one "
        "agent: the largest agent of the Mesos cluster it may use (127.0.0.1, of 2) has cpus 1, mem "
        "2048 MiB in all"
    ) in result.stderr
    # in role ml as well, each agent has 4 cpus for us: it fits, nothing is said
    config.write_text(f"backend: mesos\nmesos: {{master: '{mesos.url}', roles: ['*', ml]}}\n")
    fits = plan_answered(tmp_path)
    assert fits.returncode == 0, fits.stderr
    assert "specs/two.yaml" not in fits.stderr, fits.stderr
    # plan registered no framework: it only asked
    assert mesos.state()["frameworks"] == []
