"""What a spec's author writes never reaches a terminal, a log line or a pull-request comment as
control: ``visible`` writes control characters, line and paragraph separators and
bidirectional overrides out, and every text rendering quotes through it (one diagnostic is one
line, nothing leaves a Markdown code block), while ``-o json`` and ``-o yaml`` keep the exact
values."""

from __future__ import annotations

import json
import logging
import re
from pathlib import Path

import pytest
import yaml

from tests.conftest import cli
from tfdeclare.cli.logformat import JsonFormatter, LineFormatter
from tfdeclare.cli.logs_command import _Printer
from tfdeclare.cli.status_command import _status_detail, _status_table
from tfdeclare.cli.watch_command import _document_line
from tfdeclare.core.diagnostics import Diagnostic
from tfdeclare.core.plan.markdown import fenced
from tfdeclare.core.run.tasks import TaskKey
from tfdeclare.core.visible import json_line, visible, visible_data

# Any of these in an output meant for reading is a finding.
RAW = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u2028\u2029\u202a-\u202e\u2066-\u2069]")


@pytest.mark.parametrize(
    ("text", "shown"),
    [
        ("", ""),
        ("plain text, é ü 日本 🙂", "plain text, é ü 日本 🙂"),
        ("a\nb", "a\\nb"),
        ("a\r\nb\tc", "a\\r\\nb\\tc"),
        ("\x1b[31mred\x1b[0m", "\\x1b[31mred\\x1b[0m"),
        ("\x00\x07\x08\x0b\x0c\x1f", "\\x00\\x07\\x08\\x0b\\x0c\\x1f"),
        ("del\x7f", "del\\x7f"),
        ("c1 \x80 \x85 \x9b \x9f", "c1 \\x80 \\x85 \\x9b \\x9f"),
        ("line\u2028para\u2029", "line\\u2028para\\u2029"),
        ("\u202a\u202b\u202c\u202d\u202e", "\\u202a\\u202b\\u202c\\u202d\\u202e"),
        ("\u2066\u2067\u2068\u2069", "\\u2066\\u2067\\u2068\\u2069"),
        ("a\\nb stays", "a\\nb stays"),  # a backslash is kept: for reading, not parsing back
        ("nbsp\u00a0zwsp\u200b", "nbsp\u00a0zwsp\u200b"),  # not controls: kept
    ],
)
def test_visible_writes_out_every_control_and_nothing_else(text: str, shown: str) -> None:
    assert visible(text) == shown
    assert RAW.search(visible(text)) is None and "\n" not in visible(text)
    assert visible(visible(text)) == visible(text)


def test_visible_data_writes_out_keys_and_values_and_leaves_the_data() -> None:
    data = {"k\n": ["v\x1b", {"x": "\u2028"}], "n": 1, "none": None}
    assert visible_data(data) == {"k\\n": ["v\\x1b", {"x": "\\u2028"}], "n": 1, "none": None}
    assert data == {"k\n": ["v\x1b", {"x": "\u2028"}], "n": 1, "none": None}


def test_a_diagnostic_is_one_line_whatever_its_path_message_and_json_path() -> None:
    diagnostic = Diagnostic(
        "specs/\x1b[2Jx\n.yaml", 3, 1, "bad \u2028value\nx.yaml:1:1: error: forged", "$.spec['k\r\x85']"
    )
    text = diagnostic.format()
    assert "\n" not in text and RAW.search(text) is None
    assert text == (
        "specs/\\x1b[2Jx\\n.yaml:3:1: error: bad \\u2028value\\nx.yaml:1:1: error: forged (at $.spec['k\\r\\x85'])"
    )
    assert diagnostic.to_json()["jsonPath"] == "$.spec['k\r\x85']"  # data keeps it exact


def test_no_line_of_a_fenced_block_can_close_it() -> None:
    lines = ["```", "````x", "a\n```\n<img src=x>", "``````"]
    block = fenced(lines, "diff")
    fence = block[0].removesuffix("diff")
    assert set(fence) == {"`"} and len(fence) == 7 and block[-1] == fence
    inner = block[1:-1]
    assert len(inner) == len(lines) and all(not line.startswith(fence) for line in inner)
    assert fenced(["plain"]) == ["```", "plain", "```"]


def test_a_log_record_is_one_line_and_its_traceback_keeps_its_lines() -> None:
    formatter = LineFormatter("%(levelname)s %(message)s")
    record = logging.LogRecord("t", logging.INFO, __file__, 1, "applied %s", ("a\n\x1b[31mb\u2028",), None)
    assert formatter.format(record) == "INFO applied a\\n\\x1b[31mb\\u2028"
    try:
        raise ValueError("boom")
    except ValueError:
        import sys

        failed = logging.LogRecord("t", logging.ERROR, __file__, 1, "x\ny", (), sys.exc_info())
    text = formatter.format(failed)
    assert text.startswith("ERROR x\\ny\nTraceback") and "ValueError: boom" in text


@pytest.mark.parametrize(
    ("text", "written"),
    [
        ("plain", '"plain"'),
        ("é 中文 ü 日本 🙂", '"é 中文 ü 日本 🙂"'),  # readable: not \\u escapes
        ("a\nb\tc\r", '"a\\nb\\tc\\r"'),
        ("\x00\x07\x1b[2J\x1f", '"\\u0000\\u0007\\u001b[2J\\u001f"'),
        ("del\x7f", '"del\\u007f"'),
        ("c1 \x80 \x85 \x9b2J \x9f", '"c1 \\u0080 \\u0085 \\u009b2J \\u009f"'),
        ("line\u2028para\u2029", '"line\\u2028para\\u2029"'),
        ("\u202e\u2066x\u2069", '"\\u202e\\u2066x\\u2069"'),
        ("é\x9b中\u2028文", '"é\\u009b中\\u2028文"'),
        ('quote " and \\', '"quote \\" and \\\\"'),
        ("nbsp\u00a0zwsp\u200b", '"nbsp\u00a0zwsp\u200b"'),  # not controls: kept
    ],
)
def test_a_json_line_escapes_what_acts_on_a_terminal_and_decodes_to_the_same(text: str, written: str) -> None:
    line = json_line({"m": text})
    assert line == '{"m": ' + written + "}"
    assert RAW.search(line) is None and "\n" not in line
    assert json.loads(line) == {"m": text}
    assert json.loads(json_line({text: [text]}, sort_keys=True)) == {text: [text]}  # keys too


def test_every_json_line_output_escapes_c1_and_the_separators(
    capsysbinary: pytest.CaptureFixture[bytes],
) -> None:
    """The daemon's JSON log, ``logs -o json`` and ``status --watch -o json``: a terminal or a
    log collector reads them line by line."""
    hostile = "step 1 \x9b2J\x1b]0;x\x07 é 中文\u2028next\u2029\x85"
    record = logging.LogRecord("tfdeclare.daemon", logging.WARNING, __file__, 1, "job %s", (hostile,), None)
    logged = JsonFormatter().format(record)
    _Printer("json", prefixed=True, width=8).lines(TaskKey.parse("worker-0"), [hostile.encode() + b"\n"])
    printed = capsysbinary.readouterr().out.decode()
    watched = _document_line({"name": "a", "message": hostile}, "json")
    for line, value in (
        (logged, {"message": f"job {hostile}"}),
        (printed, {"task": "worker-0", "line": hostile}),
        (watched, {"name": "a", "message": hostile}),
    ):
        assert RAW.search(line) is None and line.rstrip("\n").count("\n") == 0, line
        assert "é 中文" in line and "\\u009b" in line and "\\u2028" in line
        assert value.items() <= json.loads(line).items()


def test_status_text_writes_out_what_a_job_quotes() -> None:
    doc = {
        "name": "j",
        "phase": "Failed",
        "message": "exit 1: \x1b]0;owned\x07\nforged",
        "source": {"file": "specs/\x1b[2J.yaml", "line": 1},
        "specHash": "0" * 64,
        "conditions": [{"type": "Ready", "status": "False", "reason": "R", "message": "m\u2028x"}],
        "tasks": [{"role": "worker", "index": 0, "state": "Failed", "message": "\x9b31m"}],
    }
    for text in (
        _status_detail(doc),
        _status_table([{"name": "j", "phase": "Failed", "message": "a\nb\x1b"}]),
    ):
        assert RAW.search(text) is None, text
    assert len(_status_table([{"name": "j", "phase": "Failed", "message": "a\nb"}]).splitlines()) == 2


HOSTILE_KEY = "\x1b[31mfoo\nspecs/x.yaml:1:1: error: forged"

VALIDATE_SPEC = (
    "apiVersion: tfdeclare/v1\nkind: TFJob\nmetadata: {name: ok}\nspec:\n"
    + f"  {json.dumps(HOSTILE_KEY)}: 1\n"
    + "  command: [sleep]\n  replicas: {worker: {count: 1}}\n"
    + "---\napiVersion: tfdeclare/v1\nkind: TFJob\nmetadata: {name: wd}\nspec:\n"
    + '  workingDir: "../x\\n\\u001b[2J\\u2028specs/y.yaml:2:2: error: forged\\u0085"\n'
    + "  command: [sleep]\n  replicas: {worker: {count: 1}}\n"
)


def test_validate_prints_one_line_per_diagnostic_and_json_keeps_the_exact_key(tmp_path: Path) -> None:
    (tmp_path / "k.yaml").write_text(VALIDATE_SPEC)
    as_json = json.loads(cli("validate", "k.yaml", "-o", "json", cwd=tmp_path).stdout)
    paths = {d["jsonPath"] for d in as_json["diagnostics"]}
    assert f"$.spec['{HOSTILE_KEY}']" in paths  # data: exact
    as_yaml = yaml.safe_load(cli("validate", "k.yaml", "-o", "yaml", cwd=tmp_path).stdout)
    assert {d["jsonPath"] for d in as_yaml["diagnostics"]} == paths
    result = cli("validate", "k.yaml", cwd=tmp_path, env={"FORCE_COLOR": "0"})
    assert result.returncode == 1
    lines = result.stderr.splitlines() + result.stdout.splitlines()
    diagnostics = [line for line in lines if line.startswith("k.yaml:")]
    assert len(diagnostics) == len(as_json["diagnostics"]) == 2, lines
    assert not [line for line in lines if ": error: " in line and not line.startswith("k.yaml:")], lines
    assert RAW.search(result.stdout + result.stderr) is None
    assert "\\x1b[31mfoo\\nspecs/x.yaml:1:1: error: forged" in result.stderr + result.stdout


MARKDOWN_PAYLOAD = """\
apiVersion: tfdeclare/v1
kind: TFJob
metadata: {name: g}
spec:
  command: [sleep, "1"]
  workingDir: "../x\\n```\\n</details>\\n\\n## Approved by security team [click](https://evil.example)\\n\
<img src=https://evil.example/track.png>\\n```"
  replicas: {worker: {count: 1}}
"""


def test_plan_markdown_keeps_a_hostile_value_inside_its_code_block(tmp_path: Path) -> None:
    (tmp_path / "specs").mkdir()
    (tmp_path / "specs" / "j.yaml").write_text(MARKDOWN_PAYLOAD)
    result = cli("plan", "specs", "-o", "markdown", "--state-dir", str(tmp_path / "state"), cwd=tmp_path)
    text = result.stdout
    assert RAW.search(text) is None
    lines = text.splitlines()
    opening = next(i for i, line in enumerate(lines) if line.startswith("```"))
    fence = lines[opening]
    closing = lines.index(fence, opening + 1)
    inside = lines[opening + 1 : closing]
    assert len(inside) == 1 and inside[0].startswith("specs/j.yaml:6:"), inside  # one diagnostic
    assert "## Approved" in inside[0] and "<img" in inside[0]
    outside = lines[:opening] + lines[closing + 1 :]
    assert not any(line.startswith(("#### ", "## ", "<img", "```")) for line in outside), outside
    assert outside.count("</details>") == 1


def test_plan_text_and_markdown_write_out_a_created_jobs_values(tmp_path: Path) -> None:
    hostile = "a\x1b[2J\u2028b\x85c\u202ed\x7f"
    (tmp_path / "specs").mkdir()
    (tmp_path / "specs" / "j.yaml").write_text(
        "apiVersion: tfdeclare/v1\nkind: TFJob\nmetadata: {name: g}\nspec:\n"
        f"  command: [sh, -c, {json.dumps(hostile)}]\n  replicas: {{worker: {{count: 1}}}}\n"
    )
    state = str(tmp_path / "state")
    for output in ("text", "markdown"):
        result = cli("plan", "specs", "-o", output, "--state-dir", state, cwd=tmp_path)
        assert result.returncode == 0, result.stderr
        assert RAW.search(result.stdout) is None, (output, result.stdout)
        assert "a\\u001b[2J\\u2028b\\x85c\\u202ed\\x7f" in result.stdout  # JSON's \\u001b, then ours
