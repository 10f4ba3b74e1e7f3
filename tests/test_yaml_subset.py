"""The subset reader against the full path (libyaml's composer and our converter).

Wherever ``parse_subset`` answers, its values (types included), document lines and recorded
positions must be exactly what the full path gives for the same text, and the full path must
find nothing wrong with that text; ``parse_documents`` must give the same documents and the
same diagnostics with and without the subset reader, whatever the text. Checked on a table of
texts the reader must take, a table it must leave to the full path, generated documents in
many styles, and mutated job files.
"""

from __future__ import annotations

import itertools
import json
import math
import random
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, note, settings
from hypothesis import strategies as st

from bench.common import job_text  # the benchmark's generated job files
from tfdeclare.core.diagnostics import Diagnostic
from tfdeclare.core.spec.documents import Document, parse_documents
from tfdeclare.core.spec.scalars import resolve_plain
from tfdeclare.core.spec.yaml_subset import parse_subset

SOURCE = "subset.yaml"
REPO = Path(__file__).resolve().parents[1]
SPECS = {path.name: path.read_text() for path in sorted((REPO / "specs").glob("*.yaml"))}

# --------------------------------------------------------------------------------------------
# The differential check


def _typed(value: Any) -> Any:
    """``value`` with every scalar's type made part of it (``1``, ``1.0`` and ``True`` differ)
    and mapping order made irrelevant."""
    if type(value) is dict:
        return ("dict", sorted((str(key), type(key).__name__, _typed(item)) for key, item in value.items()))
    if type(value) is list:
        return ("list", [_typed(item) for item in value])
    if type(value) is int:
        return ("int", hex(value))  # hex: a huge integer has no decimal repr
    return (type(value).__name__, repr(value))


def _documents(documents: list[Document]) -> list[tuple[int, int, bool, Any]]:
    return [(doc.index, doc.line, doc.refused, _typed(doc.value)) for doc in documents]


def _paths(value: Any, prefix: tuple[str | int, ...] = ()) -> Iterator[tuple[str | int, ...]]:
    """Every JSON path in ``value``, and one missing child of each collection."""
    yield prefix
    if type(value) is dict:
        yield (*prefix, "no such key")
        for key, item in value.items():
            yield from _paths(item, (*prefix, key))
    elif type(value) is list:
        yield (*prefix, len(value))
        for index, item in enumerate(value):
            yield from _paths(item, (*prefix, index))


def check(text: str, *, locate: bool = True) -> list[tuple[int, Any, Any]] | None:
    """Asserts the contract for one text; returns what the subset reader answered."""
    data = text.encode("utf-8")
    full, full_problems = parse_documents(SOURCE, data, subset=False)
    both, both_problems = parse_documents(SOURCE, data)
    assert both_problems == full_problems
    assert _documents(both) == _documents(full)
    fast = parse_subset(text.removeprefix("\ufeff"))  # as parse_documents reads it
    if fast is None:
        return None
    assert full_problems == [], f"the subset reader took a text the full path rejects: {full_problems}"
    assert [(line, _typed(value)) for line, value, _ in fast] == [
        (doc.line, _typed(doc.value)) for doc in full
    ]
    for (_, value, positions), full_doc, both_doc in zip(fast, full, both, strict=True):
        for path, place in positions.items():
            assert place == full_doc.locate(path), f"position of {path}"
        if locate:
            for path in _paths(value):
                for key in (False, True):
                    assert both_doc.locate(path, key=key) == full_doc.locate(path, key=key), (path, key)
    # Without aliases a text has fewer nodes than characters (but one): the node bound agrees.
    bound = len(text) + 1
    small, small_problems = parse_documents(SOURCE, data, max_nodes=bound, subset=False)
    assert small_problems == []
    assert _documents(small) == _documents(full)
    return fast


def _check_noted(text: str) -> list[tuple[int, Any, Any]] | None:
    """``check`` in a property test: a failure shows the text."""
    note(f"text = {text!r}")
    return check(text)


def _short(text: str) -> str:
    """A test id: the text, cut short (some are thousands of characters)."""
    return ascii(text)[1:-1] if len(text) <= 60 else f"{ascii(text[:40])[1:-1]}...({len(text)} chars)"


def _accepted(text: str) -> list[tuple[int, Any, Any]]:
    fast = check(text)
    assert fast is not None, "the subset reader should take this text"
    return fast


# --------------------------------------------------------------------------------------------
# Texts the subset reader must take


JOBS = [job_text(f"job-{i:05d}", random.Random(i)) for i in range(3)]

ACCEPTED = [
    *JOBS,
    "a: 1\n",
    "a: 1",
    "",
    "# only a comment\n",
    "\n\n  # indented comment only\n\n",
    # numbers in every YAML 1.2 core form, and what only looks like one
    "a: -1\nb: +2\nc: .5\nd: 1e3\ne: 0o17\nf: 0x1f\ng: 1.5\nh: -.5e-3\ni: 007\nj: +.5\nk: 5.\nl: 1E+3\nm: 0x1F\n",
    "a: 0o8\nb: 0x\nc: 1_000\nd: 1.2.3\ne: inf\nf: nan\ng: .\nh: +\ni: 0b101\nj: 1e\nk: 0X1f\nl: ..5\nm: 12:30\n",
    "a: -0\nb: -0.0\nc: 0.0\nd: 00\ne: +0\nf: 1e-400\ng: 1e400x\n",
    # nulls and booleans; YAML 1.1 booleans stay strings
    "a: null\nb: ~\nc:\nd: Null\ne: NULL\nf: true\ng: False\nh: TRUE\ni: false\nj: True\n",
    "a: yes\nb: NO\nc: on\nd: Off\ne: y\nf: n\ng: Yes\nh: OFF\ni: tRUE\nj: nULL\nk: nul\n",
    # block sequences: indentless, indented, nested, compact
    "list:\n- a\n- b\n",
    "list:\n  - a\n  - b\n",
    "list:\n    -   a\n    -   b\n",
    "- a\n- b: c\n  d: e\n- - x\n  - y\n-\n  k: v\n-\n",
    "- - - x\n    - y\n  - z\n- w\n",
    "-\n-\n- ''\n",
    "- -\n- -1\n- --\n- ---\n- --- x\n",
    "items:\n- name: a\n  value: 1\n- name: b\n  value: [1, 2]\n",
    "a:\n- b\n- c\nd: e\n",
    "- a:\n  - x\n  b: y\n",
    "- a:\n    - x\n  b: y\n-   c:\n    - z\n",
    "- a:\n- b\n",
    "a:\n  b:\n  - 1\n  - 2\n  c:\n    - 3\n",
    "-\n  - x\n  -\n    y: z\n",
    # flow collections
    "a: {a: [1, 2], b: {c: d}}\n",
    "a: [1, [2, [3]], {}, [], {x: y}]\n",
    "a: [--ps_hosts=1, 'b c', \"d\", -1, 0x1f, null, ~, true, yes, '', \"\"]\n",
    "a: {k: v, 'q': 'r', \"s\": \"t\", n: null, i: 1, f: 1.5, b: false}\n",
    "a: [ 1, 2 ]\nb: { c: d }\nc: [a , b]\nd: { e : f }\n",
    "a: [a  b, c d]\nb: [a,b]\nc: {a: b,c: d}\n",
    "a: [[[[1]]]]\nb: {a: {b: {c: {}}}}\n",
    "empty: {}\nlist: []\nnested: [{}, [], [{}]]\n",
    "a: [a#b, a'b, 'it''s', a-b, -a, a?, a!, a&b, a|b, a>b, a%b, a@b, a=b, <<]\n",
    "a: ['', '''', 'a b', 'a#b', 'a-b', \"a'b\", \"x y\", \"\"]\n",
    "a: {'k': \"v\", \"x y\": 'z w'}\n",
    "a: {'': x, 'k''': y}\n",
    "- [a, b]\n- {c: d}\n- [[1], {e: [f]}]\n",
    "a: [1, 2] # a comment\nb: {c: d}   # another\n",
    # keys: quoted, odd characters, numbers as strings
    "'quoted key': 1\n\"double key\": 2\n'it''s': 3\n'1': one\n\"true\": t\n'': empty\n\"null\": n\n",
    "a.b/c-d_e: 1\nkey-1: 2\n_x: 3\n1a: 4\nx1: 5\n1.2.3: 6\n1_000: 7\nyes: 8\nno: 9\ny: 10\n",
    "'a: b': 1\n\"a #b\": 2\n'[x]': 3\n'- y': 4\n",
    "a : 1\nb   : 2\n'c' : 3\n",
    "- 'a': 1\n  \"b\": 2\n- 'c: d': e\n",
    # scalars that hold indicators, and quoted ones
    "a: 'x: y # z'\nb: \"[1, 2]\"\nc: ''\nd: \"\"\ne: 'a''b'\nf: '#'\ng: \"#\"\nh: '  '\n",
    "a: x#y\nb: x:y\nc: it's\nd: a \"b\" c\ne: --flag=1\nf: -x\ng: x, y\nh: x]\ni: a :b\nj: x}\nk: a'\n",
    "a: ...\nb: ---\nc: '...'\nd: =\ne: <<\nf: -#\ng: a - b\nh: x|y\n",
    "k: x y z\nl: x   y\n",
    "a: http://example.com/x?y=1#z\nb: /data/x\nc: 4Gi\nd: 2.21.0\ne: registry.example.com/tf:2.21.0\n",
    "a: 'b' # c\nb: \"c\"   # d\nc: d # e\n",
    # comments everywhere, blank lines, trailing spaces
    "# head\na: 1 # trailing\n  # indented comment\nb:   # comment after key\n  c: d\n# end\n",
    "a:\n  b: 1\n# at column 0\n  c: 2\n      # deeper\n",
    "\n\na: 1\n\n\nb:\n\n  - x\n\n  - y\n\n",
    "key: value   \nother:    \n  x: 1  \n",
    "- a # c\n- # c\n  b: c\n",
    # indentation widths
    "a:\n    b:\n      c: 1\n    d: 2\ne:\n f: 3\n",
    "  a: 1\n  b: 2\n",
    "   - a\n   - b\n",
    # several documents
    "a: 1\n---\nb: 2\n--- # comment\n- c\n",
    "---\na: 1\n",
    "# comment\n---\na: 1\n---\n# comment\nb: 2\n",
    "---   \na: 1\n---\n  b: 2\n",
    "- a\n---\n- b\n---\nc: d\n",
    "a:\n  b: 1\n---\na:\n  b: 2\n",
    "\n\n# x\n\n---\n\n\na: 1\n",
    # nesting the full path still takes (the subset stops well below its bound)
    "a:\n" + "".join("  " * depth + f"k{depth}:\n" for depth in range(1, 30)) + "  " * 30 + "v: 1\n",
    "a: " + "[" * 30 + "1" + "]" * 30 + "\n",
    "- " * 30 + "x\n",
    # long lines that are still short enough
    "k: " + "v" * 1000 + "\n",
    "k" * 1000 + ": v\n",
]


@pytest.mark.parametrize("text", ACCEPTED, ids=_short)
def test_subset_takes_common_yaml_and_agrees(text: str) -> None:
    _accepted(text)


@pytest.mark.parametrize("name", sorted(SPECS))
def test_subset_takes_example_specs_and_agrees(name: str) -> None:
    _accepted(SPECS[name])


def test_subset_types_and_positions() -> None:
    """A few exact answers (not only agreement): the YAML 1.2 core schema, and positions."""
    [(line, value, positions)] = _accepted(
        "# c\nmetadata:\n  name: x\n  labels: {a: 1}\n"
        "v: [0o17, 0x1f, 1e3, -1, +2, .5, null, ~, true, False, yes, NO, on, '1', \"2\"]\n"
        "q: 'it''s'\n"
    )
    assert line == 2
    assert _typed(value["v"]) == _typed(
        [15, 31, 1000.0, -1, 2, 0.5, None, None, True, False, "yes", "NO", "on", "1", "2"]
    )
    assert value["q"] == "it's"
    assert positions[("metadata", "name")] == (3, 9)
    assert positions[("q",)] == (6, 4)
    assert [line for line, _, _ in _accepted("a: 1\n---\n# c\n\n  b: 2\n--- # x\n- 3\n")] == [1, 5, 7]


# --------------------------------------------------------------------------------------------
# Texts the subset reader must leave to the full path

DEEP_BLOCK = "".join("  " * depth + f"k{depth}:\n" for depth in range(70)) + "  " * 70 + "v: 1\n"

DECLINED = [
    # YAML outside the subset
    "a: &x 1\nb: *x\n",
    "a: &x [1]\n",
    "a: !!str 1\n",
    "a: !!int '1'\n",
    "a: !t x\n",
    "!!map\na: 1\n",
    "a: |\n  x\n",
    "a: >\n  x\n",
    "a: |-\n",
    "a: b\n  c\n",
    "- a\n  b\n",
    "a: 'b\n  c'\n",
    'a: "b\n  c"\n',
    "a: [1,\n  2]\n",
    "a: {b: c,\n  d: e}\n",
    "a:\tb\n",
    "\ta: b\n",
    "a: b\t\n",
    "a: b\r\n",
    "a: b\rc: d\n",
    "a: \u00e9\n",
    "\u00e9: a\n",
    "a: b # \u00e9\n",
    "a: \x7f\n",
    "a: \x00\n",
    "%YAML 1.2\n---\na: 1\n",
    "%TAG ! tag:x,2000:\n---\na: 1\n",
    "a: 1\n...\n",
    "a: 1\n...\n---\nb: 2\n",
    "--- a\n",
    "--- {a: 1}\n",
    "---\n",
    "a: 1\n---\n",
    "---\n---\na: 1\n",
    "a: 1\n---\n# only a comment\n",
    "? a\n: b\n",
    'a: "a\\nb"\n',
    'a: "\\x41"\n',
    'a: ["a\\tb"]\n',
    # what YAML or the full path rejects
    "a: 1\na: 2\n",
    "a: 1\n'a': 2\n",
    'a: 1\n"a": 2\n',
    "- a: 1\n  a: 2\n",
    "x:\n  a: 1\n  a: 2\n",
    "a: {b: 1, b: 2}\n",
    "a: {b: 1, 'b': 2}\n",
    "a: [{b: 1, c: 2, b: 3}]\n",
    "1: x\n",
    "-1: x\n",
    "0x1f: x\n",
    "0o17: x\n",
    "1e3: x\n",
    ".5: x\n",
    "true: x\n",
    "False: x\n",
    "null: x\n",
    "NULL: x\n",
    "~: x\n",
    ": x\n",
    "a: {1: x}\n",
    "a: {true: x}\n",
    "a: {null: x}\n",
    "a: {~: x}\n",
    "a: [{1.5: x}]\n",
    "a: .inf\n",
    "a: -.Inf\n",
    "a: +.INF\n",
    "a: .nan\n",
    "a: 1e400\n",
    "a: [-1e999]\n",
    "a: .NaN\n",
    "a: [.inf]\n",
    "a: {b: .nan}\n",
    "- -.inf\n",
    "k" * 1025 + ": x\n",
    "'" + "k" * 1025 + "': x\n",
    '"' + "k" * 1025 + '": x\n',
    "a" + "_" * 1030 + ": x\n",
    "- " + "k" * 1025 + ": x\n",
    "a: {" + "k" * 1025 + ": x}\n",
    "a: " + "9" * 4301 + "\n",
    "a: -" + "9" * 4301 + "\n",
    "a: [" + "9" * 4301 + "]\n",
    "9" * 4301 + ": x\n",
    "a:\n  b: 1\n c: 2\n",
    "a: 1\n b: 2\n",
    "  a: 1\nb: 2\n",
    "a:\n  - x\n  b: y\n",
    "a:\n  - x\n - y\n",
    "- x\na: b\n",
    "- - x\n  a: b\n",
    "key: - x\n",
    "- - x\n - y\n",
    "a: 'x' y\n",
    'a: "x" y\n',
    "a: 'x''\n",
    'a: "x\n',
    "a: [1, 2] x\n",
    "a: [1, 2]]\n",
    "a: [1, 2\n",
    "a: {b: c\n",
    "a: {b: c]\n",
    "a: [a #b]\n",
    "a: b: c\n",
    "a: [- a]\n",
    "a: [1, , 2]\n",
    "a: [, 1]\n",
    "a: {: b}\n",
    "a: -\n",
    "a: ?\n",
    "a: :\n",
    "a: @x\n",
    "a: `x`\n",
    "a: %x\n",
    "a: *\n",
    "a: &\n",
    "a: [--task_index={task_index}]\n",
    "a: b:\n",
    "'a'b: c\n",
    # nesting deeper than the full path takes
    DEEP_BLOCK,
    "a: " + "[" * 70 + "]" * 70 + "\n",
    "a: " + "{b: " * 70 + "c" + "}" * 70 + "\n",
    "- " * 70 + "x\n",
]


@pytest.mark.parametrize("text", DECLINED, ids=_short)
def test_subset_leaves_the_rest_to_the_full_path(text: str) -> None:
    assert check(text) is None


# Texts either reader may answer: only the agreement is checked.
EITHER = [
    "-a: b\n",
    "a#: b\n",
    "a b: c\n",
    "a: {b}\n",
    "a: [?x]\n",
    "a:# c\n",
    "a:b\n",
    "a: 'x'#c\n",
    "a:\n  b\n",
    "'hello'\n",
    "hello\n",
    "{a: 1}\n",
    "[1, 2]\n",
    "a:\n  [1, 2]\n",
    "\ufeffa: 1\n",
    "a: [a, ]\n",
    "a: {b: c, }\n",
    "a: [a: b]\n",
    "a: {b: c, d}\n",
    "a: [http://x]\n",
    'a: {"b":c}\n',
    "a: [a]#c\n",
    "a: 'b'#c\n",
    "a:b: c\n",
    'a: ["a, b"]\n',
    "a: ['a, b', 'c']\n",
    "a: ['x'',''y']\n",
    "a: {x: 'a, b: c'}\n",
    "a:\n  # c\n  - x\n",
    "- a:\n - b\n",
    "a: 1\n---\nb: 2\n...\n",
    "- -1: x\n",
    "a: x\n\x0c",
    "a: [[]\n",
]


@pytest.mark.parametrize("text", EITHER, ids=_short)
def test_either_reader_agrees(text: str) -> None:
    check(text)


def _nested(shape: str, depth: int) -> str:
    if shape == "sequences":
        return "- " * depth + "x\n"
    if shape == "mappings":
        return "".join("  " * level + f"k{level}:\n" for level in range(depth)) + "  " * depth + "v: 1\n"
    if shape == "flow":
        return "a: " + "[" * depth + "]" * depth + "\n"
    return "a: " + "{b: [" * (depth // 2) + "]}" * (depth // 2) + "\n"


@pytest.mark.parametrize("shape", ["sequences", "mappings", "flow", "mixed"])
def test_nesting_near_both_bounds_agrees(shape: str) -> None:
    """The subset reader stops below the full path's depth bound, whatever the shape."""
    for depth in [1, 10, *range(44, 68)]:
        check(_nested(shape, depth), locate=False)
    assert parse_subset(_nested(shape, 40)) is not None


LONG_LINES = [
    "{k}: v", "{k}:", "'{k}': v", '"{k}": v', "- {k}: v", "a: {{{k}: v}}", "a:\n  {k}: v", "{k} : v",
    "a: {k}", "- {k}", "a: [{k}]", "a: v # {k}",
]  # fmt: skip


@pytest.mark.parametrize("template", LONG_LINES)
def test_keys_and_lines_near_the_simple_key_bound_agree(template: str) -> None:
    """libyaml refuses a key whose ":" is more than 1,024 characters past its start."""
    for size in range(1016, 1030):
        check(template.format(k="k" * size) + "\n", locate=False)
        check(template.format(k="1" * size) + "\n", locate=False)


# Every short scalar in every place a scalar can be (``{}`` is where it goes).
SCALAR_ALPHABET = " a1-:#,'\"[]{}?.~!&*|>%@`\\=eoxEnN+0"
SCALAR_PLACES = [
    "a: {}", "- {}", "a: [{}]", "a: {{{}: b}}", "a: {{b: {}}}", "{}: a", "- {}: a", "a: [{}, b]",
    "a: [b, {}]", "a: {{{}}}", "a:\n  {}", "- a: {}\n  b: c", "a: [[{}]]", "- [{}]", "a: {} # c",
]  # fmt: skip


@pytest.mark.parametrize("place", SCALAR_PLACES)
def test_every_short_scalar_in_every_place_agrees(place: str) -> None:
    taken = 0
    for size in (1, 2):
        for letters in itertools.product(SCALAR_ALPHABET, repeat=size):
            taken += check(place.format("".join(letters)) + "\n", locate=False) is not None
    assert taken  # the subset reader is exercised here, not only the full path


# Short lines of every kind at every indentation: every pair, and random runs of them.
LINE_KINDS = ["a:", "b: 1", "- x", "-", "- a:", "- b: 2", "- - y", "c: [1]", "'d': e", "# c", "a: 2", "-  c:"]
LINES = [" " * indent + kind for kind in LINE_KINDS for indent in range(4)] + ["---", ""]


def test_every_pair_of_short_lines_agrees() -> None:
    taken = 0
    for pair in itertools.product(LINES, repeat=2):
        taken += check("\n".join(pair) + "\n") is not None
    assert taken > 100


@settings(max_examples=1500, deadline=None, database=None)
@given(st.lists(st.sampled_from(LINES), min_size=3, max_size=8))
def test_short_lines_agree(lines: list[str]) -> None:
    _check_noted("\n".join(lines) + "\n")


# --------------------------------------------------------------------------------------------
# Generated documents

# Scalars drawn from a tricky set: words, numbers in many forms, YAML keywords, indicators.
WORDS = [
    "a", "b", "name", "x y", "a  b", "yes", "NO", "on", "Off", "y", "n",
    "null", "Null", "NULL", "~", "true", "True", "TRUE", "false", "FALSE", "tRUE", "nul",
    "0", "1", "-1", "+2", "007", "08", "0o17", "0o8", "0x1f", "0x1F", "0X1f", "0x",
    "1e3", "1E3", "1e+3", "-1.5e-3", ".5", "+.5", "-.5", "5.", "1.", ".", "..", "...",
    "1.2.3", "1_000", "-0", "-0.0", ".inf", "-.Inf", "+.INF", ".NaN", "inf", "nan", "12:30",
    "a:b", "a: b", "a:", ":a", ":", "a #b", "a#b", "#a", "#", "a,b", "a, b", ",",
    "[a]", "{a}", "[", "]", "{", "}", "a]", "a}", "a[", "{a: b}", "[]", "{}",
    "-", "-a", "- a", "--flag=1", "---", "--- a", "?", "?a", "? a", "a?",
    "'", "''", "'a'", "a'b", "it's", '"', 'a"b', '"a"', "\\", "a\\nb",
    "", " ", " a", "a ", "&a", "*a", "!a", "!!str", "|", ">", "%a", "@a", "`a",
    "<<", "=", "http://x/y", "/data/x", "4Gi", "2.21.0", "registry.example.com/tf:2.21.0",
]  # fmt: skip
# Scalars that always send a text to the full path (or make YAML reject it).
ODD_WORDS = ["a\u00e9", "a\tb", "a\rb", "\x7f", "<long key>", "<long integer>"]
LONG = {"<long key>": "k" * 1025, "<long integer>": "9" * 4301}
KEYS = ["a", "b", "c", "name", "spec", "key-1", "a.b", "a/b", "_x", "1a", "x1"]

scalar_texts = st.one_of(
    st.sampled_from(WORDS),
    st.sampled_from(WORDS),
    st.text(alphabet=" ab01.-+:#,'\"[]{}?~eox", max_size=5),
    st.sampled_from(ODD_WORDS),
)
# A scalar: (text, style); "raw" puts double quotes around the text without escaping it.
STYLES = ["plain", "plain", "plain", "single", "double", "raw"]
scalars = st.tuples(st.just("s"), scalar_texts, st.sampled_from(STYLES))
keys = st.tuples(
    st.just("s"),
    st.one_of(st.sampled_from(KEYS), st.sampled_from(KEYS), scalar_texts),
    st.sampled_from(STYLES),
)


def _collections(children: st.SearchStrategy[Any], least: int = 0) -> st.SearchStrategy[Any]:
    """("m", flow, [(key, value)]) and ("q", flow, indentless, [item])."""
    entries = st.lists(
        st.tuples(keys, children), min_size=least, max_size=4, unique_by=lambda entry: entry[0][1]
    )
    mappings = st.tuples(st.just("m"), st.booleans(), entries)
    items = st.lists(children, min_size=least, max_size=4)
    sequences = st.tuples(st.just("q"), st.booleans(), st.booleans(), items)
    return st.one_of(mappings, sequences)


nodes = st.recursive(scalars, _collections, max_leaves=16)
roots = st.one_of(_collections(nodes, 1), _collections(nodes, 1), _collections(nodes), scalars)

_NOT_PLAIN_START = frozenset("-?:,[]{}#&*!|>'\"%@` ")


def _plain_is_risky(text: str, *, flow: bool, key: bool) -> bool:
    """Whether ``text`` written plain may not read back as itself (a rough test: it only steers
    the generator towards valid YAML)."""
    if not text or text != text.strip(" ") or not text.isascii() or not text.isprintable():
        return True
    if (text[0] in _NOT_PLAIN_START and not (text[0] == "-" and text[1:2] not in ("", " "))) or (
        ": " in text or " #" in text or text.endswith(":")
    ):
        return True
    if flow and any(c in text for c in ",[]{}:"):
        return True
    try:
        value = resolve_plain(text)
    except ValueError:
        return True
    return (key and not isinstance(value, str)) or (isinstance(value, float) and not math.isfinite(value))


# The seed of the layout choices (plain ``random``: hypothesis's own is several times slower).
layouts = st.integers(0, 2**32)


class Renderer:
    """Writes a node tree as YAML text, each choice of layout drawn from ``rng``.

    With ``wild``, each text also draws how often it takes an odd choice: odd spacing, quoting
    that YAML may not read (plain scalars holding indicators, unescaped double quotes), odd
    comments; the rest of the time scalars are quoted where plain would not do.
    """

    def __init__(self, rng: random.Random, *, wild: bool = True) -> None:
        self.rng = rng
        self.odd = rng.choice([0.0, 0.0, 0.0, 0.02, 0.1, 0.5]) if wild else 0.0
        self.count = 0

    def chance(self, p: float) -> bool:
        return self.rng.random() < p

    def pick(self, common: list[str], odd: list[str]) -> str:
        return self.rng.choice(odd if self.chance(self.odd) else common)

    def scalar(self, node: Any, *, flow: bool = False, key: bool = False) -> str:
        _, text, style = node
        if not self.chance(self.odd):
            if text in ODD_WORDS:
                self.count += 1
                text = f"odd{self.count}"
            if style == "plain" and _plain_is_risky(text, flow=flow, key=key):
                style = self.rng.choice(["single", "double"])
            elif style == "raw":
                style = "double"
        text = LONG.get(text, text)
        if style == "single":
            return "'" + text.replace("'", "''") + "'"
        if style == "double":
            if self.chance(0.2):
                return json.dumps(text)  # escapes where JSON needs them
            return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'
        if style == "raw":
            return '"' + text + '"'
        return text

    def flow(self, node: Any, *, flow: bool = True) -> str:
        """A scalar or a flow collection (``flow``: inside one already)."""
        if node[0] == "s":
            return self.scalar(node, flow=flow)
        comma = self.pick([", ", ", ", ", ", ","], [" , ", ",  ", " ,"])
        inner = self.pick([""], [" "])
        if node[0] == "m":
            colon = self.pick([": "], [" : ", ":  ", ":"])
            body = comma.join(
                self.scalar(key, flow=True, key=True) + colon + self.flow(value) for key, value in node[2]
            )
            return "{" + inner + body + inner + "}"
        return "[" + inner + comma.join(self.flow(item) for item in node[3]) + inner + "]"

    def inline(self, node: Any) -> bool:
        """Whether a node goes on the line of its key or dash."""
        if node[0] == "s" or node[1]:
            return True
        return not (node[2] if node[0] == "m" else node[3])  # empty: only flow can say it

    def comment(self) -> str:
        if self.chance(0.08):
            return self.pick([" # c", "  # a: [b]", " #", " #- x"], ["# not a comment", " #\u00e9"])
        return self.rng.choice(["", " ", "  "]) if self.chance(0.1) else ""

    def width(self) -> int:
        return self.rng.choice([1, 2, 2, 2, 2, 3, 4])

    def block(self, node: Any, column: int) -> list[str]:
        pad = " " * column
        lines: list[str] = []
        if node[0] == "m":
            for key, value in node[2]:
                head = pad + self.scalar(key, key=True) + self.pick([":"], [" :"])
                if self.inline(value):
                    text = self.flow(value, flow=False)
                    space = self.pick([" ", " ", " ", "  "], [""]) if text or self.chance(0.2) else ""
                    lines.append(head + space + text + self.comment())
                else:
                    lines.append(head + self.comment())
                    indentless = value[0] == "q" and value[2]
                    lines += self.block(value, column if indentless else column + self.width())
            return lines
        for item in node[3]:
            space = self.pick([" ", " ", " ", "  "], ["   "])
            if self.inline(item):
                text = self.flow(item, flow=False)
                lines.append(pad + "-" + (space + text if text or self.chance(0.3) else "") + self.comment())
            elif self.chance(0.6):  # compact: ``- key: v`` / ``- - x``
                inner = self.block(item, column + 1 + len(space))
                inner[0] = pad + "-" + space + inner[0].lstrip(" ")
                lines += inner
            else:
                lines.append(pad + "-" + self.comment())
                lines += self.block(item, column + self.width())
        return lines

    def document(self, root: Any) -> list[str]:
        if root[0] != "s" and root[1] and not self.chance(self.odd):
            root = (root[0], False, *root[2:])  # a flow root: the full path's, mostly
        if self.inline(root):
            return [self.flow(root, flow=False)]
        return self.block(root, self.rng.choice([0, 0, 0, 0, 1, 2]))

    def text(self, roots: list[Any]) -> str:
        rng = self.rng
        lines: list[str] = []
        for index, root in enumerate(roots):
            if index or self.chance(0.2):
                lines.append(self.pick(["---", "---", "--- # doc", "---  "], ["--- x", "...", "---#"]))
            lines += self.document(root)
        out: list[str] = []
        for line in lines:
            if self.chance(0.05):
                out.append(" " * rng.randint(0, 6) + rng.choice(["# comment", "#", "# - x: [y", "#'"]))
            if self.chance(0.04):
                out.append(" " * rng.randint(0, 3))
            out.append(line)
        text = "\n".join(out)
        return text + "\n" if self.chance(0.9) else text

    def common(self, root: Any) -> str:
        return "\n".join(self.block(root, 0)) + "\n"


@pytest.mark.filterwarnings("ignore:Generating overly large repr")
@settings(max_examples=600, deadline=None, database=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(roots, min_size=1, max_size=2), layouts)
def test_generated_documents_agree(documents: list[Any], layout: int) -> None:
    """Trees drawn by hypothesis (so that a failure shrinks), in random layouts."""
    _check_noted(Renderer(random.Random(layout)).text(documents))


def random_scalar(rng: random.Random, *, key: bool = False) -> Any:
    roll = rng.random()
    if key and roll < 0.5:
        text = rng.choice(KEYS)
    elif roll < 0.8:
        text = rng.choice(WORDS)
    elif roll < 0.97:
        text = "".join(rng.choice(" ab01.-+:#,'\"[]{}?~eox") for _ in range(rng.randint(0, 5)))
    else:
        text = rng.choice(ODD_WORDS)
    return ("s", text, rng.choice(STYLES))


def random_tree(rng: random.Random, depth: int = 0) -> Any:
    """A node tree as ``nodes`` draws them, from ``random`` (several times cheaper)."""
    if depth and (depth >= 5 or rng.random() < 0.5):
        return random_scalar(rng)
    size = rng.choice([0, 1, 1, 2, 2, 3, 4]) if depth else rng.randint(1, 4)
    if rng.random() < 0.5:
        entries: dict[str, Any] = {}
        for _ in range(size):
            key = random_scalar(rng, key=True)
            entries[key[1]] = (key, random_tree(rng, depth + 1))
        return ("m", rng.random() < 0.4, list(entries.values()))
    items = [random_tree(rng, depth + 1) for _ in range(size)]
    return ("q", rng.random() < 0.4, rng.random() < 0.5, items)


@settings(max_examples=6000, deadline=None, database=None)
@given(st.integers(0, 2**64))
def test_random_documents_agree(seed: int) -> None:
    """Trees and layouts drawn from one seed: many more of them in the same time."""
    rng = random.Random(seed)
    trees = [random_tree(rng) if rng.random() < 0.9 else random_scalar(rng) for _ in range(rng.randint(1, 3))]
    _check_noted(Renderer(rng).text(trees))


def _plain(value: Any, rng: random.Random) -> Any:
    """A tree of plain values as nodes (plain scalars; block or flow, indentless or not)."""
    if isinstance(value, dict):
        entries = [(("s", key, "plain"), _plain(item, rng)) for key, item in value.items()]
        return ("m", rng.random() < 0.3, entries)
    if isinstance(value, list):
        return ("q", rng.random() < 0.3, rng.random() < 0.5, [_plain(item, rng) for item in value])
    return ("s", value, "plain")


simple_words = st.sampled_from(["a", "b", "name", "x-y", "4Gi", "1", "-2", ".5", "true", "null", "yes", ""])
simple_values = st.recursive(
    simple_words,
    lambda children: st.one_of(
        st.dictionaries(st.sampled_from(KEYS), children, min_size=1, max_size=4),
        st.lists(children, min_size=1, max_size=4),
    ),
    max_leaves=20,
)


@settings(max_examples=400, deadline=None, database=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.dictionaries(st.sampled_from(KEYS), simple_values, min_size=1, max_size=5),
    layouts,
)
def test_generated_common_documents_are_taken(document: dict[str, Any], layout: int) -> None:
    """Job-like documents in the common style (block or flow, plain scalars): the subset
    reader takes them, and agrees."""
    rng = random.Random(layout)
    node = ("m", False, _plain(document, rng)[2])
    text = Renderer(rng, wild=False).common(node)
    assert _check_noted(text) is not None


# --------------------------------------------------------------------------------------------
# Mutated job files

BASES = [*JOBS, *SPECS.values(), *(text for text in ACCEPTED if 20 < len(text) < 400)]
TOKENS = [
    "a", "x", "1", " ", "  ", "\n", "\n  ", "\n- ", ":", ": ", "-", "- ", "#", " #", "# c",
    "'", "''", '"', "\\", "[", "]", "{", "}", ",", ", ", "?", "? ", "&a ", "*a", "!!str ",
    "!t ", "|", ">", "%", "@", "`", "---", "---\n", "\n---\n", "...", "\n...\n", "~", "null",
    "true", "True", "0x1f", "0o17", "1e3", ".5", ".inf", "-.nan", "1:", "true:", "a: ", "k: v\n",
    "\t", "\r", "\r\n", "\u00e9", "\x00", "\ufeff", "k" * 1025, "9" * 4301,
]  # fmt: skip
mutations = st.lists(
    st.tuples(
        st.sampled_from(["insert", "insert", "delete", "replace", "line", "indent", "dedent"]),
        st.integers(0, 1 << 16),
        st.integers(1, 6),
        st.sampled_from(TOKENS),
    ),
    min_size=1,
    max_size=4,
)


def mutate(text: str, edits: list[tuple[str, int, int, str]]) -> str:
    for kind, where, size, token in edits:
        at = where % (len(text) + 1)
        if kind == "insert":
            text = text[:at] + token + text[at:]
        elif kind == "delete":
            text = text[:at] + text[at + size :]
        elif kind == "replace":
            text = text[:at] + token + text[at + len(token) :]
        else:
            lines = text.split("\n")
            row = where % len(lines)
            if kind == "line":  # a line again, elsewhere
                lines.insert(size % (len(lines) + 1), lines[row])
            elif kind == "indent":
                lines[row] = " " * size + lines[row]
            else:
                lines[row] = lines[row][min(size, len(lines[row]) - len(lines[row].lstrip(" "))) :]
            text = "\n".join(lines)
    return text


@settings(max_examples=4000, deadline=None, database=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.sampled_from(BASES), mutations)
def test_mutated_job_files_agree(base: str, edits: list[tuple[str, int, int, str]]) -> None:
    """Job files with a few characters, tokens or lines inserted, deleted or moved."""
    _check_noted(mutate(base, edits))


def test_diagnostics_are_comparable() -> None:
    """The checks compare diagnostics with ``==``: they must be values."""
    _, problems = parse_documents(SOURCE, b"a: 1\na: 2\n")
    assert problems and all(isinstance(problem, Diagnostic) for problem in problems)
    assert problems == parse_documents(SOURCE, b"a: 1\na: 2\n", subset=False)[1]
