"""The generic loop (``tfdeclare.backends.mesos.loop``) on its real thread: messages in order,
waiters re-checked only after a batch that changed something (or on a tick), what a handler's
``Effect`` asks for, and errors handed to the caller that waits."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from concurrent.futures import Future
from dataclasses import dataclass, field

import pytest

from tfdeclare.backends.base import BackendError
from tfdeclare.backends.mesos.loop import Effect, Loop


@dataclass
class Owner:
    """What a loop's owner keeps: the messages handled, and counts of the loop's calls."""

    seen: list[str] = field(default_factory=list)
    upkeeps: int = 0
    batches: int = 0
    stopped: threading.Event = field(default_factory=threading.Event)
    thread: list[str] = field(default_factory=list)

    def handle(self, message: str) -> Effect:
        self.thread.append(threading.current_thread().name)
        if message == "boom":
            raise ValueError("a handler failed")
        self.seen.append(message)
        return {"quiet": Effect.NONE, "tick": Effect.TICK}.get(message, Effect.CHANGED)

    def upkeep(self) -> None:
        self.upkeeps += 1

    def after_batch(self) -> None:
        self.batches += 1


@pytest.fixture
def made() -> Iterator[tuple[Loop[str], Owner]]:
    owner = Owner()
    loop: Loop[str] = Loop(
        "test-loop",
        owner.handle,
        before_start=lambda: None,
        upkeep=owner.upkeep,
        after_batch=owner.after_batch,
        stopped=owner.stopped.set,
        tick_s=3600.0,  # no tick comes by itself during a test: only Effect.TICK asks for one
        clock=lambda: 0.0,
    )
    yield loop, owner
    loop.stop(timeout_s=5)


def test_messages_are_handled_in_order_on_the_loop_thread(made: tuple[Loop[str], Owner]) -> None:
    loop, owner = made
    for n in range(100):
        loop.post(f"m{n}")
    loop.send("last")
    assert owner.seen == [*(f"m{n}" for n in range(100)), "last"]
    assert set(owner.thread) == {"test-loop"}
    assert loop.ask(lambda: threading.current_thread().name) == "test-loop"


def test_a_waiter_is_rechecked_only_after_a_change(made: tuple[Loop[str], Owner]) -> None:
    loop, owner = made
    checks: list[list[str]] = []
    result: list[str] = []
    started = threading.Event()

    def start(future: Future[str]) -> Effect:
        started.set()

        def attempt(now: float) -> bool:
            checks.append(list(owner.seen))
            if "ready" not in owner.seen:
                return False
            future.set_result("done")
            return True

        loop.keep_trying(future, attempt)
        return Effect.NONE

    waiting = threading.Thread(target=lambda: result.append(loop.request(start)))
    waiting.start()
    assert started.wait(5)  # the request is in
    loop.send("quiet")  # changes nothing a waiter waits for
    checked = loop.ask(lambda: len(checks))
    loop.send("quiet")
    assert loop.ask(lambda: len(checks)) == checked  # a quiet message: no re-check
    loop.send("ready")  # a change: re-checked after the batch
    waiting.join(timeout=5)
    assert result == ["done"]
    assert checks[-1][-1] == "ready"


def test_an_effect_tick_runs_the_upkeep_now(made: tuple[Loop[str], Owner]) -> None:
    loop, owner = made
    loop.send("x")  # the first batch ticks (the loop starts with a tick due)
    before = loop.ask(lambda: owner.upkeeps)
    loop.send("changed")
    assert loop.ask(lambda: owner.upkeeps) == before
    loop.send("tick")
    assert loop.ask(lambda: owner.upkeeps) == before + 1
    assert owner.batches >= 3


def test_errors_reach_the_caller_and_the_loop_goes_on(made: tuple[Loop[str], Owner]) -> None:
    loop, owner = made
    with pytest.raises(ValueError, match="a handler failed"):
        loop.send("boom")
    loop.post("boom")  # posted: logged, nobody waits for it
    with pytest.raises(ZeroDivisionError):
        loop.ask(lambda: 1 // 0)
    loop.send("after")
    assert owner.seen == ["after"]


def test_stop_fails_open_waiters_and_refuses_requests(made: tuple[Loop[str], Owner]) -> None:
    loop, owner = made
    errors: list[BaseException] = []
    started = threading.Event()

    def never(future: Future[None]) -> Effect:
        started.set()
        loop.keep_trying(future, lambda now: False)
        return Effect.NONE

    def wait() -> None:
        try:
            loop.request(never)
        except BackendError as err:
            errors.append(err)

    waiting = threading.Thread(target=wait)
    waiting.start()
    assert started.wait(5)  # the request is in, its waiter left
    loop.stop(timeout_s=5)
    waiting.join(timeout=5)
    assert [str(e) for e in errors] == ["the Mesos backend was closed"]
    assert owner.stopped.is_set()
    with pytest.raises(BackendError, match="closed"):
        loop.ask(lambda: None)


def test_the_loop_cannot_wait_for_itself(made: tuple[Loop[str], Owner]) -> None:
    loop, _ = made
    with pytest.raises(RuntimeError, match="cannot wait for itself"):
        loop.ask(lambda: loop.ask(lambda: None))
