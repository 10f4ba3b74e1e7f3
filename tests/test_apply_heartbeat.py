"""``apply --wait`` is never silent for long: while nothing changes, a ``Still running…``
line per job still running after ``--heartbeat-interval`` (30 s; shortened here) when stdout is
a pipe (a CI log), and on a terminal one live line rewritten in place (``\\r``) and cleared
before the next progress line."""

from __future__ import annotations

import os
import pty
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import SETTINGS_ENV
from tests.test_e2e_local import project

__all__ = ["project"]  # the fixture

# The tasks end when the test says so (go), once apply has printed its heartbeats.
SLEEPER = (
    "apiVersion: tfdeclare/v1\nkind: TFJob\nmetadata: {name: nap}\nspec:\n"
    "  command: [sh, -c, 'while [ ! -e {go} ]; do sleep 0.1; done']\n"
    "  replicas: {worker: {count: 2, resources: {cpus: 0.1, mem: 64}}}\n"
)
BEAT = re.compile(r"^Still running… \[(\d+)s elapsed\] nap: 2/2 running$", re.M)


@pytest.mark.slow
@pytest.mark.e2e
def test_a_ci_log_gets_a_still_running_line_while_a_job_runs(project: Path) -> None:
    go = project / "go"
    (project / "specs" / "nap.yaml").write_text(SLEEPER.replace("{go}", str(go)))
    applying = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "tfdeclare",
            "apply",
            "specs",
            "--wait",
            "--timeout",
            "120",
            "--heartbeat-interval",
            "0.5",
        ],
        cwd=project,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**{k: v for k, v in os.environ.items() if k not in SETTINGS_ENV}, "PYTHONUNBUFFERED": "1"},
    )
    assert applying.stdout is not None
    seen = ""
    while len(BEAT.findall(seen)) < 2:  # two heartbeats while the job runs, then it may end
        line = applying.stdout.readline()
        assert line, seen
        seen += line
    go.touch()
    rest, err = applying.communicate(timeout=120)
    applied = subprocess.CompletedProcess(applying.args, applying.returncode, seen + rest, err)
    assert applied.returncode == 0, applied.stdout + applied.stderr
    assert len(BEAT.findall(applied.stdout)) >= 2, applied.stdout
    assert "\r" not in applied.stdout  # a log gets whole lines, never a rewritten one
    assert applied.stdout.rstrip().splitlines()[-1].startswith("[")  # the outcome last, as before


@pytest.mark.slow
@pytest.mark.e2e
def test_a_terminal_gets_one_live_line_cleared_before_the_next(project: Path) -> None:
    go = project / "go"
    (project / "specs" / "nap.yaml").write_text(SLEEPER.replace("{go}", str(go)))
    live = re.compile(r"\r\x1b\[KStill running… \[\d+s elapsed\] nap: 2/2 running")
    main, child = pty.openpty()
    process = subprocess.Popen(
        [sys.executable, "-m", "tfdeclare", "apply", "specs", "--wait", "--timeout", "60"],
        cwd=project,
        stdout=child,
        stderr=subprocess.PIPE,
        env={**os.environ, "NO_COLOR": "1"},
    )
    os.close(child)
    seen = b""
    while True:
        try:
            piece = os.read(main, 4096)
        except OSError:  # the other end closed
            break
        if not piece:
            break
        seen += piece
        if not go.exists() and live.search(seen.decode(errors="replace")):
            go.touch()  # the live line is shown while the job runs: it may end now
    assert process.wait(timeout=60) == 0
    os.close(main)
    text = seen.decode()
    assert live.search(text), text
    assert "Still running… [" not in text.split("\r\x1b[K")[-1]  # cleared before the last line
