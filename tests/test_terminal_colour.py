"""Colour on a terminal only: a real pseudo-terminal gets ANSI colour from validate, plan,
status and logs; a pipe, ``NO_COLOR``, ``TERM=dumb`` and ``-o json`` get none; ``FORCE_COLOR`` forces it."""

from __future__ import annotations

import io
import os
import pty
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import cli, job_yaml
from tfdeclare.cli.terminal import use_color

ESC = "\x1b["


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("NO_COLOR", "FORCE_COLOR", "TERM")}
    return {**env, "TERM": "xterm-256color", **extra}


def on_pty(*args: str, cwd: Path, **extra: str) -> tuple[int, str]:
    """Run the CLI with stdout and stderr on a real pseudo-terminal; what it wrote there."""
    parent, child = pty.openpty()
    process = subprocess.Popen(
        [sys.executable, "-m", "tfdeclare", *args],
        cwd=cwd,
        stdin=subprocess.DEVNULL,
        stdout=child,
        stderr=child,
        env=_env(**extra),
    )
    os.close(child)
    out = bytearray()
    while True:
        try:
            data = os.read(parent, 65536)
        except OSError:  # EIO: every writer has closed the terminal
            break
        if not data:
            break
        out += data
    os.close(parent)
    return process.wait(30), out.decode()


@pytest.fixture
def specs(workdir: Path) -> Path:
    (workdir / "specs" / "a.yaml").write_text(job_yaml("a"))
    return workdir


def test_a_terminal_gets_colour(specs: Path) -> None:
    code, out = on_pty("validate", "specs", cwd=specs)
    assert code == 0 and f"{ESC}32m1 job(s) in 1 file(s): valid{ESC}0m" in out
    code, out = on_pty("plan", "specs", cwd=specs)
    assert code == 0 and f"{ESC}32m+ a will be created{ESC}0m" in out, out
    (specs / "specs" / "bad.yaml").write_text("apiVersion: [")
    code, out = on_pty("validate", "specs", cwd=specs)
    assert code == 1 and f"{ESC}1;31merror{ESC}0m" in out, out


def test_no_colour_without_a_terminal_with_no_color_dumb_terminals_or_json(specs: Path) -> None:
    assert ESC not in cli("plan", "specs", cwd=specs, env=_env()).stdout
    for extra in ({"NO_COLOR": "1"}, {"TERM": "dumb"}, {"NO_COLOR": "1", "FORCE_COLOR": "1"}):
        code, out = on_pty("plan", "specs", cwd=specs, **extra)
        assert code == 0 and "+ a will be created" in out and ESC not in out, extra
    for args in (
        ("plan", "specs", "-o", "json"),
        ("plan", "specs", "-o", "markdown"),
        ("validate", "specs", "-o", "json"),
    ):
        code, out = on_pty(*args, cwd=specs)
        assert code == 0 and ESC not in out, args


def test_force_color_colours_a_pipe(specs: Path) -> None:
    shown = cli("plan", "specs", cwd=specs, env=_env(FORCE_COLOR="1"))
    assert f"{ESC}32m+ a will be created" in shown.stdout
    assert ESC not in cli("plan", "specs", cwd=specs, env=_env(FORCE_COLOR="0")).stdout


def test_use_color_rules() -> None:
    class Tty:
        def isatty(self) -> bool:
            return True

    tty = Tty()
    assert use_color(tty, env={})  # type: ignore[arg-type]
    assert not use_color(tty, env={"NO_COLOR": "x"})  # type: ignore[arg-type]
    assert use_color(tty, env={"NO_COLOR": ""})  # type: ignore[arg-type]  # empty: not set (no-color.org)
    assert not use_color(tty, "json", env={"FORCE_COLOR": "1"})  # type: ignore[arg-type]
    assert not use_color(io.StringIO(), env={})


@pytest.mark.slow
def test_status_phases_and_log_prefixes_are_coloured_on_a_terminal(specs: Path) -> None:
    (specs / "specs" / "a.yaml").write_text(job_yaml("a", command="[python, -c, 'print(42)']"))
    assert cli("apply", "specs", "--wait", "--timeout", "60", cwd=specs).returncode == 0
    code, out = on_pty("status", cwd=specs)
    assert code == 0 and f"{ESC}32mSucceeded{ESC}0m" in out, out
    code, out = on_pty("status", "a", cwd=specs)
    assert code == 0 and f"{ESC}32mSucceeded{ESC}0m" in out, out
    assert ESC not in cli("status", cwd=specs).stdout
    code, out = on_pty("logs", "a", cwd=specs)
    assert code == 0 and f"{ESC}36mworker-0{ESC}0m | 42" in out, out
    assert cli("logs", "a", cwd=specs).stdout == "worker-0 | 42\n"
