"""Reading a job's progress files (``shell/progressfiles.py``) on real files: links are not
followed out of the allowed folders, FIFOs and odd files are skipped, event files are read
incrementally and within bounds whatever a task writes there."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tfdeclare.core.run.tfevents import event_bytes, frame
from tfdeclare.shell import progressfiles
from tfdeclare.shell.progressfiles import EventReader, Refused, open_folder, read_checkpoint


def _events(path: Path, *steps: int, mode: str = "ab") -> None:
    with path.open(mode) as f:
        for step in steps:
            f.write(frame(event_bytes(step, 1000.0 + step)))


def _read(reader: EventReader, folder: Path) -> list[int | None]:
    fd = open_folder(str(folder), [str(folder)], {})
    try:
        return [e.step for e in reader.read(fd)]
    finally:
        os.close(fd)


def test_checkpoint_state_file_and_its_time(tmp_path: Path) -> None:
    ckpt = tmp_path / "job" / "chief-0" / "ckpt"
    ckpt.mkdir(parents=True)
    (ckpt / "checkpoint").write_text(
        'model_checkpoint_path: "ckpt-12"\nall_model_checkpoint_paths: "ckpt-12"\n'
    )
    os.utime(ckpt / "checkpoint", (1000.0, 1234.5))
    fd = open_folder(str(ckpt), [str(tmp_path / "job")], {})
    try:
        seen = read_checkpoint(fd)
    finally:
        os.close(fd)
    assert seen is not None
    assert (seen.name, seen.step, seen.at) == ("ckpt-12", 12, 1234.5)


def test_a_link_out_of_the_allowed_folders_is_not_followed(tmp_path: Path) -> None:
    job = tmp_path / "job" / "chief-0"
    job.mkdir(parents=True)
    outside = tmp_path / "secret"
    outside.mkdir()
    (outside / "checkpoint").write_text('model_checkpoint_path: "ckpt-1"\n')
    (job / "ckpt").symlink_to(outside)
    with pytest.raises(Refused, match="outside the folders"):
        open_folder(str(job / "ckpt"), [str(tmp_path / "job")], {})
    # the state file itself a link: not read even inside
    inside = job / "real"
    inside.mkdir()
    (inside / "checkpoint").symlink_to(outside / "checkpoint")
    fd = open_folder(str(inside), [str(tmp_path / "job")], {})
    try:
        assert read_checkpoint(fd) is None
    finally:
        os.close(fd)


def test_a_link_into_the_spec_folder_is_followed_and_reserved_folders_are_not(tmp_path: Path) -> None:
    spec_folder = tmp_path / "specs"
    (spec_folder / "ckpt").mkdir(parents=True)
    (spec_folder / "ckpt" / "checkpoint").write_text('model_checkpoint_path: "ckpt-3"\n')
    task = tmp_path / "job" / "chief-0"
    task.mkdir(parents=True)
    (task / "ckpt").symlink_to(spec_folder / "ckpt")
    fd = open_folder(str(task / "ckpt"), [str(tmp_path / "job"), str(spec_folder)], {})
    try:
        seen = read_checkpoint(fd)
        assert seen is not None and seen.step == 3
    finally:
        os.close(fd)
    with pytest.raises(Refused, match="tfdeclare's own folder"):
        open_folder(str(task / "ckpt"), [str(tmp_path)], {str(spec_folder): "tfdeclare's own folder"})
    with pytest.raises(Refused, match="does not exist"):
        open_folder(str(task / "nothing"), [str(tmp_path)], {})


def test_a_fifo_named_like_the_state_file_does_not_block(tmp_path: Path) -> None:
    os.mkfifo(tmp_path / "checkpoint")
    os.mkfifo(tmp_path / "events.out.tfevents.1.host")
    fd = open_folder(str(tmp_path), [str(tmp_path)], {})
    try:
        assert read_checkpoint(fd) is None
        assert EventReader().read(fd) == []
    finally:
        os.close(fd)


def test_event_files_are_read_incrementally(tmp_path: Path) -> None:
    log = tmp_path / "logs"
    (log / "train").mkdir(parents=True)
    first = log / "train" / "events.out.tfevents.1.host"
    _events(first, 1, 2, 3)
    (log / "notes.txt").write_text("not an event file")
    reader = EventReader()
    assert _read(reader, log) == [1, 2, 3]
    assert _read(reader, log) == []  # nothing new
    data = frame(event_bytes(4, 1004.0))
    with first.open("ab") as f:
        f.write(data[:7])  # a record half written
    assert _read(reader, log) == []
    with first.open("ab") as f:
        f.write(data[7:])
    _events(first, 5)
    assert _read(reader, log) == [4, 5]
    _events(log / "events.out.tfevents.2.host", 9)
    assert _read(reader, log) == [9]


def test_a_huge_or_hostile_event_file_costs_a_bounded_read(tmp_path: Path) -> None:
    log = tmp_path / "logs"
    log.mkdir()
    big = log / "events.out.tfevents.1.host"
    _events(big, *range(100_000), mode="wb")  # about 2.4 MB
    reader = EventReader()
    steps = _read(reader, log)
    assert steps and steps[-1] == 99_999
    assert len(steps) * 24 <= progressfiles.TAIL + 24  # only the tail was read
    garbage = log / "events.out.tfevents.2.host"
    garbage.write_bytes(os.urandom(3 * progressfiles.MAX_READ))
    _events(big, 100_000)
    assert 100_000 in _read(reader, log)
    # garbage between records: reading goes on after the next boundary
    with big.open("ab") as f:
        f.write(b"\x07" * 50)
    _events(big, 100_001, 100_002)
    later = _read(reader, log) + _read(reader, log)
    assert 100_002 in later


def test_the_job_folders_inside_the_state_folder_are_read_and_the_rest_of_it_is_not(tmp_path: Path) -> None:
    state = tmp_path / ".tfdeclare"
    task = state / "local" / "work" / "a" / "chief-0"
    (task / "ckpt").mkdir(parents=True)
    (task / "ckpt" / "checkpoint").write_text('model_checkpoint_path: "ckpt-5"\n')
    (state / "jobs").mkdir()
    reserved = {str(state): "tfdeclare's own folder"}
    job_folder = str(task.parent)
    fd = open_folder(str(task / "ckpt"), [job_folder], reserved)
    os.close(fd)
    (task / "records").symlink_to(state / "jobs")  # a task's link to the job records
    with pytest.raises(Refused, match="outside the folders"):
        open_folder(str(task / "records"), [job_folder], reserved)
    with pytest.raises(Refused, match="lies in tfdeclare's own folder"):
        open_folder(str(task / "records"), [job_folder, str(tmp_path)], reserved)
