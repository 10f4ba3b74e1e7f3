"""The status writer's ``dump`` (libyaml's emitter fed with events, ``shell/statuswriter.py``)
writes exactly the bytes ``yaml.dump`` with ``CSafeDumper`` writes: over generated status
documents (task names, reasons, messages with unicode, quotes, line breaks, colons, ``#``,
numbers that look like other types, nulls, empty lists and maps), over real status documents,
and for what it hands to ``yaml.dump`` (a container seen twice, another type)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from tfdeclare.core.enums import Phase
from tfdeclare.core.run import status
from tfdeclare.shell.statuswriter import dump

_DUMPER = getattr(yaml, "CSafeDumper", yaml.SafeDumper)


def reference(document: Any) -> str:
    return yaml.dump(document, Dumper=_DUMPER, sort_keys=False, allow_unicode=True, default_flow_style=False)


# Strings a YAML writer must treat with care: look like numbers, booleans, nulls, timestamps,
# indicators, comments, keys; plus any text at all.
_TRICKY = st.sampled_from(
    [
        "",
        " ",
        "null",
        "Null",
        "~",
        "true",
        "no",
        "yes",
        "on",
        "1",
        "-1",
        "0x1f",
        "0o7",
        "1e3",
        "1_000",
        ".inf",
        "-.Inf",
        ".nan",
        "2026-12-04",
        "2026-12-04T03:55:00Z",
        "12:30:00",
        "<<",
        "=",
        "a: b",
        "a #b",
        "#c",
        "- x",
        "? y",
        "'q'",
        '"d"',
        "x\ny",
        "\n",
        "tab\there",
        " lead",
        "trail ",
        "é ü 中文 🙂",
        "\u0085",
        "\u2028",
        "\ufeff",
        "\x07",
        "!tag",
        "&a",
        "*a",
        "%x",
        "@x",
        "`x",
        "|",
        ">",
        "{a}",
        "[b]",
        "a,b",
        "x" * 200,
        "word " * 30,
        "tfdeclare logs big --task worker-0",
        "worker-0",
        "127.0.0.1",
        "::1",
        "Running",
        "AllTasksRunning",
    ]
)
_TEXT = st.one_of(_TRICKY, st.text(max_size=120), st.text(alphabet="ab :#'\"\n-.0123", max_size=40))
_SCALAR = st.one_of(_TEXT, st.none(), st.booleans(), st.integers(min_value=-(2**70), max_value=2**70))


def _task(draw: st.DrawFn) -> dict[str, Any]:
    return {
        "id": draw(_TEXT),
        "role": draw(st.sampled_from(["chief", "ps", "worker", "evaluator", "tensorboard"])),
        "index": draw(st.integers(0, 10_000)),
        "attempt": draw(st.integers(0, 100)),
        "state": draw(st.sampled_from(["pending", "running", "succeeded", "failed", "gone"])),
        "host": draw(st.one_of(st.none(), _TEXT)),
        "port": draw(st.one_of(st.none(), st.integers(1, 65535))),
        "exitCode": draw(st.one_of(st.none(), st.integers(-255, 255))),
        "startTime": draw(st.one_of(st.none(), _TEXT)),
        "finishTime": draw(st.one_of(st.none(), _TEXT)),
        "message": draw(_TEXT),
        "log": draw(st.one_of(st.none(), _TEXT)),
    }


@st.composite
def status_documents(draw: st.DrawFn) -> dict[str, Any]:
    nested = st.recursive(
        _SCALAR,
        lambda inner: st.one_of(st.lists(inner, max_size=3), st.dictionaries(_TEXT, inner, max_size=3)),
        max_leaves=8,
    )
    return {
        "apiVersion": "tfdeclare/v1",
        "kind": "TFJobStatus",
        "name": draw(_TEXT),
        "phase": draw(st.sampled_from(["Pending", "Running", "Restarting", "Succeeded", "Failed"])),
        "revision": draw(st.one_of(st.none(), _TEXT)),
        "revisionInfo": draw(st.one_of(st.none(), st.dictionaries(_TEXT, _TEXT, max_size=3))),
        "restarts": draw(st.integers(0, 10)),
        "replicas": draw(
            st.dictionaries(_TEXT, st.dictionaries(_TEXT, st.integers(), max_size=4), max_size=3)
        ),
        "tasks": [_task(draw) for _ in range(draw(st.integers(0, 6)))],
        "taskRestarts": draw(st.lists(st.dictionaries(_TEXT, _SCALAR, max_size=4), max_size=2)),
        "conditions": draw(st.lists(st.dictionaries(_TEXT, _SCALAR, max_size=5), max_size=3)),
        "extra": draw(nested),
        "message": draw(_TEXT),
        "updatedAt": draw(st.one_of(st.none(), _TEXT)),
    }


@settings(max_examples=400, deadline=None)
@given(status_documents())
def test_dump_writes_what_yaml_dump_writes(document: dict[str, Any]) -> None:
    assert dump(document) == reference(document)


@settings(max_examples=200, deadline=None)
@given(st.dictionaries(_TEXT, _SCALAR, max_size=6), _SCALAR)
def test_any_flat_document_and_its_keys(document: dict[str, Any], value: Any) -> None:
    document = {**document, "k": value, "": {}, "l": [], "m": [[], {}, [value]]}
    assert dump(document) == reference(document)


def test_real_status_documents_are_written_as_yaml_dump_writes_them(tmp_path: Path) -> None:
    from tests.test_shell_state import documents_in_every_phase

    documents = list(documents_in_every_phase(tmp_path))
    assert documents
    for document in documents:
        assert dump(document) == reference(document), document["name"]


def test_what_only_the_representer_writes_goes_to_yaml_dump() -> None:
    shared = {"a": 1}
    aliased = {"x": shared, "y": shared}  # an anchor and an alias
    assert "&id001" in dump(aliased) and dump(aliased) == reference(aliased)
    floats = {"f": 1.5, "g": float("inf"), "h": [1e300]}
    assert dump(floats) == reference(floats)
    tuples = {"t": (1, "a"), "u": (), "s": {1, 2}, "l": [{3}, [()]]}
    assert dump(tuples) == reference(tuples)
    with pytest.raises(yaml.representer.RepresenterError):
        dump({"phase": Phase.RUNNING})  # as yaml.dump with the safe dumper: no enums
    with pytest.raises(yaml.representer.RepresenterError):
        reference({"phase": Phase.RUNNING})


def test_a_big_job_status_is_written_as_yaml_dump_writes_it() -> None:
    tasks = [
        {
            "id": f"big-w{i}-a1",
            "role": "worker",
            "index": i,
            "attempt": 1,
            "state": "pending" if i % 3 else "running",
            "host": None if i % 3 else "127.0.0.1",
            "port": None if i % 3 else 20000 + i,
            "exitCode": None,
            "startTime": None if i % 3 else "2026-12-04T03:55:00.123456Z",
            "finishTime": None,
            "message": "" if i % 7 else "exit 1: it said 'no': #1",
            "log": f"tfdeclare logs big --task worker-{i}",
        }
        for i in range(2000)
    ]
    document = {"name": "big", "status": status.__name__, "tasks": tasks}
    assert dump(document) == reference(document)


# words, and what only looks like one: written directly by ``dump`` when the resolver agrees
_WORDISH = st.one_of(
    st.text(alphabet="az09._/-", min_size=1, max_size=20),
    st.sampled_from(
        ["1", "0x1f", "1.5", "1_000", "2026-12-06", "true", "Off", "null", "a" * 130, "-x", ".x"]
    ),
)
_WORD_TREE = st.recursive(
    st.one_of(_WORDISH, st.integers(), st.booleans(), st.none()),
    lambda inner: st.one_of(st.lists(inner, max_size=3), st.dictionaries(_WORDISH, inner, max_size=3)),
    max_leaves=10,
)


@settings(max_examples=300, deadline=None)
@given(st.lists(st.dictionaries(_WORDISH, _WORD_TREE, min_size=1, max_size=6), min_size=1, max_size=4))
def test_entries_written_directly_or_kept_are_what_yaml_dump_writes(documents: list[dict[str, Any]]) -> None:
    """Each document twice and mixed with the others: the entries kept from one are the
    other's too when equal, never when only alike (``1`` and ``True``, ``"1"`` and ``1``)."""
    mixed = {k: v for document in documents for k, v in document.items()}
    for document in [*documents, mixed, *documents]:
        assert dump(document) == reference(document)
    alike = {"a": 1, "b": [1], "c": {"x": 1}}
    for value in (True, "1", 1.0, [True], {"x": "1"}):
        assert dump(alike) == reference(alike)
        other = dict.fromkeys(alike, value)
        assert dump(other) == reference(other)


def test_a_container_shared_by_two_entries_is_written_as_a_whole() -> None:
    shared = ["a", "b"]
    document = {"one": {"list": shared}, "two": shared}
    assert "&id001" in dump(document) and dump(document) == reference(document)
    assert dump({"one": {"list": shared}}) == reference({"one": {"list": shared}}), "kept apart"
