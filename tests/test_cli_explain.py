"""``tfdeclare explain FIELD.PATH`` as a user runs it (a real process): a field of the job
schema with its type, description, default, allowed values and bounds and its fields, ``$ref``s,
lists and maps looked through; an unknown path is an error with what was meant. And the "did
you mean" of a mistyped command, which must name the right command for every command."""

from __future__ import annotations

import argparse
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.conftest import REPO, cli
from tfdeclare.cli import parsers
from tfdeclare.cli.main import build_parser
from tfdeclare.core.spec.explain import ANY_KEY, Field, children, completions, field_at, parse_path
from tfdeclare.core.spec.schema import SCHEMA_NAMES

JOB = json.loads((REPO / "schemas" / "job.schema.json").read_text())


def explained(tmp_path: Path, *args: str) -> dict[str, Any]:
    shown = cli("explain", *args, "-o", "json", cwd=tmp_path)
    assert shown.returncode == 0, shown.stderr
    document: dict[str, Any] = json.loads(shown.stdout)
    return document


def test_a_leaf_with_a_default_and_bounds(tmp_path: Path) -> None:
    shown = cli("explain", "spec.replicas.worker.count", cwd=tmp_path)
    assert shown.returncode == 0, shown.stderr
    assert shown.stdout.startswith("KIND:     TFJob\nVERSION:  tfdeclare/v1\n\n")
    assert "FIELD:    spec.replicas.worker.count <integer>\n" in shown.stdout
    assert "DESCRIPTION:\n    How many tasks of this role. Default 1.\n" in shown.stdout
    assert "DEFAULT:  1\nBOUNDS:   minimum 0\n" in shown.stdout and "FIELDS:" not in shown.stdout
    document = explained(tmp_path, "spec.replicas.worker.count")
    assert document["field"] == "spec.replicas.worker.count" and document["type"] == "integer"
    assert (document["default"], document["minimum"], document["fields"]) == (1, 0, [])
    # the chief's own bounds, not the worker's
    assert explained(tmp_path, "spec.replicas.chief.count")["maximum"] == 1


def test_an_enum_through_a_ref_keeps_the_fields_own_description_and_default(tmp_path: Path) -> None:
    document = explained(tmp_path, "spec.restartPolicy")
    assert (
        document["allowed"]
        == JOB["$defs"]["RestartPolicy"]["enum"]
        == ["Never", "OnFailure", "Always", "ExitCode"]
    )
    assert document["default"] == "OnFailure" and document["type"] == "string"
    assert document["description"] == JOB["$defs"]["Spec"]["properties"]["restartPolicy"]["description"]
    shown = cli("explain", "spec.restartPolicy", cwd=tmp_path).stdout
    assert "DEFAULT:  OnFailure\nALLOWED:  Never | OnFailure | Always | ExitCode\n" in shown
    # a role's restartPolicy has no default of its own: the definition's description shows
    role = explained(tmp_path, "spec.replicas.worker.restartPolicy")
    assert "default" not in role and role["allowed"] == document["allowed"]


def test_a_map_and_one_of_its_values(tmp_path: Path) -> None:
    labels = explained(tmp_path, "metadata.labels")
    assert labels["type"] == "map[string]string" and labels["default"] == {}
    assert labels["keys"] == JOB["$defs"]["Metadata"]["properties"]["labels"]["propertyNames"]["pattern"]
    assert [f["name"] for f in labels["fields"]] == [ANY_KEY]
    team = explained(tmp_path, "metadata.labels.team")
    assert (team["field"], team["type"], team["maxLength"]) == ("metadata.labels.team", "string", 253)
    assert "metadata.labels" in team["description"]
    value = explained(tmp_path, "spec.env.DATA_DIR")  # a string, or a secret reference
    assert value["type"] == "string | object" and [f["name"] for f in value["fields"]] == ["secretRef"]
    assert explained(tmp_path, "spec.env.DATA_DIR.secretRef.agentFile")["pattern"] == "^/"
    refused = cli("explain", "spec.env.TF_CONFIG", cwd=tmp_path)  # a key the map cannot have
    assert refused.returncode == 1 and "spec.env has no key 'TF_CONFIG'" in refused.stderr


def test_a_role_is_the_role_schema_and_a_list_is_looked_through(tmp_path: Path) -> None:
    worker = explained(tmp_path, "spec.replicas.worker")
    roles = JOB["$defs"]["Spec"]["properties"]["replicas"]["properties"]
    assert [f["name"] for f in worker["fields"]] == list(roles["worker"]["properties"])
    volumes = explained(tmp_path, "spec.volumes")
    assert volumes["type"] == "[]object" and volumes["default"] == []
    assert [(f["name"], f["required"]) for f in volumes["fields"]] == [
        ("hostPath", True),
        ("containerPath", True),
        ("mode", False),
    ]
    dotted = explained(tmp_path, "spec.volumes.mode")
    assert explained(tmp_path, "$.spec.volumes[0].mode") == dotted  # as diagnostics print paths
    assert (dotted["allowed"], dotted["default"]) == (["ro", "rw"], "ro")
    assert explained(tmp_path, "spec.command")["type"] == "[]string"
    mem = explained(tmp_path, "spec.replicas.ps.resources.mem")
    assert mem["type"] == "integer | string" and [f["type"] for f in mem["forms"]] == ["integer", "string"]


def test_the_top_kind_and_api_version(tmp_path: Path) -> None:
    top = cli("explain", cwd=tmp_path)
    assert top.returncode == 0 and "FIELD:" not in top.stdout
    assert "  apiVersion  <string> -required-\n    Always `tfdeclare/v1`.\n" in top.stdout
    assert [f["name"] for f in explained(tmp_path)["fields"]] == ["apiVersion", "kind", "metadata", "spec"]
    assert explained(tmp_path, "kind")["allowed"] == ["TFJob"]
    assert explained(tmp_path, "apiVersion")["allowed"] == ["tfdeclare/v1"]
    assert explained(tmp_path, "TFJob.spec.placement") == explained(
        tmp_path, "spec.placement"
    )  # kubectl's form


@pytest.mark.parametrize(
    ("path", "told"),
    [
        (
            "spec.replicas.wroker.count",
            "spec.replicas has no field 'wroker'; did you mean spec.replicas.worker.count? "
            "(its fields: chief, ps, worker, evaluator)",
        ),
        ("spec.comand", "spec has no field 'comand'; did you mean spec.command? (its fields: image, "),
        ("metdata", "the top level has no field 'metdata'; did you mean metadata? (its fields: apiVersion, "),
        ("spec.replicas.worker.count.max", "spec.replicas.worker.count is an integer: it has no fields"),
        ("spec.frobnicate", "spec has no field 'frobnicate' (its fields: image, "),
    ],
)
def test_an_unknown_path_is_an_error_with_what_was_meant(tmp_path: Path, path: str, told: str) -> None:
    for output in ("text", "json"):
        result = cli("explain", path, "-o", output, cwd=tmp_path)
        assert result.returncode == 1 and result.stdout == ""
        assert result.stderr.startswith(f"tfdeclare: error: {told}"), result.stderr
        assert "Traceback" not in result.stderr


def test_recursive_lists_the_subtree_and_yaml_is_the_json(tmp_path: Path) -> None:
    shown = cli("explain", "spec.replicas", "--recursive", cwd=tmp_path).stdout
    assert (
        "  worker  <object>\n    count  <integer>  default 1\n    resources  <object>  default {}\n" in shown
    )
    assert "      cpus  <number>  default 1\n" in shown
    tree = explained(tmp_path, "spec.replicas", "--recursive")
    (worker,) = (f for f in tree["fields"] if f["field"] == "spec.replicas.worker")
    (resources,) = (f for f in worker["fields"] if f["field"].endswith(".resources"))
    assert resources["fields"][0]["field"] == "spec.replicas.worker.resources.cpus"
    as_yaml = cli("explain", "spec.replicas", "--recursive", "-o", "yaml", cwd=tmp_path).stdout
    assert yaml.safe_load(as_yaml) == tree and "!!" not in as_yaml
    config = explained(tmp_path, "--schema", "config", "local.runtime")
    assert config["schema"] == "config" and config["default"] == "auto"


def _every_property(
    field: Field, depth: int = 0, schema: dict[str, Any] = JOB
) -> Iterator[tuple[tuple[str, ...], Field]]:
    for sub in children(field, schema):
        if sub.name != ANY_KEY:
            yield sub.path, sub
        if depth < 8:
            yield from _every_property(sub, depth + 1, schema)


def test_every_field_of_the_job_schema_is_found_by_its_path() -> None:
    found = dict(_every_property(field_at(JOB, ())))
    assert len(found) > 100
    for path, field in found.items():
        assert field_at(JOB, path) == field
        assert field_at(JOB, parse_path(".".join(path))) == field
        assert completions(JOB, ".".join(path))[0] == ".".join(path)


@pytest.mark.parametrize("name", SCHEMA_NAMES)
def test_every_field_of_every_schema_explains_as_text_and_as_a_document(name: str) -> None:
    from tfdeclare.cli.explain_command import schema_document
    from tfdeclare.core.spec.explain import explain_json, explain_text

    document = schema_document(name)
    top = field_at(document, ())
    fields = [top, *(f for _, f in _every_property(top, schema=document))]
    assert len(fields) > 50
    for field in fields:
        text = explain_text(field, document)
        assert text.startswith(f"KIND:     {document['title']}\n") and "DESCRIPTION:" in text
        assert json.loads(json.dumps(explain_json(field, document)))["field"] == field.dotted
    tree = explain_text(top, document, recursive=True)
    assert len(tree.splitlines()) > len(fields) - 10  # one line a field (maps' values as <KEY>)


def test_field_paths_parse_as_diagnostics_print_them() -> None:
    assert parse_path("$.spec.volumes[0].hostPath") == ("spec", "volumes", "0", "hostPath")
    assert parse_path("$.metadata.labels['a.b/c']") == ("metadata", "labels", "a.b/c")
    assert parse_path("spec.replicas.worker") == ("spec", "replicas", "worker")
    assert parse_path("") == () and parse_path("$") == ()


# ---- "did you mean" of a mistyped command ---------------------------------------------------


def _commands() -> list[str]:
    (sub,) = (a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    return list(sub.choices)


def _slips(word: str) -> set[str]:
    """A word with two neighbours swapped, one letter dropped, or one letter doubled."""
    swapped = {word[:i] + word[i + 1] + word[i] + word[i + 2 :] for i in range(len(word) - 1)}
    dropped = {word[:i] + word[i + 1 :] for i in range(len(word))}
    doubled = {word[:i] + word[i] + word[i:] for i in range(len(word))}
    return {w for w in swapped | dropped | doubled if len(w) > 1}


def test_every_mistyped_command_is_told_the_command_meant() -> None:
    commands = _commands()
    assert "explain" in commands
    wrong = {
        (slip, command, parsers.meant(slip, commands))
        for command in commands
        for slip in _slips(command) - set(commands)
        if parsers.meant(slip, commands) != command
    }
    assert wrong == set()


@pytest.mark.parametrize(("typed", "meant"), [("explian", "explain"), ("cg", "gc"), ("shcema", "schema")])
def test_a_mistyped_command_is_suggested_as_a_real_process(tmp_path: Path, typed: str, meant: str) -> None:
    result = cli(typed, cwd=tmp_path)
    assert result.returncode == 1 and result.stdout == ""
    assert result.stderr.rstrip().endswith(f"; did you mean {meant!r}?"), result.stderr


def test_the_parsers_schema_names_are_the_schemas(tmp_path: Path) -> None:
    assert parsers.SCHEMA_NAMES == SCHEMA_NAMES
    refused = cli("schema", "jbo", cwd=tmp_path)
    assert refused.returncode == 1 and "did you mean 'job'?" in refused.stderr
