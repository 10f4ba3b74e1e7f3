"""A generic event loop: one thread owning some state, typed messages in, waiters out.

This module owns ``Loop``, which knows nothing of Mesos. Other threads talk to the state it
owns only through it: ``post`` hands it a message (a typed value, handled in order by the
owner's ``handle``) and does not wait; ``send`` waits until the message was handled;
``run`` runs a function that changes the state on the loop and waits for it; ``ask`` runs one
that only reads it and returns its result; ``request`` runs ``start(future)``
on the loop and waits for the future, which ``start`` resolves at once or leaves to a
*waiter* (``keep_trying``) re-checked after each batch of messages that changed something
and on every tick.

Each handler says what it changed (``Effect``): nothing a waiter waits for, something
(waiters are re-checked after the batch), or something that wants the periodic work
(``upkeep``) now rather than at the next tick. Messages are taken in batches of up to
``MESSAGE_BATCH``; after each batch the owner's ``after_batch`` runs (e.g. sending what the
batch decided), then the waiters. Exceptions of a handler are logged (the loop goes on);
exceptions of a request or a waiter reach the caller that waits for it.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass
from enum import IntEnum
from typing import Any, Generic, TypeVar

from tfdeclare.backends.base import BackendError
from tfdeclare.core.errors import ErrorCode

log = logging.getLogger("tfdeclare.mesos")

T = TypeVar("T")
M = TypeVar("M")

MESSAGE_BATCH = 1024  # messages handled before the after-batch work (fsync, acks, waiters)

Waiter = Callable[[float], bool]  # (now) -> done: it resolved its future


class Effect(IntEnum):
    """What handling a message changed (the largest of a batch counts)."""

    NONE = 0  # nothing a waiter waits for
    CHANGED = 1  # re-check the waiters after this batch
    TICK = 2  # and run the periodic work now


@dataclass(frozen=True, slots=True)
class _Run:
    """A caller's function for the loop (``send``, ``ask``, ``request``)."""

    start: Callable[[], Effect]


class _Stop:
    """The last message: the loop stops after what came before it."""


class Loop(Generic[M]):
    """See the module docstring. ``handle`` handles one message; ``upkeep`` is the periodic
    work; ``after_batch`` runs after each batch; ``before_start`` before its thread starts,
    ``stopped`` once it ends (e.g. to start and stop helper threads)."""

    def __init__(
        self,
        name: str,
        handle: Callable[[M], Effect],
        *,
        before_start: Callable[[], None],
        upkeep: Callable[[], None],
        after_batch: Callable[[], None],
        stopped: Callable[[], None],
        tick_s: float,
        clock: Callable[[], float],
    ) -> None:
        self._name = name
        self._handle, self._before_start = handle, before_start
        self._upkeep, self._after_batch, self._stopped = upkeep, after_batch, stopped
        self._tick_s = tick_s
        self.clock = clock
        self._inbox: queue.SimpleQueue[M | _Run | _Stop] = queue.SimpleQueue()
        self._waiters: list[tuple[Future[Any], Waiter]] = []
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)  # started on first use
        self._start_lock = threading.Lock()
        self.closed = False  # no request is taken any more (set by ``stop``)

    # ---- from any thread -----------------------------------------------------------------------

    @property
    def started(self) -> bool:
        return self._thread.ident is not None

    def start(self) -> None:
        with self._start_lock:
            if not self.started:
                self._before_start()
                self._thread.start()

    def post(self, message: M) -> None:
        """Handle ``message`` on the loop, after every message posted before it; do not wait."""
        self.start()
        self._inbox.put(message)

    def send(self, message: M) -> None:
        """``post`` and wait until it was handled (its exception reaches the caller)."""

        def start(future: Future[None]) -> Effect:
            effect = self._handle(message)
            future.set_result(None)
            return effect

        self.request(start)

    def run(self, fn: Callable[[], Effect]) -> None:
        """``fn()`` on the loop, waiting for it; it says what it changed."""

        def start(future: Future[None]) -> Effect:
            effect = fn()
            future.set_result(None)
            return effect

        self.request(start)

    def ask(self, fn: Callable[[], T]) -> T:
        """``fn()`` on the loop (it changes nothing a waiter waits for), its result here."""

        def start(future: Future[T]) -> Effect:
            future.set_result(fn())
            return Effect.NONE

        return self.request(start)

    def request(self, start: Callable[[Future[T]], Effect]) -> T:
        """Run ``start(future)`` on the loop and wait for the future: ``start`` resolves it at
        once or leaves a waiter that resolves it later (``keep_trying``), and says what it
        changed. Exceptions reach the caller."""
        if self.closed:
            raise BackendError("the Mesos backend is closed", code=ErrorCode.BACKEND_CLOSED)
        if threading.current_thread() is self._thread:
            raise RuntimeError("the loop cannot wait for itself")  # e.g. a watcher calling back
        future: Future[T] = Future()

        def run() -> Effect:
            try:
                return start(future)
            except BaseException as err:  # handed to the caller
                if not future.done():
                    future.set_exception(err)
                return Effect.NONE

        self.start()
        self._inbox.put(_Run(run))
        return future.result()

    def stop(self, timeout_s: float) -> None:
        """Stop after what is queued (waiters still open fail), and wait for the thread."""
        if self.started:
            self._inbox.put(_Stop())
            self._thread.join(timeout=timeout_s)
        self.closed = True

    # ---- on the loop ---------------------------------------------------------------------------

    def keep_trying(self, future: Future[T], attempt: Waiter) -> None:
        """``attempt(now)`` now and, until it says done (having resolved ``future``), after
        every batch of messages that changed something and on every tick. An exception
        resolves the future with it."""

        def waiter(now: float) -> bool:
            try:
                return attempt(now)
            except BaseException as err:  # handed to the caller
                future.set_exception(err)
                return True

        if not waiter(self.clock()):
            self._waiters.append((future, waiter))

    def _run(self) -> None:
        next_tick = 0.0
        stopping = False
        while not stopping:
            batch: list[M | _Run | _Stop] = []
            try:
                batch.append(self._inbox.get(timeout=max(0.0, next_tick - time.monotonic())))
            except queue.Empty:
                pass
            else:
                while len(batch) < MESSAGE_BATCH:
                    try:
                        batch.append(self._inbox.get_nowait())
                    except queue.Empty:
                        break
            effect = Effect.NONE
            for message in batch:
                if isinstance(message, _Stop):
                    stopping = True
                    continue
                try:
                    handled = message.start() if isinstance(message, _Run) else self._handle(message)
                    effect = max(effect, handled)
                except Exception:
                    log.exception("%s: a message failed (continuing)", self._name)
            ticked = effect is Effect.TICK or time.monotonic() >= next_tick
            if ticked:
                next_tick = time.monotonic() + self._tick_s
                try:
                    self._upkeep()
                except Exception:
                    log.exception("%s: upkeep failed (continuing)", self._name)
            self._after_batch()
            if self._waiters and (effect or ticked):
                now = self.clock()
                self._waiters = [(future, waiter) for future, waiter in self._waiters if not waiter(now)]
        for future, _ in self._waiters:
            future.set_exception(BackendError("the Mesos backend was closed", code=ErrorCode.BACKEND_CLOSED))
        self._stopped()
