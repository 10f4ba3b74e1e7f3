"""Plain scalars: the YAML 1.2 core schema, as ``documents`` resolves an untagged scalar.

``NO``, ``yes`` and ``on`` stay strings; ``0o17`` and ``0x1f`` are integers; ``.inf`` and ``.nan``
are floats (which ``documents`` then refuses as not finite). An integer too large for Python
to write out again (more than 4,300 digits) raises ``ValueError`` with a message for the user.
"""

from __future__ import annotations

import re
from typing import Any

_INT = re.compile(r"[-+]?[0-9]+\Z")
_OCT = re.compile(r"0o[0-7]+\Z")
_HEX = re.compile(r"0x[0-9a-fA-F]+\Z")
_FLOAT = re.compile(r"[-+]?(\.[0-9]+|[0-9]+(\.[0-9]*)?)([eE][-+]?[0-9]+)?\Z")
_NULLS = frozenset({"", "~", "null", "Null", "NULL"})
_TRUE = frozenset({"true", "True", "TRUE"})
_FALSE = frozenset({"false", "False", "FALSE"})
NOT_STRING_WORDS = _NULLS | _TRUE | _FALSE
_SPECIAL_FLOATS = frozenset(
    {".inf", ".Inf", ".INF", "+.inf", "+.Inf", "+.INF", "-.inf", "-.Inf", "-.INF", ".nan", ".NaN", ".NAN"}
)


def resolve_plain(text: str) -> Any:
    """YAML 1.2 core schema for an untagged plain scalar (hot: ordered by what is common)."""
    if not text:
        return None
    first = text[0]
    if first in "nNtTfF~":  # null, true, false, or (much more often) a word such as "name"
        if text in _NULLS:
            return None
        if text in _TRUE:
            return True
        if text in _FALSE:
            return False
        return text
    if first.isascii() and first.isdigit():
        if text.isascii() and text.isdigit():
            return _decimal(text)
    elif first not in "-+.":
        return text  # a word, a path, ...: the common case
    if _INT.match(text):
        return _decimal(text)
    if _OCT.match(text):
        return _bounded(int(text[2:], 8), text)
    if _HEX.match(text):
        return _bounded(int(text[2:], 16), text)
    if _FLOAT.match(text):
        return float(text)
    if text in _SPECIAL_FLOATS:
        return float(text.replace(".", "", 1))
    return text


def _decimal(text: str) -> int:
    try:
        return int(text, 10)
    except ValueError:  # longer than sys.get_int_max_str_digits()
        raise ValueError(f"integer of {len(text)} digits is too large") from None


# Python refuses to write an integer of more than 4,300 decimal digits (and so would every
# message and fingerprint that shows it): hexadecimal and octal ones are bounded below that.
_MAX_BITS = 14_000


def _bounded(value: int, text: str) -> int:
    if value.bit_length() > _MAX_BITS:
        raise ValueError(f"integer of {len(text)} characters is too large")
    return value
