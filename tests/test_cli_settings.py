"""Where the common options come from, as a real ``tfdeclare`` process sees them: a flag beats
its environment variable (``TFDECLARE_CONFIG``, ``TFDECLARE_STATE_DIR``,
``TFDECLARE_STATUS_DIR``), which beats the config file, which beats the defaults; an empty
variable counts as unset; a config file named but missing is an error. And ``status`` names
the folders it read when it finds nothing there."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from tests.conftest import cli

FLAG, ENV, EMPTY_ENV, CONFIG, DEFAULT = "flag", "env", "empty env", "config", "default"


def _folders(shown: str) -> tuple[str, str]:
    """The state and status folders of ``No jobs in state folder X[, from ...] (status folder
    Y[, from ...]).``"""
    assert shown.startswith("No jobs in state folder "), shown
    state, _, status = shown.removeprefix("No jobs in state folder ").partition(" (status folder ")
    return state.split(", from ")[0], status.removesuffix(").\n").split(", from ")[0]


@pytest.mark.parametrize(
    ("given", "wins"),
    [
        ((FLAG, ENV, CONFIG), FLAG),
        ((ENV, CONFIG), ENV),
        ((EMPTY_ENV, CONFIG), CONFIG),
        ((CONFIG,), CONFIG),
        ((FLAG,), FLAG),
        ((ENV,), ENV),
        ((EMPTY_ENV,), DEFAULT),
        ((), DEFAULT),
    ],
)
def test_a_flag_beats_the_environment_which_beats_the_config_file_which_beats_the_default(
    tmp_path: Path, given: tuple[str, ...], wins: str
) -> None:
    args: list[str] = []
    env: dict[str, str] = {}
    if CONFIG in given:
        (tmp_path / "tfdeclare.yaml").write_text(
            "stateDir: from-config/state\nstatusDir: from-config/status\n"
        )
    for dest, variable in (("state", "TFDECLARE_STATE_DIR"), ("status", "TFDECLARE_STATUS_DIR")):
        if FLAG in given:
            args += [f"--{dest}-dir", f"from-flag/{dest}"]
        if ENV in given:
            env[variable] = str(tmp_path / "from-env" / dest)
        if EMPTY_ENV in given:
            env[variable] = ""
    shown = cli("status", *args, cwd=tmp_path, env=env)
    assert shown.returncode == 0, shown.stderr
    expected = {
        FLAG: (tmp_path / "from-flag/state", tmp_path / "from-flag/status"),
        ENV: (tmp_path / "from-env/state", tmp_path / "from-env/status"),
        CONFIG: (tmp_path / "from-config/state", tmp_path / "from-config/status"),
        DEFAULT: (tmp_path / ".tfdeclare", tmp_path / "status"),
    }[wins]
    assert _folders(shown.stdout) == tuple(str(p) for p in expected)
    if wins != DEFAULT:  # says where a folder that is not the default came from
        via = {FLAG: "--state-dir", ENV: "TFDECLARE_STATE_DIR", CONFIG: "stateDir in tfdeclare.yaml"}[wins]
        assert f", from {via} (status folder " in shown.stdout


def test_the_flag_is_read_where_a_job_is_found(tmp_path: Path) -> None:
    """The folders chosen are the ones read, not just the ones named: a status file under the
    environment's status folder is shown, the flag's folder beats it."""
    for where in ("env-status", "flag-status"):
        (tmp_path / where).mkdir()
    (tmp_path / "env-status" / "bert.yaml").write_text("name: bert\nphase: Running\nspecHash: abc\n")
    env = {"TFDECLARE_STATUS_DIR": "env-status"}
    found = cli("status", "-o", "json", cwd=tmp_path, env=env)
    assert [d["name"] for d in json.loads(found.stdout)] == ["bert"], found.stderr
    hidden = cli("status", "--status-dir", "flag-status", "-o", "json", cwd=tmp_path, env=env)
    assert json.loads(hidden.stdout) == []


@pytest.mark.parametrize(
    ("args", "env", "wins"),
    [
        (("--config", "flag.yaml"), {"TFDECLARE_CONFIG": "env.yaml"}, "flag"),
        ((), {"TFDECLARE_CONFIG": "env.yaml"}, "env"),
        ((), {"TFDECLARE_CONFIG": ""}, "cwd"),
        ((), {}, "cwd"),
    ],
)
def test_the_config_file_is_the_flags_then_the_environments_then_the_current_folders(
    tmp_path: Path, args: tuple[str, ...], env: dict[str, str], wins: str
) -> None:
    (tmp_path / "elsewhere").mkdir()
    (tmp_path / "flag.yaml").write_text("stateDir: flag-state\n")
    (tmp_path / "elsewhere" / "env.yaml").write_text("stateDir: env-state\n")
    (tmp_path / "tfdeclare.yaml").write_text("stateDir: cwd-state\n")
    env = {k: ("elsewhere/" + v if v else v) for k, v in env.items()}
    shown = cli("status", *args, cwd=tmp_path, env=env)
    assert shown.returncode == 0, shown.stderr
    # a config file's folders are relative to the file's own folder
    base = tmp_path / "elsewhere" if wins == "env" else tmp_path
    assert _folders(shown.stdout)[0] == str(base / f"{wins}-state")


@pytest.mark.parametrize(
    ("args", "env", "named"),
    [
        (
            (),
            {"TFDECLARE_CONFIG": "missing.yaml"},
            "cannot read config missing.yaml (from TFDECLARE_CONFIG): ",
        ),
        (("--config", "missing.yaml"), {}, "cannot read config missing.yaml (from --config): "),
    ],
)
def test_a_config_file_named_but_missing_is_an_error(
    tmp_path: Path, args: tuple[str, ...], env: dict[str, str], named: str
) -> None:
    (tmp_path / "tfdeclare.yaml").write_text("stateDir: never-read\n")  # not a fallback
    for command in (("status",), ("validate", "."), ("plan", ".")):
        result = cli(*command, *args, cwd=tmp_path, env=env)
        assert result.returncode == 1, result.stdout + result.stderr
        assert f"tfdeclare: error: {named}No such file or directory" in result.stderr
        assert "Traceback" not in result.stderr and "never-read" not in result.stdout


def test_help_names_the_environment_variables_and_their_precedence(tmp_path: Path) -> None:
    shown = cli("status", "--help", cwd=tmp_path)
    text = " ".join(shown.stdout.split())
    for variable in ("TFDECLARE_CONFIG", "TFDECLARE_STATE_DIR", "TFDECLARE_STATUS_DIR"):
        assert f"env {variable}" in text
    assert (
        "a flag beats its environment variable, which beats the config file, which beats the defaults" in text
    )


def test_status_with_nothing_to_show_names_the_folders_it_read(tmp_path: Path) -> None:
    (tmp_path / "sub").mkdir()
    shown = cli("status", cwd=tmp_path / "sub")  # from a subfolder: its own folders, named
    assert shown.returncode == 0, shown.stderr
    state, status = tmp_path / "sub" / ".tfdeclare", tmp_path / "sub" / "status"
    assert shown.stdout == f"No jobs in state folder {state} (status folder {status}).\n"
    for output in ("json", "yaml"):
        machine = cli("status", "-o", output, cwd=tmp_path / "sub")
        assert machine.returncode == 0 and yaml.safe_load(machine.stdout) == []  # still a list
        assert f"no jobs in state folder {state} (status folder {status})" in machine.stderr
    missing = cli("status", "bert", cwd=tmp_path / "sub", env={"TFDECLARE_STATUS_DIR": str(tmp_path)})
    assert missing.returncode == 1
    assert (
        f"tfdeclare: error: no job named 'bert' in state folder {state} "
        f"(status folder {tmp_path}, from TFDECLARE_STATUS_DIR)\n"
    ) == missing.stderr
