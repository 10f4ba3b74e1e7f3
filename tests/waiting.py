"""The tests' one way to wait for something a real process, thread or server does: poll a
predicate until it holds, or fail saying what was awaited and what was last seen.

A test waits for a condition, never for a fixed time: on a loaded machine a fixed time is too
short, and on an idle one it is wasted. The timeouts here are generous on purpose (they only
bound a test that would otherwise hang); speed is measured in bench/, not here.
"""

from __future__ import annotations

import fnmatch
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

T = TypeVar("T")


def wait_until(
    predicate: Callable[[], T],
    timeout: float = 30.0,
    *,
    what: str | Callable[[], str] | None = None,
    interval: float = 0.05,
    stop: Callable[[], str | None] | None = None,
    pause: Callable[[], object] | None = None,
) -> T:
    """``predicate()``'s first truthy value, asked every ``interval`` seconds (or after each
    ``pause()``: until something may have changed, such as an event or a virtual clock's step).
    After ``timeout`` seconds it raises AssertionError naming ``what`` (a text, or a function
    that makes one at that moment; by default the predicate's name) and the
    last value seen. ``stop()`` (optional) returns a reason to give up at once (a process that
    ended early)."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        reason = stop() if stop is not None else None
        if reason is not None:
            raise AssertionError(
                f"gave up waiting for {_name(predicate, what)}: {reason}; last value: {value!r}"
            )
        if time.monotonic() > deadline:
            raise AssertionError(
                f"timed out after {timeout} s waiting for {_name(predicate, what)}; last value: {value!r}"
            )
        if pause is not None:
            pause()
        else:
            time.sleep(interval)


def _name(predicate: Callable[[], object], what: str | Callable[[], str] | None) -> str:
    if what is not None:
        return what if isinstance(what, str) else what()
    code = getattr(predicate, "__code__", None)
    name = getattr(predicate, "__qualname__", repr(predicate))
    return (
        f"{name} ({code.co_filename.rsplit('/', 1)[-1]}:{code.co_firstlineno})" if code is not None else name
    )


def live_files(root: Path, pattern: str, *, under: str | None = None) -> list[Path]:
    """The files named ``pattern`` (a glob) below ``root`` (only inside a folder named
    ``under``, when given), in a tree a running process is changing: a folder removed or
    renamed while it is walked (a temporary one) is skipped, where ``Path.rglob`` raises."""
    found: list[Path] = []
    for folder, _dirs, names in os.walk(root):  # errors (a folder gone) are ignored by default
        parts = Path(folder).relative_to(root).parts
        if under is not None and not any(fnmatch.fnmatchcase(part, under) for part in parts):
            continue
        found.extend(Path(folder, name) for name in names if fnmatch.fnmatchcase(name, pattern))
    return found
