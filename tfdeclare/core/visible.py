"""Text from specs, files and commits as it may be shown: every character that moves a
terminal's cursor, starts an escape sequence, breaks a line or reorders what is read,
written out visibly instead.

Anyone who can write a spec, name a file or a label key, or write a commit subject chooses
the text that diagnostics, plans, ``status``, ``history`` and the daemon's log then print to a
terminal, a log line or a pull-request comment. ``visible`` is where that text is made safe:
C0 controls, DEL, C1 controls, the Unicode line and paragraph separators (U+2028, U+2029: line
breaks to YAML and JavaScript) and the bidirectional overrides and isolates (U+202A-U+202E,
U+2066-U+2069) are written ``\\n``, ``\\t``, ``\\x1b``, ``\\x85``, ``\\u2028``..., so that one
diagnostic is always one line and no value ends a comment or a Markdown code block. Data
outputs (``-o json``, ``-o yaml``, status files) keep exact values: their encoders escape them.

JSON's own escapes stop at C0, so a stream of JSON lines read on a terminal or by a log
collector (the daemon's ``--log-format json``, ``logs -o json``, ``status --watch -o json``)
is written by ``json_line``: the same characters (DEL, C1, the separators, the bidirectional
controls) as ``\\uXXXX`` escapes too. Still the exact value once decoded; other non-ASCII text
(``é``, ``中文``) stays as it is, readable.

It is called where text is emitted, never where files are loaded: text without such a
character (nearly all) is returned as it is after one ``str.isprintable`` pass in C.
"""

from __future__ import annotations

import json
import re
from typing import Any

_NAMED = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}

UNSAFE = re.compile("[\x00-\x1f\x7f-\x9f\u2028\u2029\u202a-\u202e\u2066-\u2069]")
"""The characters ``visible`` writes out (also: what may never reach a YAML comment)."""


# What JSON leaves raw of ``UNSAFE`` (it escapes C0 itself).
_JSON_RAW = re.compile("[\x7f-\x9f\u2028\u2029\u202a-\u202e\u2066-\u2069]")


def _json_escaped(match: re.Match[str]) -> str:
    return f"\\u{ord(match.group()):04x}"


def json_line(value: Any, *, sort_keys: bool = False) -> str:
    """``value`` as one line of JSON (no newline at its end) for a terminal or a log
    collector: ``json.dumps`` keeping non-ASCII text as it is, with every character of
    ``UNSAFE`` escaped ``\\uXXXX`` (JSON escapes C0; here also DEL, C1, U+2028, U+2029 and the
    bidirectional controls, which only a string can hold), so that it decodes to ``value``."""
    text = json.dumps(value, ensure_ascii=False, sort_keys=sort_keys)
    return text if text.isprintable() else _JSON_RAW.sub(_json_escaped, text)


def _escaped(match: re.Match[str]) -> str:
    char = match.group()
    named = _NAMED.get(char)
    if named is not None:
        return named
    code = ord(char)
    return f"\\x{code:02x}" if code <= 0xFF else f"\\u{code:04x}"


def visible(text: str) -> str:
    """``text`` with its control characters, line and paragraph separators and bidirectional
    controls written out (``"a\\nb"`` -> ``a\\nb`` as four characters); other text unchanged.
    A backslash is kept as it is: the result is for reading, not for parsing back."""
    if text.isprintable():  # the fast way out: every character ``UNSAFE`` names is not printable
        return text
    return UNSAFE.sub(_escaped, text)


def visible_data(value: Any) -> Any:
    """``value`` (JSON-like data: a status document) with ``visible`` applied to every string
    in it, keys too, for a text rendering of it; the data itself is not changed."""
    if isinstance(value, str):
        return visible(value)
    if isinstance(value, dict):
        return {visible_data(k): visible_data(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [visible_data(v) for v in value]
    return value
