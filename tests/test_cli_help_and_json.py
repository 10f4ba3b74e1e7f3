"""Every command's ``--help`` ends with examples, and every command that prints results can
print them as JSON (``-o json``) and as the same document in YAML (``-o yaml``); the commands
that cannot say why in the README."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import pytest
import yaml

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


# ---- -o yaml: the same document as -o json -----------------------------------------------


def test_every_command_with_json_output_has_yaml_output_too() -> None:
    for name, parser in _commands().items():
        outputs = [a for a in parser._actions if "--output" in a.option_strings]
        if outputs and "json" in (outputs[0].choices or ()):
            assert "yaml" in (outputs[0].choices or ()), name


def _same_as_json(yaml_text: str, json_text: str) -> None:
    assert "!!" not in yaml_text and "&id" not in yaml_text and "*id" not in yaml_text, yaml_text
    assert yaml.safe_load(yaml_text) == json.loads(json_text)


def test_yaml_documents_are_plain_and_equal_to_the_json() -> None:
    from tfdeclare.cli.output import document_text
    from tfdeclare.core.enums import Phase, Role

    shared = {"a": 1}
    document = {
        "phase": Phase.RUNNING,
        "roles": (Role.WORKER, Role.PS),
        "twice": [shared, shared],  # no anchor, no alias
        "text": "héllo — ünïcode: 'quoted' \"too\" # not a comment",
        "long": "x " * 200,
        "numbers": [0, -1, 2.5, 1e300, True, None, "0", "yes", "null", "1.0"],
        "nested": {"b": [], "a": {}},  # key order as the JSON has it
    }
    text = document_text(document, "yaml")
    _same_as_json(text, document_text(document, "json"))
    assert "héllo" in text and list(yaml.safe_load(text)["nested"]) == ["b", "a"]
    assert len(text.splitlines()) < 40  # the long string on one line


@pytest.mark.parametrize(
    "args",
    [
        ("version",),
        ("validate", "specs"),
        ("validate", "bad"),
        ("plan", "specs"),
        ("status",),
        ("status", "bert"),
        ("gc", "--dry-run"),
        ("delete", "gone", "--ignore-not-found"),
    ],
)
def test_yaml_output_parses_back_equal_to_the_json(tmp_path: Path, args: tuple[str, ...]) -> None:
    (tmp_path / "specs").mkdir()
    (tmp_path / "specs" / "a.yaml").write_text(job_yaml("a", command="[python, -c, pass]"))
    (tmp_path / "bad").mkdir()
    (tmp_path / "bad" / "b.yaml").write_text(job_yaml("b").replace("count: 1", "count: two"))
    (tmp_path / "status").mkdir()
    (tmp_path / "status" / "bert.yaml").write_text(
        "name: bert\nphase: Running\nmessage: 'ünïcode: and # and \"quotes\"'\nrestarts: 2\n"
        "tasks: [{role: worker, index: 0, state: running, port: 8080}]\n"
    )
    as_json = cli(*args, "-o", "json", cwd=tmp_path)
    as_yaml = cli(*args, "-o", "yaml", cwd=tmp_path)
    assert as_yaml.returncode == as_json.returncode, as_yaml.stderr
    assert as_json.stdout.startswith(("{", "[")), as_json.stdout + as_json.stderr
    _same_as_json(as_yaml.stdout, as_json.stdout)
    assert "\x1b[" not in as_yaml.stdout + as_yaml.stderr


@pytest.mark.slow
@pytest.mark.e2e
def test_apply_logs_and_delete_as_yaml(workdir: Path) -> None:
    command = """[python, -c, "print('héllo: world'); print('# two')"]"""
    (workdir / "specs" / "a.yaml").write_text(job_yaml("a", command=command))
    applied = cli("apply", "specs", "--wait", "--timeout", "60", "-o", "yaml", cwd=workdir)
    assert applied.returncode == 0, applied.stderr
    outcome = yaml.safe_load(applied.stdout)  # one document, no progress lines
    assert [j["action"] for j in outcome["plan"]["jobs"]] == ["create"]
    assert [(j["name"], j["phase"]) for j in outcome["jobs"]] == [("a", "Succeeded")]
    lines = cli("logs", "a", "-o", "json", cwd=workdir).stdout.splitlines()
    as_yaml = cli("logs", "a", "-o", "yaml", cwd=workdir).stdout
    assert list(yaml.safe_load_all(as_yaml)) == [json.loads(line) for line in lines]
    assert [d["line"] for d in yaml.safe_load_all(as_yaml)] == ["héllo: world", "# two"]
    deleted = cli("delete", "a", "nope", "-o", "yaml", cwd=workdir)
    assert deleted.returncode == 1
    assert yaml.safe_load(deleted.stdout) == {"deleted": ["a"], "missing": ["nope"], "timedOut": False}
