"""When a local task's log lines were written: ``<task-id>.log.times`` beside its log.

The task writes its log itself (its stdout is the file), so no line passes through us. The
process supervisor samples the log's size once a second while it grows, and once more when the
task has ended, appending ``SIZE TIME`` (bytes, Unix seconds) to this file: a line that ends at
byte E was written after the sample before the first with ``SIZE >= E`` and by that sample's
time, which is the time ``logs --timestamps`` and ``--since`` give it (at most a second late).
A task started by a release without the file, or by another runtime (a Docker container's log
is copied out by the launcher), has no times: those options say so rather than guess.
Read leniently: a torn last line (the supervisor killed mid-append) is ignored; a times file
that is not a regular file (a link, a FIFO), or is larger than ``MAX_TIMES_BYTES``, is a
``BackendError`` naming it (never read through a link, ``files.read_regular``).
"""

from __future__ import annotations

import os
from pathlib import Path

from tfdeclare.backends.errors import BackendError
from tfdeclare.core.errors import ErrorCode
from tfdeclare.files import read_regular

SAMPLE_S = 1.0
MAX_TIMES_BYTES = 64 << 20  # a day of a growing log is under 3 MB


def times_path(log_path: Path) -> Path:
    return log_path.parent / f"{log_path.name}.times"


class Sampler:
    """The supervisor's side: ``sample()`` on each poll appends a line when ``SAMPLE_S`` has
    passed and the log has grown (``final``: whatever the time, once the task has ended)."""

    def __init__(self, log_path: Path) -> None:
        self.log_path = log_path
        self.path = times_path(log_path)
        self.size = -1
        self.at = 0.0

    def sample(self, now: float, monotonic: float, *, final: bool = False) -> None:
        if not final and monotonic - self.at < SAMPLE_S:
            return
        self.at = monotonic
        try:
            size = os.stat(self.log_path).st_size
        except OSError:
            return
        if size == self.size:
            return
        self.size = size
        try:
            fd = os.open(
                self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644
            )
        except OSError:
            return  # the times are a nicety: never the task's end
        try:
            os.write(fd, f"{size} {now:.3f}\n".encode())
        except OSError:
            pass
        finally:
            os.close(fd)


def read_times(log_path: Path) -> list[tuple[int, float]] | None:
    """The samples of a log, in order; None when it has no times file. A ``BackendError``
    naming it when it is not a regular file of ours (a link, a FIFO, too large)."""
    path = times_path(log_path)
    try:
        data = read_regular(path, MAX_TIMES_BYTES)
    except FileNotFoundError:
        return None
    except OSError as err:
        raise BackendError(
            f"cannot read the log's line times {path}: {err.strerror or err}", code=ErrorCode.LOG_UNAVAILABLE
        ) from None
    samples: list[tuple[int, float]] = []
    for line in data.split(b"\n"):
        size, _, at = line.partition(b" ")
        try:
            sample = (int(size), float(at))
        except ValueError:
            continue  # a torn or damaged line
        if not samples or sample[0] >= samples[-1][0]:
            samples.append(sample)
    return samples
