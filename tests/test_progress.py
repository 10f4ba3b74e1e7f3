"""Progress from what a job writes (issue 34): the TFRecord/Event reader and the derivation,
pure, in tables with an injected clock."""

from __future__ import annotations

import struct
from collections import Counter

import pytest

from tfdeclare.core.run import tfevents
from tfdeclare.core.run.progress import (
    Checkpoint,
    Observation,
    Progress,
    Sample,
    checkpoint_name,
    checkpoint_step,
    observe,
    restart_cost,
    since_checkpoint,
)
from tfdeclare.core.run.tfevents import Event, event, event_bytes, frame, masked_crc32c, records, resync


def test_crc32c_known_answer() -> None:
    # RFC 3720's check value for CRC-32C of "123456789"
    assert tfevents.crc32c(b"123456789") == 0xE3069283
    assert masked_crc32c(b"") == ((0 >> 15 | 0 << 17) + 0xA282EAD8) & 0xFFFFFFFF


def _file(*steps: tuple[int, float]) -> bytes:
    return b"".join(frame(event_bytes(step, wall)) for step, wall in steps)


@pytest.mark.parametrize(
    ("data", "steps", "consumed", "broken"),
    [
        (b"", [], 0, False),
        (_file((1, 10.0)), [1], len(_file((1, 10.0))), False),
        (_file((1, 10.0), (2, 11.0)), [1, 2], len(_file((1, 10.0), (2, 11.0))), False),
        # a record cut at the end waits for its rest
        (_file((1, 10.0), (2, 11.0))[:-3], [1], len(_file((1, 10.0))), False),
        # a length whose checksum does not hold ends the reading there
        (_file((1, 10.0)) + b"\x05" + b"\x00" * 20, [1], len(_file((1, 10.0))), True),
        # a record longer than MAX_RECORD (its checksum right) too
        (
            struct.pack("<Q", tfevents.MAX_RECORD + 1)
            + struct.pack("<I", masked_crc32c(struct.pack("<Q", tfevents.MAX_RECORD + 1))),
            [],
            0,
            True,
        ),
    ],
)
def test_records(data: bytes, steps: list[int], consumed: int, broken: bool) -> None:
    frames = records(data)
    assert [e.step for e in frames.events] == steps
    assert frames.consumed == consumed
    assert frames.broken is broken


@pytest.mark.parametrize(
    ("data", "expected"),
    [
        (event_bytes(12, 1.5), Event(12, 1.5)),
        (event_bytes(-1, 1.5), Event(-1, 1.5)),  # an int64 as protobuf writes it (10 bytes)
        (b"\x09" + struct.pack("<d", float("nan")) + b"\x10\x07", Event(7, None)),  # not a time
        (b"\x1a\x03abc" + event_bytes(3, 2.0), Event(3, 2.0)),  # file_version (field 3) skipped
        (b"\x10", Event(None, None)),  # a truncated varint
        (b"\x10\x80\x80", Event(None, None)),
        (b"\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff", Event(None, None)),  # no varint ends
        (b"", Event(None, None)),
    ],
)
def test_event_fields(data: bytes, expected: Event) -> None:
    assert event(data) == expected


def test_resync_finds_the_first_whole_record_in_a_tail() -> None:
    data = _file(*((i, float(i)) for i in range(50)))
    for cut in (1, 7, 13, 20, 31):
        tail = data[cut:]
        at = resync(tail)
        assert at is not None
        frames = records(tail[at:])
        assert not frames.broken
        assert frames.events[-1].step == 49
        assert frames.events[0].step in (1, 2)
    assert resync(b"\x00" * 100) is None
    assert resync(b"") is None


def test_a_real_tensorflow_event_file_parses() -> None:
    """Bytes as tf.summary wrote them (a file_version event, then scalars at steps 0 and 5),
    recorded with TensorFlow 2.21."""
    recorded = bytes.fromhex(
        "3e00000000000000d9d240e7090000802017c5da411a0d627261696e2e4576656e743a3252240a2274656e"
        "736f72666c6f772e636f72652e7574696c2e6576656e74735f77726974657293a13a3f2c00000000000000"
        "f4aecc450930d48c2017c5da412a210a1f0a046c6f7373420a0801120022040000003f4a0b0a090a077363"
        "616c617273b7470b442e00000000000000c5cb57fa09a9dc8c2017c5da4110052a210a1f0a046c6f737342"
        "0a0801120022040000003f4a0b0a090a077363616c617273b3475365"
    )
    frames = records(recorded)
    assert frames.consumed == len(recorded)
    assert not frames.broken
    assert [e.step for e in frames.events] == [
        None,
        0,
        5,
    ]  # step 0 is not written (proto3): a summary without one is at 0
    assert frames.events[0].step is None  # the file_version event has no step
    assert frames.events[0].wall_time is not None


STATE = b"""model_checkpoint_path: "ckpt-12"
all_model_checkpoint_paths: "ckpt-11"
all_model_checkpoint_paths: "ckpt-12"
all_model_checkpoint_timestamps: 1764931000.5
last_preserved_timestamp: 1764930000.0
"""


@pytest.mark.parametrize(
    ("state", "name", "step"),
    [
        (STATE, "ckpt-12", 12),
        (b'model_checkpoint_path: "/mnt/runs/a/ckpt-12000"\n', "ckpt-12000", 12000),
        (b'model_checkpoint_path: "model.ckpt"\n', "model.ckpt", None),
        (b'all_model_checkpoint_paths: "ckpt-1"\n', None, None),
        (b"", None, None),
        (b'model_checkpoint_path: "ckpt-99999999999999999999"\n', "ckpt-99999999999999999999", None),
        (b"\xff\xfe garbage \x00", None, None),
    ],
)
def test_checkpoint_state_file(state: bytes, name: str | None, step: int | None) -> None:
    assert checkpoint_name(state) == name
    if name is not None:
        assert checkpoint_step(name) == step


def _events(*steps: tuple[int, float]) -> tuple[Event, ...]:
    return tuple(Event(step, wall) for step, wall in steps)


@pytest.mark.parametrize(
    ("previous", "seen", "total", "step", "rate", "eta"),
    [
        # nothing read yet
        (None, Observation(100.0), None, None, None, None),
        # one sample: a step, no rate
        (None, Observation(100.0, events=_events((10, 90.0)), events_read=True), 1000, 10, None, None),
        # samples 40 s apart: 2 steps/s; ETA from the latest
        (
            None,
            Observation(100.0, events=_events((10, 50.0), (50, 70.0), (90, 90.0)), events_read=True),
            1090,
            90,
            2.0,
            590.0,
        ),
        # the rate over at least 30 s: base is the newest sample 30 s before the latest
        (
            Progress(step=100, step_at=100.0, base=Sample(0, 0.0), steps_per_second=1.0),
            Observation(200.0, events=_events((400, 190.0)), events_read=True),
            None,
            400,
            round(300 / 90, 4),
            None,
        ),
        # a wall time in the future is taken as the time it was read
        (None, Observation(100.0, events=_events((5, 1e12)), events_read=True), None, 5, None, None),
        # a step out of int64's positive range is ignored
        (None, Observation(100.0, events=_events((-3, 50.0)), events_read=True), None, None, None, None),
        # done: the ETA is when the total was reached
        (
            None,
            Observation(100.0, events=_events((0, 40.0), (500, 90.0)), events_read=True),
            500,
            500,
            10.0,
            90.0,
        ),
        # without event files the checkpoints are the samples
        (
            Progress(step=10, step_at=40.0, checkpoint=Checkpoint("ckpt-10", 10, 40.0)),
            Observation(100.0, checkpoint=Checkpoint("ckpt-70", 70, 100.0)),
            None,
            70,
            1.0,
            None,
        ),
        # a restart from a checkpoint: samples before its tasks started are an earlier run
        (
            Progress(step=120, step_at=60.0, base=Sample(0, 0.0), steps_per_second=2.0),
            Observation(
                200.0, events=_events((100, 150.0), (130, 180.0)), events_read=True, started_at=140.0
            ),
            None,
            130,
            1.0,
            None,
        ),
    ],
)
def test_observe(
    previous: Progress | None,
    seen: Observation,
    total: int | None,
    step: int | None,
    rate: float | None,
    eta: float | None,
) -> None:
    got = observe(previous, seen, total)
    assert got.step == step
    assert got.steps_per_second == rate
    assert got.estimated_completion == eta
    assert Progress.from_json(got.to_json()) == got


def test_observe_keeps_the_checkpoint_and_says_what_was_not_read() -> None:
    before = Progress(checkpoint=Checkpoint("ckpt-3", 3, 10.0))
    got = observe(before, Observation(50.0, problems=("checkpoint.dir ckpt does not exist (yet)",)), 10)
    assert got.checkpoint == Checkpoint("ckpt-3", 3, 10.0)
    assert got.message == "checkpoint.dir ckpt does not exist (yet)"
    assert got.total_steps == 10


@pytest.mark.parametrize(
    ("progress", "started", "expected"),
    [
        (None, 100.0, (None, 100.0)),
        (None, None, (None, None)),
        (Progress(checkpoint=Checkpoint("ckpt-7", 7, 150.0)), 100.0, (7, 150.0)),
        # a checkpoint older than the running tasks was their starting point
        (Progress(checkpoint=Checkpoint("ckpt-7", 7, 50.0)), 100.0, (None, 100.0)),
        (Progress(checkpoint=Checkpoint("ckpt-7", 7, 50.0)), None, (7, 50.0)),
    ],
)
def test_since_checkpoint(
    progress: Progress | None, started: float | None, expected: tuple[int | None, float | None]
) -> None:
    assert since_checkpoint(progress, started) == expected


@pytest.mark.parametrize(
    ("step", "since", "now", "declared", "words"),
    [
        (12000, 1000.0, 1180.0, True, "resumes from the checkpoint at step 12,000, 3 min of work since"),
        (None, 1000.0, 1045.0, True, "no checkpoint: 45 s of work since its tasks started"),
        (None, 0.0, 7500.0, False, "no checkpoint known: 2 h 5 min of work since its tasks started"),
        (None, None, 10.0, True, "no checkpoint yet"),
    ],
)
def test_restart_cost(step: int | None, since: float | None, now: float, declared: bool, words: str) -> None:
    assert restart_cost(step, since, now, declared=declared) == words


def test_progress_in_words_for_status_and_the_page() -> None:
    from tfdeclare.core.run.status import progress_lines

    entry = {
        "step": 1200,
        "stepTime": "2026-12-05T10:00:00Z",
        "stepsPerSecond": 2.0,
        "totalSteps": 10000,
        "estimatedCompletionTime": "2026-12-05T11:13:20Z",
        "checkpoint": {"name": "ckpt-1200", "step": 1200, "time": "2026-12-05T09:58:00Z"},
        "message": "",
    }
    now = 1796464800.0 + 60  # 2026-12-05T10:01:00Z
    assert progress_lines(entry, now) == [
        "step 1,200 of 10,000 (12 %), 60 s ago, 2 steps/s, done in about 72 min",
        "checkpoint ckpt-1200 at step 1,200, saved 3 min ago",
    ]
    empty = {**entry, "step": None, "checkpoint": None, "message": "checkpoint.dir ckpt does not exist (yet)"}
    assert progress_lines(empty, now) == ["no checkpoint yet", "checkpoint.dir ckpt does not exist (yet)"]
    assert progress_lines(None, now) == []


def test_progress_metrics() -> None:
    from tfdeclare.daemon.metrics import Metrics

    metrics = Metrics()
    metrics.clock = lambda: 1000.0
    seen = Progress(
        step=500,
        step_at=990.0,
        steps_per_second=5.0,
        total_steps=1000,
        checkpoint=Checkpoint("ckpt-450", 450, 940.0),
    )
    metrics.set_jobs({"a": "Running"}, Counter(), {}, progress={"a": seen})
    text = metrics.render()
    assert 'tfdeclare_job_progress_step{job="a"} 500.0' in text
    assert 'tfdeclare_job_steps_per_second{job="a"} 5.0' in text
    assert 'tfdeclare_job_checkpoint_step{job="a"} 450.0' in text
    assert 'tfdeclare_job_checkpoint_age_seconds{job="a"} 60.0' in text
    assert 'tfdeclare_job_estimated_seconds_left{job="a"} 90.0' in text


def test_a_change_of_spec_checkpoint_restarts_nothing() -> None:
    from tfdeclare.core.plan.planner import Effect, classify

    for path in (("spec", "checkpoint"), ("spec", "checkpoint", "dir"), ("spec", "checkpoint", "totalSteps")):
        assert classify(path) is Effect.IN_PLACE
    assert classify(("spec", "command", 0)) is Effect.RESTART


def test_the_page_shows_a_jobs_progress() -> None:
    from tfdeclare.daemon.page import render

    job = {
        "name": "gpt",
        "phase": "Running",
        "message": "",
        "restarts": 0,
        "attempt": 0,
        "backend": "local",
        "specHash": "0" * 64,
        "tasks": [],
        "conditions": [],
        "progress": {
            "step": 1200,
            "stepTime": None,
            "stepsPerSecond": 2.0,
            "totalSteps": None,
            "estimatedCompletionTime": None,
            "checkpoint": {"name": "ckpt-1200", "step": 1200, "time": None},
            "message": "",
        },
    }
    page = render([job], [], {}, 0, now=0.0)
    assert "step 1,200, 2 steps/s" in page
    assert "checkpoint ckpt-1200 at step 1,200" in page
