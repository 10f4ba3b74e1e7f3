"""``core.jsontext``'s encoders give ``JSONEncoder.encode``'s text byte for byte (the spec
hash of every applied job depends on it), over random JSON-like values."""

from __future__ import annotations

import json
import random
from typing import Any

import pytest

from tfdeclare.core import jsontext

_SCALARS = [
    "a",
    "é\u2028x",
    "",
    1,
    0,
    -2.5,
    1e300,
    10**30,
    float("inf"),
    True,
    False,
    None,
    '"q"\\',
    "\x00\t",
    "🙂",
]


def _value(rng: random.Random, depth: int = 0) -> Any:
    roll = rng.random()
    if depth > 3 or roll < 0.3:
        return rng.choice(_SCALARS)
    if roll < 0.6:
        return [_value(rng, depth + 1) for _ in range(rng.randint(0, 4))]
    return {
        rng.choice(["b", "a", "ü", "z z", "10", "2"]): _value(rng, depth + 1)
        for _ in range(rng.randint(0, 4))
    }


@pytest.mark.parametrize(
    "options", [{}, {"sort_keys": True, "separators": (",", ":")}], ids=["shown", "fingerprint"]
)
def test_the_text_is_json_encoders_byte_for_byte(options: dict[str, Any]) -> None:
    encode = jsontext.encoder(**options)
    assert not hasattr(encode, "__self__"), "CPython: the encoder made once, not JSONEncoder.encode"
    reference = json.JSONEncoder(ensure_ascii=False, **options).encode
    rng = random.Random(33)
    for _ in range(3000):
        value = _value(rng)
        assert encode(value) == reference(value)
    assert encode({"b": 1, "a": [1.5, "x"]}) == reference({"b": 1, "a": [1.5, "x"]})
