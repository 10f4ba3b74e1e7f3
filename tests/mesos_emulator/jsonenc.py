"""stout-compatible JSON <-> protobuf-shaped dict conversion, and RecordIO framing.

Owns the wire encoding rules of reference §1.11, following stout's ``protobuf.hpp``:

* parsing (``parse``): unknown keys are ignored; ``null`` means unset; an unknown enum name
  is dropped in an optional field and an error in a required one; ``bytes`` must be
  base64; numbers may be given as strings, doubles accept ``"Infinity"``; a scalar where a
  repeated field is expected counts as one element; missing required fields give
  ``Missing required fields: a.b, c[0].d``. The result is a plain ``dict`` holding only
  known fields (``bytes`` decoded, enums as names, maps as dicts).
* writing (``encode`` / ``dumps``): fields in declaration order; empty repeated fields are
  omitted; an unset optional field with an explicit, non-deprecated default is written
  with that default; ``bytes`` as base64; strings as raw UTF-8 (never ``\\uXXXX``).
"""

from __future__ import annotations

import base64
import binascii
import json
from typing import Any

from .schema import (
    CATEGORY_BOOL,
    CATEGORY_BYTES,
    CATEGORY_ENUM,
    CATEGORY_FLOAT,
    CATEGORY_MESSAGE,
    CATEGORY_STRING,
    ENUM_SETS,
    FIELDS_BY_NAME,
    MESSAGES,
    OPAQUE,
    REQUIRED,
    Field,
)

Message = dict[str, Any]

_INT_KINDS = frozenset({"int32", "int64", "uint32", "uint64"})
_FLOAT_KINDS = frozenset({"double", "float"})


class ParseError(ValueError):
    """A JSON value could not be converted into the expected message."""


# ---------------------------------------------------------------------------------------
# parsing


def parse(message_type: str, value: object) -> Message:
    """Convert a decoded JSON value into a message dict, or raise ``ParseError``."""
    if not isinstance(value, dict):
        raise ParseError("Expecting a JSON object")
    incomplete = [False]
    message = _parse_message(message_type, value, incomplete)
    if incomplete[0]:
        missing: list[str] = []
        _missing_required(message_type, message, "", missing)
        raise ParseError("Missing required fields: " + ", ".join(missing))
    return message


def parse_json_bytes(message_type: str, body: bytes) -> Message:
    """Parse raw request bytes; JSON syntax errors raise ``json.JSONDecodeError``."""
    return parse(message_type, json.loads(body))


def _parse_message(message_type: str, obj: dict[str, Any], incomplete: list[bool]) -> Message:
    if message_type in OPAQUE:
        return dict(obj)
    fields = FIELDS_BY_NAME[message_type]
    out: Message = {}
    for key, raw in obj.items():
        field = fields.get(key)
        if field is None or raw is None:
            continue
        if type(raw) is list:
            if field.label != "repeated":
                raise ParseError(f"Not expecting a JSON array for field '{key}'")
            _extend(out, field, raw, incomplete)
        elif field.label == "map":
            if type(raw) is not dict:
                raise ParseError(_not_expecting(raw, key))
            target = out.setdefault(key, {})
            for name, item in raw.items():
                value = _parse_value(field, item, "value", incomplete)
                if value is not _UNSET:
                    target[name] = value
        else:
            value = _parse_value(field, raw, key, incomplete)
            if value is _UNSET:
                continue
            if field.label == "repeated":
                out.setdefault(key, []).append(value)
            else:
                out[key] = value
    for name in REQUIRED[message_type]:
        if name not in out:
            incomplete[0] = True
            break
    return out


def _extend(out: Message, field: Field, raw: list[Any], incomplete: list[bool]) -> None:
    for element in raw:
        if element is None:
            continue
        if type(element) is list:
            _extend(out, field, element, incomplete)
            continue
        value = _parse_value(field, element, field.name, incomplete)
        if value is not _UNSET:
            out.setdefault(field.name, []).append(value)


class _Unset:
    pass


_UNSET = _Unset()


def _not_expecting(raw: object, name: str) -> str:
    if isinstance(raw, dict):
        what = "object"
    elif isinstance(raw, str):
        what = "string"
    elif isinstance(raw, bool):
        what = "boolean"
    elif isinstance(raw, list):
        what = "array"
    else:
        what = "number"
    return f"Not expecting a JSON {what} for field '{name}'"


def _parse_value(field: Field, raw: object, name: str, incomplete: list[bool]) -> object:
    category = field.category
    if raw is None:
        return _UNSET
    if category == CATEGORY_MESSAGE:
        if type(raw) is not dict:
            raise ParseError(_not_expecting(raw, name))
        return _parse_message(field.kind, raw, incomplete)
    if isinstance(raw, dict):
        raise ParseError(_not_expecting(raw, name))
    if category == CATEGORY_STRING:
        if type(raw) is not str:
            raise ParseError(_not_expecting(raw, name))
        return raw
    if category == CATEGORY_ENUM:
        if type(raw) is not str:
            raise ParseError(_not_expecting(raw, name))
        if raw not in ENUM_SETS[field.kind]:
            if field.label == "required":
                raise ParseError(f"Failed to find enum for '{raw}'")
            return _UNSET
        return raw
    if category == CATEGORY_BYTES:
        if not isinstance(raw, str):
            raise ParseError(_not_expecting(raw, name))
        try:
            return base64.b64decode(raw.encode("ascii"), validate=True)
        except (binascii.Error, UnicodeEncodeError) as exc:
            raise ParseError(f"Failed to base64 decode bytes field '{name}': {exc}") from exc
    if category == CATEGORY_BOOL:
        return _parse_bool(raw, name)
    return _parse_number(field.kind, raw, name)


def _parse_bool(raw: object, name: str) -> bool:
    if isinstance(raw, bool):
        return raw
    if isinstance(raw, str):
        if raw in ("true", "false"):
            return raw == "true"
        raise ParseError(f"Failed to parse '{raw}' as a JSON boolean for field '{name}'")
    raise ParseError(_not_expecting(raw, name))


def _parse_number(kind: str, raw: object, name: str) -> object:
    if isinstance(raw, bool):
        raise ParseError(_not_expecting(raw, name))
    number: float | int
    if isinstance(raw, str):
        if kind in _FLOAT_KINDS and raw in ("Infinity", "-Infinity"):
            return float("inf") if raw == "Infinity" else float("-inf")
        try:
            parsed = json.loads(raw)
        except ValueError as exc:
            raise ParseError(f"Failed to parse '{raw}' as a JSON number for field '{name}': {exc}") from exc
        if isinstance(parsed, bool) or not isinstance(parsed, int | float):
            raise ParseError(f"Failed to parse '{raw}' as a JSON number for field '{name}'")
        number = parsed
    elif isinstance(raw, int | float):
        number = raw
    else:
        raise ParseError(_not_expecting(raw, name))
    if kind in _FLOAT_KINDS:
        return float(number)
    if kind in _INT_KINDS:
        try:
            return int(number)
        except (OverflowError, ValueError) as exc:
            raise ParseError(f"Invalid number for field '{name}'") from exc
    raise ParseError(_not_expecting(raw, name))


def _missing_required(message_type: str, message: Message, prefix: str, out: list[str]) -> None:
    if message_type in OPAQUE:
        return
    fields = MESSAGES[message_type]
    for field in fields:
        if field.label == "required" and field.name not in message:
            out.append(prefix + field.name)
    for field in fields:
        if not field.is_message or field.name not in message:
            continue
        value = message[field.name]
        if field.label == "repeated":
            for index, element in enumerate(value):
                _missing_required(field.kind, element, f"{prefix}{field.name}[{index}].", out)
        elif field.label == "map":
            for key, element in value.items():
                _missing_required(field.kind, element, f"{prefix}{field.name}[{key}].", out)
        else:
            _missing_required(field.kind, value, f"{prefix}{field.name}.", out)


# ---------------------------------------------------------------------------------------
# writing


_NO_DEFAULT = object()
# Per message: (name, label, category, kind, default to write when unset).
_PLAN: dict[str, tuple[tuple[str, str, int, str, object], ...]] = {
    message: tuple(
        (
            f.name,
            f.label,
            f.category,
            f.kind,
            f.default
            if f.default is not None and not f.deprecated and f.label != "repeated"
            else _NO_DEFAULT,
        )
        for f in fields
    )
    for message, fields in MESSAGES.items()
}


def encode(message_type: str, message: Message) -> dict[str, Any]:
    """Return the stout JSON object (an ordered dict) for a message dict."""
    if message_type in OPAQUE:
        return message
    out: dict[str, Any] = {}
    for name, label, category, kind, default in _PLAN[message_type]:
        if name in message:
            value = message[name]
            if label == "repeated":
                if value:
                    out[name] = [_encode_value(category, kind, item) for item in value]
            elif label == "map":
                if value:
                    out[name] = {k: _encode_value(category, kind, v) for k, v in value.items()}
            else:
                out[name] = _encode_value(category, kind, value)
        elif default is not _NO_DEFAULT:
            out[name] = default
    return out


def _encode_value(category: int, kind: str, value: Any) -> Any:
    if category == CATEGORY_MESSAGE:
        return encode(kind, value)
    if category == CATEGORY_BYTES:
        return base64.b64encode(value).decode("ascii")
    if category == CATEGORY_FLOAT:
        return float(value)
    return value


def dumps(message_type: str, message: Message) -> bytes:
    """Encode a message to compact JSON bytes with raw UTF-8 strings."""
    text = json.dumps(encode(message_type, message), ensure_ascii=False, separators=(",", ":"))
    return text.encode("utf-8")


def record(payload: bytes) -> bytes:
    """Frame one payload as a RecordIO record: ``<length>\\n<payload>``."""
    return b"%d\n%s" % (len(payload), payload)


def json_bytes_string(data: bytes) -> bytes:
    """Write raw bytes as a JSON string literal without re-encoding non-ASCII bytes.

    Used for ``/files/read`` where Mesos puts raw file bytes into a JSON string.
    """
    out = bytearray(b'"')
    for byte in data:
        if byte == 0x22:
            out += b'\\"'
        elif byte == 0x5C:
            out += b"\\\\"
        elif byte == 0x0A:
            out += b"\\n"
        elif byte == 0x0D:
            out += b"\\r"
        elif byte == 0x09:
            out += b"\\t"
        elif byte < 0x20:
            out += b"\\u%04x" % byte
        else:
            out.append(byte)
    out += b'"'
    return bytes(out)
