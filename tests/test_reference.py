"""docs/reference.md agrees with the code: its generated parts are what
``python -m tfdeclare.cli.reference`` makes now, and, checked here without the generator, every
command and option of the parser, every field of the schemas, every exit code, environment
variable and HTTP endpoint is on the page, and nothing on it is gone from the code."""

from __future__ import annotations

import argparse
import re
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tfdeclare.cli import common, parsers, reference
from tfdeclare.cli.explain_command import schema_document
from tfdeclare.cli.main import build_parser
from tfdeclare.core.spec.explain import NoField, field_at, parse_path
from tfdeclare.daemon.server import ALLOWED

ROOT = Path(__file__).resolve().parent.parent
PAGE = ROOT / "docs" / "reference.md"


def page() -> str:
    return PAGE.read_text(encoding="utf-8")


def section(text: str, heading: str) -> str:
    """The text under ``heading`` (a whole heading line) up to the next heading of its level or above."""
    level = heading.split(" ", 1)[0]
    start = text.index(f"\n{heading}\n") + len(heading) + 2
    stop = re.compile(rf"^#{{1,{len(level)}}} ", re.MULTILINE).search(text, start)
    return text[start : stop.start() if stop else len(text)]


def table_column(text: str, column: int = 0) -> list[str]:
    """The cells of one column of every table row in ``text`` (header and rule left out)."""
    cells = []
    for line in text.splitlines():
        if line.startswith("| ") and not line.startswith("|---"):
            cells.append(re.split(r"(?<!\\)\|", line)[column + 1].strip())
    return cells[1:] if cells else cells


def test_the_generated_parts_are_up_to_date() -> None:
    text = page()
    assert reference.generated(text) == text, "run: python -m tfdeclare.cli.reference"


def test_check_mode_finds_a_stale_page_and_the_writer_mends_it(tmp_path: Path) -> None:
    stale = tmp_path / "reference.md"
    shutil.copy(PAGE, stale)
    text = stale.read_text(encoding="utf-8")
    stale.write_text(text.replace("| `--prune` |", "| `--prune-old` |", 1), encoding="utf-8")
    assert reference.main(["--check", "--page", str(stale)]) == 1
    assert reference.main(["--page", str(stale)]) == 0
    assert stale.read_text(encoding="utf-8") == text
    assert reference.main(["--check", "--page", str(stale)]) == 0


def test_a_page_without_a_generated_part_is_refused() -> None:
    with pytest.raises(ValueError, match="commands"):
        reference.generated(page().replace("<!-- BEGIN GENERATED: commands -->", ""))


def _commands() -> dict[str, argparse.ArgumentParser]:
    parser = build_parser()
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return dict(action.choices)
    raise AssertionError("no commands")


def _shown_options(parser: argparse.ArgumentParser) -> set[str]:
    common_dests = {"config", "backend", "state_dir", "status_dir", "help"}
    return {
        option
        for action in parser._actions
        if action.help != argparse.SUPPRESS and action.dest not in common_dests
        for option in action.option_strings
    }


def test_every_command_and_option_is_on_the_page_and_nothing_else() -> None:
    commands = section(page(), "## Commands")
    headings = re.findall(r"^### `tfdeclare ([a-z-]+)`$", commands, re.MULTILINE)
    assert headings == list(_commands())
    for name, parser in _commands().items():
        part = section(commands, f"### `tfdeclare {name}`")
        documented = {o for cell in table_column(part) for o in re.findall(r"`(-[-a-z]*|-[a-z])`", cell)}
        assert documented == _shown_options(parser), name
        hidden = {o for a in parser._actions if a.help == argparse.SUPPRESS for o in a.option_strings}
        assert not any(f"`{o}`" in part for o in hidden), name
    common_part = section(commands, "### Common options")
    assert set(re.findall(r"`(--[a-z-]+)`", "".join(table_column(common_part)))) == {
        "--config",
        "--backend",
        "--state-dir",
        "--status-dir",
    }


def _property_names(node: Any) -> Iterator[str]:
    """Every name under a ``properties`` anywhere in a schema document."""
    if isinstance(node, dict):
        for key, value in node.items():
            if key == "properties" and isinstance(value, dict):
                yield from value
            yield from _property_names(value)
    elif isinstance(node, list):
        for item in node:
            yield from _property_names(item)


@pytest.mark.parametrize(
    ("schema", "heading"),
    [("job", "## The job spec"), ("status", "## Status files"), ("config", "## The config file")],
)
def test_every_schema_field_is_on_the_page_and_each_listed_one_exists(schema: str, heading: str) -> None:
    document = schema_document(schema)
    paths = [cell.strip("`") for cell in table_column(section(page(), heading))]
    assert len(paths) == len(set(paths))
    for path in paths:
        try:
            field_at(document, parse_path(path))
        except NoField as err:
            pytest.fail(f"{heading}: {path} is not a field of the {schema} schema: {err}")
    last_parts = {path.rsplit(".", 1)[-1] for path in paths}
    missing = set(_property_names(document)) - last_parts
    assert not missing, f"{heading}: fields of the {schema} schema not on the page: {sorted(missing)}"
    top = set(document["properties"])
    assert top <= set(paths)


def test_the_exit_codes_are_the_commands_own() -> None:
    documented = {int(cell.strip("`")) for cell in table_column(section(page(), "## Exit codes"))}
    codes = {value for name, value in vars(common).items() if name.startswith("EXIT_")}
    assert documented == codes | {parsers.EXIT_USAGE}


def test_every_tfdeclare_environment_variable_is_on_the_page_and_nothing_else() -> None:
    in_code = {
        name
        for path in (ROOT / "tfdeclare").rglob("*.py")
        for name in re.findall(r"\bTFDECLARE_[A-Z_]*[A-Z]\b", path.read_text(encoding="utf-8"))
    }
    part = section(page(), "## Environment variables")
    documented = {n for cell in table_column(part) for n in re.findall(r"`(TFDECLARE_[A-Z_]+)`", cell)}
    assert documented == in_code


def test_the_endpoints_are_the_daemons() -> None:
    rows = table_column(section(page(), "## The daemon"))
    documented = {tuple(cell.strip("`").split(" ", 1)) for cell in rows}
    served = {(method, path) for path, method in ALLOWED.items()}
    assert documented == served | {("GET", "/jobs/NAME"), ("GET", "/jobs/NAME/logs")}


def test_the_docs_and_the_code_cite_the_reference_not_an_outside_document() -> None:
    cited = [
        f"{path.relative_to(ROOT)}:{number}"
        for folder in ("tfdeclare", "docs")
        for path in (ROOT / folder).rglob("*")
        if path.suffix in (".py", ".md")
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
        if "contract §" in line
    ]
    assert cited == []
    assert "docs/reference.md" in (ROOT / "README.md").read_text(encoding="utf-8")
    anchors = {
        "#" + re.sub(r"[^a-z0-9 -]", "", heading.lower()).replace(" ", "-")
        for heading in re.findall(r"^#+ (.+)$", page(), re.MULTILINE)
    }
    for path in [*(ROOT / "tfdeclare").rglob("*.py"), *(ROOT / "docs").glob("*.md"), ROOT / "README.md"]:
        for anchor in re.findall(r"reference\.md(#[a-z0-9-]+)", path.read_text(encoding="utf-8")):
            assert anchor in anchors, f"{path.relative_to(ROOT)} links to {anchor}, not a heading"


def test_the_page_names_every_schema_of_the_schema_command() -> None:
    for name in parsers.SCHEMA_NAMES:
        assert f"<!-- BEGIN GENERATED: {name}-fields -->" in page()
