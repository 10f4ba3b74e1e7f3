"""Every command's ``--help`` ends with examples, and every command that prints results can
print them as JSON (``-o json``); the commands that cannot say why in the README."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import pytest

from tests.conftest import cli, job_yaml
from tfdeclare.cli.main import build_parser

# Commands whose output is not results: a shell script, a JSON Schema (JSON already), log lines of
# a long-running process (--log-format json).
# completion prints a script, schema is JSON already, daemon logs (--log-format json), convert
# prints YAML specs (its output is the converted document).
NOT_RESULTS = {"completion", "schema", "daemon", "convert"}


def _commands() -> dict[str, argparse.ArgumentParser]:
    parser = build_parser()
    (sub,) = (a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return dict(sub.choices)


def test_every_command_has_examples_in_its_help() -> None:
    commands = _commands()
    assert {"validate", "plan", "apply", "status", "logs", "delete", "version", "completion"} <= set(commands)
    for name, parser in commands.items():
        text = parser.format_help()
        assert "\nexamples:\n" in text, name
        examples = text.split("\nexamples:\n", 1)[1].splitlines()
        assert any(f"tfdeclare {name}" in line for line in examples), name
    assert "\nexamples:\n" in build_parser().format_help()


def test_every_command_that_prints_results_has_json_output() -> None:
    for name, parser in _commands().items():
        if name in NOT_RESULTS:
            continue
        outputs = [a for a in parser._actions if "--output" in a.option_strings]
        assert outputs and "json" in (outputs[0].choices or ()), name


def test_help_runs_as_a_real_process(tmp_path: Path) -> None:
    shown = cli("logs", "--help", cwd=tmp_path)
    assert shown.returncode == 0 and "examples:\n  tfdeclare logs bert " in shown.stdout


def test_version_as_json(tmp_path: Path) -> None:
    document = json.loads(cli("version", "-o", "json", cwd=tmp_path).stdout)
    assert document["version"] and document["apiVersion"] == "tfdeclare/v1"
    assert {"local", "mesos"} <= set(document["backends"])
    assert cli("version", cwd=tmp_path).stdout == f"tfdeclare {document['version']}\n"


@pytest.mark.slow
@pytest.mark.e2e
def test_apply_and_delete_as_json(workdir: Path) -> None:
    (workdir / "specs" / "a.yaml").write_text(job_yaml("a", command="[python, -c, pass]"))
    applied = cli("apply", "specs", "--wait", "--timeout", "60", "-o", "json", cwd=workdir)
    assert applied.returncode == 0, applied.stderr
    outcome = json.loads(applied.stdout)  # one document, no progress lines
    assert [j["action"] for j in outcome["plan"]["jobs"]] == ["create"]
    (job,) = outcome["jobs"]
    assert (job["name"], job["phase"], job["restarts"]) == ("a", "Succeeded", 0)
    assert outcome["timedOut"] is False and outcome["errors"] == []
    deleted = cli("delete", "a", "nope", "-o", "json", cwd=workdir)
    assert deleted.returncode == 1
    assert json.loads(deleted.stdout) == {"deleted": ["a"], "missing": ["nope"], "timedOut": False}
