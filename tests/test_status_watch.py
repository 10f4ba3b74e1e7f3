"""``status --watch``: the table, then a row when a job's phase changes (a real local task
ending, the status files kept current by ``apply --wait``), until SIGINT (exit 130); with
NAME it ends by itself at the terminal phase (0 Succeeded, 1 Failed); ``-o json`` one document
a line per change."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import cli
from tests.test_e2e_local import project, wait_until

__all__ = ["project"]  # the fixture


def _job(name: str, go: Path, code: int) -> str:
    script = f"import pathlib, sys, time\nwhile not pathlib.Path({str(go)!r}).exists(): time.sleep(0.05)\nsys.exit({code})"
    return (
        f"apiVersion: tfdeclare/v1\nkind: TFJob\nmetadata: {{name: {name}}}\nspec:\n"
        f"  command: [python, -c, {json.dumps(script)}]\n"
        "  restartPolicy: Never\n"
        "  replicas: {worker: {count: 1, resources: {cpus: 0.1, mem: 64}}}\n"
    )


def _watch(project: Path, *args: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "tfdeclare", "status", "--watch", "--watch-interval", "0.2", *args],
        cwd=project,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


@pytest.mark.slow
@pytest.mark.e2e
def test_watch_prints_a_row_per_change_until_interrupted(project: Path) -> None:
    go = project / "go"
    (project / "specs" / "good.yaml").write_text(_job("good", go, 0))
    (project / "specs" / "bad.yaml").write_text(_job("bad", go, 3))
    applied = cli("apply", "specs", cwd=project)
    assert applied.returncode == 0, applied.stderr

    every = _watch(project)
    as_json = _watch(project, "-o", "json")
    good = _watch(project, "good")
    bad = _watch(project, "bad", "-o", "json")
    assert every.stdout is not None and as_json.stdout is not None
    assert every.stdout.readline().split()[:2] == ["NAME", "PHASE"]
    first = sorted(every.stdout.readline().split()[:2] for _ in range(2))
    assert first == [["bad", "Running"], ["good", "Running"]], first
    started = [json.loads(as_json.stdout.readline()) for _ in range(2)]
    assert {(d["name"], d["phase"]) for d in started} == {("bad", "Running"), ("good", "Running")}

    go.touch()
    waited = cli("apply", "specs", "--wait", "--timeout", "60", cwd=project)  # keeps the files current
    assert waited.returncode == 1  # bad failed

    assert good.wait(timeout=30) == 0  # ended by itself: Succeeded
    assert bad.wait(timeout=30) == 1  # Failed
    assert bad.stdout is not None
    documents = [json.loads(line) for line in bad.stdout.read().splitlines()]
    assert documents[0]["phase"] == "Running" and documents[-1]["phase"] == "Failed"
    assert documents[-1]["kind"] == "TFJobStatus"  # with NAME: the whole status document

    rows: list[list[str]] = []
    wait_until(lambda: (rows.extend([every.stdout.readline().split()[:2]]), len(rows) >= 2)[1], timeout=30)
    assert sorted(rows) == [["bad", "Failed"], ["good", "Succeeded"]], rows
    later = [json.loads(as_json.stdout.readline()) for _ in range(2)]
    assert {(d["name"], d["phase"]) for d in later} == {("bad", "Failed"), ("good", "Succeeded")}

    for watcher in (every, as_json):
        assert watcher.poll() is None  # watches on until interrupted
        watcher.send_signal(signal.SIGINT)
        assert watcher.wait(timeout=10) == 130

    assert cli("delete", "good", cwd=project).returncode == 0
    gone = _watch(project, "-o", "json")
    assert gone.stdout is not None
    assert json.loads(gone.stdout.readline())["name"] == "bad"
    assert cli("delete", "bad", cwd=project).returncode == 0
    assert json.loads(gone.stdout.readline()) == {"name": "bad", "deleted": True}
    gone.send_signal(signal.SIGINT)
    assert gone.wait(timeout=10) == 130
    missing = cli("status", "nosuch", "--watch", cwd=project)
    assert missing.returncode == 1 and "no job named 'nosuch'" in missing.stderr
