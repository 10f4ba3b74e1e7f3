"""TensorBoard event files read without TensorFlow: TFRecord framing and the two fields of an
``Event`` that progress needs. Pure and bounded: a task writes these files, so any byte may be
hostile.

A TFRecord is ``length`` (uint64, little-endian), ``masked_crc32c(length)`` (uint32), ``length``
bytes of data, ``masked_crc32c(data)`` (uint32). The data is an ``Event`` protocol buffer, of
which we read field 1 (``wall_time``, a double) and field 2 (``step``, an int64 varint; absent
when 0, so an event with a summary, field 5, and no step is at step 0).

``records`` takes bytes read from some offset of a file and returns the events of every whole
record in them and how many bytes those took, so the caller reads only what is new next time
(a record cut at the end waits for its rest). The length's checksum is checked (12 bytes, cheap
in Python), the data's is not (a pure-Python CRC over every byte would cost more than the rest);
so a damaged record may give a wrong step, never a wrong framing. ``resync`` finds the first
record boundary in bytes that start anywhere (a look at a file's tail only), by the length's
checksum. A record longer than ``MAX_RECORD`` ends the reading of that file (``Frames.broken``).
"""

from __future__ import annotations

import math
import struct
from dataclasses import dataclass

MAX_RECORD = 1 << 20  # an Event with a step is tens of bytes; images and graphs can be larger


def _table() -> tuple[int, ...]:
    poly = 0x82F63B78  # CRC-32C (Castagnoli), reflected
    out = []
    for n in range(256):
        c = n
        for _ in range(8):
            c = (c >> 1) ^ poly if c & 1 else c >> 1
        out.append(c)
    return tuple(out)


_TABLE = _table()


def crc32c(data: bytes) -> int:
    crc = 0xFFFFFFFF
    for byte in data:
        crc = _TABLE[(crc ^ byte) & 0xFF] ^ (crc >> 8)
    return crc ^ 0xFFFFFFFF


def masked_crc32c(data: bytes) -> int:
    """TFRecord's mask: rotated right by 15 bits plus a constant."""
    crc = crc32c(data)
    return ((((crc >> 15) | (crc << 17)) & 0xFFFFFFFF) + 0xA282EAD8) & 0xFFFFFFFF


def frame(data: bytes) -> bytes:
    """One TFRecord around ``data`` (tests write event files with it)."""
    length = struct.pack("<Q", len(data))
    return length + struct.pack("<I", masked_crc32c(length)) + data + struct.pack("<I", masked_crc32c(data))


@dataclass(frozen=True, slots=True)
class Event:
    step: int | None
    wall_time: float | None  # seconds since the epoch, as the task wrote it (not trusted)


@dataclass(frozen=True, slots=True)
class Frames:
    events: tuple[Event, ...]
    consumed: int  # bytes of whole records read: the next read starts there
    broken: bool = False  # a length that does not check, or a record over MAX_RECORD


def _header_ok(data: bytes, at: int) -> int | None:
    """The record length at ``at`` when its checksum holds and it is within bounds."""
    head = data[at : at + 8]
    if len(head) < 8 or len(data) < at + 12:
        return None
    (crc,) = struct.unpack_from("<I", data, at + 8)
    if crc != masked_crc32c(head):
        return None
    (length,) = struct.unpack_from("<Q", head)
    return length if length <= MAX_RECORD else None


def records(data: bytes) -> Frames:
    """The events of the whole records at the start of ``data`` (module docstring)."""
    at, events = 0, list[Event]()
    while len(data) - at >= 12:
        length = _header_ok(data, at)
        if length is None:
            return Frames(tuple(events), at, broken=True)
        end = at + 12 + length + 4
        if end > len(data):
            break  # the rest is still being written
        events.append(event(data[at + 12 : at + 12 + length]))
        at = end
    return Frames(tuple(events), at)


RESYNC_CHECKS = 4096  # checksums ``resync`` computes at most (each costs about 5 µs)
_WALL_TIME_KEY = 0x09  # field 1, a double: what TensorFlow writes first in every Event
_HIGH_ZEROS = b"\0" * 5  # a record of at most 16 MiB has these high bytes of its length zero


def resync(data: bytes) -> int | None:
    """The first offset in ``data`` where a whole record (its length checked) starts and the
    bytes after it frame further records or end; None when there is none among the first
    ``RESYNC_CHECKS`` candidates. A candidate is an offset whose record would start with an
    Event's first key and whose length is small: found by ``bytes.find``, so a file of zeros or
    noise costs a scan in C, not a checksum per byte."""
    checks = 0
    found = data.find(bytes([_WALL_TIME_KEY]), 12)
    while found != -1 and checks < RESYNC_CHECKS:
        at = found - 12
        if data[at + 3 : at + 8] == _HIGH_ZEROS:
            checks += 1
            length = _header_ok(data, at)
            if length is not None:
                end = at + 12 + length + 4
                if end >= len(data) or _header_ok(data, end) is not None:
                    return at
        found = data.find(bytes([_WALL_TIME_KEY]), found + 1)
    return None


def _varint(data: bytes, at: int) -> tuple[int, int]:
    value, shift = 0, 0
    while at < len(data) and shift < 70:
        byte = data[at]
        at += 1
        value |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return value, at
        shift += 7
    raise ValueError("truncated varint")


def event(data: bytes) -> Event:
    """``step`` and ``wall_time`` of an ``Event``; either None where absent or malformed."""
    step: int | None = None
    wall: float | None = None
    summary = False  # field 5: a summary (step 0 is not written: proto3's default)
    at = 0
    try:
        while at < len(data):
            key, at = _varint(data, at)
            field, wire = key >> 3, key & 7
            if wire == 0:
                value, at = _varint(data, at)
                if field == 2:
                    step = value - (1 << 64) if value >= 1 << 63 else value
            elif wire == 1:
                if at + 8 > len(data):
                    break
                if field == 1:
                    (wall,) = struct.unpack_from("<d", data, at)
                at += 8
            elif wire == 2:
                size, at = _varint(data, at)
                at += size
                summary = summary or field == 5
            elif wire == 5:
                at += 4
            else:
                break  # groups or garbage: what was read so far stands
    except ValueError:
        pass
    if wall is not None and not math.isfinite(wall):
        wall = None
    if step is None and summary:
        step = 0
    return Event(step, wall)


def event_bytes(step: int, wall_time: float) -> bytes:
    """An ``Event`` with only ``wall_time`` and ``step`` (tests)."""
    out = bytearray(b"\x09" + struct.pack("<d", wall_time) + b"\x10")
    value = step & 0xFFFFFFFFFFFFFFFF
    while True:
        byte = value & 0x7F
        value >>= 7
        out.append(byte | (0x80 if value else 0))
        if not value:
            return bytes(out)
