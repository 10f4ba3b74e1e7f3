"""Our validation (jsonschema-rs, errors in our words) agrees with the reference implementation
(the ``jsonschema`` package) on whether a document is valid and where the errors are; our
defaults are the ones the reference fills in; every schema is a valid 2020-12 schema; and the
schemas' examples validate."""

from __future__ import annotations

import copy
import json
from collections.abc import Iterator
from typing import Any

import jsonschema
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tfdeclare.core.spec.schema import SCHEMA_NAMES, load_schema, schema_text


def oracle(name: str) -> jsonschema.Draft202012Validator:
    return jsonschema.Draft202012Validator(json.loads(schema_text(name)))


@pytest.mark.parametrize("name", SCHEMA_NAMES)
def test_schema_is_valid_2020_12_and_examples_validate(name: str) -> None:
    document = json.loads(schema_text(name))
    jsonschema.Draft202012Validator.check_schema(document)
    assert document["$id"].endswith(f"/{name}.schema.json")
    for example in document.get("examples", []):
        assert _validity(name, example) == (True, True)


def _described(schema: Any, path: str = "$") -> list[str]:
    """Paths of properties without a description (they are the reference docs)."""
    missing = []
    if isinstance(schema, dict):
        for key, sub in schema.get("properties", {}).items():
            if isinstance(sub, dict) and "description" not in sub and "$ref" not in sub:
                missing.append(f"{path}.{key}")
            missing.extend(_described(sub, f"{path}.{key}"))
        for key, sub in schema.get("$defs", {}).items():
            missing.extend(_described(sub, f"{path}.$defs.{key}"))
    return missing


def test_job_and_config_fields_are_described() -> None:
    for name in ("job", "config"):
        assert _described(json.loads(schema_text(name))) == [], name


def _error_paths(name: str, value: Any) -> set[tuple[str | int, ...]]:
    return {tuple(e.path) for e in load_schema(name).validate(value)}


def _oracle_paths(name: str, value: Any) -> set[tuple[str | int, ...]]:
    paths: set[tuple[str | int, ...]] = set()
    for error in oracle(name).iter_errors(value):
        path = tuple(error.absolute_path)
        if error.validator == "additionalProperties":  # reported on the object; we point at the key
            extra = set(error.instance) - set(error.schema.get("properties", {}))
            paths.update((*path, key) for key in extra)
        elif "propertyNames" in error.absolute_schema_path:  # a bad key: we point at the key itself
            paths.add((*path, error.instance))
        else:
            paths.add(path)
    return paths


def _filling_oracle(name: str) -> jsonschema.Draft202012Validator:
    """The reference validator, extended to fill in each property's ``default`` on its way
    down (the recipe of the ``jsonschema`` documentation)."""
    base = jsonschema.Draft202012Validator
    properties = base.VALIDATORS["properties"]

    def fill_then_validate(
        validator: Any, props: dict[str, Any], instance: Any, schema: dict[str, Any]
    ) -> Iterator[Any]:
        if validator.is_type(instance, "object"):
            for key, sub in props.items():
                if isinstance(sub, dict) and "default" in sub:
                    instance.setdefault(key, copy.deepcopy(sub["default"]))
        yield from properties(validator, props, instance, schema)

    filling = jsonschema.validators.extend(base, {"properties": fill_then_validate})
    return filling(json.loads(schema_text(name)))


def _validity(name: str, value: Any) -> tuple[bool, bool]:
    """Ours and the reference's verdicts; for a valid value, also that we fill in the same
    defaults as the reference."""
    ours = not load_schema(name).validate(value)
    reference = oracle(name).is_valid(value)
    if ours and reference:
        expected = copy.deepcopy(value)
        assert not list(_filling_oracle(name).iter_errors(expected))
        assert load_schema(name).fill_defaults(copy.deepcopy(value)) == expected, "defaults differ"
    return ours, reference


scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-3, 70),
    st.floats(-2, 5, allow_nan=False),
    st.sampled_from(
        ["", "x", "worker", "OnFailure", "16Gi", "0Mi", "tfdeclare/v1", "TFJob", "/abs", "a-b", "TF_CONFIG"]
    ),
)
values = st.recursive(
    scalars,
    lambda children: st.one_of(
        st.lists(children, max_size=3),
        st.dictionaries(
            st.sampled_from(
                [
                    "count",
                    "cpus",
                    "mem",
                    "gpus",
                    "name",
                    "labels",
                    "env",
                    "command",
                    "worker",
                    "chief",
                    "ps",
                    "evaluator",
                    "resources",
                    "replicas",
                    "spec",
                    "metadata",
                    "extra",
                    "TF_CONFIG",
                    "X",
                ]
            ),
            children,
            max_size=4,
        ),
    ),
    max_leaves=12,
)


def _mutations() -> st.SearchStrategy[dict[str, Any]]:
    base = {
        "apiVersion": "tfdeclare/v1",
        "kind": "TFJob",
        "metadata": {"name": "a"},
        "spec": {
            "command": ["x"],
            "replicas": {"worker": {"count": 2, "resources": {"cpus": 1, "mem": "1Gi"}}},
        },
    }
    paths = [
        ("metadata",),
        ("metadata", "name"),
        ("spec",),
        ("spec", "replicas"),
        ("spec", "replicas", "worker"),
        ("spec", "replicas", "worker", "count"),
        ("spec", "replicas", "worker", "resources"),
        ("spec", "replicas", "worker", "resources", "mem"),
        ("spec", "env"),
        ("spec", "command"),
        ("spec", "restartPolicy"),
        ("spec", "volumes"),
        ("spec", "placement"),
    ]

    def mutate(args: tuple[tuple[str, ...], Any]) -> dict[str, Any]:
        path, value = args
        document = json.loads(json.dumps(base))
        target = document
        for key in path[:-1]:
            target = target.setdefault(key, {}) if isinstance(target, dict) else target
        if isinstance(target, dict):
            target[path[-1]] = value
        return document

    return st.tuples(st.sampled_from(paths), values).map(mutate)


@pytest.mark.slow  # 400 generated documents through both validators
@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_mutations())
def test_job_schema_agrees_with_the_reference_implementation(document: dict[str, Any]) -> None:
    ours, reference = _validity("job", document)
    assert ours == reference
    if not ours:
        assert _error_paths("job", document) <= _oracle_paths("job", document) | {()}


@pytest.mark.slow  # 300 generated documents through both validators
@settings(max_examples=300, deadline=None)
@given(values)
def test_status_and_config_schemas_agree_with_the_reference_implementation(value: Any) -> None:
    for name in ("status", "config"):
        ours, reference = _validity(name, value)
        assert ours == reference
