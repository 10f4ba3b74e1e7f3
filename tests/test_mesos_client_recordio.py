"""RecordIO decoding: any re-chunking yields the same events; malformed input fails cleanly."""

from __future__ import annotations

import itertools
import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tfdeclare.backends.mesos.errors import RecordIOError
from tfdeclare.backends.mesos.recordio import RecordIODecoder, decode_event, encode

# JSON events with arbitrary (multi-byte) text, like messages and labels from the master.
_json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(),
    lambda kids: st.lists(kids, max_size=3) | st.dictionaries(st.text(max_size=8), kids, max_size=3),
    max_leaves=8,
)
events = st.lists(
    st.fixed_dictionaries({"type": st.sampled_from(["UPDATE", "OFFERS", "ERROR"]), "x": _json_values}),
    min_size=1,
    max_size=8,
)


def _stream(evs: list[dict[str, object]]) -> bytes:
    return b"".join(encode(json.dumps(e, ensure_ascii=False).encode("utf-8")) for e in evs)


def _split(data: bytes, cuts: list[int]) -> list[bytes]:
    points = sorted({c % (len(data) + 1) for c in cuts})
    bounds = [0, *points, len(data)]
    return [data[a:b] for a, b in itertools.pairwise(bounds)]


@pytest.mark.slow  # 300 generated streams
@settings(max_examples=300, deadline=None)
@given(events, st.lists(st.integers(min_value=0, max_value=10**6), max_size=40))
def test_any_rechunking_yields_the_same_events(evs: list[dict[str, object]], cuts: list[int]) -> None:
    decoder = RecordIODecoder()
    out = [decode_event(r) for chunk in _split(_stream(evs), cuts) for r in decoder.feed(chunk)]
    decoder.close()
    assert out == evs


@settings(max_examples=50, deadline=None)
@given(events)
def test_one_byte_chunks(evs: list[dict[str, object]]) -> None:
    data = _stream(evs)
    decoder = RecordIODecoder()
    out = [decode_event(r) for i in range(len(data)) for r in decoder.feed(data[i : i + 1])]
    assert out == evs
    assert decoder.buffered == 0


def test_length_is_bytes_not_characters() -> None:
    payload = json.dumps({"message": "Größe ✓ 任务 🚀"}, ensure_ascii=False).encode("utf-8")
    data = encode(payload) * 2
    assert data.startswith(b"%d\n" % len(payload)) and len(payload) > len(payload.decode())
    assert RecordIODecoder().feed(data) == [payload, payload]


@pytest.mark.parametrize(
    "data",
    [
        b"x\n{}",
        b"-2\n{}",
        b" 2\n{}",
        b"+2\n{}",
        b"2 \n{}",
        b"\n{}",
        b"0\n",
        b"1a",
        b"12345678901234567890123",
    ],
)
def test_malformed_prefix_is_a_clean_error(data: bytes) -> None:
    with pytest.raises(RecordIOError):
        RecordIODecoder().feed(data)


def test_malformed_prefix_split_across_chunks() -> None:
    decoder = RecordIODecoder()
    assert decoder.feed(b"1") == []
    with pytest.raises(RecordIOError):
        decoder.feed(b"x\n")


def test_max_record_size() -> None:
    decoder = RecordIODecoder(max_record_size=10)
    assert decoder.feed(b"10\n0123456789") == [b"0123456789"]
    with pytest.raises(RecordIOError, match="exceeds the limit of 10 bytes"):
        decoder.feed(b"11\n")


def test_truncated_stream() -> None:
    decoder = RecordIODecoder()
    decoder.feed(b'5\n{"a"')
    with pytest.raises(RecordIOError, match="ended inside"):
        decoder.close()
    with pytest.raises(RecordIOError):
        encode(b"")


@pytest.mark.parametrize("payload", [b"\xff\xfe", b"{not json", b"[1, 2]", '"ü"'.encode()])
def test_bad_payloads(payload: bytes) -> None:
    with pytest.raises(RecordIOError):
        decode_event(payload)


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=64))
def test_garbage_never_raises_anything_else(data: bytes) -> None:
    decoder = RecordIODecoder(max_record_size=32)
    try:
        for record in decoder.feed(data):
            decode_event(record)
        decoder.close()
    except RecordIOError:
        pass
