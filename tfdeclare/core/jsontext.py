"""JSON text with fixed options, its encoder made once: ``json.dumps`` with options, and even a
``JSONEncoder``'s ``encode``, build the C encoder again at every call (about 1.3 µs, as much as
encoding a small value); a plan of 10,000 new jobs encodes 120,000 values and 10,000 specs.

The text is ``JSONEncoder(**options).encode``'s, byte for byte: the same C encoder, called the
way ``encode`` calls it (``json.encoder.c_make_encoder``; where the C accelerator is missing,
``encode`` itself, as also where that encoder does not give ``encode``'s text for a sample at
start). Without the circular-reference check: the values are acyclic data read
from YAML or JSON (an alias's value is built again where it is used).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from json import encoder as _stdlib
from typing import Any


def encoder(*, sort_keys: bool = False, separators: tuple[str, str] = (", ", ": ")) -> Callable[[Any], str]:
    """``json.JSONEncoder(ensure_ascii=False, sort_keys=..., separators=...).encode``, made once."""
    plain = json.JSONEncoder(ensure_ascii=False, sort_keys=sort_keys, separators=separators)
    make = getattr(_stdlib, "c_make_encoder", None)  # not in the type stubs; None without _json
    if make is None:  # pragma: no cover - CPython has its C accelerator
        return plain.encode
    item_separator, key_separator = separators
    text = _stdlib.encode_basestring  # ensure_ascii=False's
    try:
        # JSONEncoder.iterencode's arguments for these options: markers (None: no circular
        # check), default, the string encoder, indent, the separators, sort_keys, skipkeys,
        # allow_nan
        chunks = make(None, plain.default, text, None, key_separator, item_separator, sort_keys, False, True)
    except TypeError:  # pragma: no cover - another Python's signature: json's own way
        return plain.encode

    def encode(value: Any) -> str:
        if isinstance(value, str):
            return text(value)  # as ``encode`` does
        return "".join(chunks(value, 0))

    sample = {"b": [1, 2.5, None, True, "é"], "a": {}}
    return encode if encode(sample) == plain.encode(sample) else plain.encode
