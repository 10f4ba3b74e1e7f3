"""Byte-exact RecordIO framing of the Mesos event stream.

A stream is a sequence of records ``<decimal byte length>\\n<payload>`` with no separator.
This module owns the incremental decoder (independent of how the bytes were chunked on the
wire), the encoder (used by tests and emulators), and the JSON decoding of one payload.
Payloads are sliced as bytes; UTF-8 is decoded only after slicing.
"""

from __future__ import annotations

import json
from typing import Any

from tfdeclare.backends.mesos.errors import RecordIOError

DEFAULT_MAX_RECORD_SIZE = 64 * 1024 * 1024
_MAX_PREFIX_DIGITS = 20  # an unsigned 64-bit length has at most 20 decimal digits
_DIGITS = frozenset(b"0123456789")


def encode(payload: bytes) -> bytes:
    """One record: the payload's byte length in ASCII decimal, a newline, the payload."""
    if not payload:
        raise RecordIOError("a RecordIO record cannot be empty")
    return b"%d\n%s" % (len(payload), payload)


class RecordIODecoder:
    """Incremental decoder: ``feed`` any slice of the stream, get back the complete records."""

    def __init__(self, max_record_size: int = DEFAULT_MAX_RECORD_SIZE) -> None:
        if max_record_size < 1:
            raise ValueError("max_record_size must be at least 1")
        self._max = max_record_size
        self._buf = bytearray()
        self._need: int | None = None  # payload length once the prefix has been parsed

    @property
    def buffered(self) -> int:
        """Bytes held back, waiting for the rest of a record."""
        return len(self._buf)

    def feed(self, data: bytes) -> list[bytes]:
        """Add bytes; return every record completed by them, in order.

        Raises RecordIOError on a malformed length prefix or a record above the size limit;
        the decoder is then unusable (the stream cannot be resynchronised).
        """
        self._buf += data
        records: list[bytes] = []
        while True:
            if self._need is None:
                nl = self._buf.find(b"\n", 0, _MAX_PREFIX_DIGITS + 1)
                prefix = self._buf if nl < 0 else self._buf[:nl]
                if any(b not in _DIGITS for b in prefix):
                    raise RecordIOError(f"malformed RecordIO length prefix {bytes(prefix[:24])!r}")
                if nl < 0:
                    if len(self._buf) > _MAX_PREFIX_DIGITS:
                        raise RecordIOError("RecordIO length prefix is too long")
                    return records
                if nl == 0:
                    raise RecordIOError("empty RecordIO length prefix")
                length = int(prefix)
                if length == 0:
                    raise RecordIOError("RecordIO record of length 0")
                if length > self._max:
                    raise RecordIOError(
                        f"RecordIO record of {length} bytes exceeds the limit of {self._max} bytes"
                    )
                del self._buf[: nl + 1]
                self._need = length
            if len(self._buf) < self._need:
                return records
            records.append(bytes(self._buf[: self._need]))
            del self._buf[: self._need]
            self._need = None

    def close(self) -> None:
        """Declare the end of the stream; raises RecordIOError if a record was cut short."""
        if self._buf or self._need is not None:
            raise RecordIOError(f"stream ended inside a RecordIO record ({len(self._buf)} bytes pending)")


def decode_event(payload: bytes) -> dict[str, Any]:
    """Decode one record's payload as a JSON object (UTF-8)."""
    try:
        event = json.loads(payload.decode("utf-8"))
    except UnicodeDecodeError as exc:
        raise RecordIOError(f"event is not valid UTF-8: {exc}") from None
    except json.JSONDecodeError as exc:
        raise RecordIOError(f"event is not valid JSON: {exc}") from None
    if not isinstance(event, dict):
        raise RecordIOError(f"event is a JSON {type(event).__name__}, not an object")
    return event
