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

from tests.conftest import cli
from tests.test_e2e_local import project

__all__ = ["project"]  # the fixture

SLEEPER = (
    "apiVersion: tfdeclare/v1\nkind: TFJob\nmetadata: {name: nap}\nspec:\n"
    "  command: [python, -c, 'import time; time.sleep(3)']\n"
    "  replicas: {worker: {count: 2, resources: {cpus: 0.1, mem: 64}}}\n"
)


@pytest.mark.slow
@pytest.mark.e2e
def test_a_ci_log_gets_a_still_running_line_while_a_job_runs(project: Path) -> None:
    (project / "specs" / "nap.yaml").write_text(SLEEPER)
    applied = cli("apply", "specs", "--wait", "--timeout", "60", "--heartbeat-interval", "0.5", cwd=project)
    assert applied.returncode == 0, applied.stdout + applied.stderr
    beats = re.findall(r"^Still running… \[(\d+)s elapsed\] nap: 2/2 running$", applied.stdout, re.M)
    assert len(beats) >= 2, applied.stdout
    assert "\r" not in applied.stdout  # a log gets whole lines, never a rewritten one
    assert applied.stdout.rstrip().splitlines()[-1].startswith("[")  # the outcome last, as before


@pytest.mark.slow
@pytest.mark.e2e
def test_a_terminal_gets_one_live_line_cleared_before_the_next(project: Path) -> None:
    (project / "specs" / "nap.yaml").write_text(SLEEPER)
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
    assert process.wait(timeout=60) == 0
    os.close(main)
    text = seen.decode()
    assert re.search(r"\r\x1b\[KStill running… \[\d+s elapsed\] nap: 2/2 running", text), text
    assert "Still running… [" not in text.split("\r\x1b[K")[-1]  # cleared before the last line
