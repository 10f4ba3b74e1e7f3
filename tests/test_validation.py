"""Loading and validation, table-driven: every rule, every kind of bad input, and where the
diagnostic points (file, line, column, JSON path)."""

from __future__ import annotations

import textwrap
import time

import pytest

from tfdeclare.core.diagnostics import Code
from tfdeclare.core.plan.desired import assemble
from tfdeclare.core.spec.loader import load_file

GOOD = """\
apiVersion: tfdeclare/v1
kind: TFJob
metadata:
  name: good
spec:
  command: [python, train.py]
  replicas:
    worker: {count: 2, resources: {cpus: 1, mem: 2Gi}}
"""


def diagnostics(text: str) -> list[tuple[int | None, int | None, str | None, str, Code]]:
    result = load_file("job.yaml", textwrap.dedent(text).encode())
    return [(d.line, d.column, d.json_path, d.message, d.code) for d in result.diagnostics]


def test_valid_file_has_no_diagnostics() -> None:
    result = load_file("job.yaml", GOOD.encode())
    assert result.diagnostics == ()
    assert [j.name for j in result.jobs] == ["good"]


# (case, yaml, [(line, column, json path, message fragment, code)])
CASES = [
    (
        "unknown top-level field",
        GOOD + "extra: 1\n",
        [(9, 1, "$.extra", "unknown field 'extra'", Code.SCHEMA)],
    ),
    (
        "misspelt field suggests the right one",
        GOOD.replace("command:", "comand:"),
        [(6, 3, "$.spec.comand", "did you mean 'command'", Code.SCHEMA)],
    ),
    (
        "missing required key points at the parent",
        GOOD.replace("  replicas:\n    worker: {count: 2, resources: {cpus: 1, mem: 2Gi}}\n", ""),
        [(5, 1, "$.spec", "missing required field 'replicas'", Code.SCHEMA)],
    ),
    (
        "wrong apiVersion",
        GOOD.replace("tfdeclare/v1", "tfdeclare/v2"),
        [(1, 13, "$.apiVersion", 'must be "tfdeclare/v1"', Code.SCHEMA)],
    ),
    (
        "wrong kind",
        GOOD.replace("kind: TFJob", "kind: Job"),
        [(2, 7, "$.kind", 'must be "TFJob"', Code.SCHEMA)],
    ),
    (
        "bad name",
        GOOD.replace("name: good", "name: Good_Job"),
        [(4, 9, "$.metadata.name", "lowercase DNS label", Code.SCHEMA)],
    ),
    (
        "name too long",
        GOOD.replace("name: good", "name: " + "a" * 64),
        [(4, 9, "$.metadata.name", "at most 63 characters", Code.SCHEMA)],
    ),
    (
        "name with a path",
        GOOD.replace("name: good", "name: ../etc"),
        [(4, 9, "$.metadata.name", "lowercase DNS label", Code.SCHEMA)],
    ),
    (
        "count not a number",
        GOOD.replace("count: 2", "count: two"),
        [(8, 21, "$.spec.replicas.worker.count", "expected a whole number", Code.SCHEMA)],
    ),
    (
        "negative count",
        GOOD.replace("count: 2", "count: -1"),
        [(8, 21, "$.spec.replicas.worker.count", "at least 0", Code.SCHEMA)],
    ),
    (
        "two chiefs",
        GOOD.replace("worker: {count: 2", "chief: {count: 2"),
        [(8, 20, "$.spec.replicas.chief.count", "at most 1", Code.SCHEMA)],
    ),
    (
        "two evaluators",
        GOOD + "    evaluator: {count: 2}\n",
        [(9, 24, "$.spec.replicas.evaluator.count", "at most 1", Code.SCHEMA)],
    ),
    (
        "no chief or worker",
        GOOD.replace("worker: {count: 2", "ps: {count: 2"),
        [(7, 3, "$.spec.replicas", "at least one chief or worker", Code.NO_CHIEF_OR_WORKER)],
    ),
    (
        "workers with count 0 only",
        GOOD.replace("count: 2", "count: 0"),
        [(7, 3, "$.spec.replicas", "at least one chief or worker", Code.NO_CHIEF_OR_WORKER)],
    ),
    (
        "unknown role",
        GOOD + "    master: {count: 1}\n",
        [(9, 5, "$.spec.replicas.master", "unknown field 'master'", Code.SCHEMA)],
    ),
    (
        "fractional gpus",
        GOOD.replace("mem: 2Gi", "mem: 2Gi, gpus: 1.5"),
        [(8, 61, "$.spec.replicas.worker.resources.gpus", "whole number", Code.SCHEMA)],
    ),
    (
        "zero cpus",
        GOOD.replace("cpus: 1", "cpus: 0"),
        [(8, 42, "$.spec.replicas.worker.resources.cpus", "more than 0", Code.SCHEMA)],
    ),
    (
        "bad mem unit",
        GOOD.replace("mem: 2Gi", "mem: 2GB"),
        [(8, 50, "$.spec.replicas.worker.resources.mem", "quantity such as 512Mi", Code.SCHEMA)],
    ),
    (
        "mem of zero",
        GOOD.replace("mem: 2Gi", "mem: 0Gi"),
        [(8, 50, "$.spec.replicas.worker.resources.mem", "must be more than 0", Code.QUANTITY)],
    ),
    (
        "restart policy enum",
        GOOD + "  restartPolicy: onFailure\n",
        [(9, 18, "$.spec.restartPolicy", "must be one of Never, OnFailure", Code.SCHEMA)],
    ),
    (
        "command as a string",
        GOOD.replace("command: [python, train.py]", "command: python train.py"),
        [(6, 12, "$.spec.command", "expected a list", Code.SCHEMA)],
    ),
    (
        "empty command",
        GOOD.replace("command: [python, train.py]", "command: []"),
        [(6, 3, "$.spec.command", "at least 1 item", Code.SCHEMA)],
    ),
    (
        "env value not a string",
        GOOD + "  env: {LR: 0.1}\n",
        [(9, 13, "$.spec.env.LR", "expected a string or a mapping, got a number", Code.SCHEMA)],
    ),
    (
        "env name reserved",
        GOOD + "  env: {TF_CONFIG: x}\n",
        [(9, 9, "$.spec.env.TF_CONFIG", "TF_CONFIG", Code.SCHEMA)],
    ),
    (
        "env name invalid",
        GOOD + "  env: {1X: x}\n",
        [(9, 9, "$.spec.env['1X']", "valid environment variable name", Code.SCHEMA)],
    ),
    (
        "role without any command",
        GOOD.replace("  command: [python, train.py]\n", ""),
        [(7, 5, "$.spec.replicas.worker", "has no command", Code.MISSING_COMMAND)],
    ),
    (
        "legacy flags with a chief",
        GOOD.replace("worker:", "chief: {count: 1}\n    worker:") + "  clusterSpec: legacy_flags\n",
        [
            (8, 5, "$.spec.replicas.chief", "legacy_flags knows only ps and worker", Code.SCHEMA),
            (10, 16, "$.spec.clusterSpec", "no command uses", Code.SCHEMA),
        ],
    ),
    (
        "volume path not absolute",
        GOOD + "  volumes: [{hostPath: data, containerPath: /data}]\n",
        [(9, 24, "$.spec.volumes[0].hostPath", "absolute path", Code.SCHEMA)],
    ),
    (
        "duplicate key",
        GOOD + "  backoffLimit: 1\n  backoffLimit: 2\n",
        [(10, 3, "$.spec.backoffLimit", "duplicate key 'backoffLimit'", Code.DUPLICATE_KEY)],
    ),
    (
        "object tag refused",
        "x: !!python/object/apply:os.system [echo hi]\n",
        [(1, 4, "$.x", "tag !!python/object/apply:os.system is not allowed", Code.FORBIDDEN_TAG)],
    ),
    (
        "custom tag refused",
        GOOD.replace("name: good", "name: !secret good"),
        [(4, 9, "$.metadata.name", "tag !secret is not allowed", Code.FORBIDDEN_TAG)],
    ),
    (
        "binary tag refused",
        "x: !!binary aGVsbG8=\n",
        [(1, 4, "$.x", "tag !!binary is not allowed", Code.FORBIDDEN_TAG)],
    ),
    (
        "syntax error",
        "apiVersion: [tfdeclare/v1\n",
        [(2, 1, None, "did not find expected", Code.YAML_SYNTAX)],
    ),
    ("tab indentation", "spec:\n\tx: 1\n", [(2, 1, None, "tab cannot indent", Code.YAML_SYNTAX)]),
    (
        "non-string key",
        GOOD + "  1: x\n",
        [(9, 3, "$.spec", "key '1' must be a string", Code.NON_STRING_KEY)],
    ),
    ("not a mapping", "- a\n- b\n", [(1, 1, "$", "must be a mapping", Code.SCHEMA)]),
    (
        "infinite number",
        GOOD.replace("cpus: 1", "cpus: .inf"),
        [(8, 42, "$.spec.replicas.worker.resources.cpus", "not a finite number", Code.SCHEMA)],
    ),
    # Python cannot write out an integer of more than 4,300 digits: no fingerprint, no message.
    (
        "huge decimal integer",
        GOOD.replace("count: 2", "count: " + "9" * 5000),
        [(8, 21, "$.spec.replicas.worker.count", "integer of 5000 digits is too large", Code.SCHEMA)],
    ),
    (
        "huge hexadecimal integer",
        GOOD + "  backoffLimit: 0x" + "f" * 4000 + "\n",
        [(9, 17, "$.spec.backoffLimit", "integer of 4002 characters is too large", Code.SCHEMA)],
    ),
    # A NUL passes every schema but could never reach a process: refused where it is written.
    (
        "NUL in a command",
        GOOD.replace("train.py]", '"train\\0.py"]'),
        [(6, 21, "$.spec.command[1]", "a NUL character (\\0) cannot reach a process", Code.SCHEMA)],
    ),
    (
        "NUL in an env key",
        GOOD + '  env: {"A\\0B": x}\n',
        [(9, 9, "$.spec.env", "key 'A\\x00B': a NUL character", Code.SCHEMA)],
    ),
    # A raw control character is placed where it is, not on line 1.
    (
        "raw NUL in a comment",
        GOOD + "  # a\0b\n",
        [(9, 6, None, "unacceptable character 0x0000", Code.YAML_SYNTAX)],
    ),
    (
        "huge octal integer key",
        GOOD + "  ? 0o" + "7" * 5000 + "\n  : x\n",
        [(9, 5, "$.spec", "must be a string", Code.NON_STRING_KEY)],
    ),
]


@pytest.mark.parametrize(("text", "expected"), [(c[1], c[2]) for c in CASES], ids=[c[0] for c in CASES])
def test_bad_input_is_reported_precisely(
    text: str, expected: list[tuple[int, int, str | None, str, Code]]
) -> None:
    found = diagnostics(text)
    for line, column, path, fragment, code in expected:
        matching = [d for d in found if d[2] == path and fragment in d[3]]
        assert matching, f"no diagnostic at {path} containing {fragment!r}; got {found}"
        assert matching[0][0] == line and matching[0][1] == column, (matching[0], (line, column))
        assert matching[0][4] is code


def test_every_error_is_collected_not_just_the_first() -> None:
    text = (
        GOOD.replace("name: good", "name: Bad").replace("count: 2", "count: x")
        + "  extra: 1\n  restartPolicy: no\n"
    )
    found = diagnostics(text)
    assert {d[2] for d in found} >= {
        "$.metadata.name",
        "$.spec.replicas.worker.count",
        "$.spec.extra",
        "$.spec.restartPolicy",
    }


def test_yaml_12_scalars_norway_stays_a_string() -> None:
    result = load_file("job.yaml", (GOOD + "  env: {COUNTRY: NO, ON: on, YES: yes}\n").encode())
    assert result.diagnostics == ()
    assert dict(result.jobs[0].spec.env) == {"COUNTRY": "NO", "ON": "on", "YES": "yes"}


def test_quantities_are_normalised() -> None:
    for mem, mib in [
        ("8192", 8192),
        ("16Gi", 16384),
        ("16G", 16384),
        ("512Mi", 512),
        ("1Ti", 1048576),
        ("1536Ki", 2),
        ("1.5Gi", 1536),
    ]:
        result = load_file("job.yaml", GOOD.replace("mem: 2Gi", f"mem: {mem}").encode())
        assert result.diagnostics == (), mem
        assert result.jobs[0].spec.resources_for(result.jobs[0].spec.replicas[0].role).mem_mib == mib


def test_invalid_utf8_is_an_error_with_a_position() -> None:
    result = load_file("job.yaml", b"a: 1\nb: \xff\n")
    assert [(d.line, d.column, d.code) for d in result.diagnostics] == [(2, 4, Code.INVALID_UTF8)]


def test_file_size_is_bounded() -> None:
    result = load_file("job.yaml", b"#" * (2 << 20))
    assert [d.code for d in result.diagnostics] == [Code.FILE_TOO_LARGE]


def test_alias_bomb_fails_fast() -> None:
    lines = ["a0: &a0 [x, x, x, x, x, x, x, x, x, x]"]
    for i in range(1, 12):
        lines.append(f"a{i}: &a{i} [" + ", ".join([f"*a{i - 1}"] * 10) + "]")
    started = time.perf_counter()
    result = load_file("bomb.yaml", "\n".join(lines).encode())
    assert time.perf_counter() - started < 0.5
    assert [d.code for d in result.diagnostics] == [Code.TOO_COMPLEX]


def test_deep_nesting_is_refused_cleanly() -> None:
    result = load_file("deep.yaml", ("a:\n" + "".join("  " * i + "b:\n" for i in range(1, 200))).encode())
    assert {d.code for d in result.diagnostics} <= {Code.TOO_COMPLEX, Code.YAML_SYNTAX}
    assert result.diagnostics


def test_multi_document_files_and_empty_documents() -> None:
    text = GOOD + "---\n" + GOOD.replace("name: good", "name: other") + "---\n"
    result = load_file("jobs.yaml", text.encode())
    assert result.diagnostics == ()
    assert [(j.name, j.source.line) for j in result.jobs] == [("good", 1), ("other", 10)]


def test_a_bad_document_does_not_hide_a_good_one() -> None:
    text = GOOD + "---\n" + GOOD.replace("name: good", "name: bad").replace("count: 2", "count: x")
    result = load_file("jobs.yaml", text.encode())
    assert [j.name for j in result.jobs] == ["good"]
    assert [n for n, _ in result.named] == ["good", "bad"]
    assert result.has_errors


def test_duplicate_names_across_files_name_both_places() -> None:
    a = load_file("a.yaml", GOOD.encode())
    b = load_file("b.yaml", ("# another\n" + GOOD).encode())
    state = assemble([a, b])
    assert state.jobs == {}
    messages = sorted(d.format() for d in state.diagnostics)
    assert messages == [
        "a.yaml:4:9: error: job name 'good' is also defined at b.yaml:5 (at $.metadata.name)",
        "b.yaml:5:9: error: job name 'good' is also defined at a.yaml:4 (at $.metadata.name)",
    ]
    assert set(state.protected) == {"good"}


def test_spec_hash_ignores_formatting_order_and_defaults() -> None:
    a = load_file("a.yaml", GOOD.encode()).jobs[0]
    b_text = """\
        kind: TFJob
        metadata: {labels: {}, name: good}
        apiVersion: tfdeclare/v1
        spec:
          replicas: {worker: {resources: {mem: 2048, gpus: 0, cpus: 1.0}, count: 2}}
          backoffLimit: 3
          command: ["python", "train.py"]
        """
    b = load_file("b.yaml", textwrap.dedent(b_text).encode()).jobs[0]
    assert a.spec.spec_hash == b.spec.spec_hash
    c = load_file("c.yaml", GOOD.replace("count: 2", "count: 3").encode()).jobs[0]
    assert c.spec.spec_hash != a.spec.spec_hash


def test_quoted_keys_that_look_like_other_scalars_are_strings() -> None:
    result = load_file(
        "job.yaml", GOOD.replace("name: good", "name: good\n  labels: {'true': x, '1': y, null1: z}").encode()
    )
    assert result.diagnostics == ()
    assert dict(result.jobs[0].spec.labels) == {"true": "x", "1": "y", "null1": "z"}
    unquoted = load_file("job.yaml", GOOD.replace("name: good", "name: good\n  labels: {true: x}").encode())
    assert [d.code for d in unquoted.diagnostics] == [Code.NON_STRING_KEY]


def test_braces_in_a_flow_list_get_a_hint_to_quote() -> None:
    found = diagnostics("spec:\n  command: [train, --task_index={task_index}]\n")
    assert any("quote every item that holds { or }" in d[3] for d in found)


@pytest.mark.parametrize("odd_break", ["\x85", "\u2028", "\u2029"])
def test_lines_are_counted_as_editors_count_them(odd_break: str) -> None:
    """libyaml (YAML 1.1) also breaks lines at NEL, LS and PS; editors do not, and a diagnostic
    must point at the line an editor shows."""
    text = GOOD.replace("name: good", f'name: "go{odd_break}od"').replace("count: 2", "count: x")
    found = diagnostics(text)
    count = [d for d in found if d[2] == "$.spec.replicas.worker.count"]
    assert count and count[0][0] == 8, found


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (  # a bad name no longer hides the spec's own rules
            "apiVersion: tfdeclare/v1\nkind: TFJob\nmetadata: {name: Bad}\nspec:\n  replicas: {ps: {count: 1}}\n",
            [Code.SCHEMA, Code.NO_CHIEF_OR_WORKER, Code.MISSING_COMMAND],
        ),
        (  # nor does bad metadata, or an unknown top-level field
            "apiVersion: tfdeclare/v1\nkind: TFJob\nmetadata: {name: ok, labels: 5}\nx: 1\n"
            "spec:\n  replicas: {ps: {count: 1}}\n",
            [Code.SCHEMA, Code.SCHEMA, Code.NO_CHIEF_OR_WORKER, Code.MISSING_COMMAND],
        ),
        (  # an error inside spec: its rules wait (they read a spec the schema refused)
            "apiVersion: tfdeclare/v1\nkind: TFJob\nmetadata: {name: Bad}\n"
            "spec:\n  replicas: {ps: {count: x}}\n",
            [Code.SCHEMA, Code.SCHEMA],
        ),
        ("apiVersion: tfdeclare/v1\nkind: TFJob\nmetadata: {name: Bad}\n", [Code.SCHEMA, Code.SCHEMA]),
    ],
)
def test_the_specs_rules_are_reported_beside_errors_outside_it(text: str, expected: list[Code]) -> None:
    result = load_file("a.yaml", text.encode())
    assert result.jobs == ()
    assert sorted(d.code for d in result.diagnostics) == sorted(expected), [
        d.format() for d in result.diagnostics
    ]
    assert all(d.line >= 1 for d in result.diagnostics if d.line is not None)
