"""Real distributed TensorFlow through tfdeclare: the example jobs of specs/ run to Succeeded on
the local backend, all four at once (as `make demo` runs them), and on the mesos backend
against the master emulator; the workers of each MWMS job end with identical weights, the PSS chief
finishes its steps, and the TF1 workers reach the last step."""

from __future__ import annotations

import os
import re
import shutil
import sys
from pathlib import Path

import pytest
import yaml

from tests.conftest import REPO, cli
from tests.mesos_fixtures import config_yaml, start_emulator

pytestmark = [
    pytest.mark.tf,
    pytest.mark.e2e,
]


def test_example_jobs_train_to_success(tmp_path: Path) -> None:
    shutil.copytree(REPO / "specs", tmp_path / "specs")
    assert cli("validate", "specs", cwd=tmp_path).returncode == 0
    result = cli("apply", "specs", "--wait", "--timeout", "400", cwd=tmp_path, timeout=450)
    assert result.returncode == 0, result.stdout + result.stderr
    check_trained(tmp_path)


def test_example_jobs_train_to_success_on_mesos(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The same jobs as Mesos tasks: the emulator's agents run them on this machine (hence
    ``sharedFilesystem``, and ``python`` on the agents' PATH)."""
    monkeypatch.setenv("PATH", f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}")
    emulator = start_emulator(
        tmp_path, agents=2, agent_resources="cpus:4;mem:16384;ports:[31000-31099]", kill_grace_period=3.0
    )
    try:
        shutil.copytree(REPO / "specs", tmp_path / "specs")
        (tmp_path / "tfdeclare.yaml").write_text(config_yaml(emulator.url))
        assert cli("validate", "specs", cwd=tmp_path).returncode == 0
        result = cli(
            "apply", "specs", "--wait", "--backend", "mesos", "--timeout", "400", cwd=tmp_path, timeout=450
        )
        assert result.returncode == 0, result.stdout + result.stderr
        check_trained(tmp_path)
        assert emulator.check_invariants() == []
    finally:
        emulator.stop()


def check_trained(tmp_path: Path) -> None:
    for name in ("mnist-mwms", "pss", "legacy-flags", "preemptible-mwms"):
        document = yaml.safe_load((tmp_path / "status" / f"{name}.yaml").read_text())
        assert document["phase"] == "Succeeded", (name, document["message"])

    def log(job: str, task: str) -> str:
        shown = cli("logs", job, "--task", task, cwd=tmp_path)
        assert shown.returncode == 0, shown.stderr
        return shown.stdout

    for mwms in ("mnist-mwms", "preemptible-mwms"):
        hashes = [
            re.findall(r"^FINAL_WEIGHTS_SHA256 ([0-9a-f]{64})$", log(mwms, f"worker:{i}"), re.M)
            for i in (0, 1)
        ]
        assert hashes[0] and hashes[0] == hashes[1], f"both {mwms} workers end with identical weights"
    assert re.search(r"^DONE steps=\d+", log("pss", "chief:0"), re.M)
    for index in (0, 1):
        steps = re.findall(r"^FINAL_GLOBAL_STEP (\d+)", log("legacy-flags", f"worker:{index}"), re.M)
        assert steps and int(steps[0]) >= 200
    status = cli("status", cwd=tmp_path)
    assert status.stdout.count("Succeeded") == 4
