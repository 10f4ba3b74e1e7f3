"""Fuzzing of loading, validation and planning (issue 12): specs generated from
``schemas/job.schema.json`` (valid ones, and ones with one part broken), several files of them
planned against generated running jobs, and raw bytes with YAML-shaped splices. Property: never
an exception, only diagnostics, each naming its file and a 1-based line within it.

test_loading_properties.py feeds the loader noise around one fixed spec; here the documents
come from the schema, so every field and rule is reached. ``make test`` runs a modest number of
examples; ``make fuzz`` (``TFDECLARE_FUZZ_EXAMPLES``) the long run.
"""

from __future__ import annotations

import json
import os
import re
from functools import partial
from typing import Any

import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tfdeclare.backends import registry
from tfdeclare.core.diagnostics import Diagnostic
from tfdeclare.core.enums import Phase, Role
from tfdeclare.core.plan.desired import assemble
from tfdeclare.core.plan.markdown import render_markdown
from tfdeclare.core.plan.observed import ObservedJob
from tfdeclare.core.plan.planner import PlanOptions, plan
from tfdeclare.core.plan.render import render_json, render_text
from tfdeclare.core.spec.keys import TaskKey
from tfdeclare.core.spec.loader import FileResult, SpecCheck, load_file
from tfdeclare.core.spec.policy import check_task_count
from tfdeclare.core.spec.schema import schema_text

SCHEMA = json.loads(schema_text("job"))
EXAMPLES = int(os.environ.get("TFDECLARE_FUZZ_EXAMPLES", "40"))
FUZZ = settings(
    max_examples=EXAMPLES,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much, HealthCheck.data_too_large],
)
TEXT = st.text(max_size=12)
NAMES = st.sampled_from(["a", "b", "train", "x-1"])  # few names: duplicates and plan matches happen
JSON_SCALARS = st.one_of(st.none(), st.booleans(), st.integers(-(2**70), 2**70), st.floats(), TEXT)
ANY_JSON = st.recursive(
    JSON_SCALARS,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(TEXT, inner, max_size=3),
    max_leaves=8,
)


def _resolve(schema: dict[str, Any]) -> dict[str, Any]:
    while "$ref" in schema:
        schema = {
            **SCHEMA["$defs"][schema["$ref"].rsplit("/", 1)[1]],
            **{k: v for k, v in schema.items() if k != "$ref"},
        }
    return schema


def from_schema(schema: dict[str, Any] | bool, depth: int = 0) -> st.SearchStrategy[Any]:
    """Values the schema accepts, for the keywords job.schema.json uses (mostly valid: what a
    keyword here does not enforce, like a pattern's extra rules, the loader still checks)."""
    key = (json.dumps(schema, sort_keys=True), depth)
    if key not in _STRATEGIES:
        _STRATEGIES[key] = _from_schema(schema, depth)
    return _STRATEGIES[key]


_STRATEGIES: dict[tuple[str, int], st.SearchStrategy[Any]] = {}  # built once: drawing is the cost


def _from_schema(schema: dict[str, Any] | bool, depth: int) -> st.SearchStrategy[Any]:
    if schema is True or schema == {}:
        return JSON_SCALARS
    assert isinstance(schema, dict)
    schema = _resolve(schema)
    if "const" in schema:
        return st.just(schema["const"])
    if "enum" in schema:
        return st.sampled_from(schema["enum"])
    if "anyOf" in schema:
        return st.one_of([from_schema(s, depth) for s in schema["anyOf"]])
    kind = schema.get("type", "string" if "pattern" in schema else None)
    if isinstance(kind, list):
        return st.one_of([from_schema({**schema, "type": k}, depth) for k in kind])
    if kind == "object" or "properties" in schema:
        return _object(schema, depth)
    if kind == "array":
        items = from_schema(schema.get("items", True), depth + 1)
        return st.lists(items, min_size=schema.get("minItems", 0), max_size=max(schema.get("minItems", 0), 3))
    if kind == "string":
        if "pattern" in schema:
            text = st.from_regex(schema["pattern"], fullmatch=True)
        else:
            text = st.text(min_size=schema.get("minLength", 0), max_size=12)
        if "maxLength" in schema:
            text = text.filter(lambda s: len(s) <= schema["maxLength"])
        return text.filter(lambda s: len(s) >= schema.get("minLength", 0))
    if kind == "integer":
        return st.integers(schema.get("minimum", -5), schema.get("maximum", 5000))
    if kind == "number":
        low = schema.get("minimum", schema.get("exclusiveMinimum", -5))
        return st.floats(low, 512, exclude_min="exclusiveMinimum" in schema) | st.integers(int(low) + 1, 64)
    if kind == "boolean":
        return st.booleans()
    return JSON_SCALARS


def _object(schema: dict[str, Any], depth: int) -> st.SearchStrategy[dict[str, Any]]:
    properties = schema.get("properties", {})
    required = set(schema.get("required", ()))
    extra = schema.get("additionalProperties", True)

    @st.composite
    def build(draw: st.DrawFn) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for key, sub in properties.items():
            if key in required or (depth < 4 and draw(st.booleans())):
                out[key] = draw(from_schema(sub, depth + 1))
        while properties and len(out) < schema.get("minProperties", 0):
            key = draw(st.sampled_from(sorted(properties)))
            out[key] = draw(from_schema(properties[key], depth + 1))
        if extra is not False and not properties:
            names = from_schema(schema.get("propertyNames", {"type": "string", "minLength": 1}), depth + 1)
            values = from_schema(extra, depth + 1) if isinstance(extra, dict) else JSON_SCALARS
            out.update(
                draw(st.dictionaries(names, values, min_size=schema.get("minProperties", 0), max_size=3))
            )
        return out

    return build()


VALID_JOBS = from_schema(SCHEMA)


@st.composite
def broken(draw: st.DrawFn, document: dict[str, Any]) -> dict[str, Any]:
    """One part of a document replaced, dropped, or an unknown key added."""
    paths: list[tuple[Any, ...]] = []

    def walk(value: Any, path: tuple[Any, ...]) -> None:
        paths.append(path)
        if isinstance(value, dict):
            for key, inner in value.items():
                walk(inner, (*path, key))
        elif isinstance(value, list):
            for index, inner in enumerate(value):
                walk(inner, (*path, index))

    walk(document, ())
    path = draw(st.sampled_from(paths[1:] or [()]))
    if not path:
        return document
    parent = document
    for step in path[:-1]:
        parent = parent[step]
    how = draw(st.sampled_from(["replace", "drop", "unknown"]))
    if how == "replace":
        parent[path[-1]] = draw(ANY_JSON)
    elif how == "drop":
        del parent[path[-1]]
    elif isinstance(parent, dict):
        parent[draw(TEXT.filter(bool))] = draw(ANY_JSON)
    return document


JOBS = VALID_JOBS.flatmap(lambda job: st.one_of(st.just(job), broken(job)))


@st.composite
def spec_file(draw: st.DrawFn) -> bytes:
    """Some documents of generated jobs (a few names shared), dumped as YAML in either style."""
    documents = []
    for _ in range(draw(st.integers(1, 3))):
        job = draw(JOBS)
        if isinstance(job.get("metadata"), dict) and draw(st.booleans()):
            job["metadata"]["name"] = draw(NAMES)
        documents.append(job)
    flow = draw(st.sampled_from([None, True, False]))
    text = yaml.safe_dump_all(
        documents, default_flow_style=flow, sort_keys=draw(st.booleans()), allow_unicode=True
    )
    return text.encode()


def _clean(result: FileResult, data: bytes) -> None:
    lines = len(re.split(rb"\r\n|\r|\n", data))  # as editors count them
    for diagnostic in result.diagnostics:
        assert isinstance(diagnostic, Diagnostic)
        assert diagnostic.path == result.path, diagnostic
        assert diagnostic.line is not None and 1 <= diagnostic.line <= lines, diagnostic
        assert diagnostic.column is None or diagnostic.column >= 1, diagnostic
        assert diagnostic.message and "Traceback" not in diagnostic.message
        assert diagnostic.format().startswith(f"{result.path}:{diagnostic.line}")


def _checks(backend: str, max_tasks: int) -> tuple[SpecCheck, ...]:
    """What validate, plan, apply and the daemon check besides the schema (with default config)."""
    plugin = registry.plugin(backend)
    return (partial(check_task_count, max_tasks), partial(plugin.check_job, plugin.config_type()))


def _observed(result: FileResult, draw: st.DrawFn) -> dict[str, ObservedJob]:
    """Running jobs made from loaded ones, in any phase, on any backend, with any tasks alive."""
    keys = st.builds(TaskKey, st.sampled_from(list(Role)), st.integers(0, 3))
    return {
        job.name: ObservedJob(
            name=job.name,
            canonical=job.canonical,
            spec_hash=job.spec_hash,
            phase=draw(st.sampled_from(list(Phase))),
            source=job.source,
            running=tuple(sorted(set(draw(st.lists(keys, max_size=4))), key=lambda k: (k.role, k.index))),
            backend=draw(st.sampled_from([None, "local", "mesos"])),
        )
        for job in result.jobs
    }


@FUZZ
@given(spec_file())
def test_generated_specs_load_with_clean_diagnostics(data: bytes) -> None:
    result = load_file("specs/job.yaml", data)
    _clean(result, data)
    assert len(result.jobs) <= len(result.named) or not result.named


@FUZZ
@given(st.lists(spec_file(), min_size=1, max_size=3), spec_file(), st.data())
def test_generated_specs_plan_against_generated_running_jobs(
    files: list[bytes], running: bytes, data: st.DataObject
) -> None:
    backend = data.draw(st.sampled_from(registry.names()))
    checks = _checks(backend, data.draw(st.integers(1, 1000)))
    results = [load_file(f"specs/{i}.yaml", text, checks) for i, text in enumerate(files)]
    for result, text in zip(results, files, strict=True):
        _clean(result, text)
    observed = _observed(load_file("old/jobs.yaml", running), data.draw)
    options = PlanOptions(
        prune=data.draw(st.booleans()),
        allow_empty=data.draw(st.booleans()),
        backend=data.draw(st.sampled_from([None, backend])),
    )
    made = plan(assemble(results), observed, options)
    assert {job.name for job in made.jobs} >= set(observed)
    render_text(made)
    render_markdown(made)
    json.loads(render_json(made))


@FUZZ
@given(spec_file(), st.lists(st.tuples(st.integers(0, 4096), st.binary(max_size=6)), max_size=4))
def test_generated_specs_with_raw_bytes_spliced_in_never_crash(
    data: bytes, splices: list[tuple[int, bytes]]
) -> None:
    for position, junk in splices:
        position %= len(data) + 1
        data = data[:position] + junk + data[position + len(junk) // 2 :]
    result = load_file("specs/spliced.yaml", data)
    _clean(result, data)


def test_a_yaml_1_1_line_break_character_does_not_shift_diagnostic_lines() -> None:
    """libyaml (YAML 1.1) counts U+0085, U+2028 and U+2029 as line breaks, editors (and YAML
    1.2) do not: every diagnostic after one pointed a line too far down (found by this fuzzer)."""
    data = "apiVersion: tfdeclare/v1\nkind: TFJob\nmetadata: {name: nel}\nspec:\n  env: {A: 'a\x85b'}\n  replicas:\n    ps: {}\n"
    result = load_file("nel.yaml", data.encode())
    assert [(d.line, d.column) for d in result.diagnostics] == [(6, 3), (7, 5)]
