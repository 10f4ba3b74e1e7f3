"""``make demo-mesos`` (tests/demo_mesos.py) with quick jobs instead of the TensorFlow examples:
it runs them on the Mesos backend against the emulator it starts, prints their status, and
stops the emulator whether the jobs succeed, fail, or the demo is interrupted (no process of
it is left behind)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import REPO, kill_leftovers

pytestmark = [pytest.mark.slow, pytest.mark.e2e]


def _job(name: str, command: str, policy: str = "Never") -> str:
    return (
        f"apiVersion: tfdeclare/v1\nkind: TFJob\nmetadata: {{name: {name}}}\nspec:\n"
        f"  command: {command}\n  restartPolicy: {policy}\n"
        "  replicas: {worker: {count: 2, resources: {cpus: 0.1, mem: 64}}}\n"
    )


def _demo(cwd: Path) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "tests.demo_mesos"],
        cwd=cwd,
        env={**os.environ, "PYTHONPATH": str(REPO), "PYTHONUNBUFFERED": "1"},
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )


def test_the_demo_runs_the_jobs_shows_their_status_and_stops_the_emulator(tmp_path: Path) -> None:
    (tmp_path / "specs").mkdir()
    (tmp_path / "specs" / "good.yaml").write_text(_job("good", "[python, -c, pass]"))
    (tmp_path / "specs" / "bad.yaml").write_text(_job("bad", "[python, -c, 'raise SystemExit(3)']"))
    demo = _demo(tmp_path)
    out, _ = demo.communicate(timeout=240)
    try:
        assert demo.returncode == 1, out  # a job failed: apply --wait says so
        assert "Mesos master emulator on http://" in out
        table = out.split("$ tfdeclare status", 1)[1]
        assert "good" in table and "Succeeded" in table and "bad" in table and "Failed" in table, out
        assert out.rstrip().endswith("demo-mesos: emulator stopped")
        assert (tmp_path / ".demo-mesos" / "status" / "good.yaml").exists()
    finally:
        assert kill_leftovers(tmp_path) == [], "the demo left processes behind"


def test_an_interrupted_demo_stops_the_emulator_and_its_tasks(tmp_path: Path) -> None:
    (tmp_path / "specs").mkdir()
    # the task's command line names tmp_path, so a task left running would be found below
    command = f"[python, -c, 'import time; time.sleep(600)', '{tmp_path}']"
    (tmp_path / "specs" / "long.yaml").write_text(_job("long", command, "OnFailure"))
    demo = _demo(tmp_path)
    assert demo.stdout is not None
    try:
        for line in demo.stdout:
            if "2/2 running" in line:
                break
        else:
            pytest.fail("the job never ran")
        demo.send_signal(signal.SIGTERM)
        rest, _ = demo.communicate(timeout=60)
        assert demo.returncode == 130, rest
        assert "demo-mesos: emulator stopped" in rest
    finally:
        demo.kill()
        assert kill_leftovers(tmp_path) == [], "the demo left processes behind"
