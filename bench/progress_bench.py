"""What reading a job's progress files costs the controller (issue 34): one look
(``shell/progressfiles.py`` and ``core/run/progress.observe``) at a log folder and a checkpoint
folder as a running job leaves them between two looks, and at what a hostile task can write.
There is no target: a look runs every 10 s per running job, inside a pass.

    python -m bench --only progress [--quick]
    python -m bench.progress_bench          (prints the rows)
"""

from __future__ import annotations

import os
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from bench.common import Result, machine
from tfdeclare.core.run import progress
from tfdeclare.core.run.tfevents import event_bytes, frame
from tfdeclare.shell.progressfiles import EventReader, open_folder, read_checkpoint


def _events(first: int, count: int) -> bytes:
    return b"".join(frame(event_bytes(step, 1.0e9 + step)) for step in range(first, first + count))


def _look(
    reader: EventReader, logs: Path, ckpt: Path, previous: progress.Progress | None
) -> progress.Progress:
    """One look, as the controller makes it: both folders opened and read, the progress derived."""
    folder = open_folder(str(ckpt), [str(ckpt.parent)], {})
    try:
        checkpoint = read_checkpoint(folder)
    finally:
        os.close(folder)
    folder = open_folder(str(logs), [str(logs.parent)], {})
    try:
        events = reader.read(folder)
    finally:
        os.close(folder)
    seen = progress.Observation(time.time(), checkpoint, events, (), True)
    return progress.observe(previous, seen, 100_000)


def _timed(runs: int, prepare: Callable[[], None], act: Callable[[], object]) -> list[float]:
    samples = []
    for _ in range(runs):
        prepare()
        started = time.perf_counter()
        act()
        samples.append(time.perf_counter() - started)
    return samples


def main(results: list[Result], quick: bool) -> None:
    runs = 10 if quick else 30
    with tempfile.TemporaryDirectory(prefix="tfdeclare-progress-bench-") as tmp:
        root = Path(tmp)
        logs, ckpt = root / "logs", root / "ckpt"
        (logs / "train").mkdir(parents=True)
        ckpt.mkdir()
        (ckpt / "checkpoint").write_text('model_checkpoint_path: "ckpt-1000"\n')
        log = logs / "train" / "events.out.tfevents.1.host"
        log.write_bytes(_events(0, 1000))
        reader = EventReader()
        _look(reader, logs, ckpt, None)
        results.append(
            Result(
                "progress: a look with nothing new (a running job between two summaries)",
                "-",
                _timed(runs, lambda: None, lambda: _look(reader, logs, ckpt, None)),
                note="1 event file, the checkpoint state file",
            )
        )
        step = [1000]

        def grow() -> None:
            with log.open("ab") as f:
                f.write(_events(step[0], 1000))
            step[0] += 1000

        results.append(
            Result(
                "progress: a look after 1,000 new events (24 KB)",
                "-",
                _timed(runs, grow, lambda: _look(reader, logs, ckpt, None)),
            )
        )
        big = logs / "events.out.tfevents.2.host"
        big.write_bytes(_events(0, 100_000) * 40)  # about 96 MB

        def fresh() -> None:
            reader.cursors.clear()

        results.append(
            Result(
                "progress: a first look at a 96 MB event file (its last 64 KiB) beside a 0.7 MB one",
                "-",
                _timed(runs, fresh, lambda: _look(reader, logs, ckpt, None)),
            )
        )
        big.unlink()
        hostile = logs / "events.out.tfevents.3.host"
        # every 13th byte starts a candidate record boundary: the most checksums a look computes
        hostile.write_bytes((b"\0" * 12 + b"\x09") * ((8 << 20) // 13))

        log.unlink()

        def grown_hostile() -> None:
            fresh()
            with hostile.open("ab") as f:
                f.write(b"\0" * 12 + b"\x09")

        results.append(
            Result(
                "progress: a first look at 8 MiB crafted so that every 13th byte may start a record "
                "(the most checksums a file costs: 4,096)",
                "-",
                _timed(max(3, runs // 3), grown_hostile, lambda: _look(reader, logs, ckpt, None)),
            )
        )


if __name__ == "__main__":
    rows: list[Result] = []
    main(rows, quick=False)
    print(f"Machine: {machine()}. Date: {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}.")
    for row in rows:
        print(row.row())
