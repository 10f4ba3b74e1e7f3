"""The generated parts of ``docs/reference.md``: the commands and their options (from the
argparse parser ``tfdeclare.cli.main.build_parser``), the fields of the job spec, the status
file and the config file (from the JSON Schemas of ``schemas/``, as ``tfdeclare schema``
prints them) and the runtime error codes (``tfdeclare.core.errors``). The prose around them is
written by hand; the generated parts sit between ``<!-- BEGIN GENERATED: NAME -->`` and
``<!-- END GENERATED: NAME -->`` lines, so the page cannot drift from the code:
``python -m tfdeclare.cli.reference`` rewrites them, ``--check`` exits 1 when the page differs
(a test does the same).
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from tfdeclare.cli.explain_command import schema_document
from tfdeclare.cli.main import build_parser
from tfdeclare.core.errors import ErrorCode
from tfdeclare.core.spec.explain import Field, children, facts, field_at, type_name

PAGE = Path("docs/reference.md")
# The options every command takes (tfdeclare.cli.common.add_common_options): shown once.
COMMON_DESTS = frozenset({"config", "backend", "state_dir", "status_dir"})
_MAX_DEPTH = 12
_BOUNDS = (
    ("minimum", ">="),
    ("exclusiveMinimum", ">"),
    ("maximum", "<="),
    ("exclusiveMaximum", "<"),
    ("minLength", "length >="),
    ("maxLength", "length <="),
    ("minItems", "items >="),
    ("maxItems", "items <="),
    ("minProperties", "fields >="),
    ("maxProperties", "fields <="),
)
_MARKER = re.compile(
    r"(<!-- BEGIN GENERATED: (?P<name>[a-z-]+) -->\n)(?P<body>.*?)(<!-- END GENERATED: (?P=name) -->)",
    re.DOTALL,
)


# -- commands ----------------------------------------------------------------------------------


def subcommands(parser: argparse.ArgumentParser) -> dict[str, tuple[str, argparse.ArgumentParser]]:
    """Each command's name -> (its one-line help, its parser), in the parser's order."""
    found: dict[str, tuple[str, argparse.ArgumentParser]] = {}
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            helps = {a.dest: a.help or "" for a in action._choices_actions}
            for name, sub in action.choices.items():
                found[name] = (helps.get(name, ""), sub)
    return found


def documented_actions(parser: argparse.ArgumentParser) -> list[argparse.Action]:
    """The arguments and options a user sees: not help, not hidden, not the common options."""
    return [
        a
        for a in parser._actions
        if not isinstance(a, (argparse._HelpAction, argparse._VersionAction, argparse._SubParsersAction))
        and a.help != argparse.SUPPRESS
        and a.dest not in COMMON_DESTS
    ]


def _value(action: argparse.Action) -> str:
    if action.nargs == 0:
        return ""
    if action.choices is not None:
        return " | ".join(str(c) for c in action.choices)
    return str(action.metavar or action.dest.upper())


def _positional(action: argparse.Action) -> str:
    name = _value(action) if action.choices is None else "{" + ",".join(map(str, action.choices)) + "}"
    if action.nargs == "+":
        return f"{name}..."
    if action.nargs == "?":
        return f"[{name}]"
    if action.nargs == "*":
        return f"[{name}...]"
    return name


def _option(action: argparse.Action) -> str:
    value = _value(action).replace(" | ", "|")
    return f"{action.option_strings[-1]} {value}".strip()


def usage(name: str, parser: argparse.ArgumentParser) -> str:
    """``tfdeclare NAME`` with its positionals and required options, then ``[options]``."""
    words = ["tfdeclare", name]
    actions = documented_actions(parser)
    grouped: set[argparse.Action] = set()
    for group in parser._mutually_exclusive_groups:
        if group.required:
            words.append("(" + " | ".join(_option(a) for a in group._group_actions) + ")")
            grouped.update(group._group_actions)
    words += [_option(a) for a in actions if a.option_strings and a.required and a not in grouped]
    words += [_positional(a) for a in actions if not a.option_strings]
    if any(a.option_strings and not a.required and a not in grouped for a in actions):
        words.append("[options]")
    return " ".join(words)


def _default(action: argparse.Action) -> str:
    default = action.default
    if default in (None, False, [], "", argparse.SUPPRESS) or action.nargs == 0:
        return ""
    return f"`{default}`"


def _options_table(actions: Sequence[argparse.Action]) -> list[str]:
    lines = ["| Argument or option | Value | Default | Meaning |", "|---|---|---|---|"]
    for action in actions:
        names = ", ".join(f"`{o}`" for o in action.option_strings) or f"`{_positional(action)}`"
        value = _value(action) if action.option_strings else ""
        shown = " \\| ".join(f"`{v}`" for v in value.split(" | ")) if value else ""
        lines.append(f"| {names} | {shown} | {_default(action)} | {_cell(action.help or '')} |")
    return lines


def commands_section(parser: argparse.ArgumentParser | None = None) -> str:
    """Every command: usage, what it does, its arguments and options; then the common options."""
    parser = parser or build_parser()
    lines: list[str] = []
    for name, (summary, sub) in subcommands(parser).items():
        lines += [f"### `tfdeclare {name}`", "", f"    {usage(name, sub)}", ""]
        said = sub.description or summary
        lines += [_text(said[:1].upper() + said[1:]).rstrip(".") + ".", ""]
        actions = documented_actions(sub)
        if actions:
            lines += [*_options_table(actions), ""]
    common = [a for a in parser._actions if a.dest in COMMON_DESTS]
    without = [
        f"`{name}`"
        for name, (_, sub) in subcommands(parser).items()
        if not {a.dest for a in sub._actions} >= COMMON_DESTS
    ]
    but = f" but {', '.join(without[:-1])} and {without[-1]}" if len(without) > 1 else ""
    lines += ["### Common options", ""]
    lines += [f"Every command{but} takes these, before or after the command's name (after it, they win).", ""]
    lines += [*_options_table(common), ""]
    return "\n".join(lines)


# -- schema fields -----------------------------------------------------------------------------


def schema_fields(document: Mapping[str, Any]) -> Iterator[Field]:
    """Every field of a schema, depth first in the schema's order (lists looked through, a map's
    values as ``<KEY>``)."""

    def walk(field: Field, depth: int) -> Iterator[Field]:
        for sub in children(field, document):
            yield sub
            if depth < _MAX_DEPTH:
                yield from walk(sub, depth + 1)

    yield from walk(field_at(document, ()), 0)


def _shown(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(", ", ": "))


def _values(found: Mapping[str, Any]) -> str:
    said: list[str] = []
    if "allowed" in found:
        said.append(" \\| ".join(f"`{_shown(v)}`" for v in found["allowed"]))
    if "pattern" in found:
        said.append(f"pattern `{found['pattern']}`")
    if "keys" in found:
        said.append(f"keys match `{found['keys']}`")
    said += [f"{word} {_shown(found[k])}" for k, word in _BOUNDS if k in found]
    return "; ".join(s.replace("|", "\\|") if not s.startswith("`") else s for s in said)


def fields_section(name: str) -> str:
    """The table of every field of the schema ``name`` (job, status or config)."""
    document = schema_document(name)
    lines = ["| Field | Type | Required | Default | Values | Description |", "|---|---|---|---|---|---|"]
    for field in schema_fields(document):
        found = facts(field.schema, document)
        default = f"`{_shown(found['default'])}`" if "default" in found else ""
        kind = type_name(field.schema, document).replace("|", "\\|")
        required = "yes" if field.required else ""
        description = _cell(str(field.schema.get("description", "")))
        lines.append(
            f"| `{field.dotted}` | {kind} | {required} | {default} | {_values(found)} | {description} |"
        )
    return "\n".join([*lines, ""])


# -- the page ----------------------------------------------------------------------------------


def _text(text: str) -> str:
    """Text for a paragraph: one line; outside code spans ``<`` as an entity (``<status-dir>``
    is no HTML tag), ``*`` and ``~`` escaped (no emphasis or strike-through)."""
    parts = " ".join(text.split()).split("`")
    for i in range(0, len(parts), 2):
        parts[i] = parts[i].replace("<", "&lt;").replace("*", "\\*").replace("~", "\\~")
    return "`".join(parts)


def _cell(text: str) -> str:
    """Text for a table's cell: as a paragraph's, ``|`` escaped (code spans too, as GFM wants)."""
    return _text(text).replace("|", "\\|")


def error_codes_section() -> str:
    """The table of the runtime error codes (``core.errors``)."""
    lines = ["| Code | Terminal | Fails the job | Meaning |", "|---|---|---|---|"]
    for code in ErrorCode:
        terminal = "yes" if code.terminal else ""
        fails = "yes" if code.fails_the_job else ""
        lines.append(f"| `{code.value}` | {terminal} | {fails} | {_cell(code.summary)} |")
    return "\n".join([*lines, ""])


SECTIONS: dict[str, Callable[[], str]] = {
    "commands": commands_section,
    "job-fields": lambda: fields_section("job"),
    "status-fields": lambda: fields_section("status"),
    "config-fields": lambda: fields_section("config"),
    "error-codes": error_codes_section,
}


def generated(text: str, sections: Mapping[str, Callable[[], str]] = SECTIONS) -> str:
    """``text`` with every generated part rewritten; ``ValueError`` when a part is missing."""
    missing = set(sections) - {m.group("name") for m in _MARKER.finditer(text)}
    if missing:
        raise ValueError(f"no generated part named {', '.join(sorted(missing))}")
    made = {name: make() for name, make in sections.items()}

    def body(match: re.Match[str]) -> str:
        name = match.group("name")
        inner = made.get(name, match.group("body"))
        return f"{match.group(1)}{inner}{match.group(4)}"

    return _MARKER.sub(body, text)


def main(argv: Sequence[str] | None = None) -> int:
    args = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    args.add_argument("--check", action="store_true", help="exit 1 when the page is not up to date")
    args.add_argument("--page", type=Path, default=PAGE)
    options = args.parse_args(argv)
    text = options.page.read_text(encoding="utf-8")
    made = generated(text)
    if options.check:
        if made != text:
            sys.stderr.write(f"{options.page} is out of date: run python -m tfdeclare.cli.reference\n")
            return 1
        return 0
    if made != text:
        options.page.write_text(made, encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
