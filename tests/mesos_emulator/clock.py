"""Time for the emulator: one injectable clock that every timer goes through.

Owns ``now()`` (monotonic seconds), ``wall()`` (epoch seconds for ``timestamp`` and
``unreachable_time``) and ``call_later``. ``RealClock`` delegates to the asyncio loop;
``ManualClock`` only moves when a test calls ``advance(seconds)``, which makes the
allocation interval, filter expiry, failover timeout, heartbeats, ping timeouts and
update retries deterministic. Real task processes still run in real time.
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
import time
from collections.abc import Callable
from typing import Protocol


class Handle(Protocol):
    def cancel(self) -> None: ...


class Clock(Protocol):
    def now(self) -> float: ...

    def wall(self) -> float: ...

    def call_later(self, delay: float, callback: Callable[[], None]) -> Handle: ...


class RealClock:
    """Wall time, timers on the asyncio loop."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop

    def now(self) -> float:
        return self._loop.time()

    def wall(self) -> float:
        return time.time()

    def call_later(self, delay: float, callback: Callable[[], None]) -> Handle:
        return self._loop.call_later(max(0.0, delay), callback)


class _ManualHandle:
    __slots__ = ("cancelled",)

    def __init__(self) -> None:
        self.cancelled = False

    def cancel(self) -> None:
        self.cancelled = True


class ManualClock:
    """Virtual time: timers fire only from ``advance``, which must run on the loop thread."""

    def __init__(self, start_wall: float | None = None) -> None:
        self._now = 0.0
        self._wall0 = time.time() if start_wall is None else start_wall
        self._heap: list[tuple[float, int, _ManualHandle, Callable[[], None]]] = []
        self._seq = itertools.count()

    def now(self) -> float:
        return self._now

    def wall(self) -> float:
        return self._wall0 + self._now

    def call_later(self, delay: float, callback: Callable[[], None]) -> Handle:
        handle = _ManualHandle()
        heapq.heappush(self._heap, (self._now + max(0.0, delay), next(self._seq), handle, callback))
        return handle

    def advance(self, seconds: float) -> None:
        target = self._now + max(0.0, seconds)
        while self._heap and self._heap[0][0] <= target:
            when, _, handle, callback = heapq.heappop(self._heap)
            self._now = max(self._now, when)
            if not handle.cancelled:
                callback()
        self._now = target
